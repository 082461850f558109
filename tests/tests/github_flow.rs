#![allow(clippy::unwrap_used)]
//! GitHub, finished (issue 38), with the real Claude Code CLI, the real daemons and
//! only the documented configuration: a signed `issues.opened` starts a claude-code
//! turn in the Work's own worktree of a repository served by the real
//! `git http-backend` behind `x-access-token` basic auth ([`GitHttp`]); the agent
//! commits and runs `git push origin HEAD`, which gets its credential from the run's
//! credential helper (`open-conduit git-credential github`, named by the github
//! package's `run.environment` layer, asking over the run's toolbelt), and opens the
//! pull request through the toolbelt. GitHub's API is Prism over GitHub's OpenAPI
//! description behind the validating stand-in: every request must fit it.
//!
//! The token is in no process's environment or argv while the agent runs, in no file
//! of the state directory or the workspace and in no log; a run of another Work
//! asking for this repository is refused. With a GitHub App connection, the token the
//! run pushed with was minted for the one repository and revoked when the segment
//! ended, both seen at the stand-in.
//!
//! Without node, Prism's packages or the CLI it prints SKIPPED (a failure under
//! OC_REQUIRE_PEERS=1).

mod common;
use common::claude::{files_containing, the_cli};
use common::*;

use oc_systest::githttp::GitHttp;
use oc_systest::github::{prism_or_skip, Prism, Reply as GhReply, Request as GhRequest, StandIn};
use oc_systest::messages::{MessagesApi, Reply, Request};
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

const TOKEN: &str = "ghp_flowTokenNeverInTheRun0123456789abcd";
const MINTED: &str = "ghs_mintedForOneRepo0123456789abcdefgh";
const API_KEY: &str = "sk-ant-test-flow-key-5e1d";
const REPO: &str = "Codertocat/Hello-World";
const OTHER: &str = "Octo/Other";
/// The pull request GitHub (the stand-in) numbers the agent's: the fixtures' own.
const PR: u64 = 2;
/// The head commit GitHub reports for it: the fixtures' own.
const HEAD_SHA: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
/// The status comment's ID.
const STATUS_COMMENT: u64 = 9001;
/// A line of the review comment's diff hunk, which the resumed turn's prompt shows.
const HUNK_LINE: &str = "+Hello World, handle the empty case";

/// One Prism for the whole test binary (it takes a while to load the description).
fn prism() -> Option<&'static Prism> {
    static PRISM: OnceLock<Option<Prism>> = OnceLock::new();
    PRISM.get_or_init(prism_or_skip).as_ref()
}

/// A gate the scripted model waits at (bounded), and the test opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cond: Condvar,
    reached: AtomicU64,
}

impl Gate {
    fn wait(&self) {
        self.reached.fetch_add(1, Ordering::SeqCst);
        let open = self.open.lock().unwrap();
        let _ = self
            .cond
            .wait_timeout_while(open, oc_systest::HANG * 2, |o| !*o)
            .unwrap();
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cond.notify_all();
    }
}

/// The tool use the last message answered (by the step in its ID), if any.
fn answered(req: &Request) -> Option<String> {
    req.tool_results().iter().find_map(|r| {
        let id = r["tool_use_id"].as_str()?;
        Some(id.strip_prefix("toolu_")?.split('_').next()?.to_owned())
    })
}

/// The text of the last tool result.
fn result_text(req: &Request) -> String {
    let mut out = String::new();
    for r in req.tool_results() {
        match &r["content"] {
            Value::String(s) => out.push_str(s),
            Value::Array(parts) => {
                for p in parts {
                    out.push_str(p["text"].as_str().unwrap_or_default());
                }
            }
            _ => {}
        }
    }
    out
}

/// What the scripted agent does, turn by turn. Turn 1: push its branch, wait at the
/// gate, open the pull request, wait for a review. Turn 2 (the review woke it): push a
/// fix, wait for the checks. Turn 3 (the checks woke it): say so. With `probe` set (the
/// second scope's Work), its one turn asks git for another repository instead.
struct Agent {
    ids: AtomicU64,
    turn: AtomicU64,
    gate: Arc<Gate>,
    /// For the second Work: `git ls-remote` of this URL instead of a push.
    probe: Mutex<Option<String>>,
}

/// Commit `line` to FIX.md and push the branch; print the exit status and the branch.
fn push(line: &str, message: &str) -> String {
    format!(
        "echo '{line}' >> FIX.md && git add FIX.md && \
         git -c user.name=bot -c user.email=bot@example.com commit -q -m '{message}' && \
         git push origin HEAD 2>&1; echo PUSH_EXIT=$?; echo BRANCH=$(git rev-parse --abbrev-ref HEAD)"
    )
}

