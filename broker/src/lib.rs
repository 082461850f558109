//! The broker: the bus every daemon and the CLI talk through.
//!
//! Every peer is authenticated with `SO_PEERCRED` when it connects: root, the
//! suite's service user and members of its group are let in, everyone else is
//! refused with a logged reason. Root and the service user may register a service
//! (`bus.register {service, prefixes}`); a new registration of a service replaces
//! the old connection. Every other request is routed to the owner of its method's
//! prefix (`store` for `store.get`) and the answer back: each hop is its own
//! connection with its own ids, so ids are rewritten per hop. When an owner's
//! connection drops, every request in flight to it fails at once with
//! `unavailable`. A request for a known prefix with no owner waits up to
//! `bus_wait` for one to register, then fails `unavailable`; an unknown prefix is
//! method-not-found. Notifications from services are fanned out to the peers that
//! subscribed to their topic (`bus.subscribe {topics}`); a subscriber that does not
//! keep up loses notifications (counted) and never slows anyone else.
//! `bus.metrics` answers the broker's counters and its forwarding times by prefix
//! in the Prometheus text format (`busapi::bus`), for the suite's `/metrics`.

pub mod cli;
pub mod probe;

use protocol::{
    BoxFuture, CallError, CallOptions, Code, Handler, Options, Peer, Reply, Request, RpcError,
};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;

use busapi::metrics::MetricsText;
use busapi::Call;
use daemon::metrics::{Histogram, Kind, Text, LATENCY_BUCKETS};

/// The prefixes of the suite's own services: a request for one of them waits for
/// its owner to (re)register.
pub const SUITE_PREFIXES: &[&str] = &["store", "sched", "ingress", "ext", "view", "tunnel"];

/// How much unread output a subscriber may have before notifications to it are
/// dropped.
pub const SUBSCRIBER_ROOM: usize = 1024 * 1024;

/// The broker's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long a request for a known prefix waits for an owner.
    pub bus_wait: Duration,
    /// The suite's service user: may connect and register.
    pub service_uid: Option<u32>,
    /// The suite's group: its members may connect (not register).
    pub group_gid: Option<u32>,
    /// Prefixes that are known even before anyone registers them.
    pub known_prefixes: Vec<String>,
    /// Unread output a subscriber may have before its notifications are dropped.
    pub subscriber_room: usize,
    /// The protocol bounds of every peer's connection.
    pub connection: Options,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bus_wait: Duration::from_secs(5),
            service_uid: None,
            group_gid: None,
            known_prefixes: SUITE_PREFIXES.iter().map(|p| p.to_string()).collect(),
            subscriber_room: SUBSCRIBER_ROOM,
            // 64 MiB: a webhook body of up to 25 MiB crosses the bus in base64.
            connection: Options::large("bus peer"),
        }
    }
}

/// Who a peer is, from `SO_PEERCRED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// The peer's uid.
    pub uid: u32,
    /// The peer's primary gid.
    pub gid: u32,
    /// The peer's pid, when the kernel tells it.
    pub pid: Option<i32>,
}

/// What a peer may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Root or the service user: call, publish, register.
    Service,
    /// A member of the suite's group: call and subscribe.
    Member,
}

impl Config {
    /// Decide whether `cred` may connect, and as what; `Err` says why not.
    pub fn admit(&self, cred: &Credentials) -> Result<Access, String> {
        if cred.uid == 0 || Some(cred.uid) == self.service_uid {
            return Ok(Access::Service);
        }
        if let Some(gid) = self.group_gid {
            if cred.gid == gid || in_group(cred.uid, gid) {
                return Ok(Access::Member);
            }
        }
        Err(format!(
            "uid {} (gid {}, pid {}) is neither root, the service user, nor a member of the bus group",
            cred.uid,
            cred.gid,
            cred.pid.map_or("unknown".to_string(), |p| p.to_string())
        ))
    }
}

/// True when the user `uid` is listed as a member of group `gid`.
fn in_group(uid: u32, gid: u32) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return false;
    };
    if user.gid == Gid::from_raw(gid) {
        return true;
    }
    match Group::from_gid(Gid::from_raw(gid)) {
        Ok(Some(group)) => group.mem.contains(&user.name),
        _ => false,
    }
}

struct ServiceEntry {
    conn: u64,
    peer: Peer,
    pid: Option<i32>,
    uid: u32,
    prefixes: Vec<String>,
    since: Instant,
}

struct Subscriber {
    peer: Peer,
    topics: HashSet<String>,
    dropped: u64,
}

