#![allow(clippy::unwrap_used)]
//! Reconcile of the github package, with real daemons: deliveries GitHub could not
//! hand over while ingressd was down are read back from the webhook's delivery log
//! and become one Event each, keyed by their GUID, so neither a second pass nor the
//! same delivery arriving live later adds anything.
//!
//! GitHub is the validating stand-in (`oc_systest::github::StandIn`) in front of
//! Prism: every request the package makes must fit GitHub's OpenAPI description,
//! and the hook, its delivery list (two a page, so the package follows the `Link`
//! header's cursor) and each delivery are scripted from the description's own
//! examples. The suite holds ingressd's listening socket (as systemd does), so a
//! delivery sent while ingressd is stopped would wait in the kernel's queue rather
//! than fail; the failed attempts are therefore GitHub's records (status_code 0
//! "failed to connect to host", 502), as GitHub shows a delivery its receiver missed.
//! Without node or tests/github-api's packages the test prints SKIPPED and passes,
//! unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_systest::github::{example, prism_or_skip, Reply, Request, StandIn};
use oc_systest::{post, sign_sha256, Daemon, Suite, HANG};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPO: &str = "Codertocat/Hello-World";
const HOOK_ID: u64 = 4242;
const SOURCE: &str = "github/demo/repo";
const PATH: &str = "/github/demo/repo";
/// The stand-in lists at most this many deliveries a page, whatever per_page says.
const PAGE: usize = 2;

/// GitHub's side: the hook and its delivery records (oldest first).
#[derive(Default)]
struct Hub {
    url: String,
    deliveries: Vec<Value>,
}

impl Hub {
    /// Records one attempt of delivery `guid` (a new record ID each).
    fn attempt(
        &mut self,
        guid: &str,
        event: &str,
        payload: &Value,
        status_code: u16,
        redelivery: bool,
    ) {
        let id = 90_000 + self.deliveries.len() as u64;
        let mut full = example("hook-delivery").unwrap();
        full["id"] = json!(id);
        full["guid"] = json!(guid);
        full["redelivery"] = json!(redelivery);
        full["status_code"] = json!(status_code);
        full["status"] = json!(match status_code {
            0 => "failed to connect to host".to_string(),
            200..=299 => "OK".to_string(),
            s => format!("Invalid HTTP Response: {s}"),
        });
        full["event"] = json!(event);
        full["action"] = payload["action"].clone();
        full["url"] = json!(format!("https://conduit.example.com{PATH}"));
        full["request"]["headers"]["X-GitHub-Event"] = json!(event);
        full["request"]["headers"]["X-GitHub-Delivery"] = json!(guid);
        full["request"]["headers"]["X-GitHub-Hook-ID"] = json!(HOOK_ID.to_string());
        full["request"]["payload"] = payload.clone();
        self.deliveries.push(full);
    }

    fn item(full: &Value) -> Value {
        let mut item = example("hook-delivery-items").unwrap()[0].clone();
        for k in [
            "id",
            "guid",
            "delivered_at",
            "redelivery",
            "status",
            "status_code",
            "event",
            "action",
        ] {
            item[k] = full[k].clone();
        }
        item
    }

    fn answer(&self, r: &Request) -> Option<Reply> {
        let hooks = format!("/repos/{REPO}/hooks");
        let deliveries = format!("{hooks}/{HOOK_ID}/deliveries");
        let path = r.path();
        if r.method != "GET" {
            return None;
        }
        if path == hooks {
            let mut other = example("hook").unwrap();
            other["id"] = json!(7);
            other["config"]["url"] = json!("https://ci.example.com/hook");
            let mut ours = example("hook").unwrap();
            ours["id"] = json!(HOOK_ID);
            ours["events"] = json!(["issues", "issue_comment"]);
            ours["config"]["url"] = json!(format!("https://conduit.example.com{PATH}"));
            return Some(Reply::json(200, &json!([other, ours])));
        }
        if path == deliveries {
            let below: u64 = r
                .query("cursor")
                .and_then(|c| c.strip_prefix("c"))
                .and_then(|c| c.parse().ok())
                .unwrap_or(u64::MAX);
            let newest_first: Vec<&Value> = self
                .deliveries
                .iter()
                .rev()
                .filter(|d| d["id"].as_u64().unwrap() < below)
                .collect();
            let page: Vec<Value> = newest_first
                .iter()
                .take(PAGE)
                .map(|d| Hub::item(d))
                .collect();
            let mut reply = Reply::json(200, &Value::Array(page.clone()));
            if newest_first.len() > PAGE {
                let last = page.last().unwrap()["id"].as_u64().unwrap();
                reply = reply.header(
                    "Link",
                    &format!(
                        "<{}{deliveries}?per_page={PAGE}&cursor=c{last}>; rel=\"next\"",
                        self.url
                    ),
                );
            }
            return Some(reply);
        }
        if let Some(id) = path.strip_prefix(&format!("{deliveries}/")) {
            let id: u64 = id.parse().ok()?;
            return self
                .deliveries
                .iter()
                .find(|d| d["id"] == json!(id))
                .map(|d| Reply::json(200, d))
                .or_else(|| Some(Reply::error(404, "Not Found")));
        }
        None
    }
}

