#![allow(clippy::unwrap_used)]
//! The extrunner daemon with real processes: an in-process broker on a temp
//! socket, the `open-conduit-extrunner` binary pointed at temp directories where
//! the tests write packages (the `oc-test-extension` binary copied into the
//! package, its manifest `testext.json`), and a bus client calling `ext.*`.

use daemon::bus::{Bus, BusOptions};
use protocol::manifest::MANIFEST_FILE;
use protocol::{CallError, Code};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const EXTRUNNER: &str = env!("CARGO_BIN_EXE_open-conduit-extrunner");
const TESTEXT: &str = env!("CARGO_BIN_EXE_oc-test-extension");
const MANIFEST: &str = include_str!("../src/bin/testext.json");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("timed out")
}

/// A scratch directory, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("oc-extrunner-d-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test extension as a package `root/testext`: its manifest file and a copy
/// of the binary (a link would resolve outside the package directory).
fn install_testext(root: &Path) -> PathBuf {
    let dir = root.join("testext");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(MANIFEST_FILE), MANIFEST).unwrap();
    std::fs::copy(TESTEXT, dir.join("oc-test-extension")).unwrap();
    dir
}

fn write_package(root: &Path, name: &str, manifest: &Value) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(MANIFEST_FILE),
        serde_json::to_vec_pretty(manifest).unwrap(),
    )
    .unwrap();
}

/// A package declaring `family`, run on the host's executable (never started here).
fn declaring_family(name: &str, family: &str) -> Value {
    json!({
        "protocol": [1],
        "name": name,
        "version": "1.0.0",
        "command": ["open-conduit", "extension-run", name],
        "provides": {"families": [{"name": family, "re_derivable": true}]},
    })
}

fn start_broker(socket: &Path) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let broker = broker::Broker::new(broker::Config::default());
    tokio::spawn(async move {
        let _ = broker.serve(&listener).await;
    });
}

struct Daemon(Child, bool);

