//! Write an Open Conduit extension in Rust.
//!
//! ```no_run
//! use serde_json::Value;
//! let ext = sdk::Extension::new(include_str!("../../extensions/scenario/open-conduit-extension.json"))
//!     .expect("a valid manifest")
//!     .method("scenario.echo", |_ctx, params: Value| async move { Ok(params) });
//! std::process::exit(sdk::run(ext));
//! ```
//!
//! [`run`] serves the extension over stdio. Before it serves, it moves the
//! process's stdout (fd 1) to stderr and keeps a private, close-on-exec descriptor
//! for the protocol, so a stray `println!` (or a child process writing to its
//! inherited stdout) cannot corrupt the stream; fd 0 likewise becomes `/dev/null`,
//! so no child can read the protocol's input. It answers `initialize` (the highest
//! common protocol version, and the manifest), refuses every other method before
//! it, and returns when stdin reaches EOF, so a host that dies never leaves the
//! extension serving nobody.
//!
//! After it has answered `shutdown` (the spec's Lifecycle step 6), every new
//! request is answered `shutting_down`, the requests in flight are left to finish
//! for a grace period ([`SHUTDOWN_GRACE`], or [`Extension::shutdown_grace`]) and
//! then cancelled (each answered -32800, its handler's future dropped), and once
//! none is left the connection is closed and serving returns, so the process
//! exits by itself even while the host keeps stdin open.
//!
//! It also serves `configure`: when the host's `kv.stored` is older than
//! `kv.declared` (the manifest's `kv_version`), it runs the extension's
//! migration ([`Extension::on_migrate`]) first, then its configure handler
//! ([`Extension::on_configure`], else `{}`). A failed migration fails configure,
//! so the host records nothing and the migration runs again at the next start:
//! it must be idempotent (precondition-guarded `kv.commit` batches).

pub mod agent;
pub mod config;
pub mod detached;
pub mod dirs;
pub mod entries;
pub mod gitcred;
pub mod hooks;
pub mod link;
pub mod live;
pub mod nofollow;
pub mod package;
pub mod playbooks;
/// What `/proc` shows of processes: stat lines, group and session members, the
/// wrapper's identity, the session/group trust checks of [`detached::Launch`].
pub mod procs;
pub mod replay;
pub mod route;
pub mod runs;
pub mod sandbox;
pub mod secrets;
pub mod segments;
pub mod signals;
pub mod story;
pub mod tracker;
pub mod tunnel;
pub mod workspace;
pub mod wrapper;

