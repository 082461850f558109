//! `ingress.reconcile` through the real `oc-bitbucket-extension` binary with this test
//! as the host (`secret.resolve`), against the scripted Bitbucket of
//! `tests/src/bitbucket.rs` behind Prism over Atlassian's published description: a
//! comment whose webhook was missed is found, under the delivery ID its webhook (the
//! real `pullrequest:comment_created` fixture) gets, with the same comment data; a
//! pull request created since and one merged since are observed as their webhooks
//! would be; an unchanged pull request, an older comment and the agent's own comment
//! are not; pages follow Bitbucket's `next` links and go through every repository;
//! the checkpoint moves to the newest change, and a scan from it finds the comment
//! again only under the same identity (the same Event again); every request passes
//! Prism's validation. Without Prism, the API's refusals (401, 403, 404, 429) fail
//! the page and leave the checkpoint.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../../../tests/src/bitbucket.rs"]
mod bitbucket;

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::time::Duration;

use oc_bitbucket::config::{parse_entry, Registry};
use oc_bitbucket::intake::{precheck, process, sign};
use protocol::wire::{
    ConfigureParams, Connection, Entry, HostInfo, IngressReconcileParams, IngressReconcileResult,
    InitializeParams, Observation, SecretResolveParams, WebhookHandleParams,
};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-bitbucket-extension");
const HANG: Duration = Duration::from_secs(60);
const TOKEN: &str = "bbtok-RECONCILE-SECRET-7d1";
const SECRET: &[u8] = b"bb-webhook-secret-reconcile";
const COMMENT: &[u8] = include_bytes!("fixtures/pull-request-comment-created.json");
/// The fixtures' repository.
const REPO: &str = "team_name/repo_name";
/// A repository with no pull requests changed.
const QUIET: &str = "acme/quiet";
const AGENT: &str = "557058:agent";
const SOURCE: &str = "bitbucket/s1/code";

async fn start() -> (Peer, tokio::process::Child) {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let handler = FnHandler(move |request: protocol::Request| async move {
        match request.method.as_str() {
            "secret.resolve" => {
                let p: SecretResolveParams = request.params()?;
                let values: HashMap<String, String> = p
                    .names
                    .iter()
                    .map(|n| (n.clone(), TOKEN.to_string()))
                    .collect();
                Ok(json!({ "values": values }))
            }
            other => Err(RpcError::new(Code::NotFound, format!("no {other}"))),
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

fn entry_config(repos: &[&str]) -> Value {
    json!({"repositories": repos, "mention": "@conduit", "agent_account_id": AGENT})
}

async fn configure(peer: &Peer, api_url: &str, repos: &[&str]) {
    let params = ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "bitbucket".into(),
            name: "code".into(),
            connection: "bb".into(),
            config: entry_config(repos),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "bb".into(),
            connection_type: "bitbucket".into(),
            config: json!({"api_url": api_url}),
            secrets: vec!["token".into(), "webhook_secret".into()],
        }],
        ..Default::default()
    };
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();
}

async fn reconcile(
    peer: &Peer,
    checkpoint: &str,
    cursor: &str,
    max_items: u32,
) -> Result<IngressReconcileResult, CallError> {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&IngressReconcileParams {
            source: SOURCE.into(),
            generation: 1,
            cursor: cursor.into(),
            checkpoint: checkpoint.into(),
            max_items,
            max_bytes: 4 * 1024 * 1024,
        }),
    )
    .await
    .unwrap()
}

/// A whole scan from `checkpoint`: every page's observations, the pages, and the
/// new checkpoint.
async fn scan(peer: &Peer, checkpoint: &str, max_items: u32) -> (Vec<Observation>, usize, String) {
    let mut cursor = String::new();
    let mut items = Vec::new();
    for pages in 1..=50 {
        let page = reconcile(peer, checkpoint, &cursor, max_items)
            .await
            .unwrap();
        assert!(page.items.len() <= max_items as usize, "{page:?}");
        items.extend(page.items);
        if page.complete {
            assert!(page.cursor.is_empty());
            return (items, pages, page.checkpoint);
        }
        assert!(!page.cursor.is_empty());
        cursor = page.cursor;
    }
    panic!("the scan did not complete in 50 pages");
}

