//! The host side of the scenario: a launcher for the extension process (its own
//! process group, the protocol on its stdin and stdout) and the host methods the
//! scenario calls back.

use protocol::{
    b64, connect, wire, BoxFuture, CallError, Code, Handler, Options, Peer, Reply, Request,
    RpcError,
};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// What the host saw, reported to the test or benchmark as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum HostEvent {
    /// The extension reported that a cancellation reached its handler.
    CancelSeen(Value),
    /// The extension reported the host's answer to its push.
    PushAnswered(Value),
    /// The host served an `ingress.push` with this many events.
    Pushed(usize),
    /// An artifact was committed with these bytes.
    ArtifactCommitted(Arc<Vec<u8>>),
    /// Any other notification.
    Notification(String, Value),
}

#[derive(Default)]
struct Artifacts {
    next: u64,
    open: HashMap<String, Vec<u8>>,
}

fn decode<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    T::deserialize(params).map_err(RpcError::invalid_params)
}

fn encode<T: serde::Serialize>(value: T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(RpcError::unauthored)
}

/// The host methods the scenario calls.
pub struct ScenarioHost {
    events: mpsc::UnboundedSender<HostEvent>,
    artifacts: Mutex<Artifacts>,
}

fn lock(m: &Mutex<Artifacts>) -> std::sync::MutexGuard<'_, Artifacts> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ScenarioHost {
    /// A host reporting to `events`.
    pub fn new(events: mpsc::UnboundedSender<HostEvent>) -> Self {
        ScenarioHost {
            events,
            artifacts: Mutex::new(Artifacts::default()),
        }
    }

    fn serve(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "scenario.host_echo" => Ok(params),
            "ingress.push" => {
                let n = params
                    .get("events")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                let _ = self.events.send(HostEvent::Pushed(n));
                Ok(json!({"accepted": n}))
            }
            "artifact.create" => {
                let _: wire::ArtifactCreateParams = decode(params)?;
                let mut a = lock(&self.artifacts);
                a.next += 1;
                let id = format!("art-{}", a.next);
                a.open.insert(id.clone(), Vec::new());
                encode(wire::ArtifactCreateResult { artifact_id: id })
            }
            "artifact.commit" => {
                let p: wire::ArtifactCommitParams = decode(params)?;
                let buf = lock(&self.artifacts)
                    .open
                    .remove(&p.artifact_id)
                    .ok_or_else(|| RpcError::new(Code::NotFound, "no such artifact"))?;
                if p.size != 0 && p.size != buf.len() as u64 {
                    return Err(RpcError::new(
                        Code::Conflict,
                        format!("commit of {} bytes, but {} were written", p.size, buf.len()),
                    ));
                }
                let size = buf.len() as u64;
                let _ = self
                    .events
                    .send(HostEvent::ArtifactCommitted(Arc::new(buf)));
                encode(wire::ArtifactCommitResult {
                    artifact_id: p.artifact_id,
                    size,
                    digest: String::new(),
                })
            }
            "artifact.abort" => {
                let p: wire::ArtifactAbortParams = decode(params)?;
                lock(&self.artifacts).open.remove(&p.artifact_id);
                encode(wire::ArtifactAbortResult {})
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

/// `artifact.write`'s params as read: the chunk's base64 borrowed from the
/// message, decoded straight onto the end of the artifact.
#[derive(Deserialize)]
struct WriteChunk<'a> {
    #[serde(borrow)]
    artifact_id: Cow<'a, str>,
    #[serde(default)]
    offset: u64,
    #[serde(borrow)]
    data: b64::Text<'a>,
}

impl ScenarioHost {
    /// `artifact.write`, its params decoded straight from the wire (not through a
    /// `Value`), the chunk checked whole before any of it is appended.
    fn write(&self, p: WriteChunk<'_>) -> Result<Reply, RpcError> {
        let len = p
            .data
            .decoded_len()
            .map_err(|e| RpcError::invalid_params(format!("invalid base64: {e}")))?;
        if len > wire::MAX_CHUNK_BYTES {
            return Err(RpcError::new(
                Code::Invalid,
                format!("a chunk of {len} bytes is over the 256 KiB limit"),
            ));
        }
        let mut a = lock(&self.artifacts);
        let buf = a
            .open
            .get_mut(p.artifact_id.as_ref())
            .ok_or_else(|| RpcError::new(Code::NotFound, "no such artifact"))?;
        if p.offset != buf.len() as u64 {
            return Err(RpcError::new(
                Code::Conflict,
                format!(
                    "write at {}, but the artifact has {} bytes",
                    p.offset,
                    buf.len()
                ),
            ));
        }
        p.data
            .decode_append(buf)
            .map_err(|e| RpcError::invalid_params(format!("invalid base64: {e}")))?;
        protocol::reply(&wire::ArtifactWriteResult {
            size: buf.len() as u64,
        })
    }
}

impl Handler for ScenarioHost {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let answer = if request.method == "artifact.write" {
            serde_json::from_str(request.params.get())
                .map_err(RpcError::invalid_params)
                .and_then(|p| self.write(p))
        } else {
            request
                .params_value()
                .and_then(|params| self.serve(&request.method, params))
                .and_then(|v| protocol::reply(&v))
        };
        Box::pin(async move { answer })
    }

    fn notify(&self, _peer: &Peer, method: &str, params: Value) {
        let event = match method {
            "scenario.cancel_seen" => HostEvent::CancelSeen(params),
            "scenario.push_answered" => HostEvent::PushAnswered(params),
            other => HostEvent::Notification(other.to_string(), params),
        };
        let _ = self.events.send(event);
    }
}

/// A running extension process and the connection to it.
pub struct Running {
    /// The process (its own process group).
    pub child: Child,
    /// The connection over its stdin and stdout.
    pub peer: Peer,
    /// What the host saw.
    pub events: mpsc::UnboundedReceiver<HostEvent>,
}

impl Running {
    /// The process id (also its process group id).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// `initialize` offering these protocol versions.
    pub async fn initialize(&self, versions: &[u32]) -> Result<Value, CallError> {
        self.peer
            .call(
                "initialize",
                &json!({
                    "protocol_versions": versions,
                    "host": {"name": "scenario-host", "version": env!("CARGO_PKG_VERSION")},
                    "state_dir": std::env::temp_dir(),
                    "executor_dirs": {},
                }),
            )
            .await
    }

    /// SIGKILL the whole process group.
    pub fn kill_group(&self) {
        if let Some(pid) = self.pid() {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// The capacity asked for the protocol's pipes (the kernel default is 64 KiB).
pub const PIPE_BYTES: i32 = 1024 * 1024;

/// Start `program args…` as an extension: its own process group, the protocol on
/// stdin and stdout, stderr inherited (the scenario's diagnostics).
pub fn spawn(program: &Path, args: &[&str]) -> std::io::Result<Running> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
    // Wider pipes: a 16 MiB message crosses in fewer wake-ups.
    for fd in [stdin.as_fd(), stdout.as_fd()] {
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let name = format!("extension {}", program.display());
    let peer = connect(stdout, stdin, ScenarioHost::new(tx), Options::named(name));
    Ok(Running {
        child,
        peer,
        events: rx,
    })
}
