//! Shared by the intake tests: the suite with the demo configuration.
#![allow(clippy::unwrap_used, dead_code)]

pub mod repo;

use oc_systest::{post, sign_sha256, Daemon, Response, Suite};
use serde_json::{json, Value};
use std::path::Path;

pub const BIN: &str = env!("CARGO_BIN_EXE_oc-suite");
pub const SECRET: &str = "It's a Secret to Everybody";
pub const GH_SECRET: &str = "gh-secret-for-tests";
pub const HOOK: &str = "/hooks/ci";
pub const HOOK_SOURCE: &str = "webhook/demo/ci";

pub fn config(suite: &Suite) -> Value {
    let secret = suite.dir.join("hook-secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let gh = suite.dir.join("gh-secret");
    std::fs::write(&gh, GH_SECRET).unwrap();
    json!({
        "connections": [
            {"name": "hooks", "type": "webhook",
             "secret_refs": {"secret": format!("file:{}", secret.display())}},
            {"name": "gh", "type": "github",
             "secret_refs": {"webhook_secret": format!("file:{}", gh.display())}}
        ],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "webhook", "name": "ci", "connection": "hooks",
                 "config": {"path": HOOK, "delivery_id": {"header": "X-Delivery-Id"},
                            "correlate": "/number"}},
                {"type": "github", "name": "repo", "connection": "gh",
                 "config": {"repository": "Codertocat/Hello-World"}}
            ]
        }]
    })
}

pub fn started(name: &str) -> Suite {
    let suite = Suite::new(Path::new(BIN), name, &Suite::first_party()).unwrap();
    suite.set_args(
        Daemon::Ingressd,
        &["--header-timeout-ms", "1000", "--body-timeout-ms", "1000"],
    );
    suite.start_all().unwrap();
    suite.apply_config(&config(&suite), HOOK).unwrap();
    suite.wait_for_route("/github/demo/repo").unwrap();
    suite
}

pub fn deliver(suite: &Suite, id: &str, body: &[u8]) -> std::io::Result<Response> {
    post(
        suite.http,
        HOOK,
        &[
            ("Content-Type", "application/json".into()),
            ("X-Delivery-Id", id.into()),
            ("X-Signature-256", sign_sha256(SECRET.as_bytes(), body)),
        ],
        body,
    )
}

pub fn hook_events(suite: &Suite) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["source"] == HOOK_SOURCE)
        .collect()
}
