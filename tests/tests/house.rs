#![allow(clippy::unwrap_used)]
//! The workspace's house rules (issue 39), checked on the sources themselves:
//!
//! - no source file of a crate (`<crate>/src/**.rs`) is over 1,000 lines outside its
//!   `#[cfg(test)]` items, and one over 800 opens with a `//!` comment (saying why it
//!   is one concern);
//! - no two sibling modules of a crate import each other, directly or around a
//!   longer loop (`crate::`, `super::` and `$crate::` paths, in `use` trees and in
//!   expressions, outside `#[cfg(test)]` items);
//! - no string literal outside `busapi` names a daemon's bus method
//!   (`busapi::all_methods()`): callers and servers use the bus API's types. The
//!   `protocol` crate may name an extension-protocol method that a daemon's method
//!   shares (`tunnel.url`, which extrunner forwards to tunneld).
//!
//! Every `.rs` file under a `src/` is read, found from the crate roots (`lib.rs`,
//! `main.rs`, `bin/*.rs`, `bin/*/main.rs`) through its `mod` declarations: a file no
//! root reaches, a `mod` whose file is missing, and a `#[path]` attribute (not
//! followed here) are failures, never skipped. Test code is left out: `#[cfg(test)]`
//! items and the files of `#[cfg(test)] mod`s, and, for the first and the third rule,
//! the test crates under the workspace's `tests/` (oc-systest, oc-pgtest), as for
//! the integration tests in each crate's `tests/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// No source file is longer (outside its tests).
const MAX_LINES: usize = 1000;
/// A file longer than this opens with a `//!` comment.
const EXPLAIN_OVER: usize = 800;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

// ---------------------------------------------------------------------------------
// Tokens: enough of Rust's lexical grammar to tell code from comments and strings.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// A string literal's text (escapes kept as written).
    Str(String),
    /// `::`
    Sep,
    Punct(char),
    /// A number, a character or a lifetime: nothing this test looks at.
    Other,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// The tokens of `src`, comments left out.
fn lex(src: &str) -> Result<Vec<Token>, String> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while i < c.len() {
        let ch = c[i];
        let start = line;
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    return Err(format!("line {start}: a block comment is not closed"));
                }
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"'
            || ((ch == 'b' || ch == 'c') && at(i + 1) == '"')
            || raw_string_at(&c, i).is_some()
        {
            let (text, next) = match raw_string_at(&c, i) {
                Some((hashes, open)) => {
                    let close: String = std::iter::once('"')
                        .chain(std::iter::repeat_n('#', hashes))
                        .collect();
                    let rest: String = c[open..].iter().collect();
                    let end = rest
                        .find(&close)
                        .ok_or(format!("line {start}: a raw string is not closed"))?;
                    let text: String = rest[..end].to_owned();
                    (
                        text.clone(),
                        open + text.chars().count() + close.chars().count(),
                    )
                }
                None => {
                    let mut j = i + if ch == '"' { 1 } else { 2 };
                    let mut text = String::new();
                    loop {
                        match c.get(j) {
                            None => return Err(format!("line {start}: a string is not closed")),
                            Some('"') => break,
                            Some('\\') => {
                                text.push('\\');
                                text.push(at(j + 1));
                                j += 2;
                            }
                            Some(&x) => {
                                text.push(x);
                                j += 1;
                            }
                        }
                    }
                    (text, j + 1)
                }
            };
            line += text.matches('\n').count();
            out.push(Token {
                tok: Tok::Str(text),
                line: start,
            });
            i = next;
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            // A character (`'x'`, `'\n'`, `b'x'`) or a lifetime (`'a`).
            let q = if ch == 'b' { i + 1 } else { i };
            if at(q + 1) == '\\' {
                let mut j = q + 3;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if at(q + 2) == '\'' {
                i = q + 3;
            } else {
                i = q + 1;
                while i < c.len() && is_ident_char(c[i]) {
                    i += 1;
                }
            }
            out.push(Token {
                tok: Tok::Other,
                line: start,
            });
        } else if ch.is_ascii_digit() {
            while i < c.len()
                && (is_ident_char(c[i]) || (c[i] == '.' && at(i + 1).is_ascii_digit()))
            {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Other,
                line: start,
            });
        } else if is_ident_start(ch) {
            if ch == 'r' && at(i + 1) == '#' && is_ident_start(at(i + 2)) {
                i += 2; // a raw identifier: `r#type`
            }
            let from = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(c[from..i].iter().collect()),
                line: start,
            });
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::Sep,
                line: start,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line: start,
            });
            i += 1;
        }
    }
    Ok(out)
}

