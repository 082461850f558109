//! The `ext.*` bus methods, served by the [`Runner`].
//!
//! - `ext.list {}`: every package (name, origin, version, state, restarts, pid,
//!   protocol version, refusal), the discovery reports and the conflicts;
//! - `ext.inspect {name}`: one package in detail; `not_found` for an unknown name;
//! - `ext.restart {name}`: stop and start again (a refused one is tried again);
//! - `ext.call {name, method, params, in_transaction?, timeout_ms?, hold?}`: a
//!   host-to-extension call on a running extension (see [`Runner::call`]); with
//!   `hold`, a long-lived one (`tunnel.run`) held open without a deadline until it is
//!   answered or the caller cancels ([`Runner::call_held`]);
//! - `ext.webhook {name, request}`: a webhook request to the owning extension's
//!   `webhook.handle`, its deliveries accepted durably before the answer
//!   ([`Runner::webhook`]);
//! - `ext.reconcile {name, page: {source, generation, cursor, checkpoint, max_items,
//!   max_bytes}, timeout_ms}`: one reconcile page, accepted before the answer
//!   ([`Runner::reconcile`]);
//! - `ext.registrations {}`: every package's registered ingress sources and webhook
//!   paths (and whether every first handshake is done, so the list is complete), and
//!   `playbook_dir`, the agents' plugin runs are given ([`crate::playbooks`]).
//!
//! The service also takes the `config.applied` notification (storaged publishes it on
//! a new generation) and wakes whoever follows the configuration ([`Service::config_changed`]).

use crate::runner::Runner;
use protocol::{reply, BoxFuture, Code, Handler, Reply, Request, RpcError};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// `ext.list`.
pub const LIST: &str = "ext.list";
/// `ext.inspect`.
pub const INSPECT: &str = "ext.inspect";
/// `ext.restart`.
pub const RESTART: &str = "ext.restart";
/// `ext.call`.
pub const CALL: &str = "ext.call";
/// `ext.webhook`.
pub const WEBHOOK: &str = "ext.webhook";
/// `ext.registrations`.
pub const REGISTRATIONS: &str = "ext.registrations";
/// `ext.reconcile`.
pub const RECONCILE: &str = "ext.reconcile";
/// `ext.resource_sweep`: sweep the spare workspaces now.
pub const RESOURCE_SWEEP: &str = "ext.resource_sweep";
/// The longest grace `ext.resource_sweep` may be given (30 days).
pub const SWEEP_GRACE_MAX_S: u64 = 30 * 24 * 3600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepParams {
    /// Only this resource type.
    #[serde(default, rename = "type")]
    resource_type: Option<String>,
    /// How long a Work must have been closed (default the periodic sweep's).
    #[serde(default)]
    grace_s: Option<u64>,
    /// Remove closed Works' workspaces even with uncommitted changes.
    #[serde(default)]
    remove_dirty: bool,
}