use protocol::{
    connect_arc, BoxFuture, CallError, CancelToken, Code, Handler, Options, Peer, Reply, Request,
    RpcError,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use protocol;
use protocol::wire;

type Dyn = Arc<dyn Fn(Ctx, Request) -> BoxFuture<Result<Reply, RpcError>> + Send + Sync>;
type Notif = Arc<dyn Fn(Host, &str, Value) + Send + Sync>;
type Migrate = Arc<dyn Fn(Ctx, u32, u32) -> BoxFuture<Result<(), RpcError>> + Send + Sync>;
type Configure = Arc<
    dyn Fn(Ctx, wire::ConfigureParams) -> BoxFuture<Result<wire::ConfigureResult, RpcError>>
        + Send
        + Sync,
>;

/// What a handler gets besides its params.
#[derive(Clone)]
pub struct Ctx {
    /// Calls to the host.
    pub host: Host,
    /// Fires when the host cancels this request (the handler's future is dropped
    /// right after; clean up in `Drop`).
    pub cancel: CancelToken,
}

/// The host, as the extension calls it. Every call is bound by the host to the
/// identity it started this process with.
#[derive(Clone, Debug)]
pub struct Host {
    peer: Peer,
}

impl Host {
    /// Call a host method with raw JSON.
    pub async fn call(&self, method: &str, params: &Value) -> Result<Value, CallError> {
        self.peer.call(method, params).await
    }

    /// Call a host method and decode its answer.
    pub async fn call_as<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<T, CallError> {
        self.peer.call_as(method, params).await
    }

    /// A typed call to the host (`kv.get`, `kv.commit`, `state.events`,
    /// `event.accept`, `secret.resolve`, `timer.arm`, `ingress.deliver`, …).
    pub async fn call_typed<C: protocol::wire::Call>(
        &self,
        params: &C,
    ) -> Result<C::Result, CallError> {
        self.peer.call_typed(params).await
    }

    /// Read one KV key of the extension's own namespace.
    pub async fn kv_get(&self, key: &str) -> Result<wire::KvGetResult, CallError> {
        self.call_typed(&wire::KvGetParams {
            key: key.to_string(),
            ..Default::default()
        })
        .await
    }

    /// Apply checks, puts, deletes and emissions as one atomic unit (`conflict` when
    /// a check fails: re-read and retry).
    pub async fn kv_commit(
        &self,
        batch: &wire::KvCommitParams,
    ) -> Result<wire::KvCommitResult, CallError> {
        self.call_typed(batch).await
    }

    /// Resolve secrets of a connection bound to the extension.
    pub async fn secret_resolve(
        &self,
        params: &wire::SecretResolveParams,
    ) -> Result<wire::SecretResolveResult, CallError> {
        self.call_typed(params).await
    }

    /// Upload an artifact: create it, write it in acknowledged chunks of at most
    /// 256 KiB (each acknowledged before the next), and commit it.
    pub async fn upload_artifact(
        &self,
        create: &wire::ArtifactCreateParams,
        bytes: &[u8],
    ) -> Result<wire::ArtifactCommitResult, CallError> {
        let created = self.call_typed(create).await?;
        let id = created.artifact_id;
        let mut offset = 0u64;
        let method = <wire::ArtifactWriteParams as wire::Call>::METHOD;
        // `artifact.write`'s request for the chunk at `offset`, encoded borrowing it.
        let prepare = |offset: u64, chunk: &[u8]| {
            let write = WriteChunk {
                artifact_id: &id,
                offset,
                data: chunk,
            };
            (
                self.peer.prepare(method, &write),
                offset + chunk.len() as u64,
            )
        };
        let mut pieces = bytes.chunks(wire::MAX_CHUNK_BYTES);
        let mut next = pieces.next().map(|chunk| prepare(0, chunk));
        while let Some((request, end)) = next.take() {
            // Each chunk is sent once the one before is acknowledged; the next is
            // encoded while the host serves this one (after a yield, so the
            // connection's writer sends this one first).
            let call = async {
                let answer = self
                    .peer
                    .call_prepared(request?, protocol::CallOptions::default())
                    .await?;
                serde_json::from_str::<wire::ArtifactWriteResult>(answer.get()).map_err(|e| {
                    CallError::Codec(format!("answer to {method} does not decode: {e}"))
                })
            };
            let ahead = async {
                tokio::task::yield_now().await;
                pieces.next().map(|chunk| prepare(end, chunk))
            };
            let (written, ahead) = tokio::join!(call, ahead);
            next = ahead;
            let acked = match written {
                Ok(ack) if ack.size == end => Ok(()),
                Ok(ack) => Err(CallError::Rpc(RpcError::new(
                    Code::Conflict,
                    format!("chunk ending at {end} acknowledged at {}", ack.size),
                ))),
                Err(e) => Err(e),
            };
            if let Err(e) = acked {
                let abort = wire::ArtifactAbortParams {
                    artifact_id: id.clone(),
                };
                let _ = self.call_typed(&abort).await;
                return Err(e);
            }
            offset = end;
        }
        self.call_typed(&wire::ArtifactCommitParams {
            artifact_id: id,
            size: offset,
        })
        .await
    }

    /// Send the host a notification.
    pub fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<(), CallError> {
        self.peer.notify(method, params)
    }

    /// The underlying connection.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }
}

/// [`wire::ArtifactWriteParams`] as sent, borrowing its chunk (the tests check
/// both encode alike).
#[derive(Serialize)]
struct WriteChunk<'a> {
    artifact_id: &'a str,
    offset: u64,
    #[serde(with = "protocol::b64")]
    data: &'a [u8],
}

