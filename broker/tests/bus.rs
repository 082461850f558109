//! The bus with real processes on real sockets: the broker binary, probe services
//! that join through `daemon::bus`, clients in this process, real signals.

#![allow(clippy::unwrap_used)]

use daemon::bus::{Bus, BusOptions};
use protocol::{BoxFuture, Code, Handler, Peer, Reply, Request, RpcError};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const BROKER: &str = env!("CARGO_BIN_EXE_open-conduit-broker");
const PROBE: &str = env!("CARGO_BIN_EXE_oc-bus-probe");

/// Turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory for one test's sockets.
fn temp_dir() -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("oc-bus-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A child process, SIGKILLed when dropped unless it was reaped.
struct Proc(Child, bool);

impl Proc {
    fn new(child: Child) -> Self {
        Proc(child, false)
    }
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
    fn sigkill(&mut self) {
        if self.1 {
            return;
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.wait();
        self.1 = true;
    }
    fn wait(&mut self) -> std::process::ExitStatus {
        let status = self.0.wait().unwrap();
        self.1 = true;
        status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.sigkill();
    }
}

fn broker_cmd(socket: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(BROKER);
    cmd.arg("--socket")
        .arg(socket)
        .args(["--log", "stderr", "--bus-wait-ms", "3000"])
        .args(extra)
        .stdin(Stdio::null())
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID");
    cmd
}

async fn wait_for_socket(socket: &Path) {
    within(async {
        loop {
            if tokio::net::UnixStream::connect(socket).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

async fn start_broker(socket: &Path) -> Proc {
    let child = broker_cmd(socket, &[]).spawn().unwrap();
    wait_for_socket(socket).await;
    Proc::new(child)
}

/// A probe service, returned once it printed `ready` (registered).
async fn start_probe(socket: &Path, service: &str, prefix: &str) -> Proc {
    let mut child = Command::new(PROBE)
        .args(["serve", socket.to_str().unwrap(), service, prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = within(tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        line
    }))
    .await
    .unwrap();
    assert_eq!(line.trim(), "ready");
    Proc::new(child)
}

/// Receives notifications into a channel.
struct Inbox(mpsc::UnboundedSender<(String, Value)>);

impl Handler for Inbox {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let m = request.method;
        Box::pin(async move { Err(RpcError::method_not_found(&m)) })
    }
    fn notify(&self, _peer: &Peer, method: &str, params: Value) {
        let _ = self.0.send((method.to_string(), params));
    }
}

fn client(socket: &Path) -> Bus {
    Bus::start(BusOptions::client(socket))
}

#[tokio::test]
async fn calls_go_through_the_broker_to_a_service_and_back() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let probe = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    let v = within(bus.call("probe.echo", &json!({"hello": [1, 2]})))
        .await
        .unwrap();
    assert_eq!(v, json!({"hello": [1, 2]}));
    let pid = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(pid, json!(probe.pid()));
    // An authored error crosses both hops verbatim.
    let e = within(bus.call("probe.fail", &Value::Null))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("probe_failed"));
    // An unknown prefix is method-not-found at once.
    let e = within(bus.call("nosuch.thing", &Value::Null))
        .await
        .unwrap_err();
    assert_eq!(e.rpc().unwrap().code, -32601);
    // The broker's own status names the service with its pid.
    let status = within(bus.call("bus.status", &Value::Null)).await.unwrap();
    assert_eq!(status["services"]["probe"]["pid"], json!(probe.pid()));
}

#[tokio::test]
async fn many_concurrent_callers() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let _probe = start_probe(&socket, "probe", "probe").await;
    let mut tasks = Vec::new();
    for c in 0..16 {
        let bus = client(&socket);
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                let v = bus.call("probe.echo", &json!([c, i])).await.unwrap();
                assert_eq!(v, json!([c, i]));
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
}

#[tokio::test]
async fn notifications_fan_out_to_subscribers() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let _probe = start_probe(&socket, "probe", "probe").await;
    let mut inboxes = Vec::new();
    let mut subscribers = Vec::new();
    for _ in 0..3 {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut opts = BusOptions::client(&socket).with_topics(&["work.changed"]);
        opts.handler = Arc::new(Inbox(tx));
        let bus = Bus::start(opts);
        within(bus.connected(HANG)).await.unwrap();
        subscribers.push(bus);
        inboxes.push(rx);
    }
    let caller = client(&socket);
    within(caller.call(
        "probe.publish",
        &json!({"topic": "work.changed", "params": {"work_id": "w1"}}),
    ))
    .await
    .unwrap();
    // Another topic reaches nobody subscribed here.
    within(caller.call("probe.publish", &json!({"topic": "other", "params": {}})))
        .await
        .unwrap();
    for rx in &mut inboxes {
        let (topic, params) = within(rx.recv()).await.unwrap();
        assert_eq!(topic, "work.changed");
        assert_eq!(params, json!({"work_id": "w1"}));
    }
    // Nothing else arrived for them.
    within(caller.call(
        "probe.publish",
        &json!({"topic": "work.changed", "params": {"work_id": "w2"}}),
    ))
    .await
    .unwrap();
    for rx in &mut inboxes {
        assert_eq!(within(rx.recv()).await.unwrap().1, json!({"work_id": "w2"}));
    }
}

type Calls = Vec<tokio::task::JoinHandle<Result<Value, protocol::CallError>>>;

/// Three `probe.sleep` calls that do not end by themselves.
fn sleeping_calls(bus: &Bus) -> Calls {
    (0..3)
        .map(|_| {
            let bus = bus.clone();
            tokio::spawn(async move { bus.call("probe.sleep", &json!(600_000)).await })
        })
        .collect()
}

/// Each of `calls` fails `unavailable` (their service was killed).
async fn all_unavailable(calls: Calls) {
    for call in calls {
        let e = within(call).await.unwrap().unwrap_err();
        assert!(e.is(Code::Unavailable), "{e:?}");
    }
}

#[tokio::test]
async fn a_killed_service_fails_in_flight_calls_unavailable_and_its_restart_serves_them_again() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let mut probe = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    within(bus.connected(HANG)).await.unwrap();
    let calls = sleeping_calls(&bus);
    // Wait until the three are in flight at the probe.
    within(async {
        loop {
            let s = bus.call("bus.status", &Value::Null).await.unwrap();
            if s["counters"]["requests"].as_u64().unwrap_or(0) >= 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    probe.sigkill();
    all_unavailable(calls).await;
    let restarted = start_probe(&socket, "probe", "probe").await;
    // The same client, without reconnecting, reaches the new process.
    let pid = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(pid, json!(restarted.pid()));
}

#[tokio::test]
async fn a_request_waits_for_a_service_that_is_registering() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let bus = client(&socket);
    within(bus.connected(HANG)).await.unwrap();
    // `store` is one of the suite's prefixes: the call waits for its owner.
    let call = tokio::spawn({
        let bus = bus.clone();
        async move { bus.call("store.echo", &json!("waited")).await }
    });
    let _probe = start_probe(&socket, "storaged", "store").await;
    assert_eq!(within(call).await.unwrap().unwrap(), json!("waited"));
}

#[tokio::test]
async fn a_request_for_a_known_prefix_with_no_owner_fails_unavailable_after_the_wait() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let bus = client(&socket);
    let e = within(bus.call("sched.anything", &Value::Null))
        .await
        .unwrap_err();
    assert!(e.is(Code::Unavailable), "{e:?}");
    assert!(e.to_string().contains("sched"), "{e}");
}

#[tokio::test]
async fn a_killed_broker_restarted_on_the_same_socket_is_rejoined_by_itself() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let mut broker = start_broker(&socket).await;
    let probe = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    assert_eq!(
        within(bus.call("probe.echo", &json!(1))).await.unwrap(),
        json!(1)
    );
    broker.sigkill();
    let _broker = start_broker(&socket).await;
    // The probe re-registers and the client reconnects, both on their own.
    let pid = within(async {
        loop {
            match bus.call("probe.pid", &Value::Null).await {
                Ok(v) => return v,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert_eq!(pid, json!(probe.pid()));
}

#[tokio::test]
async fn a_registration_replaces_the_old_connection() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let _first = start_probe(&socket, "probe", "probe").await;
    let second = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    let pid = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(pid, json!(second.pid()));
}

#[tokio::test]
async fn socket_activation_serves_on_the_inherited_socket() {
    let activate = Path::new("/usr/bin/systemd-socket-activate");
    assert!(
        activate.exists(),
        "systemd-socket-activate is needed (Debian's systemd package; .ci/run installs it)"
    );
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let child = Command::new(activate)
        .arg("-l")
        .arg(&socket)
        .arg("--fdname=bus")
        .arg(BROKER)
        // No --socket: the broker must use the socket it is given.
        .args(["--log", "stderr", "--socket", "/nonexistent/unused.sock"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let _activator = Proc::new(child);
    wait_for_socket(&socket).await;
    let _probe = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    assert_eq!(
        within(bus.call("probe.echo", &json!("activated")))
            .await
            .unwrap(),
        json!("activated")
    );
    let status = within(bus.call("bus.status", &Value::Null)).await.unwrap();
    assert!(status["pid"].as_u64().is_some());
}

/// Run the probe's `call` as another uid and gid; answers (exit code, stdout, stderr).
fn call_as(socket: &Path, uid: u32, gid: u32, method: &str) -> (i32, String, String) {
    let out = Command::new(PROBE)
        .args(["call", socket.to_str().unwrap(), method])
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_peer_whose_uid_is_not_allowed_is_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test switches a child to another uid, which needs root (CI runs as root)"
    );
    let dir = temp_dir();
    // The directory and socket open to everyone, so that only SO_PEERCRED decides.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let socket = dir.join("bus.sock");
    let child = broker_cmd(&socket, &["--socket-mode", "666", "--group-gid", "4242"])
        .spawn()
        .unwrap();
    let _broker = Proc::new(child);
    wait_for_socket(&socket).await;
    let socket2 = socket.clone();
    let (code, _out, err) =
        tokio::task::spawn_blocking(move || call_as(&socket2, 65534, 65534, "bus.status"))
            .await
            .unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("refused by the bus") && err.contains("uid 65534"),
        "{err}"
    );
    // A member of the bus group gets in, and may call but not register.
    let socket3 = socket.clone();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || call_as(&socket3, 65534, 4242, "bus.status"))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"services\""), "{out}");
    let (code, _out, err) =
        tokio::task::spawn_blocking(move || call_as(&socket, 65534, 4242, "bus.register"))
            .await
            .unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("may call but not register"), "{err}");
}

