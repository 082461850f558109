//! storaged on the bus: a real storaged process registered with a broker, called
//! through it, publishing `event.accepted`.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use daemon::bus::{Bus, BusOptions};
use protocol::{BoxFuture, Code, Handler, Peer, Reply, Request, RpcError};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const STORAGED: &str = env!("CARGO_BIN_EXE_open-conduit-storaged");
const HANG: Duration = Duration::from_secs(60);

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

async fn store_methods_through_the_bus(b: Backend) {
    let dir = std::env::temp_dir().join(format!("oc-storaged-bus-{b:?}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The real daemon finds its database where an operator says:
    // `settings.storage` in its configuration directory's config.json.
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    if let Some(url) = b.url("bus") {
        std::fs::write(dir.join("pg.url"), format!("{url}\n")).unwrap();
        let config = serde_json::json!({"settings": {"storage": {
            "backend": "postgres",
            "url_ref": format!("file:{}", dir.join("pg.url").display()),
        }}});
        std::fs::write(etc.join("config.json"), config.to_string()).unwrap();
    }
    let socket = dir.join("bus.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let broker = broker::Broker::new(broker::Config::default());
    tokio::spawn(async move {
        let _ = broker.serve(&listener).await;
    });
    let mut command = Command::new(STORAGED);
    // A failed assertion must not leave the daemon running.
    // SAFETY: one async-signal-safe call between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = command
        .arg("--state")
        .arg(dir.join("state"))
        .arg("--bus")
        .arg(&socket)
        .arg("--config-dir")
        .arg(&etc)
        .args(["--log", "stderr"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut opts = BusOptions::client(&socket).with_topics(&["event.accepted"]);
    opts.handler = Arc::new(Inbox(tx));
    opts.call_wait = HANG;
    let bus = Bus::start(opts);
    let call = |method: &'static str, params: Value| {
        let bus = bus.clone();
        async move {
            tokio::time::timeout(HANG, bus.call(method, &params))
                .await
                .unwrap()
        }
    };
    // The first call waits for storaged to register `store`.
    let methods = call("store.methods", json!({})).await.unwrap();
    assert!(
        methods["methods"].as_array().unwrap().len() > 40,
        "{methods}"
    );

    let put = call(
        "store.kv_commit",
        json!({"owner": "notes", "puts": [{"key": "a", "value": {"n": 1}}]}),
    )
    .await
    .unwrap();
    assert_eq!(put["emissions"], json!([]));
    let got = call("store.kv_get", json!({"owner": "notes", "key": "a"}))
        .await
        .unwrap();
    assert_eq!(got["value"], json!({"n": 1}));
    // The store says where its database is, and finds it whole.
    let check = call("store.check", json!({})).await.unwrap();
    assert_eq!(check["integrity"], "ok", "{check}");
    let database = check["database"].as_str().unwrap_or_default();
    match b {
        Backend::Sqlite => assert!(database.ends_with("db/conduit.db"), "{check}"),
        Backend::Postgres => assert!(database.starts_with("postgres 127.0.0.1:"), "{check}"),
    }
    // A check against a stale version is a conflict, across the bus as a code.
    let e = call(
        "store.kv_commit",
        json!({"owner": "notes", "checks": [{"key": "a", "version": "sha256:00"}], "puts": [{"key": "a", "value": 2}]}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Conflict), "{e:?}");
    // A foreign namespace is refused.
    let e = call(
        "store.kv_get",
        json!({"owner": "notes", "namespace": "github", "key": "a"}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    // Bad params are `invalid`, naming the method; an unknown method is -32601.
    let e = call("store.kv_get", json!({"nonsense": true}))
        .await
        .unwrap_err();
    assert!(
        e.is(Code::Invalid) && e.to_string().contains("store.kv_get"),
        "{e:?}"
    );
    let e = call("store.no_such_thing", json!({})).await.unwrap_err();
    assert_eq!(e.rpc().unwrap().code, -32601);

    // Accepting an event publishes `event.accepted`; a redelivery adds nothing.
    let event = json!({"events": [{"scope_id": "s", "type": "notes.note", "source": "notes",
        "delivery_id": "d1", "payload": {"text": "hi"}, "keys": ["note:1"]}]});
    let first = call("store.events_accept", event.clone()).await.unwrap();
    assert_eq!(first["events"][0]["added"], true);
    let (topic, _) = tokio::time::timeout(HANG, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(topic, "event.accepted");
    let again = call("store.events_accept", event).await.unwrap();
    assert_eq!(again["events"][0]["added"], false);
    assert_eq!(again["events"][0]["id"], first["events"][0]["id"]);
    let seq = call("store.sequence", json!({})).await.unwrap();
    assert_eq!(seq["sequence"], first["events"][0]["seq"]);

    // SIGTERM: a graceful stop.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(HANG, tokio::task::spawn_blocking(move || child.wait()))
        .await
        .expect("storaged did not stop on SIGTERM")
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

on_both!(store_methods_through_the_bus,);
