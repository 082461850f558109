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
//! fences the old one, and a settled attempt's is refused.
//!
//! # What a turn declares
//!
//! `wait` and `declare_outcome` (and a `wait`-kind operation) record what the turn
//! declared in KV `core.toolbelt`, key `exec/<execution>`; the starter reads it when it
//! settles the attempt ([`declared`]): a declared Wait parks the Work whatever the
//! executor answered (unless it failed), and a declared outcome replaces the
//! executor's otherwise. It is cleared once the attempt is settled.
//!
//! # create_work and confinement
//!
//! `create_work` may name the caller's own binding, or another binding of its scope
//! that is at least as confined: when the caller's binding has a `sandbox` (or a
//! `container`), the named one must have a sandbox (container) of the same type.
//! Otherwise the call is refused `unauthorized`, naming both bindings and the rule,
//! unless the caller's binding lists the named one in
//! `allow_unconfined_create_work` (the operator's opt-in). An extension operation
//! may not emit `agent.work_requested` itself. The rule is in `toolbelt/confine.rs`.
//!
//! # Request IDs
//!
//! `call` and `emit` are idempotent on the call's request ID: the committed answer is
//! kept under `call/<work>/<request id>` and a retry gets it without running anything
//! again. A crash between an operation's effect and that commit leaves no answer, so
//! the retry runs the handler again, which must be idempotent on the request ID (the
//! spec's contract for operation handlers).

mod confine;
mod credential;

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon::bus::Bus;
use hmac::{Hmac, Mac};
use protocol::toolbelt::{self as tb, CallParams, Guidance, GuidanceParams, OperationGuidance};
use protocol::wire::{self, Authority, WaitRequest};
use protocol::{reply, BoxFuture, CallError, Code, Handler, Options, Reply, Request, RpcError};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::net::UnixListener;

use crate::router::Router;
use confine::create_work_refusal;

/// The KV owner and namespace of the toolbelt's records.
pub const OWNER: &str = "core";
/// The namespace.
pub const NAMESPACE: &str = "core.toolbelt";
/// The token format's prefix.
const TOKEN_PREFIX: &str = "oct1";
/// The toolbelt's own event family: what `emit` may emit.
pub const FAMILY: &str = "agent.";
/// The event type `create_work` emits, which the router turns into Work.
pub use protocol::toolbelt::WORK_REQUESTED;
/// How long an extension operation may take (inside the client's 60 s).
const OPERATION_TIMEOUT: Duration = Duration::from_secs(55);
/// At most this many of the Work's events are in `read_context`.
const CONTEXT_EVENTS: usize = 100;

type HmacSha256 = Hmac<Sha256>;

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
    work: Value,
    binding: wire::Binding,
    attempt: i64,
}

/// What a turn declared through the toolbelt, read when its attempt settles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// The Wait the turn ends parked on.
    pub wait: Option<WaitRequest>,
    /// Who owns that Wait: the extension whose wait operation planned it, or
    /// nobody (empty) for the toolbelt's own `wait`.
    pub wait_owner: String,
    /// The outcome the agent declared, and its summary.
    pub outcome: Option<(wire::Outcome, String)>,
}

/// The toolbelt.
#[derive(Clone)]
pub struct Toolbelt {
    inner: Arc<Inner>,
}

struct Inner {
    bus: Bus,
    router: Router,
    key: Vec<u8>,
    endpoint: PathBuf,
    dir: String,
    inflight: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Toolbelt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbelt")
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The key, from the store; created (32 random bytes) the first time.
pub async fn load_key(bus: &Bus) -> Result<Vec<u8>, String> {
    for _ in 0..3 {
        let got = bus
            .call(
                "store.kv_get",
                &json!({"owner": OWNER, "namespace": NAMESPACE, "key": "key"}),
            )
            .await
            .map_err(|e| format!("store.kv_get: {e}"))?;
        if let Some(k) = got["value"].as_str().and_then(unhex) {
            return Ok(k);
        }
        let mut fresh = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut fresh))
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        let put = bus
            .call(
                "store.kv_commit",
                &json!({"owner": OWNER,
                        "checks": [{"namespace": NAMESPACE, "key": "key", "absent": true}],
                        "puts": [{"namespace": NAMESPACE, "key": "key", "value": hex(&fresh)}]}),
            )
            .await;
        match put {
            Ok(_) => return Ok(fresh.to_vec()),
            // Another schedulerd wrote it first: read it again.
            Err(e) if e.code() == Some(Code::Conflict.as_str()) => continue,
            Err(e) => return Err(format!("store.kv_commit: {e}")),
        }
    }
    Err("the toolbelt key could not be read or written".into())
}

