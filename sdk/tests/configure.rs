//! `configure` as the SDK serves it: the migration first when the host's
//! recorded KV layout is older than the manifest's, then the configure handler;
//! a failed migration fails configure.

#![allow(clippy::unwrap_used)]

use protocol::{CallError, Code, NoHandler, Options, RpcError};
use serde_json::{json, Value};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

const MANIFEST: &str =
    r#"{"protocol":[1],"name":"layout","version":"2.0.0","command":["x"],"kv_version":2}"#;

type Log = Arc<Mutex<Vec<String>>>;

fn extension(log: &Log, migrate_fails: bool, with_configure: bool) -> sdk::Extension {
    let (l1, l2) = (log.clone(), log.clone());
    let ext = sdk::Extension::new(MANIFEST)
        .unwrap()
        .on_migrate(move |_ctx, from, to| {
            l1.lock().unwrap().push(format!("migrate {from}->{to}"));
            async move {
                if migrate_fails {
                    Err(RpcError::new(Code::Conflict, "note/a kept changing"))
                } else {
                    Ok(())
                }
            }
        });
    if !with_configure {
        return ext;
    }
    ext.on_configure(move |_ctx, params: protocol::wire::ConfigureParams| {
        l2.lock().unwrap().push(format!(
            "configure {}/{}",
            params.kv.stored, params.kv.declared
        ));
        async { Ok(protocol::wire::ConfigureResult::default()) }
    })
}

/// Serve `ext` on one end of a socket pair; answers the host's peer on the other.
async fn serve(ext: sdk::Extension) -> protocol::Peer {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let input = OwnedFd::from(theirs.try_clone().unwrap());
    let output = OwnedFd::from(theirs);
    tokio::spawn(sdk::serve_fds(ext, input, output));
    ours.set_nonblocking(true).unwrap();
    let (r, w) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
    let peer = protocol::connect(r, w, NoHandler, Options::named("test host"));
    peer.call("initialize", &json!({"protocol_versions": [1], "host": {"name": "t", "version": "0"}, "state_dir": "/tmp"}))
        .await
        .unwrap();
    peer
}

fn configure(stored: u32, declared: u32) -> Value {
    json!({"kv": {"stored": stored, "declared": declared}})
}

#[tokio::test]
async fn an_older_layout_is_migrated_before_configure() {
    let log: Log = Arc::default();
    let peer = serve(extension(&log, false, true)).await;
    peer.call("configure", &configure(1, 2)).await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["migrate 1->2", "configure 1/2"]);
}

#[tokio::test]
async fn a_current_layout_is_not_migrated_and_configure_defaults_to_empty() {
    let log: Log = Arc::default();
    let peer = serve(extension(&log, false, false)).await;
    let answer = peer.call("configure", &configure(2, 2)).await.unwrap();
    assert_eq!(answer, json!({}));
    assert!(log.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_migration_fails_configure() {
    let log: Log = Arc::default();
    let peer = serve(extension(&log, true, true)).await;
    let err = peer.call("configure", &configure(1, 2)).await.unwrap_err();
    let CallError::Rpc(e) = err else {
        panic!("not an rpc error: {err}")
    };
    assert!(e.is(Code::Conflict), "{e:?}");
    assert!(
        e.message.contains("migrating the KV layout 1 to 2"),
        "{}",
        e.message
    );
    assert_eq!(*log.lock().unwrap(), ["migrate 1->2"]);
}
