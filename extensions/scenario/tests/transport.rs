//! The transport compatibility suite: every check runs against a real child
//! process built from this workspace (`oc-scenario-extension`, on the SDK), over
//! its stdin and stdout.

#![allow(clippy::unwrap_used)]

use oc_scenario::host::{spawn, HostEvent, Running};
use protocol::{CallError, CallOptions, CancelToken, Code};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const EXE: &str = env!("CARGO_BIN_EXE_oc-scenario-extension");

/// Turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

async fn started() -> Running {
    let ext = spawn(Path::new(EXE), &[]).expect("spawn the scenario extension");
    let init = within(ext.initialize(&[1])).await.expect("initialize");
    assert_eq!(init["protocol_version"], 1);
    ext
}

async fn next_event(ext: &mut Running) -> HostEvent {
    within(ext.events.recv())
        .await
        .expect("the host's event stream ended")
}

#[tokio::test]
async fn handshake_returns_the_highest_common_version_and_the_manifest() {
    let ext = spawn(Path::new(EXE), &[]).unwrap();
    let init = within(ext.initialize(&[1, 2, 3])).await.unwrap();
    assert_eq!(init["protocol_version"], 1);
    let file: Value = serde_json::from_str(oc_scenario::MANIFEST).unwrap();
    assert_eq!(init["manifest"], file);
}

#[tokio::test]
async fn nothing_is_served_before_initialize() {
    let ext = spawn(Path::new(EXE), &[]).unwrap();
    let e = within(ext.peer.call("scenario.echo", &json!(1)))
        .await
        .unwrap_err();
    assert!(e.is(Code::Invalid), "{e:?}");
    assert!(e.to_string().contains("initialize"), "{e}");
    // And after it, the same call is served.
    within(ext.initialize(&[1])).await.unwrap();
    assert_eq!(
        within(ext.peer.call("scenario.echo", &json!(1)))
            .await
            .unwrap(),
        json!(1)
    );
}

#[tokio::test]
async fn a_version_mismatch_is_refused_the_same_way_every_time() {
    let mut refusals = Vec::new();
    for _ in 0..2 {
        let ext = spawn(Path::new(EXE), &[]).unwrap();
        let e = within(ext.initialize(&[2, 3])).await.unwrap_err();
        assert!(e.is(Code::UnsupportedProtocolVersion), "{e:?}");
        // Still refused: nothing else is served without a common version.
        let after = within(ext.peer.call("scenario.echo", &json!(1)))
            .await
            .unwrap_err();
        assert!(after.is(Code::Invalid), "{after:?}");
        refusals.push(e.rpc().cloned());
    }
    assert_eq!(refusals[0], refusals[1]);
    let message = &refusals[0].as_ref().unwrap().message;
    assert!(
        message.contains("[1]") && message.contains("[2, 3]"),
        "{message}"
    );
}

#[tokio::test]
async fn two_thousand_sequential_echoes() {
    let ext = started().await;
    for i in 0..2000 {
        let v = within(ext.peer.call("scenario.echo", &json!({"i": i})))
            .await
            .unwrap();
        assert_eq!(v, json!({"i": i}));
    }
}