struct PeerEntry {
    cred: Credentials,
    access: Access,
    since: Instant,
}

#[derive(Default)]
struct Tables {
    services: HashMap<String, ServiceEntry>,
    owners: HashMap<String, String>,
    known: HashSet<String>,
    subscribers: HashMap<u64, Subscriber>,
    peers: HashMap<u64, PeerEntry>,
    /// How long forwarded requests took, by known prefix (`bus.metrics`).
    times: HashMap<String, Arc<Histogram>>,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    refused: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    unavailable: AtomicU64,
    notifications: AtomicU64,
    dropped: AtomicU64,
}

struct State {
    config: Config,
    tables: Mutex<Tables>,
    registered: Notify,
    counters: Counters,
    next_conn: AtomicU64,
    started: Instant,
}

/// The broker. Cheap to clone.
#[derive(Clone)]
pub struct Broker {
    state: Arc<State>,
}

impl Broker {
    /// A broker with these settings.
    pub fn new(config: Config) -> Broker {
        let known = config.known_prefixes.iter().cloned().collect();
        let tables = Tables {
            known,
            ..Tables::default()
        };
        Broker {
            state: Arc::new(State {
                config,
                tables: Mutex::new(tables),
                registered: Notify::new(),
                counters: Counters::default(),
                next_conn: AtomicU64::new(1),
                started: Instant::now(),
            }),
        }
    }

    /// Accept and serve peers until the listener fails; each peer is served on its
    /// own tasks. Call it inside a `select!` with the stop signal.
    pub async fn serve(&self, listener: &UnixListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            self.admit(stream);
        }
    }

    /// Authenticate one connection and, if admitted, serve it.
    pub fn admit(&self, stream: UnixStream) {
        let state = self.state.clone();
        state.counters.connections.fetch_add(1, Ordering::Relaxed);
        let cred = match stream.peer_cred() {
            Ok(c) => Credentials {
                uid: c.uid(),
                gid: c.gid(),
                pid: c.pid(),
            },
            Err(e) => {
                tracing::warn!(error = %e, "refused a bus peer: no credentials");
                state.counters.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let access = match state.config.admit(&cred) {
            Ok(a) => a,
            Err(why) => {
                tracing::warn!(uid = cred.uid, pid = ?cred.pid, reason = %why, "refused a bus peer");
                state.counters.refused.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(refuse(stream, why));
                return;
            }
        };
        let conn = state.next_conn.fetch_add(1, Ordering::Relaxed);
        let handler = Conn {
            state: state.clone(),
            conn,
            cred,
            access,
        };
        let (r, w) = match daemon::sock::split(stream) {
            Ok(halves) => halves,
            Err(e) => {
                tracing::warn!(conn, error = %e, "refused a bus peer: its socket cannot be served");
                state.counters.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let mut opts = state.config.connection.clone();
        opts.name = format!("bus peer {conn} (uid {}, pid {:?})", cred.uid, cred.pid);
        let peer = protocol::connect(r, w, handler, opts);
        lock(&state.tables).peers.insert(
            conn,
            PeerEntry {
                cred,
                access,
                since: Instant::now(),
            },
        );
        tracing::debug!(conn, uid = cred.uid, pid = ?cred.pid, "bus peer connected");
        tokio::spawn(async move {
            let reason = peer.closed().await;
            tracing::debug!(conn, %reason, "bus peer gone");
            let mut t = lock(&state.tables);
            t.peers.remove(&conn);
            t.subscribers.remove(&conn);
            let gone: Vec<String> = t
                .services
                .iter()
                .filter(|(_, s)| s.conn == conn)
                .map(|(name, _)| name.clone())
                .collect();
            for name in gone {
                if let Some(entry) = t.services.remove(&name) {
                    for p in entry.prefixes {
                        t.owners.remove(&p);
                    }
                    tracing::info!(service = %name, "service left the bus");
                }
            }
        });
    }

    /// Registered services, peers and counters.
    pub fn status(&self) -> Value {
        self.state.status()
    }

    /// Close every peer's connection (a graceful stop).
    pub fn close_all(&self, why: &str) {
        let t = lock(&self.state.tables);
        for s in t.services.values() {
            s.peer.close(why);
        }
        for s in t.subscribers.values() {
            s.peer.close(why);
        }
    }

    /// The number of connected peers.
    pub fn peer_count(&self) -> usize {
        lock(&self.state.tables).peers.len()
    }

    /// The number of registered services.
    pub fn service_count(&self) -> usize {
        lock(&self.state.tables).services.len()
    }
}

fn lock(m: &Mutex<Tables>) -> MutexGuard<'_, Tables> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Tell a refused peer why (a JSON-RPC error with a null id), then hang up.
async fn refuse(mut stream: UnixStream, why: String) {
    let error = RpcError::new(Code::Unauthorized, format!("refused by the bus: {why}"));
    let line = json!({"jsonrpc": "2.0", "id": null, "error": error});
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&bytes)).await;
    let _ = stream.shutdown().await;
    // Read what the peer already sent (bounded), so closing does not reset the
    // connection and discard the answer before the peer reads it.
    let mut sink = [0u8; 4096];
    let mut left = 64 * 1024usize;
    let drain = async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

impl State {
    fn status(&self) -> Value {
        let t = lock(&self.tables);
        let mut services = BTreeMap::new();
        for (name, s) in &t.services {
            services.insert(
                name.clone(),
                json!({
                    "pid": s.pid,
                    "uid": s.uid,
                    "prefixes": s.prefixes,
                    "uptime_s": s.since.elapsed().as_secs_f64(),
                }),
            );
        }
        let peers: Vec<Value> = t
            .peers
            .iter()
            .map(|(conn, p)| {
                let sub = t.subscribers.get(conn);
                json!({
                    "conn": conn,
                    "uid": p.cred.uid,
                    "pid": p.cred.pid,
                    "access": match p.access { Access::Service => "service", Access::Member => "member" },
                    "connected_s": p.since.elapsed().as_secs_f64(),
                    "topics": sub.map(|s| { let mut t: Vec<_> = s.topics.iter().cloned().collect(); t.sort(); t }),
                    "dropped": sub.map_or(0, |s| s.dropped),
                })
            })
            .collect();
        let c = &self.counters;
        json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "pid": std::process::id(),
            "services": services,
            "peers": peers,
            "counters": {
                "connections": c.connections.load(Ordering::Relaxed),
                "refused": c.refused.load(Ordering::Relaxed),
                "requests": c.requests.load(Ordering::Relaxed),
                "failures": c.failures.load(Ordering::Relaxed),
                "unavailable": c.unavailable.load(Ordering::Relaxed),
                "notifications": c.notifications.load(Ordering::Relaxed),
                "dropped": c.dropped.load(Ordering::Relaxed),
            },
        })
    }
}