impl Agent {
    fn reply(&self, req: &Request) -> Reply {
        let id = |step: &str| format!("toolu_{step}_{}", self.ids.fetch_add(1, Ordering::SeqCst));
        if !req.tools().iter().any(|t| t == "StructuredOutput") {
            return Reply::message(vec![Reply::text("ok")], 10, 1);
        }
        let status = |summary: &str| {
            Reply::tool_use(
                &id("so"),
                "StructuredOutput",
                json!({"state": "review", "summary": summary, "handoff": summary}),
            )
        };
        let call = |step: &str, operation: &str, input: Value| {
            Reply::tool_use(
                &id(step),
                "mcp__open-conduit__call",
                json!({"operation": operation, "input": input, "request_id": format!("{step}-{}", self.turn.load(Ordering::SeqCst))}),
            )
        };
        let bash = |command: String| {
            Reply::tool_use(
                &id("push"),
                "Bash",
                json!({"command": command, "description": "push"}),
            )
        };
        let turn = self.turn.load(Ordering::SeqCst);
        let blocks = match answered(req).as_deref() {
            None => {
                let turn = self.turn.fetch_add(1, Ordering::SeqCst) + 1;
                let probe = self.probe.lock().unwrap().clone();
                match (probe, turn) {
                    (Some(url), _) => vec![bash(format!(
                        "git ls-remote {url} 2>&1; echo PROBE_EXIT=$?"
                    ))],
                    (None, 1) => vec![bash(push("fixed", "Fix the bug"))],
                    (None, 2) => vec![bash(push("empty case handled", "Handle the empty case"))],
                    (None, _) => vec![status("the checks passed")],
                }
            }
            Some("push") => {
                let text = result_text(req);
                if text.contains("PROBE_EXIT") {
                    vec![status(&text)]
                } else if turn == 1 {
                    self.gate.wait();
                    let branch = text
                        .lines()
                        .rev()
                        .find_map(|l| l.trim().strip_prefix("BRANCH="))
                        .unwrap_or_default()
                        .to_owned();
                    vec![call(
                        "pr",
                        "github.open_pull_request",
                        json!({"head": branch, "base": "main", "title": "Fix the bug",
                               "body": "Fixes #1"}),
                    )]
                } else {
                    vec![call(
                        "wait",
                        "github.wait",
                        json!({"for": "checks", "number": PR}),
                    )]
                }
            }
            Some("pr") => vec![call(
                "wait",
                "github.wait",
                json!({"for": "review", "number": PR}),
            )],
            Some("wait") => vec![status(&format!("waiting: {}", result_text(req)))],
            _ => vec![Reply::text("done")],
        };
        Reply::message(blocks, 100, 10)
    }
}

struct Flow {
    suite: Suite,
    api: MessagesApi,
    origin: Arc<GitHttp>,
    github: StandIn,
    agent: Arc<Agent>,
    tokens: Arc<Mutex<Vec<Value>>>,
}

/// The suite: the github and claude-code packages, the real CLI, a `gh` connection
/// (a token, or an App with a generated key), the model's key from its own
/// `anthropic` connection, and a binding `cc` with the repository's git resource.
fn flow(cli: &Path, prism: &Prism, name: &str, app: bool) -> Flow {
    flow_with(cli, prism, name, app, false)
}