impl Daemon {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
    async fn sigterm_and_wait(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let mut child = std::mem::replace(&mut self.0, Command::new("true").spawn().unwrap());
        self.1 = true;
        let status = within(tokio::task::spawn_blocking(move || child.wait().unwrap()))
            .await
            .unwrap();
        let _ = self.0.wait();
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.1 {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_extrunner(s: &Scratch, notify: Option<&Path>) -> Daemon {
    let mut cmd = Command::new(EXTRUNNER);
    cmd.arg("--config-dir")
        .arg(s.join("etc"))
        .arg("--bundled")
        .arg(s.join("bundled"))
        .arg("--state")
        .arg(s.join("state"))
        .arg("--bus")
        .arg(s.join("bus.sock"))
        .args(["--log", "stderr"])
        .env("OC_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .stdin(Stdio::null());
    if let Some(n) = notify {
        cmd.env("NOTIFY_SOCKET", n).env("WATCHDOG_USEC", "200000");
    }
    Daemon(cmd.spawn().unwrap(), false)
}

/// Wait for `READY=1` on the notify socket; answers every message seen.
async fn wait_ready(notify: &tokio::net::UnixDatagram) -> Vec<String> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = within(notify.recv(&mut buf)).await.unwrap();
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        let ready = msg.lines().any(|l| l == "READY=1");
        seen.push(msg);
        if ready {
            return seen;
        }
    }
}

fn client(s: &Scratch) -> Bus {
    let mut opts = BusOptions::client(s.join("bus.sock"));
    opts.call_wait = HANG;
    Bus::start(opts)
}

async fn call(bus: &Bus, method: &str, params: Value) -> Result<Value, CallError> {
    within(bus.call(method, &params)).await
}

fn ext<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// Poll `ext.list` until `name` runs a process other than `old_pid`; answers
/// its entry.
async fn wait_running(bus: &Bus, name: &str, old_pid: i32) -> Value {
    within(async {
        loop {
            let list = call(bus, "ext.list", json!({})).await.unwrap();
            let e = ext(&list, name).clone();
            if e["state"] == "running" && e["pid"] != json!(old_pid) {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn code_of(err: &CallError) -> Option<&str> {
    err.code()
}

/// A process is gone when /proc has no entry for it or it is a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_ext_methods_survives_a_crash_and_stops_every_extension() {
    let s = Scratch::new("serve");
    let installed = s.join("etc").join("extensions");
    let bundled = s.join("bundled");
    let pkg = install_testext(&installed);
    // A bundled copy, shadowed by the installed one, and a broken bundled package.
    install_testext(&bundled);
    std::fs::create_dir_all(bundled.join("broken")).unwrap();
    std::fs::write(bundled.join("broken").join(MANIFEST_FILE), b"{not json").unwrap();
    start_broker(&s.join("bus.sock"));
    // The KV layout is read from storaged before every start.
    let _storaged = start_storaged(&s);
    let notify_path = s.join("notify.sock");
    let notify = tokio::net::UnixDatagram::bind(&notify_path).unwrap();
    let daemon = start_extrunner(&s, Some(&notify_path));
    let seen = wait_ready(&notify).await;
    let bus = client(&s);

    // READY=1 came once the extension was up: it runs now.
    let list = call(&bus, "ext.list", json!({})).await.unwrap();
    let e = ext(&list, "testext");
    assert_eq!(e["state"], "running", "{list} {seen:?}");
    assert_eq!(e["origin"], "installed");
    assert_eq!(e["version"], "0.1.0");
    assert_eq!(e["protocol_version"], 1);
    assert_eq!(e["restarts"], 0);
    let pid = e["pid"].as_i64().unwrap() as i32;
    assert!(alive(pid));
    let reports = list["reports"].as_array().unwrap();
    assert!(
        reports
            .iter()
            .any(|r| r["name"] == "broken" && r["kind"] == "invalid"),
        "{list}"
    );
    assert!(
        reports
            .iter()
            .any(|r| r["name"] == "testext" && r["kind"] == "shadowed_bundled"),
        "{list}"
    );
    assert_eq!(list["conflicts"], json!([]));
    // An invalid package's report names its rule, `null` when none was broken.
    let broken = reports.iter().find(|r| r["name"] == "broken").unwrap();
    assert!(broken.get("rule").is_some(), "{broken}");
    // The same answers, read with busapi's types.
    let typed = within(bus.call_typed(&busapi::ext::ListRequest {}))
        .await
        .unwrap();
    let summary = typed
        .extensions
        .iter()
        .find(|e| e.name == "testext")
        .unwrap();
    assert_eq!(
        (summary.state.as_str(), summary.pid),
        ("running", Some(pid))
    );
    assert!(typed
        .reports
        .iter()
        .any(|r| r.name == "broken" && r.kind == "invalid" && r.rule.is_some()));
    let regs = within(bus.call_typed(&busapi::ext::RegistrationsRequest {}))
        .await
        .unwrap();
    assert!(regs.complete, "{regs:?}");
    assert_eq!(regs.extensions[0].name, "testext", "{regs:?}");
    assert_eq!(regs.extensions[0].state, "running", "{regs:?}");

    // inspect
    let info = call(&bus, "ext.inspect", json!({"name": "testext"}))
        .await
        .unwrap();
    assert_eq!(info["state"], "running");
    assert_eq!(info["dir"], pkg.display().to_string());
    assert_eq!(info["permissions"], json!([]));
    assert_eq!(info["last_exit"], Value::Null);
    assert_eq!(info["refusal"], Value::Null);
    let log = info["log"].as_str().unwrap();
    assert!(log.ends_with("logs/extensions/testext.log"), "{info}");
    assert!(Path::new(log).exists(), "{info}");
    let err = call(&bus, "ext.inspect", json!({"name": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), Some("not_found"), "{err}");

    // call: the extension's own method, plainly and in a transaction.
    let echoed = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.echo", "params": {"a": [1, 2]}}),
    )
    .await
    .unwrap();
    assert_eq!(echoed, json!({"a": [1, 2]}));
    let echoed = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.echo", "params": {"tx": true}, "in_transaction": true}),
    )
    .await
    .unwrap();
    assert_eq!(echoed, json!({"tx": true}));
    // Methods the manifest does not enable, or the extension's to call.
    for method in ["route.match", "kv.get", "other.echo"] {
        let err = call(
            &bus,
            "ext.call",
            json!({"name": "testext", "method": method, "params": {}}),
        )
        .await
        .unwrap_err();
        assert_eq!(code_of(&err), Some("undeclared"), "{method}: {err}");
    }
    let err = call(
        &bus,
        "ext.call",
        json!({"name": "nope", "method": "nope.echo"}),
    )
    .await
    .unwrap_err();
    assert_eq!(code_of(&err), Some("not_found"), "{err}");

    // A crash mid-call is `unavailable`, then it serves again after its restart.
    let err = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.crash"}),
    )
    .await
    .unwrap_err();
    assert!(err.is(Code::Unavailable), "{err}");
    assert!(err.to_string().contains("crashed during the call"), "{err}");
    let e = wait_running(&bus, "testext", pid).await;
    assert!(e["restarts"].as_u64().unwrap() >= 1, "{e}");
    let pid2 = e["pid"].as_i64().unwrap() as i32;
    assert_ne!(pid2, pid);
    let echoed = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.echo", "params": {"again": 1}}),
    )
    .await
    .unwrap();
    assert_eq!(echoed, json!({"again": 1}));
    let info = call(&bus, "ext.inspect", json!({"name": "testext"}))
        .await
        .unwrap();
    assert_eq!(info["last_exit"]["why"], "crashed", "{info}");
    assert_eq!(info["last_exit"]["status"], "exited with code 3", "{info}");

    // The operator's restart: a new process that serves.
    let restarted = call(&bus, "ext.restart", json!({"name": "testext"}))
        .await
        .unwrap();
    assert_eq!(restarted["state"], "running", "{restarted}");
    let pid3 = restarted["pid"].as_i64().unwrap() as i32;
    assert_ne!(pid3, pid2);
    assert!(!alive(pid2));
    let echoed = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.echo", "params": {"third": 3}}),
    )
    .await
    .unwrap();
    assert_eq!(echoed, json!({"third": 3}));
    let info = call(&bus, "ext.inspect", json!({"name": "testext"}))
        .await
        .unwrap();
    assert_eq!(
        info["last_exit"]["why"], "restarted by the operator",
        "{info}"
    );
    assert!(info["restarts"].as_u64().unwrap() >= 1, "{info}");
    let err = call(&bus, "ext.restart", json!({"name": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), Some("not_found"), "{err}");

    // SIGTERM: exit 0 and no extension process left.
    bus.close();
    let status = daemon.sigterm_and_wait().await;
    assert!(status.success(), "{status:?}");
    assert!(!alive(pid3), "the extension {pid3} outlived extrunner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_starts_no_extension_and_is_listed() {
    let s = Scratch::new("conflict");
    let installed = s.join("etc").join("extensions");
    install_testext(&installed);
    // `acme-x` is under both `acme` and `acme-x`, so each may declare it.
    write_package(&installed, "acme", &declaring_family("acme", "acme-x"));
    write_package(&installed, "acme-x", &declaring_family("acme-x", "acme-x"));
    start_broker(&s.join("bus.sock"));
    let notify_path = s.join("notify.sock");
    let notify = tokio::net::UnixDatagram::bind(&notify_path).unwrap();
    let daemon = start_extrunner(&s, Some(&notify_path));
    wait_ready(&notify).await;
    let bus = client(&s);

    let list = call(&bus, "ext.list", json!({})).await.unwrap();
    for name in ["acme", "acme-x", "testext"] {
        let e = ext(&list, name);
        assert_eq!(e["state"], "not_started", "{list}");
        assert_eq!(e["pid"], Value::Null, "{list}");
    }
    let conflicts = list["conflicts"].as_array().unwrap();
    assert!(
        conflicts.iter().any(|c| c["kind"] == "families"
            && c["name"] == "acme-x"
            && c["packages"] == json!(["acme", "acme-x"])),
        "{list}"
    );
    let info = call(&bus, "ext.inspect", json!({"name": "acme"}))
        .await
        .unwrap();
    assert!(!info["conflicts"].as_array().unwrap().is_empty(), "{info}");
    let err = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.echo", "params": {}}),
    )
    .await
    .unwrap_err();
    assert!(err.is(Code::Unavailable), "{err}");
    let err = call(&bus, "ext.restart", json!({"name": "testext"}))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), Some("conflict"), "{err}");

    bus.close();
    let status = daemon.sigterm_and_wait().await;
    assert!(status.success(), "{status:?}");
}

/// storaged's `store.*` served in this process on the broker, on a real store.
fn start_storaged(s: &Scratch) -> Bus {
    let store = storaged::Store::open(&s.join("store"), storaged::Limits::default()).unwrap();
    let service =
        storaged::service::Service::new(store, std::sync::Arc::new(std::sync::OnceLock::new()));
    Bus::start(BusOptions::service(
        s.join("bus.sock"),
        "storaged",
        &["store"],
        std::sync::Arc::new(service),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extensions_kv_calls_reach_storaged_through_its_scoped_host() {
    let s = Scratch::new("host");
    start_broker(&s.join("bus.sock"));
    let _storaged = start_storaged(&s);
    install_testext(&s.join("etc/extensions"));
    let daemon = start_extrunner(&s, None);
    let bus = client(&s);
    wait_running(&bus, "testext", 0).await;

    // Its own namespace: committed and read back, in storaged under its name.
    let own = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.kv_roundtrip",
               "params": {"key": "greeting", "value": {"hello": "world"}}}),
    )
    .await
    .unwrap();
    assert_eq!(
        own["get"]["ok"]["value"],
        json!({"hello": "world"}),
        "{own}"
    );
    let stored = call(
        &bus,
        "store.kv_get",
        json!({"owner": "testext", "key": "greeting"}),
    )
    .await
    .unwrap();
    assert_eq!(stored["value"], json!({"hello": "world"}));

    // An extension that does not answer in time: the call is cancelled and
    // answered `unavailable`, and the extension serves on.
    let slow = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.sleep", "params": 600000, "timeout_ms": 200}),
    )
    .await
    .unwrap_err();
    assert!(
        slow.is(Code::Unavailable) && slow.to_string().contains("did not answer"),
        "{slow}"
    );
    let e = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.sleep", "params": 1, "timeout_ms": 999_999_999u64}),
    )
    .await
    .unwrap_err();
    assert!(
        e.is(Code::Invalid) && e.to_string().contains("CALL_TIMEOUT_MAX"),
        "{e}"
    );

    // Another extension's namespace: refused by the host, nothing written.
    let foreign = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.kv_roundtrip",
               "params": {"namespace": "github", "key": "token", "value": "stolen"}}),
    )
    .await
    .unwrap();
    assert_eq!(foreign["commit"]["error"], "unauthorized", "{foreign}");
    assert_eq!(foreign["get"]["error"], "unauthorized", "{foreign}");
    let untouched = call(
        &bus,
        "store.kv_get",
        json!({"owner": "github", "key": "token"}),
    )
    .await
    .unwrap();
    assert_eq!(untouched.get("value"), None, "{untouched}");

    assert!(daemon.sigterm_and_wait().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_too_large_for_an_extension_is_refused_naming_its_limit_and_it_serves_on() {
    let s = Scratch::new("large");
    let installed = s.join("etc").join("extensions");
    // testext, on the SDK: reads 64 MiB. plainext, written by hand: says nothing,
    // so it is sent at most the spec's 16 MiB.
    install_testext(&installed);
    let plain = installed.join("plainext");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::copy(TESTEXT, plain.join("oc-test-extension")).unwrap();
    write_package(
        &installed,
        "plainext",
        &json!({"protocol": [1], "name": "plainext", "version": "0.1.0",
                "command": ["oc-test-extension", "spec_bound"]}),
    );
    start_broker(&s.join("bus.sock"));
    let _storaged = start_storaged(&s);
    let notify_path = s.join("notify.sock");
    let notify = tokio::net::UnixDatagram::bind(&notify_path).unwrap();
    let _daemon = start_extrunner(&s, Some(&notify_path));
    wait_ready(&notify).await;
    let bus = client(&s);
    let twenty_mib = 20 * 1024 * 1024;
    let big = json!({"blob": "x".repeat(twenty_mib)});

    let echoed = call(
        &bus,
        "ext.call",
        json!({"name": "testext", "method": "testext.echo", "params": big}),
    )
    .await
    .unwrap();
    assert_eq!(echoed["blob"].as_str().map(str::len), Some(twenty_mib));

    let err = call(
        &bus,
        "ext.call",
        json!({"name": "plainext", "method": "plainext.echo", "params": big}),
    )
    .await
    .unwrap_err();
    assert_eq!(code_of(&err), Some("invalid"), "{err}");
    assert!(
        err.to_string()
            .contains("16777216-byte message limit of `plainext`"),
        "{err}"
    );
    match &err {
        CallError::Rpc(e) => {
            let (size, limit) = e.too_large_of().expect("data.too_large");
            assert_eq!(limit, 16_777_216);
            assert!(size > limit);
        }
        other => panic!("{other:?}"),
    }
    let small = call(
        &bus,
        "ext.call",
        json!({"name": "plainext", "method": "plainext.echo", "params": {"still": "here"}}),
    )
    .await
    .unwrap();
    assert_eq!(small, json!({"still": "here"}));
    let list = call(&bus, "ext.list", json!({})).await.unwrap();
    assert_eq!(ext(&list, "plainext")["restarts"], 0, "{list}");
}
