//! Wire type tests: round trips of every typed method, exact JSON of the shapes callers
//! depend on, method names, and the Work display limits.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use protocol::b64;
use protocol::wire::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------

fn payload() -> Payload {
    Payload {
        schema: "notes.note.v2".into(),
        data: json!({"title": "hello", "n": 3, "tags": ["a", "b"]}),
    }
}

fn event() -> Event {
    Event {
        id: "ev_1".into(),
        sequence: 42,
        event_type: "notes.created".into(),
        source: "notes/inbox".into(),
        delivery_id: "d-1".into(),
        scope_id: "acme".into(),
        keys: vec!["notes:1".into()],
        payload: payload(),
        occurred_at: "2026-10-25T09:00:00Z".into(),
        accepted_at: "2026-10-25T09:00:01Z".into(),
        parent_id: "ev_0".into(),
        root_id: "ev_0".into(),
        depth: 1,
        execution_id: "ex_1".into(),
    }
}

fn emission() -> Emission {
    Emission {
        scope_id: String::new(),
        parent_id: "ev_1".into(),
        source: "notes".into(),
        delivery_id: "turn-1".into(),
        event_type: "notes.reply".into(),
        payload: payload(),
        keys: vec!["notes:1".into()],
        occurred_at: String::new(),
    }
}

fn display() -> WorkDisplay {
    WorkDisplay {
        title: "Fix the flaky test".into(),
        reference: "#136".into(),
        requester: "octocat".into(),
        links: vec![DisplayLink {
            label: "Issue #136".into(),
            url: "https://github.com/acme/api/issues/136".into(),
        }],
    }
}

fn work() -> Work {
    Work {
        id: "w_1".into(),
        scope_id: "acme".into(),
        kind: "notes.thread".into(),
        state: "running".into(),
        keys: vec!["notes:1".into()],
        binding: "agent".into(),
        display: Some(display()),
        context: json!({"model": "opus"}),
        grants: vec!["push".into()],
        hold: None,
        created_at: "2026-10-25T09:00:00Z".into(),
        updated_at: "2026-10-25T09:01:00Z".into(),
    }
}

fn binding() -> Binding {
    Binding {
        name: "agent".into(),
        executor: "claude-code".into(),
        toolbelt: "mcp".into(),
        operations: vec!["notes.read".into()],
        grants: vec!["push".into()],
        connection: "gh-bot".into(),
        connections: vec!["anthropic".into()],
        resource: Some(ResourceBinding {
            resource_type: "git".into(),
            config: json!({"repository": "acme/api"}),
        }),
        sandbox: Some(json!({"provider": "srt"})),
        container: None,
        config: json!({"model": "opus"}),
    }
}

fn entry() -> Entry {
    Entry {
        scope_id: "acme".into(),
        entry_type: "notes".into(),
        name: "inbox".into(),
        connection: "notes-main".into(),
        binding_connections: vec!["notes-bot".into()],
        config: json!({"folder": "inbox"}),
    }
}

fn connection() -> Connection {
    Connection {
        name: "notes-main".into(),
        connection_type: "notes".into(),
        config: json!({"api_url": "https://notes.example/api"}),
        secrets: vec!["token".into()],
    }
}

fn route() -> Route {
    Route {
        handler: "notes".into(),
        binding: "agent".into(),
        config: json!({"labels": ["bug"]}),
    }
}

fn scope() -> Scope {
    Scope {
        id: "acme".into(),
        disabled: false,
        entries: vec![entry()],
        routes: vec![route()],
        bindings: vec![binding()],
    }
}

fn authority() -> Authority {
    Authority {
        scope_id: "acme".into(),
        work_id: "w_1".into(),
        execution_id: "ex_1".into(),
        epoch: 3,
        binding: "agent".into(),
        connection: "gh-bot".into(),
    }
}

fn toolbelt() -> Toolbelt {
    Toolbelt {
        endpoint: "/run/open-conduit/toolbelt.sock".into(),
        token: "tok".into(),
        dir: "/var/lib/open-conduit/toolbelt".into(),
    }
}

fn run_request() -> RunRequest {
    RunRequest {
        executor: "runner".into(),
        execution_id: "ex_1".into(),
        epoch: 3,
        attempt: 1,
        work: work(),
        binding: binding(),
        config: json!({"command": ["make"]}),
        inputs: vec![event()],
        toolbelt: toolbelt(),
        env: BTreeMap::from([("A".into(), "1".into())]),
        hosts: vec!["github.com".into()],
        host_env: BTreeMap::from([("HTTPS_PROXY".into(), "http://proxy".into())]),
        workspace: Some(json!({"path": "/w"})),
        playbook_dir: "/p".into(),
        dry_run: true,
    }
}

fn delivery() -> Delivery {
    Delivery {
        source: "notes/inbox".into(),
        delivery_id: "d-1".into(),
        body: Some(b"{\"raw\":true}\x00\xff".to_vec()),
        events: vec![IngressEvent {
            event_type: "notes.created".into(),
            payload: payload(),
            keys: vec!["notes:1".into()],
            occurred_at: "2026-10-25T09:00:00Z".into(),
            snapshot: true,
        }],
    }
}

fn accepted() -> DeliveryAccepted {
    DeliveryAccepted {
        events: vec![event()],
        added: true,
    }
}

// ---------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------

/// Serializes params and result, reads them back, compares; also reads them back from the
/// serialized text, and checks the method is one of TYPED_METHODS. Returns the method.
fn round_trip<P>(params: P, result: P::Result) -> &'static str
where
    P: Call + PartialEq + Debug,
    P::Result: PartialEq + Debug,
{
    let text = serde_json::to_string(&params).unwrap();
    let back: P = serde_json::from_str(&text).unwrap();
    assert_eq!(back, params, "{} params via {text}", P::METHOD);

    let text = serde_json::to_string(&result).unwrap();
    let back: P::Result = serde_json::from_str(&text).unwrap();
    assert_eq!(back, result, "{} result via {text}", P::METHOD);

    assert!(
        TYPED_METHODS.contains(&P::METHOD),
        "{} missing from TYPED_METHODS",
        P::METHOD
    );
    P::METHOD
}