/// What `exec/<execution>` says, if anything.
pub async fn declared(bus: &Bus, execution_id: &str) -> Option<Declared> {
    let got = bus
        .call(
            "store.kv_get",
            &json!({"owner": OWNER, "namespace": NAMESPACE, "key": format!("exec/{execution_id}")}),
        )
        .await
        .ok()?;
    let v = got.get("value")?;
    let wait = serde_json::from_value(v["wait"].clone()).ok();
    let outcome = v["outcome"]["outcome"]
        .as_str()
        .and_then(|o| serde_json::from_value(json!(o)).ok())
        .map(|o| {
            (
                o,
                v["outcome"]["summary"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        });
    let wait_owner = v["wait_owner"].as_str().unwrap_or_default().to_owned();
    Some(Declared {
        wait,
        wait_owner,
        outcome,
    })
}

/// Forget what the turn of `execution_id` declared (after its attempt settled).
pub async fn clear(bus: &Bus, execution_id: &str) {
    let _ = bus
        .call(
            "store.kv_commit",
            &json!({"owner": OWNER,
                    "deletes": [{"namespace": NAMESPACE, "key": format!("exec/{execution_id}")}]}),
        )
        .await;
}

impl Toolbelt {
    /// A toolbelt serving at `endpoint`, telling executors `dir` (where the
    /// `open-conduit` program is, for `open-conduit mcp`).
    pub fn new(bus: Bus, router: Router, key: Vec<u8>, endpoint: PathBuf, dir: String) -> Self {
        Toolbelt {
            inner: Arc::new(Inner {
                bus,
                router,
                key,
                endpoint,
                dir,
                inflight: Mutex::new(HashSet::new()),
            }),
        }
    }

    fn mac(&self, body: &str) -> Option<HmacSha256> {
        let mut m = HmacSha256::new_from_slice(&self.inner.key).ok()?;
        m.update(body.as_bytes());
        Some(m)
    }

    /// Where the `open-conduit` program is, as runs are told (empty: on their PATH).
    pub fn dir(&self) -> &str {
        &self.inner.dir
    }

    /// The token of `execution_id` at `epoch`.
    pub fn token(&self, work_id: &str, execution_id: &str, epoch: i64) -> String {
        let body = format!("{TOKEN_PREFIX}.{work_id}.{execution_id}.{epoch}");
        let mac = self
            .mac(&body)
            .map(|m| hex(&m.finalize().into_bytes()))
            .unwrap_or_default();
        format!("{body}.{mac}")
    }

    /// What a run is given: the endpoint, its token and the toolbelt directory.
    pub fn for_run(&self, work_id: &str, execution_id: &str, epoch: i64) -> wire::Toolbelt {
        wire::Toolbelt {
            endpoint: self.inner.endpoint.display().to_string(),
            token: self.token(work_id, execution_id, epoch),
            dir: self.inner.dir.clone(),
        }
    }

    /// The token's (work, execution, epoch), if its MAC is right.
    fn verify(&self, token: &str) -> Option<(String, String, i64)> {
        let (body, mac) = token.rsplit_once('.')?;
        let mut parts = body.split('.');
        let (prefix, work, exec, epoch) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if prefix != TOKEN_PREFIX || parts.next().is_some() {
            return None;
        }
        self.mac(body)?.verify_slice(&unhex(mac)?).ok()?;
        Some((work.to_owned(), exec.to_owned(), epoch.parse().ok()?))
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
        let bus = &self.inner.bus;
        let executions = bus
            .call("store.executions", &json!({ "work_id": work_id }))
            .await
            .map_err(|e| store_failed("store.executions", e))?;
        let exec = executions["executions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["id"] == execution_id.as_str())
            .cloned()
            .ok_or_else(unauthorized)?;
        if exec["epoch"].as_i64() != Some(epoch) || exec["state"] != "running" {
            return Err(unauthorized());
        }
        let work = bus
            .call("store.work_get", &json!({ "id": work_id }))
            .await
            .map_err(|e| store_failed("store.work_get", e))?["work"]
            .clone();
        let scope_id = work["scope_id"].as_str().unwrap_or_default().to_owned();
        let binding_name = work["binding"].as_str().unwrap_or_default().to_owned();
        let binding = {
            let k = self.inner.router.knowledge();
            let k = k
                .read()
                .map_err(|_| refuse(Code::Internal, "internal error"))?;
            k.config
                .as_ref()
                .and_then(|(c, _)| c.scope(&scope_id))
                .and_then(|s| {
                    s.bindings
                        .iter()
                        .find(|b| b["name"] == binding_name.as_str())
                })
                .and_then(|b| serde_json::from_value::<wire::Binding>(b.clone()).ok())
                .unwrap_or_default()
        };
        Ok(Caller {
            authority: Authority {
                scope_id,
                work_id,
                execution_id,
                epoch: u64::try_from(epoch).unwrap_or(0),
                binding: binding_name,
                connection: binding.connection.clone(),
            },
            attempt: exec["attempt"].as_i64().unwrap_or(0),
            work,
            binding,
        })
    }

    /// The operations the binding grants: (the extension offering it, what the agent is
    /// told of it).
    fn granted(&self, binding: &wire::Binding) -> Vec<(String, OperationGuidance)> {
        let k = self.inner.router.knowledge();
        let Ok(k) = k.read() else {
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

    async fn call(&self, p: CallParams) -> Result<Value, RpcError> {
        let caller = self.caller(&p.token).await?;
        if !p.input.is_null() && !p.input.is_object() {
            return Err(refuse(Code::Invalid, "the input must be an object"));
        }
        if p.input.to_string().len() > tb::MAX_INPUT_BYTES {
            return Err(refuse(
                Code::Invalid,
                format!("the input is over {} bytes", tb::MAX_INPUT_BYTES),
            ));
        }
        // The input is held to the schema the tool publishes (`tools/list`).
        tb::check_input(&p.tool, &p.input).map_err(|why| refuse(Code::Invalid, why))?;
        if p.request_id.len() > 200 || p.request_id.contains('/') {
            return Err(refuse(
                Code::Invalid,
                "a request_id is at most 200 bytes, without /",
            ));
        }
        match p.tool.as_str() {
            tb::TOOL_READ_CONTEXT => self.read_context(&caller).await,
            tb::TOOL_WAIT => {
                let wait = wait_from_input(&p.input, &caller.work)?;
                self.declare(&caller, json!({ "wait": wait, "wait_owner": "" }))
                    .await?;
                Ok(json!({"wait": wait,
                          "note": "declared: end your turn now; the Work waits and a matching event resumes it"}))
            }
            tb::TOOL_DECLARE_OUTCOME => {
                let outcome = p.input["outcome"].as_str().unwrap_or_default();
                if !matches!(outcome, "completed" | "handoff" | "failed") {
                    return Err(refuse(
                        Code::Invalid,
                        "outcome must be completed, handoff or failed",
                    ));
                }
                let summary = wire::clip_line(p.input["summary"].as_str().unwrap_or_default(), 500);
                self.declare(
                    &caller,
                    json!({"outcome": {"outcome": outcome, "summary": summary}}),
                )
                .await?;
                Ok(json!({"outcome": outcome}))
            }
            tb::TOOL_EMIT | tb::TOOL_CREATE_WORK | tb::TOOL_CALL => {
                self.once(&caller, &p.request_id, self.effect(&caller, &p))
                    .await
            }
            other => Err(refuse(
                Code::Invalid,
                format!("no tool named {other:?} (tools: {})", tb::TOOLS.join(", ")),
            )),
        }
    }

    /// Run `effect` at most once per request ID: a committed answer is replayed.
    async fn once(
        &self,
        caller: &Caller,
        request_id: &str,
        effect: impl std::future::Future<Output = Result<Value, RpcError>>,
    ) -> Result<Value, RpcError> {
        if request_id.is_empty() {
            return effect.await;
        }
        let key = format!("call/{}/{request_id}", caller.authority.work_id);
        let bus = &self.inner.bus;
        let got = bus
            .call(
                "store.kv_get",
                &json!({"owner": OWNER, "namespace": NAMESPACE, "key": key}),
            )
            .await
            .map_err(|e| store_failed("store.kv_get", e))?;
        if let Some(v) = got.get("value") {
            return Ok(v["output"].clone());
        }
        {
            let mut inflight = self
                .inner
                .inflight
                .lock()
                .map_err(|_| refuse(Code::Internal, "internal error"))?;
            if !inflight.insert(key.clone()) {
                return Err(refuse(
                    Code::Conflict,
                    "a call with this request_id is in progress",
                ));
            }
        }
        let result = effect.await;
        let answer = match result {
            Ok(output) => {
                let put = bus
                    .call(
                        "store.kv_commit",
                        &json!({"owner": OWNER,
                                "checks": [{"namespace": NAMESPACE, "key": key, "absent": true}],
                                "puts": [{"namespace": NAMESPACE, "key": key,
                                          "value": {"output": output}}]}),
                    )
                    .await;
                if let Err(e) = put {
                    tracing::warn!(OC_WORK_ID = %caller.authority.work_id, error = %e, "toolbelt: the answer could not be kept; a retry runs the operation again");
                }
                Ok(output)
            }
            Err(e) => Err(e),
        };
        if let Ok(mut inflight) = self.inner.inflight.lock() {
            inflight.remove(&key);
        }
        answer
    }

    async fn effect(&self, caller: &Caller, p: &CallParams) -> Result<Value, RpcError> {
        match p.tool.as_str() {
            tb::TOOL_EMIT => {
                let t = p.input["type"].as_str().unwrap_or_default();
                if !t.starts_with(FAMILY) || t == WORK_REQUESTED || t.len() <= FAMILY.len() {
                    return Err(refuse(
                        Code::Invalid,
                        format!("type must be in the toolbelt's family {FAMILY}* (and not {WORK_REQUESTED})"),
                    ));
                }
                let keys = strings(&p.input["keys"]);
                self.emit(caller, t, p.input["payload"].clone(), keys).await
            }
            tb::TOOL_CREATE_WORK => {
                let title = p.input["title"].as_str().unwrap_or_default();
                if title.trim().is_empty() {
                    return Err(refuse(Code::Invalid, "create_work needs a title"));
                }
                let binding = p.input["binding"]
                    .as_str()
                    .unwrap_or(&caller.authority.binding)
                    .to_owned();
                // The caller's binding and the one named, as configured now.
                let (mine, named) = {
                    let k = self.inner.router.knowledge();
                    let k = k
                        .read()
                        .map_err(|_| refuse(Code::Internal, "internal error"))?;
                    let scope = k
                        .config
                        .as_ref()
                        .and_then(|(c, _)| c.scope(&caller.authority.scope_id));
                    let find = |name: &str| {
                        scope.and_then(|s| s.bindings.iter().find(|b| b["name"] == name).cloned())
                    };
                    (find(&caller.authority.binding), find(&binding))
                };
                let Some(named) = named else {
                    return Err(refuse(
                        Code::Invalid,
                        format!("the scope has no binding {binding:?}"),
                    ));
                };
                if let Some(why) =
                    create_work_refusal(&caller.authority.binding, mine.as_ref(), &binding, &named)
                {
                    tracing::warn!(OC_WORK_ID = %caller.authority.work_id, OC_EXECUTION_ID = %caller.authority.execution_id, %why, "toolbelt: create_work refused");
                    return Err(refuse(Code::Unauthorized, why));
                }
                let mut keys = strings(&p.input["keys"]);
                if keys.is_empty() {
                    let id = if p.request_id.is_empty() {
                        random_id()
                    } else {
                        p.request_id.clone()
                    };
                    keys.push(format!("agent:{}/{}", caller.authority.work_id, id));
                }
                let payload = json!({
                    "schema": "agent.work_requested.v1",
                    "data": {"title": wire::clip_line(title, 200), "binding": binding,
                             "context": p.input["context"], "requested_by": caller.authority.work_id},
                });
                let mut out = self
                    .emit(caller, WORK_REQUESTED, payload, keys.clone())
                    .await?;
                out["key"] = json!(keys[0]);
                Ok(out)
            }
            _ => self.operation(caller, p).await,
        }
    }

    async fn emit(
        &self,
        caller: &Caller,
        event_type: &str,
        payload: Value,
        keys: Vec<String>,
    ) -> Result<Value, RpcError> {
        let parent = self
            .last_event(&caller.authority.work_id)
            .await?
            .ok_or_else(|| refuse(Code::Invalid, "the Work has no event to derive from"))?;
        let payload = if payload.get("schema").is_some() {
            payload
        } else {
            json!({"schema": format!("{event_type}.v1"), "data": payload})
        };
        let answer = self
            .inner
            .bus
            .call(
                "store.event_accept_derived",
                &json!({"event": {
                    "scope_id": caller.authority.scope_id,
                    "type": event_type,
                    "source": format!("toolbelt/{}", caller.authority.scope_id),
                    "payload": payload,
                    "keys": keys,
                    "parent_id": parent,
                    "execution_id": caller.authority.execution_id,
                }}),
            )
            .await
            .map_err(|e| store_failed("store.event_accept_derived", e))?;
        Ok(json!({"event_id": answer["id"], "seq": answer["seq"]}))
    }

    /// The ID of the Work's latest event.
    async fn last_event(&self, work_id: &str) -> Result<Option<String>, RpcError> {
        let events = self.events(work_id).await?;
        Ok(events
            .last()
            .and_then(|e| e["id"].as_str())
            .map(str::to_owned))
    }

    /// The Work's events, the last [`CONTEXT_EVENTS`], in acceptance order.
    async fn events(&self, work_id: &str) -> Result<Vec<Value>, RpcError> {
        let mut out: Vec<Value> = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self
                .inner
                .bus
                .call(
                    "store.work_events",
                    &json!({"work_id": work_id, "after": after, "limit": 200}),
                )
                .await
                .map_err(|e| store_failed("store.work_events", e))?;
            let list = page["events"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                break;
            }
            for e in list {
                after = after.max(e["seq"].as_i64().unwrap_or(after));
                out.push(e);
                if out.len() > CONTEXT_EVENTS {
                    out.remove(0);
                }
            }
        }
        Ok(out)
    }

    async fn read_context(&self, caller: &Caller) -> Result<Value, RpcError> {
        let events = self.events(&caller.authority.work_id).await?;
        let w = &caller.work;
        Ok(json!({
            "work": {"id": w["id"], "scope": w["scope_id"], "kind": w["kind"], "state": w["state"],
                     "display": w["display"], "keys": w["keys"], "context": w["context"],
                     "binding": w["binding"]},
            "execution": {"id": caller.authority.execution_id, "attempt": caller.attempt,
                          "epoch": caller.authority.epoch},
            "events": events,
            "tools": tb::TOOLS,
            "operations": self.granted(&caller.binding).into_iter().map(|(_, g)| g.name).collect::<Vec<_>>(),
        }))
    }

    /// Merge `what` into the turn's declaration.
    async fn declare(&self, caller: &Caller, what: Value) -> Result<(), RpcError> {
        let key = format!("exec/{}", caller.authority.execution_id);
        let bus = &self.inner.bus;
        for _ in 0..5 {
            let got = bus
                .call(
                    "store.kv_get",
                    &json!({"owner": OWNER, "namespace": NAMESPACE, "key": key}),
                )
                .await
                .map_err(|e| store_failed("store.kv_get", e))?;
            let mut value = got.get("value").cloned().unwrap_or_else(|| json!({}));
            if let (Some(v), Some(w)) = (value.as_object_mut(), what.as_object()) {
                for (k, x) in w {
                    v.insert(k.clone(), x.clone());
                }
            }
            let check = match got["version"].as_str() {
                Some(version) => json!({"namespace": NAMESPACE, "key": key, "version": version}),
                None => json!({"namespace": NAMESPACE, "key": key, "absent": true}),
            };
            let put = bus
                .call(
                    "store.kv_commit",
                    &json!({"owner": OWNER, "checks": [check],
                            "puts": [{"namespace": NAMESPACE, "key": key, "value": value}]}),
                )
                .await;
            match put {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == Some(Code::Conflict.as_str()) => continue,
                Err(e) => return Err(store_failed("store.kv_commit", e)),
            }
        }
        Err(refuse(
            Code::Conflict,
            "the declaration changed meanwhile; try again",
        ))
    }

    /// `call`: an extension operation the binding grants.
    async fn operation(&self, caller: &Caller, p: &CallParams) -> Result<Value, RpcError> {
        let name = p.input["operation"].as_str().unwrap_or_default();
        let granted = self.granted(&caller.binding);
        let Some((extension, g)) = granted.iter().find(|(_, g)| g.name == name) else {
            return Err(refuse(
                Code::Unauthorized,
                format!("the binding grants no operation {name:?}"),
            ));
        };
        let input = p.input.get("input").cloned().unwrap_or(Value::Null);
        let params = json!({"operation": name, "request_id": p.request_id,
                            "authority": caller.authority, "input": input});
        let method = match g.kind.as_str() {
            "wait" => "operation.wait",
            "emit" => "operation.emit",
            _ => "operation.call",
        };
        let answer = self
            .inner
            .bus
            .call(
                "ext.call",
                &json!({"name": extension, "method": method, "params": params,
                        "timeout_ms": u64::try_from(OPERATION_TIMEOUT.as_millis()).unwrap_or(u64::MAX)}),
            )
            .await;
        let answer = match answer {
            Ok(a) => a,
            Err(CallError::Rpc(e)) => return Err(refusal(name, &e)),
            Err(e) => {
                return Err(refuse(
                    Code::Unavailable,
                    format!("{name}: {e}; retry with the same request_id"),
                ))
            }
        };
        match method {
            "operation.wait" => {
                let wait: WaitRequest = serde_json::from_value(answer["wait"].clone())
                    .map_err(|_| refuse(Code::Internal, "internal error"))?;
                let mut wait = wait;
                wait.description = wait.clipped_description();
                self.declare(caller, json!({ "wait": wait, "wait_owner": extension }))
                    .await?;
                Ok(json!({"wait": wait}))
            }
            "operation.emit" => {
                let ev = &answer["event"];
                let t = ev["type"].as_str().unwrap_or_default();
                if t == WORK_REQUESTED {
                    // Work is created through create_work alone, which holds the
                    // binding it names to the caller's confinement.
                    tracing::warn!(
                        operation = name,
                        "toolbelt: an operation emitted {WORK_REQUESTED}; refused"
                    );
                    return Err(refuse(
                        Code::Unauthorized,
                        format!("{name} may not emit {WORK_REQUESTED}: Work is created through create_work"),
                    ));
                }
                let out = self
                    .emit(caller, t, ev["payload"].clone(), strings(&ev["keys"]))
                    .await?;
                Ok(json!({"event": out, "output": answer["output"]}))
            }
            _ => Ok(answer["output"].clone()),
        }
    }
}

/// An extension's refusal as the agent sees it: its safe code, and the message the
/// operation meant for the agent (`data.agent_message`, made safe and bounded by
/// [`tb::agent_message`]) or else only the code. The refusal's own `message` (for
/// logs) never crosses.
fn refusal(operation: &str, e: &RpcError) -> RpcError {
    let code = e.app_code().unwrap_or("internal");
    let said = e
        .data
        .as_ref()
        .and_then(|d| d.get(tb::AGENT_MESSAGE_FIELD))
        .and_then(Value::as_str)
        .map(tb::agent_message)
        .filter(|m| !m.is_empty());
    let message = match said {
        Some(m) => format!("{operation}: {m}"),
        None => format!(
            "{operation} refused the call ({})",
            safe_code(code).as_str()
        ),
    };
    RpcError::new(safe_code(code), message)
}

/// Only the codes an agent may see; anything else is `internal`.
fn safe_code(code: &str) -> Code {
    match code {
        "invalid" => Code::Invalid,
        "unauthorized" => Code::Unauthorized,
        "not_found" => Code::NotFound,
        "conflict" => Code::Conflict,
        "unavailable" => Code::Unavailable,
        _ => Code::Internal,
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn random_id() -> String {
    let mut b = [0u8; 12];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    hex(&b)
}

/// The Wait a `wait` input asks for: the Work's own keys unless it names some; a
/// timeout as `due_at` or `timeout_s`; a timed Wait with no description is described
/// by its due time.
fn wait_from_input(input: &Value, work: &Value) -> Result<WaitRequest, RpcError> {
    let mut keys = strings(&input["keys"]);
    if keys.is_empty() {
        keys = strings(&work["keys"]);
    }
    let due_at = match (input["due_at"].as_str(), input["timeout_s"].as_u64()) {
        (Some(d), _) => {
            protocol::time::parse_rfc3339_ms(d)
                .ok_or_else(|| refuse(Code::Invalid, "due_at is not an RFC 3339 time"))?;
            d.to_owned()
        }
        (None, Some(s)) => {
            let s = i64::try_from(s.min(366 * 86_400)).unwrap_or(0);
            protocol::time::format_rfc3339_ms(protocol::time::now_ms() + s * 1000)
        }
        (None, None) => String::new(),
    };
    if keys.is_empty() && due_at.is_empty() {
        return Err(refuse(
            Code::Invalid,
            "a wait needs keys (the Work has none) or a timeout",
        ));
    }
    let mut description = input["description"].as_str().unwrap_or_default().to_owned();
    if description.is_empty() && !due_at.is_empty() {
        description = format!("until {due_at}");
    }
    let w = WaitRequest {
        keys,
        types: strings(&input["types"]),
        due_at,
        description,
        plan: Value::Null,
    };
    Ok(WaitRequest {
        description: w.clipped_description(),
        ..w
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_agent_message_bounded_and_never_the_log_message() {
        let mut e = RpcError::new(Code::NotFound, "internal detail for the log");
        let r = refusal("github.comment", &e);
        assert_eq!(r.app_code(), Some("not_found"));
        assert_eq!(r.message, "github.comment refused the call (not_found)");
        if let Some(d) = e.data.as_mut() {
            d[tb::AGENT_MESSAGE_FIELD] = json!(format!(
                "GitHub answered 404: Not Found Bearer s3cret {}",
                "x".repeat(900)
            ));
        }
        let r = refusal("github.comment", &e);
        assert!(
            r.message
                .starts_with("github.comment: GitHub answered 404: Not Found"),
            "{}",
            r.message
        );
        assert!(!r.message.contains("s3cret") && !r.message.contains("internal detail"));
        assert!(r.message.len() <= "github.comment: ".len() + tb::MAX_AGENT_MESSAGE_BYTES);
        // An unknown code is internal, its message still the agent's.
        let mut odd = RpcError::authored("quota_blown", "log");
        if let Some(d) = odd.data.as_mut() {
            d[tb::AGENT_MESSAGE_FIELD] = json!("try later");
        }
        let r = refusal("x.op", &odd);
        assert_eq!(r.app_code(), Some("internal"));
        assert_eq!(r.message, "x.op: try later");
    }

    #[test]
    fn hex_round_trips_and_refuses_odd_text() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn a_wait_defaults_to_the_work_keys_and_describes_its_due_time() {
        let work = json!({"keys": ["github:o/r#1"]});
        let w = wait_from_input(&json!({"timeout_s": 60}), &work).unwrap();
        assert_eq!(w.keys, vec!["github:o/r#1"]);
        assert!(w.description.starts_with("until "), "{}", w.description);
        assert!(wait_from_input(&json!({}), &json!({})).is_err());
        assert!(wait_from_input(&json!({"due_at": "tomorrow"}), &work).is_err());
    }
}