/// The longest page timeout `ext.reconcile` may be given.
pub const PAGE_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(600);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileParams {
    name: String,
    page: protocol::wire::IngressReconcileParams,
    timeout_ms: u64,
}
/// The notification extrunner publishes when a package's registrations change.
pub const STATE_TOPIC: &str = "ext.state";
/// The notification storaged publishes on a new configuration generation.
pub const CONFIG_TOPIC: &str = "config.applied";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookParams {
    name: String,
    /// `webhook.handle`'s params, passed on undecoded.
    request: Box<serde_json::value::RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams {
    name: String,
    method: String,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    in_transaction: bool,
    /// How long to wait for the answer (ms); default [`CALL_TIMEOUT_DEFAULT`], at
    /// most [`CALL_TIMEOUT_MAX`]. Past it the call is cancelled and answered
    /// `unavailable`.
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// Hold the call open without a deadline, until answered or cancelled: only for
    /// the methods the catalogue marks long-lived (`tunnel.run`), and without
    /// `timeout_ms` or `in_transaction`.
    #[serde(default)]
    hold: bool,
}

/// How long `ext.call` waits for an answer unless told otherwise.
pub const CALL_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(300);
/// The longest `ext.call` may be told to wait.
pub const CALL_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// The bus handler of extrunner's service.
#[derive(Debug, Clone)]
pub struct Service {
    runner: Arc<Runner>,
    config_changed: Arc<tokio::sync::Notify>,
    tunnel_changed: Arc<tokio::sync::Notify>,
    ready: Arc<std::sync::atomic::AtomicBool>,
}

impl Service {
    /// Serve `runner` on the bus.
    pub fn new(runner: Arc<Runner>) -> Service {
        Service {
            runner,
            config_changed: Arc::new(tokio::sync::Notify::new()),
            tunnel_changed: Arc::new(tokio::sync::Notify::new()),
            ready: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Woken on every `config.applied` notification.
    pub fn config_changed(&self) -> Arc<tokio::sync::Notify> {
        self.config_changed.clone()
    }

    /// Woken on every `tunnel.changed` notification.
    pub fn tunnel_changed(&self) -> Arc<tokio::sync::Notify> {
        self.tunnel_changed.clone()
    }

    /// Say that every first handshake is done (`ext.registrations` is complete).
    pub fn set_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The runner served.
    pub fn runner(&self) -> &Arc<Runner> {
        &self.runner
    }
}

/// The payload read gate, applied before a call that decides on an event: an event
/// whose payload the extension cannot read (retired, newer, undeclared) is answered
/// here, as the spec says, without reaching the extension: `route.match` no match,
/// `dependency.filter` false.
fn gate(runner: &Runner, name: &str, method: &str, params: &Value) -> Option<Value> {
    let refusal = match method {
        "route.match" => serde_json::json!({"matched": false}),
        "dependency.filter" => serde_json::json!({"matched": false}),
        _ => return None,
    };
    let manifest = runner.manifest(name)?;
    let event = params.get("event")?;
    let status = crate::host::event_payload_status(manifest, event);
    if status.readable() {
        return None;
    }
    let mut answer = refusal;
    if method == "route.match" {
        answer["reason"] = Value::from(format!(
            "unreadable payload: its schema is {status:?} for `{name}`"
        ));
    }
    Some(answer)
}

fn registrations(runner: &Runner, complete: bool) -> Value {
    let extensions: Vec<Value> = runner
        .registrations()
        .into_iter()
        .map(|(name, state, r)| {
            let manifest = runner.manifest(&name);
            let handlers: Vec<&str> = manifest
                .map(|m| {
                    m.provides
                        .routes
                        .iter()
                        .map(|h| h.handler.as_str())
                        .collect()
                })
                .unwrap_or_default();
            let types: Vec<&str> = manifest
                .map(|m| {
                    m.provides
                        .extensions
                        .iter()
                        .map(|t| t.type_name.as_str())
                        .collect()
                })
                .unwrap_or_default();
            let tasks: Vec<Value> = manifest
                .map(|m| {
                    m.provides
                        .tasks
                        .iter()
                        .map(|t| serde_json::json!({"name": t.name, "interval_s": t.interval_s}))
                        .collect()
                })
                .unwrap_or_default();
            let checks: Vec<Value> = manifest
                .map(|m| {
                    m.provides
                        .checks
                        .iter()
                        .map(|c| serde_json::json!({"name": c.name, "offline": c.offline}))
                        .collect()
                })
                .unwrap_or_default();
            let executors: Vec<Value> = manifest
                .map(|m| {
                    m.provides
                        .executors
                        .iter()
                        .map(|x| serde_json::json!({"name": x.name, "pool": x.pool, "inject": x.labels.inject}))
                        .collect()
                })
                .unwrap_or_default();
            let operations: Vec<Value> = manifest
                .map(|m| {
                    m.provides
                        .operations
                        .iter()
                        .map(|o| {
                            serde_json::json!({"name": o.name, "kind": o.kind,
                                               "summary": o.summary, "guidance": o.guidance,
                                               "input": o.input})
                        })
                        .collect()
                })
                .unwrap_or_default();
            // The surfaces schedulerd calls around a run, and where.
            let surfaces = manifest
                .map(|m| {
                    serde_json::json!({
                        "run_environment": m.provides.run_environment,
                        "segment_end": m.provides.segment_end,
                        "dependency_filter": m.provides.dependency_filter,
                        "annotations": m.provides.annotations,
                    })
                })
                .unwrap_or_default();
            serde_json::json!({
                "name": name,
                "state": state,
                "scopes": runner.scopes_of(&name),
                "surfaces": surfaces,
                "handlers": handlers,
                "operations": operations,
                "types": types,
                "executors": executors,
                "tasks": tasks,
                "checks": checks,
                "generation": r.generation,
                "serial": r.serial,
                "sources": r.sources,
                "webhooks": r.webhooks,
                "refusal": r.refusal,
            })
        })
        .collect();
    serde_json::json!({ "complete": complete, "playbook_dir": runner.playbook_dir(),
                        "extensions": extensions })
}

async fn serve(runner: Arc<Runner>, ready: bool, request: Request) -> Result<Reply, RpcError> {
    match request.method.as_str() {
        WEBHOOK => {
            let p: WebhookParams = request.params()?;
            reply(&runner.webhook(&p.name, &p.request).await?)
        }
        REGISTRATIONS => reply(&registrations(&runner, ready)),
        RECONCILE => {
            let p: ReconcileParams = request.params()?;
            let timeout = std::time::Duration::from_millis(p.timeout_ms);
            if timeout > PAGE_TIMEOUT_MAX || timeout.is_zero() {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "timeout_ms {} is not within 1 to {} ms (PAGE_TIMEOUT_MAX)",
                        p.timeout_ms,
                        PAGE_TIMEOUT_MAX.as_millis()
                    ),
                ));
            }
            reply(&runner.reconcile(&p.name, &p.page, timeout).await?)
        }
        RESOURCE_SWEEP => {
            let p: SweepParams = request.params()?;
            let grace_s = p
                .grace_s
                .unwrap_or(crate::workspaces::SWEEP_GRACE.as_secs());
            if grace_s > SWEEP_GRACE_MAX_S {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!("grace_s {grace_s} is over the longest grace ({SWEEP_GRACE_MAX_S} s)"),
                ));
            }
            let reports = runner
                .workspaces()
                .sweep(
                    p.resource_type.as_deref(),
                    std::time::Duration::from_secs(grace_s),
                    p.remove_dirty,
                )
                .await?;
            reply(&serde_json::json!({ "sweeps": reports }))
        }
        LIST => reply(&runner.list()),
        INSPECT => {
            let p: NameParams = request.params()?;
            match runner.inspect(&p.name) {
                Some(v) => reply(&v),
                None => Err(RpcError::new(
                    Code::NotFound,
                    format!("no extension named `{}`", p.name),
                )),
            }
        }
        RESTART => {
            let p: NameParams = request.params()?;
            reply(&runner.restart(&p.name).await?)
        }
        CALL => {
            let p: CallParams = request.params()?;
            let params = p
                .params
                .unwrap_or_else(|| Value::Object(Default::default()));
            if let Some(answer) = gate(&runner, &p.name, &p.method, &params) {
                return reply(&answer);
            }
            if p.hold {
                if p.timeout_ms.is_some() || p.in_transaction {
                    return Err(RpcError::new(
                        Code::Invalid,
                        "a held call has no timeout_ms and is not in a transaction",
                    ));
                }
                return runner
                    .call_held(&p.name, &p.method, &params, request.cancel.clone())
                    .await;
            }
            let timeout = match p.timeout_ms {
                None => CALL_TIMEOUT_DEFAULT,
                Some(ms) if std::time::Duration::from_millis(ms) <= CALL_TIMEOUT_MAX => {
                    std::time::Duration::from_millis(ms)
                }
                Some(ms) => {
                    return Err(RpcError::new(
                        Code::Invalid,
                        format!(
                            "timeout_ms {ms} is over the longest call ({} ms, CALL_TIMEOUT_MAX)",
                            CALL_TIMEOUT_MAX.as_millis()
                        ),
                    ))
                }
            };
            runner
                .call(
                    &p.name,
                    &p.method,
                    &params,
                    p.in_transaction,
                    timeout,
                    Some(request.cancel.clone()),
                )
                .await
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let ready = self.ready.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(serve(self.runner.clone(), ready, request))
    }

    fn notify(&self, _peer: &protocol::Peer, method: &str, _params: Value) {
        if method == CONFIG_TOPIC {
            self.config_changed.notify_one();
        } else if method == crate::tunnels::CHANGED_TOPIC {
            self.tunnel_changed.notify_one();
        }
    }
}