#[test]
fn every_typed_method_round_trips() {
    let mut seen = BTreeSet::new();
    let mut add = |m: &'static str| assert!(seen.insert(m), "{m} round-tripped twice");

    // Lifecycle.
    add(round_trip(
        InitializeParams {
            protocol_versions: vec![1, 2],
            host: HostInfo {
                name: "open-conduit".into(),
                version: "0.1.0".into(),
            },
            state_dir: "/var/lib/open-conduit/extensions/notes".into(),
            executor_dirs: BTreeMap::from([("runner".into(), "/s/executors/runner".into())]),
            resource_dirs: BTreeMap::from([("git".into(), "/s/resources/git".into())]),
            container_dirs: BTreeMap::from([("docker".into(), "/s/containers/docker".into())]),
            container_host: "host-1".into(),
            config_dir: "/etc/open-conduit".into(),
            max_message_bytes: Some(64 << 20),
        },
        InitializeResult {
            protocol_version: 1,
            manifest: json!({"name": "notes", "version": "1.0.0", "protocol": [1]}),
            max_message_bytes: Some(64 << 20),
        },
    ));
    add(round_trip(
        ConfigureParams {
            generation: "gen-7".into(),
            entries: vec![entry()],
            connections: vec![connection()],
            public_url: "https://conduit.example.com".into(),
            dry_run: true,
            disabled: vec![entry()],
            kv: KvLayout {
                stored: 1,
                declared: 2,
            },
            containers: vec![binding()],
        },
        ConfigureResult {
            sources: vec![SourceDecl {
                name: "notes/inbox".into(),
                source_type: "notes".into(),
                scope_id: "acme".into(),
                entry: "inbox".into(),
                families: vec!["notes".into()],
                reconcile_interval_s: 300,
            }],
            webhooks: vec![WebhookPath {
                path: "/notes/acme/inbox".into(),
                source: "notes/inbox".into(),
                scope_id: "acme".into(),
                entry: "inbox".into(),
            }],
        },
    ));
    add(round_trip(ShutdownParams {}, ShutdownResult {}));

    // KV.
    add(round_trip(
        KvGetParams {
            namespace: "notes.index".into(),
            key: "k".into(),
        },
        KvGetResult {
            value: Some(json!({"a": 1})),
            version: Some("v1".into()),
        },
    ));
    add(round_trip(
        KvListParams {
            namespace: String::new(),
            prefix: "thread/".into(),
            after: "thread/1".into(),
            limit: 1000,
        },
        KvListResult {
            entries: vec![KvEntry {
                key: "thread/2".into(),
                value: json!([1, 2]),
                version: "v2".into(),
            }],
            next: "thread/2".into(),
        },
    ));
    add(round_trip(
        KvCommitParams {
            checks: vec![
                KvCheck::version("a", "v1"),
                KvCheck::absent("b").in_namespace("notes.index"),
            ],
            puts: vec![KvPut {
                namespace: String::new(),
                key: "a".into(),
                value: json!({"x": true}),
            }],
            deletes: vec![KvDelete {
                namespace: "notes.index".into(),
                key: "c".into(),
            }],
            emissions: vec![emission()],
        },
        KvCommitResult {
            emissions: vec![
                EmissionResult {
                    event: Some(event()),
                    added: true,
                    refused: String::new(),
                },
                EmissionResult {
                    event: None,
                    added: false,
                    refused: "causal_limit".into(),
                },
            ],
        },
    ));

    // State reads.
    add(round_trip(
        StateWorkParams { id: "w_1".into() },
        StateWorkResult { work: work() },
    ));
    add(round_trip(
        StateWorksParams {
            scope_id: "acme".into(),
            kind: "notes.thread".into(),
            states: vec!["running".into()],
            key: "notes:1".into(),
            after: "w_0".into(),
            limit: 10,
        },
        StateWorksResult {
            works: vec![work()],
            next: "w_1".into(),
        },
    ));
    add(round_trip(
        StateExecutionsParams {
            work_id: "w_1".into(),
        },
        StateExecutionsResult {
            executions: vec![Execution {
                id: "ex_1".into(),
                work_id: "w_1".into(),
                attempt: 2,
                epoch: 3,
                executor: "runner".into(),
                state: "settled".into(),
                outcome: Some(Outcome::Handoff),
                started_at: "2026-10-25T09:00:00Z".into(),
                ended_at: "2026-10-25T09:05:00Z".into(),
            }],
        },
    ));
    add(round_trip(
        StateWaitsParams {
            work_id: "w_1".into(),
        },
        StateWaitsResult {
            waits: vec![Wait {
                id: "wt_1".into(),
                work_id: "w_1".into(),
                state: "active".into(),
                owner: "github".into(),
                operation: "github.wait".into(),
                description: "checks on PR #137".into(),
                progress: "3 of 7 checks finished".into(),
                keys: vec!["pr:137".into()],
                types: vec!["github.wait.checks_completed".into()],
                plan: json!({"pr": 137}),
                due_at: "2026-10-25T10:00:00Z".into(),
                created_at: "2026-10-25T09:00:00Z".into(),
            }],
        },
    ));
    add(round_trip(
        StateEventParams { id: "ev_1".into() },
        StateEventResult { event: event() },
    ));
    add(round_trip(
        StateEventsParams {
            after: 41,
            limit: 1000,
        },
        StateEventsResult {
            events: vec![event()],
        },
    ));
    add(round_trip(
        StateWorkEventsParams {
            id: "w_1".into(),
            after: 1,
            limit: 5,
        },
        StateEventsResult {
            events: vec![event()],
        },
    ));
    add(round_trip(
        StateSequenceParams {},
        StateSequenceResult { sequence: 99 },
    ));
    add(round_trip(
        StateScopesParams {},
        StateScopesResult {
            scopes: vec![scope()],
        },
    ));
    add(round_trip(
        StateScopeParams { id: "acme".into() },
        StateScopeResult { scope: scope() },
    ));
    add(round_trip(
        StateTimersParams {
            scope_id: "acme".into(),
            recurrence: "schedule.cron".into(),
        },
        StateTimersResult {
            timers: vec![Timer {
                id: "t_1".into(),
                scope_id: "acme".into(),
                recurrence: "schedule.cron".into(),
                key: "schedule:nightly".into(),
                due_at: "2026-10-26T00:00:00Z".into(),
                spec: json!({"cron": "0 0 * * *"}),
            }],
        },
    ));

    // Derived events and control.
    add(round_trip(
        EventAcceptParams {
            event: emission(),
            checks: vec![KvCheck::absent("origin/turn-1")],
            puts: vec![KvPut {
                namespace: String::new(),
                key: "origin/turn-1".into(),
                value: json!("ev"),
            }],
            deletes: vec![],
        },
        EmissionResult {
            event: Some(event()),
            added: false,
            refused: String::new(),
        },
    ));
    add(round_trip(
        WorkCancelParams {
            work_id: "w_1".into(),
            reason: "entry removed".into(),
        },
        WorkCancelResult { cancelled: true },
    ));
    add(round_trip(
        WaitProgressParams {
            work_id: "w_1".into(),
            progress: "1 of 2 checks finished".into(),
        },
        WaitProgressResult {},
    ));

    // Ingress.
    add(round_trip(
        WebhookHandleParams {
            method: "POST".into(),
            path: "/notes/acme/inbox".into(),
            query: "a=1".into(),
            headers: BTreeMap::from([(
                "X-Signature".into(),
                vec!["sha256=abc".into(), "second".into()],
            )]),
            body: vec![0, 1, 2, 250, 251, 252],
            remote_addr: "127.0.0.1:40000".into(),
        },
        WebhookHandleResult {
            deliveries: vec![delivery()],
            response: HttpAnswer {
                status: 202,
                headers: BTreeMap::from([("Content-Type".into(), "text/plain".into())]),
                body: b"accepted".to_vec(),
            },
        },
    ));
    add(round_trip(
        IngressPushParams {
            delivery: delivery(),
        },
        accepted(),
    ));
    add(round_trip(
        IngressDeliverParams {
            delivery: delivery(),
        },
        accepted(),
    ));
    add(round_trip(
        IngressReconcileParams {
            source: "notes/inbox".into(),
            generation: 4,
            cursor: "page-2".into(),
            checkpoint: "cp-1".into(),
            max_items: 500,
            max_bytes: 8 << 20,
        },
        IngressReconcileResult {
            items: vec![Observation {
                item: "note-1".into(),
                version: "rev3.s2".into(),
                delivery_id: "note-1@rev3.s2".into(),
                events: delivery().events,
            }],
            cursor: "page-3".into(),
            checkpoint: "cp-2".into(),
            complete: true,
        },
    ));

    // Routing.
    add(round_trip(
        RouteMatchParams {
            handler: "notes".into(),
            route: route(),
            scope: scope(),
            event: event(),
            work: Some(work()),
        },
        RouteMatchResult {
            matched: true,
            keys: vec!["notes:1".into(), "notes:thread:9".into()],
            kind: "notes.thread".into(),
            reason: "label bug".into(),
            display: Some(display()),
            context: Some(json!({"model": "opus"})),
            grants: vec!["push".into()],
            close: "completed".into(),
        },
    ));
    add(round_trip(
        RouteSamplesParams {
            handler: "notes".into(),
            route: route(),
            scope: scope(),
            now: "2026-10-25T09:00:00Z".into(),
        },
        RouteSamplesResult {
            samples: vec![RouteSample {
                id: "new-note".into(),
                title: "A new note".into(),
                event: event(),
            }],
        },
    ));

    // In-transaction methods.
    add(round_trip(
        RecurrenceNextParams {
            recurrence: "notes.daily".into(),
            scope_id: "acme".into(),
            key: "notes:daily".into(),
            spec: json!({"at": "09:00"}),
            after: "2026-10-25T09:00:00Z".into(),
        },
        RecurrenceNextResult {
            next: "2026-10-26T09:00:00Z".into(),
            payload: Some(payload()),
        },
    ));
    add(round_trip(
        WorkKindTriggerParams {
            kind: "notes.digest".into(),
            work: work(),
            inputs: vec![event(), event()],
        },
        WorkKindTriggerResult {
            event_id: "ev_1".into(),
        },
    ));
    add(round_trip(
        DependencyFilterParams {
            operation: "notes.wait".into(),
            work_id: "w_1".into(),
            plan: json!({"note": 1}),
            event: event(),
        },
        DependencyFilterResult { matched: true },
    ));
    add(round_trip(
        EmitCommitParams {
            operation: "notes.publish".into(),
            commit: json!({"record": "r"}),
            event: AcceptedRef {
                id: "ev_2".into(),
                sequence: 43,
                root_id: "ev_0".into(),
                depth: 2,
                added: true,
            },
        },
        EmitCommitResult {
            puts: vec![KvPut {
                namespace: "notes.published".into(),
                key: "ev_2".into(),
                value: json!({"seq": 43}),
            }],
            deletes: vec![KvDelete {
                namespace: String::new(),
                key: "pending".into(),
            }],
        },
    ));

    // Timers.
    add(round_trip(
        TimerArmParams {
            recurrence: "notes.daily".into(),
            scope_id: "acme".into(),
            key: "daily".into(),
            spec: json!({"at": "09:00"}),
            at: "2026-10-26T09:00:00Z".into(),
        },
        TimerArmResult {
            timer_id: "t_1".into(),
            due_at: "2026-10-26T09:00:00Z".into(),
        },
    ));
    add(round_trip(
        TimerCancelParams {
            recurrence: "notes.daily".into(),
            scope_id: "acme".into(),
            key: "daily".into(),
        },
        TimerCancelResult { cancelled: true },
    ));

    // Operations.
    add(round_trip(
        OperationCallParams {
            operation: "notes.write".into(),
            request_id: "req-1".into(),
            authority: authority(),
            input: json!({"text": "hi"}),
        },
        OperationCallResult {
            output: json!({"id": 7}),
        },
    ));
    add(round_trip(
        OperationWaitParams {
            operation: "notes.wait".into(),
            request_id: "req-2".into(),
            authority: authority(),
            input: json!({"note": 1}),
        },
        OperationWaitResult {
            wait: WaitRequest {
                keys: vec!["notes:1".into()],
                types: vec!["notes.updated".into()],
                due_at: "2026-10-25T10:00:00Z".into(),
                description: "note 1 to change".into(),
                plan: json!({"note": 1}),
            },
        },
    ));
    add(round_trip(
        OperationEmitParams {
            operation: "notes.publish".into(),
            request_id: "req-3".into(),
            authority: authority(),
            input: json!({}),
        },
        OperationEmitResult {
            event: emission(),
            commit: Some(json!({"record": "r"})),
            output: json!({"ok": true}),
        },
    ));

    // Executors.
    add(round_trip(
        ExecutorRunParams { run: run_request() },
        ExecutorRunResult {},
    ));
    add(round_trip(
        ExecutorRecoverParams {
            run: run_request(),
            recovery: Payload {
                schema: "runner.recovery.v1".into(),
                data: json!({"pid": 123, "nonce": "n"}),
            },
        },
        ExecutorRecoverResult {},
    ));
    add(round_trip(
        ExecutorWaitParams {
            executor: "runner".into(),
            execution_id: "ex_1".into(),
        },
        ExecutorWaitResult {
            outcome: Outcome::Failed,
            data: Some(payload()),
            summary: "usage limit".into(),
            error: "limited".into(),
            wait: Some(WaitRequest {
                description: "x".into(),
                ..Default::default()
            }),
            consumed_inputs: vec!["ev_1".into()],
            retry_hint: Some(RetryHint {
                reset_at: "2026-10-25T10:00:00Z".into(),
            }),
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 20,
                cached_tokens: 5,
                cache_creation_tokens: 1,
                cost_usd: Some(0.25),
            }),
            artifacts: vec!["art_1".into()],
        },
    ));
    add(round_trip(
        ExecutorResumeParams {
            executor: "runner".into(),
            execution_id: "ex_1".into(),
            epoch: 4,
            inputs: vec![event()],
            toolbelt: Some(toolbelt()),
        },
        ExecutorResumeResult {},
    ));
    add(round_trip(
        ExecutorInterruptParams {
            executor: "runner".into(),
            execution_id: "ex_1".into(),
            epoch: 4,
            reason: "operator".into(),
        },
        ExecutorInterruptResult {},
    ));
    add(round_trip(
        ExecutorInjectParams {
            executor: "runner".into(),
            execution_id: "ex_1".into(),
            epoch: 4,
            event: event(),
        },
        ExecutorInjectResult {},
    ));
    add(round_trip(
        ExecutorForgetParams {
            executor: "runner".into(),
            work_id: "w_1".into(),
            execution_id: "ex_1".into(),
        },
        ExecutorForgetResult {},
    ));
    add(round_trip(
        ExecutorStopParams {
            executor: "runner".into(),
            execution_id: "ex_1".into(),
            epoch: 4,
        },
        ExecutorStopResult {
            stopped: true,
            detail: "group 123 gone".into(),
        },
    ));
    add(round_trip(
        ExecutorAttachParams {
            executor: "claude-code".into(),
            work_id: "w_1".into(),
            config: json!({"model": "opus"}),
            workspace: Some(json!({"path": "/w"})),
        },
        ExecutorAttachResult {
            argv: vec!["claude".into(), "--resume".into(), "s1".into()],
            dir: "/w".into(),
            env: BTreeMap::from([("CLAUDE_CONFIG_DIR".into(), "/c".into())]),
        },
    ));
    add(round_trip(
        ExecutorLiveParams {
            executor: "claude-code".into(),
            execution_id: "ex_1".into(),
            tail: 4096,
        },
        ExecutorLiveResult {
            outputs: vec![LiveOutput {
                name: "out.jsonl".into(),
                media_type: "application/jsonl".into(),
                size: 10_000,
                tail: b"last line\n".to_vec(),
            }],
        },
    ));
    add(round_trip(
        ExecutionPersistRecoveryParams {
            execution_id: "ex_1".into(),
            epoch: 3,
            recovery: payload(),
        },
        ExecutionPersistRecoveryResult {},
    ));

    // Artifacts.
    add(round_trip(
        ArtifactCreateParams {
            execution_id: "ex_1".into(),
            name: "transcript".into(),
            media_type: "text/plain".into(),
            max_bytes: 1 << 30,
        },
        ArtifactCreateResult {
            artifact_id: "art_1".into(),
        },
    ));
    add(round_trip(
        ArtifactWriteParams {
            artifact_id: "art_1".into(),
            offset: 262_144,
            data: (0..=255u8).collect(),
        },
        ArtifactWriteResult { size: 262_400 },
    ));
    add(round_trip(
        ArtifactCommitParams {
            artifact_id: "art_1".into(),
            size: 262_400,
        },
        ArtifactCommitResult {
            artifact_id: "art_1".into(),
            size: 262_400,
            digest: "sha256:00".into(),
        },
    ));
    add(round_trip(
        ArtifactAbortParams {
            artifact_id: "art_1".into(),
        },
        ArtifactAbortResult {},
    ));

    // Secrets, tasks, checks, validation.
    add(round_trip(
        SecretResolveParams {
            scope_id: "acme".into(),
            connection: "gh-bot".into(),
            names: vec!["token".into()],
        },
        SecretResolveResult {
            values: BTreeMap::from([("token".into(), "s3cret".into())]),
        },
    ));
    add(round_trip(
        TaskRunParams {
            task: "notes.converge".into(),
            now: "2026-10-25T09:00:00Z".into(),
        },
        TaskRunResult {
            detail: "3 projected".into(),
        },
    ));
    add(round_trip(
        CheckRunParams {
            check: "notes-token".into(),
            deep: true,
            config: CheckConfig {
                dir: "/etc/open-conduit".into(),
                scopes: vec![CheckScope {
                    id: "acme".into(),
                    routes: vec![route()],
                    bindings: vec![binding()],
                    entries: vec![entry()],
                }],
                connections: vec![connection()],
                tunnel: Some(CheckTunnel {
                    tunnel_type: "ngrok".into(),
                    config: json!({"domain": "x.ngrok.app"}),
                }),
            },
        },
        CheckRunResult {
            ok: None,
            status: "warn".into(),
            code: "notes_token_expiring".into(),
            detail: "the token expires in 3 days".into(),
            items: vec!["notes-main".into()],
        },
    ));
    add(round_trip(
        ValidateParams {
            kind: validate_kind::EXECUTOR_FOLDER.into(),
            type_name: "claude-code".into(),
            name: "agent".into(),
            config: json!({"model": "opus"}),
            binding: Some(binding()),
            mode: "work".into(),
            folder: "services/api".into(),
            resource: true,
        },
        ValidateResult {
            diagnostics: vec![Diagnostic {
                code: "invalid_config".into(),
                message: "model is required".into(),
                path: "/model".into(),
            }],
            describe: vec!["job nightly: 0 0 * * *".into()],
            mode: Some(String::new()),
            playbook: Some("work-issue".into()),
            config: Some(json!({"model": "opus", "dir": "services/api"})),
            warnings: vec!["retries is ignored".into()],
            secrets: vec![SecretUse {
                path: "/secret_env/ANTHROPIC_API_KEY".into(),
                connection: "anthropic".into(),
                secret: "api_key".into(),
            }],
        },
    ));

    // Workspaces: resource providers.
    let workspace = ProvidedResource {
        reference: "work/demo-1a2b3c4d/w-1-0f0e0d0c".into(),
        owner: "w-1".into(),
        mode: "work".into(),
        dir: "/s/resources/git/work/demo-1a2b3c4d/w-1-0f0e0d0c".into(),
        env: BTreeMap::from([("GIT_CEILING_DIRECTORIES".into(), "/s/resources/git".into())]),
        data: json!({"branch": "oc/w-1", "head": "0123abcd"}),
    };
    add(round_trip(
        ProviderAcquireParams {
            resource_type: "git".into(),
            owner: "w-1".into(),
            mode: "work".into(),
            params: json!({"branch": "fix-12"}),
            config: json!({"repository": "https://example.com/r.git"}),
            scope_id: "acme".into(),
            binding: "agent".into(),
            host_env: BTreeMap::from([("HTTPS_PROXY".into(), "http://proxy:3128".into())]),
        },
        workspace.clone(),
    ));
    add(round_trip(
        ProviderLookupParams {
            resource_type: "git".into(),
            reference: workspace.reference.clone(),
            config: json!({"repository": "https://example.com/r.git"}),
        },
        workspace.clone(),
    ));
    let note = ResourceNote {
        reference: workspace.reference.clone(),
        owner: "w-1".into(),
        dir: workspace.dir.clone(),
        reason: "half-made".into(),
    };
    add(round_trip(
        ProviderReconcileParams {
            resource_type: "git".into(),
            pass_id: "p-1".into(),
        },
        ProviderReconcileResult {
            resources: vec![workspace.clone()],
            removed: vec![note.clone()],
        },
    ));
    add(round_trip(
        ProviderSweepParams {
            resource_type: "git".into(),
            pass_id: "p-2".into(),
            grace_s: 3600,
            remove_dirty: true,
        },
        ProviderSweepResult {
            removed: vec![note.clone()],
            kept: vec![note],
            pruned: vec!["demo-1a2b3c4d: worktree prune, gc --auto".into()],
        },
    ));
    add(round_trip(
        ResourceAcquireParams {
            execution_id: "exec-1".into(),
            epoch: 3,
            mode: "work".into(),
            params: json!({"branch": "fix-12"}),
        },
        ResourceAcquireResult {
            reference: "work/demo/w-1".into(),
            owner: "w-1".into(),
            mode: "work".into(),
            dir: "/var/lib/open-conduit/resources/git/work/demo/w-1".into(),
            ..Default::default()
        },
    ));
    add(round_trip(
        ResourceLookupParams {
            execution_id: "exec-1".into(),
            epoch: 4,
            reference: "work/demo/w-1".into(),
        },
        ResourceLookupResult {
            reference: "work/demo/w-1".into(),
            dir: "/w".into(),
            ..Default::default()
        },
    ));
    add(round_trip(
        ProviderOwnerStatusParams {
            pass_id: "p-2".into(),
            owners: vec!["w-1".into(), "w-2".into()],
        },
        ProviderOwnerStatusResult {
            owners: vec![OwnerStatus {
                owner: "w-1".into(),
                status: owner_status::CLOSED.into(),
                closed_at: "2026-12-01T09:00:00Z".into(),
            }],
        },
    ));

    // Tunnels.
    add(round_trip(
        TunnelRunParams {
            tunnel_type: "ngrok".into(),
            addr: "127.0.0.1:8080".into(),
            config: json!({}),
            run_id: "run-1".into(),
        },
        TunnelRunResult {},
    ));
    add(round_trip(
        TunnelUrlParams {
            run_id: "run-1".into(),
            url: "https://x.ngrok.app".into(),
        },
        TunnelUrlResult {},
    ));

    // Rendering, run environment and credential, segment end.
    let ev = Event {
        id: "ev-1".into(),
        event_type: "github.issue.opened".into(),
        ..Event::default()
    };
    add(round_trip(
        EventRenderParams {
            event: ev.clone(),
            work_id: "w-1".into(),
            connection: "gh".into(),
            max_bytes: 4096,
        },
        EventRenderResult {
            text: "## Issue #1".into(),
            truncated: true,
        },
    ));
    add(round_trip(
        EventRenderOwnedParams {
            events: vec![ev],
            work_id: "w-1".into(),
            connection: String::new(),
            max_bytes: 4096,
        },
        EventRenderOwnedResult {
            events: vec![RenderedEvent {
                id: "ev-1".into(),
                text: "x".into(),
                truncated: false,
                rendered_by: "github".into(),
            }],
        },
    ));
    let authority = Authority {
        scope_id: "s".into(),
        work_id: "w-1".into(),
        execution_id: "x-1".into(),
        epoch: 2,
        binding: "agent".into(),
        connection: "gh".into(),
    };
    add(round_trip(
        RunEnvironmentParams {
            authority: authority.clone(),
            connections: vec!["gh".into(), "model".into()],
            executor: "claude-code".into(),
            resource: Some(ResourceBinding {
                resource_type: "git".into(),
                config: json!({"repository": "https://github.com/o/r.git"}),
            }),
            toolbelt_dir: "/usr/bin".into(),
        },
        RunEnvironmentResult {
            env: [("GIT_CONFIG_COUNT".to_string(), "1".to_string())].into(),
            hosts: vec!["github.com".into()],
        },
    ));
    add(round_trip(
        RunCredentialParams {
            authority: authority.clone(),
            connections: vec!["gh".into()],
            resource: None,
            protocol: "https".into(),
            host: "github.com".into(),
            path: "o/r.git".into(),
        },
        RunCredentialResult {
            username: "x-access-token".into(),
            password: "t".into(),
            expires_at: "2026-12-03T13:00:00Z".into(),
        },
    ));
    add(round_trip(
        SegmentEndedParams {
            authority,
            outcome: "completed".into(),
        },
        SegmentEndedResult {},
    ));

    add(round_trip(
        WorkAnnotateParams {
            work: Work {
                id: "w-1".into(),
                state: "running".into(),
                ..Work::default()
            },
            version: 7,
            attempt: Some(AnnotatedAttempt {
                execution_id: "x-1".into(),
                attempt: 1,
                state: "running".into(),
                summary: String::new(),
                error: String::new(),
            }),
            waiting_for: "a review on PR #2".into(),
            progress: "1 of 2 checks finished".into(),
        },
        WorkAnnotateResult {},
    ));

    add(round_trip(
        ActionSubmitParams {
            scope_id: "acme".into(),
            work_id: "w-1".into(),
            provider: CORE_PROVIDER.into(),
            action: ACTION_STOP.into(),
            input: json!({"comment": 7}),
            caller: "octocat".into(),
            key: "comment/7".into(),
        },
        ActionSubmitResult {
            event: "evt_1".into(),
            added: true,
            message: "stopped Work w-1".into(),
        },
    ));

    let offer = ActionOffer {
        id: "answer".into(),
        label: "Answer".into(),
        prompt: "Which branch?".into(),
        choices: vec!["main".into(), "release-2.x".into()],
        detail: "Which branch?".into(),
        awaited: true,
        input: json!({"ask_id": "a-1"}),
    };
    add(round_trip(
        ActionListParams {
            scope_id: "acme".into(),
            work_id: "w-1".into(),
        },
        ActionListResult {
            actions: vec![ListedAction {
                provider: "human".into(),
                offer: offer.clone(),
            }],
        },
    ));
    add(round_trip(
        WorkActionsParams {
            scope_id: "acme".into(),
            work_id: "w-1".into(),
        },
        WorkActionsResult {
            actions: vec![offer],
        },
    ));
    add(round_trip(
        WorkActParams {
            scope_id: "acme".into(),
            work_id: "w-1".into(),
            action: "admit".into(),
            input: json!({}),
            caller: "cli:alice".into(),
            key: "admit/w-1".into(),
        },
        WorkActResult {
            keys: Vec::new(),
            decision: json!({"admitted": true}),
            settle_hold: Some(HoldSettlement {
                admit: true,
                reason: "admitted by cli:alice".into(),
            }),
            message: "admitted".into(),
        },
    ));
    add(round_trip(
        ViewRenderParams {
            surface: ViewSurface::Page,
            work_id: String::new(),
            page: "asks".into(),
            scope_id: "acme".into(),
        },
        ViewRenderResult {
            panels: vec![Panel {
                id: "ask-a-1".into(),
                title: "Which branch?".into(),
                work_id: "w-1".into(),
                sections: vec![Section {
                    heading: "Asked".into(),
                    text: "Which branch should the fix go to?".into(),
                    fields: vec![protocol::wire::Field {
                        label: "Work".into(),
                        value: "w-1".into(),
                    }],
                    messages: vec![Message {
                        from: MessageFrom::Operator,
                        label: "cli:alice".into(),
                        text: "main".into(),
                        at: "2026-10-25T09:00:00Z".into(),
                        choices: vec!["main".into()],
                        chosen: "main".into(),
                    }],
                    buttons: vec![Button {
                        label: "main".into(),
                        action: "answer".into(),
                        input: json!({"ask_id": "a-1", "choice": "main"}),
                        style: Some(ButtonStyle::Danger),
                    }],
                    input: Some(InputBox {
                        action: "answer".into(),
                        name: "answer".into(),
                        label: "Answer".into(),
                        choices: vec!["main".into()],
                        input: json!({"ask_id": "a-1"}),
                    }),
                }],
            }],
        },
    ));
    add(round_trip(
        OperationGateParams {
            operation: "github.open_pull_request".into(),
            owner: "github".into(),
            request_id: "pr-1".into(),
            authority: Authority {
                scope_id: "acme".into(),
                work_id: "w-1".into(),
                ..Authority::default()
            },
            input: json!({"title": "Fix"}),
        },
        OperationGateResult {
            wait: Some(WaitRequest {
                keys: vec!["human/gate/g-1".into()],
                types: vec!["core.action.approve".into(), "core.action.reject".into()],
                due_at: "2026-10-26T09:00:00Z".into(),
                description: "approval of github.open_pull_request".into(),
                plan: json!({"kind": "gate", "gate_id": "g-1"}),
            }),
        },
    ));
    add(round_trip(
        WorkAdmitParams {
            work: work(),
            binding: "agent".into(),
            input: None,
        },
        WorkAdmitResult {
            hold: Some(Hold {
                reason: "waiting for a person to admit it".into(),
            }),
        },
    ));
    add(round_trip(
        WorkSettleHoldParams {
            work_id: "w-1".into(),
            admit: true,
            reason: "hours open".into(),
            key: "hours/w-1".into(),
        },
        WorkSettleHoldResult { settled: true },
    ));

    add(round_trip(
        ScopeAuthorizeParams {
            scope_id: "demo".into(),
            target_scope_id: "side".into(),
            access: "file".into(),
        },
        ScopeAuthorizeResult {
            allowed: false,
            reason: "no".into(),
        },
    ));

    let typed: BTreeSet<&str> = TYPED_METHODS.iter().copied().collect();
    assert_eq!(seen, typed, "every typed method is round-tripped");
}

