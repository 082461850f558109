#![allow(clippy::unwrap_used)]
//! `open-conduit extension-run NAME`, the real binary: a bundled extension served
//! over its stdin and stdout completes the protocol's `initialize` handshake (as
//! does the older alias `__extension`, and the wrapper script `up` and the package
//! write), and an unknown or missing NAME is refused with a clear error.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_open-conduit");
/// Turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(60);

/// An extension process with the protocol on its stdin and stdout.
struct Served {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Served {
    fn start(program: &Path, args: &[&str]) -> Served {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Served {
            child,
            stdin,
            lines,
        }
    }

    /// Send a request and answer the response to it.
    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let line = self
                .lines
                .recv_timeout(HANG)
                .unwrap_or_else(|e| panic!("no answer to {method}: {e}"));
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    /// `initialize`, then `shutdown`; the process exits 0 by itself.
    fn handshake_and_shut_down(mut self, name: &str) {
        let init = self.call(
            1,
            "initialize",
            json!({"protocol_versions": [1], "host": {"name": "test", "version": "0"}}),
        );
        assert_eq!(init["result"]["protocol_version"], 1, "{init}");
        assert_eq!(init["result"]["manifest"]["name"], name, "{init}");
        let bye = self.call(2, "shutdown", json!({}));
        assert_eq!(bye["result"], json!({}), "{bye}");
        let (tx, rx) = mpsc::channel();
        let mut child = self.child;
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = rx.recv_timeout(HANG).expect("exited").unwrap();
        assert_eq!(status.code(), Some(0));
        drop(self.stdin);
    }
}

#[test]
fn extension_run_serves_a_bundled_extension_over_stdio() {
    for name in ["webhook", "schedule"] {
        Served::start(Path::new(BIN), &["extension-run", name]).handshake_and_shut_down(name);
    }
}

#[test]
fn the_older_name_is_an_alias() {
    Served::start(Path::new(BIN), &["__extension", "webhook"]).handshake_and_shut_down("webhook");
}

#[test]
fn the_bundled_packages_programs_run_extension_run() {
    let dir = std::env::temp_dir().join(format!("oc-extension-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args(["__bundle", dir.to_str().unwrap(), BIN])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.join("webhook/open-conduit-extension.json")).unwrap(),
    )
    .unwrap();
    let program = dir
        .join("webhook")
        .join(manifest["command"][0].as_str().unwrap());
    let script = std::fs::read_to_string(&program).unwrap();
    assert!(
        script.contains(" extension-run 'webhook'"),
        "the package's program: {script}"
    );
    Served::start(&program, &[]).handshake_and_shut_down("webhook");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_bundled_layout_ships_the_playbooks_and_extrunner_makes_the_agents_plugin_of_them() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("oc-bundle-playbooks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bundle = || {
        let out = Command::new(BIN)
            .args(["__bundle", dir.to_str().unwrap(), BIN])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    bundle();
    // A skill an earlier release shipped and this one does not is gone after the next.
    let stale = dir.join("github/playbooks/retired/SKILL.md");
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    std::fs::write(&stale, "old").unwrap();
    bundle();
    assert!(!stale.exists());
    let github = dir.join("github");
    assert_eq!(
        protocol::manifest::load_manifest(&github)
            .unwrap()
            .playbooks
            .as_deref(),
        Some("playbooks")
    );
    assert!(!oc_github::playbooks::PLAYBOOKS.is_empty());
    // Made as the manifest beside them is (0644 in the Debian package).
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let manifest_mode = mode(&github.join("open-conduit-extension.json"));
    for (rel, text) in oc_github::playbooks::PLAYBOOKS {
        let path = github.join("playbooks").join(rel);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            *text,
            "{}",
            path.display()
        );
        assert_eq!(mode(&path), manifest_mode, "{}", path.display());
    }
    // The trackers' playbooks are shipped the same way.
    for (name, files) in [
        ("linear", oc_linear::playbooks::PLAYBOOKS),
        ("jira", oc_jira::playbooks::PLAYBOOKS),
    ] {
        for (rel, text) in files {
            let path = dir.join(name).join("playbooks").join(rel);
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                *text,
                "{}",
                path.display()
            );
        }
    }
    // extrunner, discovering this layout, writes every skill into the plugin.
    let discovery = extrunner::discovery::discover(&dir.join("none"), Some(dir.as_path()));
    let written =
        extrunner::playbooks::write_plugin(&dir.join("state"), &discovery.packages).unwrap();
    let skills: Vec<&str> = written.skills.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        skills,
        [
            "github-issue",
            "github-review",
            "jira-issue",
            "linear-issue"
        ]
    );
    assert!(written.left_out.is_empty(), "{:?}", written.left_out);
    assert!(written.dir.join("skills/github-review/SKILL.md").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_or_missing_name_is_refused_clearly() {
    let out = Command::new(BIN)
        .args(["extension-run", "no-such-extension"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "open-conduit extension-run: no bundled extension named \"no-such-extension\""
        ),
        "{err}"
    );
    assert!(err.contains("webhook"), "it lists the bundled ones: {err}");
    assert!(out.stdout.is_empty(), "nothing on the protocol stream");

    let out = Command::new(BIN)
        .arg("extension-run")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("usage: open-conduit extension-run NAME"),
        "{err}"
    );
}

#[test]
fn extension_run_is_in_the_help() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("extension-run"), "{help}");
    assert!(!help.contains("__extension"), "{help}");
}
