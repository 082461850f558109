#![allow(clippy::unwrap_used)]
//! The playbooks reach the agent: extrunner writes the agents' plugin from every
//! package's playbooks (the github package's `github-issue` and `github-review`,
//! laid out as the bundled packages are), schedulerd gives its directory to each run
//! (`RunRequest.playbook_dir`), and claude-code passes it as `--plugin-dir` to a
//! binding that names a `playbook`, whose turns start on
//! `/open-conduit:<playbook> <args>`. With the fake `claude` (what it was given), then
//! with the real Claude Code CLI (the skill's text reaches the model).

mod common;
use common::claude::the_cli;
use common::*;

use oc_systest::messages::{MessagesApi, Reply};
use oc_systest::{Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + HANG * 2;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {:?}", HANG * 2);
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn script(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn flag(argv: &Value, name: &str) -> Option<String> {
    let a = argv.as_array()?;
    let i = a.iter().position(|x| x == name)?;
    a.get(i + 1)?.as_str().map(str::to_owned)
}

/// The suite with the first-party packages (and srt when `sandbox` is given),
/// linear, jira and claude-code, every daemon started, and a binding `cc` with `config` (and
/// `sandbox`) routed from the webhook entry `ci`.
fn started(name: &str, config: Value, sandbox: Option<Value>) -> Suite {
    let mut packages = if sandbox.is_some() {
        common::sandbox::packages()
    } else {
        Suite::first_party()
    };
    packages.push(Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    // The trackers' playbooks join the plugin with github's.
    for (name, manifest) in [("linear", oc_linear::MANIFEST), ("jira", oc_jira::MANIFEST)] {
        packages.push(Package {
            name: name.into(),
            manifest: manifest.into(),
            command: vec![format!("ext-{name}")],
        });
    }
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    let tbdir = suite.dir.join("toolbelt");
    script(
        &tbdir.join("open-conduit"),
        &format!("#!/bin/sh\nexec '{BIN}' \"$@\"\n"),
    );
    suite.set_args(
        Daemon::Schedulerd,
        &["--toolbelt-dir", tbdir.to_str().unwrap()],
    );
    suite.start_all().unwrap();
    let mut c = common::config(&suite);
    let mut binding = json!({"name": "cc", "executor": "claude-code", "config": config});
    if let Some(s) = sandbox {
        binding["sandbox"] = s;
    }
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "cc", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([binding]);
    suite.apply_config(&c, HOOK).unwrap();
    suite
}

/// The plugin's directory is the one extrunner wrote under its state, holding the
/// github, linear and jira packages' playbooks as shipped.
fn assert_is_the_plugin(suite: &Suite, dir: &Path) {
    assert_eq!(dir, suite.dir.join("state/playbooks/plugin"));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join(".claude-plugin/plugin.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["name"], "open-conduit", "{manifest}");
    let shipped = [
        oc_github::playbooks::PLAYBOOKS,
        oc_linear::playbooks::PLAYBOOKS,
        oc_jira::playbooks::PLAYBOOKS,
    ];
    for (rel, text) in shipped.into_iter().flatten() {
        let path = dir.join("skills").join(rel);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap_or_default(),
            *text,
            "{}",
            path.display()
        );
    }
    for skill in ["github-issue", "linear-issue", "jira-issue"] {
        assert!(dir.join(format!("skills/{skill}/SKILL.md")).is_file());
    }
}

#[test]
fn a_binding_naming_a_playbook_runs_claude_with_the_plugin_the_host_wrote() {
    let probe = std::env::temp_dir().join(format!("oc-playbooks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&probe);
    let rec = probe.join("claude.jsonl");
    let work_dir = probe.join("work");
    let claude_config = probe.join("claude-config");
    std::fs::create_dir_all(&work_dir).unwrap();
    let claude = probe.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    let suite = started(
        "playbooks",
        json!({"binary": claude, "dir": work_dir, "playbook": "github-issue",
               "env": {"FAKE_CLAUDE_RECORD": rec, "CLAUDE_CONFIG_DIR": claude_config}}),
        None,
    );
    assert_eq!(
        deliver(&suite, "p-1", br#"{"number": 9}"#).unwrap().status,
        200
    );
    let invocation = wait_for("the turn's launch", || {
        std::fs::read_to_string(&rec)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r.get("argv").is_some())
    });
    let dir = flag(&invocation["argv"], "--plugin-dir")
        .unwrap_or_else(|| panic!("no --plugin-dir: {invocation}"));
    assert_is_the_plugin(&suite, Path::new(&dir));
    // The turn starts on the playbook's skill with the Work's number.
    let transcript = wait_for("the prompt in the transcript", || {
        common::claude::files_containing(&claude_config, b"/open-conduit:github-issue 9")
            .into_iter()
            .next()
    });
    assert!(transcript.extension().is_some_and(|e| e == "jsonl"));
    drop(suite);
    let _ = std::fs::remove_dir_all(&probe);
}

#[test]
fn the_real_claude_code_cli_loads_the_playbook_from_the_plugin() {
    let Some(cli) = the_cli() else { return };
    let api = MessagesApi::start_on("127.0.0.1", |req| {
        // Every request gets a plain answer: the turn ends on it.
        let _ = req;
        Reply::message(vec![Reply::text("done")], 100, 10)
    })
    .unwrap();
    let probe: PathBuf =
        std::env::temp_dir().join(format!("oc-playbooks-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&probe);
    let work_dir = probe.join("work");
    std::fs::create_dir_all(&work_dir).unwrap();
    let suite = started(
        "playbooks-cli",
        json!({"binary": cli, "dir": work_dir, "model": "claude-test-model",
               "playbook": "github-issue", "structured": false,
               "env": {"ANTHROPIC_BASE_URL": api.base_url(),
                       "ANTHROPIC_API_KEY": "sk-ant-test-playbooks",
                       "CLAUDE_CONFIG_DIR": probe.join("claude-config"),
                       "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                       "DISABLE_ERROR_REPORTING": "1",
                       "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                       "IS_SANDBOX": "1"}}),
        None,
    );
    assert_eq!(
        deliver(&suite, "p-1", br#"{"number": 9}"#).unwrap().status,
        200
    );
    // The skill's own text (not only the command naming it) reaches the model: claude
    // found `github-issue` in the plugin named `open-conduit`.
    let skill_heading = "# Work a GitHub issue";
    let told = wait_for("the skill's text in a model request", || {
        api.messages()
            .into_iter()
            .map(|r| r.text())
            .find(|t| t.contains(skill_heading))
    });
    assert!(told.contains("git push origin HEAD"), "{told}");
    assert!(told.contains("github.open_pull_request"), "{told}");
    drop(suite);
    let _ = std::fs::remove_dir_all(&probe);
}

/// In an srt sandbox, the plugin (under the host's state directory, which every
/// sandbox is denied) is readable: the host lets a run's read need of it through, and
/// the turn completes.
#[test]
fn a_sandboxed_turn_reads_the_playbooks() {
    if !common::sandbox::have_srt() {
        return;
    }
    let probe = std::env::temp_dir().join(format!("oc-playbooks-srt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&probe);
    let work_dir = probe.join("work");
    let claude_config = probe.join("claude-config");
    std::fs::create_dir_all(&work_dir).unwrap();
    std::fs::create_dir_all(&claude_config).unwrap();
    let rec = claude_config.join("record.jsonl");
    let claude = probe.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    let name = "playbooks-srt";
    let skill = std::env::temp_dir()
        .join(format!("oc-suite-{name}-{}", std::process::id()))
        .join("state/playbooks/plugin/skills/github-issue/SKILL.md");
    let suite = started(
        name,
        json!({"binary": claude, "dir": work_dir, "playbook": "github-issue",
               "env": {"FAKE_CLAUDE_RECORD": rec, "FAKE_CLAUDE_STATE": "finished",
                       "FAKE_CLAUDE_PROBE": skill, "CLAUDE_CONFIG_DIR": claude_config}}),
        Some(common::sandbox::srt_sandbox(json!({}))),
    );
    common::sandbox::send(&suite, "ps-1", 5);
    let work = common::sandbox::work_of(&suite, 5, &[]);
    let ex = common::sandbox::ended(&suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    let launch = std::fs::read_to_string(&rec)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r.get("argv").is_some())
        .unwrap_or_else(|| panic!("no launch recorded: {ex}"));
    let dir = flag(&launch["argv"], "--plugin-dir").unwrap_or_default();
    assert_is_the_plugin(&suite, Path::new(&dir));
    assert_eq!(launch["probe_readable"], true, "{launch}");
    drop(suite);
    let _ = std::fs::remove_dir_all(&probe);
}
