#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use extrunner::conflicts::{check_conflicts, describe, Claimant, HostNames};
use extrunner::discovery::{discover, Origin, Package, ReportKind};
use protocol::manifest::{parse_manifest, MANIFEST_FILE};
use serde_json::{json, Value};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "oc-extrunner-discovery-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A minimal valid manifest for `name`, run on the host's executable.
fn manifest(name: &str) -> Value {
    json!({
        "protocol": [1],
        "name": name,
        "version": "1.0.0",
        "command": ["open-conduit", "extension-run", name],
    })
}

/// A manifest declaring a family, an operation and an executor of the given names.
fn manifest_declaring(name: &str, family: &str, operation: &str, executor: &str) -> Value {
    let mut m = manifest(name);
    m["provides"] = json!({
        "families": [{"name": family, "re_derivable": true}],
        "operations": [{"name": operation, "summary": "does a thing", "input": {"type": "object"}}],
        "executors": [{"name": executor}],
    });
    m
}

/// Writes `root/dir/open-conduit-extension.json`.
fn write_package(root: &Path, dir: &str, manifest: &Value) -> PathBuf {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join(MANIFEST_FILE),
        serde_json::to_vec_pretty(manifest).unwrap(),
    )
    .unwrap();
    d
}

fn package(name: &str, dir: &Path, m: &Value) -> Package {
    Package {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        origin: Origin::Installed,
        manifest: parse_manifest(&serde_json::to_vec(m).unwrap()).unwrap(),
        manifest_json: m.clone(),
    }
}

fn names(d: &extrunner::discovery::Discovery) -> Vec<(&str, Origin)> {
    d.packages
        .iter()
        .map(|p| (p.name.as_str(), p.origin))
        .collect()
}

#[test]
fn installed_and_bundled_are_found_sorted_by_name() {
    let tmp = TempDir::new("found");
    let installed = tmp.join("etc");
    let bundled = tmp.join("usr");
    write_package(&installed, "zeta", &manifest("zeta"));
    write_package(&installed, "alpha", &manifest("alpha"));
    write_package(&bundled, "mid", &manifest("mid"));
    // A package with a real command inside its directory.
    let mut m = manifest("tool");
    m["command"] = json!(["bin/tool", "serve"]);
    let dir = write_package(&bundled, "tool", &m);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join("bin/tool"), "#!/bin/sh\n").unwrap();
    // A stray file and a hidden staging directory are not packages.
    std::fs::write(installed.join("README"), "not a package").unwrap();
    write_package(&installed, ".staging", &manifest("staging"));

    let d = discover(&installed, Some(&bundled));
    assert!(d.reports.is_empty(), "{:?}", d.reports);
    assert_eq!(
        names(&d),
        vec![
            ("alpha", Origin::Installed),
            ("mid", Origin::Bundled),
            ("tool", Origin::Bundled),
            ("zeta", Origin::Installed),
        ]
    );
    let alpha = d.package("alpha").unwrap();
    assert_eq!(alpha.dir, installed.join("alpha"));
    assert_eq!(alpha.manifest.name, "alpha");
    assert_eq!(alpha.manifest_json, manifest("alpha"));
    assert_eq!(d.package("tool").unwrap().manifest_json, m);
}

#[test]
fn installed_replaces_bundled_of_the_same_name() {
    let tmp = TempDir::new("replace");
    let installed = tmp.join("etc");
    let bundled = tmp.join("usr");
    let mut newer = manifest("slack");
    newer["version"] = json!("2.0.0");
    write_package(&installed, "slack", &newer);
    write_package(&bundled, "slack", &manifest("slack"));

    let d = discover(&installed, Some(&bundled));
    assert_eq!(names(&d), vec![("slack", Origin::Installed)]);
    assert_eq!(d.packages[0].manifest.version, "2.0.0");
    assert_eq!(d.reports.len(), 1, "{:?}", d.reports);
    let r = &d.reports[0];
    assert_eq!(r.origin, Origin::Bundled);
    assert_eq!(r.dir, bundled.join("slack"));
    assert_eq!(
        r.kind,
        ReportKind::ShadowedBundled {
            installed_refused: false
        }
    );
}

