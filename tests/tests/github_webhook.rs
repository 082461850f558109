#![allow(clippy::unwrap_used)]
//! The github package's managed webhook (`manage_webhook`, the `github.webhooks`
//! task), with real daemons: the first pass creates the repository's hook pointing
//! at `public_url` + the entry's path with the connection's secret and the entry's
//! events; a pass with nothing changed writes nothing; a new `public_url` is one
//! PATCH to the new URL; no `public_url`, or a token GitHub refuses (403), fails the
//! pass with the reason, which doctor shows too.
//!
//! GitHub is the validating stand-in in front of Prism (every request must fit
//! GitHub's OpenAPI description); the hooks it keeps are built from the
//! description's `hook` example. Task passes are asked through extrunner
//! (`ext.call task.run`), as schedulerd does at the task's interval. Without node
//! or tests/github-api's packages the test prints SKIPPED and passes, unless
//! OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_systest::github::{example, prism_or_skip, Reply, Request, StandIn};
use oc_systest::{Suite, HANG};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPO: &str = "Codertocat/Hello-World";
const PATH: &str = "/github/demo/repo";
const TASK: &str = "github.webhooks";

/// GitHub's side: the repository's hooks.
#[derive(Default)]
struct Hooks {
    list: Vec<Value>,
    next_id: u64,
    forbid: bool,
}

impl Hooks {
    fn apply(hook: &mut Value, body: &Value) {
        if let Some(config) = body["config"].as_object() {
            for (k, v) in config {
                // GitHub never shows a secret.
                hook["config"][k] = if k == "secret" {
                    json!("********")
                } else {
                    v.clone()
                };
            }
        }
        for k in ["events", "active"] {
            if !body[k].is_null() {
                hook[k] = body[k].clone();
            }
        }
    }

    fn answer(&mut self, r: &Request) -> Option<Reply> {
        let base = format!("/repos/{REPO}/hooks");
        let path = r.path();
        if !path.starts_with(&base) {
            return None;
        }
        if self.forbid {
            return Some(Reply::error(
                403,
                "Resource not accessible by personal access token",
            ));
        }
        match (r.method.as_str(), path.strip_prefix(&base)) {
            ("GET", Some("")) => Some(Reply::json(200, &Value::Array(self.list.clone()))),
            ("POST", Some("")) => {
                self.next_id += 1;
                let mut hook = example("hook").unwrap();
                hook["id"] = json!(self.next_id);
                hook["config"] = json!({});
                Hooks::apply(&mut hook, &r.json());
                self.list.push(hook.clone());
                Some(Reply::json(201, &hook))
            }
            ("PATCH", Some(id)) => {
                let id: u64 = id.trim_start_matches('/').parse().ok()?;
                let hook = self.list.iter_mut().find(|h| h["id"] == json!(id))?;
                Hooks::apply(hook, &r.json());
                Some(Reply::json(200, hook))
            }
            _ => None,
        }
    }
}

fn task(suite: &Suite) -> Result<String, String> {
    suite
        .call(
            "ext.call",
            json!({"name": "github", "method": "task.run", "timeout_ms": 60_000,
                   "params": {"task": TASK, "now": "2026-01-01T00:00:00Z"}}),
        )
        .map(|r| r["detail"].as_str().unwrap_or_default().to_owned())
        .map_err(|e| e["message"].as_str().unwrap_or_default().to_owned())
}

fn doc(suite: &Suite, api_url: &str, public_url: Option<&str>) -> Value {
    let secret = suite.dir.join("gh-secret");
    std::fs::write(&secret, GH_SECRET).unwrap();
    let token = suite.dir.join("gh-token");
    std::fs::write(&token, "ghp_webhookTestToken\n").unwrap();
    let mut doc = json!({
        "connections": [{"name": "gh", "type": "github", "config": {"api_url": api_url},
            "secret_refs": {"webhook_secret": format!("file:{}", secret.display()),
                            "token": format!("file:{}", token.display())}}],
        "scopes": [{"id": "demo", "entries": [{"type": "github", "name": "repo", "connection": "gh",
            "config": {"repository": REPO, "events": ["issues", "issue_comment"],
                       "reconcile_interval_s": 0, "manage_webhook": true}}]}]
    });
    if let Some(url) = public_url {
        doc["settings"] = json!({"webhooks": {"public_url": url}});
    }
    doc
}