/// A raw string (`r"`, `r#"`, `br"`, `cr#"`) at `i`: its `#` count and where its
/// text begins.
fn raw_string_at(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if matches!(c.get(j), Some('b' | 'c')) {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    if i > 0 && is_ident_char(c[i - 1]) {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&x| x == '#').count();
    (c.get(j + hashes) == Some(&'"')).then_some((hashes, j + hashes + 1))
}

// ---------------------------------------------------------------------------------
// Test code: `#[cfg(test)]` items are left out.
// ---------------------------------------------------------------------------------

/// A file's tokens without its test code.
#[derive(Debug, Default)]
struct Code {
    tokens: Vec<Token>,
    /// The lines of `#[cfg(test)]` items.
    test_lines: BTreeSet<usize>,
    /// The modules declared `#[cfg(test)] mod x;` (their files are test code).
    test_mods: Vec<String>,
    /// `#![cfg(test)]`: the whole file is test code.
    all_test: bool,
}

fn punct(t: Option<&Token>, p: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(x), .. }) if *x == p)
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token {
            tok: Tok::Ident(s), ..
        }) => Some(s),
        _ => None,
    }
}

/// The attribute at `i` (`#[...]` or `#![...]`): whether it is inner, its tokens,
/// and the index after it.
fn attribute(t: &[Token], i: usize) -> Option<(bool, &[Token], usize)> {
    if !punct(t.get(i), '#') {
        return None;
    }
    let inner = punct(t.get(i + 1), '!');
    let open = i + 1 + usize::from(inner);
    if !punct(t.get(open), '[') {
        return None;
    }
    let mut depth = 0;
    for (j, tok) in t.iter().enumerate().skip(open) {
        match tok.tok {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    return Some((inner, &t[open + 1..j], j + 1));
                }
            }
            _ => {}
        }
    }
    None
}

fn is_cfg_test(inside: &[Token]) -> bool {
    let words: Vec<&Tok> = inside.iter().map(|t| &t.tok).collect();
    words
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Punct('('),
            &Tok::Ident("test".into()),
            &Tok::Punct(')'),
        ]
}

const ITEM_WORDS: [&str; 15] = [
    "fn",
    "mod",
    "impl",
    "struct",
    "enum",
    "use",
    "const",
    "static",
    "type",
    "trait",
    "macro_rules",
    "pub",
    "unsafe",
    "async",
    "extern",
];

