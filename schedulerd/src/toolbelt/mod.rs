//! The agents' toolbelt (DESIGN.md, "Scheduler"; wire in [`protocol::toolbelt`]): a unix
//! socket on which an execution, holding its per-execution token, reads its context,
//! emits, creates Work, waits, declares its outcome and calls extension operations
//! (forwarded to extrunner). An execution never reaches the bus.
//!
//! # Tokens
//!
//! A token is `oct1.<work>.<execution>.<epoch>.<mac>`, the MAC an HMAC-SHA256 of the
//! rest under a key schedulerd keeps in the store (KV `core.toolbelt`, key `key`,
//! created once), so a token outlives a restart of schedulerd and needs no table. A
//! token is good while its execution runs at that epoch: an adoption at a higher epoch
//! fences the old one, and a settled attempt's is refused. (`token.rs`)
//!
//! # What a turn declares
//!
//! `wait` and `declare_outcome` (and a `wait`-kind operation) record what the turn
//! declared in KV `core.toolbelt`, key `exec/<execution>`; the starter reads it when it
//! settles the attempt ([`declared`]): a declared Wait parks the Work whatever the
//! executor answered (unless it failed), and a declared outcome replaces the
//! executor's otherwise. It is cleared once the attempt is settled. (`declared.rs`)
//!
//! # create_work and confinement
//!
//! `create_work` may name the caller's own binding, or another binding of its scope
//! that is at least as confined: when the caller's binding has a `sandbox` (or a
//! `container`), the named one must have a sandbox (container) of the same type.
//! Otherwise the call is refused `unauthorized`, naming both bindings and the rule,
//! unless the caller's binding lists the named one in
//! `allow_unconfined_create_work` (the operator's opt-in). An extension operation
//! may not emit `agent.work_requested` itself. The rule is in `confine.rs`.
//!
//! # Request IDs
//!
//! `call` and `emit` are idempotent on the call's request ID: the committed answer is
//! kept under `call/<work>/<request id>` and a retry gets it without running anything
//! again. A crash between an operation's effect and that commit leaves no answer, so
//! the retry runs the handler again, which must be idempotent on the request ID (the
//! spec's contract for operation handlers). The tools are in `tools.rs`, extension
//! operations in `operation.rs`, git's credentials in `credential.rs`.
//!
//! # Gates
//!
//! A `call` is asked of the operation gates of the caller's scope before it is
//! forwarded (`gates.rs`): one may refuse it, park it on a Wait (the turn ends,
//! and that answer is not kept for the request ID, so the call made again once the
//! Work resumes asks the gate again), or fail, which refuses it (fail closed).

mod confine;
mod credential;
mod declared;
mod gates;
mod operation;
mod refusal;
mod token;
mod tools;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use busapi::store::{ExecutionsRequest, WorkGetRequest, WorkRow};
use busapi::Call;
use protocol::toolbelt::{self as tb, CallParams, Guidance, GuidanceParams, OperationGuidance};
use protocol::wire::{self, Authority};
use protocol::{reply, BoxFuture, CallError, Code, Handler, Options, Reply, Request, RpcError};
use tokio::net::UnixListener;

use crate::knowledge::Knowledge;
use crate::ports::{Extensions, Store};

pub use declared::{clear, declared, Declared};
pub use gates::GATE_TIMEOUT;
pub use token::load_key;

/// The KV owner and namespace of the toolbelt's records.
pub const OWNER: &str = "core";
/// The namespace.
pub const NAMESPACE: &str = "core.toolbelt";
/// The toolbelt's own event family: what `emit` may emit.
pub const FAMILY: &str = "agent.";
/// The event type `create_work` emits, which the router turns into Work.
pub use protocol::toolbelt::WORK_REQUESTED;
/// How long an extension operation may take (inside the client's 60 s).
const OPERATION_TIMEOUT: Duration = Duration::from_secs(55);
/// At most this many of the Work's events are in `read_context`.
const CONTEXT_EVENTS: usize = 100;

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

fn store_failed(method: &str, e: CallError) -> RpcError {
    tracing::warn!(method, error = %e, "toolbelt: a store call failed");
    match e {
        CallError::Rpc(r) if r.app_code() == Some(Code::NotFound.as_str()) => {
            refuse(Code::NotFound, format!("{method}: not found"))
        }
        CallError::Rpc(r) if r.app_code() == Some(Code::Conflict.as_str()) => {
            refuse(Code::Conflict, format!("{method}: conflict"))
        }
        CallError::Rpc(r) if r.app_code() == Some(Code::Invalid.as_str()) => {
            refuse(Code::Invalid, r.message)
        }
        _ => refuse(
            Code::Unavailable,
            format!("{method} failed; retry with the same request_id"),
        ),
    }
}

/// Who is calling: the execution its token names, checked against the store.
#[derive(Debug, Clone)]
struct Caller {
    authority: Authority,
    work: WorkRow,
    binding: wire::Binding,
    attempt: i64,
}