#[tokio::test]
async fn readiness_status_watchdog_and_stopping_reach_the_notify_socket() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let notify_path = dir.join("notify.sock");
    let notify = tokio::net::UnixDatagram::bind(&notify_path).unwrap();
    let mut cmd = broker_cmd(&socket, &[]);
    cmd.env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "100000");
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let broker = Proc::new(child);
    let mut seen: Vec<String> = Vec::new();
    let recv = || async {
        let mut buf = vec![0u8; 4096];
        let n = within(notify.recv(&mut buf)).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // READY=1 comes only once it serves: a connection made after it succeeds.
    loop {
        let msg = recv().await;
        let ready = msg.lines().any(|l| l == "READY=1");
        seen.push(msg);
        if ready {
            break;
        }
    }
    assert!(tokio::net::UnixStream::connect(&socket).await.is_ok());
    // The watchdog keeps coming while it runs.
    let mut pings = 0;
    while pings < 3 {
        let msg = recv().await;
        if msg.lines().any(|l| l == "WATCHDOG=1") {
            pings += 1;
        }
        seen.push(msg);
    }
    assert!(seen.iter().any(|m| m.starts_with("STATUS=")), "{seen:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    loop {
        let msg = recv().await;
        if msg.lines().any(|l| l == "STOPPING=1") {
            break;
        }
    }
    let mut broker = broker;
    let status = within(tokio::task::spawn_blocking(move || broker.wait()))
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// The broker's count of requests it routed to services (its own `bus.*` are not).
async fn routed(bus: &Bus) -> u64 {
    let status = within(bus.call("bus.status", &Value::Null)).await.unwrap();
    status["counters"]["requests"].as_u64().unwrap()
}

#[tokio::test]
async fn gathered_calls_share_messages_under_load_and_are_each_answered_on_their_own() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let _probe = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    // At rest a gathered call goes alone, as the plain method.
    let before = routed(&bus).await;
    let one: Value = within(bus.call_gathered_as("probe.maybe", "", &json!({"n": -1})))
        .await
        .unwrap();
    assert_eq!(one, json!({"n": -1}));
    assert_eq!(routed(&bus).await - before, 1, "one call, one request");

    // 300 at once: every third fails, alone, with its own error; the others
    // answer their own params.
    let before = routed(&bus).await;
    let calls: Vec<_> = (0..300)
        .map(|n| {
            let bus = bus.clone();
            tokio::spawn(async move {
                let params = json!({"n": n, "fail": n % 3 == 0});
                (
                    n,
                    bus.call_gathered_as::<_, Value>("probe.maybe", "", &params)
                        .await,
                )
            })
        })
        .collect();
    for call in calls {
        let (n, answer) = within(call).await.unwrap();
        if n % 3 == 0 {
            let e = answer.unwrap_err();
            assert_eq!(e.code(), Some("probe_failed"));
            assert!(e.to_string().contains(&format!("\"n\":{n}")), "{e}");
        } else {
            assert_eq!(answer.unwrap(), json!({"n": n, "fail": false}));
        }
    }
    let requests = routed(&bus).await - before;
    eprintln!("300 gathered calls went as {requests} requests");
    assert!(
        requests < 100,
        "300 calls made at once went as {requests} requests: they were not gathered"
    );
}