#[test]
fn empty_params_read_from_an_empty_object() {
    // A request whose optional fields are all absent still reads.
    let p: StateEventsParams = serde_json::from_str("{}").unwrap();
    assert_eq!(p, StateEventsParams::default());
    let p: ConfigureParams = serde_json::from_str("{}").unwrap();
    assert_eq!(p, ConfigureParams::default());
    let p: ShutdownParams = serde_json::from_str("{}").unwrap();
    assert_eq!(p, ShutdownParams {});
    assert_eq!(serde_json::to_string(&ShutdownResult {}).unwrap(), "{}");
}

#[test]
fn unknown_fields_are_ignored() {
    let p: KvGetParams =
        serde_json::from_value(json!({"key": "k", "added_in_a_later_release": 1})).unwrap();
    assert_eq!(p.key, "k");
}

// ---------------------------------------------------------------------------------------
// Exact JSON
// ---------------------------------------------------------------------------------------

#[test]
fn kv_checks_serialize_as_version_or_absent() {
    assert_eq!(
        serde_json::to_value(KvCheck::version("k", "v1")).unwrap(),
        json!({"key": "k", "version": "v1"})
    );
    assert_eq!(
        serde_json::to_value(KvCheck::absent("k")).unwrap(),
        json!({"key": "k", "absent": true})
    );
    assert_eq!(
        serde_json::to_value(KvCheck::absent("k").in_namespace("notes.index")).unwrap(),
        json!({"namespace": "notes.index", "key": "k", "absent": true})
    );
    let params = KvCommitParams {
        checks: vec![KvCheck::version("k", "v1")],
        puts: vec![KvPut {
            namespace: String::new(),
            key: "k".into(),
            value: json!(2),
        }],
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_string(&params).unwrap(),
        r#"{"checks":[{"key":"k","version":"v1"}],"puts":[{"key":"k","value":2}]}"#
    );
}

