//! Two hosts on one PostgreSQL database: each storaged (a real process on its
//! own broker) publishes on its own bus what the other host wrote
//! (`event.accepted`, `config.applied`), and the second host reads the first's
//! events.

#![allow(clippy::unwrap_used)]

use daemon::bus::{Bus, BusOptions};
use protocol::{BoxFuture, Handler, Peer, Reply, Request, RpcError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// One host: a broker, a storaged on the shared database, and a client that
/// hears the nudges.
struct Host {
    child: Child,
    bus: Bus,
    inbox: mpsc::UnboundedReceiver<(String, Value)>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn host(dir: &Path, url_file: &Path) -> Host {
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    let config = json!({"settings": {"storage": {
        "backend": "postgres",
        "url_ref": format!("file:{}", url_file.display()),
    }}});
    std::fs::write(dir.join("etc/config.json"), config.to_string()).unwrap();
    let socket = dir.join("bus.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let broker = broker::Broker::new(broker::Config::default());
    tokio::spawn(async move {
        let _ = broker.serve(&listener).await;
    });
    let mut command = Command::new(STORAGED);
    // SAFETY: one async-signal-safe call between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    let child = command
        .arg("--state")
        .arg(dir.join("state"))
        .arg("--bus")
        .arg(&socket)
        .arg("--config-dir")
        .arg(dir.join("etc"))
        .args(["--log", "stderr"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, inbox) = mpsc::unbounded_channel();
    let mut opts = BusOptions::client(&socket).with_topics(&["event.accepted", "config.applied"]);
    opts.handler = Arc::new(Inbox(tx));
    opts.call_wait = HANG;
    let bus = Bus::start(opts);
    bus.connected(HANG).await.unwrap();
    Host { child, bus, inbox }
}

impl Host {
    async fn call(&self, method: &str, params: Value) -> Value {
        tokio::time::timeout(HANG, self.bus.call(method, &params))
            .await
            .unwrap_or_else(|_| panic!("{method} hung"))
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// The next nudge of `topic` (others are passed over).
    async fn heard(&mut self, topic: &str) -> Value {
        loop {
            let (t, params) = tokio::time::timeout(HANG, self.inbox.recv())
                .await
                .unwrap_or_else(|_| panic!("no {topic} nudge within {HANG:?}"))
                .unwrap();
            if t == topic {
                return params;
            }
        }
    }

    /// Drop the nudges heard so far.
    fn forget(&mut self) {
        while self.inbox.try_recv().is_ok() {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_hears_what_the_other_wrote() {
    let Some(cluster) = oc_pgtest::shared_or_skip("each_host_hears_what_the_other_wrote") else {
        return;
    };
    let dir: PathBuf = std::env::temp_dir().join(format!("oc-nudges-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = cluster.create_database("nudges").unwrap();
    let url_file = dir.join("pg.url");
    std::fs::write(&url_file, &url).unwrap();
    let mut a = host(&dir.join("a"), &url_file).await;
    let mut b = host(&dir.join("b"), &url_file).await;
    // Both are up and agree on the database.
    a.call("store.sequence", json!({})).await;
    b.call("store.sequence", json!({})).await;
    // Let each listener connect (a nudge sent before it listens is not heard:
    // that is what the daemons' own timers are for).
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.forget();
    b.forget();

    let event = json!({"events": [{"scope_id": "s", "type": "notes.note", "source": "notes",
        "delivery_id": "d1", "payload": {"text": "hi"}, "keys": ["note:1"]}]});
    let first = a.call("store.events_accept", event.clone()).await;
    assert_eq!(first["events"][0]["added"], true);
    // A's own bus hears it from A, B's bus from PostgreSQL.
    assert_eq!(
        a.heard("event.accepted").await["method"],
        "store.events_accept"
    );
    assert_eq!(
        b.heard("event.accepted").await["method"],
        "store.events_accept"
    );
    // B reads the event A kept, and the same delivery through B is the same
    // event.
    let seq = b.call("store.sequence", json!({})).await;
    assert_eq!(seq["sequence"], first["events"][0]["seq"]);
    let again = b.call("store.events_accept", event).await;
    assert_eq!(again["events"][0]["added"], false);
    assert_eq!(again["events"][0]["id"], first["events"][0]["id"]);

    // A configuration applied through B reaches A's daemons.
    let applied = b
        .call("store.config_apply", json!({"config": {"scopes": []}}))
        .await;
    assert_eq!(applied["changed"], true);
    let heard = a.heard("config.applied").await;
    assert_eq!(heard["generation"], applied["generation"]);
    let current = a.call("store.config_current", json!({})).await;
    assert_eq!(current["generation"], applied["generation"]);
    drop(a);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
}
