//! What the sandbox tests share: the real `srt` (pinned in tests/srt), whether it can
//! confine a command here, the packages with the srt provider, and reading a shell
//! run's Work, executions and output.

use super::{artifact_text, deliver, wait_for};
use oc_systest::{Package, Suite};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// srt as `npm ci --prefix tests/srt` installs it.
pub fn srt_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("srt/node_modules/.bin/srt")
}

/// Whether srt can confine a command here; says why not when it cannot (and fails
/// under OC_REQUIRE_PEERS=1 when a package is missing).
pub fn have_srt() -> bool {
    let srt = srt_bin();
    let mut missing = Vec::new();
    if !srt.exists() {
        missing.push("srt (npm ci --prefix tests/srt)");
    }
    for (tool, package) in [("bwrap", "bubblewrap"), ("socat", "socat")] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            missing.push(package);
        }
    }
    if !missing.is_empty() {
        assert!(
            std::env::var_os("OC_REQUIRE_PEERS").is_none(),
            "missing {missing:?}, and OC_REQUIRE_PEERS is set (.ci/run installs them)"
        );
        eprintln!("SKIPPED: missing {missing:?} (.ci/run installs them)");
        return false;
    }
    // The kernel must let bubblewrap make its namespaces.
    let probe = Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-user",
            "--unshare-net",
            "true",
        ])
        .output();
    match probe {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!(
                "SKIPPED: bubblewrap cannot make user namespaces here: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: bubblewrap does not run: {e}");
            false
        }
    }
}

/// The first-party packages and the srt provider.
pub fn packages() -> Vec<Package> {
    let mut p = Suite::first_party();
    p.push(Package {
        name: "srt".into(),
        manifest: oc_srt::MANIFEST.into(),
        command: vec!["ext-srt".into()],
    });
    p
}

/// A binding's srt sandbox, with `extra` merged into its config.
pub fn srt_sandbox(extra: Value) -> Value {
    let mut config = json!({"srt": srt_bin().display().to_string()});
    for (k, v) in extra.as_object().into_iter().flatten() {
        config[k] = v.clone();
    }
    json!({"type": "srt", "config": config})
}

/// Delivers `{"number": number}` (correlated by number) and expects a 200.
pub fn send(suite: &Suite, delivery: &str, number: u64) {
    let body = format!("{{\"number\": {number}}}");
    let r = deliver(suite, delivery, body.as_bytes()).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The Work of the `number`th delivery: the first Work of scope `demo` not in `before`.
pub fn work_of(suite: &Suite, number: u64, before: &[&str]) -> String {
    wait_for(&format!("the Work of delivery {number}"), || {
        let w = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .ok()?;
        w["works"]
            .as_array()?
            .iter()
            .filter_map(|w| w["id"].as_str())
            .find(|id| !before.contains(id))
            .map(str::to_owned)
    })
}

/// The executions of `work_id`.
pub fn executions(suite: &Suite, work_id: &str) -> Vec<Value> {
    suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap()["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The first execution of `work_id` that settled (completed or failed).
pub fn ended(suite: &Suite, work_id: &str) -> Value {
    wait_for(&format!("the end of {work_id}"), || {
        executions(suite, work_id)
            .into_iter()
            .find(|e| e["state"] == "completed" || e["state"] == "failed")
    })
}

/// The text of each artifact of an execution's result.
pub fn artifacts(suite: &Suite, execution: &Value) -> Vec<String> {
    execution["result"]["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|id| artifact_text(suite, id))
        .collect()
}

/// The run's standard output (its artifact holding `done=`).
pub fn output(suite: &Suite, execution: &Value) -> String {
    artifacts(suite, execution)
        .into_iter()
        .find(|t| t.contains("done="))
        .unwrap_or_default()
}

/// The `name=value` words of a run's output.
pub fn fields(text: &str) -> BTreeMap<String, String> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A shell run's folder (`<state>/extensions/shell/runs/<execution>`).
pub fn run_dir(suite: &Suite, execution_id: &str) -> PathBuf {
    suite
        .dir
        .join("state/extensions/shell/runs")
        .join(execution_id)
}

/// The running execution of `work_id` once its command has recorded a start in
/// its own tmp folder (`tmp/count`).
pub fn started_run(suite: &Suite, work_id: &str) -> String {
    wait_for("the command's start", || {
        executions(suite, work_id).into_iter().find_map(|e| {
            let id = e["id"].as_str()?.to_owned();
            run_dir(suite, &id).join("tmp/count").exists().then_some(id)
        })
    })
}

/// The starts a run recorded in its `tmp/count`.
pub fn starts(suite: &Suite, execution_id: &str) -> usize {
    std::fs::read_to_string(run_dir(suite, execution_id).join("tmp/count"))
        .unwrap_or_default()
        .lines()
        .count()
}
