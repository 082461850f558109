//! `bitbucket.wait_build`, the reply wait a change request wakes, the route closing
//! a merged or declined pull request's Work, and the link Event of a pull request
//! the agent opens: planning through Prism over Atlassian's published description
//! (tests/bitbucket-api) in front of the scripted Bitbucket of `tests/src/bitbucket.rs`,
//! and the real extension process over a fake host that records `event.accept`.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../../../tests/src/bitbucket.rs"]
mod bitbucket;

use bitbucket::{BUILT_COMMIT_FULL, SOURCE_COMMIT, SOURCE_COMMIT_FULL, UNBUILT_COMMIT_FULL};
use oc_bitbucket::api::{Auth, Client};
use oc_bitbucket::build::{self, Looked};
use oc_bitbucket::intake;
use serde_json::{json, Value};

const TOKEN: &str = "bbtok-SECRET-5c2d";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn wait_build_planning_reads_valid_requests_and_answers_a_wait_or_the_states() {
    let Some(bb) = bitbucket::shared_or_skip() else {
        return;
    };
    let rt = rt();
    let client = Client::new(&bb.url, Auth::Bearer(TOKEN.into())).unwrap();
    let look = |id: u64| {
        rt.block_on(build::look(
            &client,
            "w1",
            "acme/widgets",
            id,
            600,
            1_000_000,
        ))
        .unwrap_or_else(|e| panic!("{e:?}\n{}", bb.prism.lines().join("\n")))
    };

    // Pull request 5: one build passed, one in progress: a Wait on the full commit.
    let Looked::Wait(w) = look(5) else {
        panic!("a build in progress must be waited for")
    };
    assert_eq!(
        w.keys,
        [format!("bitbucket:acme/widgets@{SOURCE_COMMIT_FULL}")]
    );
    assert_eq!(
        w.keys[0],
        intake::commit_key("acme/widgets", SOURCE_COMMIT_FULL)
    );
    assert_eq!(
        w.types,
        [
            "bitbucket.commit_status.created",
            "bitbucket.commit_status.updated"
        ]
    );
    assert_eq!(w.due_at, protocol::time::format_rfc3339_ms(1_600_000));
    assert_eq!(
        w.description,
        "builds of acme/widgets#5 (commit d3022fc0ca3d): 1 of 2 in progress"
    );
    let plan: build::Plan = serde_json::from_value(w.plan.clone()).unwrap();
    assert_eq!(
        plan,
        build::Plan {
            wait: "build".into(),
            work_id: "w1".into(),
            repository: "acme/widgets".into(),
            pull_request: 5,
            commit: SOURCE_COMMIT_FULL.into(),
            in_progress: vec!["Unit tests".into()],
        }
    );

    // Pull request 8: every build finished: answered at once with each state.
    match look(8) {
        Looked::Finished { commit, builds } => {
            assert_eq!(commit, BUILT_COMMIT_FULL);
            let states: Vec<(&str, &str)> = builds
                .iter()
                .map(|b| (b.name.as_str(), b.state.as_str()))
                .collect();
            assert_eq!(states, [("Lint", "FAILED"), ("Unit tests", "SUCCESSFUL")]);
            assert_eq!(
                build::finished_message("acme/widgets", 8, &commit, &builds),
                "nothing to wait for: the builds of acme/widgets#8 (commit 5b1e0a7c9d21) have finished, 1 passed, 1 did not: Lint FAILED; Unit tests SUCCESSFUL"
            );
        }
        other => panic!("finished builds must be answered at once: {other:?}"),
    }

    // Pull request 9: no build reported yet: a Wait (the first status may come).
    let Looked::Wait(w) = look(9) else {
        panic!("no build yet must be waited for")
    };
    assert_eq!(
        w.keys,
        [intake::commit_key("acme/widgets", UNBUILT_COMMIT_FULL)]
    );
    assert!(
        w.description.ends_with("none reported yet"),
        "{}",
        w.description
    );

    // What was asked: the pull request, its commit by the short hash, the statuses
    // by the full one, with the token; Prism found nothing the description refuses.
    // (The other test shares this Bitbucket: its requests count too.)
    assert!(!bb
        .requests_to(
            "GET",
            &format!("/repositories/acme/widgets/commit/{SOURCE_COMMIT}")
        )
        .is_empty());
    let statuses = bb.requests_to(
        "GET",
        &format!("/repositories/acme/widgets/commit/{SOURCE_COMMIT_FULL}/statuses"),
    );
    assert!(!statuses.is_empty());
    assert!(
        statuses[0].target.contains("pagelen=100"),
        "{}",
        statuses[0].target
    );
    assert!(bb
        .requests()
        .iter()
        .all(|r| r.authorization == format!("Bearer {TOKEN}")));
    let v = bb.violations();
    assert!(v.is_empty(), "Prism reported violations: {v:?}");
}

