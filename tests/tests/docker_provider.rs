#![allow(clippy::unwrap_used)]
//! The bundled `docker` container provider against a real engine: Debian's podman
//! serving the Docker Engine API on a socket of the test's own
//! (`oc_systest::podman`). The provider runs as a child process (`oc-suite
//! ext-docker`) driven over JSON-RPC on its stdin and stdout as the host drives it;
//! the plan's argv (its attach client, `oc-suite __docker-attach …`) runs as a
//! child as the executor would run it. A run carries its stdin, stdout, stderr and
//! exit status, runs in another PID and mount namespace, writes its write need and
//! sees nothing else of the host, is listed by the host's label and is gone when it
//! ends; SIGTERM to the attach client ends the container and removes it; an engine
//! that is down or an image that is missing fails closed (`sandbox_unavailable`,
//! naming the socket or the image), and the doctor check says the same.

use oc_systest::podman::{ns, skip, Podman};
use oc_systest::HANG;
use protocol::{connect, CallError, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_oc-suite");
const HOST: &str = "test-host";

/// A scratch directory of the test's own (removed on drop).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("oc-docker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn dir(&self, name: &str) -> PathBuf {
        let d = self.0.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The provider as a child process, with a host that serves nothing.
struct Provider {
    rt: tokio::runtime::Runtime,
    peer: Peer,
    _child: tokio::process::Child,
}

async fn serve_host(request: Request) -> Result<Value, RpcError> {
    Err(RpcError::method_not_found(&request.method))
}

impl Provider {
    fn start(state: &Path) -> Provider {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (child, peer) = rt.block_on(async {
            let mut child = tokio::process::Command::new(BIN)
                .arg("ext-docker")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let stdin = child.stdin.take().unwrap();
            let stdout = child.stdout.take().unwrap();
            let peer = connect(
                stdout,
                stdin,
                FnHandler(serve_host),
                Options::named("docker"),
            );
            let init = tokio::time::timeout(
                HANG,
                peer.call(
                    "initialize",
                    &json!({
                        "protocol_versions": [1],
                        "host": {"name": "test-host", "version": "0"},
                        "state_dir": state.to_str().unwrap(),
                        "container_host": HOST,
                    }),
                ),
            )
            .await
            .expect("hung")
            .unwrap();
            assert_eq!(init["protocol_version"], 1);
            (child, peer)
        });
        Provider {
            rt,
            peer,
            _child: child,
        }
    }

    fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        self.rt
            .block_on(async { tokio::time::timeout(HANG, self.peer.call(method, &params)).await })
            .expect("hung")
    }
}

/// The `sandbox_*` code and message of a refused call.
fn refused(r: Result<Value, CallError>) -> (String, String) {
    match r {
        Err(CallError::Rpc(e)) => (e.app_code().unwrap_or_default().to_owned(), e.message),
        other => panic!("expected a refusal: {other:?}"),
    }
}

fn config(p: &Podman) -> Value {
    json!({"image": p.image(), "socket": p.socket().to_str().unwrap()})
}

/// Plans a launch of `script` for `execution` with the needs given.
fn plan(
    ext: &Provider,
    config: &Value,
    execution: &str,
    script: &str,
    cwd: &Path,
    write: &[&Path],
) -> Result<Value, CallError> {
    let write: Vec<String> = write.iter().map(|p| p.display().to_string()).collect();
    ext.call(
        "container_provider.plan",
        json!({
            "type": "docker",
            "config": config,
            "execution_id": execution,
            "work_id": "work-1",
            "host": HOST,
            "launch": {"argv": ["sh", "-c", script], "cwd": cwd.to_str().unwrap(),
                       "env": {"GREETING": ""}},
            "needs": {"write": write, "deny": ["/etc/open-conduit-denied"]},
        }),
    )
}

fn create(
    ext: &Provider,
    config: &Value,
    execution: &str,
    plan: &Value,
) -> Result<Value, CallError> {
    ext.call(
        "container_provider.create",
        json!({"type": "docker", "config": config, "execution_id": execution, "plan": plan,
               "env": {"GREETING": "hello"}}),
    )
}

