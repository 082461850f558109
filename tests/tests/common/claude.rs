//! The real Claude Code CLI for system tests (`@anthropic-ai/claude-code`, pinned in
//! tests/claude-cli/package.json, installed by `npm ci --prefix tests/claude-cli`):
//! finding it (or skipping, or failing under `OC_REQUIRE_PEERS=1`), and what the
//! tests around it share.
#![allow(clippy::unwrap_used, dead_code)]

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The pinned CLI, or the one `OC_CLAUDE_CLI` names (to try another version).
pub fn claude_cli() -> PathBuf {
    match std::env::var_os("OC_CLAUDE_CLI") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("claude-cli/node_modules/.bin/claude"),
    }
}

/// The installed CLI, or `None` after saying why (or a panic under
/// `OC_REQUIRE_PEERS=1`).
pub fn the_cli() -> Option<PathBuf> {
    let cli = claude_cli();
    let why = if !cli.exists() {
        format!("{} is not installed", cli.display())
    } else {
        match std::process::Command::new(&cli).arg("--version").output() {
            Ok(o) if o.status.success() => return Some(cli),
            Ok(o) => format!(
                "{} --version failed: {}",
                cli.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("{} does not run: {e}", cli.display()),
        }
    };
    let fix = "install Node.js and npm, then run `npm ci --prefix tests/claude-cli`";
    if std::env::var_os("OC_REQUIRE_PEERS").is_some_and(|v| v == "1") {
        panic!("claude_cli cannot run, and OC_REQUIRE_PEERS=1 requires it: {why} ({fix})");
    }
    let _ = writeln!(std::io::stderr(), "claude_cli: SKIPPED: {why} ({fix})");
    None
}

/// Everything under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                if let Ok(bytes) = std::fs::read(&p) {
                    if needle.is_empty() || bytes.windows(needle.len()).any(|w| w == needle) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

/// The fake claude's `read_context` answer through the toolbelt's MCP server, from
/// its records (asserted not an error).
pub fn read_context(recs: &[Value]) -> Value {
    let mcp = recs
        .iter()
        .find_map(|r| r["mcp"].as_array().cloned())
        .unwrap_or_else(|| panic!("no MCP exchange recorded: {recs:?}"));
    let context = mcp
        .iter()
        .find(|x| x["method"] == "tools/call read_context")
        .unwrap_or_else(|| panic!("no read_context call: {mcp:?}"))["answer"]
        .clone();
    assert_eq!(context["result"]["isError"], false, "{context}");
    context
}