// ---- the real extension process ----------------------------------------------------

mod process {
    use super::*;
    use protocol::wire::{
        Authority, Call, ConfigureParams, Connection, DependencyFilterParams,
        DependencyFilterResult, Entry, Event, EventAcceptParams, EventAcceptResult, HostInfo,
        InitializeParams, KvCommitParams, KvCommitResult, KvGetParams, KvGetResult,
        OperationCallParams, OperationCallResult, OperationWaitParams, OperationWaitResult,
        Payload, RouteMatchParams, RouteMatchResult, SecretResolveParams, SecretResolveResult,
        StateEventsResult, StateWorkEventsParams, StateWorkParams, StateWorkResult,
        WebhookHandleParams, WebhookHandleResult, Work,
    };
    use protocol::{connect, FnHandler, Options, RpcError};
    use std::collections::{BTreeMap, HashMap};
    use std::process::Stdio;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    const EXE: &str = env!("CARGO_BIN_EXE_oc-bitbucket-extension");
    const APPROVED: &[u8] = include_bytes!("fixtures/pull-request-approved.json");
    const SECRET: &str = "whsec-bb-91aa";

    async fn within<F: std::future::Future>(f: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("hung")
    }

    /// What the host serves: secrets, Works and their Events, a KV, and the Events
    /// the extension accepts (recorded).
    #[derive(Default)]
    struct Host {
        works: Mutex<HashMap<String, Vec<String>>>,
        events: Mutex<Vec<Event>>,
        kv: Mutex<HashMap<String, Value>>,
        accepted: Mutex<Vec<EventAcceptParams>>,
    }

    fn serve(host: &Host, request: &protocol::Request) -> Result<Value, RpcError> {
        let m = request.method.as_str();
        if m == <SecretResolveParams as Call>::METHOD {
            let params: SecretResolveParams = request.params()?;
            let mut result = SecretResolveResult::default();
            for name in params.names {
                let value = match name.as_str() {
                    "webhook_secret" => SECRET,
                    "token" => TOKEN,
                    _ => continue,
                };
                result.values.insert(name, value.to_string());
            }
            return Ok(serde_json::to_value(result).unwrap());
        }
        if m == <StateWorkParams as Call>::METHOD {
            let params: StateWorkParams = request.params()?;
            let keys = host.works.lock().unwrap().get(&params.id).cloned();
            let Some(keys) = keys else {
                return Err(RpcError::new(protocol::Code::NotFound, "no such Work"));
            };
            let work = Work {
                id: params.id,
                scope_id: "s1".into(),
                state: "running".into(),
                keys,
                ..Default::default()
            };
            return Ok(serde_json::to_value(StateWorkResult { work }).unwrap());
        }
        if m == <StateWorkEventsParams as Call>::METHOD {
            let params: StateWorkEventsParams = request.params()?;
            let events = host
                .events
                .lock()
                .unwrap()
                .iter()
                .filter(|e| e.sequence > params.after)
                .cloned()
                .collect();
            return Ok(serde_json::to_value(StateEventsResult { events }).unwrap());
        }
        if m == <KvGetParams as Call>::METHOD {
            let params: KvGetParams = request.params()?;
            let value = host.kv.lock().unwrap().get(&params.key).cloned();
            return Ok(serde_json::to_value(KvGetResult {
                value,
                ..Default::default()
            })
            .unwrap());
        }
        if m == <KvCommitParams as Call>::METHOD {
            let params: KvCommitParams = request.params()?;
            let mut kv = host.kv.lock().unwrap();
            for put in params.puts {
                kv.insert(put.key, put.value);
            }
            return Ok(serde_json::to_value(KvCommitResult::default()).unwrap());
        }
        if m == <EventAcceptParams as Call>::METHOD {
            let params: EventAcceptParams = request.params()?;
            host.accepted.lock().unwrap().push(params);
            return Ok(serde_json::to_value(EventAcceptResult {
                added: true,
                ..Default::default()
            })
            .unwrap());
        }
        Err(RpcError::method_not_found(m))
    }