/// Runs the plan's argv as the executor would, with `stdin`; (status, stdout, stderr).
fn attach(plan: &Value, stdin: &str) -> (i32, String, String) {
    let mut child = attach_child(plan);
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(HANG)
        .expect("the attach client hung")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn attach_child(plan: &Value) -> std::process::Child {
    let argv: Vec<String> = serde_json::from_value(plan["argv"].clone()).unwrap();
    assert!(argv[0].ends_with("oc-suite"), "{argv:?}");
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(plan["cwd"].as_str().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in plan["env"].as_object().into_iter().flatten() {
        cmd.env(k, v.as_str().unwrap());
    }
    cmd.spawn().unwrap()
}

fn inspect(ext: &Provider, config: &Value, container: &str) -> Value {
    ext.call(
        "container_provider.inspect",
        json!({"type": "docker", "config": config, "container": container}),
    )
    .unwrap()
}

#[test]
fn a_run_in_a_container_carries_its_streams_and_status_and_is_removed() {
    let p = match Podman::start("docker-run") {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    let scratch = Scratch::new("run");
    let ext = Provider::start(&scratch.dir("state"));
    let config = config(&p);
    let workspace = scratch.dir("workspace");
    let hidden = scratch.dir("hidden");
    let secret = hidden.join("secret.txt");
    std::fs::write(&secret, "host only\n").unwrap();

    // validate names a bad field by its pointer.
    let v = ext
        .call(
            "validate",
            json!({"kind": "container", "type": "docker",
                   "config": {"image": p.image(), "network": "container:other"}}),
        )
        .unwrap();
    assert_eq!(v["diagnostics"][0]["path"], "/network", "{v}");

    // Plan and create: the container is made, not started, and labelled.
    let execution = format!("exe-run-{}", std::process::id());
    let script = format!(
        "echo out; echo err >&2; cat; \
         readlink /proc/self/ns/pid /proc/self/ns/mnt; \
         if [ -e {secret} ]; then echo seen; else echo unseen; fi; \
         echo \"$GREETING from inside\" > {ws}/out.txt; exit 3",
        secret = secret.display(),
        ws = workspace.display()
    );
    let planned = plan(
        &ext,
        &config,
        &execution,
        &script,
        &workspace,
        &[&workspace],
    )
    .unwrap();
    assert_eq!(planned["name"], format!("oc-{execution}"));
    let body = &planned["data"]["create"];
    assert_eq!(
        body["HostConfig"]["Binds"],
        json!([format!("{0}:{0}:rw", workspace.display())])
    );
    // The environment's values are not in the plan.
    assert_eq!(body["Env"], json!(["GREETING="]));
    let created = create(&ext, &config, &execution, &planned).unwrap();
    let id = created["container"].as_str().unwrap().to_owned();
    // A second create for the same execution finds the first.
    let again = create(&ext, &config, &execution, &planned).unwrap();
    assert_eq!(again["container"], id);
    let info = inspect(&ext, &config, &id);
    assert_eq!(info["state"], "created", "{info}");
    assert_eq!(info["execution_id"], execution);
    assert_eq!(info["host"], HOST);
    let listed = ext
        .call(
            "container_provider.list",
            json!({"type": "docker", "config": config, "host": HOST}),
        )
        .unwrap();
    let found: Vec<&Value> = listed["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id.as_str())
        .collect();
    assert_eq!(found.len(), 1, "{listed}");
    assert_eq!(found[0]["execution_id"], execution);
    assert_eq!(found[0]["name"], format!("oc-{execution}"));
    // Another host's label lists nothing of ours.
    let other = ext
        .call(
            "container_provider.list",
            json!({"type": "docker", "config": config, "host": "another-host"}),
        )
        .unwrap();
    assert_eq!(other["containers"], json!([]), "{other}");

    // The run: stdin in, stdout and stderr out, its exit status, then gone.
    let (status, out, err) = attach(&planned, "from stdin\n");
    assert_eq!(status, 3, "stdout: {out}\nstderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["out", "from stdin"], "{out}");
    assert!(err.contains("err"), "{err}");
    // Another PID and mount namespace than the host's.
    assert!(
        lines[2].starts_with("pid:[") && lines[3].starts_with("mnt:["),
        "{out}"
    );
    assert_ne!(lines[2], ns("self", "pid"));
    assert_ne!(lines[3], ns("self", "mnt"));
    // A host folder that is not a need is not there.
    assert_eq!(lines[4], "unseen", "{out}");
    // The write need is written, as the host sees it.
    assert_eq!(
        std::fs::read_to_string(workspace.join("out.txt")).unwrap(),
        "hello from inside\n"
    );
    assert_eq!(inspect(&ext, &config, &id)["state"], "gone");
    let removed = ext
        .call(
            "container_provider.remove",
            json!({"type": "docker", "config": config, "container": id}),
        )
        .unwrap();
    assert_eq!(removed["found"], false);

    // SIGTERM to the attach client ends the container and removes it.
    let execution = format!("exe-term-{}", std::process::id());
    let planned = plan(
        &ext,
        &config,
        &execution,
        "echo started; exec sleep 600",
        &workspace,
        &[&workspace],
    )
    .unwrap();
    let id = create(&ext, &config, &execution, &planned).unwrap()["container"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut child = attach_child(&planned);
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    let running = inspect(&ext, &config, &id);
    assert_eq!(running["state"], "running", "{running}");
    assert!(running["pid"].as_i64().unwrap() > 0, "{running}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut err = String::new();
        for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap_or_default();
            eprintln!("attach client: {line}");
            err.push_str(&line);
        }
        let _ = tx.send((child.wait(), err));
    });
    let (status, err) = rx.recv_timeout(HANG).expect("the attach client hung");
    assert_eq!(status.unwrap().code(), Some(143), "{err}");
    assert_eq!(inspect(&ext, &config, &id)["state"], "gone");

    // The attach client killed outright (its executor gone): the container runs on,
    // and the host's signal, stop and remove reach it.
    let execution = format!("exe-sweep-{}", std::process::id());
    let planned = plan(
        &ext,
        &config,
        &execution,
        "trap 'exit 7' INT; echo started; while :; do sleep 1; done",
        &workspace,
        &[&workspace],
    )
    .unwrap();
    let id = create(&ext, &config, &execution, &planned).unwrap()["container"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut child = attach_child(&planned);
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(inspect(&ext, &config, &id)["state"], "running");
    let call = |method: &str, extra: Value| {
        let mut params = json!({"type": "docker", "config": config, "container": id});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        ext.call(method, params).unwrap()
    };
    let sent = call("container_provider.signal", json!({"signal": "SIGINT"}));
    assert_eq!(sent["found"], true);
    let start = std::time::Instant::now();
    let exited = loop {
        let info = inspect(&ext, &config, &id);
        if info["state"] == "exited" {
            break info;
        }
        assert!(start.elapsed() < HANG, "SIGINT did not end it: {info}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(exited["exit_code"], 7, "{exited}");
    let listed = ext
        .call(
            "container_provider.list",
            json!({"type": "docker", "config": config, "host": HOST}),
        )
        .unwrap();
    let mine: Vec<&Value> = listed["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{listed}");
    assert_eq!(mine[0]["state"], "exited", "{listed}");
    assert_eq!(mine[0]["exit_code"], 7, "{listed}");
    assert_eq!(
        call("container_provider.stop", json!({"grace_s": 1}))["found"],
        true
    );
    assert_eq!(call("container_provider.remove", json!({}))["found"], true);
    assert_eq!(inspect(&ext, &config, &id)["state"], "gone");
    for (method, extra) in [
        ("container_provider.remove", json!({})),
        ("container_provider.stop", json!({"grace_s": 1})),
        ("container_provider.signal", json!({"signal": "SIGTERM"})),
    ] {
        assert_eq!(call(method, extra)["found"], false, "{method}");
    }
}

#[test]
fn an_engine_down_or_an_image_missing_fails_closed_and_doctor_says_so() {
    let mut p = match Podman::start("docker-down") {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    let scratch = Scratch::new("down");
    let ext = Provider::start(&scratch.dir("state"));
    let workspace = scratch.dir("workspace");
    let socket = p.socket().to_str().unwrap().to_owned();
    let doctor = |config: &Value| {
        ext.call(
            "check.run",
            json!({"check": "engine", "config": {"scopes": [{"id": "demo", "bindings": [
                {"name": "run", "executor": "shell",
                 "container": {"type": "docker", "config": config}}]}]}}),
        )
        .unwrap()
    };

    // The engine and its image: doctor is content.
    let good = config(&p);
    let r = doctor(&good);
    assert_eq!(r["status"], "ok", "{r}");

    // A missing image: create is refused naming it, and doctor names it.
    let missing = json!({"image": "localhost/oc-not-here:none", "socket": socket});
    let execution = format!("exe-noimage-{}", std::process::id());
    let planned = plan(
        &ext,
        &missing,
        &execution,
        "true",
        &workspace,
        &[&workspace],
    )
    .unwrap();
    let (code, message) = refused(create(&ext, &missing, &execution, &planned));
    assert_eq!(code, "sandbox_unavailable", "{message}");
    assert!(message.contains("localhost/oc-not-here:none"), "{message}");
    let r = doctor(&missing);
    assert_eq!(
        (r["status"].as_str(), r["code"].as_str()),
        (Some("fail"), Some("image_missing")),
        "{r}"
    );
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .contains("localhost/oc-not-here:none"),
        "{r}"
    );

    // A need that does not exist: refused, naming it (the engine would make it).
    let execution = format!("exe-noneed-{}", std::process::id());
    let absent = scratch.0.join("absent");
    let planned = plan(&ext, &good, &execution, "true", &workspace, &[&absent]).unwrap();
    let (code, message) = refused(create(&ext, &good, &execution, &planned));
    assert_eq!(code, "sandbox_unavailable", "{message}");
    assert!(message.contains(absent.to_str().unwrap()), "{message}");
    assert!(!absent.exists());

    // A created container whose engine then goes away: the attach client says
    // nothing ran (125).
    let execution = format!("exe-down-{}", std::process::id());
    let planned = plan(
        &ext,
        &good,
        &execution,
        "echo ran",
        &workspace,
        &[&workspace],
    )
    .unwrap();
    create(&ext, &good, &execution, &planned).unwrap();
    p.stop_service();
    let (status, out, err) = attach(&planned, "");
    assert_eq!(status, 125, "stdout: {out}\nstderr: {err}");
    assert!(err.contains(&socket), "{err}");
    assert!(!out.contains("ran"), "{out}");

    // The engine down: create is refused naming the socket; list and inspect are
    // errors, never empty or gone; doctor names the engine.
    let execution = format!("exe-nodaemon-{}", std::process::id());
    let planned = plan(&ext, &good, &execution, "true", &workspace, &[&workspace]).unwrap();
    let (code, message) = refused(create(&ext, &good, &execution, &planned));
    assert_eq!(code, "sandbox_unavailable", "{message}");
    assert!(message.contains(&socket), "{message}");
    let (code, _) = refused(ext.call(
        "container_provider.list",
        json!({"type": "docker", "config": good, "host": HOST}),
    ));
    assert_eq!(code, "sandbox_unavailable");
    let (code, _) = refused(ext.call(
        "container_provider.inspect",
        json!({"type": "docker", "config": good, "container": format!("oc-{execution}")}),
    ));
    assert_eq!(code, "sandbox_unavailable");
    let r = doctor(&good);
    assert_eq!(
        (r["status"].as_str(), r["code"].as_str()),
        (Some("fail"), Some("engine_unavailable")),
        "{r}"
    );
    assert!(r["detail"].as_str().unwrap().contains(&socket), "{r}");
}
