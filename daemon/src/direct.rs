//! Direct connections: a daemon's calls to another daemon without the broker's hop.
//!
//! Every call through the broker crosses it twice (request and answer), and the
//! broker only passes the message on. On the suite's hot path (ingressd →
//! extrunner's `ext.webhook` → storaged's `store.*`) that is four crossings a batch,
//! each a wake-up of the broker and a copy of the message. So a service that joined
//! the bus also listens on a socket of its own beside the bus socket,
//! `<bus dir>/direct/<service>.sock`, with a link `<prefix>.sock` for each prefix it
//! owns, and a daemon's bus client (a service's, not the CLI's) calling
//! `prefix.method` uses that socket when it can:
//!
//! - **Who may connect**: the directory is made `0700` and the socket `0600`, and
//!   each connection is admitted by `SO_PEERCRED` only when it comes from root or
//!   the daemon's own user (the suite's service user). The CLI always goes through
//!   the broker, as everyone else does.
//! - **When it is used**: a client connects in the background the first time it
//!   calls a prefix, and meanwhile (and whenever the direct connection is down, or
//!   the socket is missing or refuses) the call goes through the broker. A missing
//!   or refusing socket is tried again after [`RETRY`]. Nothing waits for a direct
//!   connection.
//! - **When it breaks**: a call in flight on a direct connection that closes (the
//!   service restarted) fails `unavailable`, exactly as the broker answers a call
//!   whose owner's connection dropped; later calls go through the broker, which
//!   waits for the owner to register again, until the direct connection is back.
//! - Notifications, subscriptions and `bus.*` calls always go through the broker.
//!
//! `OPEN_CONDUIT_DIRECT=0` turns direct connections off (neither served nor used).

use protocol::{CallError, Code, Handler, NoHandler, Options, Peer, RpcError};
use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UnixListener;

/// The variable that turns direct connections off (`0`).
pub const DIRECT_ENV: &str = "OPEN_CONDUIT_DIRECT";

/// How long a client waits before trying a missing or refusing socket again.
pub const RETRY: Duration = Duration::from_secs(1);

/// The directory of direct sockets for the bus at `bus_socket`: `direct/` beside it;
/// `None` when [`DIRECT_ENV`] is `0`.
pub fn dir_for(bus_socket: &Path) -> Option<PathBuf> {
    if std::env::var(DIRECT_ENV).is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    Some(bus_socket.parent()?.join("direct"))
}

/// The prefix a call of `method` is routed by, when it may go direct: never `bus.*`
/// (the broker's own), never a name that could leave the directory.
fn prefix_of(method: &str) -> Option<&str> {
    let (prefix, _) = method.split_once('.')?;
    (plain(prefix) && prefix != "bus").then_some(prefix)
}

/// Whether `name` may name a socket in the directory: letters, digits, `_`, `-`.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether a peer of `uid` may use this daemon's direct socket: root or this
/// daemon's own user.
pub fn admits(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// A service's direct socket, served while this lives; dropping it (the service
/// left the bus) stops accepting, closes the connections it accepted and removes
/// the socket and its links if they are still this server's.
pub struct Server {
    accept: tokio::task::AbortHandle,
    accepted: Arc<Mutex<Vec<Peer>>>,
    /// The socket's path and inode, then each link's path.
    socket: (PathBuf, u64),
    links: Vec<PathBuf>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("socket", &self.socket.0)
            .finish()
    }
}

