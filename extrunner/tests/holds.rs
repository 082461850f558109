//! `work.settle_hold` through the scoped host, end to end: a broker on a real unix
//! socket, storaged's service on it, and the host serving a start gate (`people`,
//! permission `work.start_gate`) over a socket pair, bound as the runner binds it. The
//! package settles only its own holds, on Work of its configured scopes, once per key.

#![allow(clippy::unwrap_used)]

use daemon::bus::{Bus, BusOptions};
use extrunner::configuration::Configuration;
use extrunner::host::{BoundIdentity, Identity, ScopedHost};
use protocol::{CallError, NoHandler, Options, Peer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const HANG: Duration = Duration::from_secs(60);

const MANIFEST: &str = r#"{
  "protocol": [1], "name": "people", "version": "1.0.0", "command": ["bin/people"],
  "permissions": ["work.start_gate"],
  "provides": {"extensions": [{"type": "people"}], "start_gate": true}
}"#;

struct Harness {
    dir: PathBuf,
    store: Bus,
    ext: Peer,
    _host: Peer,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Harness {
    async fn start() -> Harness {
        let dir = std::env::temp_dir().join(format!(
            "oc-extrunner-holds-{}-{}",
            std::process::id(),
            storaged::util::new_id("t")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("bus.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let broker = broker::Broker::new(broker::Config::default());
        tokio::spawn(async move {
            let _ = broker.serve(&listener).await;
        });
        let store = storaged::Store::open(&dir.join("state"), storaged::Limits::default()).unwrap();
        let service = storaged::service::Service::new(store, Arc::new(OnceLock::new()));
        let _service = Bus::start(BusOptions::service(
            &socket,
            "storaged",
            &["store"],
            Arc::new(service),
        ));
        let mut opts = BusOptions::client(&socket);
        opts.call_wait = HANG;
        let client = Bus::start(opts);
        tokio::time::timeout(HANG, client.call("store.methods", &json!({})))
            .await
            .unwrap()
            .unwrap();
        let manifest = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        let doc = protocol::config::Config::parse(&json!({"scopes": [
            {"id": "s1", "entries": [{"type": "people", "name": "people"}]},
            {"id": "s2"}
        ]}))
        .unwrap();
        let ec = doc.for_extension(&manifest, "g1");
        assert_eq!(ec.scopes, vec!["s1".to_owned()]);
        let configuration = Arc::new(Configuration::new(Some(manifest.clone())));
        configuration.set(ec.params, BTreeMap::new());
        configuration.set_document(Arc::new(doc));
        let identity = Identity::new(manifest, ec.scopes, ec.connections);
        let host = ScopedHost::new(BoundIdentity::new(identity), client.clone())
            .with_configuration(configuration);
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (ar, aw) = a.into_split();
        let (br, bw) = b.into_split();
        let host_peer = protocol::connect(ar, aw, host, Options::named("host"));
        let ext = protocol::connect(br, bw, NoHandler, Options::named("extension people"));
        Harness {
            dir,
            store: client,
            ext,
            _host: host_peer,
        }
    }

    async fn settle(&self, params: Value) -> Result<Value, CallError> {
        tokio::time::timeout(HANG, self.ext.call("work.settle_hold", &params))
            .await
            .unwrap()
    }

    async fn store(&self, method: &str, params: Value) -> Value {
        tokio::time::timeout(HANG, self.store.call(method, &params))
            .await
            .unwrap()
            .unwrap()
    }

    /// A pending Work in `scope`, held by `owner`.
    async fn held(&self, scope: &str, key: &str, owner: &str) -> String {
        let accepted = self
            .store(
                "store.events_accept",
                json!({"events": [{"scope_id": scope, "type": "people.asked",
                    "source": "people", "delivery_id": key, "payload": {}, "keys": [key]}]}),
            )
            .await;
        let routed = self
            .store(
                "store.route_decide",
                json!({"seq": accepted["events"][0]["seq"], "scope_id": scope,
                    "outcome": {"type": "create", "kind": "work", "keys": [key]}}),
            )
            .await;
        let id = routed["work_id"].as_str().unwrap().to_owned();
        self.store(
            "store.work_hold",
            json!({"work_id": id, "owner": owner, "reason": "waiting"}),
        )
        .await;
        id
    }

    async fn work(&self, id: &str) -> Value {
        self.store("store.work_get", json!({"id": id})).await["work"].clone()
    }
}

fn refused(r: Result<Value, CallError>) -> (String, String) {
    match r {
        Err(CallError::Rpc(e)) => (e.app_code().unwrap_or("?").to_owned(), e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_gate_settles_only_its_own_holds_in_its_scopes_once_per_key() {
    let h = Harness::start().await;
    let mine = h.held("s1", "k:1", "people").await;
    let others = h.held("s1", "k:2", "budget").await;
    let elsewhere = h.held("s2", "k:3", "people").await;
    let refused_one = h.held("s1", "k:4", "people").await;

    // Another package's hold: nothing settled, the hold stays.
    let r = h
        .settle(json!({"work_id": others, "admit": true, "key": "a-2"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": false}));
    assert_eq!(h.work(&others).await["hold"]["owner"], "budget");
    // A Work outside its scopes reads as none.
    let (code, message) = refused(
        h.settle(json!({"work_id": elsewhere, "admit": true, "key": "a-3"}))
            .await,
    );
    assert_eq!(code, "not_found");
    assert_eq!(message, format!("no Work {elsewhere}"));
    assert_eq!(h.work(&elsewhere).await["hold"]["owner"], "people");
    let (code, _) = refused(
        h.settle(json!({"work_id": mine, "admit": true, "key": ""}))
            .await,
    );
    assert_eq!(code, "invalid");

    // Its own hold: admitted once; the same key again settles nothing.
    let r = h
        .settle(json!({"work_id": mine, "admit": true, "reason": "hours are open", "key": "a-1"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": true}));
    let work = h.work(&mine).await;
    assert!(work.get("hold").is_none(), "{work}");
    assert_eq!(work["admitted"], json!(["people"]));
    assert_eq!((work["state"].as_str()), Some("pending"));
    let r = h
        .settle(json!({"work_id": mine, "admit": true, "key": "a-1"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": false}));

    // Refused: the Work is cancelled.
    let r = h
        .settle(json!({"work_id": refused_one, "admit": false, "reason": "closed on Sundays", "key": "a-4"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": true}));
    assert_eq!(h.work(&refused_one).await["state"], "cancelled");
}
