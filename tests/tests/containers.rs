#![allow(clippy::unwrap_used)]
//! Contained runs, with real daemons and real containers: Debian's podman serves the
//! Docker Engine API on a socket of the test's own (`oc_systest::podman`), and the
//! bundled `docker` container provider makes each run's container through it.
//!
//! A shell binding with `container: {type: docker}` runs in a container the engine
//! sees (labelled with its execution), in another PID and mount namespace, writes
//! its workspace, and does not see the host's state directory; its container is
//! removed when it ends. A SIGKILL of extrunner mid-run adopts the run through its
//! pinned container without starting it twice; a cancelled Work's container is
//! stopped and removed; with the engine down the run fails `sandbox_unavailable`
//! and nothing is launched.
//!
//! Where podman, runc or mmdebstrap is missing, or the tests do not run as root, they
//! skip saying so (and fail under OC_REQUIRE_PEERS=1).

mod common;
use common::claude::read_context;
use common::repo::{have_git, make_repo};
use common::sandbox::{
    ended, executions, fields, output, run_dir, send, started_run, starts, work_of,
};
use common::*;

use oc_systest::podman::{ns, skip, Podman};
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

fn engine(name: &str) -> Option<Podman> {
    match Podman::start(name) {
        Ok(p) => Some(p),
        Err(why) => {
            skip(&why);
            None
        }
    }
}

fn packages() -> Vec<Package> {
    let mut p = Suite::first_party();
    p.push(Package {
        name: "docker".into(),
        manifest: oc_docker::MANIFEST.into(),
        command: vec!["ext-docker".into()],
    });
    p
}

fn started(name: &str) -> Suite {
    let suite = Suite::new(Path::new(BIN), name, &packages()).unwrap();
    suite.start_all().unwrap();
    suite.apply_config(&config(&suite), HOOK).unwrap();
    suite
}

fn container(p: &Podman) -> Value {
    json!({"type": "docker", "config": {
        "image": p.image(),
        "socket": p.socket().display().to_string(),
    }})
}

