//! Host-to-extension calls: `ext.call`, the held calls of tunnels, and what a
//! run's or a wait's answer records.

use super::*;
use crate::process::State;
use crate::tunnels::TunnelRuns;
use busapi::Call;
use protocol::catalogue::{method as catalogue_method, Direction};
use protocol::manifest::is_under;
use protocol::wire::{
    CheckRunParams, ExecutorRecoverParams, ExecutorResumeParams, ExecutorRunParams,
    ExecutorWaitParams, TunnelRunParams,
};
use protocol::{
    CallError, CallOptions, CancelToken, Code, Reply, RpcError, IN_TRANSACTION_DEADLINE,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

impl Runner {
    /// `ext.call`: forward a host-to-extension call to the running extension
    /// `name`. The method must be enabled by the manifest (or be one of the
    /// extension's own `<name>.…` methods). A call to an extension that is starting
    /// or waiting to restart waits for it within `timeout`. An in-transaction call
    /// (asked for, or so in the catalogue) does not wait, is bounded at 250 ms and
    /// refuses callbacks. A crash mid-call is `unavailable`; an authored error
    /// crosses verbatim.
    pub async fn call<P: Serialize + ?Sized>(
        &self,
        name: &str,
        method: &str,
        params: &P,
        in_transaction: bool,
        timeout: Duration,
        cancel: Option<CancelToken>,
    ) -> Result<Reply, RpcError> {
        if method == CheckRunParams::METHOD {
            let params = self.with_check_view(name, params)?;
            return self
                .call_within(name, method, &params, in_transaction, Some(timeout), cancel)
                .await;
        }
        self.call_within(name, method, params, in_transaction, Some(timeout), cancel)
            .await
    }

    /// `check.run`'s params with the configuration view filled in (spec: check.run
    /// carries the read-only view of the configuration that uses the package), when
    /// the caller sent none.
    fn with_check_view<P: Serialize + ?Sized>(
        &self,
        name: &str,
        params: &P,
    ) -> Result<Value, RpcError> {
        let mut v = serde_json::to_value(params).map_err(RpcError::invalid_params)?;
        let empty = match v.get("config") {
            None | Some(Value::Null) => true,
            Some(Value::Object(o)) => o.is_empty(),
            Some(_) => false,
        };
        let doc = lock(&self.applied).clone();
        if let (true, Some(doc), Some(manifest), Some(obj)) =
            (empty, doc, self.manifest(name), v.as_object_mut())
        {
            let view = doc.check_view(manifest, &self.config_dir);
            obj.insert(
                "config".into(),
                serde_json::to_value(view).map_err(RpcError::unauthored)?,
            );
        }
        Ok(v)
    }

    /// The tunnel runs held open, and the tunnel's public URL.
    pub fn tunnels(&self) -> &Arc<TunnelRuns> {
        &self.tunnels
    }

    /// A call the catalogue marks long-lived (`tunnel.run`), held open without a
    /// deadline until it is answered or `cancel` fires (see [`Runner::call`]). A
    /// `tunnel.run` is recorded by its run ID while open, so the package's
    /// `tunnel.url` quoting it is forwarded to tunneld ([`crate::tunnels`]).
    pub async fn call_held<P: Serialize + ?Sized>(
        &self,
        name: &str,
        method: &str,
        params: &P,
        cancel: CancelToken,
    ) -> Result<Reply, RpcError> {
        if !protocol::catalogue::long_lived(method) {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "`{method}` is not a long-lived method: only {:?} are held open",
                    protocol::catalogue::LONG_LIVED
                ),
            ));
        }
        let _open = if method == TunnelRunParams::METHOD {
            let run_id = serde_json::to_value(params)
                .ok()
                .and_then(|p| p.get("run_id").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default();
            match self.tunnels.open(name, &run_id) {
                Some(open) => Some(open),
                None => {
                    return Err(RpcError::new(
                        Code::Conflict,
                        format!("tunnel run {run_id:?} is empty, already open, or over the {} runs held at once", crate::tunnels::MAX_RUNS),
                    ))
                }
            }
        } else {
            None
        };
        self.call_within(name, method, params, false, None, Some(cancel))
            .await
    }

    async fn call_within<P: Serialize + ?Sized>(
        &self,
        name: &str,
        method: &str,
        params: &P,
        in_transaction: bool,
        timeout: Option<Duration>,
        cancel: Option<CancelToken>,
    ) -> Result<Reply, RpcError> {
        let Some(e) = self.entry(name) else {
            return Err(RpcError::new(
                Code::NotFound,
                format!("no extension named `{name}`"),
            ));
        };
        let manifest = &e.package.manifest;
        if LIFECYCLE.contains(&method) {
            return Err(RpcError::new(
                Code::Invalid,
                format!("`{method}` is sent by the host's lifecycle only"),
            ));
        }
        let catalogued = catalogue_method(method);
        let in_transaction = match catalogued {
            Some(m) => {
                if m.direction != Direction::HostToExtension {
                    return Err(RpcError::new(
                        Code::Undeclared,
                        format!(
                            "`{method}` is a method the extension calls, not one the host calls"
                        ),
                    ));
                }
                if !manifest.enables(method) {
                    return Err(RpcError::new(
                        Code::Undeclared,
                        format!("the manifest of `{name}` does not enable `{method}`"),
                    ));
                }
                in_transaction || m.in_transaction
            }
            None => {
                if !(method.contains('.') && is_under(name, method)) {
                    return Err(RpcError::new(
                        Code::Undeclared,
                        format!(
                            "`{method}` is neither a protocol method `{name}` enables nor one of its own `{name}.…` methods"
                        ),
                    ));
                }
                in_transaction
            }
        };
        let Some(sup) = e.supervisor() else {
            return Err(unavailable(format!(
                "`{name}` is not started: the package set has conflicts"
            )));
        };
        let begun = tokio::time::Instant::now();
        let state = sup.state();
        let not_running = |state: &State, waited: Option<Duration>| {
            let mut err = unavailable(match waited {
                None => format!("`{name}` is not running (state {})", state_name(state)),
                Some(w) => format!(
                    "`{name}` is not running (state {}) and did not start within the call's {w:?}",
                    state_name(state)
                ),
            });
            if let Some(data) = err.data.as_mut() {
                data["state"] = json!(state_name(state));
            }
            err
        };
        let peer = match (&state, sup.peer()) {
            // A connection already closed is an extension that just died: the
            // supervisor has not seen it yet, and the call waits for the restart.
            (State::Running, Some(peer)) if !peer.is_closed() => peer,
            // A call in a transaction does not wait (spec: In-transaction calls), and
            // an extension refused or stopped will not come back by itself.
            (State::Refused { .. } | State::Stopped, _) => return Err(not_running(&state, None)),
            _ if in_transaction => return Err(not_running(&state, None)),
            _ => {
                // Starting, or in its restart backoff: the call waits for the running
                // process, within its own deadline (spec: Loading, Supervision).
                let cancelled = async {
                    match &cancel {
                        Some(c) => c.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                let limit = async {
                    match timeout {
                        Some(t) => tokio::time::sleep(t).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = sup.wait_running() => match r {
                        Ok(peer) => peer,
                        Err(state) => return Err(not_running(&state, None)),
                    },
                    () = limit => return Err(not_running(&sup.state(), timeout)),
                    () = cancelled => return Err(RpcError::cancelled()),
                }
            }
        };
        let opts = CallOptions {
            timeout: if in_transaction {
                Some(IN_TRANSACTION_DEADLINE)
            } else {
                timeout.map(|t| {
                    t.saturating_sub(begun.elapsed())
                        .max(Duration::from_millis(1))
                })
            },
            cancel,
            in_transaction,
        };
        self.note_run(name, method, params, &peer);
        match peer.call_raw(method, params, opts).await {
            Ok(reply) => {
                if method == ExecutorWaitParams::METHOD {
                    self.note_wait(params, &reply);
                }
                Ok(reply)
            }
            Err(CallError::Rpc(err)) => Err(err),
            Err(CallError::Transport(reason)) => {
                let stopping = matches!(&*reason, protocol::CloseReason::Local(_))
                    || matches!(sup.state(), State::Stopped);
                if stopping {
                    // extrunner itself stopped the extension: not a crash.
                    tracing::info!(OC_EXTENSION = %name, %method, %reason, "a call ended with the extension's stop");
                } else {
                    tracing::warn!(OC_EXTENSION = %name, %method, %reason, "the extension crashed during a call");
                }
                let mut err = unavailable(format!(
                    "the extension crashed during the call ({reason})"
                ));
                if let Some(data) = err.data.as_mut() {
                    data["crashed"] = json!(true);
                }
                Err(err)
            }
            Err(CallError::Timeout(limit)) => Err(unavailable(format!(
                "`{name}` did not answer `{method}` within {limit:?}"
            ))),
            Err(CallError::Cancelled) => Err(RpcError::cancelled()),
            Err(CallError::TooLarge { size, limit }) => Err(RpcError::too_large(
                size,
                limit,
                format!(
                    "the `{method}` request of {size} bytes exceeds the {limit}-byte message limit of `{name}` (max_message_bytes)"
                ),
            )),
            Err(CallError::Codec(detail)) => Err(RpcError::unauthored(detail)),
        }
    }

    /// Records a run the host opens on `name`'s process (`executor.run`,
    /// `executor.recover`, `executor.resume`), through which its resource calls are
    /// then served.
    fn note_run<P: Serialize + ?Sized>(
        &self,
        name: &str,
        method: &str,
        params: &P,
        peer: &protocol::Peer,
    ) {
        match method {
            m if m == ExecutorRunParams::METHOD || m == ExecutorRecoverParams::METHOD => {
                #[derive(Deserialize)]
                struct Run {
                    run: protocol::wire::RunRequest,
                }
                if let Ok(p) = serde_json::to_value(params).and_then(serde_json::from_value::<Run>)
                {
                    tracing::info!(OC_EXTENSION = %name, OC_WORK_ID = %p.run.work.id, OC_EXECUTION_ID = %p.run.execution_id, attempt = p.run.attempt, %method, "the run goes to its executor");
                    self.workspaces.open(name, peer, &p.run);
                }
            }
            m if m == ExecutorResumeParams::METHOD => {
                if let Ok(p) = serde_json::to_value(params)
                    .and_then(serde_json::from_value::<protocol::wire::ExecutorResumeParams>)
                {
                    self.workspaces.reopen(name, peer, &p.execution_id, p.epoch);
                }
            }
            _ => {}
        }
    }

    /// A run whose `executor.wait` answered completed or failed is closed.
    fn note_wait<P: Serialize + ?Sized>(&self, params: &P, reply: &Reply) {
        #[derive(Deserialize)]
        struct Ended {
            outcome: protocol::wire::Outcome,
        }
        let Ok(p) = serde_json::to_value(params)
            .and_then(serde_json::from_value::<protocol::wire::ExecutorWaitParams>)
        else {
            return;
        };
        if let Ok(r) = serde_json::from_str::<Ended>(reply.get()) {
            if matches!(
                r.outcome,
                protocol::wire::Outcome::Completed | protocol::wire::Outcome::Failed
            ) {
                self.workspaces.close(&p.execution_id);
            }
        }
    }
}