/// Why an [`Extension`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// The embedded manifest is not usable.
    #[error("the extension's manifest: {0}")]
    Manifest(String),
    /// A handler for a method this extension may not serve.
    #[error("cannot serve {method}: {why}")]
    Method {
        /// The method.
        method: String,
        /// Why not.
        why: String,
    },
    /// Starting to serve failed (descriptors, runtime).
    #[error("cannot serve over stdio: {0}")]
    Io(#[from] std::io::Error),
}

/// An extension: its manifest and its handlers.
pub struct Extension {
    name: String,
    parsed: protocol::manifest::Manifest,
    manifest: Value,
    versions: Vec<u32>,
    methods: HashMap<String, Dyn>,
    notifications: Option<Notif>,
    migrate: Option<Migrate>,
    configure: Option<Configure>,
    initialize: Option<Initialize>,
    shutdown_grace: Duration,
    errors: Vec<SdkError>,
}

type Initialize = Arc<dyn Fn(&Value) + Send + Sync>;

/// How long the requests in flight when `shutdown` is answered may run on before
/// they are cancelled: three seconds, under the host's five-second grace before
/// it signals the process.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// How long a closed connection may take to write what it has queued.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

impl Extension {
    /// An extension with this manifest (the text of its
    /// `open-conduit-extension.json`, usually `include_str!`).
    pub fn new(manifest_json: &str) -> Result<Extension, SdkError> {
        let parsed = protocol::manifest::parse_manifest(manifest_json.as_bytes())
            .map_err(|e| SdkError::Manifest(e.to_string()))?;
        let manifest: Value =
            serde_json::from_str(manifest_json).map_err(|e| SdkError::Manifest(e.to_string()))?;
        Ok(Extension {
            name: parsed.name.clone(),
            versions: parsed.protocol.clone(),
            parsed,
            manifest,
            methods: HashMap::new(),
            notifications: None,
            migrate: None,
            configure: None,
            initialize: None,
            shutdown_grace: SHUTDOWN_GRACE,
            errors: Vec::new(),
        })
    }

    /// What was wrong with the handlers given so far (serving refuses to start
    /// while any is).
    pub fn errors(&self) -> &[SdkError] {
        &self.errors
    }

    /// The manifest's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Serve `method` with a typed handler: its params decode into `P` (else the
    /// call is answered invalid params) and its result encodes from `R`.
    pub fn method<P, R, F, Fut>(mut self, method: &str, f: F) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        F: Fn(Ctx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        if let Err(why) = self.may_serve(method) {
            self.errors.push(SdkError::Method {
                method: method.into(),
                why,
            });
            return self;
        }
        let f = Arc::new(f);
        let erased: Dyn = Arc::new(move |ctx: Ctx, request: Request| {
            let f = f.clone();
            let span = story::span(&request.method, request.params.get());
            Box::pin(tracing::Instrument::instrument(
                async move {
                    let p = request.params::<P>()?;
                    let r = f(ctx, p).await?;
                    protocol::reply(&r)
                },
                span,
            ))
        });
        self.methods.insert(method.to_string(), erased);
        self
    }

