//! Shutdown (the spec's Lifecycle step 6) against the real scenario extension:
//! after `shutdown` it answers `shutting_down` to new requests, finishes or
//! cancels the requests in flight, and exits by itself while its stdin is still
//! open.

#![allow(clippy::unwrap_used)]

use oc_scenario::host::{HostEvent, ScenarioHost};
use protocol::{Code, Peer};
use serde_json::{json, Value};
use std::os::fd::AsFd;
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::mpsc;

const EXE: &str = env!("CARGO_BIN_EXE_oc-scenario-extension");

/// Turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// The extension, with this shutdown grace, initialized, with a copy of its stdin held apart from the
/// connection: it stays open whatever the connection does, until the test
/// drops it.
struct Held {
    child: tokio::process::Child,
    peer: Peer,
    events: mpsc::UnboundedReceiver<HostEvent>,
    _stdin: tokio::process::ChildStdin,
}

async fn started(grace: Duration) -> Held {
    let mut child = tokio::process::Command::new(EXE)
        .arg(oc_scenario::SHUTDOWN_GRACE_ARG)
        .arg(grace.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let copy = stdin.as_fd().try_clone_to_owned().unwrap();
    let writer = tokio::net::unix::pipe::Sender::from_owned_fd(copy).unwrap();
    let (tx, events) = mpsc::unbounded_channel();
    let peer = protocol::connect(
        stdout,
        writer,
        ScenarioHost::new(tx),
        protocol::Options::named("shutdown test host"),
    );
    let init = within(peer.call(
        "initialize",
        &json!({"protocol_versions": [1], "host": {"name": "test", "version": "0"}}),
    ))
    .await
    .unwrap();
    assert_eq!(init["protocol_version"], 1);
    Held {
        child,
        peer,
        events,
        _stdin: stdin,
    }
}

impl Held {
    async fn event(&mut self) -> HostEvent {
        within(self.events.recv()).await.expect("events ended")
    }

    /// Exits by itself: its stdin is still open (`_stdin` is held).
    async fn exit_code(&mut self) -> Option<i32> {
        within(self.child.wait()).await.unwrap().code()
    }
}

#[tokio::test]
async fn after_shutdown_a_call_in_flight_finishes_and_the_extension_exits_with_stdin_open() {
    // A grace longer than the hang bound: the call is never cancelled here.
    let mut ext = started(HANG * 10).await;
    let blocked = tokio::spawn({
        let peer = ext.peer.clone();
        async move { peer.call("scenario.block", &json!(null)).await }
    });
    match ext.event().await {
        HostEvent::Notification(m, _) if m == "scenario.blocked" => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        within(ext.peer.call("shutdown", &json!({}))).await.unwrap(),
        json!({})
    );
    // A new request is refused; the one in flight is still being served.
    let refused = within(ext.peer.call("scenario.echo", &json!(1)))
        .await
        .unwrap_err();
    assert!(refused.is(Code::ShuttingDown), "{refused:?}");
    assert!(!blocked.is_finished(), "the blocked call was not ended");
    // Let it finish: it is answered with its result, then the process exits 0.
    ext.peer.notify("scenario.release", &Value::Null).unwrap();
    assert_eq!(within(blocked).await.unwrap().unwrap(), json!("released"));
    assert_eq!(ext.exit_code().await, Some(0));
    within(ext.peer.closed()).await;
}

#[tokio::test]
async fn after_shutdown_a_call_that_never_ends_is_cancelled_and_the_extension_exits() {
    let mut ext = started(Duration::from_millis(100)).await;
    let waiting = tokio::spawn({
        let peer = ext.peer.clone();
        async move {
            peer.call("scenario.wait_cancel", &json!("in flight at shutdown"))
                .await
        }
    });
    // In flight once a call sent after it has been answered.
    within(ext.peer.call("scenario.echo", &json!(0)))
        .await
        .unwrap();
    assert_eq!(
        within(ext.peer.call("shutdown", &json!({}))).await.unwrap(),
        json!({})
    );
    // After the grace it is cancelled: answered -32800, and its handler saw it.
    let e = within(waiting).await.unwrap().unwrap_err();
    assert_eq!(e.rpc().map(|e| e.code), Some(-32800), "{e:?}");
    assert!(e.is(Code::Cancelled), "{e:?}");
    assert_eq!(
        ext.event().await,
        HostEvent::CancelSeen(json!("in flight at shutdown"))
    );
    assert_eq!(ext.exit_code().await, Some(0));
}

#[tokio::test]
async fn with_nothing_in_flight_shutdown_ends_the_extension_at_once() {
    // Nothing to wait for: it exits without waiting out even a long grace.
    let mut ext = started(HANG * 10).await;
    assert_eq!(
        within(ext.peer.call("shutdown", &json!({}))).await.unwrap(),
        json!({})
    );
    assert_eq!(ext.exit_code().await, Some(0));
    // It closed its side: the host's connection ends as the peer's close.
    let reason = within(ext.peer.closed()).await;
    assert!(
        matches!(*reason, protocol::CloseReason::PeerClosed),
        "{reason}"
    );
}
