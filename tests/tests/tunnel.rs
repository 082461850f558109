#![allow(clippy::unwrap_used)]
//! Webhook tunnels, with real daemons and a real OpenSSH server: tunneld runs the
//! bundled `ssh` provider against an `sshd` on loopback (its own host key and an
//! authorised key made here with ssh-keygen), publishes the URL, and a POST to the
//! forwarded port on the server's side is kept; SIGKILL of the ssh child clears the URL
//! and it comes back; SIGKILL of tunneld, then of extrunner, and the tunnel comes back
//! with one ssh left running. A provider that publishes a credential-bearing or
//! non-http URL is refused, logged, not published.

mod common;
use common::sshd::{free_port, skip, Sshd};
use common::*;

use oc_systest::{post, sign_sha256, Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn packages() -> Vec<Package> {
    let mut p = Suite::first_party();
    p.push(Package {
        name: "ssh".into(),
        manifest: oc_ssh::MANIFEST.into(),
        command: vec!["ext-ssh".into()],
    });
    p.push(Package {
        name: "cloudflared".into(),
        manifest: oc_cloudflared::MANIFEST.into(),
        command: vec!["ext-cloudflared".into()],
    });
    p.push(Package {
        name: "ngrok".into(),
        manifest: oc_ngrok::MANIFEST.into(),
        command: vec!["ext-ngrok".into()],
    });
    p.push(Package {
        name: "badtunnel".into(),
        manifest: oc_systest::badtunnel::MANIFEST.into(),
        command: vec!["ext-badtunnel".into()],
    });
    p
}

fn with_tunnel(suite: &Suite, provider: &str, tunnel_config: Value) -> Value {
    let mut doc = config(suite);
    doc["settings"] = json!({"webhooks": {
        "public_url": "https://configured.example",
        "tunnel": {"provider": provider, "config": tunnel_config}}});
    doc
}

/// Wait until `f` is true (or fail past HANG, saying `what`).
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !f() {
        assert!(Instant::now() < deadline, "{what} within {HANG:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn stored_url(suite: &Suite) -> String {
    suite
        .call("store.tunnel_get", json!({}))
        .ok()
        .and_then(|v| {
            v.pointer("/tunnel/url")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// The pids of the ssh processes whose command line has `spec` after `-R`.
fn ssh_pids(spec: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_ssh = args
            .first()
            .is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "ssh"));
        if is_ssh && args.windows(2).any(|w| w[0] == "-R" && w[1] == spec) {
            out.push(pid);
        }
    }
    out
}

fn deliver_to(addr: SocketAddr, id: &str, body: &[u8]) -> std::io::Result<oc_systest::Response> {
    post(
        addr,
        HOOK,
        &[
            ("Content-Type", "application/json".into()),
            ("X-Delivery-Id", id.into()),
            ("X-Signature-256", sign_sha256(SECRET.as_bytes(), body)),
        ],
        body,
    )
}

/// The extension `name`'s configure params as it last saw them is not observable
/// from outside; what extrunner sends is: the public URL in `ext.inspect`, else the
/// log line it writes when the tunnel's URL changed.
fn extrunner_reconfigured(suite: &Suite, url: &str) -> bool {
    suite
        .log(Daemon::Extrunner)
        .lines()
        .any(|l| l.contains("the tunnel's public URL changed") && l.contains(url))
}

#[test]
fn an_ssh_tunnel_publishes_the_url_forwards_webhooks_and_comes_back() {
    let suite = Suite::new(Path::new(BIN), "tunnel-ssh", &packages()).unwrap();
    let sshd = match Sshd::start(&suite.dir.join("sshd")) {
        Ok(s) => s,
        Err(why) => return skip(&format!("no OpenSSH server: {why}")),
    };
    suite.start_all().unwrap();
    suite.start(Daemon::Tunneld).unwrap();
    let remote_port = free_port();
    let listen = suite.http.to_string();
    let spec = format!("{remote_port}:{listen}");
    // The server's side of the forward is the public URL here: plain HTTP on its
    // loopback, so that doctor's round trip can be made for real.
    let public = format!("http://127.0.0.1:{remote_port}");
    let tunnel = json!({
        "host": "127.0.0.1", "port": sshd.port, "user": sshd.user,
        "remote_port": remote_port, "remote_bind": "127.0.0.1",
        "url": "http://127.0.0.1:{remote_port}",
        // The key is a connection's secret: the provider writes it to a file of the
        // run's own, removed when the run ends.
        "connection": "tunnel-key",
        "known_hosts": sshd.dir.join("known_hosts").display().to_string(),
    });
    let spec = format!("127.0.0.1:{spec}");
    let mut doc = with_tunnel(&suite, "ssh", tunnel);
    doc["connections"].as_array_mut().unwrap().push(json!({
        "name": "tunnel-key", "type": "ssh-key",
        "secret_refs": {"private_key": format!("file:{}", sshd.dir.join("client_key").display())}}));
    suite.apply_config(&doc, HOOK).unwrap();

    // Published: in the store, in tunnel.status, and sent to the extensions.
    until("the tunnel's URL is published", || {
        stored_url(&suite) == public
    });
    let status = suite.call("tunnel.status", json!({})).unwrap();
    assert_eq!(status["url"], public.as_str(), "{status}");
    assert_eq!(status["package"], "ssh");
    until("extrunner configures the extensions with it", || {
        extrunner_reconfigured(&suite, &public)
    });
    assert_eq!(ssh_pids(&spec).len(), 1, "one ssh");

    // A POST on the server's side of the forward reaches ingressd and is kept.
    let forwarded: SocketAddr = format!("127.0.0.1:{remote_port}").parse().unwrap();
    let r = deliver_to(forwarded, "through-the-tunnel", br#"{"number": 7}"#).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    until("the delivery is kept", || {
        hook_events(&suite).iter().any(|e| {
            e["payload"]["data"]["number"] == 7 || e.to_string().contains("through-the-tunnel")
        })
    });

    // doctor sends a request to the public URL's /healthz, which comes back to this
    // ingressd through the tunnel; `status` prints the URL.
    let doctor = Command::new(BIN)
        .args(["open-conduit", "--bus"])
        .arg(&suite.bus)
        .arg("doctor")
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    let line = doctor
        .lines()
        .find(|l| l.contains("public-url"))
        .unwrap_or_else(|| panic!("no public-url check: {doctor}"));
    assert!(
        line.contains("ok") && line.contains("came back to this ingressd"),
        "{doctor}"
    );
    let status = Command::new(BIN)
        .args(["open-conduit", "--bus"])
        .arg(&suite.bus)
        .arg("status")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains(&public),
        "status names the public URL: {}",
        String::from_utf8_lossy(&status.stdout)
    );

    // SIGKILL of the ssh child: the run ends, the URL is cleared, and it comes back.
    let first = ssh_pids(&spec);
    for pid in &first {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    until("tunneld logs the run's end", || {
        suite
            .log(Daemon::Tunneld)
            .contains("the tunnel run ended; starting it again")
    });
    until("the URL comes back with a new ssh", || {
        stored_url(&suite) == public && {
            let now = ssh_pids(&spec);
            now.len() == 1 && now != first
        }
    });
    let status = suite.call("tunnel.status", json!({})).unwrap();
    assert!(status["runs"].as_u64().unwrap() >= 2, "{status}");

    // SIGKILL of tunneld: its held call is cancelled, the provider stops ssh, and the
    // new tunneld's run takes over: one ssh again.
    let before = ssh_pids(&spec);
    suite.kill(Daemon::Tunneld);
    suite.start(Daemon::Tunneld).unwrap();
    until("the tunnel comes back after tunneld's SIGKILL", || {
        let now = ssh_pids(&spec);
        stored_url(&suite) == public
            && suite
                .call("tunnel.status", json!({}))
                .is_ok_and(|s| s["url"] == public.as_str())
            && now.len() == 1
            && now != before
    });

    // SIGKILL of extrunner: the extension and its ssh go, tunneld starts the run again
    // on the new extrunner: one ssh again.
    let before = ssh_pids(&spec);
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    until("the tunnel comes back after extrunner's SIGKILL", || {
        let now = ssh_pids(&spec);
        suite
            .call("tunnel.status", json!({}))
            .is_ok_and(|s| s["url"] == public.as_str())
            && now.len() == 1
            && now != before
    });
    let r = deliver_to(forwarded, "after-the-restarts", br#"{"number": 8}"#).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(ssh_pids(&spec).len(), 1, "no second ssh is left running");

    // Stopping tunneld stops the tunnel and clears the URL.
    suite.stop(Daemon::Tunneld);
    until("the URL is cleared and ssh stopped", || {
        stored_url(&suite).is_empty() && ssh_pids(&spec).is_empty()
    });
}

#[test]
fn a_credential_bearing_or_non_http_url_is_refused_logged_and_not_published() {
    let suite = Suite::new(Path::new(BIN), "tunnel-bad", &packages()).unwrap();
    suite.start_all().unwrap();
    suite.start(Daemon::Tunneld).unwrap();
    for (n, url) in [
        "https://user:secret@hooks.example.com",
        "ftp://hooks.example.com",
    ]
    .iter()
    .enumerate()
    {
        suite
            .apply_config(&with_tunnel(&suite, "badtunnel", json!({"url": url})), HOOK)
            .unwrap();
        let ext_log = suite.dir.join("state/logs/extensions/badtunnel.log");
        until("the provider hears the refusal", || {
            std::fs::read_to_string(&ext_log)
                .unwrap_or_default()
                .contains(&format!("tunnel.url refused invalid for {url}"))
        });
        until("tunneld logs it", || {
            suite
                .log(Daemon::Tunneld)
                .matches("the provider's public URL is refused")
                .count()
                > n
        });
        let log = std::fs::read_to_string(&ext_log).unwrap_or_default();
        assert!(
            log.contains("a stale run's tunnel.url refused conflict"),
            "{log}"
        );
        assert_eq!(stored_url(&suite), "", "not published");
        let status = suite.call("tunnel.status", json!({})).unwrap();
        assert_eq!(status["url"], "", "{status}");
        assert_eq!(status["refused"].as_u64(), Some(n as u64 + 1), "{status}");
    }
    assert!(
        !suite.log(Daemon::Tunneld).contains("secret@"),
        "the URL's credentials are not logged"
    );
}

/// The pids of the processes whose command line is `oc-suite <standin> …` with `arg`.
fn standin_pids(standin: &str, arg: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).is_some_and(|a| a == standin) && args.iter().any(|a| a == arg) {
            out.push(pid);
        }
    }
    out
}

