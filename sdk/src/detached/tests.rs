//! Unit tests of the detached run records.

#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn failures_say_why() {
    let exit = |code| Status {
        exit_code: Some(code),
        ..Status::default()
    };
    assert!(exit(0).succeeded());
    assert_eq!(exit(0).failure(), None);
    assert_eq!(exit(3).failure().unwrap(), "exited with status 3");
    let killed = Status {
        signal: Some(9),
        ..Status::default()
    };
    assert_eq!(killed.failure().unwrap(), "killed by signal 9 (SIGKILL)");
    let deadline = Status {
        signal: Some(15),
        cause: Some(Cause::Deadline),
        deadline_s: Some(30),
        ..Status::default()
    };
    assert_eq!(
        deadline.failure().unwrap(),
        "killed by deadline (30 s): killed by signal 15 (SIGTERM)"
    );
    let clean_but_interrupted = Status {
        exit_code: Some(0),
        cause: Some(Cause::Interrupt),
        reason: "operator".into(),
        ..Status::default()
    };
    assert!(!clean_but_interrupted.succeeded());
    assert_eq!(
        clean_but_interrupted.failure().unwrap(),
        "interrupted (operator): exited with status 0"
    );
}

#[test]
fn nonces_are_fresh_hex() {
    let a = nonce().unwrap();
    let b = nonce().unwrap();
    assert!(is_nonce(&a) && is_nonce(&b));
    assert_ne!(a, b);
    assert!(!is_nonce("xyz"));
}

#[test]
fn timestamps_are_rfc3339() {
    let t = now_rfc3339();
    assert_eq!(t.len(), 20, "{t}");
    assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    assert!(t.as_str() > "2024-01-01T00:00:00Z", "{t}");
}
