#![allow(clippy::unwrap_used)]
//! A full disk (issue 46): the suite's state directory on a small tmpfs, filled by a
//! big file while signed deliveries keep arriving, each routed to a shell Work.
//!
//! While the disk is full every delivery is answered 2xx only for what is on disk, and
//! otherwise 503 with `Retry-After` (never a reset connection, never a 500); the
//! database stays whole (`store.check`); `status` and `doctor` say the disk is full,
//! naming the directory and its free bytes. Once the file is deleted everything takes
//! deliveries again without a restart (the daemons keep their pids), the refused
//! deliveries are taken when redelivered, and in the end every delivery answered 2xx
//! is kept exactly once and its Work ran exactly once.
//!
//! Mounting needs root (or CAP_SYS_ADMIN); without it the test prints `SKIPPED`,
//! unless `OC_REQUIRE_PEERS=1`.

mod common;
use common::*;

use oc_systest::{Daemon, Suite, HANG};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The size of the state directory's filesystem.
const SIZE: &str = "48m";
/// The size of the filesystem of PostgreSQL's data directory (a new cluster takes
/// about 40 MB, and a WAL segment 16 MB).
const PG_SIZE: &str = "160m";
/// The padding of each delivery's body, so that the disk fills in few deliveries.
const PAD: usize = 16 * 1024;
/// At most this many deliveries go to a full disk before the test gives up waiting
/// for a refusal.
const MAX_WHILE_FULL: usize = 400;
/// Refusals seen before the disk is freed.
const REFUSALS: usize = 5;

/// The suite with its state directory on a tmpfs of its own; on drop, the daemons are
/// stopped before the tmpfs is unmounted (the suite then removes its directory).
struct OnTmpfs {
    suite: Suite,
    state: PathBuf,
}

impl std::ops::Deref for OnTmpfs {
    type Target = Suite;
    fn deref(&self) -> &Suite {
        &self.suite
    }
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        self.suite.stop(Daemon::Webd);
        for d in Daemon::ALL.iter().rev() {
            self.suite.stop(*d);
        }
        let _ = Command::new("umount").arg("-l").arg(&self.state).status();
    }
}

/// Mount a tmpfs of `size` on `state`: `Err` says why not.
fn mount_small(state: &Path, size: &str) -> Result<(), String> {
    let out = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0755"),
            "tmpfs",
        ])
        .arg(state)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cannot mount a tmpfs on {} ({}): {}",
            state.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Fill the filesystem of `path`'s directory with the file `path` until it is full:
/// large writes first, then ever smaller ones, down to one byte.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let mut written = 0u64;
    let mut chunk = 1 << 20;
    let buf = vec![0x5au8; chunk];
    while chunk > 0 {
        match f.write(&buf[..chunk]) {
            Ok(0) => chunk /= 2,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc_enospc()) => chunk /= 2,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
    written
}

fn libc_enospc() -> i32 {
    nix::errno::Errno::ENOSPC as i32
}

fn pids(suite: &Suite) -> Vec<(Daemon, u32)> {
    Daemon::ALL
        .iter()
        .map(|d| (*d, suite.pid(*d).unwrap()))
        .collect()
}

fn body(n: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({"number": n, "pad": "x".repeat(PAD)})).unwrap()
}

/// One delivery, as a sender sees it: `true` for a 2xx, `false` for a 503 with
/// `Retry-After`; anything else fails the test.
fn send(suite: &Suite, n: usize) -> bool {
    let id = format!("d-{n}");
    let r = deliver(suite, &id, &body(n))
        .unwrap_or_else(|e| panic!("{id}: no answer (the sender sees a reset, not a 503): {e}"));
    if (200..300).contains(&r.status) {
        return true;
    }
    assert_eq!(r.status, 503, "{id}: {} {}", r.status, r.text());
    let after = r.header("retry-after").unwrap_or_else(|| {
        panic!("{id}: 503 without Retry-After: {:?}", r.headers);
    });
    assert!(
        after.parse::<u32>().is_ok_and(|s| s > 0),
        "{id}: Retry-After {after:?}"
    );
    false
}

fn check(suite: &Suite) -> busapi::store::CheckResponse {
    suite
        .call_typed(&busapi::store::CheckRequest::default())
        .unwrap()
}

/// Where the filled disk is and what is checked there.
struct Disk<'a> {
    /// The mount point of the small filesystem, where the filler files go.
    mount: &'a Path,
    /// The state directory is on it: `status` and `doctor` must say it is full,
    /// and `store.check` must be clean while it is.
    state: bool,
}