/// [`flow`], with the bindings sandboxed by srt when `sandboxed`: the origin and the
/// Messages API then listen on 127.0.0.2, which a sandboxed process reaches through
/// srt's proxy (127.0.0.1 bypasses it).
fn flow_with(cli: &Path, prism: &Prism, name: &str, app: bool, sandboxed: bool) -> Flow {
    let ip = if sandboxed { "127.0.0.2" } else { "127.0.0.1" };
    let origin = Arc::new(GitHttp::start_on(ip).unwrap());
    origin.create_repo(REPO, true);
    origin.create_repo(OTHER, true);
    let tokens: Arc<Mutex<Vec<Value>>> = Arc::default();
    let minted = Arc::clone(&tokens);
    let minting = Arc::clone(&origin);
    let github = StandIn::start(prism, move |r| github_answer(&minted, &minting, r)).unwrap();
    if !app {
        origin.allow(TOKEN, &[REPO, OTHER]);
    }
    let agent = Arc::new(Agent {
        ids: AtomicU64::new(1),
        turn: AtomicU64::new(0),
        gate: Arc::new(Gate::default()),
        probe: Mutex::new(None),
    });
    let script = Arc::clone(&agent);
    let api = MessagesApi::start_on(ip, move |req| script.reply(req)).unwrap();
    let mut packages = if sandboxed {
        common::sandbox::packages()
    } else {
        Suite::first_party()
    };
    packages.push(Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    with_toolbelt(&suite);
    suite.start_all().unwrap();
    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let file = |n: &str, v: &str| {
        let p = secrets.join(n);
        std::fs::write(&p, v).unwrap();
        format!("file:{}", p.display())
    };
    let mut gh = json!({"name": "gh", "type": "github",
        "config": {"api_url": github.url, "git_url": origin.url()},
        "secret_refs": {"webhook_secret": file("gh-secret", GH_SECRET)}});
    // The workspace provider fetches with the same connection: its token, or an
    // installation token it mints itself from the App's key.
    let mut connections = vec![];
    if app {
        let key = generated_key(&suite.dir);
        gh["config"]["app_id"] = json!("12345");
        gh["config"]["installation_id"] = json!(678);
        gh["secret_refs"]["private_key"] = json!(file("app-key.pem", &key));
    } else {
        gh["secret_refs"]["token"] = json!(file("gh-token", TOKEN));
    }
    connections.push(gh);
    connections.push(json!({"name": "anthropic", "type": "claude-code",
        "secret_refs": {"api_key": file("anthropic-key", API_KEY)}}));
    let claude_config = suite.dir.join("claude-config");
    let binding = |name: &str, repo: &str| {
        let mut b = json!({"name": name, "executor": "claude-code", "connection": "gh",
               "connections": ["anthropic"],
               "operations": ["github.open_pull_request", "github.comment", "github.wait"],
               "resource": {"type": "git", "config": {
                   "repository": origin.repo_url(repo), "connection": "gh",
                   "min_free_mb": 1}},
               "config": {"binary": cli, "model": "claude-test-model",
                          "secret_env": {"ANTHROPIC_API_KEY": {"connection": "anthropic", "secret": "api_key"}},
                          "env": {"ANTHROPIC_BASE_URL": api.base_url(),
                                  "CLAUDE_CONFIG_DIR": claude_config,
                                  "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                                  "DISABLE_ERROR_REPORTING": "1",
                                  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                                  "IS_SANDBOX": "1"}}});
        if sandboxed {
            // No workspace_mode: a sandboxed binding's Work gets a clone (its git
            // directory is its own), which the sandbox lets git use.
            b["sandbox"] = common::sandbox::srt_sandbox(json!({}));
        }
        b
    };
    // The second scope's Work is about another repository, on a binding of its own.
    let doc = json!({
        "connections": connections,
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "github", "name": "repo", "connection": "gh",
                         "config": {"repository": REPO, "reconcile_interval_s": 0}}],
            "routes": [{"handler": "github", "binding": "cc",
                        "config": {"events": ["github.issue.opened", "github.pull_request",
                                              "github.pull_request_review", "github.check_suite"],
                                   "labels": ["agent"]}}],
            "bindings": [binding("cc", REPO)]
        }, {
            "id": "side",
            "entries": [{"type": "github", "name": "other", "connection": "gh",
                         "config": {"repository": OTHER, "reconcile_interval_s": 0}}],
            "routes": [{"handler": "github", "binding": "cc-other",
                        "config": {"events": ["github.issue.opened"], "labels": ["agent"]}}],
            "bindings": [binding("cc-other", OTHER)]
        }]
    });
    suite.apply_config(&doc, "/github/demo/repo").unwrap();
    Flow {
        suite,
        api,
        origin,
        github,
        agent,
        tokens,
    }
}

