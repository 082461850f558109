#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{check_ok, child_with_own_pid, is_child, run_ok, wait, TempDir, HANG};
use daemon::{bind_unix, Activation, Error};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

fn fd_flags(fd: BorrowedFd<'_>) -> (bool, bool) {
    let cloexec = FdFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFD).unwrap());
    let fl = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL).unwrap());
    (
        cloexec.contains(FdFlag::FD_CLOEXEC),
        fl.contains(OFlag::O_NONBLOCK),
    )
}

fn assert_env_gone() {
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        assert_eq!(std::env::var_os(var), None, "{var} is still set");
    }
}

/// Passes `listener` to the child as fd 3 (without close-on-exec), as systemd does. With
/// `close_fd4`, also makes sure that fd 4 is not open in the child (it could be inherited
/// from whatever started the tests).
fn pass_as_fd3(cmd: &mut Command, listener: &UnixListener, close_fd4: bool) {
    let raw = listener.as_raw_fd();
    // SAFETY: runs between fork and exec and calls only dup2, fcntl and close, which are
    // async-signal-safe; the descriptor `raw` stays open in the parent until after spawn,
    // and fd 4 is closed only when it is open (and nothing in the child uses it).
    unsafe {
        cmd.pre_exec(move || {
            let fd = BorrowedFd::borrow_raw(raw);
            if raw == 3 {
                fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
            } else {
                // dup2 leaves the new descriptor without close-on-exec.
                let _ = nix::unistd::dup2_raw(fd, 3)?.into_raw_fd();
            }
            if close_fd4 && fcntl(BorrowedFd::borrow_raw(4), FcntlArg::F_GETFD).is_ok() {
                drop(OwnedFd::from_raw_fd(4));
            }
            Ok(())
        });
    }
}

/// Accepts one connection on the activated listener and greets it; run by the children.
fn serve_one(listener: UnixListener) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::UnixListener::from_std(listener).unwrap();
        let (mut conn, _) = tokio::time::timeout(HANG, listener.accept())
            .await
            .unwrap()
            .unwrap();
        use tokio::io::AsyncWriteExt;
        conn.write_all(b"hello from the activated child\n")
            .await
            .unwrap();
        conn.shutdown().await.unwrap();
    });
}

fn read_greeting(path: &Path) -> String {
    let stream = UnixStream::connect(path).unwrap();
    stream.set_read_timeout(Some(HANG)).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line
}

#[test]
fn passes_a_unix_listener_by_name() {
    let dir = TempDir::new("act");
    let path = dir.path().join("bus.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let mut cmd = child_with_own_pid("child_activated", "LISTEN_PID");
    cmd.env("LISTEN_FDS", "1").env("LISTEN_FDNAMES", "bus");
    pass_as_fd3(&mut cmd, &listener, false);
    let spawned = cmd.spawn().unwrap();
    drop(listener);
    assert_eq!(read_greeting(&path), "hello from the activated child\n");
    check_ok(&wait(spawned));
}

#[test]
fn child_activated() {
    if !is_child("child_activated") {
        return;
    }
    // The descriptor arrives blocking and inheritable.
    let fd3 = unsafe { BorrowedFd::borrow_raw(3) };
    assert_eq!(fd_flags(fd3), (false, false));

    let mut activation = Activation::from_env().unwrap();
    assert_env_gone();
    assert_eq!(activation.names().collect::<Vec<_>>(), ["bus"]);
    assert!(activation.take_unix_listener("other").unwrap().is_none());
    let listener = activation.take_unix_listener("bus").unwrap().unwrap();
    assert!(activation.is_empty());
    assert_eq!(listener.as_raw_fd(), 3);
    assert_eq!(fd_flags(listener.as_fd()), (true, true));
    serve_one(listener);
}

#[test]
fn ignores_sockets_for_another_pid() {
    let dir = TempDir::new("act-other");
    let listener = UnixListener::bind(dir.path().join("bus.sock")).unwrap();
    let mut cmd = common::child("child_other_pid");
    cmd.env("LISTEN_PID", "1")
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "bus");
    pass_as_fd3(&mut cmd, &listener, false);
    run_ok(cmd);
}