fn user(name: &str, account_id: &str) -> Value {
    json!({"type": "user", "display_name": name, "account_id": account_id,
           "uuid": "{a54f16da-24e9-4d7f-a3a7-b1ba2cd98aa3}", "nickname": name.to_lowercase()})
}

/// A pull request as the API answers it.
fn pull_request(id: u64, state: &str, created: &str, updated: &str) -> Value {
    let mut pr = json!({
        "type": "pullrequest", "id": id, "title": format!("Pull request {id}"),
        "description": "Fixes the login page.", "state": state,
        "author": user("Ann", "557058:ann"),
        "source": {"branch": {"name": format!("feature/{id}")}, "commit": {"hash": "d3022fc0ca3d"}},
        "destination": {"branch": {"name": "master"}, "commit": {"hash": "ce5965ddd289"}},
        "links": {"html": {"href": format!("https://bitbucket.org/{REPO}/pull-requests/{id}")}},
        "comment_count": 0, "task_count": 0, "close_source_branch": false,
        "created_on": created, "updated_on": updated,
    });
    if state != "OPEN" {
        pr["closed_by"] = user("Ann", "557058:ann");
    }
    pr
}

fn comment(id: u64, by: Value, text: &str, at: &str) -> Value {
    json!({
        "type": "pullrequest_comment", "id": id, "deleted": false, "user": by,
        "content": {"raw": text, "markup": "markdown", "html": format!("<p>{text}</p>")},
        "created_on": at, "updated_on": at,
        "links": {"html": {"href": format!("https://bitbucket.org/{REPO}/pull-requests/1#comment-{id}")}},
    })
}

/// The fixture's comment as the API answers it: the same comment (ID 17, its
/// parent, inline place, text and links) with its author (the delivery's actor), at
/// `at`, in the description's shapes.
fn fixture_comment(at: &str) -> Value {
    let payload: Value = serde_json::from_slice(COMMENT).unwrap();
    let mut c = payload["comment"].clone();
    c["type"] = json!("pullrequest_comment");
    c["parent"]["type"] = json!("pullrequest_comment");
    c["user"] = payload["actor"].clone();
    // As the description wants an answer: an account with its `type`, and an
    // inline comment's `from` absent rather than null (an integer when present).
    c["user"]["type"] = json!("user");
    c["inline"].as_object_mut().unwrap().remove("from");
    c["deleted"] = json!(false);
    c["created_on"] = json!(at);
    c["updated_on"] = json!(at);
    c
}