    fn authority(work: &str) -> Authority {
        Authority {
            scope_id: "s1".into(),
            work_id: work.into(),
            binding: "agent".into(),
            connection: "bb".into(),
            ..Default::default()
        }
    }

    fn status_event(state: &str, commit: &str) -> Event {
        Event {
            id: "ev-status".into(),
            event_type: "bitbucket.commit_status.updated".into(),
            keys: vec![intake::commit_key("acme/widgets", commit)],
            payload: Payload {
                schema: "bitbucket.commit_status.v1".into(),
                data: json!({"repository": "acme/widgets", "commit": commit, "key": "unit",
                             "name": "Unit tests", "state": state, "kind": "updated"}),
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn waits_filter_and_link_through_the_extension_process() {
        let Some(bb) = bitbucket::shared_or_skip() else {
            return;
        };
        let mut child = tokio::process::Command::new(EXE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let log = tokio::spawn(async move {
            let mut out = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut out).await;
            out
        });
        let host = Arc::new(Host::default());
        let served = host.clone();
        let handler = FnHandler(move |request: protocol::Request| {
            let host = served.clone();
            async move { serve(&host, &request) }
        });
        let peer = connect(
            stdout,
            stdin,
            handler,
            Options::named("extension bitbucket"),
        );
        let init = within(peer.call_typed(&InitializeParams {
            protocol_versions: vec![1],
            host: HostInfo {
                name: "open-conduit".into(),
                version: "test".into(),
            },
            state_dir: std::env::temp_dir().display().to_string(),
            ..Default::default()
        }))
        .await
        .unwrap();
        let manifest = serde_json::to_value(&init).unwrap()["manifest"].clone();
        assert_eq!(manifest["provides"]["dependency_filter"], true);
        within(peer.call_typed(&ConfigureParams {
            entries: vec![Entry {
                scope_id: "s1".into(),
                entry_type: "bitbucket".into(),
                name: "code".into(),
                connection: "bb".into(),
                config: json!({"repositories": ["acme/widgets", "team_name/repo_name"],
                               "mention": "@conduit", "jira_projects": ["PROJ"]}),
                ..Default::default()
            }],
            connections: vec![Connection {
                name: "bb".into(),
                connection_type: "bitbucket".into(),
                config: json!({"api_url": bb.url}),
                secrets: vec!["token".into(), "webhook_secret".into()],
            }],
            ..Default::default()
        }))
        .await
        .unwrap();
        {
            let mut works = host.works.lock().unwrap();
            works.insert("w5".into(), vec![intake::key("acme/widgets", 5)]);
            works.insert("w8".into(), vec![intake::key("acme/widgets", 8)]);
            works.insert("wj".into(), vec!["jira:PROJ-12".into()]);
        }

        // wait_build with a build in progress: a Wait on the commit's key.
        let wait = |work: &str, operation: &str, input: Value| OperationWaitParams {
            operation: operation.into(),
            request_id: format!("r-{work}-{operation}"),
            authority: authority(work),
            input,
        };
        let planned: OperationWaitResult = within(peer.call_typed(&wait(
            "w5",
            "bitbucket.wait_build",
            json!({"timeout_s": 900}),
        )))
        .await
        .unwrap();
        assert_eq!(
            planned.wait.keys,
            [intake::commit_key("acme/widgets", SOURCE_COMMIT_FULL)]
        );
        assert_eq!(planned.wait.types, build::WAKE_TYPES);
        let plan = planned.wait.plan.clone();
        assert_eq!(plan["work_id"], "w5");

        // The filter wakes it on a finished build of that commit only.
        let filter = |event: Event, work: &str, plan: &Value| DependencyFilterParams {
            operation: String::new(),
            work_id: work.into(),
            plan: plan.clone(),
            event,
        };
        for (state, commit, work, want) in [
            ("FAILED", SOURCE_COMMIT_FULL, "w5", true),
            ("SUCCESSFUL", SOURCE_COMMIT_FULL, "w5", true),
            ("STOPPED", SOURCE_COMMIT_FULL, "w5", true),
            ("INPROGRESS", SOURCE_COMMIT_FULL, "w5", false),
            ("FAILED", BUILT_COMMIT_FULL, "w5", false),
            ("FAILED", SOURCE_COMMIT_FULL, "w8", false),
        ] {
            let r: DependencyFilterResult =
                within(peer.call_typed(&filter(status_event(state, commit), work, &plan)))
                    .await
                    .unwrap();
            assert_eq!(r.matched, want, "{state} of {commit} for {work}");
        }

        // Every build finished: refused at once, the states in the agent's message.
        let e = within(peer.call_typed(&wait("w8", "bitbucket.wait_build", json!({}))))
            .await
            .unwrap_err();
        let protocol::CallError::Rpc(e) = e else {
            panic!("not a refusal: {e}")
        };
        assert_eq!(e.app_code(), Some("conflict"));
        let said = e.data.as_ref().unwrap()[protocol::toolbelt::AGENT_MESSAGE_FIELD]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            said.contains("have finished, 1 passed, 1 did not: Lint FAILED; Unit tests SUCCESSFUL"),
            "{said}"
        );
        // A bad timeout and a Work without a pull request are clear refusals.
        let e = within(peer.call_typed(&wait(
            "w5",
            "bitbucket.wait_build",
            json!({"timeout_s": 90_000}),
        )))
        .await
        .unwrap_err();
        assert!(e.to_string().contains("from 60 to 86400"), "{e}");
        let e = within(peer.call_typed(&wait("wj", "bitbucket.wait_build", json!({}))))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("has no Bitbucket pull request"),
            "{e}"
        );

        // The reply wait takes a change request as well as a comment, on the PR's key.
        let reply: OperationWaitResult =
            within(peer.call_typed(&wait("w5", "bitbucket.wait_reply", json!({}))))
                .await
                .unwrap();
        assert_eq!(reply.wait.keys, [intake::key("acme/widgets", 5)]);
        assert_eq!(
            reply.wait.types,
            [
                "bitbucket.pullrequest.comment_created",
                "bitbucket.pullrequest.changes_requested"
            ]
        );
        // A signed change request becomes the Event that Wait takes, and the filter
        // leaves a reply wait to its keys and types.
        let mut payload: Value = serde_json::from_slice(APPROVED).unwrap();
        payload["changes_request"] = payload["approval"].take();
        let body = serde_json::to_vec(&payload).unwrap();
        let mut headers = BTreeMap::new();
        headers.insert(
            "X-Hub-Signature".to_string(),
            vec![intake::sign(SECRET.as_bytes(), &body)],
        );
        headers.insert(
            "X-Event-Key".to_string(),
            vec!["pullrequest:changes_request_created".to_string()],
        );
        headers.insert("X-Request-UUID".to_string(), vec!["uuid-cr".to_string()]);
        let r: WebhookHandleResult = within(peer.call_typed(&WebhookHandleParams {
            method: "POST".into(),
            path: "/bitbucket/s1/code".into(),
            headers,
            body,
            ..Default::default()
        }))
        .await
        .unwrap();
        assert_eq!(r.response.status, 200);
        let ev = &r.deliveries[0].events[0];
        assert!(
            reply.wait.types.contains(&ev.event_type),
            "{}",
            ev.event_type
        );
        let changes = Event {
            id: "ev-cr".into(),
            event_type: ev.event_type.clone(),
            keys: ev.keys.clone(),
            payload: ev.payload.clone(),
            ..Default::default()
        };
        let r: DependencyFilterResult =
            within(peer.call_typed(&filter(changes, "w5", &reply.wait.plan)))
                .await
                .unwrap();
        assert!(r.matched);

        // open_pull_request links the new pull request to the Work.
        host.events.lock().unwrap().push(Event {
            id: "ev-1".into(),
            sequence: 1,
            event_type: "bitbucket.pullrequest.comment_created".into(),
            source: "bitbucket/s1/code".into(),
            scope_id: "s1".into(),
            keys: vec![intake::key("acme/widgets", 5), "jira:PROJ-12".into()],
            payload: Payload {
                schema: "bitbucket.pullrequest.v1".into(),
                data: json!({"repository": "acme/widgets", "id": 5, "kind": "comment_created"}),
            },
            ..Default::default()
        });
        let opened: OperationCallResult = within(peer.call_typed(&OperationCallParams {
            operation: "bitbucket.open_pull_request".into(),
            request_id: "open-1".into(),
            authority: authority("w5"),
            input: json!({"title": "PROJ-12: fix the login loop", "branch": "PROJ-12-fix"}),
        }))
        .await
        .unwrap();
        assert_eq!(opened.output["id"], 7);
        let accepted = host.accepted.lock().unwrap().clone();
        assert_eq!(accepted.len(), 1, "one link Event");
        let linked = &accepted[0].event;
        assert_eq!(linked.parent_id, "ev-1");
        assert_eq!(linked.source, "bitbucket/s1/code");
        assert_eq!(linked.delivery_id, "linked/acme/widgets#7");
        assert_eq!(linked.event_type, "bitbucket.pullrequest.created");
        assert_eq!(
            linked.keys,
            [
                intake::key("acme/widgets", 7),
                intake::key("acme/widgets", 5),
                "jira:PROJ-12".to_string()
            ]
        );
        let data = &linked.payload.data;
        assert_eq!(linked.payload.schema, "bitbucket.pullrequest.v1");
        assert_eq!(data["id"], 7);
        assert_eq!(data["linked"], true);
        assert_eq!(data["source_branch"], "PROJ-12-fix");
        // Routed, it joins the open Work (its display kept) and closes nothing.
        let routed: RouteMatchResult = within(peer.call_typed(&RouteMatchParams {
            handler: "bitbucket".into(),
            route: protocol::wire::Route {
                handler: "bitbucket".into(),
                ..Default::default()
            },
            event: Event {
                id: "ev-2".into(),
                event_type: linked.event_type.clone(),
                keys: linked.keys.clone(),
                payload: linked.payload.clone(),
                ..Default::default()
            },
            work: Some(Work {
                id: "w5".into(),
                keys: vec![intake::key("acme/widgets", 5)],
                ..Default::default()
            }),
            ..Default::default()
        }))
        .await
        .unwrap();
        assert!(routed.matched, "{}", routed.reason);
        assert_eq!(routed.keys, linked.keys);
        assert_eq!(routed.close, "");

        drop(peer);
        let _ = child.kill().await;
        let log = within(log).await.unwrap();
        assert!(
            !log.contains(TOKEN) && !log.contains(SECRET),
            "a secret in the log: {log}"
        );
        let v = bb.violations();
        assert!(v.is_empty(), "Prism reported violations: {v:?}");
    }
}
