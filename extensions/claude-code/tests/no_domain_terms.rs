#![allow(clippy::unwrap_used)]
//! The executor names no code host, issue or change request: what a state
//! means for a kind of Work is its playbook's to say. This scans every source
//! file of the crate (with a negative control showing the scan finds a term).

use std::path::Path;

/// The terms kept out, with whether they match case-insensitively.
const TERMS: &[(&str, bool)] = &[
    ("github", true),
    ("pull request", true),
    ("issue", true),
    (" PR ", false),
];

/// The terms `text` contains.
fn terms_in(text: &str) -> Vec<&'static str> {
    let lower = text.to_lowercase();
    TERMS
        .iter()
        .filter(|(term, nocase)| {
            if *nocase {
                lower.contains(&term.to_lowercase())
            } else {
                text.contains(term)
            }
        })
        .map(|(t, _)| *t)
        .collect()
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_domain_terms_in_the_executor_sources() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() >= 8, "{files:?}");
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for t in terms_in(&text) {
            found.push(format!("{}: {t}", f.display()));
        }
    }
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("open-conduit-extension.json"),
    )
    .unwrap();
    for t in terms_in(&manifest) {
        found.push(format!("open-conduit-extension.json: {t}"));
    }
    assert!(found.is_empty(), "domain terms in the executor: {found:?}");
}

#[test]
fn the_scan_finds_each_term() {
    assert_eq!(terms_in("Open a GitHub Issue"), ["github", "issue"]);
    assert_eq!(terms_in("after the Pull Request merged"), ["pull request"]);
    assert_eq!(terms_in("push the PR now"), [" PR "]);
    assert!(terms_in("a prompt for PRs? no: spring, express").is_empty());
}
