//! The managed webhooks (`manage_webhook`, the `bitbucket.webhooks` task) and the
//! `webhooks` doctor check, through the real `oc-bitbucket-extension` binary with
//! this test as the host (`secret.resolve`, `kv.get`, `kv.commit`) and the scripted
//! Bitbucket of `tests/src/bitbucket.rs` behind Prism over Atlassian's published
//! description: the first pass creates one webhook per repository (URL
//! `public_url` + path, the package's events, the connection's secret, active), a
//! pass with nothing changed writes nothing (no POST or PUT, no KV write), a webhook
//! changed at Bitbucket is drift in the check and the next pass updates it, a
//! rotated secret is sent again, a lost KV record finds the webhook by its URL, a
//! deleted one is missing, without a public URL the pass says why and changes
//! nothing, and an entry without `manage_webhook` is "not managed". Every request
//! passes Prism's validation; the secret is in no KV record.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../../../tests/src/bitbucket.rs"]
mod bitbucket;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bitbucket::Bitbucket;
use oc_bitbucket::hooks;
use protocol::wire::{
    CheckRunParams, CheckRunResult, ConfigureParams, Connection, Entry, HostInfo, InitializeParams,
    KvCommitParams, KvExpect, KvGetParams, SecretResolveParams, TaskRunParams, TaskRunResult,
};
use protocol::{connect, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-bitbucket-extension");
const HANG: Duration = Duration::from_secs(60);
const TOKEN: &str = "bbtok-HOOKS-SECRET-31c";

#[derive(Default)]
struct Host {
    kv: HashMap<String, (Value, String)>,
    commits: usize,
    secret: String,
}

type SharedHost = Arc<Mutex<Host>>;

async fn start(host: SharedHost) -> (Peer, tokio::process::Child) {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let handler = FnHandler(move |request: protocol::Request| {
        let host = host.clone();
        async move {
            match request.method.as_str() {
                "secret.resolve" => {
                    let p: SecretResolveParams = request.params()?;
                    let secret = host.lock().unwrap().secret.clone();
                    let values: HashMap<String, String> = p
                        .names
                        .iter()
                        .map(|n| {
                            let v = if n == "token" {
                                TOKEN.into()
                            } else {
                                secret.clone()
                            };
                            (n.clone(), v)
                        })
                        .collect();
                    Ok(json!({ "values": values }))
                }
                "kv.get" => {
                    let p: KvGetParams = request.params()?;
                    Ok(match host.lock().unwrap().kv.get(&p.key) {
                        Some((v, ver)) => json!({"value": v, "version": ver}),
                        None => json!({}),
                    })
                }
                "kv.commit" => {
                    let p: KvCommitParams = request.params()?;
                    let mut host = host.lock().unwrap();
                    for c in &p.checks {
                        let holds = match &c.expect {
                            KvExpect::Absent => !host.kv.contains_key(&c.key),
                            KvExpect::Version(v) => {
                                host.kv.get(&c.key).is_some_and(|(_, x)| x == v)
                            }
                        };
                        if !holds {
                            return Err(RpcError::new(Code::Conflict, "check failed"));
                        }
                    }
                    host.commits += 1;
                    let n = host.commits;
                    for put in p.puts {
                        host.kv.insert(put.key, (put.value, format!("v{n}")));
                    }
                    Ok(json!({}))
                }
                other => Err(RpcError::method_not_found(other)),
            }
        }
    });
    let peer = connect(
        stdout,
        stdin,
        handler,
        Options::named("extension bitbucket"),
    );
    tokio::time::timeout(
        HANG,
        peer.call_typed(&InitializeParams {
            protocol_versions: vec![1],
            host: HostInfo {
                name: "open-conduit".into(),
                version: "test".into(),
            },
            state_dir: std::env::temp_dir().display().to_string(),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    (peer, child)
}

fn entry_config(repos: &[&str], manage: bool) -> Value {
    json!({"repositories": repos, "mention": "@conduit", "manage_webhook": manage})
}

async fn configure(peer: &Peer, api_url: &str, public_url: &str, repos: &[&str], manage: bool) {
    let params = ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "bitbucket".into(),
            name: "code".into(),
            connection: "bb".into(),
            config: entry_config(repos, manage),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "bb".into(),
            connection_type: "bitbucket".into(),
            config: json!({"api_url": api_url}),
            secrets: vec!["token".into(), "webhook_secret".into()],
        }],
        public_url: public_url.into(),
        ..Default::default()
    };
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();
}

async fn task(peer: &Peer) -> Result<String, String> {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&TaskRunParams {
            task: hooks::TASK.into(),
            now: String::new(),
        }),
    )
    .await
    .unwrap()
    .map(|r: TaskRunResult| r.detail)
    .map_err(|e| format!("{e:?}"))
}