fn doctor(suite: &Suite) -> String {
    let out = std::process::Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .arg("doctor")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_managed_webhook_is_created_kept_and_moved_with_the_public_url() {
    let Some(prism) = prism_or_skip() else { return };
    let hooks = Arc::new(Mutex::new(Hooks {
        list: vec![{
            let mut other = example("hook").unwrap();
            other["id"] = json!(7);
            other["config"]["url"] = json!("https://ci.example.com/hook");
            other
        }],
        next_id: 100,
        forbid: false,
    }));
    let h = hooks.clone();
    let gh = StandIn::start(&prism, move |r| h.lock().unwrap().answer(r)).unwrap();
    let suite = Suite::new(Path::new(BIN), "github-webhook", &Suite::first_party()).unwrap();
    suite.start_all().unwrap();
    suite
        .apply_config(&doc(&suite, &gh.url, Some("https://a.example.com")), PATH)
        .unwrap();

    // The first pass (this one, or the one configure set off) creates the hook.
    let detail = task(&suite).unwrap_or_else(|e| {
        panic!(
            "{e}\n{}",
            std::fs::read_to_string(suite.dir.join("state/logs/extensions/github.log"))
                .unwrap_or_default()
        )
    });
    assert!(detail.contains("demo/repo"), "{detail}");
    let posts = gh.requests("POST", &format!("/repos/{REPO}/hooks"));
    assert_eq!(posts.len(), 1, "{posts:#?}");
    let body = posts[0].json();
    assert_eq!(
        body["config"]["url"],
        "https://a.example.com/github/demo/repo"
    );
    assert_eq!(body["config"]["secret"], GH_SECRET);
    assert_eq!(body["config"]["content_type"], "json");
    assert_eq!(body["events"], json!(["issues", "issue_comment"]));
    assert_eq!(body["active"], true);
    assert!(doctor(&suite).contains("hook 101 ok"), "{}", doctor(&suite));

    // A second pass with nothing changed writes nothing.
    let writes = gh.writes().len();
    let detail = task(&suite).unwrap();
    assert!(detail.contains("hook 101 is as configured"), "{detail}");
    assert_eq!(gh.writes().len(), writes, "{:#?}", gh.writes());

    // A new public URL: one PATCH moves the hook there.
    suite
        .apply_config(&doc(&suite, &gh.url, Some("https://b.example.com/")), PATH)
        .unwrap();
    let deadline = Instant::now() + HANG;
    let patches = loop {
        task(&suite).unwrap();
        let patches = gh.requests("PATCH", &format!("/repos/{REPO}/hooks/101"));
        if !patches.is_empty() {
            break patches;
        }
        assert!(Instant::now() < deadline, "no PATCH within {HANG:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    task(&suite).unwrap();
    assert_eq!(
        gh.requests("PATCH", &format!("/repos/{REPO}/hooks/101"))
            .len(),
        1,
        "{patches:#?}"
    );
    assert_eq!(
        patches[0].json()["config"]["url"],
        "https://b.example.com/github/demo/repo"
    );
    assert_eq!(gh.requests("POST", "/hooks").len(), 1, "no second hook");
    let list = hooks.lock().unwrap().list.clone();
    assert_eq!(list.len(), 2, "{list:#?}");

    // Without a public URL the pass says why and changes nothing.
    suite
        .apply_config(&doc(&suite, &gh.url, None), PATH)
        .unwrap();
    let writes = gh.writes().len();
    let deadline = Instant::now() + HANG;
    let why = loop {
        match task(&suite) {
            Err(why) => break why,
            Ok(_) => assert!(
                Instant::now() < deadline,
                "the pass never missed public_url"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(why.contains("no public_url"), "{why}");
    assert_eq!(gh.writes().len(), writes);

    // A token GitHub refuses: the pass fails with GitHub's message, and doctor says so.
    suite
        .apply_config(&doc(&suite, &gh.url, Some("https://b.example.com")), PATH)
        .unwrap();
    hooks.lock().unwrap().forbid = true;
    // (until the package has the configuration with the public URL again)
    let deadline = Instant::now() + HANG;
    let why = loop {
        let why = task(&suite).unwrap_err();
        if !why.contains("no public_url") {
            break why;
        }
        assert!(Instant::now() < deadline, "still no public_url: {why}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        why.contains("GitHub answered 403: Resource not accessible by personal access token")
            && why.contains("Webhooks"),
        "{why}"
    );
    let text = doctor(&suite);
    assert!(
        text.contains("github_webhooks")
            && text.contains("Resource not accessible by personal access token"),
        "{text}"
    );

    assert!(gh.violations().is_empty(), "{:#?}", gh.violations());
}