/// What the stand-in answers itself (after Prism found the request fits GitHub's
/// description): an App's tokens, the agent's pull request (#2, on the fixtures' head
/// commit), its reviews and check runs as of planning, the review's comments, and the
/// status comment. The rest is Prism's.
fn github_answer(minted: &Mutex<Vec<Value>>, origin: &GitHttp, r: &GhRequest) -> Option<GhReply> {
    let path = r.path().to_ascii_lowercase();
    let repo = "/repos/codertocat/hello-world";
    let pr = || {
        json!({"number": PR, "id": 1002, "node_id": "PR_2", "title": "Fix the bug", "state": "open",
               "html_url": "https://github.com/Codertocat/Hello-World/pull/2",
               "url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/2",
               "user": {"login": "oc-bot", "id": 7}, "body": "Fixes #1", "labels": [],
               "draft": false, "merged": false,
               "head": {"ref": r.json()["head"].as_str().unwrap_or("oc/x"), "sha": HEAD_SHA},
               "base": {"ref": "main", "sha": HEAD_SHA},
               "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z"})
    };
    let answer = match (r.method.as_str(), path.as_str()) {
        // An App's token: each one new, good at the origin for the repositories it
        // names (the operations' own, which names none, for none), until revoked.
        ("POST", p) if p.ends_with("/access_tokens") => {
            let mut minted = minted.lock().unwrap();
            minted.push(r.json());
            let token = format!("{MINTED}{}", minted.len());
            let repos: Vec<String> = r.json()["repositories"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|n| match n {
                            "Other" => OTHER.to_string(),
                            n => format!("Codertocat/{n}"),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let repos: Vec<&str> = repos.iter().map(String::as_str).collect();
            origin.allow(&token, &repos);
            GhReply::json(
                201,
                &json!({"token": token, "expires_at": "2099-01-01T00:00:00Z",
                        "permissions": r.json()["permissions"],
                        "repository_selection": "selected"}),
            )
        }
        ("DELETE", "/installation/token") => {
            let header = r
                .headers
                .iter()
                .find(|(n, _)| n == "authorization")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            if let Some(token) = header.strip_prefix("Bearer ") {
                origin.revoke(token);
            }
            GhReply {
                status: 204,
                headers: vec![],
                body: vec![],
            }
        }
        // Who may steer: `writer` may, anyone else reads.
        ("GET", p)
            if p.starts_with(&format!("{repo}/collaborators/")) && p.ends_with("/permission") =>
        {
            let login = p.split('/').nth(5).unwrap_or_default().to_owned();
            let permission = if login == "writer" { "write" } else { "read" };
            GhReply::json(
                200,
                &json!({"permission": permission, "role_name": permission,
                        "user": {"login": login, "id": 42, "type": "User"}}),
            )
        }
        ("GET", "/user") => {
            GhReply::json(200, &json!({"login": "oc-bot", "id": 7, "type": "User"}))
        }
        ("POST", p) if p == format!("{repo}/pulls") => GhReply::json(201, &pr()),
        ("GET", p) if p == format!("{repo}/pulls/{PR}") => GhReply::json(200, &pr()),
        ("GET", p) if p == format!("{repo}/pulls/{PR}/reviews") => GhReply::json(200, &json!([])),
        ("GET", p)
            if p.starts_with(&format!("{repo}/pulls/{PR}/reviews/"))
                && p.ends_with("/comments") =>
        {
            GhReply::json(
                200,
                &json!([{"id": 77, "body": "Please handle the empty case here.", "path": "README.md",
                         "line": 1, "original_line": 1, "position": 1,
                         "diff_hunk": format!("@@ -1 +1 @@\n-Hello World\n{HUNK_LINE}"),
                         "user": {"login": "reviewer"},
                         "html_url": "https://github.com/Codertocat/Hello-World/pull/2#discussion_r77",
                         "pull_request_review_id": 237895671,
                         "created_at": "2026-12-03T10:05:00Z", "updated_at": "2026-12-03T10:05:00Z"}]),
            )
        }
        ("GET", p) if p.starts_with(&format!("{repo}/commits/")) && p.ends_with("/check-runs") => {
            GhReply::json(200, &json!({"total_count": 0, "check_runs": []}))
        }
        ("POST", p) if p == format!("{repo}/issues/1/comments") => GhReply::json(
            201,
            &json!({"id": STATUS_COMMENT, "body": r.json()["body"], "user": {"login": "oc-bot"},
                    "html_url": "https://github.com/Codertocat/Hello-World/issues/1#issuecomment-9001",
                    "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z"}),
        ),
        ("PATCH", p) if p == format!("{repo}/issues/comments/{STATUS_COMMENT}") => GhReply::json(
            200,
            &json!({"id": STATUS_COMMENT, "body": r.json()["body"], "user": {"login": "oc-bot"},
                    "html_url": "https://github.com/Codertocat/Hello-World/issues/1#issuecomment-9001",
                    "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z"}),
        ),
        // Each entry's webhook, active, delivering to the entry's path (doctor's
        // `github_webhooks` looks for it).
        ("GET", p) if p.ends_with("/hooks") => {
            let entry = if p.starts_with(repo) {
                "demo/repo"
            } else {
                "side/other"
            };
            GhReply::json(
                200,
                &json!([{"type": "Repository", "id": 12345678, "name": "web", "active": true,
                         "events": ["issues", "issue_comment", "pull_request",
                                    "pull_request_review", "pull_request_review_comment",
                                    "check_run", "check_suite"],
                         "config": {"content_type": "json", "insecure_ssl": "0",
                                    "url": format!("https://conduit.example.com/github/{entry}")},
                         "updated_at": "2026-12-03T10:00:00Z", "created_at": "2026-12-03T10:00:00Z",
                         "url": "https://api.github.com/repos/o/r/hooks/12345678",
                         "test_url": "https://api.github.com/repos/o/r/hooks/12345678/test",
                         "ping_url": "https://api.github.com/repos/o/r/hooks/12345678/pings",
                         "deliveries_url": "https://api.github.com/repos/o/r/hooks/12345678/deliveries",
                         "last_response": {"code": 200, "status": "active", "message": "OK"}}]),
            )
        }
        _ => return None,
    };
    Some(answer)
}

/// An RSA key made by `openssl genrsa` (PEM).
fn generated_key(dir: &Path) -> String {
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "2048"])
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl genrsa failed");
    let key = String::from_utf8(out.stdout).unwrap();
    std::fs::write(dir.join("generated.pem"), &key).unwrap();
    key
}

/// Every process whose environment or argv holds `needle`: (pid, which).
fn processes_holding(needle: &[u8]) -> Vec<(String, &'static str)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for (file, what) in [("environ", "environment"), ("cmdline", "argv")] {
            let bytes = std::fs::read(e.path().join(file)).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push((name.clone(), what));
            }
        }
    }
    found
}

/// The processes whose environment names this suite's toolbelt: the agent and its
/// children.
fn agent_processes(suite: &Suite) -> Vec<String> {
    let needle = format!("OS_ENDPOINT={}", suite.dir.display());
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            pids.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    pids
}