/// A program named `name` that runs the suite's binary as `standin` (with `env`).
fn standin_program(suite: &Suite, name: &str, standin: &str, env: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = suite.dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\n{env} exec {BIN} {standin} \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Kill the one stand-in running now and see the URL cleared and a new stand-in's
/// URL published.
fn kill_standin_and_see_it_come_back(
    suite: &Suite,
    standin: &str,
    arg: &str,
    url_of: fn(i32) -> String,
) {
    let first = standin_pids(standin, arg);
    assert_eq!(first.len(), 1, "one {standin}: {first:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until("tunneld logs the run's end", || {
        suite
            .log(Daemon::Tunneld)
            .contains("the tunnel run ended; starting it again")
    });
    until("a new stand-in's URL is published", || {
        let now = standin_pids(standin, arg);
        now.len() == 1 && now != first && stored_url(suite) == url_of(now[0])
    });
}

/// The cloudflared provider against the stand-in (`oc_systest::standins`: it prints
/// cloudflared's quick tunnel banner and connection line, and forwards nothing):
/// the URL it printed is published; killing it clears the URL and it comes back.
#[test]
fn a_cloudflared_quick_tunnel_publishes_the_printed_url_and_comes_back() {
    let suite = Suite::new(Path::new(BIN), "tunnel-cloudflared", &packages()).unwrap();
    suite.start_all().unwrap();
    suite.start(Daemon::Tunneld).unwrap();
    let program = standin_program(&suite, "cloudflared", "fake-cloudflared", "");
    let origin = format!("http://{}", suite.http);
    suite
        .apply_config(
            &with_tunnel(
                &suite,
                "cloudflared",
                json!({"binary": program.display().to_string()}),
            ),
            HOOK,
        )
        .unwrap();
    until("the printed URL is published", || {
        let pids = standin_pids("fake-cloudflared", &origin);
        pids.len() == 1 && stored_url(&suite) == oc_systest::standins::cloudflared_url(pids[0])
    });
    let status = suite.call("tunnel.status", json!({})).unwrap();
    assert_eq!(status["package"], "cloudflared", "{status}");
    kill_standin_and_see_it_come_back(
        &suite,
        "fake-cloudflared",
        &origin,
        oc_systest::standins::cloudflared_url,
    );
    suite.stop(Daemon::Tunneld);
    until("the URL is cleared and the stand-in stopped", || {
        stored_url(&suite).is_empty() && standin_pids("fake-cloudflared", &origin).is_empty()
    });
}

