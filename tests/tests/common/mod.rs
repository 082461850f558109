//! Shared by the intake tests: the suite with the demo configuration.
#![allow(clippy::unwrap_used, dead_code)]

pub mod claude;
pub mod repo;
pub mod sandbox;
pub mod sshd;

use oc_systest::{post, sign_sha256, Daemon, Package, Response, Suite, HANG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_oc-suite");
pub const SECRET: &str = "It's a Secret to Everybody";
pub const GH_SECRET: &str = "gh-secret-for-tests";
pub const HOOK: &str = "/hooks/ci";
pub const HOOK_SOURCE: &str = "webhook/demo/ci";

pub fn config(suite: &Suite) -> Value {
    // Secrets in a folder of their own, as the package keeps them
    // (/etc/open-conduit/secrets): a sandbox is denied the whole folder.
    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let secret = secrets.join("hook-secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let gh = secrets.join("gh-secret");
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
    started_with(name, |_| {})
}

/// [`started`], with `setup` run on the suite before its daemons start.
pub fn started_with(name: &str, setup: impl FnOnce(&Suite)) -> Suite {
    let suite = Suite::new(Path::new(BIN), name, &Suite::first_party()).unwrap();
    suite.set_args(
        Daemon::Ingressd,
        &["--header-timeout-ms", "1000", "--body-timeout-ms", "1000"],
    );
    setup(&suite);
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

/// Polls `f` until it answers, failing the test after `limit`.
pub fn wait_within<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`wait_within`] the suite's [`HANG`].
pub fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_within(what, HANG, f)
}

/// Writes an executable script.
pub fn script(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The JSON lines of a record file (the fake claude's), the unreadable ones left out.
pub fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Gives schedulerd (from its next start) a toolbelt directory whose `open-conduit`
/// is the suite's binary, as the package installs it for agents.
pub fn with_toolbelt(suite: &Suite) {
    let tbdir = suite.dir.join("toolbelt");
    script(
        &tbdir.join("open-conduit"),
        &format!("#!/bin/sh\nexec '{BIN}' \"$@\"\n"),
    );
    suite.set_args(
        Daemon::Schedulerd,
        &["--toolbelt-dir", tbdir.to_str().unwrap()],
    );
}

/// The text of artifact `id` (its first 64 KiB).
pub fn artifact_text(suite: &Suite, id: &str) -> String {
    let r = suite
        .call(
            "store.artifact_read",
            json!({"artifact_id": id, "offset": 0, "length": 65536}),
        )
        .unwrap();
    let data: Vec<u8> = protocol::b64::decode(r["data"].as_str().unwrap()).unwrap();
    String::from_utf8_lossy(&data).into_owned()
}

/// `open-conduit ARGS…` on the suite's bus: (status, stdout + stderr).
pub fn cli(suite: &Suite, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A started suite with the claude-code package beside the first-party ones, the
/// fake `claude` at `<suite>/bin/claude` and schedulerd's toolbelt directory set:
/// (the suite, the fake claude's path).
pub fn agent_suite(name: &str) -> (Suite, std::path::PathBuf) {
    let mut packages = Suite::first_party();
    packages.push(oc_systest::Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();
    (suite, claude)
}

/// A `github` connection named `gh` at `api_url`, with the tests' webhook secret
/// and `token`, both in files of the suite.
pub fn github_connection(suite: &Suite, api_url: &str, token: &str) -> Value {
    let gh = suite.dir.join("gh-secret");
    std::fs::write(&gh, GH_SECRET).unwrap();
    let path = suite.dir.join("gh-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    json!({"name": "gh", "type": "github", "config": {"api_url": api_url},
           "secret_refs": {"webhook_secret": format!("file:{}", gh.display()),
                           "token": format!("file:{}", path.display())}})
}

/// The signed `issues` (opened) delivery of the fixture's issue `number`, labelled
/// `agent`, to `/github/demo/repo`.
pub fn deliver_agent_issue(suite: &Suite, delivery_id: &str, number: u64) {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/github/tests/fixtures/issues.opened.json"),
    )
    .unwrap();
    let mut v: Value = serde_json::from_slice(&raw).unwrap();
    let mut label = v["issue"]["labels"][0].clone();
    label["name"] = json!("agent");
    v["issue"]["labels"].as_array_mut().unwrap().push(label);
    v["issue"]["number"] = json!(number);
    let body = serde_json::to_vec(&v).unwrap();
    let r = post(
        suite.http,
        "/github/demo/repo",
        &[
            ("Content-Type", "application/json".into()),
            ("X-GitHub-Event", "issues".into()),
            ("X-GitHub-Delivery", delivery_id.into()),
            (
                "X-Hub-Signature-256",
                sign_sha256(GH_SECRET.as_bytes(), &body),
            ),
        ],
        &body,
    )
    .unwrap();
    assert!(r.status / 100 == 2, "{} {}", r.status, r.text());
}

/// Fails the test when a file under `dir`, but those under `except` (where the
/// test wrote the secrets), holds one of `secrets`.
pub fn assert_no_secret_under(dir: &Path, except: &Path, secrets: &[&str]) {
    for s in secrets {
        let holding: Vec<PathBuf> = claude::files_containing(dir, s.as_bytes())
            .into_iter()
            .filter(|f| !f.starts_with(except))
            .collect();
        assert!(holding.is_empty(), "files hold a secret: {holding:?}");
    }
}

/// The result of the toolbelt call the fake `claude` recorded as `method`
/// (`tools/call <operation><tag>`) among a turn's `calls`.
pub fn tool_answer(calls: &[Value], method: &str) -> Value {
    calls
        .iter()
        .find(|x| x["method"] == method)
        .unwrap_or_else(|| panic!("no {method} in {calls:#?}"))["answer"]["result"]
        .clone()
}

/// The first-party packages and the `extra` ones (name, manifest, command).
pub fn packages_with(extra: &[(&str, &str, &str)]) -> Vec<Package> {
    let mut packages = Suite::first_party();
    for (name, manifest, command) in extra {
        packages.push(Package {
            name: (*name).into(),
            manifest: (*manifest).into(),
            command: vec![(*command).into()],
        });
    }
    packages
}

/// A fake `claude` at `<suite>/bin/claude` that, each turn, commits a line to
/// `FIX.md` in its workspace with `message` and runs `git push origin HEAD` (git
/// asks the run's credential helper), logging `PUSH_EXIT=<status>` and
/// `BRANCH=<branch>` to the returned log, then runs the fake CLI: (its path, the log).
pub fn pushing_claude(suite: &Suite, message: &str) -> (PathBuf, PathBuf) {
    let log = suite.dir.join("push.log");
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!(
            "#!/bin/sh\n\
             {{ echo turn >> FIX.md && git add FIX.md && \
             git -c user.name=bot -c user.email=bot@example.com commit -q -m '{message}' && \
             git push origin HEAD; echo PUSH_EXIT=$?; \
             echo BRANCH=$(git rev-parse --abbrev-ref HEAD); }} >> '{}' 2>&1\n\
             exec '{BIN}' fake-claude \"$@\"\n",
            log.display()
        ),
    );
    (claude, log)
}

/// What a [`pushing_claude`]'s log says: every push so far exited 0, and the branch.
pub fn pushed_branch(log: &Path) -> String {
    let pushed = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        pushed.contains("PUSH_EXIT=0")
            && !pushed
                .lines()
                .any(|l| l.starts_with("PUSH_EXIT=") && l != "PUSH_EXIT=0"),
        "a push failed: {pushed}"
    );
    pushed
        .lines()
        .find_map(|l| l.strip_prefix("BRANCH="))
        .unwrap_or_else(|| panic!("no branch in {pushed}"))
        .to_owned()
}