fn the_work(suite: &Suite, scope: &str) -> String {
    wait_for("the Work", || {
        let w = suite
            .call("store.works", json!({ "scope_id": scope }))
            .unwrap();
        w["works"][0]["id"].as_str().map(str::to_owned)
    })
}

fn workspace_of(suite: &Suite, work: &str) -> PathBuf {
    let leases = suite
        .call("store.resource_leases", json!({ "owner": work }))
        .unwrap();
    PathBuf::from(leases["leases"][0]["dir"].as_str().unwrap())
}

/// The turn's final state: the executions of `work` once one has ended.
fn ended(suite: &Suite, work: &str) -> Value {
    wait_for("the turn ended", || {
        let ex = suite
            .call("store.executions", json!({ "work_id": work }))
            .unwrap();
        ex["executions"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["state"] != "running").cloned())
    })
}

/// The agent's turn: it pushes through the credential helper and opens its pull
/// request; the token reaches nothing of the run.
fn pushes_and_opens(flow: &Flow, password: &str) -> (String, String) {
    // An App's tokens are `MINTED<n>`: the prefix is what must appear nowhere.
    let suite = &flow.suite;
    deliver_agent_issue(suite, "flow-1", 1);
    let work = the_work(suite, "demo");
    // The agent has pushed and waits at the gate: look at every process now.
    wait_for("the agent at the gate", || {
        (flow.agent.gate.reached.load(Ordering::SeqCst) > 0).then_some(())
    });
    let agents = agent_processes(suite);
    assert!(!agents.is_empty(), "no agent process found");
    let holding = processes_holding(password.as_bytes());
    flow.agent.gate.open();
    assert!(
        holding.is_empty(),
        "the run's credential is in processes' {holding:?} (agents: {agents:?})"
    );
    ended(suite, &work);
    let msgs = flow.api.messages();
    let pushed = msgs
        .iter()
        .find(|m| answered(m).as_deref() == Some("push"))
        .map(result_text)
        .unwrap_or_default();
    assert!(pushed.contains("PUSH_EXIT=0"), "the push failed: {pushed}");
    let branch = pushed
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("BRANCH="))
        .unwrap()
        .to_owned();
    assert!(branch.starts_with("oc/"), "{branch}");
    // The push reached the authenticated origin with the run's credential.
    let dir = workspace_of(suite, &work);
    let head = common::repo::git(&dir, &["rev-parse", "HEAD"]);
    assert_eq!(
        flow.origin.branch_head(REPO, &branch).as_deref(),
        Some(head.as_str())
    );
    let pushes = flow.origin.pushes();
    assert!(
        pushes
            .iter()
            .any(|p| p.token.as_deref().is_some_and(|t| t.starts_with(password))),
        "{pushes:#?}"
    );
    // The pull request: valid for GitHub's description, its head the pushed branch.
    let opened = msgs
        .iter()
        .find(|m| answered(m).as_deref() == Some("pr"))
        .map(result_text)
        .unwrap_or_default();
    assert!(!opened.contains("\"isError\":true"), "{opened}");
    let prs: Vec<Value> = flow
        .github
        .exchanges()
        .into_iter()
        .filter(|x| x.request.method == "POST" && x.request.path().ends_with("/pulls"))
        .map(|x| x.request.json())
        .collect();
    assert_eq!(prs.len(), 1, "{prs:#?}");
    assert_eq!(prs[0]["head"], branch.as_str());
    assert!(
        flow.github.violations().is_empty(),
        "{:#?}",
        flow.github.violations()
    );
    // The model's key came from its own connection (`anthropic`) through secret_env,
    // in the binding whose `connection` is the GitHub one.
    assert!(
        msgs.iter()
            .filter(|m| m.is_message())
            .all(|m| m.header("x-api-key") == Some(API_KEY)),
        "a turn reached the API without the anthropic connection's key"
    );
    // Nowhere in the state directory, the workspace or a log.
    for d in [suite.dir.join("state"), dir.clone()] {
        let leaked = files_containing(&d, password.as_bytes());
        assert!(leaked.is_empty(), "the credential is in {leaked:?}");
    }
    for d in [Daemon::Extrunner, Daemon::Schedulerd] {
        assert!(!suite.log(d).contains(password), "{d:?}'s log has it");
    }
    (work, branch)
}

