#![allow(clippy::unwrap_used)]
//! The agent loop on Bitbucket Cloud (issue 44), with real daemons, every request to
//! Bitbucket through Prism's validation proxy over Atlassian's published API 2.0
//! description (tests/bitbucket-api, with the webhook bodies it leaves out declared:
//! `oc_systest::bitbucket::amended_description`) in front of the scripted
//! Bitbucket, and the Work's repository served by the real `git http-backend`
//! behind Bitbucket's basic auth for access tokens (`x-token-auth:<token>`,
//! [`GitHttp::allow_user`]):
//!
//! - a pull request comment mentioning the agent starts a Work whose agent (the fake
//!   `claude`, behind a wrapper that commits in its workspace and runs `git push
//!   origin HEAD`, the credential coming from the run's credential helper over the
//!   toolbelt) pushes, comments and waits for the build (`bitbucket.wait_build`);
//!   the build's status webhook wakes it and the next prompt says the build passed;
//!   the pull request's fulfilment completes the Work;
//! - a Bitbucket issue mentioning the agent starts a Work whose agent pushes and
//!   opens a pull request from its branch; a change request on that pull request
//!   reaches the same Work and wakes its reply wait, and the agent answers it (a new
//!   push, a comment) in that Work;
//! - the managed-webhook task creates the repository's webhook, `open-conduit
//!   doctor` shows it, then its drift; `open-conduit config check` names bad fields
//!   by their JSON pointers;
//! - a comment whose webhook never came is found once by reconcile (`ext.reconcile`
//!   through extrunner and storaged) and starts its Work; the late webhook and a
//!   second scan add nothing.
//!
//! No secret is in a daemon's log, the state directory or the workspace. Without
//! node, Prism or git it prints SKIPPED and passes, unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_bitbucket::intake::sign;
use oc_systest::bitbucket::{Bitbucket, SOURCE_COMMIT_FULL};
use oc_systest::githttp::GitHttp;
use oc_systest::{Daemon, Suite};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const TOKEN: &str = "bb-flow-AccessTokenNeverLogged-98765";
const WEBHOOK_SECRET: &str = "bb-flow-webhook-secret-never-logged";
const AGENT: &str = "557058:agent";

fn origin() -> Option<GitHttp> {
    if !common::repo::have_git() {
        return None;
    }
    match GitHttp::start() {
        Ok(o) => Some(o),
        Err(e) => {
            assert!(
                !oc_systest::bitbucket::required(),
                "no git origin under OC_REQUIRE_PEERS=1: {e}"
            );
            println!("SKIPPED: the git origin cannot start: {e}");
            None
        }
    }
}

fn fixture(name: &str, repo: &str) -> Value {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/bitbucket/tests/fixtures")
            .join(name),
    )
    .unwrap();
    let mut v: Value = serde_json::from_slice(&bytes).unwrap();
    v["repository"]["full_name"] = json!(repo);
    v
}

/// A suite with the claude-code and bitbucket packages, configured with one
/// `bitbucket` entry on `repo` and a claude-code binding whose workspace is `repo`
/// at the origin, fetched and pushed with the connection's token.
struct Flow {
    suite: Suite,
    path: String,
    rec: PathBuf,
    push_log: PathBuf,
    /// The configuration applied.
    doc: Value,
}