fn fixture(name: &str) -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/github/tests/fixtures")
            .join(name),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn issue(number: u64) -> Value {
    let mut v = fixture("issues.opened.json");
    v["issue"]["number"] = json!(number);
    v
}

/// Delivers `payload` live as GitHub would: signed, with its GUID.
fn deliver(suite: &Suite, guid: &str, event: &str, payload: &Value) -> u16 {
    let body = serde_json::to_vec(payload).unwrap();
    post(
        suite.http,
        PATH,
        &[
            ("Content-Type", "application/json".into()),
            ("X-GitHub-Event", event.into()),
            ("X-GitHub-Delivery", guid.into()),
            (
                "X-Hub-Signature-256",
                sign_sha256(GH_SECRET.as_bytes(), &body),
            ),
        ],
        &body,
    )
    .unwrap()
    .status
}

/// The delivery IDs of the source's Events, sorted.
fn delivered(suite: &Suite) -> Vec<String> {
    let mut ids: Vec<String> = suite
        .events()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == SOURCE)
        .map(|e| e["delivery_id"].as_str().unwrap_or("?").to_owned())
        .collect();
    ids.sort();
    ids
}

fn report(suite: &Suite, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + HANG;
    loop {
        if let Ok(status) = suite.call("ingress.reconcile_status", json!({})) {
            if let Some(r) = status["sources"]
                .as_array()
                .and_then(|a| a.iter().find(|r| r["source"] == SOURCE))
            {
                if f(r) {
                    return r.clone();
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no pass report {what} within {HANG:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A whole scan through extrunner's `ext.reconcile` from no checkpoint: (items, added).
fn scan_all(suite: &Suite) -> (u64, u64) {
    let (mut items, mut added, mut cursor) = (0, 0, String::new());
    for _ in 0..100 {
        let page = suite
            .call(
                "ext.reconcile",
                json!({"name": "github", "timeout_ms": 30_000,
                       "page": {"source": SOURCE, "cursor": cursor, "max_items": 500}}),
            )
            .unwrap();
        items += page["items"].as_u64().unwrap();
        added += page["added"].as_u64().unwrap();
        if page["complete"] == true {
            return (items, added);
        }
        cursor = page["cursor"].as_str().unwrap().to_owned();
    }
    panic!("the scan did not complete in 100 pages");
}

#[test]
fn missed_deliveries_are_read_back_once_each() {
    let Some(prism) = prism_or_skip() else { return };
    let hub = Arc::new(Mutex::new(Hub::default()));
    let h = hub.clone();
    let gh = StandIn::start(&prism, move |r| h.lock().unwrap().answer(r)).unwrap();
    hub.lock().unwrap().url = gh.url.clone();

    let suite = Suite::new(Path::new(BIN), "github-reconcile", &Suite::first_party()).unwrap();
    suite.start_all().unwrap();
    let secret = suite.dir.join("gh-secret");
    std::fs::write(&secret, GH_SECRET).unwrap();
    let token = suite.dir.join("gh-token");
    std::fs::write(&token, "ghp_reconcileTestToken\n").unwrap();
    let doc = json!({
        "connections": [{"name": "gh", "type": "github", "config": {"api_url": gh.url},
            "secret_refs": {"webhook_secret": format!("file:{}", secret.display()),
                            "token": format!("file:{}", token.display())}}],
        "scopes": [{"id": "demo", "entries": [{"type": "github", "name": "repo", "connection": "gh",
            "config": {"repository": REPO, "events": ["issues", "issue_comment"],
                       "reconcile_interval_s": 1}}]}]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // One delivery reaches ingressd live, and GitHub records it as delivered.
    let live = issue(1);
    assert_eq!(deliver(&suite, "guid-live", "issues", &live), 200);
    hub.lock()
        .unwrap()
        .attempt("guid-live", "issues", &live, 200, false);
    let first_id = 90_000;
    report(&suite, "past the live delivery", |r| {
        r["outcome"] == "complete" && r["checkpoint"] == json!(first_id.to_string())
    });
    assert_eq!(delivered(&suite), ["guid-live"]);

    // ingressd is down while GitHub tries four deliveries: an issue, a comment (whose
    // redelivery failed too), a push (an event the entry does not take) and an issue
    // of an event the entry does not take either (pull_request).
    suite.stop(Daemon::Ingressd);
    let comment = fixture("issue_comment.created.json");
    {
        let mut g = hub.lock().unwrap();
        g.attempt("guid-missed-1", "issues", &issue(2), 0, false);
        g.attempt("guid-missed-2", "issue_comment", &comment, 502, false);
        g.attempt(
            "guid-push",
            "push",
            &json!({"ref": "refs/heads/main",
            "repository": {"full_name": REPO}}),
            0,
            false,
        );
        g.attempt("guid-missed-2", "issue_comment", &comment, 0, true);
        g.attempt(
            "guid-pr",
            "pull_request",
            &fixture("pull_request.opened.json"),
            0,
            false,
        );
    }

    // ingressd starts, and its first pass reads them back: one Event each.
    suite.start(Daemon::Ingressd).unwrap();
    suite.wait_for_route(PATH).unwrap();
    let newest = 90_005;
    let r = report(&suite, "past the missed deliveries", |r| {
        r["outcome"] == "complete" && r["checkpoint"] == json!(newest.to_string())
    });
    assert_eq!(
        delivered(&suite),
        ["guid-live", "guid-missed-1", "guid-missed-2"],
        "{r}"
    );
    // The scan followed the delivery list's pages by their cursor.
    let lists = gh.requests("GET", &format!("/hooks/{HOOK_ID}/deliveries"));
    assert!(
        lists.iter().any(|r| r.query("cursor") == Some("c90004")),
        "{lists:#?}"
    );
    assert!(lists.iter().all(|r| r
        .query("per_page")
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| (1..=100).contains(&p))));
    // Only the failed deliveries were read; the delivered one was not.
    let read: Vec<String> = gh
        .requests("GET", "")
        .iter()
        .filter_map(|r| {
            r.path()
                .rsplit_once("/deliveries/")
                .map(|(_, id)| id.to_owned())
        })
        .collect();
    assert!(!read.is_empty());
    assert!(
        !read.contains(&"90000".to_owned()),
        "the delivered one was read: {read:?}"
    );

    // A later pass adds nothing.
    report(&suite, "of a later pass", |r| {
        r["outcome"] == "complete"
            && r["added"] == 0
            && r["checkpoint"] == json!(newest.to_string())
    });
    // Nor does a whole scan from no checkpoint: every missed delivery is observed
    // again (the comment once per failed attempt) and is the same Event.
    let (items, added) = scan_all(&suite);
    assert_eq!(added, 0, "{items} items");
    assert!(items >= 2, "{items} items");
    assert_eq!(delivered(&suite).len(), 3);

    // The missed issue arriving live now (a redelivery: the same GUID) adds nothing.
    assert_eq!(deliver(&suite, "guid-missed-1", "issues", &issue(2)), 200);
    assert_eq!(
        delivered(&suite),
        ["guid-live", "guid-missed-1", "guid-missed-2"]
    );

    // Every request fitted GitHub's description; nothing was written to GitHub.
    assert!(gh.violations().is_empty(), "{:#?}", gh.violations());
    assert!(gh.writes().is_empty(), "{:#?}", gh.writes());
}

#[test]
fn a_repository_without_our_webhook_or_a_token_without_access_fails_the_pass_clearly() {
    let Some(prism) = prism_or_skip() else { return };
    let forbid = Arc::new(Mutex::new(false));
    let f = forbid.clone();
    let gh = StandIn::start(&prism, move |r| {
        if r.path() != format!("/repos/{REPO}/hooks") {
            return None;
        }
        if *f.lock().unwrap() {
            return Some(Reply::error(
                403,
                "Resource not accessible by personal access token",
            ));
        }
        let mut other = example("hook").unwrap();
        other["config"]["url"] = json!("https://ci.example.com/hook");
        Some(Reply::json(200, &json!([other])))
    })
    .unwrap();
    let suite = Suite::new(
        Path::new(BIN),
        "github-reconcile-bad",
        &Suite::first_party(),
    )
    .unwrap();
    suite.start_all().unwrap();
    let secret = suite.dir.join("gh-secret");
    std::fs::write(&secret, GH_SECRET).unwrap();
    let token = suite.dir.join("gh-token");
    std::fs::write(&token, "ghp_reconcileTestToken\n").unwrap();
    let doc = json!({
        "connections": [{"name": "gh", "type": "github", "config": {"api_url": gh.url},
            "secret_refs": {"webhook_secret": format!("file:{}", secret.display()),
                            "token": format!("file:{}", token.display())}}],
        "scopes": [{"id": "demo", "entries": [{"type": "github", "name": "repo", "connection": "gh",
            "config": {"repository": REPO, "reconcile_interval_s": 1}}]}]
    });
    suite.apply_config(&doc, PATH).unwrap();
    let r = report(&suite, "failed for want of a hook", |r| {
        r["outcome"] == "failed"
    });
    let error = r["error"].as_str().unwrap();
    assert!(
        error.contains("has no webhook delivering to") && error.contains(PATH),
        "{r}"
    );
    assert!(
        r["checkpoint"].as_str().unwrap_or_default().is_empty(),
        "{r}"
    );

    *forbid.lock().unwrap() = true;
    let r = report(&suite, "failed for want of permission", |r| {
        r["error"].as_str().is_some_and(|e| e.contains("403"))
    });
    let error = r["error"].as_str().unwrap();
    assert!(
        error.contains("Resource not accessible by personal access token")
            && error.contains("Webhooks"),
        "{r}"
    );
    // Doctor says so too.
    let out = std::process::Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("github_webhooks")
            && text.contains("Resource not accessible by personal access token"),
        "{text}"
    );
    assert!(gh.violations().is_empty(), "{:#?}", gh.violations());
}