#[test]
fn a_refused_installed_package_still_shadows_the_bundled_one() {
    let tmp = TempDir::new("shadow");
    let installed = tmp.join("etc");
    let bundled = tmp.join("usr");
    // A release that needs a newer Open Conduit: an unknown field.
    let mut newer = manifest("github");
    newer["future_field"] = json!(true);
    write_package(&installed, "github", &newer);
    write_package(&bundled, "github", &manifest("github"));

    let d = discover(&installed, Some(&bundled));
    assert!(d.packages.is_empty(), "{:?}", names(&d));
    assert_eq!(d.reports.len(), 2, "{:?}", d.reports);
    // Installed first, then the bundled one it shadows.
    let refused = &d.reports[0];
    assert_eq!(refused.origin, Origin::Installed);
    match &refused.kind {
        ReportKind::Invalid { needs_newer, .. } => assert!(needs_newer),
        other => panic!("{other:?}"),
    }
    let shadowed = &d.reports[1];
    assert_eq!(shadowed.origin, Origin::Bundled);
    assert_eq!(
        shadowed.kind,
        ReportKind::ShadowedBundled {
            installed_refused: true
        }
    );
    assert!(shadowed.message.contains("refused"), "{}", shadowed.message);

    // An installed directory without a manifest shadows too.
    std::fs::remove_file(installed.join("github").join(MANIFEST_FILE)).unwrap();
    let d = discover(&installed, Some(&bundled));
    assert!(d.packages.is_empty());
    assert_eq!(d.reports[0].kind, ReportKind::NoManifest);
    assert_eq!(
        d.reports[1].kind,
        ReportKind::ShadowedBundled {
            installed_refused: true
        }
    );

    // Removing the installed copy brings the bundled one back.
    std::fs::remove_dir_all(installed.join("github")).unwrap();
    let d = discover(&installed, Some(&bundled));
    assert_eq!(names(&d), vec![("github", Origin::Bundled)]);
    assert!(d.reports.is_empty());
}