#[test]
fn an_agent_pushes_through_the_run_credential_and_opens_its_pull_request() {
    let Some(cli) = the_cli() else { return };
    let Some(prism) = prism() else { return };
    if !common::repo::have_git() {
        return;
    }
    let flow = flow(&cli, prism, "github-flow-token", false);
    let (work, branch) = pushes_and_opens(&flow, TOKEN);
    the_review_loop(&flow, &work, &branch);
    doctor_is_green(&flow);

    // A run of another Work asking for this repository is refused: its Work is
    // about Octo/Other, so the helper gets nothing and git sends no credential.
    *flow.agent.probe.lock().unwrap() = Some(flow.origin.repo_url(REPO));
    deliver_other_issue(&flow.suite);
    let second = the_work(&flow.suite, "side");
    ended(&flow.suite, &second);
    let msgs = flow.api.messages();
    let probe = msgs
        .iter()
        .map(result_text)
        .find(|t| t.contains("PROBE_EXIT"))
        .unwrap();
    assert!(!probe.contains("PROBE_EXIT=0"), "{probe}");
    assert!(
        probe.contains("may use Octo/Other only"),
        "the refusal says why: {probe}"
    );
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../extensions/github/tests/fixtures")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A signed delivery of `event` to the entry at `path`.
fn deliver_github(suite: &Suite, path: &str, event: &str, id: &str, v: &Value) {
    let body = serde_json::to_vec(v).unwrap();
    let r = oc_systest::post(
        suite.http,
        path,
        &[
            ("Content-Type", "application/json".into()),
            ("X-GitHub-Event", event.into()),
            ("X-GitHub-Delivery", id.into()),
            (
                "X-Hub-Signature-256",
                oc_systest::sign_sha256(GH_SECRET.as_bytes(), &body),
            ),
        ],
        &body,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

fn work_row(suite: &Suite, work: &str) -> Value {
    suite.call("store.work_get", json!({ "id": work })).unwrap()["work"].clone()
}

/// The Work's Wait whose description mentions `what`, once there is one in `state`.
fn wait_of(suite: &Suite, work: &str, what: &str, state: &str) -> Value {
    wait_for(&format!("a {state} Wait for {what}"), || {
        let waits = suite
            .call("store.waits", json!({ "work_id": work }))
            .unwrap();
        waits["waits"].as_array().and_then(|ws| {
            ws.iter()
                .find(|w| {
                    w["state"] == state
                        && w["description"].as_str().unwrap_or_default().contains(what)
                })
                .cloned()
        })
    })
}

/// After the first turn: the pull request is the Work's, a changes-requested review
/// resumes it in the same workspace and the agent pushes a fix, a `check_suite`
/// delivery ends its wait for the checks (the delivery itself wakes it, not the
/// polling task), the merge completes it, and the status comment showed each state.
fn the_review_loop(flow: &Flow, work: &str, branch: &str) {
    let suite = &flow.suite;
    let pr_key = format!("github:codertocat/hello-world#{PR}");
    wait_for("the pull request linked to the Work", || {
        work_row(suite, work)["keys"]
            .as_array()
            .unwrap()
            .contains(&json!(pr_key))
            .then_some(())
    });
    wait_of(suite, work, "review", "active");
    let dir = workspace_of(suite, work);
    let first = flow.origin.branch_head(REPO, branch).unwrap();

    // The review (the fixture's, as a changes-requested one by a person).
    let mut review = fixture("pull_request_review.submitted.json");
    review["review"]["state"] = json!("changes_requested");
    review["review"]["user"]["login"] = json!("reviewer");
    deliver_github(
        suite,
        "/github/demo/repo",
        "pull_request_review",
        "rev-1",
        &review,
    );
    wait_of(suite, work, "review", "woken");
    wait_of(suite, work, "checks", "active");
    let fixed = flow.origin.branch_head(REPO, branch).unwrap();
    assert_ne!(fixed, first, "the fix was pushed");
    assert_eq!(workspace_of(suite, work), dir, "the same workspace");
    assert_eq!(common::repo::git(&dir, &["rev-parse", "HEAD"]), fixed);
    // The resumed turn's prompt carried the review as the package renders it: its
    // comment with the diff hunk.
    let prompts: Vec<String> = flow.api.messages().iter().map(Request::text).collect();
    assert!(
        prompts
            .iter()
            .any(|t| t.contains(HUNK_LINE) && t.contains("Please handle the empty case")),
        "no prompt shows the review's comment and hunk"
    );

    // The check suite's delivery wakes the wait for the checks.
    deliver_github(
        suite,
        "/github/demo/repo",
        "check_suite",
        "suite-1",
        &fixture("octokit/check_suite.completed.json"),
    );
    let woken = wait_of(suite, work, "checks", "woken");
    let seq = suite
        .events()
        .unwrap()
        .into_iter()
        .find(|e| e["delivery_id"] == "suite-1")
        .and_then(|e| e["seq"].as_i64())
        .unwrap();
    assert_eq!(
        woken["wake_seq"], seq,
        "woken by the check_suite delivery: {woken}"
    );
    wait_for("the third turn", || {
        (flow.agent.turn.load(Ordering::SeqCst) >= 3
            && !matches!(
                work_row(suite, work)["state"].as_str(),
                Some("running" | "woken" | "pending")
            ))
        .then_some(())
    });

    // The merge completes the Work, with no turn of its own.
    let mut closed = fixture("octokit/pull_request.closed.json");
    closed["pull_request"]["merged"] = json!(true);
    deliver_github(
        suite,
        "/github/demo/repo",
        "pull_request",
        "merged-1",
        &closed,
    );
    wait_for("the Work completed", || {
        (work_row(suite, work)["state"] == "completed").then_some(())
    });
    assert_eq!(
        flow.agent.turn.load(Ordering::SeqCst),
        3,
        "the merge ran no turn"
    );

    // The status comment: posted once on the issue, then edited through each state.
    let status_bodies = || -> Vec<(String, String)> {
        flow.github
            .exchanges()
            .into_iter()
            .filter(|x| {
                let p = x.request.path().to_ascii_lowercase();
                (x.request.method == "POST" && p.ends_with("/issues/1/comments"))
                    || (x.request.method == "PATCH"
                        && p.ends_with(&format!("/issues/comments/{STATUS_COMMENT}")))
            })
            .map(|x| {
                (
                    x.request.method.clone(),
                    x.request.json()["body"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + oc_systest::HANG;
    let bodies = loop {
        let b = status_bodies();
        if b.last().is_some_and(|(_, body)| body.contains("· done")) {
            break b;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the status comment never said done: {b:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(bodies[0].0, "POST", "{bodies:#?}");
    assert!(bodies[1..].iter().all(|(m, _)| m == "PATCH"), "{bodies:#?}");
    for state in [
        "· queued",
        "· running",
        "· waiting for a review on PR #2",
        "· waiting for checks on PR #2",
        "· done",
    ] {
        assert!(
            bodies.iter().any(|(_, b)| b.contains(state)),
            "no status said {state:?}: {bodies:#?}"
        );
    }
    assert!(
        bodies
            .last()
            .unwrap()
            .1
            .contains("[PR #2](https://github.com/Codertocat/Hello-World/pull/2)"),
        "{bodies:#?}"
    );
}

/// doctor is green on the flow's setup: the repositories answer with the credential
/// the workspaces are fetched with (the connection's token, or a token the provider
/// mints from the App's key), every webhook is there, and claude-code's bindings work
/// as root.
fn doctor_is_green(flow: &Flow) {
    let (code, doctor) = common::cli(&flow.suite, &["doctor"]);
    assert_eq!(code, 0, "{doctor}");
    // The disk line judges the machine the test runs on (a CI host with less than
    // 5% free gets a warning), not the flow, and the flow runs no web view (doctor
    // warns that none answers): those two may warn, never fail.
    for line in doctor.lines() {
        let beside = matches!(line.split_whitespace().nth(1), Some("disk" | "web"));
        assert!(
            !line.starts_with("fail") && (beside || !line.starts_with("warn")),
            "{doctor}"
        );
    }
    assert!(doctor.contains("2 of 2 repositories reachable"), "{doctor}");
}

/// The signed `issues` (opened, labelled `agent`) delivery of an issue of
/// Octo/Other, to its entry in the scope `side`.
fn deliver_other_issue(suite: &Suite) {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/github/tests/fixtures/issues.opened.json"),
    )
    .unwrap();
    let mut v: Value = serde_json::from_slice(&raw).unwrap();
    let mut label = v["issue"]["labels"][0].clone();
    label["name"] = json!("agent");
    v["issue"]["labels"].as_array_mut().unwrap().push(label);
    v["issue"]["number"] = json!(7);
    v["repository"]["full_name"] = json!(OTHER);
    let body = serde_json::to_vec(&v).unwrap();
    let r = oc_systest::post(
        suite.http,
        "/github/side/other",
        &[
            ("Content-Type", "application/json".into()),
            ("X-GitHub-Event", "issues".into()),
            ("X-GitHub-Delivery", "flow-other".into()),
            (
                "X-Hub-Signature-256",
                oc_systest::sign_sha256(GH_SECRET.as_bytes(), &body),
            ),
        ],
        &body,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn an_app_runs_token_is_minted_for_the_one_repository_and_revoked_after_the_segment() {
    let Some(cli) = the_cli() else { return };
    let Some(prism) = prism() else { return };
    if !common::repo::have_git() {
        return;
    }
    let flow = flow(&cli, prism, "github-flow-app", true);
    let (work, branch) = pushes_and_opens(&flow, MINTED);
    the_review_loop(&flow, &work, &branch);
    doctor_is_green(&flow);
    let minted = flow.tokens.lock().unwrap().clone();
    // The operations' own token asks for no repository; the workspace provider's
    // reads one; each run's may write its one.
    let scoped: Vec<(usize, &Value)> = minted
        .iter()
        .enumerate()
        .filter(|(_, b)| b["permissions"]["pull_requests"] == "write")
        .collect();
    let fetching: Vec<&Value> = minted
        .iter()
        .filter(|b| b["permissions"] == json!({"contents": "read"}))
        .collect();
    assert!(
        !fetching.is_empty(),
        "the provider minted its own: {minted:#?}"
    );
    for body in &fetching {
        // One repository each: the Work's, or (for doctor) the other scope's.
        assert!(
            body["repositories"] == json!(["Hello-World"])
                || body["repositories"] == json!(["Other"]),
            "{body}"
        );
    }
    assert!(
        scoped.len() >= 2,
        "a token per pushing segment: {minted:#?}"
    );
    for (_, body) in &scoped {
        assert_eq!(body["repositories"], json!(["Hello-World"]));
        assert_eq!(
            body["permissions"],
            json!({"contents": "write", "pull_requests": "write"})
        );
    }
    // Each run token was revoked once its segment ended, and the origin refuses it.
    for (i, _) in &scoped {
        let token = format!("{MINTED}{}", i + 1);
        wait_for("the run's token revoked", || {
            flow.github
                .exchanges()
                .iter()
                .find(|x| {
                    x.request.method == "DELETE"
                        && x.request.path() == "/installation/token"
                        && x.request
                            .headers
                            .iter()
                            .any(|(n, v)| n == "authorization" && v == &format!("Bearer {token}"))
                })
                .map(|_| ())
        });
        let url = flow.origin.repo_url(REPO).replacen(
            "http://",
            &format!("http://x-access-token:{token}@"),
            1,
        );
        let out = std::process::Command::new("git")
            .args(["ls-remote", &url])
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "a revoked token still reads the repository"
        );
    }
}

/// `/oc stop` on the issue, from a person GitHub says may only read, is refused with
/// a reply and stops nothing; from one with write permission it stops the run: the
/// Work is cancelled and the agent's processes are gone.
#[test]
fn oc_stop_needs_write_permission_and_then_stops_the_run() {
    let Some(cli) = the_cli() else { return };
    let Some(prism) = prism() else { return };
    if !common::repo::have_git() {
        return;
    }
    let flow = flow(&cli, prism, "github-flow-stop", false);
    let suite = &flow.suite;
    deliver_agent_issue(suite, "stop-1", 1);
    let work = the_work(suite, "demo");
    wait_for("the agent at the gate", || {
        (flow.agent.gate.reached.load(Ordering::SeqCst) > 0).then_some(())
    });
    assert!(!agent_processes(suite).is_empty());
    let comment = |login: &str, id: u64| {
        let mut c = fixture("issue_comment.created.json");
        c["comment"]["body"] = json!("/oc stop");
        c["comment"]["id"] = json!(id);
        c["comment"]["user"]["login"] = json!(login);
        c["sender"]["login"] = json!(login);
        c
    };
    let replies = || -> Vec<String> {
        flow.github
            .exchanges()
            .into_iter()
            .filter(|x| {
                x.request.method == "POST"
                    && x.request
                        .path()
                        .to_ascii_lowercase()
                        .ends_with("/issues/1/comments")
            })
            .filter_map(|x| x.request.json()["body"].as_str().map(str::to_owned))
            .filter(|b| b.starts_with('@'))
            .collect()
    };
    deliver_github(
        suite,
        "/github/demo/repo",
        "issue_comment",
        "c-read",
        &comment("reader", 501),
    );
    let refusal = wait_for("the refusal", || replies().into_iter().next());
    assert!(
        refusal.starts_with("@reader:") && refusal.contains("needs write permission"),
        "{refusal}"
    );
    assert_eq!(work_row(suite, &work)["state"], "running");

    deliver_github(
        suite,
        "/github/demo/repo",
        "issue_comment",
        "c-write",
        &comment("writer", 502),
    );
    wait_for("the Work cancelled", || {
        (work_row(suite, &work)["state"] == "cancelled").then_some(())
    });
    wait_for("the agent's processes gone", || {
        agent_processes(suite).is_empty().then_some(())
    });
    flow.agent.gate.open();
    let actions: Vec<Value> = suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("core.action"))
        })
        .collect();
    assert_eq!(actions.len(), 1, "one action, the writer's: {actions:#?}");
    assert!(
        actions[0].to_string().contains("github:writer"),
        "{actions:#?}"
    );
}

/// The same push from inside an srt sandbox: the helper reaches the run's toolbelt
/// socket, git reaches the origin through srt's proxy (the github package's layer
/// names its host for the sandbox's network), and the credential still reaches no
/// process's environment or argv, no file and no log.
#[test]
fn a_sandboxed_agent_pushes_through_the_run_credential() {
    let Some(cli) = the_cli() else { return };
    let Some(prism) = prism() else { return };
    if !common::repo::have_git() || !common::sandbox::have_srt() {
        return;
    }
    let flow = flow_with(&cli, prism, "github-flow-srt", false, true);
    let (work, _) = pushes_and_opens(&flow, TOKEN);
    // It ran sandboxed: the host pinned an srt plan with the git host allowed.
    let ex = flow
        .suite
        .call("store.executions", json!({ "work_id": work }))
        .unwrap();
    let id = ex["executions"][0]["id"].as_str().unwrap().to_owned();
    let pin = flow
        .suite
        .dir
        .join("state/sandboxes/pins")
        .join(format!("{id}.json"));
    let pin: Value = serde_json::from_slice(&std::fs::read(&pin).unwrap()).unwrap();
    let settings = pin["plan"]["data"]["settings"].as_str().unwrap();
    let settings: Value = serde_json::from_slice(&std::fs::read(settings).unwrap()).unwrap();
    assert_eq!(
        settings["network"]["allowedDomains"],
        json!(["127.0.0.2"]),
        "{settings}"
    );
}
