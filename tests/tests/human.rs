#![allow(clippy::unwrap_used)]
//! People in the loop, end to end with real daemons and the bundled `human` package:
//!
//! - an agent turn (the fake `claude`, through the real `open-conduit mcp`) calls
//!   `human.ask` with choices; the Work waits with the question in `work show` and
//!   `asks`; `open-conduit ask answer` resumes it and the next turn's prompt carries
//!   the answer; the decision is a `core.action.answer` Event naming the person, and
//!   answering again applies nothing;
//! - a crash of every daemon (SIGKILL) between the answer and the resume loses no
//!   answer and applies none twice;
//! - a scope whose `human` entry asks for admission by a person holds new Work until
//!   `open-conduit work admit`, and `work reject` cancels it;
//! - `scopes[].admission.max_agent_turns` holds under a burst of 50 deliveries.
//!
//! Approvals of `github.open_pull_request` are in `human_gates.rs` (they need Prism).

mod common;
use common::*;

use oc_systest::{Daemon, Suite};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The agent's calls: on its first turn, one question with two choices.
const ASK_CALLS: &str = r#"[
 {"operation": "human.ask", "turn": "first", "request_id": "ask-base",
  "input": {"question": "Which branch should the fix go to?", "choices": ["main", "release-2.x"]}}
]"#;

/// The person the CLI acts for, as `open-conduit` names them (`cli:<user>`).
fn me() -> String {
    cli::asks::person()
}

/// The agent suite with a `human` entry configured as `human`, a webhook route to
/// binding `cc` (claude-code, the fake, `calls` as its script, granted `human.ask`),
/// and `scope_extra` merged into the scope.
fn suite_with(name: &str, human: Value, calls: &str, scope_extra: Value) -> (Suite, PathBuf) {
    let (suite, claude) = agent_suite(name);
    let rec = suite.dir.join("claude.jsonl");
    let mut c = config(&suite);
    let scope = &mut c["scopes"][0];
    scope["entries"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "human", "name": "people", "config": human}));
    scope["routes"] = json!([{"handler": "webhook", "binding": "cc", "config": {"entry": "ci"}}]);
    scope["bindings"] = json!([{
        "name": "cc", "executor": "claude-code", "operations": ["human.ask"],
        "config": {"binary": claude, "dir": suite.dir.join("work"),
                   "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                           "FAKE_CLAUDE_CALLS": calls,
                           "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
    }]);
    if let Some(extra) = scope_extra.as_object() {
        for (k, v) in extra {
            scope[k] = v.clone();
        }
    }
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    suite.apply_config(&c, HOOK).unwrap();
    (suite, rec)
}

/// Deliver `{"number": n}` and answer the Work it made.
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

fn work(suite: &Suite, id: &str) -> Value {
    suite.call("store.work_get", json!({ "id": id })).unwrap()["work"].clone()
}

/// The prompts the fake took in, in order, with whether each was a resumed segment.
fn prompts(rec: &Path) -> Vec<(String, bool)> {
    records(rec)
        .into_iter()
        .filter_map(|r| Some((r["prompt"].as_str()?.to_owned(), r["resumed"] == true)))
        .collect()
}

/// The open asks, as `asks --json` lists them.
fn open_asks(suite: &Suite) -> Vec<Value> {
    let (code, out) = cli(suite, &["--json", "asks"]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["asks"].as_array().cloned().unwrap_or_default()
}

/// The ask the Work `work_id` waits on, once it waits.
fn ask_of(suite: &Suite, work_id: &str) -> Value {
    wait_for("the agent's ask in `asks`", || {
        open_asks(suite)
            .into_iter()
            .find(|a| a["work_id"] == work_id && a["kind"] == "ask")
    })
}

/// Every `core.action.<action>` Event.
fn actions(suite: &Suite, action: &str) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"] == format!("core.action.{action}"))
        .collect()
}