#[test]
fn child_other_pid() {
    if !is_child("child_other_pid") {
        return;
    }
    let mut activation = Activation::from_env().unwrap();
    assert_env_gone();
    assert!(activation.is_empty());
    assert!(activation.take_unix_listener("bus").unwrap().is_none());
    // fd 3 is left alone: open, its flags untouched.
    let fd3 = unsafe { BorrowedFd::borrow_raw(3) };
    assert_eq!(fd_flags(fd3), (false, false));
}

#[test]
fn bad_activation_variables_are_errors() {
    let dir = TempDir::new("act-bad");
    let listener = UnixListener::bind(dir.path().join("bus.sock")).unwrap();
    // Two descriptors counted, only fd 3 passed.
    let mut cmd = child_with_own_pid("child_fd_missing", "LISTEN_PID");
    cmd.env("LISTEN_FDS", "2").env_remove("LISTEN_FDNAMES");
    pass_as_fd3(&mut cmd, &listener, true);
    run_ok(cmd);

    let mut cmd = child_with_own_pid("child_count_not_a_number", "LISTEN_PID");
    cmd.env("LISTEN_FDS", "one");
    run_ok(cmd);
}

#[test]
fn child_fd_missing() {
    if !is_child("child_fd_missing") {
        return;
    }
    let err = Activation::from_env().unwrap_err();
    assert!(matches!(err, Error::Fd { fd: 4, .. }), "{err}");
    assert!(err.to_string().contains("fd 4"), "{err}");
    assert!(err.to_string().contains("not open"), "{err}");
    assert_env_gone();
}

#[test]
fn child_count_not_a_number() {
    if !is_child("child_count_not_a_number") {
        return;
    }
    let err = Activation::from_env().unwrap_err();
    assert_eq!(err.to_string(), "invalid LISTEN_FDS=\"one\": not a number");
    assert_env_gone();
}

#[test]
fn under_systemd_socket_activate() {
    if !Path::new(SOCKET_ACTIVATE).exists() {
        println!("skipped: {SOCKET_ACTIVATE} is not installed");
        return;
    }
    let dir = TempDir::new("act-sa");
    let path = dir.path().join("x.sock");
    let name = "child_socket_activate";
    let spawned = Command::new(SOCKET_ACTIVATE)
        .arg("-l")
        .arg(&path)
        .arg("--fdname=bus")
        .arg(format!("-E{}={name}", common::CHILD_VAR))
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // systemd-socket-activate starts the child at the first connection.
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < HANG, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(read_greeting(&path), "hello from the activated child\n");
    check_ok(&wait(spawned));
}

#[test]
fn child_socket_activate() {
    if !is_child("child_socket_activate") {
        return;
    }
    let mut activation = Activation::from_env().unwrap();
    assert_env_gone();
    let listener = activation.take_unix_listener("bus").unwrap().unwrap();
    assert_eq!(fd_flags(listener.as_fd()), (true, true));
    serve_one(listener);
}

#[test]
fn bind_unix_creates_the_directory_and_sets_mode_and_flags() {
    let dir = TempDir::new("bind");
    let path = dir.path().join("run/open-conduit/bus.sock");
    let listener = bind_unix(&path, 0o660).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
    assert_eq!(fd_flags(listener.as_fd()), (true, true));
    assert_eq!(
        listener.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    let mut client = UnixStream::connect(&path).unwrap();
    client.write_all(b"x").unwrap();
}

#[test]
fn bind_unix_replaces_a_stale_socket_only() {
    let dir = TempDir::new("bind-stale");
    let path = dir.path().join("bus.sock");

    // A socket file whose listener is gone is replaced.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let live = bind_unix(&path, 0o600).unwrap();

    // A live one is not.
    let err = bind_unix(&path, 0o600).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(
        err.to_string(),
        format!("another process is listening on {}", path.display())
    );
    // ... and still works.
    UnixStream::connect(&path).unwrap();
    assert!(live.accept().is_ok());

    // Nor is a file that is not a socket.
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"data").unwrap();
    let err = bind_unix(&file, 0o600).unwrap_err();
    assert!(err.to_string().contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"data");
}