/// The ngrok provider against the stand-in (`oc_systest::standins`: it serves the
/// agent API's `/api/tunnels` on a port of its own, and forwards nothing): the URL
/// the API shows is published; killing it clears the URL and it comes back.
#[test]
fn an_ngrok_tunnel_publishes_the_api_url_and_comes_back() {
    let suite = Suite::new(Path::new(BIN), "tunnel-ngrok", &packages()).unwrap();
    suite.start_all().unwrap();
    suite.start(Daemon::Tunneld).unwrap();
    let api = format!("127.0.0.1:{}", free_port());
    let program = standin_program(
        &suite,
        "ngrok",
        "fake-ngrok",
        &format!("OC_STANDIN_NGROK_API={api}"),
    );
    let listen = suite.http.to_string();
    suite
        .apply_config(
            &with_tunnel(
                &suite,
                "ngrok",
                json!({"binary": program.display().to_string(), "api_addr": api}),
            ),
            HOOK,
        )
        .unwrap();
    until("the API's URL is published", || {
        let pids = standin_pids("fake-ngrok", &listen);
        pids.len() == 1 && stored_url(&suite) == oc_systest::standins::ngrok_url(pids[0])
    });
    kill_standin_and_see_it_come_back(
        &suite,
        "fake-ngrok",
        &listen,
        oc_systest::standins::ngrok_url,
    );
    suite.stop(Daemon::Tunneld);
    until("the URL is cleared and the stand-in stopped", || {
        stored_url(&suite).is_empty() && standin_pids("fake-ngrok", &listen).is_empty()
    });
}
