#![allow(clippy::unwrap_used)]
//! The ground of the `docker` container provider, with real containers: Debian's
//! podman serves the Docker Engine API on a socket of the test's own
//! (`oc_systest::podman`), with an image made here by mmdebstrap. Over that API, with
//! hyper's client on the unix socket: the engine answers `/_ping` and `/version` and
//! has the image; a container made for an attempt (labelled with it, the workspace
//! bind-mounted, no network, no privileges, every capability dropped) writes the
//! workspace, does not see a host path that is not mounted, runs in another PID and
//! mount namespace, is found by its label (also after the engine restarted), runs a
//! command exec'd in it, stops, is removed and is no longer listed. With the engine
//! down, or no engine at all, a request fails with an error that says so (what the
//! provider maps to `sandbox_unavailable`).

use oc_systest::podman::{api, ns, skip, Podman};
use oc_systest::HANG;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

#[test]
fn an_attempt_container_is_isolated_found_by_label_stopped_and_removed() {
    let mut p = match Podman::start("engine") {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    eprintln!(
        "podman: {} storage; image tarball {}; import and service start {:?}",
        p.driver(),
        match p.built_in {
            Some(t) => format!("built in {t:?}"),
            None => "cached".into(),
        },
        p.imported_in
    );

    // The engine answers, with runc, and has the image.
    let ping = p.api("GET", "/_ping", None).unwrap();
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
    let version = p.api("GET", "/version", None).unwrap().json().unwrap();
    assert!(
        version["ApiVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{version}"
    );
    let components = version["Components"].to_string();
    assert!(components.contains("runc"), "{components}");
    let image = p
        .api("GET", &format!("/images/{}/json", p.image()), None)
        .unwrap();
    assert_eq!(image.status, 200, "{}", image.text());

    // A workspace to mount, and a host path that is not mounted.
    let scratch =
        std::env::temp_dir().join(format!("oc-podman-engine-host-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let workspace = scratch.join("workspace");
    let state = scratch.join("state");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let secret = state.join("secret.txt");
    std::fs::write(&secret, "host only\n").unwrap();

    let attempt = format!("att-{}", std::process::id());
    let label = format!("open-conduit.execution={attempt}");
    let script = "set -e; echo written-inside > /workspace/out.txt; \
                  if [ -e \"$SECRET\" ]; then echo seen; else echo unseen; fi > /workspace/secret.txt; \
                  ls /sys/class/net > /workspace/net.txt; \
                  readlink /proc/self/ns/pid > /workspace/pidns.txt; \
                  touch /workspace/ready; exec sleep 600";
    let create = json!({
        "Image": p.image(),
        "Cmd": ["sh", "-c", script],
        "Env": [format!("SECRET={}", secret.display())],
        "WorkingDir": "/workspace",
        "Labels": {
            "open-conduit.execution": attempt,
            "open-conduit.work": "work-1",
        },
        "HostConfig": {
            "Binds": [format!("{}:/workspace:rw", workspace.display())],
            "NetworkMode": "none",
            "Privileged": false,
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "Init": true,
        },
    });
    let created = p
        .api(
            "POST",
            &format!("/containers/create?name=oc-{attempt}"),
            Some(&create),
        )
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json().unwrap()["Id"].as_str().unwrap().to_owned();
    let started = p
        .api("POST", &format!("/containers/{id}/start"), None)
        .unwrap();
    assert_eq!(started.status, 204, "{}", started.text());

    // It writes the workspace, seen here; it does not see the host's state.
    let deadline = Instant::now() + HANG;
    while !workspace.join("ready").exists() {
        assert!(
            Instant::now() < deadline,
            "the container did not write its workspace within {HANG:?}: {}",
            p.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let read = |f: &str| std::fs::read_to_string(workspace.join(f)).unwrap();
    assert_eq!(read("out.txt"), "written-inside\n");
    assert_eq!(read("secret.txt"), "unseen\n");
    assert_eq!(read("net.txt"), "lo\n", "network none: only loopback");

    // Found by its label, running.
    let found = p.labelled(&label);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["Id"], id);
    assert_eq!(found[0]["State"], "running");
    assert_eq!(found[0]["Labels"]["open-conduit.execution"], attempt);
    assert!(p.labelled("open-conduit.execution=someone-else").is_empty());

    // The engine restarted: the container ran on, and is found again.
    p.stop_service();
    p.start_service().unwrap();
    assert_eq!(found_state(&p, &label), vec!["running".to_owned()]);
    assert_eq!(p.labelled(&label)[0]["Id"], id);

    // Another PID and mount namespace than this process's.
    let inspect = p
        .api("GET", &format!("/containers/{id}/json"), None)
        .unwrap()
        .json()
        .unwrap();
    let pid = inspect["State"]["Pid"].as_i64().unwrap();
    assert!(pid > 0, "{inspect}");
    let pid = pid.to_string();
    assert_ne!(ns(&pid, "pid"), ns("self", "pid"));
    assert_ne!(ns(&pid, "mnt"), ns("self", "mnt"));
    assert_eq!(read("pidns.txt").trim(), ns(&pid, "pid"));
    let host = &inspect["HostConfig"];
    assert_eq!(host["Privileged"], false, "{host}");
    assert_eq!(host["NetworkMode"], "none", "{host}");
    assert_eq!(
        inspect["Config"]["Labels"]["open-conduit.execution"],
        attempt
    );

    // A command run in it (what an operator's attach does): its output, demultiplexed.
    let exec = p
        .api(
            "POST",
            &format!("/containers/{id}/exec"),
            Some(&json!({
                "Cmd": ["sh", "-c", "echo exec-ok; readlink /proc/self/ns/pid >&2"],
                "AttachStdout": true,
                "AttachStderr": true,
            })),
        )
        .unwrap();
    assert_eq!(exec.status, 201, "{}", exec.text());
    let exec_id = exec.json().unwrap()["Id"].as_str().unwrap().to_owned();
    let run = p
        .api(
            "POST",
            &format!("/exec/{exec_id}/start"),
            Some(&json!({"Detach": false, "Tty": false})),
        )
        .unwrap();
    assert_eq!(run.status, 200, "{}", run.text());
    let (out, err) = demux(&run.body);
    assert_eq!(out, "exec-ok\n");
    assert_eq!(err.trim(), ns(&pid, "pid"));
    let ran = p
        .api("GET", &format!("/exec/{exec_id}/json"), None)
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(ran["ExitCode"], 0, "{ran}");

    // Stop, remove: no longer listed, no longer there.
    let stopped = p
        .api("POST", &format!("/containers/{id}/stop?t=10"), None)
        .unwrap();
    assert_eq!(stopped.status, 204, "{}", stopped.text());
    let after = p
        .api("GET", &format!("/containers/{id}/json"), None)
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(after["State"]["Running"], false, "{after}");
    assert_eq!(found_state(&p, &label), vec!["exited".to_owned()]);
    let removed = p
        .api("DELETE", &format!("/containers/{id}?force=true"), None)
        .unwrap();
    assert_eq!(removed.status, 204, "{}", removed.text());
    assert!(p.labelled(&label).is_empty());
    let gone = p
        .api("GET", &format!("/containers/{id}/json"), None)
        .unwrap();
    assert_eq!(gone.status, 404, "{}", gone.text());

    // The engine down: a request fails and says the engine is unavailable.
    p.stop_service();
    let down = p.api("GET", "/_ping", None).unwrap_err();
    assert!(down.contains("the engine is unavailable"), "{down}");
    assert!(down.contains(&p.socket().display().to_string()), "{down}");
    eprintln!("engine down: {down}");

    drop(p);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A raw stream without a TTY, as stdout and stderr: frames of a stream byte (1, 2),
/// three zeroes, a big-endian u32 length, the bytes.
fn demux(mut raw: &[u8]) -> (String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while raw.len() >= 8 {
        let len = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]) as usize;
        let end = (8 + len).min(raw.len());
        match raw[0] {
            2 => err.extend_from_slice(&raw[8..end]),
            _ => out.extend_from_slice(&raw[8..end]),
        }
        raw = &raw[end..];
    }
    (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

fn found_state(p: &Podman, label: &str) -> Vec<String> {
    p.labelled(label)
        .iter()
        .map(|c| c["State"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn no_engine_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("oc-podman-noengine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let check = |socket: &Path| {
        let e = api(socket, "GET", "/_ping", None).unwrap_err();
        assert!(e.contains("the engine is unavailable"), "{e}");
        assert!(e.contains(&socket.display().to_string()), "{e}");
        eprintln!("{e}");
    };
    // No socket at all.
    check(&dir.join("absent.sock"));
    // A socket file nobody listens on (a service that died).
    let stale = dir.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    check(&stale);
    // Something that accepts and hangs up without answering.
    let rude = dir.join("rude.sock");
    let listener = std::os::unix::net::UnixListener::bind(&rude).unwrap();
    let t = std::thread::spawn(move || {
        if let Ok((conn, _)) = listener.accept() {
            drop(conn);
        }
    });
    check(&rude);
    t.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
