//! The host side of the scenario: a launcher for the extension process (its own
//! process group, the protocol on its stdin and stdout) and the host methods the
//! scenario calls back.

use base64::Engine;
use protocol::{connect, BoxFuture, CallError, Handler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
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
    /// An artifact was committed with this many bytes, all in place.
    ArtifactCommitted { size: usize, intact: bool },
    /// Any other notification.
    Notification(String, Value),
}

#[derive(Default)]
struct Artifacts {
    next: u64,
    open: HashMap<String, Vec<u8>>,
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
                let mut a = lock(&self.artifacts);
                a.next += 1;
                let id = format!("art-{}", a.next);
                a.open.insert(id.clone(), Vec::new());
                Ok(json!({"artifact_id": id}))
            }
            "artifact.write" => {
                let id = params
                    .get("artifact_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let offset = params.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
                let data = params.get("data").and_then(Value::as_str).unwrap_or("");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map_err(|e| RpcError::invalid_params(format!("data: {e}")))?;
                if bytes.len() > protocol::conn::MAX_MESSAGE_BYTES / 64 {
                    return Err(RpcError::new(
                        protocol::Code::Invalid,
                        "chunk over the 256 KiB limit",
                    ));
                }
                let mut a = lock(&self.artifacts);
                let buf = a
                    .open
                    .get_mut(id)
                    .ok_or_else(|| RpcError::new(protocol::Code::NotFound, "no such artifact"))?;
                if offset != buf.len() {
                    return Err(RpcError::new(
                        protocol::Code::Conflict,
                        format!(
                            "write at {offset}, but the artifact has {} bytes",
                            buf.len()
                        ),
                    ));
                }
                buf.extend_from_slice(&bytes);
                Ok(json!({"size": buf.len()}))
            }
            "artifact.commit" => {
                let id = params
                    .get("artifact_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let buf = lock(&self.artifacts)
                    .open
                    .remove(id)
                    .ok_or_else(|| RpcError::new(protocol::Code::NotFound, "no such artifact"))?;
                let intact = buf.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8);
                let _ = self.events.send(HostEvent::ArtifactCommitted {
                    size: buf.len(),
                    intact,
                });
                Ok(json!({"size": buf.len()}))
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

impl Handler for ScenarioHost {
    fn call(&self, request: Request) -> BoxFuture<Result<Value, RpcError>> {
        let answer = self.serve(&request.method, request.params);
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
    let (tx, rx) = mpsc::unbounded_channel();
    let name = format!("extension {}", program.display());
    let peer = connect(stdout, stdin, ScenarioHost::new(tx), Options::named(name));
    Ok(Running {
        child,
        peer,
        events: rx,
    })
}