fn apply(suite: &Suite, binding: Value) {
    let mut c = config(suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([binding]);
    suite.apply_config(&c, HOOK).unwrap();
    wait_for("the route", || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
}

/// The engine's containers labelled with `execution` (stopped ones too).
fn of_execution(p: &Podman, execution: &str) -> Vec<Value> {
    p.labelled(&format!("open-conduit.execution={execution}"))
}

/// Prints its namespaces, writes its workspace and probes the host's state
/// directory, which is not mounted.
const PROBES: &str = r#"echo "pidns=$(readlink /proc/self/ns/pid)"
echo "mntns=$(readlink /proc/self/ns/mnt)"
echo "$OS_WORK_ID" > mine.txt
echo "own=$(cat mine.txt)"
echo "statels=$(ls -A "$STATE" 2>/dev/null | tr '\n' ,)"
if [ -e "$STATE/containers" ]; then echo pins=SEEN; else echo pins=unseen; fi
echo done=yes
"#;

#[test]
fn a_shell_run_in_a_docker_container_works_its_workspace_and_sees_nothing_else() {
    if !have_git() {
        return;
    }
    let Some(p) = engine("ct-shell") else {
        return;
    };
    let suite = started("containers-shell");
    let bare = make_repo(&suite.dir);
    let state = suite.dir.join("state").display().to_string();
    apply(
        &suite,
        json!({"name": "run", "executor": "shell", "container": container(&p),
               "resource": {"type": "git", "config":
                   {"repository": format!("file://{}", bare.display()), "min_free_mb": 1}},
               "config": {"script": PROBES, "env": {"STATE": state}}}),
    );
    send(&suite, "c-1", 1);
    let work = work_of(&suite, 1, &[]);
    let ex = ended(&suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    let out = output(&suite, &ex);
    let f = fields(&out);
    assert_eq!(f["own"], work, "{out}");
    assert_ne!(
        f["pidns"],
        ns("self", "pid"),
        "another PID namespace: {out}"
    );
    assert_ne!(
        f["mntns"],
        ns("self", "mnt"),
        "another mount namespace: {out}"
    );
    assert_eq!(f["pins"], "unseen", "{out}");
    // Of the state directory it sees only the empty folders that lead to its
    // mounts (its workspace, its run's tmp): none of the host's files.
    let inside: Vec<&str> = f["statels"].split(',').filter(|e| !e.is_empty()).collect();
    let host: Vec<String> = std::fs::read_dir(suite.dir.join("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        inside.len() < host.len() && inside.iter().all(|e| host.iter().any(|h| h == e)),
        "inside {inside:?}, on the host {host:?}: {out}"
    );
    for e in &inside {
        assert!(
            suite.dir.join("state").join(e).is_dir(),
            "{e} is a folder on the way to a mount: {out}"
        );
    }
    // It wrote its workspace, on the host.
    let leases = suite
        .call("store.resource_leases", json!({"limit": 100}))
        .unwrap();
    let dir = leases["leases"][0]["dir"].as_str().unwrap().to_owned();
    assert_eq!(
        std::fs::read_to_string(Path::new(&dir).join("mine.txt"))
            .unwrap()
            .trim(),
        work
    );
    // The host pinned the container it made; the container is gone once it ended.
    let id = ex["id"].as_str().unwrap();
    let pin = suite
        .dir
        .join("state/containers/pins")
        .join(format!("{id}.json"));
    let pin: Value = serde_json::from_slice(&std::fs::read(&pin).unwrap()).unwrap();
    assert_eq!(pin["plan"]["name"], format!("oc-{id}"), "{pin}");
    assert!(!pin["container"].as_str().unwrap().is_empty(), "{pin}");
    wait_for("the container's removal", || {
        of_execution(&p, id).is_empty().then_some(())
    });
}

/// Records each start in its own tmp folder (`<run dir>/tmp`, mounted in the
/// container), then waits for `go` there.
const WAITER: &str = r#"echo started >> "$TMPDIR/count"
while [ ! -e "$TMPDIR/go" ]; do sleep 0.1; done
echo done=yes
"#;

#[test]
fn a_contained_run_is_adopted_after_sigkill_and_a_cancelled_works_container_is_removed() {
    let Some(p) = engine("ct-adopt") else {
        return;
    };
    let suite = started("containers-adopt");
    apply(
        &suite,
        json!({"name": "run", "executor": "shell", "container": container(&p),
               "config": {"script": WAITER}}),
    );
    send(&suite, "a-1", 1);
    let work = work_of(&suite, 1, &[]);
    let exec = started_run(&suite, &work);
    // The engine runs it, labelled with its execution.
    let listed = of_execution(&p, &exec);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["State"], "running", "{listed:?}");
    assert_eq!(listed[0]["Labels"]["open-conduit.work"], work.as_str());
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    wait_for("the adoption", || {
        suite
            .log(Daemon::Extrunner)
            .contains("adopted through its pinned container")
            .then_some(())
    });
    std::fs::write(run_dir(&suite, &exec).join("tmp/go"), "").unwrap();
    let ex = ended(&suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    assert_eq!(starts(&suite, &exec), 1, "started once");
    assert_eq!(executions(&suite, &work).len(), 1);
    wait_for("the container's removal", || {
        of_execution(&p, &exec).is_empty().then_some(())
    });

    // A cancelled Work: its container is stopped and removed.
    send(&suite, "a-2", 2);
    let second = work_of(&suite, 2, &[&work]);
    let exec = started_run(&suite, &second);
    assert_eq!(of_execution(&p, &exec).len(), 1);
    let (code, said) = cli(&suite, &["work", "cancel", &second]);
    assert_eq!(code, 0, "{said}");
    wait_for("the cancelled Work's container's removal", || {
        of_execution(&p, &exec).is_empty().then_some(())
    });
    assert_eq!(starts(&suite, &exec), 1);
}

#[test]
fn with_the_engine_down_a_contained_run_fails_sandbox_unavailable_and_nothing_runs() {
    let Some(mut p) = engine("ct-down") else {
        return;
    };
    let suite = started("containers-down");
    apply(
        &suite,
        json!({"name": "run", "executor": "shell", "container": container(&p),
               "config": {"script": WAITER}}),
    );
    p.stop_service();
    send(&suite, "d-1", 1);
    let work = work_of(&suite, 1, &[]);
    let ex = ended(&suite, &work);
    assert_eq!(ex["state"], "failed", "{ex}");
    let text = ex.to_string();
    assert!(text.contains("sandbox_unavailable"), "{ex}");
    assert!(
        text.contains(&p.socket().display().to_string()),
        "the error names the engine's socket: {ex}"
    );
    let id = ex["id"].as_str().unwrap();
    assert!(!run_dir(&suite, id).join("tmp/count").exists());
    // doctor names the engine that does not answer.
    let (_, doctor) = cli(&suite, &["doctor"]);
    let line = doctor
        .lines()
        .find(|l| l.contains("docker") && l.contains("engine"))
        .unwrap_or_else(|| panic!("no docker engine check: {doctor}"));
    assert!(
        line.contains("fail") && line.contains(&p.socket().display().to_string()),
        "{doctor}"
    );
    // config check names a bad container config by its pointer.
    let mut c = config(&suite);
    c["scopes"][0]["bindings"] = json!([{"name": "run", "executor": "shell",
        "container": {"type": "docker", "config": {"image": "debian", "network": 7,
            "colour": "blue"}},
        "config": {"script": "true"}}]);
    let file = suite.dir.join("bad.json");
    std::fs::write(&file, c.to_string()).unwrap();
    let (_, checked) = cli(&suite, &["config", "check", file.to_str().unwrap()]);
    for pointer in [
        "/scopes/0/bindings/0/container/config/image",
        "/scopes/0/bindings/0/container/config/network",
        "/scopes/0/bindings/0/container/config/colour",
    ] {
        assert!(checked.contains(pointer), "{pointer}: {checked}");
    }
    // Nothing was made on the engine either.
    p.start_service().unwrap();
    assert!(of_execution(&p, id).is_empty());
}

/// A claude-code turn (the fake `claude`) in a docker container: it runs in a mount
/// namespace of its own, cannot read the host's configuration, writes its own tmp,
/// reads its Work's context through the real `open-conduit mcp` over the run's
/// toolbelt socket (mounted, the one socket it gets), and the Work completes.
#[test]
fn a_claude_turn_in_a_docker_container_uses_its_toolbelt_and_reaches_nothing_else() {
    let Some(p) = engine("ct-claude") else {
        return;
    };
    let mut packages = packages();
    packages.push(Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    let suite = Suite::new(Path::new(BIN), "containers-claude", &packages).unwrap();
    // The toolbelt's `open-conduit` is this binary itself (a container has no
    // file of the host but its needs, and the toolbelt folder is one); the fake
    // `claude` runs it.
    let tbdir = suite.dir.join("toolbelt");
    std::fs::create_dir_all(&tbdir).unwrap();
    let oc = tbdir.join("open-conduit");
    std::fs::copy(BIN, &oc).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{}' fake-claude \"$@\"\n", oc.display()),
    );
    suite.set_args(
        Daemon::Schedulerd,
        &["--toolbelt-dir", tbdir.to_str().unwrap()],
    );
    suite.start_all().unwrap();
    let work_dir = suite.dir.join("work");
    let config_dir = suite.dir.join("claude-config");
    std::fs::create_dir_all(&work_dir).unwrap();
    std::fs::create_dir_all(&config_dir).unwrap();
    let record = config_dir.join("record.jsonl");
    let protected = suite.dir.join("etc/config.json");
    std::fs::write(&protected, "{}").unwrap();
    apply(
        &suite,
        json!({"name": "run", "executor": "claude-code", "container": container(&p),
        "config": {"binary": claude, "dir": work_dir, "env": {
            "FAKE_CLAUDE_RECORD": record,
            "FAKE_CLAUDE_STATE": "finished",
            "CLAUDE_CONFIG_DIR": config_dir,
            "FAKE_CLAUDE_PROBE": protected,
        }}}),
    );
    send(&suite, "cc-1", 7);
    let work = work_of(&suite, 7, &[]);
    let ex = ended(&suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    let recs = records(&record);
    let launch = recs
        .iter()
        .find(|r| r.get("argv").is_some())
        .unwrap_or_else(|| panic!("no launch recorded: {ex}"));
    assert_ne!(
        launch["mnt_ns"].as_str().unwrap(),
        ns("self", "mnt"),
        "claude runs in a mount namespace of its own: {launch}"
    );
    assert_eq!(launch["probe_readable"], false, "{launch}");
    assert_eq!(launch["tmp_writable"], true, "{launch}");
    let context = read_context(&recs);
    assert_eq!(
        context["result"]["structuredContent"]["work"]["id"],
        work.as_str(),
        "{context}"
    );
    let id = ex["id"].as_str().unwrap();
    assert!(suite
        .dir
        .join("state/containers/pins")
        .join(format!("{id}.json"))
        .exists());
    wait_for("the container's removal", || {
        of_execution(&p, id).is_empty().then_some(())
    });
}

/// The attach program of a running run is SIGKILLed: the run ends (its command is
/// gone) while its container runs on, unheard; extrunner's sweep stops and removes
/// it once storaged has the execution ended.
#[test]
fn a_container_whose_attach_program_was_killed_is_swept_once_its_execution_ended() {
    let Some(p) = engine("ct-sweep") else {
        return;
    };
    let suite = started("containers-sweep");
    apply(
        &suite,
        json!({"name": "run", "executor": "shell", "container": container(&p),
               "config": {"script": WAITER}}),
    );
    send(&suite, "w-1", 1);
    let work = work_of(&suite, 1, &[]);
    let exec = started_run(&suite, &work);
    let name = format!("oc-{exec}");
    let attach: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("__docker-attach") && c.contains(&name)
            })
        })
        .collect();
    assert_eq!(attach.len(), 1, "one attach program for {name}: {attach:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(attach[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // The run ends with its command; the container is still there, running.
    wait_for("the execution's end", || {
        executions(&suite, &work)
            .into_iter()
            .find(|e| e["id"] == exec.as_str() && e["state"] != "running")
    });
    // The sweep removes it (every 30 s).
    wait_for("the sweep's removal of the container", || {
        of_execution(&p, &exec).is_empty().then_some(())
    });
    assert!(suite
        .log(Daemon::Extrunner)
        .contains("removed the container of an execution that is no longer running"));
    let _ = cli(&suite, &["work", "cancel", &work]);
}