impl Server {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.socket.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
        for peer in lock(&self.accepted).drain(..) {
            peer.close("the service left the bus");
        }
        let (path, ino) = &self.socket;
        // Another instance may have bound the path since: leave its socket alone.
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == *ino) {
            // The links first: they are known as this server's through the socket.
            for link in &self.links {
                if std::fs::metadata(link).is_ok_and(|m| m.ino() == *ino) {
                    let _ = std::fs::remove_file(link);
                }
            }
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Serve `handler` on `<dir>/<service>.sock`, linked as `<prefix>.sock` for each of
/// `prefixes`. Must be called within a tokio runtime. `Err` says why not (the
/// directory cannot be made or written, say under a unit that may not write it):
/// the service is then reached through the broker alone.
pub fn serve(
    dir: &Path,
    service: &str,
    prefixes: &[String],
    handler: Arc<dyn Handler>,
    options: Options,
) -> Result<Server, String> {
    if !plain(service) || service == "bus" {
        return Err(format!("`{service}` is not a plain service name"));
    }
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("make {}: {e}", dir.display()))?;
    }
    let name = format!("{service}.sock");
    let path = dir.join(&name);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("remove the old {}: {e}", path.display())),
    }
    let listener =
        UnixListener::bind(&path).map_err(|e| format!("bind {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    let ino = std::fs::symlink_metadata(&path)
        .map_err(|e| format!("stat {}: {e}", path.display()))?
        .ino();
    let mut links = Vec::new();
    for prefix in prefixes {
        if prefix == service || !plain(prefix) || prefix == "bus" {
            continue;
        }
        let link = dir.join(format!("{prefix}.sock"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&name, &link)
            .map_err(|e| format!("link {}: {e}", link.display()))?;
        links.push(link);
    }
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let accept =
        tokio::spawn(accept_loop(listener, handler, options, accepted.clone())).abort_handle();
    Ok(Server {
        accept,
        accepted,
        socket: (path, ino),
        links,
    })
}

async fn accept_loop(
    listener: UnixListener,
    handler: Arc<dyn Handler>,
    options: Options,
    accepted: Arc<Mutex<Vec<Peer>>>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, say: the broker still carries every call.
                tracing::warn!(error = %e, "direct socket: accept failed");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let uid = match stream.peer_cred() {
            Ok(c) => c.uid(),
            Err(e) => {
                tracing::warn!(error = %e, "refused a direct connection: no credentials");
                continue;
            }
        };
        if !admits(uid) {
            tracing::warn!(
                uid,
                "refused a direct connection: neither root nor this daemon's user"
            );
            continue;
        }
        match crate::sock::split(stream) {
            Ok((r, w)) => {
                let peer = protocol::connect_arc(r, w, handler.clone(), options.clone());
                let mut all = lock(&accepted);
                all.retain(|p| !p.is_closed());
                all.push(peer);
            }
            Err(e) => tracing::warn!(error = %e, "refused a direct connection"),
        }
    }
}

enum Slot {
    Up(Peer),
    /// Not connected: try again from `retry_at`, unless an attempt is under way.
    Down {
        retry_at: Instant,
        trying: bool,
    },
}

/// A bus client's direct connections, one per prefix.
pub struct Client {
    dir: PathBuf,
    name: String,
    slots: Mutex<HashMap<String, Slot>>,
}

impl Client {
    /// Direct connections to the sockets in `dir`; `name` names them in logs.
    pub fn new(dir: PathBuf, name: &str) -> Arc<Client> {
        Arc::new(Client {
            dir,
            name: name.to_string(),
            slots: Mutex::default(),
        })
    }

    /// The direct connection for a call of `method`, when one is up; otherwise
    /// `None` (the call goes through the broker) and, when it is time, an attempt
    /// to connect starts in the background.
    pub fn peer(self: &Arc<Self>, method: &str) -> Option<Peer> {
        let prefix = prefix_of(method)?;
        let mut slots = lock(&self.slots);
        let now = Instant::now();
        let slot = slots.entry(prefix.to_string()).or_insert(Slot::Down {
            retry_at: now,
            trying: false,
        });
        match slot {
            Slot::Up(p) if !p.is_closed() => return Some(p.clone()),
            Slot::Up(_) => {
                tracing::info!(
                    prefix,
                    "the direct connection closed: calls go through the broker until it is back"
                );
                *slot = Slot::Down {
                    retry_at: now + RETRY,
                    trying: false,
                };
            }
            Slot::Down { retry_at, trying } => {
                if !*trying && now >= *retry_at {
                    *trying = true;
                    tokio::spawn(connect(self.clone(), prefix.to_string()));
                }
            }
        }
        None
    }
}

async fn connect(client: Arc<Client>, prefix: String) {
    let path = client.dir.join(format!("{prefix}.sock"));
    let made = match tokio::net::UnixStream::connect(&path).await {
        Ok(stream) => crate::sock::split(stream).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let slot = match made {
        Ok((r, w)) => {
            let options = Options::large(format!("{} (direct to {prefix})", client.name));
            tracing::debug!(prefix, path = %path.display(), "direct connection up");
            Slot::Up(protocol::connect_arc(r, w, Arc::new(NoHandler), options))
        }
        Err(e) => {
            tracing::debug!(prefix, path = %path.display(), error = %e, "no direct connection");
            Slot::Down {
                retry_at: Instant::now() + RETRY,
                trying: false,
            }
        }
    };
    lock(&client.slots).insert(prefix, slot);
}

/// A call's error on a direct connection, as the broker would have answered it: a
/// connection that closed under the call is `unavailable` (the owner went away).
pub fn as_through_broker(method: &str, e: CallError) -> CallError {
    match e {
        CallError::Transport(reason) => CallError::Rpc(RpcError::new(
            Code::Unavailable,
            format!("the direct connection for {method} closed: {reason}"),
        )),
        other => other,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_prefixes_other_than_the_brokers_go_direct() {
        assert_eq!(prefix_of("store.accept"), Some("store"));
        assert_eq!(prefix_of("ext.webhook"), Some("ext"));
        assert_eq!(prefix_of("bus.register"), None);
        assert_eq!(prefix_of("../x.y"), None);
        assert_eq!(prefix_of("nodot"), None);
        assert_eq!(prefix_of(".x"), None);
    }

    #[test]
    fn root_and_the_own_user_are_admitted() {
        assert!(admits(0));
        assert!(admits(nix::unistd::geteuid().as_raw()));
        let other = if nix::unistd::geteuid().as_raw() == 65534 {
            65533
        } else {
            65534
        };
        assert!(!admits(other));
    }
}
