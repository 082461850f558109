#![allow(clippy::unwrap_used)]
//! `open-conduit up`, the real binary: the whole suite starts, the embedded demo turns
//! a delivery into finished Work, a daemon killed with SIGKILL is restarted, and
//! SIGINT stops everything, leaving no process of the suite or its extensions behind.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_open-conduit");
const HANG: Duration = Duration::from_secs(90);

struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    state: PathBuf,
}

impl Up {
    /// Wait for a line containing `text`; answers it.
    fn expect(&mut self, text: &str) -> String {
        let deadline = Instant::now() + HANG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(text) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no line with {text:?} within {HANG:?}; saw:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // SIGTERM first, so that up stops its daemons (SIGKILL would leave them).
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

fn call(bus: &Path, method: &str, params: Value) -> Value {
    let mut s = std::os::unix::net::UnixStream::connect(bus).unwrap();
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    v["result"].clone()
}

fn post(addr: SocketAddr, body: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /hooks/demo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split(' ').nth(1).unwrap().parse().unwrap()
}

/// `GET path` on `addr`: the status and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
    (status, body.unwrap_or_default())
}

fn completed(bus: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + HANG;
    loop {
        let works = call(
            bus,
            "store.works",
            json!({"scope_id": "demo", "state": "completed"}),
        );
        let list = works["works"].as_array().cloned().unwrap_or_default();
        if list.len() >= n {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "{} completed Work, not {n}",
            list.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run `open-conduit --bus BUS ARGS…`: (status, stdout + stderr).
fn cli(bus: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("--bus")
        .arg(bus)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn pid_in(line: &str) -> i32 {
    line.rsplit("(pid ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// `up` on a fresh state directory named `name`, its stdout read line by line.
fn start_up(name: &str) -> Up {
    let state = std::env::temp_dir().join(format!("oc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let mut child = Command::new(BIN)
        .args([
            "up",
            "--state",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Up {
        child,
        lines: rx,
        seen: Vec::new(),
        state,
    }
}

/// The live processes whose command line or working directory names `state`: the
/// daemons `up` started (their arguments) and the extensions (their package
/// directory under `<state>/bundled`).
fn of_state(state: &Path) -> Vec<(i32, String)> {
    let needle = state.to_string_lossy().to_string();
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me || !alive(pid) {
            continue;
        }
        let cmd = cmdline(pid);
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default();
        if cmd.contains(&needle) || cwd.starts_with(&needle) {
            found.push((pid, cmd));
        }
    }
    found
}

/// A signal at each moment of start-up (before and after each daemon's ready line,
/// while the configuration is applied, once ready): `up` says it stops, exits, and no
/// process of the suite is left. SIGHUP (the terminal closed) does the same.
#[test]
fn a_signal_at_any_moment_of_start_up_stops_everything() {
    use nix::sys::signal::Signal::{SIGHUP, SIGINT};
    let points: &[(&str, u64, nix::sys::signal::Signal)] = &[
        ("state in", 0, SIGINT),
        ("broker ready", 0, SIGINT),
        ("storaged ready", 0, SIGINT),
        ("extrunner ready", 0, SIGINT),
        ("schedulerd ready", 0, SIGINT),
        ("ingressd ready", 0, SIGINT),
        ("ingressd ready", 30, SIGINT),
        ("ingressd ready", 150, SIGINT),
        ("webd ready", 0, SIGINT),
        ("open-conduit: ready", 0, SIGINT),
        ("ingressd ready", 50, SIGHUP),
        ("open-conduit: ready", 0, SIGHUP),
    ];
    for (i, (after, delay_ms, signal)) in points.iter().enumerate() {
        let mut up = start_up(&format!("up-sig{i}"));
        up.expect(after);
        std::thread::sleep(Duration::from_millis(*delay_ms));
        let pid = nix::unistd::Pid::from_raw(i32::try_from(up.child.id()).unwrap());
        let sent = Instant::now();
        nix::sys::signal::kill(pid, *signal).unwrap();
        let deadline = sent + HANG;
        let status = loop {
            if let Some(s) = up.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{signal} after {after:?} (+{delay_ms} ms): up did not exit; saw:\n{}",
                up.seen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = sent.elapsed();
        // What it printed after the signal.
        while let Ok(l) = up.lines.recv_timeout(Duration::from_millis(200)) {
            up.seen.push(l);
        }
        assert!(
            up.seen.iter().any(|l| l.contains("stopping")),
            "{signal} after {after:?}: no stopping line:\n{}",
            up.seen.join("\n")
        );
        assert!(
            status.success(),
            "{signal} after {after:?} (+{delay_ms} ms): {status}:\n{}",
            up.seen.join("\n")
        );
        // The daemons and their extensions are gone (their own SIGTERM handling takes
        // a moment after up has reaped them).
        let left_deadline = Instant::now() + HANG;
        loop {
            let left = of_state(&up.state);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < left_deadline,
                "{signal} after {after:?}: left running: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{signal} after {after:?} (+{delay_ms} ms): everything stopped in {:.2} s",
            sent.elapsed().as_secs_f64().max(took.as_secs_f64())
        );
    }
}

/// A configuration an extension refuses: `up` prints the refusal with its pointer,
/// stops everything and exits non-zero, rather than saying `ready`.
#[test]
fn a_refused_configuration_fails_up_with_the_refusal_shown() {
    let dir = std::env::temp_dir().join(format!("oc-up-refused-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"scopes": [{"id": "demo", "entries": [
            {"type": "webhook", "name": "ci",
             "config": {"path": "/hooks/ci", "signature": {"scheme": "sha1"}}}
        ]}]}))
        .unwrap(),
    )
    .unwrap();
    let state = dir.join("state");
    let out = Command::new(BIN)
        .args([
            "up",
            "--state",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("the configuration is refused"), "{text}");
    assert!(
        text.contains("webhook: ") && text.contains("/signature/scheme"),
        "the refusal names the extension and the pointer: {text}"
    );
    assert!(!text.contains("open-conduit: ready"), "{text}");
    assert!(of_state(&state).is_empty(), "{:?}", of_state(&state));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The demo as a person first sees it: a short start (at most 25 lines to `ready`),
/// one line per delivery, and a clean stop with no warning and nothing stale left in
/// `<state>/run`.
#[test]
fn the_demo_starts_quietly_and_stops_cleanly() {
    let mut up = start_up("up-quiet");
    up.expect("open-conduit: ready");
    assert!(
        up.seen.len() <= 25,
        "{} lines to ready:\n{}",
        up.seen.len(),
        up.seen.join("\n")
    );
    let addr: SocketAddr = up
        .seen
        .iter()
        .find_map(|l| l.split("webhooks on http://").nth(1))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(post(addr, r#"{"hello": "quiet"}"#), 200);
    up.expect("delivery accepted");
    up.expect("attempt settled");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(up.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    up.expect("open-conduit: broker stopped");
    assert!(up.child.wait().unwrap().success());
    while let Ok(l) = up.lines.recv_timeout(Duration::from_millis(200)) {
        up.seen.push(l);
    }
    let stopping = up.seen.iter().position(|l| l.contains("stopping")).unwrap();
    let warned: Vec<&String> = up.seen[stopping..]
        .iter()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(warned.is_empty(), "warnings on a clean stop: {warned:?}");
    let left: Vec<String> = std::fs::read_dir(up.state.join("run"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert!(left.is_empty(), "left in run/: {left:?}");
}

/// `up` killed outright (SIGKILL, no chance to stop anything): its daemons, whose
/// supervisor is gone, stop by themselves, and their extensions with them.
#[test]
fn the_suite_does_not_outlive_up() {
    let mut up = start_up("up-kill");
    up.expect("open-conduit: ready");
    assert!(of_state(&up.state).len() > 5, "{:?}", of_state(&up.state));
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    let deadline = Instant::now() + HANG;
    loop {
        let left = of_state(&up.state);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every file under `dir` (sockets aside: their directory guards them) with its
/// mode: (path, mode, is a directory).
fn modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let mut out = Vec::new();
    let mut queue = vec![dir.to_path_buf()];
    while let Some(d) = queue.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            let kind = meta.file_type();
            if kind.is_socket() || kind.is_symlink() {
                continue;
            }
            if kind.is_dir() {
                queue.push(e.path());
            }
            out.push((e.path(), meta.permissions().mode() & 0o7777, kind.is_dir()));
        }
    }
    out
}

/// `up` keeps its state to its user: an existing state directory open to others
/// is made 0700 (said on stderr), and the database, the logs and a run's artifact
/// are 0600, as is everything else `up` and its daemons write there.
#[test]
fn the_state_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let state = std::env::temp_dir().join(format!("oc-up-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "up",
            "--state",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let mut up = Up {
        child,
        lines: rx,
        seen: Vec::new(),
        state: state.clone(),
    };
    up.expect(&format!(
        "{} was 0755, open to other users: made 0700",
        state.display()
    ));
    let addr: SocketAddr = up
        .expect("webhooks on http://")
        .rsplit("http://")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    up.expect("open-conduit: ready");
    assert_eq!(post(addr, r#"{"hello": "private"}"#), 200);
    let done = completed(&state.join("run/bus.sock"), 1);
    assert!(!done.is_empty());
    let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "{}: {mode:04o}", state.display());
    let all = modes(&state);
    let files = |under: &str| -> Vec<&(PathBuf, u32, bool)> {
        all.iter()
            .filter(|(p, _, dir)| !dir && p.starts_with(state.join(under)))
            .collect()
    };
    for (under, what) in [
        ("db", "the database"),
        ("logs", "the logs"),
        ("artifacts", "the run's artifact"),
    ] {
        let found = files(under);
        assert!(
            !found.is_empty(),
            "no file of {what} under {under}/: {all:?}"
        );
        for (p, mode, _) in found {
            assert_eq!(*mode, 0o600, "{what}: {} is {mode:04o}", p.display());
        }
    }
    let open: Vec<String> = all
        .iter()
        .filter(|(_, mode, _)| mode & 0o077 != 0)
        .map(|(p, mode, _)| format!("{} {mode:04o}", p.display()))
        .collect();
    assert!(open.is_empty(), "open to other users: {open:#?}");
}

#[test]
fn up_runs_the_demo_restarts_a_killed_daemon_and_stops_cleanly() {
    let state = std::env::temp_dir().join(format!("oc-up-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let mut child = Command::new(BIN)
        .args([
            "up",
            "--state",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut up = Up {
        child,
        lines: rx,
        seen: Vec::new(),
        state: state.clone(),
    };
    let mut pids = Vec::new();
    for d in [
        "broker",
        "storaged",
        "extrunner",
        "schedulerd",
        "ingressd",
        "webd",
    ] {
        pids.push((d, pid_in(&up.expect(&format!("open-conduit: {d} ready")))));
    }
    let addr: SocketAddr = up
        .expect("webhooks on http://")
        .rsplit("http://")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    up.expect("curl");
    // The web view: where, and how to sign in.
    let web_line = up.expect("web view on http://");
    let web: SocketAddr = web_line
        .split("web view on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        web_line.ends_with(&format!(
            "/ (sign in: open-conduit web login --state {})",
            state.display()
        )),
        "{web_line}"
    );
    up.expect("ready; Ctrl-C");
    let bus = state.join("run/bus.sock");
    // webd serves on the socket up passed it.
    let (status, body) = get(web, "/api/openapi.json");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"openapi\""), "{body}");

    // The demo: a delivery becomes Work that the shell binding runs to completion.
    assert_eq!(post(addr, r#"{"hello": "world"}"#), 200);
    let done = completed(&bus, 1);
    let ex = call(&bus, "store.executions", json!({"work_id": done[0]["id"]}));
    assert_eq!(ex["executions"][0]["result"]["summary"], "done", "{ex}");

    // The admin commands, on the same bus.
    let no_suite = cli(Path::new("/nonexistent/bus.sock"), &["doctor"]);
    assert_eq!(no_suite.0, 1, "{no_suite:?}");
    assert!(no_suite.1.contains("fail bus"), "{no_suite:?}");
    // doctor runs the claude-code executor's check: as root (as `up` often is) the
    // default permission mode fails every turn, and it says so with the fix.
    let doctor = cli(&bus, &["doctor"]);
    // webd is on the bus and its /healthz answers at the URL up printed.
    assert!(
        doctor
            .1
            .lines()
            .any(|l| l.starts_with("ok   web ") && l.ends_with(&format!("serving http://{web}/"))),
        "{doctor:?}"
    );
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap();
    let line = doctor
        .1
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("claude-code"))
        .unwrap_or_else(|| panic!("no claude-code check: {doctor:?}"))
        .to_owned();
    if root {
        assert!(
            line.contains("warn") && line.contains("fails every turn as root"),
            "{doctor:?}"
        );
        assert!(line.contains("IS_SANDBOX=1"), "{doctor:?}");
    } else {
        assert!(line.contains("ok"), "{doctor:?}");
    }
    let work_id = done[0]["id"].as_str().unwrap().to_owned();
    let list = cli(&bus, &["work", "list"]);
    assert!(list.0 == 0 && list.1.contains(&work_id), "{list:?}");
    // Colour only on a terminal: none in a pipe, and on a pseudo-terminal (`script`,
    // from util-linux) `completed` is green.
    assert!(!list.1.contains('\x1b'), "{list:?}");
    let tty = Command::new("script")
        .args(["-qec"])
        .arg(format!("{BIN} --bus {} work list", bus.display()))
        .arg("/dev/null")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let tty = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.contains("\x1b[32mcompleted"), "{tty:?}");
    // For scripts: an array of objects, each with id, scope and state.
    let json_list = cli(&bus, &["work", "list", "--json"]);
    let array: Vec<Value> = serde_json::from_str(&json_list.1).unwrap();
    assert!(
        array.iter().any(|w| w["id"] == work_id.as_str()
            && w["scope"] == "demo"
            && w["state"] == "completed"),
        "{array:?}"
    );
    let ext_list = cli(&bus, &["extension", "list", "--json"]);
    let array: Vec<Value> = serde_json::from_str(&ext_list.1).unwrap();
    assert!(array.iter().any(|e| e["name"] == "shell"), "{array:?}");
    let show = cli(&bus, &["work", "show", &work_id]);
    assert!(show.0 == 0, "{show:?}");
    assert!(
        show.1.contains("completed") && show.1.contains("created"),
        "{}",
        show.1
    );
    let log = cli(&bus, &["work", "log", &work_id]);
    assert!(log.0 == 0 && log.1.contains("hello"), "{log:?}");
    // A unique start of the ID will do, with or without `work_`.
    let short = cli(
        &bus,
        &["work", "show", &work_id["work_".len().."work_".len() + 8]],
    );
    assert!(short.0 == 0 && short.1.contains(&work_id), "{short:?}");
    let nosuch = cli(&bus, &["work", "log", "work_nosuch"]);
    assert_eq!(nosuch.0, 1, "{nosuch:?}");
    assert!(nosuch.1.contains("no such Work work_nosuch"), "{nosuch:?}");
    let bad_state = cli(&bus, &["work", "list", "--state", "done"]);
    assert_eq!(bad_state.0, 2, "{bad_state:?}");
    assert!(bad_state.1.contains("pending, running"), "{bad_state:?}");
    let bad_logs = cli(&bus, &["logs", "nosuch"]);
    assert_eq!(bad_logs.0, 1, "{bad_logs:?}");
    let status = cli(&bus, &["status"]);
    assert_eq!(status.0, 0, "{status:?}");
    assert!(status.1.contains("/hooks/demo"), "{}", status.1);
    // Each daemon's last STATUS= line (ingressd says where it serves).
    assert!(status.1.contains("serving webhooks on"), "{}", status.1);
    let events = cli(&bus, &["events"]);
    assert!(events.1.contains("webhook.delivery"), "{events:?}");
    let bad = state.join("bad.json");
    std::fs::write(&bad, r#"{"scopes": [{"id": "a", "entries": [{"type": "x", "name": "e", "connection": "nope"}]}]}"#).unwrap();
    let check = cli(&bus, &["config", "check", bad.to_str().unwrap()]);
    assert_eq!(check.0, 1, "{check:?}");
    assert!(
        check.1.contains("/scopes/0/entries/0/connection"),
        "{check:?}"
    );
    assert!(check.1.contains(" 1 problem\n"), "{check:?}");
    let trace = cli(
        &bus,
        &["route", "--trace", "demo", "--type", "webhook.delivery"],
    );
    assert_eq!(trace.0, 0, "{trace:?}");
    assert!(trace.1.contains("outcome"), "{trace:?}");

    // storaged SIGKILLed: up says so, starts it again, and deliveries go on.
    let storaged = pids[1].1;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(storaged),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    up.expect("storaged exited");
    let again = pid_in(&up.expect("open-conduit: storaged ready"));
    assert_ne!(again, storaged);
    pids.push(("storaged again", again));
    let deadline = Instant::now() + HANG;
    while post(addr, r#"{"hello": "again"}"#) != 200 {
        assert!(Instant::now() < deadline, "no 2xx after the restart");
        std::thread::sleep(Duration::from_millis(200));
    }
    completed(&bus, 2);
    // Healthy again.
    let status = cli(&bus, &["status"]);
    assert_eq!(status.0, 0, "{status:?}");

    // schedulerd SIGKILLed: a delivery posted while it is down is kept, and becomes
    // finished Work once up has started it again.
    let schedulerd = pids[3].1;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(schedulerd),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    up.expect("schedulerd exited");
    assert_eq!(post(addr, r#"{"hello": "meanwhile"}"#), 200);
    let again = pid_in(&up.expect("open-conduit: schedulerd ready"));
    pids.push(("schedulerd again", again));
    let deadline = Instant::now() + HANG;
    let mut checked = std::collections::BTreeSet::new();
    'found: loop {
        for w in completed(&bus, 1) {
            let id = w["id"].as_str().unwrap().to_owned();
            if checked.insert(id.clone())
                && cli(&bus, &["work", "log", &id]).1.contains("meanwhile")
            {
                break 'found;
            }
        }
        if Instant::now() > deadline {
            let list = cli(&bus, &["work", "list"]).1;
            let logs: Vec<String> = checked
                .iter()
                .map(|id| cli(&bus, &["work", "log", id]).1)
                .collect();
            panic!(
                "the delivery posted while schedulerd was down never completed:\n{list}\n{logs:#?}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = cli(&bus, &["status"]);
    assert_eq!(status.0, 0, "{status:?}");

    // webd SIGKILLed: up starts it again on the same socket, which kept its address.
    let webd = pids[5].1;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(webd),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    up.expect("webd exited");
    let again = pid_in(&up.expect("open-conduit: webd ready"));
    pids.push(("webd again", again));
    assert_eq!(get(web, "/api/openapi.json").0, 200);

    // SIGINT (Ctrl-C): everything stops, in reverse order, and no process of the
    // suite or of its extensions is left.
    let up_pid = i32::try_from(up.child.id()).unwrap();
    let family = descendants(up_pid);
    assert!(
        family.len() > 5,
        "the daemons and their extensions: {family:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up_pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    up.expect("open-conduit: broker stopped");
    let status = up.child.wait().unwrap();
    assert!(status.success(), "{status}");
    for (d, pid) in &pids {
        if *d == "storaged" || *d == "schedulerd" || *d == "webd" {
            continue; // killed above
        }
        assert!(!alive(*pid), "{d} (pid {pid}) outlived up");
    }
    for pid in family {
        assert!(!alive(pid), "pid {pid} ({}) outlived up", cmdline(pid));
    }
    assert!(!bus.exists(), "the bus socket is removed");
}

/// Every process below `root` (by parent pid), found through /proc.
fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, then the parent's pid.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r.to_owned()) else {
            continue;
        };
        if let Some(ppid) = rest.split(' ').nth(1).and_then(|p| p.parse::<i32>().ok()) {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The web view's port in use: `up` refuses at once, naming `--web-listen` and the
/// address, and leaves no bus socket behind.
#[test]
fn a_busy_web_port_is_refused_naming_the_option() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let state = std::env::temp_dir().join(format!("oc-up-busy-web-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let out = Command::new(BIN)
        .args(["up", "--state", state.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--web-listen", &addr])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("--web-listen {addr}: ")) && err.contains("in use"),
        "{err}"
    );
    assert!(!state.join("run/bus.sock").exists());
    assert!(of_state(&state).is_empty(), "{:?}", of_state(&state));
    let _ = std::fs::remove_dir_all(&state);
}
