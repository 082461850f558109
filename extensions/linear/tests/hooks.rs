//! The managed webhooks (`manage_webhook`, the `linear.webhooks` task) and the
//! `webhooks` doctor check, through the real `oc-linear-extension` binary with this
//! test as the host (`secret.resolve`, `kv.get`, `kv.commit`) and the
//! schema-validating stand-in of Linear's API: the first pass creates one webhook
//! per team (URL `public_url` + path, Issue and Comment, the connection's secret,
//! enabled), a pass with nothing changed writes nothing (no mutation, no KV write),
//! a webhook changed at Linear is drift in the check and the next pass updates it,
//! a rotated secret is sent again, a lost KV record finds the webhook by its URL,
//! without a public URL the pass says why and changes nothing, and a refused key
//! fails the pass saying what it needs. The secret is in no KV record.

#![allow(clippy::unwrap_used)]

mod standin;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oc_linear::hooks;
use protocol::wire::{
    CheckRunParams, CheckRunResult, ConfigureParams, Connection, Entry, HostInfo, InitializeParams,
    KvCommitParams, KvExpect, KvGetParams, SecretResolveParams, TaskRunParams, TaskRunResult,
};
use protocol::{connect, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-linear-extension");
const HANG: Duration = Duration::from_secs(60);
const KEY: &str = "lin_api_HOOKS_TEST_KEY_42";

#[derive(Default)]
struct Host {
    kv: HashMap<String, (Value, String)>,
    commits: usize,
    secret: String,
}

type Shared = Arc<Mutex<Host>>;

async fn start(host: Shared) -> (Peer, tokio::process::Child) {
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
                            let v = if n == "api_key" {
                                KEY.into()
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
    let peer = connect(stdout, stdin, handler, Options::named("extension linear"));
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

async fn configure(peer: &Peer, api_url: &str, public_url: &str, manage: bool) {
    let params = ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "linear".into(),
            name: "eng".into(),
            connection: "lin".into(),
            config: json!({"teams": ["LIN", "OPS"], "agent_user": "agent@example.com",
                           "manage_webhook": manage}),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "lin".into(),
            connection_type: "linear".into(),
            config: json!({"api_url": api_url}),
            secrets: vec!["api_key".into(), "webhook_secret".into()],
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

fn writes(seen: &standin::Seen) -> Vec<(String, Value)> {
    seen.requests
        .iter()
        .filter(|r| r.0 == "OcWebhookCreate" || r.0 == "OcWebhookUpdate")
        .map(|r| (r.0.clone(), r.1.clone()))
        .collect()
}

#[test]
fn the_webhook_and_comment_documents_are_valid_against_linears_schema() {
    let Some(mut v) = standin::Validator::start() else {
        return;
    };
    for (name, doc) in hooks::DOCUMENTS
        .iter()
        .chain(oc_linear::reconcile::DOCUMENTS.iter())
    {
        assert_eq!(standin::operation_name(doc), *name);
        let errors = v.errors(doc);
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_webhook_is_created_once_kept_and_repaired() {
    let Some(v) = standin::Validator::start() else {
        return;
    };
    let (url, seen) = standin::stand_in(v);
    // Another webhook of the workspace, not ours.
    seen.lock().unwrap().webhooks.push(json!({
        "id": "0c1d2e3f-0000-4000-8000-000000000099", "url": "https://ci.example.com/hook",
        "enabled": true, "resourceTypes": ["Issue"], "team": {"id": "team-LIN", "key": "LIN"}}));
    let host: Shared = Arc::default();
    host.lock().unwrap().secret = "lin_wh_first-secret".into();
    let (peer, _child) = start(host.clone()).await;
    configure(&peer, &url, "https://a.example.com/", true).await;

    // The first pass (this one, or the one configure set off) creates one webhook
    // per team.
    let detail = task(&peer).await.unwrap();
    assert!(detail.contains("s1/eng"), "{detail}");
    {
        let seen = seen.lock().unwrap();
        let made = writes(&seen);
        assert_eq!(made.len(), 2, "{made:#?}");
        let teams: Vec<&str> = made
            .iter()
            .map(|(op, v)| {
                assert_eq!(op, "OcWebhookCreate");
                let input = &v["input"];
                assert_eq!(input["url"], "https://a.example.com/linear/s1/eng");
                assert_eq!(input["resourceTypes"], json!(["Comment", "Issue"]));
                assert_eq!(input["secret"], "lin_wh_first-secret");
                assert_eq!(input["enabled"], true);
                input["teamId"].as_str().unwrap()
            })
            .collect();
        assert_eq!(teams, vec!["LIN", "OPS"]);
        for r in &seen.requests {
            assert!(r.3.is_empty(), "{} refused by the schema: {:?}", r.0, r.3);
            assert_eq!(r.2, KEY);
        }
        assert_eq!(seen.webhooks.len(), 3);
    }
    {
        let host = host.lock().unwrap();
        let kept = &host.kv["hook/s1/eng/LIN"].0;
        assert!(
            kept["id"].as_str().unwrap().starts_with("5e0d0b1c-"),
            "{kept}"
        );
        assert_eq!(kept["secret_sha256"].as_str().unwrap().len(), 64);
        assert!(!kept.to_string().contains("first-secret"));
    }
    let c = check(&peer).await;
    assert_eq!(c.status, "ok", "{c:?}");
    assert!(
        c.items
            .iter()
            .any(|i| i.contains("LIN webhook") && i.ends_with(" ok")),
        "{c:?}"
    );

    // A pass with nothing changed writes nothing.
    let commits = host.lock().unwrap().commits;
    let detail = task(&peer).await.unwrap();
    assert!(detail.contains("is as configured"), "{detail}");
    assert_eq!(writes(&seen.lock().unwrap()).len(), 2);
    assert_eq!(host.lock().unwrap().commits, commits);

    // Changed at Linear: drift in the check, repaired by the next pass.
    {
        let mut seen = seen.lock().unwrap();
        let hook = seen
            .webhooks
            .iter_mut()
            .find(|h| h["team"]["key"] == "OPS")
            .unwrap();
        hook["enabled"] = json!(false);
        hook["url"] = json!("https://old.example.com/linear/s1/eng");
    }
    let c = check(&peer).await;
    assert_eq!(
        (c.status.as_str(), c.code.as_str()),
        ("warn", "linear_webhook_drift"),
        "{c:?}"
    );
    assert!(
        c.detail.contains("OPS webhook")
            && c.detail.contains("drifted")
            && c.detail.contains("is disabled")
            && c.detail
                .contains("delivers to https://old.example.com/linear/s1/eng"),
        "{}",
        c.detail
    );
    let detail = task(&peer).await.unwrap();
    assert!(detail.contains("updated OPS webhook"), "{detail}");
    {
        let seen = seen.lock().unwrap();
        let w = writes(&seen);
        assert_eq!(w.len(), 3, "{w:#?}");
        assert_eq!(w[2].0, "OcWebhookUpdate");
        assert_eq!(
            w[2].1["input"]["url"],
            "https://a.example.com/linear/s1/eng"
        );
        assert_eq!(w[2].1["input"]["enabled"], true);
    }
    assert_eq!(check(&peer).await.status, "ok");

    // A rotated secret is sent again (once per team), then kept.
    host.lock().unwrap().secret = "lin_wh_second-secret".into();
    configure(&peer, &url, "https://a.example.com", true).await;
    let deadline = tokio::time::Instant::now() + HANG;
    while writes(&seen.lock().unwrap()).len() < 5 {
        task(&peer).await.unwrap();
        assert!(tokio::time::Instant::now() < deadline, "no secret update");
    }
    {
        let seen = seen.lock().unwrap();
        let w = writes(&seen);
        assert_eq!(w.len(), 5, "{w:#?}");
        for (op, v) in &w[3..] {
            assert_eq!(op, "OcWebhookUpdate");
            assert_eq!(v["input"]["secret"], "lin_wh_second-secret");
        }
    }
    task(&peer).await.unwrap();
    assert_eq!(writes(&seen.lock().unwrap()).len(), 5);

    // Without a public URL: the pass says why and changes nothing.
    configure(&peer, &url, "", true).await;
    let why = task(&peer).await.unwrap_err();
    assert!(why.contains("no public_url"), "{why}");
    assert_eq!(writes(&seen.lock().unwrap()).len(), 5);
    let c = check(&peer).await;
    assert!(c.detail.contains("no public_url"), "{c:?}");

    // Not managed: the check says so and lists nothing.
    let reads = seen.lock().unwrap().requests.len();
    configure(&peer, &url, "https://a.example.com", false).await;
    let c = check(&peer).await;
    assert_eq!(c.status, "ok", "{c:?}");
    assert_eq!(c.items, vec!["s1/eng: not managed".to_string()]);
    assert_eq!(task(&peer).await.unwrap(), "no entry sets manage_webhook");
    assert_eq!(seen.lock().unwrap().requests.len(), reads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_whose_record_is_lost_is_found_by_its_url_and_a_missing_one_is_reported() {
    let Some(v) = standin::Validator::start() else {
        return;
    };
    let (url, seen) = standin::stand_in(v);
    // Ours, made before KV lost its record (found by URL and team); OPS has none.
    seen.lock().unwrap().webhooks.push(json!({
        "id": "0c1d2e3f-0000-4000-8000-000000000001",
        "url": "https://a.example.com/linear/s1/eng", "enabled": true,
        "resourceTypes": ["Issue", "Comment"], "team": {"id": "team-LIN", "key": "LIN"}}));
    let host: Shared = Arc::default();
    host.lock().unwrap().secret = "lin_wh_s".into();
    let (peer, _child) = start(host.clone()).await;
    // Not managed yet: configure sets off no pass; then the check of a managed entry.
    configure(&peer, &url, "https://a.example.com", false).await;
    let found =
        standin::webhooks_answer(&mut seen.lock().unwrap(), "OcWebhooks", &Value::Null).unwrap();
    let hooks_listed = found["data"]["webhooks"]["nodes"]
        .as_array()
        .unwrap()
        .clone();
    let entry = oc_linear::config::Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "linear".into(),
            name: "eng".into(),
            connection: "lin".into(),
            config: json!({"teams": ["LIN", "OPS"], "agent_user": "a"}),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap()
    .entries
    .remove(0);
    assert_eq!(
        hooks::find(&hooks_listed, None, &entry, "LIN").map(|h| h["id"].clone()),
        Some(json!("0c1d2e3f-0000-4000-8000-000000000001"))
    );
    assert!(hooks::find(&hooks_listed, None, &entry, "OPS").is_none());
    let d = hooks::Desired::of(&entry, "LIN", "https://a.example.com");
    assert!(hooks::drift(&hooks_listed[0], &d).is_empty());

    // (this pass, or the one configure set off: they never overlap)
    configure(&peer, &url, "https://a.example.com", true).await;
    task(&peer).await.unwrap();
    {
        let seen = seen.lock().unwrap();
        let w = writes(&seen);
        assert_eq!(w.len(), 2, "{w:#?}");
        let update = w.iter().find(|(op, _)| op == "OcWebhookUpdate").unwrap();
        assert_eq!(update.1["id"], "0c1d2e3f-0000-4000-8000-000000000001");
        assert_eq!(update.1["input"]["secret"], "lin_wh_s");
        let create = w.iter().find(|(op, _)| op == "OcWebhookCreate").unwrap();
        assert_eq!(create.1["input"]["teamId"], "OPS");
        assert_eq!(seen.webhooks.len(), 2);
    }
    assert!(task(&peer).await.unwrap().contains("is as configured"));

    // One deleted at Linear: missing in the check.
    seen.lock()
        .unwrap()
        .webhooks
        .retain(|h| h["team"]["key"] != "OPS");
    let c = check(&peer).await;
    assert_eq!(
        (c.status.as_str(), c.code.as_str()),
        ("fail", "linear_webhook_missing"),
        "{c:?}"
    );
    assert!(c.detail.contains("OPS webhook missing"), "{}", c.detail);

    // A key Linear refuses: the pass fails saying what the key needs, and doctor
    // shows it; the key is in neither.
    seen.lock().unwrap().answer = Some((
        401,
        Vec::new(),
        json!({"errors": [{"message": "Authentication required",
                           "extensions": {"code": "AUTHENTICATION_ERROR"}}]})
        .to_string(),
    ));
    let why = task(&peer).await.unwrap_err();
    assert!(
        why.contains("admin scope") && why.contains("s1/eng"),
        "{why}"
    );
    assert!(!why.contains(KEY));
    let c = check(&peer).await;
    assert_eq!(c.status, "fail", "{c:?}");
    assert!(
        c.detail.contains("last webhooks pass failed"),
        "{}",
        c.detail
    );
    assert!(!c.detail.contains(KEY));
}

#[test]
fn manage_webhook_is_a_boolean_named_when_wrong_and_described() {
    let base = json!({"teams": ["LIN"], "agent_user": "a@example.com"});
    let mut bad = base.clone();
    bad["manage_webhook"] = json!("yes");
    let e = oc_linear::config::parse_entry(&bad).unwrap_err();
    assert_eq!(e.pointer, "/manage_webhook");
    let mut on = base.clone();
    on["manage_webhook"] = json!(true);
    let parsed = oc_linear::config::parse_entry(&on).unwrap();
    assert!(parsed.manage_webhook);
    assert!(parsed.describe().contains("manage_webhook"));
    assert!(
        !oc_linear::config::parse_entry(&base)
            .unwrap()
            .manage_webhook
    );
    // The manifest declares the task, the check and the field.
    let manifest: Value = serde_json::from_str(oc_linear::MANIFEST).unwrap();
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