#[test]
fn an_agent_asks_a_person_and_the_answer_reaches_its_next_turn() {
    let (suite, rec) = suite_with("human-ask", json!({}), ASK_CALLS, json!({}));
    let work_id = work_for(&suite, 1);

    // The turn asked and ended; the Work waits with the question visible.
    let mcp = wait_for("the first turn's MCP exchange", || {
        records(&rec)
            .into_iter()
            .find_map(|r| r["mcp"].as_array().cloned())
    });
    let call = mcp
        .iter()
        .find(|x| x["method"] == "tools/call human.ask")
        .unwrap_or_else(|| panic!("no human.ask call in {mcp:#?}"));
    assert_eq!(call["answer"]["result"]["isError"], false, "{call}");
    wait_for("the Work waiting", || {
        (work(&suite, &work_id)["state"] == "waiting").then_some(())
    });
    let ask = ask_of(&suite, &work_id);
    let id = ask["id"].as_str().unwrap().to_owned();
    assert_eq!(ask["text"], "Which branch should the fix go to?", "{ask}");
    assert_eq!(ask["choices"], json!(["main", "release-2.x"]), "{ask}");
    let (_, show) = cli(&suite, &["work", "show", &work_id]);
    assert!(
        show.contains("Which branch should the fix go to?") && show.contains("2. release-2.x"),
        "{show}"
    );
    let (_, listed) = cli(&suite, &["asks"]);
    assert!(
        listed.contains(&id) && listed.contains("--choice N"),
        "{listed}"
    );

    // A choice it does not offer is refused, and changes nothing.
    let (code, out) = cli(&suite, &["ask", "answer", &id, "--choice", "3"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("offers 2 choices"), "{out}");
    let (code, out) = cli(&suite, &["ask", "answer", &id, "maybe"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("not one of the choices"), "{out}");

    // The answer: the Work resumes, and the next turn's prompt carries it.
    let (code, out) = cli(&suite, &["ask", "answer", &id, "--choice", "2"]);
    assert_eq!(code, 0, "{out}");
    let resumed = wait_for("the resumed turn's prompt", || {
        prompts(&rec).into_iter().find(|(_, resumed)| *resumed)
    });
    assert!(resumed.0.contains("answer: release-2.x"), "{}", resumed.0);
    assert!(
        resumed.0.contains(&format!("answer by {}", me())),
        "{}",
        resumed.0
    );

    // The decision is one Event naming the person; the same answer again (by its
    // key) applies nothing, and the closed ask cannot be answered again.
    let answers = actions(&suite, "answer");
    assert_eq!(answers.len(), 1, "{answers:#?}");
    let data = &answers[0]["payload"];
    assert_eq!(data["caller"], me(), "{data}");
    assert_eq!(data["provider"], "human", "{data}");
    assert_eq!(data["decision"]["answer"], "release-2.x", "{data}");
    let (_, show) = cli(&suite, &["work", "show", &work_id]);
    assert!(
        show.contains(&format!("answer by {}: ", me())) && show.contains("answer=release-2.x"),
        "work show tells who decided what: {show}"
    );
    let (code, out) = cli(
        &suite,
        &[
            "work",
            "act",
            &work_id,
            "answer",
            "--provider",
            "human",
            "--key",
            &format!("answer/{id}"),
            "--input",
            &json!({"ask_id": id, "answer": "main"}).to_string(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("nothing was done again"), "{out}");
    let (code, out) = cli(&suite, &["ask", "answer", &id, "--choice", "1"]);
    assert_ne!(code, 0, "{out}");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(actions(&suite, "answer").len(), 1);
    assert_eq!(
        prompts(&rec).len(),
        2,
        "one turn asked, one took the answer: {:#?}",
        prompts(&rec)
    );
}

#[test]
fn a_crash_of_every_daemon_between_the_answer_and_the_resume_loses_nothing_and_applies_once() {
    let (suite, rec) = suite_with("human-crash", json!({}), ASK_CALLS, json!({}));

    // Work 1: schedulerd is down when the answer comes, and it is given twice.
    let first = work_for(&suite, 1);
    let ask1 = ask_of(&suite, &first);
    let id1 = ask1["id"].as_str().unwrap().to_owned();
    suite.kill(Daemon::Schedulerd);
    let (code, out) = cli(&suite, &["ask", "answer", &id1, "--choice", "1"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = cli(
        &suite,
        &[
            "work",
            "act",
            &first,
            "answer",
            "--provider",
            "human",
            "--key",
            &format!("answer/{id1}"),
            "--input",
            &json!({"ask_id": id1, "answer": "release-2.x"}).to_string(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("nothing was done again"), "{out}");
    suite.start(Daemon::Schedulerd).unwrap();
    let resumed = wait_for("work 1's resumed turn", || {
        prompts(&rec)
            .into_iter()
            .find(|(p, r)| *r && p.contains("answer: main"))
    });
    assert!(
        !resumed.0.contains("release-2.x"),
        "the second answer applied: {}",
        resumed.0
    );

    // Work 2: every daemon is SIGKILLed right after the answer is recorded.
    let second = work_for(&suite, 2);
    let ask2 = ask_of(&suite, &second);
    let id2 = ask2["id"].as_str().unwrap().to_owned();
    let (code, out) = cli(&suite, &["ask", "answer", &id2, "--choice", "2"]);
    assert_eq!(code, 0, "{out}");
    for d in [Daemon::Schedulerd, Daemon::Extrunner, Daemon::Storaged] {
        suite.kill(d);
    }
    for d in [Daemon::Storaged, Daemon::Extrunner, Daemon::Schedulerd] {
        suite.start(d).unwrap();
    }
    wait_for("work 2's resumed turn", || {
        prompts(&rec)
            .into_iter()
            .find(|(p, r)| *r && p.contains("answer: release-2.x"))
    });

    // One answer Event per ask, one resumed turn per Work.
    std::thread::sleep(Duration::from_secs(2));
    let answers = actions(&suite, "answer");
    assert_eq!(answers.len(), 2, "{answers:#?}");
    let resumed: Vec<_> = prompts(&rec).into_iter().filter(|(_, r)| *r).collect();
    assert_eq!(resumed.len(), 2, "{resumed:#?}");
}

#[test]
fn a_scope_with_admission_holds_new_work_until_a_person_admits_it() {
    let (suite, rec) = suite_with(
        "human-admit",
        json!({"admission": {"by": "person"}}),
        "[]",
        json!({}),
    );
    let held = work_for(&suite, 1);
    let hold = wait_for("the Work held", || {
        let w = work(&suite, &held);
        w.get("hold").filter(|h| h.is_object()).cloned()
    });
    assert_eq!(hold["owner"], "human", "{hold}");
    let listed = wait_for("the admission in `asks`", || {
        open_asks(&suite)
            .into_iter()
            .find(|a| a["kind"] == "admission" && a["work_id"] == held)
    });
    assert_eq!(listed["provider"], "human", "{listed}");
    let (_, show) = cli(&suite, &["work", "show", &held]);
    assert!(show.contains("held:"), "{show}");
    // Held: no attempt starts.
    std::thread::sleep(Duration::from_secs(2));
    assert!(prompts(&rec).is_empty(), "a held Work ran");
    assert_eq!(work(&suite, &held)["state"], "pending");

    let (code, out) = cli(&suite, &["work", "admit", &held]);
    assert_eq!(code, 0, "{out}");
    wait_for("the admitted Work's turn", || {
        (!prompts(&rec).is_empty()).then_some(())
    });
    let admits = actions(&suite, "admit");
    assert_eq!(admits.len(), 1, "{admits:#?}");
    assert_eq!(admits[0]["payload"]["caller"], me());
    let (_, show) = cli(&suite, &["work", "show", &held]);
    assert!(show.contains(&format!("admit by {}", me())), "{show}");

    // Another is refused: it is cancelled, and never runs.
    let refused = work_for(&suite, 2);
    wait_for("the second Work held", || {
        work(&suite, &refused)
            .get("hold")
            .filter(|h| h.is_object())
            .cloned()
    });
    let (code, out) = cli(
        &suite,
        &["work", "reject", &refused, "--reason", "not this one"],
    );
    assert_eq!(code, 0, "{out}");
    wait_for("the refused Work cancelled", || {
        (work(&suite, &refused)["state"] == "cancelled").then_some(())
    });
    assert_eq!(prompts(&rec).len(), 1, "{:#?}", prompts(&rec));
}

/// Parses RFC 3339 into milliseconds.
fn ms(t: &Value) -> Option<i64> {
    protocol::time::parse_rfc3339_ms(t.as_str()?)
}

#[test]
fn at_most_n_agent_turns_run_at_once_under_a_burst_of_fifty_deliveries() {
    const N: usize = 2;
    const BURST: u64 = 50;
    let (suite, _rec) = suite_with(
        "human-budget",
        json!({}),
        "[]",
        json!({"admission": {"max_agent_turns": N}}),
    );
    let works: Vec<String> = (1..=BURST).map(|n| work_for(&suite, n)).collect();
    let mut intervals = Vec::new();
    for w in &works {
        let ex = wait_within("every Work's turn ended", Duration::from_secs(600), || {
            let ex = suite.call("store.executions", json!({"work_id": w})).ok()?;
            let e = ex["executions"].as_array()?.first()?.clone();
            (e["settled_at"].is_string()).then_some(e)
        });
        intervals.push((
            ms(&ex["started_at"]).unwrap(),
            ms(&ex["settled_at"]).unwrap(),
        ));
    }
    // The most turns running at one moment, from when each started and ended.
    let mut edges: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_by_key(|(t, d)| (*t, *d));
    let (mut now, mut most) = (0, 0);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    assert!(
        most as usize <= N,
        "{most} agent turns ran at once, over the scope's max_agent_turns {N}: {intervals:?}"
    );
}