/// The toolbelt.
#[derive(Clone)]
pub struct Toolbelt {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    extensions: Extensions,
    knowledge: Arc<RwLock<Knowledge>>,
    key: Vec<u8>,
    endpoint: PathBuf,
    dir: String,
    inflight: Mutex<HashSet<String>>,
    gate_timeout_ms: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Toolbelt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbelt")
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

impl Toolbelt {
    /// A toolbelt serving at `endpoint` with `key`, calling `store` and `extensions`
    /// and granting what `knowledge` says; it tells executors `dir` (where the
    /// `open-conduit` program is, for `open-conduit mcp`).
    pub fn new(
        store: Store,
        extensions: Extensions,
        knowledge: Arc<RwLock<Knowledge>>,
        key: Vec<u8>,
        endpoint: PathBuf,
        dir: String,
    ) -> Self {
        Toolbelt {
            inner: Arc::new(Inner {
                store,
                extensions,
                knowledge,
                key,
                endpoint,
                dir,
                inflight: Mutex::new(HashSet::new()),
                gate_timeout_ms: std::sync::atomic::AtomicU64::new(crate::ports::ms(GATE_TIMEOUT)),
            }),
        }
    }

    /// Where the `open-conduit` program is, as runs are told (empty: on their PATH).
    pub fn dir(&self) -> &str {
        &self.inner.dir
    }

    /// What a run is given: the endpoint, its token and the toolbelt directory.
    pub fn for_run(&self, work_id: &str, execution_id: &str, epoch: i64) -> wire::Toolbelt {
        wire::Toolbelt {
            endpoint: self.inner.endpoint.display().to_string(),
            token: self.token(work_id, execution_id, epoch),
            dir: self.inner.dir.clone(),
        }
    }

    /// Serve the socket until the process ends.
    pub async fn serve(self, listener: UnixListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let (r, w) = stream.into_split();
                    let _peer =
                        protocol::connect(r, w, self.clone(), Options::named("toolbelt client"));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "toolbelt: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Bind the socket at the endpoint (a stale file is replaced; mode 0660).
    pub fn bind(endpoint: &Path) -> Result<UnixListener, String> {
        if let Some(dir) = endpoint.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let _ = std::fs::remove_file(endpoint);
        let l = UnixListener::bind(endpoint).map_err(|e| format!("{}: {e}", endpoint.display()))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(endpoint, std::fs::Permissions::from_mode(0o660));
        Ok(l)
    }

    async fn caller(&self, token: &str) -> Result<Caller, RpcError> {
        let unauthorized = || refuse(Code::Unauthorized, "the token is not a running execution's");
        let (work_id, execution_id, epoch) = self.verify(token).ok_or_else(unauthorized)?;
        let store = &self.inner.store;
        let executions = store
            .call(&ExecutionsRequest {
                work_id: Some(work_id.clone()),
                ..ExecutionsRequest::default()
            })
            .await
            .map_err(|e| store_failed(ExecutionsRequest::METHOD, e))?;
        let exec = executions
            .executions
            .into_iter()
            .find(|e| e.id == execution_id)
            .ok_or_else(unauthorized)?;
        if exec.epoch != epoch || exec.state != "running" {
            return Err(unauthorized());
        }
        let work = store
            .call(&WorkGetRequest {
                id: work_id.clone(),
            })
            .await
            .map_err(|e| store_failed(WorkGetRequest::METHOD, e))?
            .work;
        let binding = {
            let k = self
                .inner
                .knowledge
                .read()
                .map_err(|_| refuse(Code::Internal, "internal error"))?;
            k.binding(&work.scope_id, &work.binding).unwrap_or_default()
        };
        Ok(Caller {
            authority: Authority {
                scope_id: work.scope_id.clone(),
                work_id,
                execution_id,
                epoch: u64::try_from(epoch).unwrap_or(0),
                binding: work.binding.clone(),
                connection: binding.connection.clone(),
            },
            attempt: exec.attempt,
            work,
            binding,
        })
    }

    /// The operations the binding grants: (the extension offering it, what the agent is
    /// told of it).
    fn granted(&self, binding: &wire::Binding) -> Vec<(String, OperationGuidance)> {
        let Ok(k) = self.inner.knowledge.read() else {
            return Vec::new();
        };
        binding
            .operations
            .iter()
            .filter_map(|name| k.operations.get(name).cloned())
            .collect()
    }

    async fn guidance(&self, p: GuidanceParams) -> Result<Guidance, RpcError> {
        let caller = self.caller(&p.token).await?;
        Ok(Guidance {
            operations: self
                .granted(&caller.binding)
                .into_iter()
                .map(|(_, g)| g)
                .collect(),
        })
    }
}

impl Handler for Toolbelt {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let this = self.clone();
        Box::pin(async move {
            match request.method.as_str() {
                tb::METHOD_CALL => {
                    let p: CallParams = request.params()?;
                    reply(&this.call(p).await?)
                }
                tb::METHOD_GUIDANCE => {
                    let p: GuidanceParams = request.params()?;
                    reply(&this.guidance(p).await?)
                }
                tb::METHOD_GIT_CREDENTIAL => {
                    let p: tb::GitCredentialParams = request.params()?;
                    reply(&this.git_credential(p).await?)
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }
}
