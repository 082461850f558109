#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The web view in a real browser (Debian's headless Chromium through chromedriver)
//! against the real suite with webd, socket-activated as systemd would: the suite
//! holds webd's listening socket and hands it to each start.
//!
//! One session, as an operator would spend it:
//! - signs in with a token from the real `open-conduit web login` (the cookie is
//!   HttpOnly and SameSite=Strict);
//! - sees a Work that a webhook delivery made appear in the Works list without the
//!   page reloading (a marker set in the page's window survives);
//! - opens it and watches its shell run's output arrive while it runs;
//! - stops it with the Stop button: the Work is cancelled and the decision names
//!   `web:alice`, on the page and in the store;
//! - traces the delivery's Event through the routes on the config page;
//! - sees the `human` package's asks page and the Work's panel, drawn by the core,
//!   and answers the agent's question with the panel's button: the agent's next
//!   turn carries the answer by `web:alice`, and the page empties by itself;
//! - SIGKILLs webd with the page open: the page says it is reconnecting, a Work made
//!   while webd was down is in the list once webd is started again, with no reload.
//!
//! No page carries a configured secret. Screenshots of the main pages go to
//! `$OC_SCREENSHOTS` when set (docs/screenshots/ was made so), else to the suite's
//! directory, and are checked to be PNGs. Nothing here measures time: the bounds
//! only keep a broken run from hanging.

mod common;
use common::*;

use oc_systest::webdriver::Browser;
use oc_systest::{Daemon, Suite, HANG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const ASK_HOOK: &str = "/hooks/ask";

/// The agent's calls: on its first turn, one question with two choices.
const ASK_CALLS: &str = r#"[
 {"operation": "human.ask", "turn": "first", "request_id": "ask-web",
  "input": {"question": "Which branch should the fix go to?", "choices": ["main", "release-2.x"]}}
]"#;