/// The end (exclusive) of the item, field or statement at `i`: an item ends at its
/// `;` or its `{...}` block; anything else also at a `,` or at the brace, bracket or
/// parenthesis that closes around it.
fn item_end(t: &[Token], i: usize) -> usize {
    let item = ident(t.get(i)).is_some_and(|w| ITEM_WORDS.contains(&w));
    let mut depth = 0i32;
    let mut j = i;
    while j < t.len() {
        match t[j].tok {
            Tok::Punct('(' | '[') => depth += 1,
            Tok::Punct(')' | ']' | '}') if depth == 0 => return j,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct(';') if depth == 0 => return j + 1,
            Tok::Punct(',') if depth == 0 && !item => return j,
            Tok::Punct('{') if depth == 0 => {
                let mut braces = 0;
                while j < t.len() {
                    match t[j].tok {
                        Tok::Punct('{') => braces += 1,
                        Tok::Punct('}') => {
                            braces -= 1;
                            if braces == 0 {
                                return j + 1;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                return j;
            }
            _ => {}
        }
        j += 1;
    }
    j
}

fn strip_tests(tokens: Vec<Token>) -> Code {
    let mut code = Code::default();
    let mut i = 0;
    while i < tokens.len() {
        let Some((inner, inside, after)) = attribute(&tokens, i) else {
            code.tokens.push(tokens[i].clone());
            i += 1;
            continue;
        };
        if !is_cfg_test(inside) {
            code.tokens.extend_from_slice(&tokens[i..after]);
            i = after;
            continue;
        }
        if inner {
            code.all_test = true;
            return code;
        }
        let mut j = after;
        while let Some((_, _, next)) = attribute(&tokens, j) {
            j = next;
        }
        let mut k = j;
        if ident(tokens.get(k)) == Some("pub") {
            k += 1;
            if punct(tokens.get(k), '(') {
                k = item_end(&tokens, k + 1) + 1;
            }
        }
        if ident(tokens.get(k)) == Some("mod") && punct(tokens.get(k + 2), ';') {
            if let Some(name) = ident(tokens.get(k + 1)) {
                code.test_mods.push(name.to_owned());
            }
        }
        let end = item_end(&tokens, j).max(j + 1).min(tokens.len());
        let last = tokens[end - 1].line;
        code.test_lines.extend(tokens[i].line..=last);
        i = end;
    }
    code
}

// ---------------------------------------------------------------------------------
// Crates, their files and their module trees.
// ---------------------------------------------------------------------------------

/// One `.rs` file under a crate's `src/`.
#[derive(Debug)]
struct Source {
    /// The path from the workspace root.
    rel: String,
    text: String,
    code: Code,
    /// Its module in each crate tree that reaches it (`None`: a test module's file).
    modules: Vec<Vec<String>>,
    test: bool,
}

/// A module path, as written: `crate::a::b`.
fn shown(m: &[String]) -> String {
    if m.is_empty() {
        "the crate root".to_owned()
    } else {
        m.join("::")
    }
}

/// A path named in code, from the module it is named in.
#[derive(Debug)]
struct Reference {
    from: Vec<String>,
    to: Vec<String>,
    file: String,
    line: usize,
}

#[derive(Debug)]
struct Crate {
    /// The crate's directory, from the workspace root (`""` for the root).
    rel: String,
    /// A test crate (under the workspace's `tests/`).
    test_crate: bool,
    sources: BTreeMap<PathBuf, Source>,
    /// Each crate tree (a root and every module it declares, inline ones too), with
    /// the paths its code names.
    trees: Vec<(BTreeSet<Vec<String>>, Vec<Reference>)>,
    /// What could not be read or followed.
    problems: Vec<String>,
}

/// Every directory with a `Cargo.toml` and a `src/` under `root` (not `target/`, not
/// hidden ones).
fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            out.push(dir.clone());
        }
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir()
                && !name.starts_with('.')
                && name != "target"
                && name != "node_modules"
            {
                todo.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn relative(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// The crate at `dir`: its sources read, its trees followed.
fn read_crate(root: &Path, dir: &Path) -> Crate {
    let rel = relative(root, dir);
    let mut krate = Crate {
        test_crate: Path::new(&rel)
            .components()
            .next()
            .is_some_and(|c| c.as_os_str() == "tests"),
        rel,
        sources: BTreeMap::new(),
        trees: Vec::new(),
        problems: Vec::new(),
    };
    let src = dir.join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = relative(root, &f);
        let code = match lex(&text) {
            Ok(t) => strip_tests(t),
            Err(e) => {
                krate
                    .problems
                    .push(format!("{rel}: cannot be read as Rust: {e}"));
                Code::default()
            }
        };
        let test = code.all_test;
        krate.sources.insert(
            f,
            Source {
                rel,
                text,
                code,
                modules: Vec::new(),
                test,
            },
        );
    }
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"].iter().map(|r| src.join(r)).collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        for e in bins.flatten() {
            roots.push(if e.path().is_dir() {
                e.path().join("main.rs")
            } else {
                e.path()
            });
        }
    }
    roots.retain(|r| krate.sources.contains_key(r));
    for root_file in roots {
        let tree = follow(&mut krate, &root_file);
        krate.trees.push(tree);
    }
    for s in krate.sources.values() {
        if s.modules.is_empty() && !s.test {
            krate.problems.push(format!(
                "{}: no crate root reaches it (no `mod` declares it)",
                s.rel
            ));
        }
    }
    krate
}

/// Follow a crate root's `mod` declarations: its modules, and the paths they name.
fn follow(krate: &mut Crate, root_file: &Path) -> (BTreeSet<Vec<String>>, Vec<Reference>) {
    let mut modules = BTreeSet::from([Vec::new()]);
    let mut refs = Vec::new();
    let dir = root_file.parent().unwrap().to_path_buf();
    let mut todo = vec![(root_file.to_path_buf(), Vec::<String>::new(), dir)];
    while let Some((file, module, children)) = todo.pop() {
        let Some(source) = krate.sources.get_mut(&file) else {
            continue;
        };
        if source.test || source.modules.contains(&module) {
            continue;
        }
        source.modules.push(module.clone());
        let rel = source.rel.clone();
        let scan = scan_file(&source.code.tokens, &module, &rel);
        let test_mods = source.code.test_mods.clone();
        krate.problems.extend(scan.problems);
        refs.extend(scan.refs);
        modules.extend(scan.inline);
        for name in test_mods {
            for f in [
                children.join(format!("{name}.rs")),
                children.join(&name).join("mod.rs"),
            ] {
                mark_test(krate, &f, &children.join(&name));
            }
        }
        for (inline, name) in scan.decls {
            let mut at = children.clone();
            at.extend(&inline);
            let candidates = [at.join(format!("{name}.rs")), at.join(&name).join("mod.rs")];
            let found: Vec<&PathBuf> = candidates
                .iter()
                .filter(|c| krate.sources.contains_key(*c))
                .collect();
            let mut child = module.clone();
            child.extend(inline.iter().cloned());
            child.push(name.clone());
            match found.as_slice() {
                [one] => {
                    modules.insert(child.clone());
                    todo.push(((*one).clone(), child, at.join(&name)));
                }
                [] => krate.problems.push(format!(
                    "{rel}: `mod {name};` has no file ({} or {})",
                    candidates[0].display(),
                    candidates[1].display()
                )),
                _ => krate
                    .problems
                    .push(format!("{rel}: `mod {name};` has two files")),
            }
        }
    }
    (modules, refs)
}

/// The file `f` and everything under `dir` are a test module's.
fn mark_test(krate: &mut Crate, f: &Path, dir: &Path) {
    for (p, s) in krate.sources.iter_mut() {
        if p == f || p.starts_with(dir) {
            s.test = true;
        }
    }
}

#[derive(Default)]
struct Scan {
    /// `mod name;` declarations, with the inline modules they sit in.
    decls: Vec<(Vec<String>, String)>,
    /// The inline modules (`mod name { ... }`), as module paths.
    inline: Vec<Vec<String>>,
    refs: Vec<Reference>,
    problems: Vec<String>,
}

/// The module declarations and the `crate::`/`super::` paths of a file (module
/// `module`).
fn scan_file(t: &[Token], module: &[String], rel: &str) -> Scan {
    let mut scan = Scan::default();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(stack.iter().map(|(n, _)| n.clone()))
            .collect();
        match &t[i].tok {
            Tok::Punct('#') if punct(t.get(i + 1), '[') && ident(t.get(i + 2)) == Some("path") => {
                scan.problems.push(format!(
                    "{rel}:{}: a #[path] attribute (this test follows only the default layout)",
                    t[i].line
                ));
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(name) = ident(t.get(i + 1)) {
                    if punct(t.get(i + 2), ';') {
                        let inline = stack.iter().map(|(n, _)| n.clone()).collect();
                        scan.decls.push((inline, name.to_owned()));
                    } else if punct(t.get(i + 2), '{') {
                        let mut m = here.clone();
                        m.push(name.to_owned());
                        scan.inline.push(m);
                        stack.push((name.to_owned(), depth));
                    }
                }
            }
            Tok::Ident(w)
                if (w == "crate" || w == "super")
                    && t.get(i + 1).is_some_and(|x| x.tok == Tok::Sep)
                    && ident(i.checked_sub(1).and_then(|p| t.get(p))) != Some("in") =>
            {
                let line = t[i].line;
                let mut base = if w == "crate" {
                    Vec::new()
                } else {
                    here.clone()
                };
                let mut j = i;
                if w == "crate" {
                    j += 2;
                } else {
                    let mut ok = true;
                    while ident(t.get(j)) == Some("super")
                        && t.get(j + 1).is_some_and(|x| x.tok == Tok::Sep)
                    {
                        ok &= base.pop().is_some();
                        j += 2;
                    }
                    if !ok {
                        i = j;
                        continue;
                    }
                }
                let mut paths = Vec::new();
                j = use_tree(t, j, &mut base, &mut paths);
                for to in paths {
                    scan.refs.push(Reference {
                        from: here.clone(),
                        to,
                        file: rel.to_owned(),
                        line,
                    });
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan
}

/// The paths of the use tree (or expression path) at `i`, below `prefix`; the index
/// after it.
fn use_tree(
    t: &[Token],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let depth = prefix.len();
    loop {
        match t.get(i).map(|x| &x.tok) {
            Some(Tok::Ident(s)) => {
                if s != "self" {
                    prefix.push(s.clone());
                }
                i += 1;
                if t.get(i).is_some_and(|x| x.tok == Tok::Sep) {
                    i += 1;
                    continue;
                }
                break;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while i < t.len() && !punct(t.get(i), '}') {
                    let mut sub = prefix.clone();
                    i = use_tree(t, i, &mut sub, out);
                    // `a as b`, then the `,`.
                    while i < t.len() && !punct(t.get(i), ',') && !punct(t.get(i), '}') {
                        i += 1;
                    }
                    if punct(t.get(i), ',') {
                        i += 1;
                    }
                }
                prefix.truncate(depth);
                return i + 1;
            }
            _ => break,
        }
    }
    out.push(prefix.clone());
    prefix.truncate(depth);
    i
}

fn crates() -> Vec<Crate> {
    let root = workspace();
    let all: Vec<Crate> = crate_dirs(&root)
        .iter()
        .map(|d| read_crate(&root, d))
        .collect();
    // The check sees the workspace: its daemons, the bus API and this crate.
    for must in ["busapi", "storaged", "cli", "tunneld", "tests"] {
        assert!(
            all.iter().any(|c| c.rel == must),
            "the crate {must} is not found under {}",
            root.display()
        );
    }
    all
}

// ---------------------------------------------------------------------------------
// The rules.
// ---------------------------------------------------------------------------------

/// Files too long, or long without saying why they are one concern.
fn long_files(krates: &[Crate]) -> Vec<String> {
    let mut out = Vec::new();
    for k in krates.iter().filter(|k| !k.test_crate) {
        out.extend(k.problems.iter().cloned());
        for s in k.sources.values().filter(|s| !s.test) {
            let lines = (1..=s.text.lines().count())
                .filter(|l| !s.code.test_lines.contains(l))
                .count();
            let opening = s.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            if lines > MAX_LINES {
                out.push(format!(
                    "{}: {lines} lines outside its tests, over the limit of {MAX_LINES}: split it along its concerns",
                    s.rel
                ));
            } else if lines > EXPLAIN_OVER && !opening.trim_start().starts_with("//!") {
                out.push(format!(
                    "{}: {lines} lines outside its tests (over {EXPLAIN_OVER}) and no opening `//!` comment saying why it is one concern",
                    s.rel
                ));
            }
        }
    }
    out
}

/// Sibling modules that import each other.
fn module_cycles(krates: &[Crate]) -> Vec<String> {
    let mut out = Vec::new();
    for k in krates {
        out.extend(k.problems.iter().cloned());
        for (modules, refs) in &k.trees {
            out.extend(tree_cycles(&k.rel, modules, refs));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn tree_cycles(krate: &str, modules: &BTreeSet<Vec<String>>, refs: &[Reference]) -> Vec<String> {
    // Each reference to the module it names (the longest module path it starts with).
    let resolved: Vec<(&Reference, Vec<String>)> = refs
        .iter()
        .filter_map(|r| {
            let to = (1..=r.to.len())
                .rev()
                .map(|n| r.to[..n].to_vec())
                .find(|p| modules.contains(p))?;
            (to != r.from).then_some((r, to))
        })
        .collect();
    let mut out = Vec::new();
    let parents: BTreeSet<Vec<String>> = modules
        .iter()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    for parent in parents {
        let n = parent.len();
        let under = |m: &[String]| m.len() > n && m[..n] == parent[..];
        // Sibling → siblings it names, with one place each is named.
        let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (r, to) in &resolved {
            if under(&r.from) && under(to) && r.from[n] != to[n] {
                graph
                    .entry(r.from[n].clone())
                    .or_default()
                    .entry(to[n].clone())
                    .or_insert_with(|| format!("{}:{} names {}", r.file, r.line, to.join("::")));
            }
        }
        for component in strongly_connected(&graph) {
            let edges: Vec<String> = component
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|(b, _)| component.contains(*b))
                        .map(move |(b, at)| format!("{a} → {b} ({at})"))
                })
                .collect();
            out.push(format!(
                "{krate}: the modules {} (in {}) import each other: {}",
                component.iter().cloned().collect::<Vec<_>>().join(", "),
                shown(&parent),
                edges.join("; ")
            ));
        }
    }
    out
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[v].min(s.low[w]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.low[v].min(s.index[w]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                component.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// String literals naming one of `methods` outside the bus API crate.
fn method_strings(krates: &[Crate], methods: &BTreeSet<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for k in krates.iter().filter(|k| !k.test_crate && k.rel != "busapi") {
        out.extend(k.problems.iter().cloned());
        for s in k.sources.values().filter(|s| !s.test) {
            for t in &s.code.tokens {
                let Tok::Str(text) = &t.tok else { continue };
                if !methods.contains(text.as_str()) {
                    continue;
                }
                if k.rel == "protocol" && protocol::catalogue::method(text).is_some() {
                    continue; // the extension protocol's own method of that name
                }
                out.push(format!(
                    "{}:{}: the string {text:?} names a daemon's bus method: use its type in busapi ({}::METHOD)",
                    s.rel, t.line, family(text)
                ));
            }
        }
    }
    out
}

fn family(method: &str) -> String {
    let f = method.split('.').next().unwrap_or("");
    format!("busapi::{f}::<its params type>")
}

fn verdict(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} found:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

#[test]
fn no_source_file_is_too_long_or_long_without_saying_why() {
    verdict("files too long", &long_files(&crates()));
}

#[test]
fn no_two_sibling_modules_import_each_other() {
    verdict("module cycles", &module_cycles(&crates()));
}

#[test]
fn no_string_outside_busapi_names_a_daemon_method() {
    let methods: BTreeSet<&str> = busapi::all_methods().into_iter().collect();
    assert!(methods.contains("store.works") && methods.contains("ext.call"));
    verdict(
        "bus method names as strings",
        &method_strings(&crates(), &methods),
    );
}

/// The checks find what they look for: a made-up crate with a long file, a cycle
/// around three modules (one through an inline module and a `super::` path), and a
/// method's name in a string; test code, comments and a test module's file say
/// nothing.
#[test]
fn the_checks_find_what_they_look_for() {
    let root = std::env::temp_dir().join(format!("oc-house-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let src = root.join("demo/src");
    std::fs::create_dir_all(src.join("c")).unwrap();
    std::fs::write(root.join("demo/Cargo.toml"), "[package]\nname = \"demo\"\n").unwrap();
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    write(
        "lib.rs",
        "//! demo\nmod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod t;\nmod stray_decl_ok { pub fn f() {} }\n",
    );
    write(
        "a.rs",
        "use crate::b::{self, X as Y};\n// crate::c::z in a comment\nfn f() { let _ = \"store.works\"; let _ = r#\"ext.call\"#; let _ = 'x'; }\n",
    );
    write(
        "b.rs",
        "pub mod inner { pub fn g() { super::super::c::z::h(); } }\npub struct X;\n",
    );
    write("c.rs", "pub mod z;\n");
    write(
        "c/z.rs",
        "pub fn h<'a>(s: &'a str) -> &'a str { crate::a::f(); s }\n#[cfg(test)]\nmod tests { use crate::b; fn t() { let _ = \"store.kv_get\"; } }\n",
    );
    write("t.rs", "fn t() { let _ = \"store.kv_get\"; }\n");
    let long: String = std::iter::once("fn x() {}\n".to_owned())
        .chain((0..1001).map(|i| format!("// {i}\n")))
        .collect();
    write("c/long.rs", &long);
    let k = read_crate(&root, &root.join("demo"));
    let methods = BTreeSet::from(["store.works", "ext.call", "store.kv_get"]);
    let strings = method_strings(std::slice::from_ref(&k), &methods);
    let cycles = module_cycles(std::slice::from_ref(&k));
    let long = long_files(std::slice::from_ref(&k));
    let _ = std::fs::remove_dir_all(&root);

    assert_eq!(strings.len(), 3, "{strings:#?}"); // two literals, one stray file
    assert!(
        strings[1].starts_with("demo/src/a.rs:3: the string \"store.works\""),
        "{strings:#?}"
    );
    assert!(
        strings[2].starts_with("demo/src/a.rs:3: the string \"ext.call\""),
        "{strings:#?}"
    );
    assert!(
        strings[0].contains("demo/src/c/long.rs: no crate root reaches it"),
        "{strings:#?}"
    );
    assert_eq!(cycles.len(), 2, "{cycles:#?}");
    assert!(
        cycles[1].starts_with("demo: the modules a, b, c (in the crate root) import each other"),
        "{cycles:#?}"
    );
    assert!(
        cycles[1].contains("b → c (demo/src/b.rs:1 names c::z)"),
        "{cycles:#?}"
    );
    assert!(
        long.iter()
            .any(|l| l.starts_with("demo/src/c/long.rs: 1002 lines")),
        "{long:#?}"
    );
}