async fn check(peer: &Peer) -> CheckRunResult {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&CheckRunParams {
            check: hooks::CHECK.into(),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap()
}

/// The POSTs and PUTs to the webhooks of `repo`.
fn writes(bb: &Bitbucket, repo: &str) -> Vec<bitbucket::Seen> {
    bb.requests()
        .into_iter()
        .filter(|s| {
            (s.method == "POST" || s.method == "PUT")
                && s.target.starts_with(&format!("/repositories/{repo}/hooks"))
        })
        .collect()
}

/// The events the description allows a webhook (its enum).
fn described_events() -> Vec<String> {
    let d: Value =
        serde_json::from_str(&std::fs::read_to_string(bitbucket::description_path()).unwrap())
            .unwrap();
    d.pointer("/definitions/webhook_subscription/allOf/1/properties/events/items/enum")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn no_violations(bb: &Bitbucket) {
    let v = bb.violations();
    assert!(v.is_empty(), "Prism: {v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_webhook_is_created_once_kept_and_repaired() {
    let Some(bb) = bitbucket::shared_or_skip() else {
        return;
    };
    const A: &str = "acme/hooks-a";
    const B: &str = "acme/hooks-b";
    // Another webhook of A, not ours.
    bb.scripted.edit_hooks(A, |h| {
        h.push(json!({"type": "webhook_subscription", "uuid": "{00000000-0000-4000-8000-0000000000ci}",
                      "url": "https://ci.example.com/hook", "active": true, "events": ["repo:push"]}))
    });
    let host: SharedHost = Arc::default();
    host.lock().unwrap().secret = "bb_wh_first-secret".into();
    let (peer, _child) = start(host.clone()).await;
    configure(&peer, &bb.url, "https://a.example.com/", &[A, B], true).await;

    // The first pass (this one, or the one configure set off) creates one webhook
    // per repository.
    let detail = task(&peer).await.unwrap();
    assert!(detail.contains("s1/code"), "{detail}");
    let allowed = described_events();
    for repo in [A, B] {
        let w = writes(bb, repo);
        assert_eq!(w.len(), 1, "{w:#?}");
        assert_eq!(w[0].method, "POST");
        assert_eq!(w[0].target, format!("/repositories/{repo}/hooks"));
        assert_eq!(w[0].authorization, format!("Bearer {TOKEN}"));
        let body = &w[0].body;
        assert_eq!(body["url"], "https://a.example.com/bitbucket/s1/code");
        assert_eq!(body["active"], true);
        assert_eq!(body["secret"], "bb_wh_first-secret");
        assert_eq!(body["events"], json!(hooks::EVENTS));
        for e in hooks::EVENTS {
            assert!(allowed.iter().any(|a| a == e), "{e} not in the description");
        }
    }
    assert_eq!(bb.scripted.hooks(A).len(), 2);
    {
        let host = host.lock().unwrap();
        let kept = &host.kv[&format!("hook/s1/code/{A}")].0;
        assert!(
            kept["id"].as_str().unwrap().starts_with("{5f6e8a2c-"),
            "{kept}"
        );
        assert_eq!(kept["secret_sha256"].as_str().unwrap().len(), 64);
        for (v, _) in host.kv.values() {
            assert!(!v.to_string().contains("first-secret"));
        }
    }
    let c = check(&peer).await;
    assert_eq!(c.status, "ok", "{c:?}");
    assert!(
        c.items
            .iter()
            .any(|i| i.contains(&format!("{A} webhook")) && i.ends_with(" ok")),
        "{c:?}"
    );

    // A pass with nothing changed writes nothing.
    let commits = host.lock().unwrap().commits;
    let detail = task(&peer).await.unwrap();
    assert!(detail.contains("is as configured"), "{detail}");
    assert_eq!(writes(bb, A).len() + writes(bb, B).len(), 2);
    assert_eq!(host.lock().unwrap().commits, commits);

    // Changed at Bitbucket: drift in the check, repaired by the next pass.
    bb.scripted.edit_hooks(B, |hs| {
        hs[0]["active"] = json!(false);
        hs[0]["url"] = json!("https://old.example.com/bitbucket/s1/code");
        hs[0]["events"] = json!(["pullrequest:created", "repo:push"]);
    });
    let c = check(&peer).await;
    assert_eq!(
        (c.status.as_str(), c.code.as_str()),
        ("warn", "bitbucket_webhook_drift"),
        "{c:?}"
    );
    assert!(
        c.detail.contains(&format!("{B} webhook"))
            && c.detail.contains("drifted")
            && c.detail.contains("is inactive")
            && c.detail.contains("also sends repo:push")
            && c.detail
                .contains("delivers to https://old.example.com/bitbucket/s1/code"),
        "{}",
        c.detail
    );
    let detail = task(&peer).await.unwrap();
    assert!(detail.contains(&format!("updated {B} webhook")), "{detail}");
    let w = writes(bb, B);
    assert_eq!(w.len(), 2, "{w:#?}");
    assert_eq!(w[1].method, "PUT");
    assert!(
        w[1].target
            .starts_with(&format!("/repositories/{B}/hooks/%7B")),
        "{}",
        w[1].target
    );
    assert_eq!(w[1].body["url"], "https://a.example.com/bitbucket/s1/code");
    assert_eq!(w[1].body["active"], true);
    assert_eq!(writes(bb, A).len(), 1);
    assert_eq!(check(&peer).await.status, "ok");

    // A rotated secret is sent again (once per repository), then kept.
    host.lock().unwrap().secret = "bb_wh_second-secret".into();
    configure(&peer, &bb.url, "https://a.example.com", &[A, B], true).await;
    let deadline = tokio::time::Instant::now() + HANG;
    while writes(bb, A).len() + writes(bb, B).len() < 5 {
        task(&peer).await.unwrap();
        assert!(tokio::time::Instant::now() < deadline, "no secret update");
    }
    for repo in [A, B] {
        let w = writes(bb, repo);
        let last = w.last().unwrap();
        assert_eq!(last.method, "PUT");
        assert_eq!(last.body["secret"], "bb_wh_second-secret");
        assert_eq!(
            bb.scripted
                .hooks(repo)
                .iter()
                .filter(|h| h["_secret"] == "bb_wh_second-secret")
                .count(),
            1
        );
    }
    task(&peer).await.unwrap();
    assert_eq!(writes(bb, A).len() + writes(bb, B).len(), 5);

    // A lost KV record: found by its URL, not made again; a deleted one: missing.
    host.lock().unwrap().kv.remove(&format!("hook/s1/code/{A}"));
    task(&peer).await.unwrap();
    assert_eq!(bb.scripted.hooks(A).len(), 2);
    bb.scripted.edit_hooks(B, Vec::clear);
    let c = check(&peer).await;
    assert_eq!(
        (c.status.as_str(), c.code.as_str()),
        ("fail", "bitbucket_webhook_missing"),
        "{c:?}"
    );
    assert!(
        c.detail.contains(&format!("{B} webhook missing")),
        "{}",
        c.detail
    );
    task(&peer).await.unwrap();
    assert_eq!(bb.scripted.hooks(B).len(), 1);
    let writes_before = writes(bb, A).len() + writes(bb, B).len();

    // Without a public URL: the pass says why and changes nothing.
    configure(&peer, &bb.url, "", &[A, B], true).await;
    let why = task(&peer).await.unwrap_err();
    assert!(why.contains("no public_url"), "{why}");
    assert_eq!(writes(bb, A).len() + writes(bb, B).len(), writes_before);
    let c = check(&peer).await;
    assert!(c.detail.contains("no public_url"), "{c:?}");

    // Not managed: the check says so and reads nothing.
    configure(&peer, &bb.url, "https://a.example.com", &[A, B], false).await;
    let reads = bb.requests().len();
    let c = check(&peer).await;
    assert_eq!(c.status, "ok", "{c:?}");
    assert_eq!(c.items, vec!["s1/code: not managed".to_string()]);
    assert_eq!(task(&peer).await.unwrap(), "no entry sets manage_webhook");
    assert_eq!(bb.requests().len(), reads);

    // Every request was valid against the description, and no secret is logged.
    no_violations(bb);
    for line in bb.prism.lines() {
        assert!(
            !line.contains("second-secret") && !line.contains(TOKEN),
            "{line}"
        );
    }
}

#[test]
fn manage_webhook_is_a_boolean_named_when_wrong_and_described() {
    let base = entry_config(&["acme/widgets"], false);
    let mut bad = base.clone();
    bad["manage_webhook"] = json!("yes");
    let e = oc_bitbucket::config::parse_entry(&bad).unwrap_err();
    assert_eq!(e.pointer, "/manage_webhook");
    let on = entry_config(&["acme/widgets"], true);
    let parsed = oc_bitbucket::config::parse_entry(&on).unwrap();
    assert!(parsed.manage_webhook);
    assert!(parsed.describe().contains("manage_webhook"));
    assert!(
        !oc_bitbucket::config::parse_entry(&base)
            .unwrap()
            .manage_webhook
    );
    let manifest: Value = serde_json::from_str(oc_bitbucket::MANIFEST).unwrap();
    let provides = &manifest["provides"];
    assert!(provides["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == hooks::TASK));
    assert!(provides["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == hooks::CHECK));
    assert!(provides["extensions"][0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "manage_webhook"));
}