impl State {
    /// `bus.metrics`: the broker's counters, its services and peers, and how long
    /// the requests it forwarded took, by prefix (every family `oc_broker_…`).
    fn metrics(&self) -> MetricsText {
        let mut t = Text::new();
        let c = &self.counters;
        for (name, help, value) in [
            (
                "oc_broker_connections_total",
                "Connections accepted.",
                &c.connections,
            ),
            (
                "oc_broker_connections_refused_total",
                "Connections refused (not root, the service user or a member of its group).",
                &c.refused,
            ),
            (
                "oc_broker_requests_total",
                "Requests forwarded to a service.",
                &c.requests,
            ),
            (
                "oc_broker_request_failures_total",
                "Forwarded requests that failed (the service's error, or no such prefix).",
                &c.failures,
            ),
            (
                "oc_broker_requests_unavailable_total",
                "Forwarded requests answered unavailable (no owner, or it went away).",
                &c.unavailable,
            ),
            (
                "oc_broker_notifications_total",
                "Notifications services published.",
                &c.notifications,
            ),
            (
                "oc_broker_notifications_dropped_total",
                "Notifications dropped for a subscriber that did not keep up.",
                &c.dropped,
            ),
        ] {
            t.single(name, Kind::Counter, help, value.load(Ordering::Relaxed));
        }
        let (services, peers, times) = {
            let tables = lock(&self.tables);
            let mut times: Vec<(String, Arc<Histogram>)> = tables
                .times
                .iter()
                .map(|(p, h)| (p.clone(), h.clone()))
                .collect();
            times.sort_by(|a, b| a.0.cmp(&b.0));
            (tables.services.len(), tables.peers.len(), times)
        };
        t.single(
            "oc_broker_services",
            Kind::Gauge,
            "Services registered now.",
            services,
        );
        t.single(
            "oc_broker_peers",
            Kind::Gauge,
            "Peers connected now.",
            peers,
        );
        let name = "oc_broker_forward_duration_seconds";
        t.family(
            name,
            Kind::Histogram,
            "Time from a request's arrival at the broker to its owner's answer, by prefix.",
        );
        for (prefix, h) in &times {
            t.histogram(name, &[("prefix", prefix)], h);
        }
        MetricsText {
            text: t.into_string(),
        }
    }
}

