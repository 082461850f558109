#![allow(clippy::unwrap_used)]
//! The `ssh` container provider, with real daemons and a real OpenSSH server on
//! loopback (Debian's openssh-server, as the tunnel tests run it): a shell binding
//! with `container: {type: ssh}` runs its launch over SSH in a folder of its own on
//! the remote (labelled with its execution, its environment there and not in the
//! plan the host pins); a SIGKILL of extrunner mid-run adopts it through its pinned
//! container, one start; a cancelled Work's remote launch is stopped and its folder
//! removed.
//!
//! Where sshd is missing the test skips saying so (and fails under
//! OC_REQUIRE_PEERS=1).

mod common;
use common::sandbox::{ended, executions, run_dir, send, started_run, work_of};
use common::sshd::{skip, Sshd};
use common::*;

use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

fn packages() -> Vec<Package> {
    let mut p = Suite::first_party();
    p.push(Package {
        name: "ssh".into(),
        manifest: oc_ssh::MANIFEST.into(),
        command: vec!["ext-ssh".into()],
    });
    p
}

/// Records each start in its own tmp folder, then waits for `go` there; its
/// environment carries a secret, which must reach the remote launch and never the
/// host's pin.
const WAITER: &str = r#"echo "started $SECRET_TOKEN" >> "$TMPDIR/count"
while [ ! -e "$TMPDIR/go" ]; do sleep 0.1; done
echo done=yes
"#;

const TOKEN: &str = "tok-3f9a1c-secret-for-the-remote";

fn count(suite: &Suite, execution_id: &str) -> String {
    std::fs::read_to_string(run_dir(suite, execution_id).join("tmp/count")).unwrap_or_default()
}

#[test]
fn an_ssh_container_runs_the_launch_remotely_is_adopted_and_is_removed_when_cancelled() {
    let suite = Suite::new(Path::new(BIN), "containers-ssh", &packages()).unwrap();
    let sshd = match Sshd::start(&suite.dir.join("sshd")) {
        Ok(s) => s,
        Err(why) => return skip(&format!("no OpenSSH server: {why}")),
    };
    suite.start_all().unwrap();
    let remote = suite.dir.join("remote");
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{
        "name": "run", "executor": "shell",
        "container": {"type": "ssh", "config": {
            "host": "127.0.0.1", "port": sshd.port, "user": sshd.user,
            "identity_file": sshd.dir.join("client_key").display().to_string(),
            "known_hosts": sshd.dir.join("known_hosts").display().to_string(),
            "remote_dir": remote.display().to_string(),
        }},
        "config": {"script": WAITER, "env": {"SECRET_TOKEN": TOKEN}},
    }]);
    suite.apply_config(&c, HOOK).unwrap();
    wait_for("the route", || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
    send(&suite, "s-1", 1);
    let work = work_of(&suite, 1, &[]);
    let exec = started_run(&suite, &work);
    assert_eq!(count(&suite, &exec).trim(), format!("started {TOKEN}"));
    // Its folder on the remote, labelled with its execution.
    let folder = remote.join(format!("oc-{exec}"));
    let labels: Value =
        serde_json::from_slice(&std::fs::read(folder.join("labels")).unwrap()).unwrap();
    assert_eq!(labels["open-conduit.execution"], exec.as_str(), "{labels}");
    assert_eq!(labels["open-conduit.work"], work.as_str(), "{labels}");
    // The host's pin holds the plan, not the environment's values.
    let pin = std::fs::read_to_string(
        suite
            .dir
            .join("state/containers/pins")
            .join(format!("{exec}.json")),
    )
    .unwrap();
    assert!(pin.contains("SECRET_TOKEN"), "{pin}");
    assert!(!pin.contains(TOKEN), "the secret is not pinned: {pin}");

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
    assert_eq!(count(&suite, &exec).lines().count(), 1, "started once");
    assert_eq!(executions(&suite, &work).len(), 1);
    wait_for("the remote folder's removal", || {
        (!folder.exists()).then_some(())
    });

    // A cancelled Work: its remote launch is stopped and its folder removed.
    send(&suite, "s-2", 2);
    let second = work_of(&suite, 2, &[&work]);
    let exec = started_run(&suite, &second);
    let folder = remote.join(format!("oc-{exec}"));
    let pid: i32 = std::fs::read_to_string(folder.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (code, said) = cli(&suite, &["work", "cancel", &second]);
    assert_eq!(code, 0, "{said}");
    wait_for(
        "the cancelled launch's end and its folder's removal",
        || (!folder.exists() && !Path::new(&format!("/proc/{pid}")).exists()).then_some(()),
    );
    assert_eq!(count(&suite, &exec).lines().count(), 1);
    drop(sshd);
}