    /// Serve a host-to-extension method of the catalogue with its wire types.
    pub fn on<C, F, Fut>(self, f: F) -> Self
    where
        C: protocol::wire::Call + Send + 'static,
        C::Result: Send + 'static,
        F: Fn(Ctx, C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C::Result, RpcError>> + Send + 'static,
    {
        self.method(C::METHOD, f)
    }

    /// Whether this extension may serve `method`: a host-to-extension method of
    /// the catalogue that its manifest enables, or a method of its own, named
    /// `<name>.…`, that the catalogue does not take.
    fn may_serve(&self, method: &str) -> Result<(), String> {
        use protocol::catalogue::{self, Direction};
        if matches!(method, "initialize" | "shutdown") {
            return Err("the SDK serves it".into());
        }
        match catalogue::method(method) {
            Some(m) if m.direction == Direction::ExtensionToHost => {
                Err("it is an extension-to-host method: the host serves it".into())
            }
            Some(_) if !self.parsed.enables(method) => Err(format!(
                "the manifest of `{}` does not declare the surface that enables it",
                self.name
            )),
            Some(_) => Ok(()),
            None if method
                .strip_prefix(self.name.as_str())
                .is_some_and(|rest| rest.starts_with('.')) =>
            {
                Ok(())
            }
            None => Err(format!(
                "it is not in the method catalogue and not named under `{}.`",
                self.name
            )),
        }
    }

    /// Migrate the extension's KV from layout `from` (what the host recorded) to
    /// `to` (the manifest's `kv_version`). Run before configure whenever
    /// `from < to`; it must be idempotent (a crash midway runs it again), so use
    /// precondition-guarded `kv.commit` batches and leave what is already
    /// migrated alone. An error fails configure.
    pub fn on_migrate<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Ctx, u32, u32) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), RpcError>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.migrate = Some(Arc::new(move |ctx, from, to| {
            let f = f.clone();
            Box::pin(async move { f(ctx, from, to).await })
        }));
        self
    }

    /// Serve `configure` (after any migration). Without it, configure answers
    /// an empty [`wire::ConfigureResult`].
    pub fn on_configure<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Ctx, wire::ConfigureParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<wire::ConfigureResult, RpcError>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.configure = Some(Arc::new(move |ctx, params| {
            let f = f.clone();
            Box::pin(async move { f(ctx, params).await })
        }));
        self
    }

    /// See `initialize`'s params (the directories, the host) before it is answered:
    /// no other method runs before this hook has returned. The SDK answers
    /// `initialize` itself.
    pub fn on_initialize<F>(mut self, f: F) -> Self
    where
        F: Fn(&Value) + Send + Sync + 'static,
    {
        self.initialize = Some(Arc::new(f));
        self
    }

    /// How long requests in flight when `shutdown` is answered may run on before
    /// they are cancelled ([`SHUTDOWN_GRACE`] unless set). Either way the
    /// extension stops serving once none is left.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Receive the host's notifications (other than `$/cancel`).
    pub fn on_notification<F>(mut self, f: F) -> Self
    where
        F: Fn(Host, &str, Value) + Send + Sync + 'static,
    {
        self.notifications = Some(Arc::new(f));
        self
    }
}

const STARTING: u8 = 0;
const READY: u8 = 1;
const SHUTTING_DOWN: u8 = 2;

struct Served {
    ext: Extension,
    state: AtomicU8,
    /// Set once `shutdown` has been answered: serving winds down.
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Handler for Served {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let method = request.method.as_str();
        let state = self.state.load(Ordering::SeqCst);
        if method == "initialize" {
            let answer = self.initialize(&request).and_then(|v| protocol::reply(&v));
            return Box::pin(async move { answer });
        }
        if state == STARTING {
            let e = RpcError::new(
                Code::Invalid,
                format!("{method} refused: initialize has not succeeded yet"),
            );
            return Box::pin(async move { Err(e) });
        }
        if state == SHUTTING_DOWN {
            let e = RpcError::new(
                Code::ShuttingDown,
                format!("{method} refused: shutting down"),
            );
            return Box::pin(async move { Err(e) });
        }
        if method == "shutdown" {
            self.state.store(SHUTTING_DOWN, Ordering::SeqCst);
            // The drain waits for this request's answer too, as one in flight.
            self.shutdown.send_replace(true);
            return Box::pin(async move { protocol::reply(&json!({})) });
        }
        let ctx = Ctx {
            host: Host {
                peer: request.peer.clone(),
            },
            cancel: request.cancel.clone(),
        };
        if method == "configure" {
            let params = request.params::<wire::ConfigureParams>();
            let migrate = self.ext.migrate.clone();
            let configure = self.ext.configure.clone();
            return Box::pin(async move {
                let params = params?;
                let kv = params.kv;
                if kv.needs_migration() {
                    if let Some(migrate) = migrate {
                        migrate(ctx.clone(), kv.stored, kv.declared)
                            .await
                            .map_err(|mut e| {
                                e.message = format!(
                                    "migrating the KV layout {} to {}: {}",
                                    kv.stored, kv.declared, e.message
                                );
                                e
                            })?;
                    }
                }
                let result = match configure {
                    Some(configure) => configure(ctx, params).await?,
                    None => wire::ConfigureResult::default(),
                };
                protocol::reply(&result)
            });
        }
        let Some(handler) = self.ext.methods.get(method) else {
            let e = RpcError::method_not_found(method);
            return Box::pin(async move { Err(e) });
        };
        handler(ctx, request)
    }