#[test]
fn an_invalid_manifest_is_reported_with_its_rule_and_skipped() {
    let tmp = TempDir::new("invalid");
    let installed = tmp.join("etc");
    let mut bad = manifest("notes");
    bad["protocol"] = json!([999]);
    write_package(&installed, "notes", &bad);
    write_package(&installed, "good", &manifest("good"));
    // Not JSON at all.
    let broken = installed.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join(MANIFEST_FILE), "{not json").unwrap();

    let d = discover(&installed, None);
    assert_eq!(names(&d), vec![("good", Origin::Installed)]);
    assert_eq!(d.reports.len(), 2, "{:?}", d.reports);
    let broken_report = &d.reports[0];
    assert_eq!(broken_report.name, "broken");
    match &broken_report.kind {
        ReportKind::Invalid { rule, error, .. } => {
            assert_eq!(*rule, None);
            assert!(error.contains("malformed"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    let notes = &d.reports[1];
    assert_eq!(notes.name, "notes");
    assert_eq!(notes.dir, installed.join("notes"));
    assert_eq!(notes.origin, Origin::Installed);
    match &notes.kind {
        ReportKind::Invalid {
            rule, needs_newer, ..
        } => {
            assert_eq!(*rule, Some("protocol_unsupported"));
            assert!(!needs_newer);
        }
        other => panic!("{other:?}"),
    }
    assert!(notes.message.contains("notes"), "{}", notes.message);
}

#[test]
fn a_misnamed_directory_is_reported() {
    let tmp = TempDir::new("misnamed");
    let bundled = tmp.join("usr");
    write_package(&bundled, "jira", &manifest("linear"));

    let d = discover(&tmp.join("missing"), Some(&bundled));
    assert!(d.packages.is_empty());
    assert_eq!(d.reports.len(), 1);
    let r = &d.reports[0];
    assert_eq!(r.name, "jira");
    assert_eq!(r.origin, Origin::Bundled);
    match &r.kind {
        ReportKind::Invalid { rule, .. } => assert_eq!(*rule, Some("directory_name")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_directory_without_a_manifest_is_reported() {
    let tmp = TempDir::new("nomanifest");
    let installed = tmp.join("etc");
    std::fs::create_dir_all(installed.join("empty")).unwrap();

    let d = discover(&installed, None);
    assert!(d.packages.is_empty());
    assert_eq!(d.reports.len(), 1);
    assert_eq!(d.reports[0].kind, ReportKind::NoManifest);
    assert_eq!(d.reports[0].dir, installed.join("empty"));
}

#[test]
fn missing_roots_mean_no_packages() {
    let tmp = TempDir::new("missing");
    let d = discover(&tmp.join("nope"), Some(&tmp.join("nope-either")));
    assert!(d.packages.is_empty());
    assert!(d.reports.is_empty());
    let d = discover(&tmp.join("nope"), None);
    assert!(d.packages.is_empty());
    assert!(d.reports.is_empty());
    // An empty root is no packages either.
    let d = discover(tmp.path(), None);
    assert!(d.packages.is_empty());
    assert!(d.reports.is_empty());
}

#[test]
fn a_clean_set_is_admitted() {
    let tmp = TempDir::new("clean");
    let installed = tmp.join("etc");
    write_package(
        &installed,
        "notes",
        &manifest_declaring("notes", "notes.entry", "notes.read", "notes"),
    );
    write_package(
        &installed,
        "runner",
        &manifest_declaring("runner", "runner.log", "runner.tail", "runner"),
    );
    let d = discover(&installed, None);
    assert_eq!(d.packages.len(), 2, "{:?}", d.reports);
    check_conflicts(&d.packages, &HostNames::default()).unwrap();
    check_conflicts(&[], &HostNames::default()).unwrap();
}

#[test]
fn two_packages_declaring_the_same_names_are_both_refused_with_every_conflict() {
    let tmp = TempDir::new("same");
    let installed = tmp.join("etc");
    // `git-lfs` is under both `git` and `git-lfs`, so each may declare it.
    write_package(
        &installed,
        "git",
        &manifest_declaring("git", "git-lfs", "git-lfs", "git-lfs"),
    );
    write_package(
        &installed,
        "git-lfs",
        &manifest_declaring("git-lfs", "git-lfs", "git-lfs", "git-lfs"),
    );
    write_package(&installed, "other", &manifest("other"));
    let d = discover(&installed, None);
    assert_eq!(d.packages.len(), 3, "{:?}", d.reports);

    let conflicts = check_conflicts(&d.packages, &HostNames::default()).unwrap_err();
    let kinds: Vec<(&str, &str)> = conflicts
        .iter()
        .map(|c| (c.kind.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("executors", "git-lfs"),
            ("families", "git-lfs"),
            ("operations", "git-lfs"),
        ],
        "{}",
        describe(&conflicts)
    );
    for c in &conflicts {
        assert_eq!(
            c.first,
            Claimant::Package {
                name: "git".into(),
                dir: installed.join("git")
            }
        );
        assert_eq!(
            c.second,
            Claimant::Package {
                name: "git-lfs".into(),
                dir: installed.join("git-lfs")
            }
        );
        assert_eq!(c.packages().collect::<Vec<_>>(), vec!["git", "git-lfs"]);
    }
    let text = describe(&conflicts);
    assert!(text.starts_with("3 extension conflicts"), "{text}");
    assert!(text.contains("executors `git-lfs` is claimed by extension `git`"));
}

#[test]
fn three_claimants_and_the_same_package_name_twice_are_all_listed() {
    let tmp = TempDir::new("three");
    let a = tmp.join("a/notes");
    let b = tmp.join("b/notes");
    let c = tmp.join("c/notes-x");
    let m = manifest_declaring("notes", "notes-x", "notes.read", "notes");
    let packages = vec![
        package("notes", &b, &m),
        package("notes", &a, &m),
        package(
            "notes-x",
            &c,
            &manifest_declaring("notes-x", "notes-x", "notes-x.read", "notes-x"),
        ),
    ];
    let conflicts = check_conflicts(&packages, &HostNames::default()).unwrap_err();
    let listed: Vec<String> = conflicts
        .iter()
        .map(|c| format!("{} {}", c.kind, c.name))
        .collect();
    assert_eq!(
        listed,
        vec![
            "executors notes",
            "families notes-x",
            "families notes-x",
            "name notes",
            "operations notes.read",
        ],
        "{}",
        describe(&conflicts)
    );
    // The first claimant is the first package in (name, dir) order.
    for c in &conflicts {
        assert_eq!(
            c.first,
            Claimant::Package {
                name: "notes".into(),
                dir: a.clone()
            }
        );
    }
}

#[test]
fn reserved_and_host_names_are_refused() {
    // A package named like a reserved name is already refused by manifest
    // validation, so discovery reports it and it never reaches the check.
    let tmp = TempDir::new("reserved");
    let installed = tmp.join("etc");
    write_package(&installed, "core", &manifest("core"));
    let d = discover(&installed, None);
    assert!(d.packages.is_empty());
    match &d.reports[0].kind {
        ReportKind::Invalid { rule, .. } => assert_eq!(*rule, Some("name_reserved")),
        other => panic!("{other:?}"),
    }

    // A reserved name that passes validation (`open-conduit` is under `open`)
    // is refused by the check, in any kind; so is a name the host registers.
    let open = manifest_declaring("open", "open-conduit", "open.op", "open-conduit");
    let mut support = manifest("support");
    support["provides"] = json!({"routes": [{"handler": "support"}]});
    let packages = vec![
        package("open", &tmp.join("open"), &open),
        package("support", &tmp.join("support"), &support),
    ];
    let host = HostNames::default().with("handlers", "support");
    let conflicts = check_conflicts(&packages, &host).unwrap_err();
    let listed: Vec<(String, String, Claimant)> = conflicts
        .iter()
        .map(|c| (c.kind.clone(), c.name.clone(), c.first.clone()))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("executors".into(), "open-conduit".into(), Claimant::Host),
            ("families".into(), "open-conduit".into(), Claimant::Host),
            ("handlers".into(), "support".into(), Claimant::Host),
        ]
    );
    assert!(describe(&conflicts).contains("is claimed by the host and by extension `support`"));

    // Without the host's own names the same set is admitted.
    check_conflicts(&packages, &HostNames::empty()).unwrap();
}