/// What intake makes of the fixture's `pullrequest:comment_created` webhook.
fn webhook_of_fixture() -> (String, protocol::wire::IngressEvent) {
    let registry = Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "bitbucket".into(),
            name: "code".into(),
            connection: "bb".into(),
            config: entry_config(&[REPO, QUIET]),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "bb".into(),
            connection_type: "bitbucket".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap();
    let mut headers = BTreeMap::new();
    headers.insert("X-Hub-Signature".to_string(), vec![sign(SECRET, COMMENT)]);
    headers.insert(
        "X-Event-Key".to_string(),
        vec!["pullrequest:comment_created".to_string()],
    );
    headers.insert(
        "X-Request-UUID".to_string(),
        vec!["0b6b4d1e-7a55-4c9e-9d71-5a0b0d2c4e11".to_string()],
    );
    let params = WebhookHandleParams {
        method: "POST".into(),
        path: "/bitbucket/s1/code".into(),
        headers,
        body: COMMENT.to_vec(),
        ..Default::default()
    };
    let entry = precheck(&registry, &params).unwrap();
    let mut result = process(entry, SECRET, &params);
    assert_eq!(result.response.status, 200);
    let d = result.deliveries.remove(0);
    (d.delivery_id, d.events.into_iter().next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_comment_is_found_once_under_its_webhook_s_identity() {
    let Some(bb) = bitbucket::shared_or_skip() else {
        return;
    };
    bb.scripted.set_next_base(&bb.url);
    let anna = user("Ann", "557058:ann");
    bb.scripted.list(
        REPO,
        vec![
            // Commented on since the checkpoint: an old comment, the missed one (the
            // fixture's), and the agent's own.
            pull_request(
                1,
                "OPEN",
                "2026-01-05T09:00:00.000000+00:00",
                "2026-01-05T10:05:00.000000+00:00",
            ),
            // Unchanged since long before the checkpoint, with an old comment.
            pull_request(
                2,
                "OPEN",
                "2026-01-04T08:00:00.000000+00:00",
                "2026-01-04T08:30:00.000000+00:00",
            ),
            // Merged since.
            pull_request(
                3,
                "MERGED",
                "2026-01-05T08:00:00.000000+00:00",
                "2026-01-05T10:02:00.000000+00:00",
            ),
            // Opened since.
            pull_request(
                4,
                "OPEN",
                "2026-01-05T10:01:00.000000+00:00",
                "2026-01-05T10:01:00.000000+00:00",
            ),
            // Superseded: not a state the scan lists.
            pull_request(
                5,
                "SUPERSEDED",
                "2026-01-05T10:01:00.000000+00:00",
                "2026-01-05T10:03:00.000000+00:00",
            ),
        ],
        vec![
            (
                1,
                vec![
                    comment(
                        16,
                        anna.clone(),
                        "Looks off.",
                        "2026-01-05T09:30:00.000000+00:00",
                    ),
                    comment(
                        18,
                        user("Conduit", AGENT),
                        "On it.",
                        "2026-01-05T10:04:00.000000+00:00",
                    ),
                    fixture_comment("2026-01-05T10:05:00.000000+00:00"),
                ],
            ),
            (
                2,
                vec![comment(
                    20,
                    anna,
                    "Old.",
                    "2026-01-04T08:20:00.000000+00:00",
                )],
            ),
        ],
    );
    bb.scripted.list(QUIET, Vec::new(), Vec::new());
    let (peer, _child) = start().await;
    configure(&peer, &bb.url, &[REPO, QUIET]).await;

    // Two items a page: the first list page (pull requests 1 and 3) fills it, the
    // second (4) follows the `next` link, the quiet repository ends the scan.
    let (items, pages, checkpoint) = scan(&peer, "2026-01-05T10:00:00.000Z", 2).await;
    let ids: Vec<&str> = items.iter().map(|o| o.delivery_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "pullrequest/team_name/repo_name/1/comment/17",
            "pullrequest/team_name/repo_name/3/fulfilled",
            "pullrequest/team_name/repo_name/4/created",
        ],
        "{items:#?}"
    );
    assert_eq!(pages, 3);
    assert_eq!(checkpoint, "2026-01-05T10:05:00.000Z");
    for o in &items {
        assert_eq!(o.item, o.delivery_id);
        assert_eq!(o.events.len(), 1);
        assert!(o.events[0].snapshot, "{o:?}");
    }
    assert_eq!(items[0].version, "2026-01-05T10:05:00.000Z");
    assert_eq!(
        items[1].events[0].event_type,
        "bitbucket.pullrequest.fulfilled"
    );
    assert_eq!(
        items[2].events[0].event_type,
        "bitbucket.pullrequest.created"
    );

    // The missed comment is the Event its webhook makes: the same delivery ID, type,
    // key and comment.
    let (webhook_id, webhook_event) = webhook_of_fixture();
    assert_eq!(webhook_id, items[0].delivery_id);
    assert!(webhook_event.snapshot);
    let polled = &items[0].events[0];
    assert_eq!(polled.event_type, webhook_event.event_type);
    assert_eq!(polled.keys, webhook_event.keys);
    assert_eq!(polled.payload.schema, webhook_event.payload.schema);
    assert_eq!(
        polled.payload.data["comment"],
        webhook_event.payload.data["comment"]
    );
    assert_eq!(polled.payload.data["comment"]["id"], 17);
    assert_eq!(polled.payload.data["actor"], "Emma");

    // The requests: as described, with the token, the queries Bitbucket's filter
    // language reads.
    let lists = bb.requests_to("GET", &format!("{REPO}/pullrequests"));
    assert_eq!(lists.len(), 2, "{lists:#?}");
    assert!(lists[0].target.contains(
        "q=updated_on%3E2026-01-05T09%3A55%3A00%2B00%3A00&sort=-updated_on&state=OPEN&state=MERGED&state=DECLINED&pagelen=2"
    ), "{}", lists[0].target);
    assert!(lists[1].target.contains("page=2"), "{}", lists[1].target);
    let comment_lists = bb.requests_to("GET", "/comments");
    assert!(comment_lists.iter().all(|s| s
        .target
        .contains("q=created_on%3E2026-01-05T09%3A55%3A00%2B00%3A00&")));
    assert!(!comment_lists
        .iter()
        .any(|s| s.target.contains("/pullrequests/2/")));
    assert_eq!(
        bb.requests_to("GET", &format!("{QUIET}/pullrequests"))
            .len(),
        1
    );
    for s in bb.requests() {
        assert_eq!(s.method, "GET");
        assert_eq!(s.authorization, format!("Bearer {TOKEN}"));
    }

    // A scan from the new checkpoint (its overlap covers the comment) finds it only
    // under the same identity: the same Event again, which the host keeps once.
    let (again, _, checkpoint2) = scan(&peer, &checkpoint, 20).await;
    let again_ids: Vec<&str> = again.iter().map(|o| o.delivery_id.as_str()).collect();
    assert!(again_ids.contains(&"pullrequest/team_name/repo_name/1/comment/17"));
    assert!(again_ids.iter().all(|i| ids.contains(i)), "{again_ids:?}");
    assert_eq!(checkpoint2, checkpoint);
    // Past the overlap, nothing is observed and the checkpoint stays.
    let (later, _, checkpoint3) = scan(&peer, "2026-01-05T10:20:00.000Z", 20).await;
    assert!(later.is_empty(), "{later:#?}");
    assert_eq!(checkpoint3, "2026-01-05T10:20:00.000Z");

    let v = bb.violations();
    assert!(v.is_empty(), "Prism reported violations: {v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_fails_the_page_and_names_its_meaning() {
    let scripted = bitbucket::Scripted::start().unwrap();
    let (peer, _child) = start().await;
    configure(&peer, &scripted.url, &[REPO]).await;
    for (status, headers, code, says) in [
        (401, "", Code::Unauthorized, "credentials were refused"),
        (403, "", Code::Unauthorized, "lacks the permission"),
        (404, "", Code::NotFound, "no such repository"),
        (
            429,
            "Retry-After: 30\r\n",
            Code::Unavailable,
            "Retry-After 30 s",
        ),
    ] {
        scripted.fail_with(Some((
            status,
            headers,
            r#"{"type": "error", "error": {"message": "refused"}}"#,
        )));
        let e = reconcile(&peer, "2026-01-05T10:00:00.000Z", "", 50)
            .await
            .unwrap_err();
        assert!(e.is(code), "{status}: {e:?}");
        let message = &e.rpc().unwrap().message;
        assert!(message.contains(says), "{status}: {message}");
        assert!(!message.contains(TOKEN));
    }
    scripted.fail_with(None);
    // A cursor the package did not make is refused.
    let e = reconcile(&peer, "", "v9|x", 50).await.unwrap_err();
    let e = e.rpc().unwrap();
    assert_eq!(e.code, protocol::error::INVALID_PARAMS, "{e:?}");
    assert!(e.message.contains("cursor"), "{e:?}");
}

#[test]
fn the_interval_is_declared_and_bounded() {
    let registry = Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "bitbucket".into(),
            name: "code".into(),
            connection: "bb".into(),
            config: entry_config(&[REPO]),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "bb".into(),
            connection_type: "bitbucket".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap();
    let sources = registry.configure_result().sources;
    assert_eq!(sources[0].reconcile_interval_s, 300);
    let off =
        parse_entry(&json!({"repositories": [REPO], "mention": "@c", "reconcile_interval_s": 0}))
            .unwrap();
    assert_eq!(off.reconcile_interval_s, 0);
    let e = parse_entry(
        &json!({"repositories": [REPO], "mention": "@c", "reconcile_interval_s": 86_401}),
    )
    .unwrap_err();
    assert_eq!(e.pointer, "/reconcile_interval_s");
}