/// The suite configured with a shell binding that appends each run's Work ID to
/// `runs`, waiting until schedulerd knows it.
fn with_shell_binding(suite: &Suite, runs: &Path) {
    let mut c = config(suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "run", "executor": "shell",
        "config": {"script": format!("echo \"$OS_WORK_ID\" >> '{}'", runs.display())}}]);
    let applied = suite
        .call("store.config_apply", json!({ "config": c }))
        .unwrap();
    let hash = applied["hash"].as_str().unwrap().to_owned();
    suite.wait_for_route(HOOK).unwrap();
    // Routed by this generation (with the binding) from the first delivery on.
    wait_for("schedulerd on the generation with the binding", || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["generation"] == hash.as_str() && s["handlers"]["webhook"] == "webhook").then_some(())
    });
}

/// Removes every filler file under `mount`.
fn unfill(mount: &Path) {
    for entry in std::fs::read_dir(mount).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with("filler"))
        {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Deliveries with room, then with `disk` full, then with room again; every answer
/// a 2xx or a 503 with `Retry-After`; in the end every delivery answered 2xx is kept
/// once and its Work ran once (`runs`), and no daemon was restarted.
fn scenario(suite: &Suite, disk: &Disk<'_>, runs: &Path) {
    let before = pids(suite);

    // Room on the disk: every delivery is taken.
    let mut acked = Vec::new();
    let mut n = 0;
    while n < 5 {
        assert!(send(suite, n), "d-{n} refused with room on the disk");
        acked.push(n);
        n += 1;
    }

    // The disk fills up: deliveries go on until some are refused.
    let filled = fill(&disk.mount.join("filler"));
    eprintln!("filled {} with {filled} bytes", disk.mount.display());
    let mut refused = Vec::new();
    let mut tries = 0;
    while refused.len() < REFUSALS {
        assert!(
            tries < MAX_WHILE_FULL,
            "{MAX_WHILE_FULL} deliveries to a full disk and {} refused: {} taken",
            refused.len(),
            tries - refused.len()
        );
        if send(suite, n) {
            acked.push(n);
        } else {
            refused.push(n);
        }
        // Whatever freed a little (a checkpoint, a removed run directory) is taken
        // again: the disk stays full.
        fill(&disk.mount.join(format!("filler-{tries}")));
        n += 1;
        tries += 1;
    }
    eprintln!(
        "with the disk full: {} taken, {} refused",
        tries - refused.len(),
        refused.len()
    );

    if disk.state {
        // The store is whole, and says the disk is full; so do status and doctor.
        let full = check(suite);
        assert_eq!(full.integrity, "ok", "{full:?}");
        let dir = disk.mount.display().to_string();
        let (code, said) = cli(suite, &["status"]);
        assert!(
            said.contains("disk is full") && said.contains(&dir) && said.contains("bytes free"),
            "status ({code}) does not say the disk is full: {said}"
        );
        let (code, said) = cli(suite, &["doctor"]);
        assert_eq!(code, 1, "{said}");
        assert!(
            said.contains("disk is full") && said.contains(&dir) && said.contains("bytes free"),
            "doctor does not say the disk is full: {said}"
        );
        let (_, said) = cli(suite, &["doctor", "--json"]);
        // The verdicts, then (on stderr) how many failed.
        let verdicts: Vec<Value> = serde_json::Deserializer::from_str(&said)
            .into_iter()
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("doctor --json: {said}"));
        let disk = verdicts.iter().find(|v| v["check"] == "disk").unwrap();
        assert_eq!(disk["status"], "fail", "{disk}");
    }

    // Space again: without a restart, the refused deliveries are taken when
    // redelivered, and new ones too.
    unfill(disk.mount);
    let deadline = Instant::now() + HANG;
    for r in refused {
        while !send(suite, r) {
            assert!(
                Instant::now() < deadline,
                "d-{r} still refused with room again"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        acked.push(r);
    }
    for _ in 0..5 {
        assert!(send(suite, n), "d-{n} refused with room again");
        acked.push(n);
        n += 1;
    }
    assert_eq!(pids(suite), before, "a daemon was restarted");

    // Every delivery answered 2xx is kept exactly once, and its Work ran once.
    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    for e in hook_events(suite) {
        *kept
            .entry(e["delivery_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let twice: Vec<_> = kept.iter().filter(|(_, k)| **k > 1).collect();
    assert!(twice.is_empty(), "kept more than once: {twice:?}");
    let acked_ids: Vec<String> = acked.iter().map(|n| format!("d-{n}")).collect();
    let missing: Vec<_> = acked_ids
        .iter()
        .filter(|id| !kept.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "answered 2xx but not kept: {missing:?}");
    assert_eq!(
        kept.len(),
        acked.len(),
        "kept deliveries never answered 2xx: {kept:?}"
    );

    let works = wait_within("every Work completed", HANG * 3, || {
        let w = suite
            .call("store.works", json!({"scope_id": "demo", "limit": 1000}))
            .unwrap();
        let works = w["works"].as_array().cloned().unwrap_or_default();
        let done = works.len() == acked.len() && works.iter().all(|w| w["state"] == "completed");
        done.then_some(works)
    });
    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(runs).unwrap().lines() {
        *ran.entry(line.to_owned()).or_default() += 1;
    }
    for w in &works {
        let id = w["id"].as_str().unwrap();
        assert_eq!(
            ran.get(id),
            Some(&1),
            "Work {id} ran {:?} times: {w}",
            ran.get(id)
        );
    }
    assert_eq!(ran.len(), works.len(), "runs of no Work: {ran:?}");

    // And the store says so.
    let after = check(suite);
    assert_eq!(after.integrity, "ok", "{after:?}");
    let (_, said) = cli(suite, &["doctor"]);
    assert!(!said.contains("disk is full"), "{said}");
    eprintln!(
        "{} deliveries answered 2xx, each kept once and run once",
        acked.len()
    );
}

/// SKIPPED (or, with `OC_REQUIRE_PEERS=1`, failed) for want of `why`.
fn skip(why: &str) {
    assert!(!oc_systest::github::required(), "{why}");
    eprintln!("SKIPPED: {why}");
}

#[test]
fn a_full_disk_refuses_deliveries_with_503_and_everything_resumes_once_space_is_freed() {
    let runs = std::env::temp_dir().join(format!("oc-disk-full-runs-{}", std::process::id()));
    let _ = std::fs::remove_file(&runs);
    let suite = Suite::new(Path::new(BIN), "disk-full", &Suite::first_party()).unwrap();
    let state = suite.dir.join("state");
    if let Err(why) = mount_small(&state, SIZE) {
        return skip(&why);
    }
    let suite = OnTmpfs { suite, state };
    suite.set_args(
        Daemon::Ingressd,
        &["--header-timeout-ms", "1000", "--body-timeout-ms", "1000"],
    );
    suite.start_all().unwrap();
    with_shell_binding(&suite, &runs);
    let disk = Disk {
        mount: &suite.state,
        state: true,
    };
    scenario(&suite, &disk, &runs);
    let _ = std::fs::remove_file(&runs);
}

/// A PostgreSQL cluster whose data directory is on a small tmpfs of its own: the
/// tmpfs is unmounted once the cluster is stopped.
struct PgOnTmpfs {
    cluster: Option<oc_pgtest::Cluster>,
    mount: PathBuf,
}

impl Drop for PgOnTmpfs {
    fn drop(&mut self) {
        if let Some(c) = self.cluster.take() {
            c.stop();
            drop(c);
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        let _ = std::fs::remove_dir_all(&self.mount);
    }
}

/// The same with the suite on PostgreSQL whose disk fills up: the server refuses
/// writes (`disk_full`, 53100, or a crash and restart when it cannot write its
/// WAL), storaged answers `unavailable`, ingressd 503.
#[test]
fn a_full_postgres_disk_refuses_deliveries_with_503_and_everything_resumes() {
    if let Some(why) = oc_pgtest::unavailable() {
        return skip(&why);
    }
    let mount = std::env::temp_dir().join(format!("oc-pg-disk-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&mount);
    std::fs::create_dir_all(&mount).unwrap();
    if let Err(why) = mount_small(&mount, PG_SIZE) {
        let _ = std::fs::remove_dir_all(&mount);
        return skip(&why);
    }
    let mut pg = PgOnTmpfs {
        cluster: None,
        mount: mount.clone(),
    };
    let cluster = oc_pgtest::Cluster::start_in(&mount).unwrap();
    let url = cluster.create_database("disk_full").unwrap();
    pg.cluster = Some(cluster);
    let runs = std::env::temp_dir().join(format!("oc-pg-disk-full-runs-{}", std::process::id()));
    let _ = std::fs::remove_file(&runs);
    let suite = started_with("pg-disk-full", |suite| {
        let etc = suite.dir.join("etc/storaged");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(suite.dir.join("pg.url"), &url).unwrap();
        let config = json!({"settings": {"storage": {
            "backend": "postgres",
            "url_ref": format!("file:{}", suite.dir.join("pg.url").display()),
        }}});
        std::fs::write(etc.join("config.json"), config.to_string()).unwrap();
        suite.set_args(
            Daemon::Storaged,
            &["--config-dir", &etc.display().to_string()],
        );
    });
    with_shell_binding(&suite, &runs);
    let disk = Disk {
        mount: &mount,
        state: false,
    };
    scenario(&suite, &disk, &runs);
    drop(suite);
    drop(pg);
    let _ = std::fs::remove_file(&runs);
}