#[tokio::test]
async fn thirty_two_by_fifty_concurrent_echoes_match_their_calls() {
    let ext = started().await;
    let mut tasks = Vec::new();
    for c in 0..32 {
        let peer = ext.peer.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                let v = peer.call("scenario.echo", &json!([c, i])).await.unwrap();
                assert_eq!(v, json!([c, i]));
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
}

#[tokio::test]
async fn authored_errors_cross_verbatim_and_unknown_methods_are_distinct() {
    let ext = started().await;
    let e = within(ext.peer.call(
        "scenario.fail",
        &json!({"code": "rate_limited", "message": "try again in 30 s"}),
    ))
    .await
    .unwrap_err();
    let rpc = e.rpc().unwrap();
    assert_eq!(rpc.code, -32000);
    assert_eq!(rpc.app_code(), Some("rate_limited"));
    assert_eq!(rpc.message, "try again in 30 s");

    let e = within(ext.peer.call("scenario.nope", &json!(null)))
        .await
        .unwrap_err();
    assert_eq!(e.rpc().unwrap().code, -32601);
    assert_eq!(e.code(), None);
}

#[tokio::test]
async fn a_thousand_nested_callbacks_while_serving_one_request() {
    let ext = started().await;
    let v = within(ext.peer.call("scenario.callbacks", &json!({"n": 1000})))
        .await
        .unwrap();
    assert_eq!(v, json!({"calls": 1000, "sum": (0..1000u64).sum::<u64>()}));
}

#[tokio::test]
async fn a_16_mib_artifact_in_256_kib_chunks_each_acknowledged() {
    let mut ext = started().await;
    let v = within(
        ext.peer
            .call("scenario.upload", &json!({"bytes": 16 << 20})),
    )
    .await
    .unwrap();
    assert_eq!(v["chunks"], 64);
    assert_eq!(v["committed"]["size"], 16 << 20);
    match next_event(&mut ext).await {
        HostEvent::ArtifactCommitted(data) => {
            assert_eq!(data.len(), 16 << 20);
            assert!(
                *data == oc_scenario::pattern(16 << 20),
                "every byte in place"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_artifact_in_small_chunks_is_acknowledged_per_chunk() {
    let mut ext = started().await;
    let v = within(
        ext.peer
            .call("scenario.upload", &json!({"bytes": 1000, "chunk": 64})),
    )
    .await
    .unwrap();
    assert_eq!(v["chunks"], 16);
    match next_event(&mut ext).await {
        HostEvent::ArtifactCommitted(data) => assert!(*data == oc_scenario::pattern(1000)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_extension_initiated_push_is_answered_by_the_host() {
    let mut ext = started().await;
    within(ext.peer.call("scenario.push", &json!({"n": 3})))
        .await
        .unwrap();
    assert_eq!(next_event(&mut ext).await, HostEvent::Pushed(3));
    assert_eq!(
        next_event(&mut ext).await,
        HostEvent::PushAnswered(json!({"ok": {"accepted": 3}}))
    );
}

#[tokio::test]
async fn cancellation_returns_at_once_and_reaches_the_extensions_handler() {
    let mut ext = started().await;
    let token = CancelToken::new();
    let call = tokio::spawn({
        let peer = ext.peer.clone();
        let opts = CallOptions {
            cancel: Some(token.clone()),
            ..Default::default()
        };
        async move {
            peer.call_with("scenario.wait_cancel", &json!("tag-7"), opts)
                .await
        }
    });
    // The call is in flight once an echo sent after it has come back.
    within(ext.peer.call("scenario.echo", &json!(0)))
        .await
        .unwrap();
    token.cancel();
    assert_eq!(within(call).await.unwrap(), Err(CallError::Cancelled));
    assert_eq!(
        next_event(&mut ext).await,
        HostEvent::CancelSeen(json!("tag-7"))
    );
    // Still serving.
    assert_eq!(
        within(ext.peer.call("scenario.echo", &json!(1)))
            .await
            .unwrap(),
        json!(1)
    );
}

#[tokio::test]
async fn stray_stdout_leaves_the_stream_intact() {
    let ext = started().await;
    let v = within(ext.peer.call("scenario.stray_stdout", &json!(20)))
        .await
        .unwrap();
    // The child's `cat` read /dev/null, not the protocol's input.
    assert_eq!(v, json!({"lines": 20, "child_ok": true}));
    for i in 0..50 {
        assert_eq!(
            within(ext.peer.call("scenario.echo", &json!(i)))
                .await
                .unwrap(),
            json!(i)
        );
    }
}

#[tokio::test]
async fn a_crash_mid_call_is_a_transport_error_and_a_restart_serves_again() {
    let ext = started().await;
    let e = within(ext.peer.call("scenario.crash", &json!(3)))
        .await
        .unwrap_err();
    assert!(e.is_transport(), "{e:?}");
    assert_eq!(e.code(), None, "not an authored error");
    let later = within(ext.peer.call("scenario.echo", &json!(1)))
        .await
        .unwrap_err();
    assert!(later.is_transport(), "{later:?}");
    let mut child = ext.child;
    let status = within(child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(3));

    let restarted = started().await;
    assert_eq!(
        within(restarted.peer.call("scenario.echo", &json!("again")))
            .await
            .unwrap(),
        json!("again")
    );
}

#[tokio::test]
async fn sigkill_mid_call_fails_the_pending_call_with_a_transport_error() {
    let ext = started().await;
    let pending = tokio::spawn({
        let peer = ext.peer.clone();
        async move { peer.call("scenario.sleep", &json!(600_000)).await }
    });
    within(ext.peer.call("scenario.echo", &json!(0)))
        .await
        .unwrap();
    ext.kill_group();
    let e = within(pending).await.unwrap().unwrap_err();
    assert!(e.is_transport(), "{e:?}");
    let later = within(ext.peer.call("scenario.echo", &json!(1)))
        .await
        .unwrap_err();
    assert!(later.is_transport());
}

/// The extension serves 64 requests at once (a 65th on the wire would be refused
/// `overloaded`, protocol/tests/conn.rs shows it with a raw peer); the host keeps to
/// that bound, so its 65th call waits its turn and is served, never refused.
#[tokio::test]
async fn the_65th_concurrent_call_waits_its_turn_and_is_served() {
    let mut ext = started().await;
    let mut blocked = Vec::new();
    for _ in 0..64 {
        let peer = ext.peer.clone();
        blocked.push(tokio::spawn(async move {
            peer.call("scenario.block", &json!(null)).await
        }));
    }
    let mut serving = 0;
    while serving < 64 {
        match next_event(&mut ext).await {
            HostEvent::Notification(m, _) if m == "scenario.blocked" => serving += 1,
            other => panic!("{other:?}"),
        }
    }
    let peer = ext.peer.clone();
    let waiting = tokio::spawn(async move { peer.call("scenario.echo", &json!(65)).await });
    // Not answered while the 64 hold every place (and never refused).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    ext.peer.notify("scenario.release", &json!(null)).unwrap();
    for b in blocked {
        assert_eq!(within(b).await.unwrap().unwrap(), json!("released"));
    }
    assert_eq!(within(waiting).await.unwrap().unwrap(), json!(65));
}

#[tokio::test]
async fn the_extension_exits_when_its_stdin_closes() {
    let ext = started().await;
    ext.peer.close("the host is done");
    let mut child = ext.child;
    let status = within(child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The extension's stdin and stdout, raw.
async fn raw_child() -> (
    tokio::process::Child,
    tokio::process::ChildStdin,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdin, stdout)
}

async fn closes_with_protocol_error(line: Vec<u8>, expect: &str) {
    let (mut child, mut stdin, mut stdout) = raw_child().await;
    let write = tokio::spawn(async move {
        let _ = stdin.write_all(&line).await;
        stdin
    });
    let said = within(stdout.next_line())
        .await
        .unwrap()
        .expect("an answer");
    let said: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(said["error"]["code"], -32700, "{said}");
    assert_eq!(said["id"], Value::Null);
    let message = said["error"]["message"].as_str().unwrap();
    assert!(message.contains(expect), "{message}");
    assert_eq!(within(stdout.next_line()).await.unwrap(), None, "then EOF");
    let status = within(child.wait()).await.unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "a broken connection is a failed exit"
    );
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    assert!(err.contains("protocol error"), "stderr says why: {err}");
    drop(write);
}

/// An SDK extension reads lines up to 64 MiB (and says so in `initialize`), beyond the
/// spec's 16 MiB, so a webhook body up to 25 MiB reaches it in base64.
#[tokio::test]
async fn a_line_of_64_mib_and_one_byte_closes_the_connection() {
    let max = protocol::LARGE_MESSAGE_BYTES;
    let mut line = vec![b' '; max + 1];
    line[0] = b'"';
    line[max] = b'"';
    line.push(b'\n');
    closes_with_protocol_error(line, "67108864-byte limit").await;
}

#[tokio::test]
async fn an_invalid_line_closes_the_connection() {
    closes_with_protocol_error(b"this is not json\n".to_vec(), "invalid JSON").await;
}

#[tokio::test]
async fn a_peer_that_floods_requests_and_never_reads_does_not_deadlock_us() {
    // A real process that writes requests as fast as it can and never reads its
    // input (bounded: five million lines at most).
    let line = r#"{"jsonrpc":"2.0","id":1,"method":"flood.me","params":"0123456789abcdef"}"#;
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &format!("yes '{line}' | head -n 5000000")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let peer = protocol::connect(
        stdout,
        stdin,
        protocol::NoHandler,
        protocol::Options::named("flooder"),
    );
    let reason = within(peer.closed()).await;
    match &*reason {
        protocol::CloseReason::Protocol(why) => assert!(why.contains("not reading"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Our side still works: a fresh extension serves normally meanwhile.
    let ext = started().await;
    assert_eq!(
        within(ext.peer.call("scenario.echo", &json!(1)))
            .await
            .unwrap(),
        json!(1)
    );
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = within(child.wait()).await;
}