impl Flow {
    fn start(
        name: &str,
        bb: &Bitbucket,
        origin: &GitHttp,
        repo: &str,
        operations: &[&str],
        calls: &str,
    ) -> Flow {
        origin.create_repo(repo, true);
        origin.allow_user("x-token-auth", TOKEN, &[repo]);
        let packages = packages_with(&[
            ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
            ("bitbucket", oc_bitbucket::MANIFEST, "ext-bitbucket"),
        ]);
        let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
        // The agent: each turn commits a line in its workspace and pushes, then the
        // fake CLI makes the turn's calls.
        let (claude, push_log) = pushing_claude(&suite, "Fix the login page");
        with_toolbelt(&suite);
        suite.start_all().unwrap();

        let secrets = suite.dir.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        let file = |n: &str, v: &str| {
            let p = secrets.join(n);
            std::fs::write(&p, format!("{v}\n")).unwrap();
            format!("file:{}", p.display())
        };
        let rec = suite.dir.join("claude.jsonl");
        let path = "/bitbucket/demo/code".to_string();
        let doc = json!({
            "settings": {"webhooks": {"public_url": "https://hooks.example.com/"}},
            "connections": [{"name": "bb", "type": "bitbucket",
                             "config": {"api_url": bb.url, "git_url": origin.url()},
                             "secret_refs": {"token": file("bb-token", TOKEN),
                                             "webhook_secret": file("bb-webhook-secret", WEBHOOK_SECRET)}}],
            "scopes": [{
                "id": "demo",
                "entries": [{"type": "bitbucket", "name": "code", "connection": "bb",
                             "config": {"repositories": [repo], "mention": "@conduit",
                                        "agent_account_id": AGENT, "reconcile_interval_s": 0}}],
                "routes": [{"handler": "bitbucket", "binding": "cc"}],
                "bindings": [{
                    "name": "cc", "executor": "claude-code", "connection": "bb",
                    "operations": operations,
                    "resource": {"type": "git", "config": {
                        "repository": origin.repo_url(repo), "connection": "bb",
                        "min_free_mb": 1}},
                    "config": {"binary": claude,
                               "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                       "FAKE_CLAUDE_CALLS": calls,
                                       "FAKE_CLAUDE_STATE": "review",
                                       "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
                }]
            }]
        });
        suite.apply_config(&doc, &path).unwrap();
        Flow {
            suite,
            path,
            rec,
            push_log,
            doc,
        }
    }

    /// POSTs `body` as `event`, signed, with a fresh `X-Request-UUID`.
    fn send(&self, event: &str, body: &Value) {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let bytes = serde_json::to_vec(body).unwrap();
        let headers = vec![
            ("Content-Type", "application/json".to_string()),
            ("X-Event-Key", event.to_string()),
            ("X-Hub-Signature", sign(WEBHOOK_SECRET.as_bytes(), &bytes)),
            (
                "X-Request-UUID",
                format!("{{flow-{}-{n}}}", std::process::id()),
            ),
        ];
        let r = oc_systest::post(self.suite.http, &self.path, &headers, &bytes).unwrap();
        assert_eq!(r.status, 200, "{event}: {}", r.text());
    }

    fn works(&self) -> Vec<Value> {
        self.suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap()["works"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn work(&self, id: &str) -> Value {
        self.suite
            .call("store.work_get", json!({"id": id}))
            .unwrap()["work"]
            .clone()
    }

    /// The `n`-th turn's prompt (0 the first).
    fn prompt(&self, n: usize) -> String {
        wait_for(&format!("turn {n}'s prompt"), || {
            records(&self.rec)
                .into_iter()
                .filter_map(|r| r["prompt"].as_str().map(str::to_owned))
                .nth(n)
        })
    }

    /// The toolbelt answers of the `n`-th turn (0 the first), by `tools/call <op>`.
    fn calls(&self, n: usize) -> Vec<Value> {
        wait_for(&format!("turn {n}'s calls"), || {
            records(&self.rec)
                .into_iter()
                .filter_map(|r| r["mcp"].as_array().cloned())
                .nth(n)
        })
    }

    /// The Work waiting with an active Wait of the bitbucket package.
    fn waiting(&self, work: &str) -> Value {
        wait_for("the Work waiting", || {
            let w = self
                .suite
                .call("store.waits", json!({"work_id": work}))
                .ok()?["waits"]
                .as_array()?
                .iter()
                .find(|w| w["state"] == "active" && w["owner"] == "bitbucket")?
                .clone();
            (self.work(work)["state"] == "waiting").then_some(w)
        })
    }

    /// No daemon's log, no file of the state directory and no workspace file holds
    /// a secret.
    fn assert_no_secret(&self) {
        for d in [
            Daemon::Broker,
            Daemon::Storaged,
            Daemon::Schedulerd,
            Daemon::Ingressd,
            Daemon::Extrunner,
        ] {
            let log = self.suite.log(d);
            assert!(!log.contains(TOKEN), "{d:?} logged the token");
            assert!(!log.contains(WEBHOOK_SECRET), "{d:?} logged the secret");
        }
        assert_no_secret_under(
            &self.suite.dir,
            &self.suite.dir.join("secrets"),
            &[TOKEN, WEBHOOK_SECRET],
        );
    }
}

const REPO_1: &str = "acme/login";

/// A mention on a pull request: the agent pushes through the run's credential,
/// comments, waits for the build; the build's status wakes it; the merge completes
/// the Work.
#[test]
fn a_mention_ends_in_a_pushed_fix_a_green_build_and_a_merge_that_completes_the_work() {
    let Some(bb) = oc_systest::bitbucket::shared_or_skip() else {
        return;
    };
    let Some(origin) = origin() else { return };
    let calls = json!([
        {"operation": "bitbucket.comment", "input": {"text": "Pushed a fix for the loop."},
         "request_id": "flow-comment", "turn": "first"},
        {"operation": "bitbucket.wait_build", "input": {"timeout_s": 3600},
         "request_id": "flow-build", "turn": "first"}
    ])
    .to_string();
    let f = Flow::start(
        "bb-flow-build",
        bb,
        &origin,
        REPO_1,
        &["bitbucket.comment", "bitbucket.wait_build"],
        &calls,
    );
    let mut comment = fixture("pull-request-comment-created.json", REPO_1);
    comment["comment"]["content"]["raw"] = json!("@conduit the login page loops, can you fix it?");
    f.send("pullrequest:comment_created", &comment);
    let work = wait_for("the pull request's Work", || {
        f.works().first()?["id"].as_str().map(str::to_string)
    });

    // The push, with the run's credential: x-token-auth and the token, at the origin.
    let turn = f.calls(0);
    let branch = pushed_branch(&f.push_log);
    assert!(
        origin.branch_head(REPO_1, &branch).is_some(),
        "{branch} is not at the origin"
    );
    let pushes = origin.pushes();
    assert!(!pushes.is_empty());
    for p in &pushes {
        assert_eq!(p.user.as_deref(), Some("x-token-auth"), "{p:?}");
    }
    let said = tool_answer(&turn, "tools/call bitbucket.comment");
    assert_eq!(said["isError"], false, "{said}");
    let posts = bb.requests_to(
        "POST",
        &format!("/repositories/{REPO_1}/pullrequests/1/comments"),
    );
    assert_eq!(posts.len(), 1, "{posts:#?}");

    // The build is running: the Work waits for it, keyed by the commit.
    let build = tool_answer(&turn, "tools/call bitbucket.wait_build");
    assert_eq!(build["isError"], false, "{build}");
    let wait = f.waiting(&work);
    assert!(
        wait["keys"].to_string().contains("bitbucket:acme/login@"),
        "{wait}"
    );

    // The build passes: its status wakes the Work, and the prompt says so.
    let mut status = fixture("repo-commit-status-updated.json", REPO_1);
    status["commit_status"]["state"] = json!("SUCCESSFUL");
    status["commit_status"]["links"]["commit"]["href"] = json!(format!(
        "https://api.bitbucket.org/2.0/repositories/{REPO_1}/commit/{SOURCE_COMMIT_FULL}"
    ));
    f.send("repo:commit_status_updated", &status);
    let resumed = f.prompt(1);
    assert!(resumed.contains("SUCCESSFUL"), "{resumed}");

    // The merge completes the Work.
    f.send(
        "pullrequest:fulfilled",
        &fixture("pull-request-merged.json", REPO_1),
    );
    wait_for("the Work completed", || {
        (f.work(&work)["state"] == "completed").then_some(())
    });
    assert_eq!(f.works().len(), 1);
    let violations = bb.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    f.assert_no_secret();
}

const REPO_2: &str = "acme/review";

/// A Bitbucket issue mentioning the agent: the agent pushes and opens a pull
/// request from its branch; a change request on that pull request reaches the same
/// Work, wakes its reply wait, and the agent answers it there (another push, a
/// comment on the pull request it opened).
#[test]
fn the_agent_opens_a_pull_request_and_answers_its_change_request_in_the_same_work() {
    let Some(bb) = oc_systest::bitbucket::shared_or_skip() else {
        return;
    };
    let Some(origin) = origin() else { return };
    let calls = json!([
        {"operation": "bitbucket.open_pull_request",
         "input": {"title": "Fix the login page", "branch": "{branch}",
                   "description": "Fixes the loop of issue #1."},
         "request_id": "flow-open", "turn": "first"},
        {"operation": "bitbucket.wait_reply", "input": {"timeout_s": 3600},
         "request_id": "flow-wait", "turn": "first"},
        {"operation": "bitbucket.comment", "input": {"text": "Renamed as asked."},
         "request_id": "flow-answer", "turn": "resumed"}
    ])
    .to_string();
    let f = Flow::start(
        "bb-flow-review",
        bb,
        &origin,
        REPO_2,
        &[
            "bitbucket.open_pull_request",
            "bitbucket.wait_reply",
            "bitbucket.comment",
        ],
        &calls,
    );
    let mut issue = fixture("issue-created.json", REPO_2);
    issue["issue"]["content"]["raw"] = json!("@conduit the login page loops");
    f.send("issue:created", &issue);
    let work = wait_for("the issue's Work", || {
        f.works().first()?["id"].as_str().map(str::to_string)
    });

    // The pull request from the pushed branch.
    let turn = f.calls(0);
    let branch = pushed_branch(&f.push_log);
    let head = origin.branch_head(REPO_2, &branch).unwrap();
    let opened = tool_answer(&turn, "tools/call bitbucket.open_pull_request");
    assert_eq!(opened["isError"], false, "{opened}");
    let posts = bb.requests_to("POST", &format!("/repositories/{REPO_2}/pullrequests"));
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert_eq!(posts[0].body["source"]["branch"]["name"], json!(branch));

    // The pull request (#7, as the scripted Bitbucket numbers it) is the Work's.
    let pr_key = format!("bitbucket:{REPO_2}#7");
    wait_for("the pull request linked to the Work", || {
        let keys = f
            .suite
            .call("store.work_get", json!({"id": work}))
            .ok()?
            .to_string();
        keys.contains(&pr_key).then_some(())
    });
    let wait = f.waiting(&work);
    assert!(wait["keys"].to_string().contains(&pr_key), "{wait}");

    // A change request on it wakes the same Work, whose next turn answers it.
    let mut change = fixture("pull-request-approved.json", REPO_2);
    change["pullrequest"]["id"] = json!(7);
    f.send("pullrequest:changes_request_created", &change);
    let resumed = f.prompt(1);
    assert!(resumed.to_lowercase().contains("change"), "{resumed}");
    let answered = f.calls(1);
    let said = tool_answer(&answered, "tools/call bitbucket.comment");
    assert_eq!(said["isError"], false, "{said}");
    let comments = bb.requests_to(
        "POST",
        &format!("/repositories/{REPO_2}/pullrequests/7/comments"),
    );
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let again = origin.branch_head(REPO_2, &branch).unwrap();
    assert_ne!(again, head, "the answer's push moved the branch");
    assert_eq!(
        f.works().len(),
        1,
        "one Work for the issue and its pull request"
    );
    let violations = bb.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    f.assert_no_secret();
}

const REPO_3: &str = "acme/hooks";

/// `open-conduit doctor`'s output.
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

/// The managed webhook is created by the task and shown by `doctor`, a change made
/// at Bitbucket is drift there; `config check` names bad fields by their pointers.
#[test]
fn the_managed_webhook_is_created_and_its_drift_shown_and_bad_fields_named() {
    let Some(bb) = oc_systest::bitbucket::shared_or_skip() else {
        return;
    };
    let Some(origin) = origin() else { return };
    let f = Flow::start("bb-flow-hooks", bb, &origin, REPO_3, &[], "[]");
    let mut doc = f.doc.clone();
    doc["scopes"][0]["entries"][0]["config"]["manage_webhook"] = json!(true);
    f.suite.apply_config(&doc, &f.path).unwrap();
    let task = || {
        f.suite
            .call(
                "ext.call",
                json!({"name": "bitbucket", "method": "task.run", "timeout_ms": 60_000,
                       "params": {"task": "bitbucket.webhooks", "now": "2026-01-01T00:00:00Z"}}),
            )
            .map(|r| r["detail"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let detail = task();
    // This pass, or the one the configure set off, creates it.
    let hooks = wait_for("the repository's webhook", || {
        let hooks = bb.scripted.hooks(REPO_3);
        (!hooks.is_empty()).then_some(hooks)
    });
    assert_eq!(hooks.len(), 1, "{detail}: {hooks:#?}");
    // A pass now waits for one still running (the configure's may have reached the
    // package after this test's), so the record of the webhook is kept.
    let detail = task();
    assert!(detail.contains("as configured"), "{detail}");
    assert_eq!(bb.scripted.hooks(REPO_3).len(), 1);
    assert_eq!(
        hooks[0]["url"],
        "https://hooks.example.com/bitbucket/demo/code"
    );
    let text = doctor(&f.suite);
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("{REPO_3} webhook")) && l.trim_end().ends_with(" ok")),
        "{text}"
    );

    // Changed at Bitbucket: drift in doctor, repaired by the next pass.
    bb.scripted.edit_hooks(REPO_3, |hooks| {
        hooks[0]["active"] = json!(false);
    });
    let text = doctor(&f.suite);
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("{REPO_3} webhook")) && l.contains("drifted")),
        "{text}"
    );
    task();
    assert_eq!(bb.scripted.hooks(REPO_3)[0]["active"], true);