#[tokio::test]
async fn a_batch_over_its_bound_or_of_another_service_is_refused_naming_why() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let _probe = start_probe(&socket, "probe", "probe").await;
    let bus = client(&socket);
    let calls: Vec<Value> = (0..=daemon::batch::MAX_BATCH_CALLS)
        .map(|n| json!(n))
        .collect();
    let e = within(bus.call(
        "probe.batch",
        &json!({"method": "probe.echo", "calls": calls}),
    ))
    .await
    .unwrap_err();
    assert!(e.to_string().contains("MAX_BATCH_CALLS (256)"), "{e}");
    let e = within(bus.call(
        "probe.batch",
        &json!({"method": "store.events", "calls": [{}]}),
    ))
    .await
    .unwrap_err();
    assert!(e.to_string().contains("not of its own service"), "{e}");
    // Within the bound, each call's answer in order.
    let answer = within(bus.call(
        "probe.batch",
        &json!({"method": "probe.maybe", "calls": [{"a": 1}, {"fail": true}]}),
    ))
    .await
    .unwrap();
    assert_eq!(answer["answers"][0], json!({"result": {"a": 1}}));
    assert_eq!(
        answer["answers"][1]["error"]["data"]["code"],
        "probe_failed"
    );
}

/// A service of before batches: answers `old.echo` and nothing else.
struct OldService;

