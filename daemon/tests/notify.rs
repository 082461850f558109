#![allow(clippy::unwrap_used)]

mod common;

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::Command;
use std::time::Duration;

use common::{child, child_with_own_pid, is_child, run_ok, TempDir, HANG};
use daemon::{LogTarget, Notifier};
use nix::time::{clock_gettime, ClockId};

fn recv(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(HANG)).unwrap();
    let mut buf = vec![0u8; 65536];
    let n = sock.recv(&mut buf).unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn monotonic_usec() -> i64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() * 1_000_000 + t.tv_nsec() / 1_000
}

#[test]
fn sends_exact_datagrams_to_a_path_socket() {
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.sock");
    let server = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::for_socket(&path, None).unwrap();
    assert!(n.enabled());
    assert_eq!(n.watchdog_interval(), None);
    assert!(n.watchdog_ticker().is_none());

    n.ready().unwrap();
    assert_eq!(recv(&server), "READY=1");
    n.status("serving 3 peers").unwrap();
    assert_eq!(recv(&server), "STATUS=serving 3 peers");
    n.status("two\nlines\r\n").unwrap();
    assert_eq!(recv(&server), "STATUS=two lines  ");
    n.stopping().unwrap();
    assert_eq!(recv(&server), "STOPPING=1");
    n.watchdog().unwrap();
    assert_eq!(recv(&server), "WATCHDOG=1");
    n.extend_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(recv(&server), "EXTEND_TIMEOUT_USEC=5000000");

    // A clone shares the socket.
    n.clone().ready().unwrap();
    assert_eq!(recv(&server), "READY=1");

    let before = monotonic_usec();
    n.reloading().unwrap();
    let after = monotonic_usec();
    let msg = recv(&server);
    let (first, second) = msg.split_once('\n').unwrap();
    assert_eq!(first, "RELOADING=1");
    let usec: i64 = second
        .strip_prefix("MONOTONIC_USEC=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        before <= usec && usec <= after,
        "{before} <= {usec} <= {after}"
    );
}

#[test]
fn sends_to_an_abstract_socket() {
    let name = format!("oc-daemon-test-{}-notify", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let server = UnixDatagram::bind_addr(&addr).unwrap();
    let n = Notifier::for_socket(format!("@{name}"), Some(Duration::from_secs(10))).unwrap();
    assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(5)));
    n.watchdog().unwrap();
    assert_eq!(recv(&server), "WATCHDOG=1");
    n.ready().unwrap();
    assert_eq!(recv(&server), "READY=1");
}

#[test]
fn a_failed_send_is_returned_not_fatal() {
    let dir = TempDir::new("notify-gone");
    let n = Notifier::for_socket(dir.path().join("nobody.sock"), None).unwrap();
    assert!(n.enabled());
    assert!(n.ready().is_err());
    assert!(n.watchdog().is_err());
}

#[test]
fn rejects_unusable_addresses() {
    assert!(Notifier::for_socket("relative.sock", None).is_err());
    assert!(Notifier::for_socket("", None).is_err());
}

#[tokio::test]
async fn watchdog_ticker_ticks() {
    let dir = TempDir::new("notify-tick");
    let path = dir.path().join("notify.sock");
    let server = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::for_socket(&path, Some(Duration::from_millis(20))).unwrap();
    assert_eq!(n.watchdog_interval(), Some(Duration::from_millis(10)));
    let mut ticker = n.watchdog_ticker();
    assert!(ticker.is_some());
    for _ in 0..3 {
        tokio::time::timeout(HANG, daemon::notify::tick(&mut ticker))
            .await
            .unwrap();
        n.watchdog().unwrap();
        assert_eq!(recv(&server), "WATCHDOG=1");
    }

    // Without a watchdog the arm never fires.
    let mut none = None;
    let r = tokio::time::timeout(Duration::from_millis(50), daemon::notify::tick(&mut none)).await;
    assert!(r.is_err());
}

fn assert_env_gone() {
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        assert_eq!(std::env::var_os(var), None, "{var} is still set");
    }
    // Nor does a child process see them.
    let out = Command::new("env").output().unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(!env.contains("NOTIFY_SOCKET="), "{env}");
    assert!(!env.contains("WATCHDOG_"), "{env}");
}

#[test]
fn from_env_empty_socket_disables() {
    let mut cmd = child("child_empty_socket");
    cmd.env("NOTIFY_SOCKET", "")
        .env("WATCHDOG_USEC", "1000000")
        .env_remove("WATCHDOG_PID");
    let stderr = run_ok(cmd);
    assert!(
        stderr.contains("NOTIFY_SOCKET is set but empty"),
        "the error is not logged:\n{stderr}"
    );
}

#[test]
fn child_empty_socket() {
    if !is_child("child_empty_socket") {
        return;
    }
    daemon::log::init("oc-test", LogTarget::Stderr).unwrap();
    let n = Notifier::from_env();
    assert!(!n.enabled());
    assert_eq!(n.watchdog_interval(), None);
    n.ready().unwrap();
    n.status("anything").unwrap();
    assert_env_gone();
}

#[test]
fn from_env_with_socket_and_watchdog() {
    let dir = TempDir::new("notify-env");
    let path = dir.path().join("notify.sock");
    let server = UnixDatagram::bind(&path).unwrap();
    let mut cmd = child_with_own_pid("child_socket_and_watchdog", "WATCHDOG_PID");
    cmd.env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "4000000");
    let spawned = cmd.spawn().unwrap();
    assert_eq!(recv(&server), "READY=1");
    assert_eq!(recv(&server), "STATUS=child pid matches");
    common::check_ok(&common::wait(spawned));
}

#[test]
fn child_socket_and_watchdog() {
    if !is_child("child_socket_and_watchdog") {
        return;
    }
    let n = Notifier::from_env();
    assert!(n.enabled());
    assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(2)));
    assert_env_gone();
    n.ready().unwrap();
    n.status("child pid matches").unwrap();
}

#[test]
fn from_env_ignores_the_watchdog_of_another_pid() {
    let dir = TempDir::new("notify-other");
    let path = dir.path().join("notify.sock");
    let server = UnixDatagram::bind(&path).unwrap();
    let mut cmd = child("child_other_watchdog_pid");
    cmd.env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "4000000")
        .env("WATCHDOG_PID", "1");
    let spawned = cmd.spawn().unwrap();
    assert_eq!(recv(&server), "READY=1");
    common::check_ok(&common::wait(spawned));
}

#[test]
fn child_other_watchdog_pid() {
    if !is_child("child_other_watchdog_pid") {
        return;
    }
    let n = Notifier::from_env();
    assert!(n.enabled());
    assert_eq!(n.watchdog_interval(), None);
    assert_env_gone();
    n.ready().unwrap();
}
