//! GitHub's own API description served by Prism (`@stoplight/prism-cli` in mock
//! mode with `--errors`, over `@octokit/openapi`, from tests/github-api): one Prism
//! per test binary, started on first use, which dies with the test process.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A running Prism.
pub struct Prism {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Prism's log lines (one per request among them).
    pub log: Arc<Mutex<Vec<String>>>,
    /// The wrapper shell; it kills Prism when our end of its stdin closes,
    /// which happens when this test process exits.
    _child: Mutex<Child>,
}

pub fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/github-api")
}

/// True under `OC_REQUIRE_PEERS=1`.
pub fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// The one Prism of this test binary, started on first use; `Err` says why
/// there is none.
pub fn prism() -> Result<&'static Prism, String> {
    static PRISM: OnceLock<Result<Prism, String>> = OnceLock::new();
    PRISM
        .get_or_init(start_prism)
        .as_ref()
        .map_err(Clone::clone)
}

fn start_prism() -> Result<Prism, String> {
    let dir = peers_dir();
    let bin = dir.join("node_modules/.bin/prism");
    let spec = dir.join("node_modules/@octokit/openapi/generated/api.github.com.json");
    if Command::new("node")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        return Err("node is not installed".into());
    }
    if !bin.exists() || !spec.exists() {
        return Err(format!(
            "{} has no node_modules (run npm ci --prefix tests/github-api)",
            dir.display()
        ));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let script = format!(
        "'{}' mock --errors -h 127.0.0.1 -p {port} '{}' 2>&1 & pid=$!; cat >/dev/null; kill $pid",
        bin.display(),
        spec.display()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting prism: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let lines = log.clone();
    std::thread::spawn(move || {
        let mut ready = Some(ready_tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("Prism is listening") {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(true);
                }
            }
            lines.lock().unwrap().push(line);
        }
        if let Some(tx) = ready.take() {
            let _ = tx.send(false);
        }
    });
    // Loading GitHub's description takes Prism some 20-30 s.
    match ready_rx.recv_timeout(Duration::from_secs(300)) {
        Ok(true) => Ok(Prism {
            url: format!("http://127.0.0.1:{port}"),
            log,
            _child: Mutex::new(child),
        }),
        _ => {
            let _ = child.kill();
            Err(format!(
                "prism did not start listening: {}",
                log.lock().unwrap().join("\n")
            ))
        }
    }
}

impl Prism {
    /// Its address (`127.0.0.1:PORT`), for a raw TCP client.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }
}