/// The configuration: deliveries on `/hooks/ci` run binding `run` (a shell script
/// that prints a line, waits for the file `go`, prints another and waits for the
/// file `end`); deliveries on `/hooks/ask` run binding `cc` (the fake claude, which
/// asks a person through `human`).
fn configure(suite: &Suite, claude: &Path) -> (PathBuf, PathBuf) {
    let (go, end) = (suite.dir.join("go"), suite.dir.join("end"));
    let script = format!(
        "echo 'step one'\n\
         while [ ! -e '{go}' ]; do sleep 0.05; done\n\
         echo 'step two'\n\
         while [ ! -e '{end}' ]; do sleep 0.05; done\n\
         echo 'the end'",
        go = go.display(),
        end = end.display()
    );
    let rec = suite.dir.join("claude.jsonl");
    let mut c = config(suite);
    let scope = &mut c["scopes"][0];
    let entries = scope["entries"].as_array_mut().unwrap();
    entries.push(json!({"type": "human", "name": "people", "config": {}}));
    entries.push(
        json!({"type": "webhook", "name": "ask", "connection": "hooks",
        "config": {"path": ASK_HOOK, "delivery_id": {"header": "X-Delivery-Id"},
                   "correlate": "/number"}}),
    );
    scope["routes"] = json!([
        {"handler": "webhook", "binding": "run", "config": {"entry": "ci"}},
        {"handler": "webhook", "binding": "cc", "config": {"entry": "ask"}}
    ]);
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    // The deadline only bounds what a failed test would leave behind.
    scope["bindings"] = json!([
        {"name": "run", "executor": "shell",
         "config": {"script": script, "deadline_s": 300, "grace_s": 1}},
        {"name": "cc", "executor": "claude-code", "operations": ["human.ask"],
         "config": {"binary": claude, "dir": suite.dir.join("work"),
                    "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                            "FAKE_CLAUDE_CALLS": ASK_CALLS,
                            "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}}
    ]);
    suite.apply_config(&c, HOOK).unwrap();
    suite.wait_for_route(ASK_HOOK).unwrap();
    (go, end)
}

/// A signed delivery of `{"number": n}` on `path`; the Work it made.
fn delivery(suite: &Suite, path: &str, n: u64) -> String {
    let body = serde_json::to_vec(&json!({ "number": n })).unwrap();
    let r = oc_systest::post(
        suite.http,
        path,
        &[
            ("Content-Type", "application/json".into()),
            ("X-Delivery-Id", format!("d-{n}")),
            (
                "X-Signature-256",
                oc_systest::sign_sha256(SECRET.as_bytes(), &body),
            ),
        ],
        &body,
    )
    .unwrap();
    assert!(r.status / 100 == 2, "delivery {n}: {}", r.status);
    let entry = path.trim_start_matches("/hooks/");
    let key = format!("webhook:demo/{entry}:{n}");
    wait_for("the delivery's Work", || {
        let works = suite.call("store.works", json!({"scope_id": "demo", "key": key}));
        works.ok()?["works"][0]["id"].as_str().map(str::to_owned)
    })
}

/// `open-conduit web login --name NAME`, as an operator runs it: the token.
fn login(suite: &Suite, name: &str) -> String {
    let out = Command::new(BIN)
        .args(["open-conduit", "web", "login", "--name", name, "--state"])
        .arg(suite.dir.join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "web login: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The page's whole HTML, as the browser holds it now.
fn html(b: &Browser) -> String {
    b.execute("return document.documentElement.outerHTML;", vec![])
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Wait until the element `css` shows a text containing `needle`: that text.
fn wait_text(b: &Browser, what: &str, css: &str, needle: &str) -> String {
    b.wait_for(what, HANG, |b| {
        let t = b.text(css)?;
        Ok(t.contains(needle).then_some(t))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", html(b)))
}

/// The live indicator's text.
fn live_says(b: &Browser, text: &str) {
    wait_text(
        b,
        &format!("the live indicator saying {text:?}"),
        "#live",
        text,
    );
}

/// The marker a test sets in the page's window: gone if the page was reloaded.
fn marker(b: &Browser) -> Value {
    b.execute("return window.ocTestMarker || null;", vec![])
        .unwrap()
}

struct Shots {
    dir: PathBuf,
}

impl Shots {
    fn take(&self, b: &Browser, name: &str) {
        let path = self.dir.join(format!("{name}.png"));
        b.screenshot(&path).unwrap();
        let png = std::fs::read(&path).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{}", path.display());
    }
}

#[test]
fn an_operator_watches_stops_traces_answers_and_rides_out_a_webd_restart() {
    let Some(b) = Browser::start().expect("the browser") else {
        return;
    };
    let (suite, claude) = agent_suite("web-browser");
    let (go, end) = configure(&suite, &claude);
    suite.start(Daemon::Webd).unwrap();
    let token = login(&suite, "alice");
    let web = format!("http://{}", suite.web);
    let shots = Shots {
        dir: std::env::var_os("OC_SCREENSHOTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| suite.dir.join("screenshots")),
    };
    std::fs::create_dir_all(&shots.dir).unwrap();
    let mut pages = Vec::new();

    // Signing in: the Works page sends the browser to the login form.
    b.goto(&format!("{web}/works")).unwrap();
    assert!(
        b.url().unwrap().contains("/login?next="),
        "{}",
        b.url().unwrap()
    );
    shots.take(&b, "login");
    b.send_keys("#token", &token).unwrap();
    b.click("form.login button[type=submit]").unwrap();
    b.wait_for("the Works page", HANG, |b| {
        Ok(b.url()?.ends_with("/works").then_some(()))
    })
    .unwrap();
    let cookie = b
        .cookies()
        .unwrap()
        .into_iter()
        .find(|c| c.name == "oc_session")
        .expect("the session cookie");
    assert!(cookie.http_only, "{cookie:?}");
    assert_eq!(cookie.same_site.as_deref(), Some("Strict"), "{cookie:?}");
    assert!(!cookie.value.contains(&token));
    assert!(b.text("header").unwrap().contains("web:alice"));
    live_says(&b, "live");
    b.execute("window.ocTestMarker = 'same page'; return 1;", vec![])
        .unwrap();

    // A delivery's Work appears without a reload.
    let run = delivery(&suite, HOOK, 1);
    let link = format!("#works a[href=\"/works/{run}\"]");
    b.wait_for("the new Work in the list", HANG, |b| {
        Ok(b.find_all(&link)?.first().map(drop))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", html(&b)));
    assert_eq!(marker(&b), json!("same page"), "the page was reloaded");
    pages.push(html(&b));

    // Its page: the run's output as it comes.
    b.click(&link).unwrap();
    wait_text(&b, "the first line, live", "#output", "step one");
    std::fs::write(&go, b"").unwrap();
    wait_text(&b, "the second line, live", "#output", "step two");
    wait_text(&b, "the running attempt", "#story", "running");
    shots.take(&b, "work");
    pages.push(html(&b));

    // Stop, with the button: cancelled, and the decision names alice.
    b.click("button.act[data-action=\"stop\"]").unwrap();
    wait_text(&b, "the Work cancelled", "#story dl.facts", "cancelled");
    let decisions = wait_text(&b, "the decision by alice", "#story", "web:alice");
    assert!(decisions.contains("stop"), "{decisions}");
    let stop = suite
        .events()
        .unwrap()
        .into_iter()
        .find(|e| e["type"] == "core.action.stop")
        .expect("the stop Event");
    assert_eq!(stop["payload"]["caller"], "web:alice", "{stop}");
    assert_eq!(stop["payload"]["work_id"], run.as_str(), "{stop}");
    std::fs::write(&end, b"").unwrap();

    // The config page: a route trace of the delivery's Event.
    let received = suite
        .events()
        .unwrap()
        .into_iter()
        .find(|e| e["source"] == HOOK_SOURCE)
        .expect("the delivery's Event");
    let seq = received["seq"].as_i64().unwrap();
    b.goto(&format!("{web}/config")).unwrap();
    wait_text(&b, "the check", "#check-result", "");
    b.click("form.trace select[name=scope] option[value=\"demo\"]")
        .unwrap();
    b.click(&format!(
        "form.trace select[name=sample] option[value=\"{seq}\"]"
    ))
    .unwrap();
    b.click("form.trace button[type=submit]").unwrap();
    let trace = wait_text(&b, "the trace", "#trace-result", "matched");
    assert!(trace.contains("run"), "{trace}");
    assert!(trace.contains(HOOK_SOURCE), "{trace}");
    shots.take(&b, "config");
    pages.push(html(&b));

    // human's page and panel, drawn by the core; the panel's button answers.
    let asking = delivery(&suite, ASK_HOOK, 2);
    wait_for("the Work waiting on its ask", || {
        let w = suite.call("store.work_get", json!({ "id": asking })).ok()?;
        (w["work"]["state"] == "waiting").then_some(())
    });
    b.goto(&format!("{web}/works/{asking}")).unwrap();
    let panel = wait_text(
        &b,
        "human's panel on the Work",
        "#story",
        "Which branch should the fix go to?",
    );
    assert!(panel.contains("release-2.x"), "{panel}");
    pages.push(html(&b));
    b.goto(&format!("{web}/pages")).unwrap();
    b.click("a[href=\"/pages/human/asks\"]").unwrap();
    wait_text(
        &b,
        "the ask on human's page",
        "#page-panels",
        "Which branch should the fix go to?",
    );
    shots.take(&b, "asks");
    pages.push(html(&b));
    let buttons = b
        .find_all("#page-panels button.act[data-provider=\"human\"]")
        .unwrap();
    assert_eq!(buttons.len(), 2, "{}", html(&b));
    assert_eq!(
        b.text("#page-panels button.act[data-provider=\"human\"]:nth-of-type(2)")
            .unwrap(),
        "release-2.x"
    );
    b.click("#page-panels button.act[data-provider=\"human\"]:nth-of-type(2)")
        .unwrap();
    wait_text(
        &b,
        "the answered ask gone",
        "#page-panels",
        "Nothing here now",
    );
    let rec = suite.dir.join("claude.jsonl");
    let resumed = wait_for("the resumed turn's prompt", || {
        records(&rec).into_iter().find_map(|r| {
            (r["resumed"] == true).then(|| r["prompt"].as_str().unwrap_or("").to_owned())
        })
    });
    assert!(resumed.contains("answer: release-2.x"), "{resumed}");
    assert!(resumed.contains("answer by web:alice"), "{resumed}");

    // SIGKILL webd with the Works page open; a Work made while it is down is in the
    // list once it is back, and the page was never reloaded.
    b.goto(&format!("{web}/works")).unwrap();
    live_says(&b, "live");
    b.execute("window.ocTestMarker = 'kept'; return 1;", vec![])
        .unwrap();
    shots.take(&b, "works");
    suite.kill(Daemon::Webd);
    live_says(&b, "reconnecting");
    let later = delivery(&suite, HOOK, 3);
    suite.start(Daemon::Webd).unwrap();
    live_says(&b, "live");
    let link = format!("#works a[href=\"/works/{later}\"]");
    b.wait_for("the Work made while webd was down", HANG, |b| {
        Ok(b.find_all(&link)?.first().map(drop))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", html(&b)));
    for id in [&run, &asking] {
        assert!(
            !b.find_all(&format!("#works a[href=\"/works/{id}\"]"))
                .unwrap()
                .is_empty(),
            "{id} is still listed"
        );
    }
    assert_eq!(marker(&b), json!("kept"), "the page was reloaded");
    pages.push(html(&b));

    // No page carried a secret.
    for page in &pages {
        for secret in [SECRET, GH_SECRET, token.as_str()] {
            assert!(!page.contains(secret), "a page carries a secret: {page}");
        }
    }
}