    // Bad fields, named by their pointers.
    let mut second = doc["scopes"][0]["entries"][0].clone();
    second["name"] = json!("other");
    second["config"]["mention"] = json!("");
    doc["scopes"][0]["entries"][0]["config"]["repositories"] = json!(["not a repository"]);
    doc["scopes"][0]["entries"]
        .as_array_mut()
        .unwrap()
        .push(second);
    doc["connections"][0]["config"]["git_url"] = json!("ftp://bitbucket.example.com");
    let file = f.suite.dir.join("bad.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = std::process::Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&f.suite.bus)
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    for pointer in [
        "/scopes/0/entries/0/config/repositories/0",
        "/scopes/0/entries/1/config/mention",
        "/connections/0/config/git_url",
    ] {
        assert!(text.contains(pointer), "{pointer}: {text}");
    }
    assert!(bb.violations().is_empty(), "{:#?}", bb.violations());
    f.assert_no_secret();
}

const REPO_4: &str = "acme/missed";

/// A Bitbucket time (`2026-12-07T19:00:00.000000+00:00`) `ago_ms` before now.
fn bitbucket_time(ago_ms: i64) -> String {
    let t = protocol::time::format_rfc3339_ms(protocol::time::now_ms() - ago_ms);
    t.trim_end_matches('Z').to_string() + "000+00:00"
}

/// A whole scan of the entry through extrunner's `ext.reconcile`, from the
/// checkpoint the host keeps: (items, added).
fn scan(suite: &Suite) -> (u64, u64) {
    let (mut items, mut added, mut cursor) = (0, 0, String::new());
    for _ in 0..50 {
        let page = suite
            .call(
                "ext.reconcile",
                json!({"name": "bitbucket", "timeout_ms": 30_000,
                       "page": {"source": "bitbucket/demo/code", "cursor": cursor,
                                "max_items": 20}}),
            )
            .unwrap();
        items += page["items"].as_u64().unwrap();
        added += page["added"].as_u64().unwrap();
        if page["complete"] == true {
            return (items, added);
        }
        cursor = page["cursor"].as_str().unwrap().to_owned();
    }
    panic!("the scan did not complete in 50 pages");
}

/// A comment whose webhook never came: reconcile finds it once, through the real
/// daemons, and its Work starts; the webhook arriving late adds nothing, and
/// neither does the next scan.
#[test]
fn reconcile_finds_a_missed_comment_once_and_its_late_webhook_adds_nothing() {
    let Some(bb) = oc_systest::bitbucket::shared_or_skip() else {
        return;
    };
    let Some(origin) = origin() else { return };
    let calls = json!([
        {"operation": "bitbucket.comment", "input": {"text": "Looking at the loop."},
         "request_id": "missed-comment", "turn": "first"}
    ])
    .to_string();
    let f = Flow::start(
        "bb-flow-missed",
        bb,
        &origin,
        REPO_4,
        &["bitbucket.comment"],
        &calls,
    );
    const TEXT: &str = "@conduit the login page loops, can you fix it?";
    // The webhook Bitbucket would have sent, and the same comment as its API shows it,
    // on a pull request opened before the first scan looks back (a day).
    let mut webhook = fixture("pull-request-comment-created.json", REPO_4);
    webhook["comment"]["content"]["raw"] = json!(TEXT);
    let at = bitbucket_time(60_000);
    let mut comment = webhook["comment"].clone();
    comment["type"] = json!("pullrequest_comment");
    comment["parent"]["type"] = json!("pullrequest_comment");
    comment["user"] = webhook["actor"].clone();
    comment["user"]["type"] = json!("user");
    if let Some(inline) = comment["inline"].as_object_mut() {
        inline.remove("from");
    }
    comment["deleted"] = json!(false);
    comment["created_on"] = json!(at);
    comment["updated_on"] = json!(at);
    let who = json!({"type": "user", "display_name": "Emma",
                     "account_id": "udfy9suggmzpswxc7n200y3c"});
    let pr = json!({
        "type": "pullrequest", "id": 1, "title": "Title of pull request",
        "description": "Description of pull request", "state": "OPEN", "author": who,
        "source": {"branch": {"name": "feature/login"}, "commit": {"hash": "d3022fc0ca3d"}},
        "destination": {"branch": {"name": "master"}, "commit": {"hash": "ce5965ddd289"}},
        "links": {"html": {"href": format!("https://bitbucket.org/{REPO_4}/pull-requests/1")}},
        "comment_count": 1, "task_count": 0, "close_source_branch": false,
        "created_on": bitbucket_time(2 * 86_400_000), "updated_on": at,
    });
    bb.scripted.set_next_base(&bb.url);
    bb.scripted.list(REPO_4, vec![pr], vec![(1, vec![comment])]);

    // Found once: the Work starts and its agent comments.
    let (items, added) = scan(&f.suite);
    assert_eq!((items, added), (1, 1), "one missed comment, added once");
    let work = wait_for("the missed comment's Work", || {
        f.works().first()?["id"].as_str().map(str::to_string)
    });
    let turn = f.calls(0);
    assert_eq!(
        tool_answer(&turn, "tools/call bitbucket.comment")["isError"],
        false
    );
    let events = |suite: &Suite| {
        suite
            .events()
            .unwrap()
            .into_iter()
            .filter(|e| e["type"] == "bitbucket.pullrequest.comment_created")
            .collect::<Vec<_>>()
    };
    let found = events(&f.suite);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        found[0]["delivery_id"],
        format!("pullrequest/{REPO_4}/1/comment/17")
    );

    // Its webhook, late: 200 and nothing new. Another scan: nothing new.
    f.send("pullrequest:comment_created", &webhook);
    assert_eq!(events(&f.suite).len(), 1);
    let (_, added) = scan(&f.suite);
    assert_eq!(added, 0);
    assert_eq!(events(&f.suite).len(), 1);
    assert_eq!(f.works().len(), 1);
    assert_eq!(f.works()[0]["id"], json!(work));
    let violations = bb.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    f.assert_no_secret();
}