    fn notify(&self, peer: &Peer, method: &str, params: Value) {
        if let Some(f) = &self.ext.notifications {
            f(Host { peer: peer.clone() }, method, params);
        }
    }
}

impl Served {
    fn initialize(&self, request: &Request) -> Result<Value, RpcError> {
        let params = request.params_value()?;
        let offered: Vec<u32> = params
            .get("protocol_versions")
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_u64)
                    .filter_map(|n| u32::try_from(n).ok())
                    .collect()
            })
            .ok_or_else(|| RpcError::invalid_params("initialize needs protocol_versions"))?;
        let ours: Vec<u32> = self
            .ext
            .versions
            .iter()
            .copied()
            .filter(|v| protocol::version::PROTOCOL_VERSIONS.contains(v))
            .collect();
        let Some(version) = protocol::version::negotiate(&ours, &offered) else {
            return Err(protocol::version::unsupported(&ours, &offered));
        };
        if let Some(hook) = &self.ext.initialize {
            hook(&params);
        }
        let host_reads = params.get("max_message_bytes").and_then(Value::as_u64);
        request
            .peer
            .set_max_send_bytes(protocol::agreed_message_bytes(host_reads));
        self.state.store(READY, Ordering::SeqCst);
        Ok(json!({
            "protocol_version": version,
            "manifest": self.ext.manifest,
            "max_message_bytes": protocol::LARGE_MESSAGE_BYTES,
        }))
    }
}

/// Move the protocol off fds 0 and 1: returns private close-on-exec copies of
/// stdin and stdout, and leaves fd 0 reading `/dev/null` and fd 1 writing to
/// stderr.
pub fn take_stdio() -> Result<(OwnedFd, OwnedFd), SdkError> {
    let input = std::io::stdin().as_fd().try_clone_to_owned()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned()?;
    nix::unistd::dup2_stdout(std::io::stderr().as_fd()).map_err(std::io::Error::from)?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(null.as_fd()).map_err(std::io::Error::from)?;
    Ok((input, output))
}

/// Serve `ext` on the connection made of these two descriptors until the host
/// closes it, or until the requests in flight after `shutdown` have finished or
/// been cancelled (see the crate's documentation). Returns why the connection
/// ended: [`protocol::CloseReason::Local`] after a shutdown.
pub async fn serve_fds(
    mut ext: Extension,
    input: OwnedFd,
    output: OwnedFd,
) -> Result<Arc<protocol::CloseReason>, SdkError> {
    if !ext.errors.is_empty() {
        return Err(ext.errors.remove(0));
    }
    let reader = stream_reader(input)?;
    let writer = stream_writer(output)?;
    let name = ext.name.clone();
    let grace = ext.shutdown_grace;
    let (shutdown, mut asked) = tokio::sync::watch::channel(false);
    let served = Arc::new(Served {
        ext,
        state: AtomicU8::new(STARTING),
        shutdown,
    });
    let peer = connect_arc(
        reader,
        writer,
        served,
        // Reads up to 64 MiB (and says so in the initialize answer), so a webhook
        // body up to ingressd's 25 MiB reaches it; sends more than 16 MiB only to a
        // host whose initialize says it reads more.
        Options::negotiated(format!("host of {name}")),
    );
    tokio::select! {
        reason = peer.finished(FLUSH_LIMIT) => return Ok(reason),
        Ok(_) = asked.wait_for(|asked| *asked) => {}
    }
    drain(&peer, &name, grace).await;
    peer.close("shut down");
    Ok(peer.finished(FLUSH_LIMIT).await)
}