/// One peer's connection, as the broker serves it.
struct Conn {
    state: Arc<State>,
    conn: u64,
    cred: Credentials,
    access: Access,
}

#[derive(Deserialize)]
struct RegisterParams {
    service: String,
    #[serde(default)]
    prefixes: Vec<String>,
}

#[derive(Deserialize)]
struct SubscribeParams {
    topics: Vec<String>,
}

fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(b'a'..=b'z'))
        && b.all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
        && s.len() <= 64
}

/// The notification a replaced service's old connection gets before it is closed.
pub const REPLACED: &str = "bus.replaced";

/// The most topics one peer may subscribe to.
pub const MAX_TOPICS: usize = 256;
/// The most prefixes one service may own.
pub const MAX_PREFIXES: usize = 64;

impl Conn {
    fn register(&self, request: &Request) -> Result<Value, RpcError> {
        if self.access != Access::Service {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "uid {} may call but not register: only root and the service user register services",
                    self.cred.uid
                ),
            ));
        }
        let p: RegisterParams = request.params()?;
        if !is_name(&p.service) {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "service name {:?} is not a name ([a-z][a-z0-9_-]*, at most 64 bytes)",
                    p.service
                ),
            ));
        }
        if p.prefixes.len() > MAX_PREFIXES {
            return Err(RpcError::new(
                Code::Invalid,
                format!("{} prefixes: at most {MAX_PREFIXES}", p.prefixes.len()),
            ));
        }
        for prefix in &p.prefixes {
            if !is_name(prefix) || prefix == "bus" {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!("prefix {prefix:?} is not a name, or is the broker's own `bus`"),
                ));
            }
        }
        let old_peer = {
            let mut t = lock(&self.state.tables);
            for prefix in &p.prefixes {
                if let Some(owner) = t.owners.get(prefix) {
                    if *owner != p.service {
                        return Err(RpcError::new(
                            Code::Conflict,
                            format!("prefix `{prefix}` is registered by service `{owner}`"),
                        ));
                    }
                }
            }
            let old = t.services.remove(&p.service);
            if let Some(old) = &old {
                for prefix in &old.prefixes {
                    t.owners.remove(prefix);
                }
            }
            for prefix in &p.prefixes {
                t.owners.insert(prefix.clone(), p.service.clone());
                t.known.insert(prefix.clone());
            }
            t.services.insert(
                p.service.clone(),
                ServiceEntry {
                    conn: self.conn,
                    peer: request.peer.clone(),
                    pid: self.cred.pid,
                    uid: self.cred.uid,
                    prefixes: p.prefixes.clone(),
                    since: Instant::now(),
                },
            );
            old.filter(|o| o.conn != self.conn).map(|o| o.peer)
        };
        if let Some(old) = old_peer {
            // Tell the old instance it was replaced, so it does not register again.
            let _ = old.notify(REPLACED, &json!({ "service": p.service }));
            old.close(&format!(
                "service `{}` registered again on a new connection",
                p.service
            ));
        }
        tracing::info!(service = %p.service, prefixes = ?p.prefixes, pid = ?self.cred.pid, "service registered");
        self.state.registered.notify_waiters();
        Ok(json!({ "service": p.service, "prefixes": p.prefixes }))
    }

    fn subscribe(&self, request: &Request) -> Result<Value, RpcError> {
        let p: SubscribeParams = request.params()?;
        let mut t = lock(&self.state.tables);
        let sub = t
            .subscribers
            .entry(self.conn)
            .or_insert_with(|| Subscriber {
                peer: request.peer.clone(),
                topics: HashSet::new(),
                dropped: 0,
            });
        for topic in p.topics {
            if sub.topics.len() >= MAX_TOPICS {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!("more than {MAX_TOPICS} topics on one connection"),
                ));
            }
            sub.topics.insert(topic);
        }
        let mut topics: Vec<_> = sub.topics.iter().cloned().collect();
        topics.sort();
        Ok(json!({ "topics": topics }))
    }

    /// The owner of `prefix` now, waiting up to `bus_wait` for one to register.
    async fn owner(state: &State, prefix: &str) -> Option<(String, Peer)> {
        let deadline = tokio::time::Instant::now() + state.config.bus_wait;
        loop {
            let registered = state.registered.notified();
            tokio::pin!(registered);
            registered.as_mut().enable();
            {
                let t = lock(&state.tables);
                if let Some(service) = t.owners.get(prefix) {
                    if let Some(entry) = t.services.get(service) {
                        if !entry.peer.is_closed() {
                            return Some((service.clone(), entry.peer.clone()));
                        }
                    }
                }
            }
            if tokio::time::timeout_at(deadline, registered).await.is_err() {
                return None;
            }
        }
    }
}