impl Handler for OldService {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        Box::pin(async move {
            match request.method.as_str() {
                "old.echo" => Ok(request.params),
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }
}

#[tokio::test]
async fn gathered_calls_to_a_service_that_serves_no_batches_go_one_by_one() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let (r, w) = stream.into_split();
    let old = protocol::connect(r, w, OldService, protocol::Options::named("old"));
    within(old.call(
        "bus.register",
        &json!({"service": "old", "prefixes": ["old"]}),
    ))
    .await
    .unwrap();
    let bus = client(&socket);
    let calls: Vec<_> = (0..100)
        .map(|n| {
            let bus = bus.clone();
            tokio::spawn(async move {
                (
                    n,
                    bus.call_gathered_as::<_, Value>("old.echo", "", &json!([n]))
                        .await,
                )
            })
        })
        .collect();
    for call in calls {
        let (n, answer) = within(call).await.unwrap();
        assert_eq!(answer.unwrap(), json!([n]));
    }
}

/// A daemon's bus client (a service's: direct connections are theirs, not the CLI's).
fn daemon_client(socket: &Path) -> Bus {
    Bus::start(BusOptions::service(
        socket,
        "caller",
        &["caller"],
        Arc::new(protocol::NoHandler),
    ))
}

/// Call `method` until the broker stops seeing the calls: the client's direct
/// connection is then up. Answers the broker's request count at that point.
async fn until_direct(bus: &Bus, watcher: &Bus, method: &str) -> u64 {
    within(async {
        loop {
            let before = routed(watcher).await;
            for _ in 0..5 {
                bus.call(method, &Value::Null).await.unwrap();
            }
            let after = routed(watcher).await;
            // (`bus.*` requests are the broker's own: not counted.)
            if after == before {
                return after;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_daemon_calls_a_service_over_its_direct_socket_which_needs_no_broker() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let mut broker = start_broker(&socket).await;
    let probe = start_probe(&socket, "probe", "probe").await;
    // The service's socket and its directory are its user's alone.
    let direct = dir.join("direct");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode(&direct), 0o700);
    assert_eq!(mode(&direct.join("probe.sock")), 0o600);

    let bus = daemon_client(&socket);
    let watcher = client(&socket);
    within(bus.connected(HANG)).await.unwrap();
    // The first calls go through the broker while the direct connection comes up.
    let first = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(first, json!(probe.pid()));
    let at = until_direct(&bus, &watcher, "probe.pid").await;
    for i in 0..50 {
        let v = within(bus.call("probe.echo", &json!({ "n": i })))
            .await
            .unwrap();
        assert_eq!(v, json!({ "n": i }));
    }
    // 50 more calls, none through the broker.
    assert_eq!(routed(&watcher).await, at);
    // An authored error crosses the direct connection verbatim.
    let e = within(bus.call("probe.fail", &Value::Null))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("probe_failed"));

    // With the broker gone, the daemon still reaches the service directly.
    broker.sigkill();
    let pid = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(pid, json!(probe.pid()));
}

#[tokio::test]
async fn a_killed_service_fails_direct_calls_unavailable_and_its_restart_is_reached() {
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let mut probe = start_probe(&socket, "probe", "probe").await;
    let bus = daemon_client(&socket);
    let watcher = client(&socket);
    within(bus.connected(HANG)).await.unwrap();
    let at = until_direct(&bus, &watcher, "probe.pid").await;
    let calls = sleeping_calls(&bus);
    // Give the three calls time to be written to the probe (they do not cross the
    // broker, so its counters cannot tell), then kill it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(routed(&watcher).await, at, "the calls went direct");
    probe.sigkill();
    all_unavailable(calls).await;
    // The restarted service is reached by the same client: through the broker,
    // which waits for it to register, and then directly again.
    let restarted = start_probe(&socket, "probe", "probe").await;
    let pid = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(pid, json!(restarted.pid()));
    until_direct(&bus, &watcher, "probe.pid").await;
    let pid = within(bus.call("probe.pid", &Value::Null)).await.unwrap();
    assert_eq!(pid, json!(restarted.pid()));
}

#[tokio::test]
async fn a_direct_connection_from_another_user_is_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test switches a child to another uid, which needs root (CI runs as root)"
    );
    let dir = temp_dir();
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let probe = start_probe(&socket, "probe", "probe").await;
    // Open the directory and socket to everyone, so that only SO_PEERCRED decides.
    use std::os::unix::fs::PermissionsExt;
    let direct = dir.join("direct");
    for (p, mode) in [(&dir, 0o777), (&direct, 0o777)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let path = direct.join("probe.sock");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A request written by uid 65534 gets no answer: the connection is closed (or
    // reset or a broken pipe, when it closed before or while the request went).
    let script = "import socket,sys\n\
        s=socket.socket(socket.AF_UNIX)\n\
        s.connect(sys.argv[1])\n\
        try:\n    \
            s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"probe.pid\"}\\n')\n    \
            got=s.recv(4096)\n\
        except ConnectionError:\n    \
            got=b''\n\
        print(repr(got))\n";
    let run = |uid: u32| {
        let out = Command::new("/usr/bin/python3")
            .args(["-c", script, path.to_str().unwrap()])
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(run(65534), "b''");
    // Root is answered on the same socket.
    assert!(run(0).contains(&probe.pid().to_string()), "{}", run(0));
}
