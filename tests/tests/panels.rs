#![allow(clippy::unwrap_used)]
//! Panels and pages of the web view, end to end with real daemons and the bundled
//! `human` package: an agent turn (the fake `claude`, through the real `open-conduit
//! mcp`) calls `human.ask` with choices; extrunner's `view.panels` on that Work shows
//! the question with the choices as buttons; `view.pages` lists human's page `asks`
//! and `view.page` shows the ask there while it is open; pressing a button as the web
//! view does (`ext.act` with the panel's provider and Work and the button's action and
//! input) answers the ask, the Work wakes with the answer in its next turn's prompt,
//! and the ask is gone from both.

mod common;
use common::*;

use oc_systest::Suite;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The agent's calls: on its first turn, one question with two choices.
const ASK_CALLS: &str = r#"[
 {"operation": "human.ask", "turn": "first", "request_id": "ask-panels",
  "input": {"question": "Which branch should the fix go to?", "choices": ["main", "release-2.x"]}}
]"#;

/// The agent suite with a `human` entry anyone may answer, and a webhook route to
/// binding `cc` (claude-code, the fake, scripted with [`ASK_CALLS`], granted
/// `human.ask`).
fn suite(name: &str) -> (Suite, PathBuf) {
    let (suite, claude) = agent_suite(name);
    let rec = suite.dir.join("claude.jsonl");
    let mut c = config(&suite);
    let scope = &mut c["scopes"][0];
    scope["entries"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "human", "name": "people", "config": {}}));
    scope["routes"] = json!([{"handler": "webhook", "binding": "cc", "config": {"entry": "ci"}}]);
    scope["bindings"] = json!([{
        "name": "cc", "executor": "claude-code", "operations": ["human.ask"],
        "config": {"binary": claude, "dir": suite.dir.join("work"),
                   "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                           "FAKE_CLAUDE_CALLS": ASK_CALLS,
                           "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
    }]);
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    suite.apply_config(&c, HOOK).unwrap();
    (suite, rec)
}

/// The Work a delivery of `{"number": n}` made.
fn work_for(suite: &Suite, n: u64) -> String {
    let body = serde_json::to_vec(&json!({"number": n})).unwrap();
    let r = deliver(suite, &format!("d-{n}"), &body).unwrap();
    assert!(r.status / 100 == 2, "delivery {n}: {}", r.status);
    let key = format!("webhook:demo/ci:{n}");
    wait_for("the delivery's Work", || {
        let works = suite.call("store.works", json!({"scope_id": "demo", "key": key}));
        works.ok()?["works"][0]["id"].as_str().map(str::to_owned)
    })
}

/// The prompts the fake took in, in order, with whether each was a resumed segment.
fn prompts(rec: &Path) -> Vec<(String, bool)> {
    records(rec)
        .into_iter()
        .filter_map(|r| Some((r["prompt"].as_str()?.to_owned(), r["resumed"] == true)))
        .collect()
}

/// `view.panels` of the Work: (its panels, its errors).
fn work_panels(suite: &Suite, work_id: &str) -> (Vec<Value>, Vec<Value>) {
    let r = suite
        .call("view.panels", json!({ "work_id": work_id }))
        .unwrap_or_else(|e| panic!("view.panels: {e}"));
    let list = |k: &str| r[k].as_array().cloned().unwrap_or_default();
    (list("panels"), list("errors"))
}

/// `view.page` of human's `asks`: its panels, with no errors.
fn asks_page(suite: &Suite) -> Vec<Value> {
    let r = suite
        .call("view.page", json!({"package": "human", "page": "asks"}))
        .unwrap_or_else(|e| panic!("view.page: {e}"));
    assert_eq!(r.get("errors"), None, "{r}");
    r["panels"].as_array().cloned().unwrap_or_default()
}

#[test]
fn an_agents_ask_is_a_panel_whose_button_answers_it() {
    let (suite, rec) = suite("panels-ask");
    let work_id = work_for(&suite, 1);
    wait_for("the Work waiting on its ask", || {
        let w = suite
            .call("store.work_get", json!({ "id": work_id }))
            .ok()?;
        (w["work"]["state"] == "waiting").then_some(())
    });

    // The Work's panels: human's, the question with its choices as buttons.
    let (panels, errors) = work_panels(&suite, &work_id);
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(panels.len(), 1, "{panels:#?}");
    let shown = &panels[0];
    assert_eq!(shown["provider"], "human", "{shown}");
    let panel = &shown["panel"];
    assert_eq!(panel["work_id"], work_id.as_str(), "{panel}");
    let section = &panel["sections"][0];
    assert_eq!(
        section["text"], "Which branch should the fix go to?",
        "{panel}"
    );
    let buttons = section["buttons"].as_array().unwrap();
    let labels: Vec<&str> = buttons
        .iter()
        .map(|b| b["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["main", "release-2.x"], "{panel}");

    // The pages: human's `asks`, which shows the ask while it is open.
    let pages = suite.call("view.pages", json!({})).unwrap();
    assert!(
        pages["pages"].as_array().unwrap().contains(&json!({
            "package": "human", "id": "asks", "title": "What waits for a person",
            "summary": "Agents' questions, operations waiting for approval and Work waiting for admission, in every scope"
        })),
        "{pages}"
    );
    let page = asks_page(&suite);
    let on_page: Vec<(&str, &str)> = page
        .iter()
        .map(|p| {
            (
                p["provider"].as_str().unwrap(),
                p["panel"]["work_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(on_page, [("human", work_id.as_str())], "{page:#?}");
    assert_eq!(page[0]["panel"]["id"], panel["id"]);
    let e = suite
        .call("view.page", json!({"package": "human", "page": "nope"}))
        .unwrap_err();
    assert_eq!(e["data"]["code"], "not_found", "{e}");

    // Pressing `release-2.x` as the web view does: ext.act with the panel's
    // provider and Work, the button's action and input.
    let pressed = &buttons[1];
    let done = suite
        .call(
            "ext.act",
            json!({
                "work_id": panel["work_id"], "provider": shown["provider"],
                "action": pressed["action"], "input": pressed["input"],
                "caller": "web:alice", "key": format!("web/{}/release", panel["id"].as_str().unwrap()),
            }),
        )
        .unwrap_or_else(|e| panic!("ext.act: {e}"));
    assert_eq!(done["added"], true, "{done}");

    // The Work wakes, its next turn carrying the answer and who gave it.
    let resumed = wait_for("the resumed turn's prompt", || {
        prompts(&rec).into_iter().find(|(_, resumed)| *resumed)
    });
    assert!(resumed.0.contains("answer: release-2.x"), "{}", resumed.0);
    assert!(resumed.0.contains("answer by web:alice"), "{}", resumed.0);

    // Answered, the ask is on neither the Work nor the page.
    let (panels, errors) = work_panels(&suite, &work_id);
    assert!(
        panels.is_empty() && errors.is_empty(),
        "{panels:#?} {errors:#?}"
    );
    assert!(asks_page(&suite).is_empty());
}