impl Handler for Conn {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let method = request.method.as_str();
        if let Some(own) = method.strip_prefix("bus.") {
            let answer = match own {
                "register" => self.register(&request),
                "subscribe" => self.subscribe(&request),
                "status" => Ok(self.state.status()),
                _ if method == busapi::bus::MetricsRequest::METHOD => {
                    Ok(json!(self.state.metrics()))
                }
                _ => Err(RpcError::method_not_found(method)),
            };
            return Box::pin(async move { protocol::reply(&answer?) });
        }
        let state = self.state.clone();
        state.counters.requests.fetch_add(1, Ordering::Relaxed);
        let prefix = method.split('.').next().unwrap_or_default().to_string();
        let started = Instant::now();
        let times = {
            let mut t = lock(&state.tables);
            if t.known.contains(&prefix) {
                Some(match t.times.get(&prefix) {
                    Some(h) => h.clone(),
                    None => {
                        let h = Arc::new(Histogram::new(LATENCY_BUCKETS));
                        t.times.insert(prefix.clone(), h.clone());
                        h
                    }
                })
            } else {
                None
            }
        };
        let Some(times) = times else {
            state.counters.failures.fetch_add(1, Ordering::Relaxed);
            let e = RpcError::method_not_found(method);
            return Box::pin(async move { Err(e) });
        };
        Box::pin(async move {
            let answer = Conn::forward(&state, &prefix, &request).await;
            times.observe_duration(started.elapsed());
            answer
        })
    }

    fn notify(&self, _peer: &Peer, method: &str, params: Value) {
        self.fan_out(method, params);
    }
}

impl Conn {
    /// Forward `request` to the owner of `prefix`, waiting for one to register.
    async fn forward(
        state: &Arc<State>,
        prefix: &str,
        request: &Request,
    ) -> Result<Reply, RpcError> {
        let Some((service, owner)) = Conn::owner(state, prefix).await else {
            state.counters.unavailable.fetch_add(1, Ordering::Relaxed);
            return Err(RpcError::new(
                Code::Unavailable,
                format!(
                    "no service serves `{prefix}.*` (waited {:?} for one to register)",
                    state.config.bus_wait
                ),
            ));
        };
        // Dropping this future (the caller cancelled) cancels the forwarded call.
        let answer = owner
            .call_raw(&request.method, &*request.params, CallOptions::default())
            .await;
        match answer {
            Ok(raw) => Ok(raw),
            Err(CallError::Rpc(e)) => {
                state.counters.failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            Err(CallError::Transport(reason)) => {
                state.counters.unavailable.fetch_add(1, Ordering::Relaxed);
                Err(RpcError::new(
                    Code::Unavailable,
                    format!("service `{service}` went away during the call: {reason}"),
                ))
            }
            Err(CallError::TooLarge { size, limit }) => {
                state.counters.failures.fetch_add(1, Ordering::Relaxed);
                Err(RpcError::too_large(
                    size,
                    limit,
                    format!(
                        "the `{}` request of {size} bytes exceeds the bus's {limit}-byte message limit (max_message_bytes)",
                        request.method
                    ),
                ))
            }
            Err(e) => {
                state.counters.failures.fetch_add(1, Ordering::Relaxed);
                Err(RpcError::unauthored(format!(
                    "forwarding {} to {service}: {e}",
                    request.method
                )))
            }
        }
    }

    /// Fan a service's notification out to the subscribers of its topic.
    fn fan_out(&self, method: &str, params: Value) {
        if self.access != Access::Service {
            tracing::debug!(
                conn = self.conn,
                topic = method,
                "notification from a non-service peer ignored"
            );
            return;
        }
        let state = &self.state;
        state.counters.notifications.fetch_add(1, Ordering::Relaxed);
        let mut t = lock(&state.tables);
        for (conn, sub) in t.subscribers.iter_mut() {
            if *conn == self.conn || !sub.topics.contains(method) {
                continue;
            }
            match sub
                .peer
                .notify_if_room(method, &params, state.config.subscriber_room)
            {
                Ok(true) => {}
                Ok(false) => {
                    sub.dropped += 1;
                    state.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {}
            }
        }
    }
}