/// After `shutdown`: let the requests in flight finish within `grace`, then cancel
/// the rest and wait (as long again at most) for their answers to be queued.
async fn drain(peer: &Peer, name: &str, grace: Duration) {
    if tokio::time::timeout(grace, peer.idle()).await.is_ok() {
        return;
    }
    eprintln!(
        "{name}: {} request(s) still in flight {grace:?} after shutdown; cancelling them",
        peer.serving()
    );
    peer.cancel_serving();
    if tokio::time::timeout(grace, peer.idle()).await.is_err() {
        eprintln!(
            "{name}: {} cancelled request(s) still unanswered; closing anyway",
            peer.serving()
        );
    }
}

type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

fn stream_reader(fd: OwnedFd) -> Result<Reader, SdkError> {
    let file = std::fs::File::from(fd);
    let kind = file.metadata()?.file_type();
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        return Ok(Box::new(tokio::net::unix::pipe::Receiver::from_file(file)?));
    }
    if kind.is_socket() {
        let s = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        s.set_nonblocking(true)?;
        return Ok(Box::new(tokio::net::UnixStream::from_std(s)?));
    }
    Ok(Box::new(tokio::fs::File::from_std(file)))
}

fn stream_writer(fd: OwnedFd) -> Result<Writer, SdkError> {
    let file = std::fs::File::from(fd);
    let kind = file.metadata()?.file_type();
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        return Ok(Box::new(tokio::net::unix::pipe::Sender::from_file(file)?));
    }
    if kind.is_socket() {
        let s = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        s.set_nonblocking(true)?;
        return Ok(Box::new(tokio::net::UnixStream::from_std(s)?));
    }
    Ok(Box::new(tokio::fs::File::from_std(file)))
}

/// The package's `tracing` events as lines on stderr (info and above, no colour),
/// which extrunner keeps in the package's log and the journal with
/// `OC_EXTENSION=<name>`. A subscriber the package installed first is kept.
fn log_to_stderr() {
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Serve `ext` over this process's stdio on a single-threaded runtime until stdin
/// reaches EOF, the host closes the connection, or the extension has wound down
/// after `shutdown`. Returns the exit status: 0 when the host closed the
/// connection or after a shutdown, 1 when serving could not start or the
/// connection broke.
pub fn run(ext: Extension) -> i32 {
    log_to_stderr();
    let (input, output) = match take_stdio() {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("{}: {e}", ext.name);
            return 1;
        }
    };
    let name = ext.name.clone();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start a runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(serve_fds(ext, input, output)) {
        Ok(reason) => match &*reason {
            protocol::CloseReason::PeerClosed | protocol::CloseReason::Local(_) => 0,
            other => {
                eprintln!("{name}: {other}");
                1
            }
        },
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    }
}

#[cfg(test)]
mod write_chunk_tests {
    use super::*;

    #[test]
    fn a_borrowed_chunk_is_sent_as_artifact_write_params_are() {
        let data: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let owned = wire::ArtifactWriteParams {
            artifact_id: "art-\"1\"".into(),
            offset: 7,
            data: data.clone(),
        };
        let borrowed = WriteChunk {
            artifact_id: &owned.artifact_id,
            offset: 7,
            data: &data,
        };
        let a = serde_json::to_string(&owned).expect("owned");
        let b = serde_json::to_string(&borrowed).expect("borrowed");
        assert_eq!(a, b);
        let back: wire::ArtifactWriteParams = serde_json::from_str(&b).expect("decode");
        assert_eq!(back, owned);
    }
}