#[test]
fn kv_checks_refuse_both_or_neither() {
    let both =
        serde_json::from_value::<KvCheck>(json!({"key": "k", "version": "v", "absent": true}));
    assert!(both.unwrap_err().to_string().contains("exclusive"));
    let neither = serde_json::from_value::<KvCheck>(json!({"key": "k"}));
    assert!(neither.unwrap_err().to_string().contains("needs a version"));
    let absent_false = serde_json::from_value::<KvCheck>(json!({"key": "k", "absent": false}));
    assert!(absent_false.is_err());
}

#[test]
fn kv_get_tells_absent_from_a_stored_null() {
    let absent: KvGetResult = serde_json::from_str("{}").unwrap();
    assert!(absent.is_absent());
    assert_eq!(absent.check("", "k"), KvCheck::absent("k"));
    assert_eq!(serde_json::to_string(&absent).unwrap(), "{}");

    let null: KvGetResult = serde_json::from_str(r#"{"value":null,"version":"v0"}"#).unwrap();
    assert!(!null.is_absent());
    assert_eq!(null.value, Some(Value::Null));
    assert_eq!(
        serde_json::to_string(&null).unwrap(),
        r#"{"value":null,"version":"v0"}"#
    );
    assert_eq!(null.check("", "k"), KvCheck::version("k", "v0"));
}

#[test]
fn a_present_null_stays_distinct_from_absent() {
    let r = RouteMatchResult {
        matched: true,
        context: Some(Value::Null),
        ..Default::default()
    };
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(text, r#"{"matched":true,"context":null}"#);
    assert_eq!(serde_json::from_str::<RouteMatchResult>(&text).unwrap(), r);
    let absent: RouteMatchResult = serde_json::from_str(r#"{"matched":true}"#).unwrap();
    assert_eq!(absent.context, None);
}

#[test]
fn byte_fields_are_base64_strings() {
    let write = ArtifactWriteParams {
        artifact_id: "a".into(),
        offset: 0,
        data: b"hello\xff".to_vec(),
    };
    assert_eq!(
        serde_json::to_value(&write).unwrap(),
        json!({"artifact_id": "a", "offset": 0, "data": "aGVsbG//"})
    );

    let handle = WebhookHandleParams {
        method: "POST".into(),
        path: "/p".into(),
        body: b"{}".to_vec(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&handle).unwrap(),
        json!({"method": "POST", "path": "/p", "body": "e30="})
    );

    let d = Delivery {
        source: "s".into(),
        delivery_id: "d".into(),
        body: Some(vec![0xfb, 0xff]),
        events: vec![],
    };
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        json!({"source": "s", "delivery_id": "d", "body": "+/8="})
    );
    let none = Delivery { body: None, ..d };
    assert_eq!(
        serde_json::to_value(&none).unwrap(),
        json!({"source": "s", "delivery_id": "d"})
    );
    let back: Delivery =
        serde_json::from_value(json!({"source": "s", "delivery_id": "d", "body": null})).unwrap();
    assert_eq!(back.body, None);

    let bad = serde_json::from_value::<ArtifactWriteParams>(
        json!({"artifact_id": "a", "data": "not base64!"}),
    );
    assert!(bad.unwrap_err().to_string().contains("invalid base64"));
    let unpadded =
        serde_json::from_value::<ArtifactWriteParams>(json!({"artifact_id": "a", "data": "aGk"}));
    assert!(unpadded.is_err(), "the standard alphabet is padded");

    assert_eq!(b64::encode(b"hi"), "aGk=");
    assert_eq!(b64::decode("aGk=").unwrap(), b"hi");
}

#[test]
fn optional_fields_are_omitted() {
    assert_eq!(
        serde_json::to_value(Event {
            id: "e".into(),
            event_type: "t".into(),
            ..Default::default()
        })
        .unwrap(),
        json!({"id": "e", "type": "t", "payload": {}})
    );
    assert_eq!(
        serde_json::to_value(RouteMatchResult::default()).unwrap(),
        json!({})
    );
    assert_eq!(
        serde_json::to_value(RouteMatchResult {
            matched: true,
            keys: vec!["k".into()],
            ..Default::default()
        })
        .unwrap(),
        json!({"matched": true, "keys": ["k"]})
    );
    assert_eq!(
        serde_json::to_value(WorkDisplay {
            reference: "#1".into(),
            ..Default::default()
        })
        .unwrap(),
        json!({"ref": "#1"})
    );
    assert_eq!(
        serde_json::to_value(CheckRunResult {
            ok: Some(true),
            detail: "fine".into(),
            ..Default::default()
        })
        .unwrap(),
        json!({"ok": true, "detail": "fine"})
    );
    assert_eq!(
        serde_json::to_value(KvListParams::default()).unwrap(),
        json!({})
    );
}

#[test]
fn initialize_has_the_spec_shape() {
    let p = InitializeParams {
        protocol_versions: vec![1],
        host: HostInfo {
            name: "open-conduit".into(),
            version: "0.1.0".into(),
        },
        state_dir: "/s".into(),
        executor_dirs: BTreeMap::from([("runner".into(), "/s/executors/runner".into())]),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&p).unwrap(),
        json!({
            "protocol_versions": [1],
            "host": {"name": "open-conduit", "version": "0.1.0"},
            "state_dir": "/s",
            "executor_dirs": {"runner": "/s/executors/runner"}
        })
    );
    assert_eq!(p.pick_version(&[1, 2]), Some(1));
    assert_eq!(p.pick_version(&[2]), None);
}

#[test]
fn outcome_and_status_are_snake_case() {
    assert_eq!(
        serde_json::to_value(ExecutorWaitResult::new(Outcome::Handoff)).unwrap(),
        json!({"outcome": "handoff"})
    );
    assert_eq!(
        serde_json::to_value(CheckStatus::Fail).unwrap(),
        json!("fail")
    );
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

#[test]
fn check_results_normalize_as_doctor_reads_them() {
    let short_ok = CheckRunResult {
        ok: Some(true),
        ..Default::default()
    };
    assert_eq!(short_ok.effective().0, CheckStatus::Ok);
    let short_bad = CheckRunResult::default();
    assert_eq!(
        short_bad.effective(),
        (CheckStatus::Warn, "extension_check_failed".to_string())
    );
    let unknown = CheckRunResult {
        status: "meh".into(),
        ..Default::default()
    };
    assert_eq!(
        unknown.effective(),
        (CheckStatus::Warn, "extension_check_invalid".to_string())
    );
    let full = CheckRunResult {
        status: "fail".into(),
        code: "x".into(),
        ..Default::default()
    };
    assert_eq!(full.effective(), (CheckStatus::Fail, "x".to_string()));
}

#[test]
fn limits_are_checked() {
    assert!(check_page_limit(1000).is_ok());
    let err = check_page_limit(1001).unwrap_err();
    assert_eq!(err.field, "limit");
    assert!(err.to_string().contains("1000"));
    assert!(KvListParams {
        limit: 1001,
        ..Default::default()
    }
    .validate()
    .is_err());
    assert!(StateEventsParams {
        after: 0,
        limit: 1001
    }
    .validate()
    .is_err());

    let chunk = |n| ArtifactWriteParams {
        artifact_id: "a".into(),
        offset: 0,
        data: vec![0; n],
    };
    assert!(chunk(MAX_CHUNK_BYTES).validate().is_ok());
    let err = chunk(MAX_CHUNK_BYTES + 1).validate().unwrap_err();
    assert_eq!(err.field, "data");
    assert!(err.reason.contains("262144"));

    assert!(EventAcceptParams {
        event: emission(),
        ..Default::default()
    }
    .validate()
    .is_ok());
    let root = EventAcceptParams {
        event: Emission {
            parent_id: String::new(),
            ..emission()
        },
        ..Default::default()
    };
    assert_eq!(root.validate().unwrap_err().field, "event.parent_id");

    let hinted = ExecutorWaitResult {
        retry_hint: Some(RetryHint::default()),
        ..ExecutorWaitResult::new(Outcome::Completed)
    };
    assert!(hinted.validate().is_err());
}

#[test]
fn webhook_paths_cover_the_paths_beneath_them() {
    let p = WebhookPath {
        path: "/schedule/acme/nightly".into(),
        ..Default::default()
    };
    assert!(p.covers("/schedule/acme/nightly"));
    assert!(p.covers("/schedule/acme/nightly/job/token"));
    assert!(!p.covers("/schedule/acme/nightly2"));
    assert!(!p.covers("/schedule/acme"));
}

#[test]
fn webhook_headers_read_case_insensitively() {
    let p = WebhookHandleParams {
        headers: BTreeMap::from([("X-Hub-Signature-256".into(), vec!["sha256=1".into()])]),
        ..Default::default()
    };
    assert_eq!(p.header("x-hub-signature-256"), Some("sha256=1"));
    assert_eq!(p.header("x-other"), None);
}

#[test]
fn kv_layout_tells_a_migration() {
    assert!(KvLayout {
        stored: 1,
        declared: 2
    }
    .needs_migration());
    assert!(!KvLayout {
        stored: 2,
        declared: 2
    }
    .needs_migration());
}

#[test]
fn wait_descriptions_are_clipped_not_refused() {
    let w = WaitRequest {
        description: format!("{}\nsecond line", "é".repeat(150)),
        ..Default::default()
    };
    let clipped = w.clipped_description();
    assert!(clipped.len() <= MAX_WAIT_DESCRIPTION_BYTES);
    assert_eq!(clipped, "é".repeat(100));
    assert_eq!(clip_line("a\tb\r\nc", 120), "ab");
    assert_eq!(clip_line("short", 120), "short");
}

// ---------------------------------------------------------------------------------------
// Method names
// ---------------------------------------------------------------------------------------

/// Every wire method the spec names, from its inventory and the sections that define them
/// (a family the inventory writes as `x.*` is expanded to the members the spec names).
const SPEC_METHODS: &[&str] = &[
    "initialize",
    "configure",
    "shutdown",
    "validate",
    "webhook.handle",
    "ingress.push",
    "ingress.reconcile",
    "ingress.deliver",
    "route.match",
    "route.samples",
    "work_kind.trigger",
    "recurrence.next",
    "timer.arm",
    "timer.cancel",
    "operation.call",
    "operation.wait",
    "operation.emit",
    "emit.commit",
    "dependency.filter",
    "operation.gate",
    "work.admit",
    "work.settle_hold",
    "wait.progress",
    "event.render",
    "event.render_owned",
    "target.resolve",
    "wait.target",
    "scope.authorize",
    "segment.ended",
    // executor.*: Run, Recover, Wait, Resume, Interrupt, Inject, Forget, plus the controls.
    "executor.run",
    "executor.recover",
    "executor.wait",
    "executor.resume",
    "executor.interrupt",
    "executor.inject",
    "executor.forget",
    "executor.stop",
    "executor.interactive_launch",
    "executor.attach",
    "executor.container_attach",
    "executor.live",
    "execution.persist_recovery",
    "resource.acquire",
    "resource.lookup",
    "provider.acquire",
    "provider.lookup",
    "provider.reconcile",
    "provider.sweep",
    "provider.owner_status",
    "sandbox_provider.plan",
    "sandbox_provider.adopt",
    "container_provider.plan",
    "container_provider.create",
    "container_provider.signal",
    "container_provider.stop",
    "container_provider.inspect",
    "container_provider.list",
    "container_provider.remove",
    "container_provider.forward",
    "tunnel.run",
    "tunnel.url",
    "kv.get",
    "kv.list",
    "kv.commit",
    // state.*: Work, ListWorks, ListExecutions, ListWaits, Event, Events, WorkEvents,
    // LatestSequence, ListScopes/Scope, ListTimers.
    "state.work",
    "state.works",
    "state.executions",
    "state.waits",
    "state.event",
    "state.events",
    "state.work_events",
    "state.sequence",
    "state.scopes",
    "state.scope",
    "state.timers",
    "event.accept",
    "work.cancel",
    // artifact.*: Create, write, Commit, and abort for open writers.
    "artifact.create",
    "artifact.write",
    "artifact.commit",
    "artifact.abort",
    "secret.resolve",
    "task.run",
    "telemetry.export",
    "telemetry.capture",
    "telemetry.sink",
    "probe.list",
    "probe.run",
    "probe.serve",
    "config.base",
    "config.edit",
    "config.validate",
    "config.trace",
    "config.candidate",
    "check.run",
    "run.environment",
    "work.annotate",
    "work.actions",
    "work.act",
    "action.submit",
    "action.list",
    "view.render",
    "setup.run",
    // Not the spec's: a run's git credential over its toolbelt (docs/decisions.md).
    "run.credential",
];

#[test]
fn method_names_are_unique_and_from_the_spec() {
    let mut seen = BTreeSet::new();
    for m in TYPED_METHODS {
        assert!(seen.insert(*m), "{m} is typed twice");
        assert!(SPEC_METHODS.contains(m), "{m} is not a spec method");
    }
    for m in IN_TRANSACTION_METHODS {
        assert!(TYPED_METHODS.contains(m));
    }
    assert_eq!(IN_TRANSACTION_METHODS.len(), 4);
    assert_eq!(<KvCommitParams as Call>::METHOD, "kv.commit");
    assert_eq!(<InitializeParams as Call>::METHOD, "initialize");
    assert_eq!(<StateWorkEventsParams as Call>::METHOD, "state.work_events");
}

#[test]
fn the_notes_list_every_untyped_spec_method() {
    let notes =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
            .unwrap();
    for m in SPEC_METHODS {
        if !TYPED_METHODS.contains(m) {
            assert!(
                notes.contains(&format!("`{m}`")),
                "{m} is neither typed nor listed in docs/protocol.md"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Work display limits
// ---------------------------------------------------------------------------------------

fn with_title(title: String) -> WorkDisplay {
    WorkDisplay {
        title,
        ..Default::default()
    }
}

fn with_link(label: String, url: String) -> WorkDisplay {
    WorkDisplay {
        title: "t".into(),
        links: vec![DisplayLink { label, url }],
        ..Default::default()
    }
}

#[test]
fn a_full_display_is_valid() {
    display().validate().unwrap();
}

#[test]
fn display_title_limit() {
    assert!(with_title("a".repeat(200)).validate().is_ok());
    let err = with_title("a".repeat(201)).validate().unwrap_err();
    assert_eq!(err.field, "title");
    assert!(err.reason.contains("200"), "{err}");
    // Bytes, not characters: 100 two-byte characters fit, one more byte does not.
    assert!(with_title("é".repeat(100)).validate().is_ok());
    assert!(with_title(format!("{}a", "é".repeat(100)))
        .validate()
        .is_err());
}

#[test]
fn display_ref_limit() {
    let d = |n| WorkDisplay {
        reference: "r".repeat(n),
        ..Default::default()
    };
    assert!(d(40).validate().is_ok());
    let err = d(41).validate().unwrap_err();
    assert_eq!(err.field, "ref");
    assert!(err.reason.contains("40"), "{err}");
}

#[test]
fn display_requester_limit() {
    let d = |n| WorkDisplay {
        title: "t".into(),
        requester: "q".repeat(n),
        ..Default::default()
    };
    assert!(d(100).validate().is_ok());
    let err = d(101).validate().unwrap_err();
    assert_eq!(err.field, "requester");
    assert!(err.reason.contains("100"), "{err}");
}

#[test]
fn display_link_label_limit_and_requirement() {
    let url = "https://example.com/".to_string();
    assert!(with_link("l".repeat(60), url.clone()).validate().is_ok());
    let err = with_link("l".repeat(61), url.clone())
        .validate()
        .unwrap_err();
    assert_eq!(err.field, "links[0].label");
    assert!(err.reason.contains("60"), "{err}");
    let err = with_link(String::new(), url).validate().unwrap_err();
    assert_eq!(err.field, "links[0].label");
    assert!(err.reason.contains("required"));
}

#[test]
fn display_url_limit() {
    let base = "https://example.com/";
    let fit = format!("{base}{}", "p".repeat(2048 - base.len()));
    assert_eq!(fit.len(), 2048);
    assert!(with_link("l".into(), fit.clone()).validate().is_ok());
    let err = with_link("l".into(), format!("{fit}p"))
        .validate()
        .unwrap_err();
    assert_eq!(err.field, "links[0].url");
    assert!(err.reason.contains("2048"), "{err}");
}

#[test]
fn display_urls_are_http_or_https_with_a_host() {
    for ok in [
        "http://example.com",
        "HTTPS://example.com/a?b#c",
        "https://u@h:8080/x",
    ] {
        assert!(with_link("l".into(), ok.into()).validate().is_ok(), "{ok}");
    }
    for bad in [
        "",
        "ftp://example.com",
        "javascript:alert(1)",
        "https://",
        "https:///path",
        "https://exa mple.com",
        "example.com",
    ] {
        let err = with_link("l".into(), bad.into()).validate().unwrap_err();
        assert_eq!(err.field, "links[0].url", "{bad}");
    }
}

#[test]
fn display_fields_are_one_line_without_control_characters() {
    for bad in [
        "two\nlines",
        "tab\there",
        "cr\r",
        "nul\u{0}",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        let err = with_title(bad.into()).validate().unwrap_err();
        assert_eq!(err.field, "title", "{bad:?}");
        assert!(err.reason.contains("one line"));
    }
    let err = WorkDisplay {
        title: "t".into(),
        requester: "a\nb".into(),
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(err.field, "requester");
    let err = with_link("a\nb".into(), "https://e.com".into())
        .validate()
        .unwrap_err();
    assert_eq!(err.field, "links[0].label");
}

#[test]
fn display_needs_a_title_or_a_ref() {
    let err = WorkDisplay {
        requester: "someone".into(),
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert!(err.reason.contains("title or a ref"));
    assert!(WorkDisplay::default().validate().is_err());
    assert!(WorkDisplay {
        reference: "#1".into(),
        ..Default::default()
    }
    .validate()
    .is_ok());
}

#[test]
fn display_link_count_limit() {
    let link = DisplayLink {
        label: "l".into(),
        url: "https://e.com".into(),
    };
    let d = |n| WorkDisplay {
        title: "t".into(),
        links: vec![link.clone(); n],
        ..Default::default()
    };
    assert!(d(8).validate().is_ok());
    let err = d(9).validate().unwrap_err();
    assert_eq!(err.field, "links");
    assert!(err.reason.contains('8'));
}

#[test]
fn action_submit_has_the_specs_shape() {
    // The spec's `{scope_id, work_id?, provider?, action, input?, caller, key}`: the
    // optional fields may be absent, and are left out when empty.
    let p: ActionSubmitParams = serde_json::from_value(
        json!({"scope_id": "acme", "action": "retry", "caller": "octocat", "key": "k"}),
    )
    .unwrap();
    assert_eq!(p.provider, "");
    assert_eq!(p.work_id, "");
    assert!(p.input.is_null());
    assert_eq!(
        serde_json::to_value(&p).unwrap(),
        json!({"scope_id": "acme", "action": "retry", "caller": "octocat", "key": "k"})
    );
    // `{event, added, message?}`.
    let r: ActionSubmitResult = serde_json::from_value(json!({"event": "evt_1"})).unwrap();
    assert!(!r.added);
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"event": "evt_1", "added": false})
    );
    assert_eq!(<ActionSubmitParams as Call>::METHOD, "action.submit");
}
