//! Tests of what the host trusts of a run's records (real processes).

#![allow(clippy::unwrap_used)]
use super::*;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("oc-detached-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child of the test's own; killed (its group too) when dropped.
struct Child(std::process::Child, bool);

impl Child {
    /// `sleep 300` in a process group of its own (not a session).
    fn bystander() -> Child {
        let c = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        Child(c, false)
    }
    /// A session leader (as the wrapper is) with a `sleep` of its group.
    fn session() -> Child {
        let c = std::process::Command::new("setsid")
            .args(["sh", "-c", "sleep 300 & wait"])
            .spawn()
            .unwrap();
        Child(c, true)
    }
    fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).unwrap()
    }
    fn alive(&self) -> bool {
        proc_stat(self.pid()).is_some_and(|s| s.live())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.1 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pid()),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const WORDS: Words = Words {
    label: "test",
    unit: "run",
    what: "the command",
    default_grace_s: 0,
};

fn forged_meta(dir: &Path, pid: i32, pgid: i32) {
    let meta = Meta {
        pid,
        pgid,
        nonce: "x".into(),
        started_at: String::new(),
        start: 1,
    };
    std::fs::write(dir.join(META), serde_json::to_vec(&meta).unwrap()).unwrap();
}

#[test]
fn a_group_is_the_runs_only_when_every_member_is_of_its_session() {
    let session = Child::session();
    let bystander = Child::bystander();
    // The session's sleep has started once the group has two members.
    let leader = session.pid();
    while group_members(leader).len() < 2 {
        std::thread::sleep(POLL);
    }
    let launch = Launch {
        dir: PathBuf::from("/nonexistent"),
        pid: leader,
        start: start_time(leader),
        nonce: String::new(),
        wrap_arg: "__wrap",
    };
    assert!(launch.owns_group(leader));
    assert!(!launch.owns_group(bystander.pid()));
    // This test's own group (the runner's) is not the run's either.
    let me = proc_stat(std::process::id() as i32).unwrap();
    assert!(!launch.owns_group(me.pgrp));
    // A group that is not the run's: the run's processes are its session's.
    let members = launch.members(bystander.pid());
    assert!(!members.contains(&bystander.pid()), "{members:?}");
    assert_eq!(members, session_members(leader, launch.start));
    // A wrapper that started after the members cannot own them.
    let later = Launch {
        start: launch.start + 1_000_000,
        ..launch.clone()
    };
    assert!(!later.owns_group(leader));
}

#[tokio::test]
async fn a_forged_group_is_never_signalled() {
    let s = Scratch::new("forged");
    let bystander = Child::bystander();
    // The wrapper is gone (so the host signals what is left itself), and
    // meta.json names the bystander's group.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = i32::try_from(gone.id()).unwrap();
    let start = start_time(pid);
    gone.wait().unwrap();
    forged_meta(&s.0, pid, bystander.pid());
    let launch = Launch {
        dir: s.0.clone(),
        pid,
        start,
        nonce: "x".into(),
        wrap_arg: "__wrap",
    };
    let interrupt = KillRequest {
        cause: Cause::Interrupt,
        reason: String::new(),
    };
    launch.ask_to_end(&interrupt, WORDS).unwrap();
    launch.force_end().await;
    let stopped = launch.stop(WORDS).await.unwrap();
    assert!(stopped.stopped, "{stopped:?}");
    launch.await_end(WORDS).await;
    assert!(bystander.alive(), "the bystander's group was signalled");
    assert!(exists(&s.0, STATUS));
}

#[test]
fn on_disk_takes_no_pid_the_run_could_name() {
    let s = Scratch::new("ondisk");
    // meta.json names a live process (this test) that is no wrapper of the run.
    let me = proc_stat(std::process::id() as i32).unwrap();
    forged_meta(&s.0, me.pid, me.pgrp);
    let launch = Launch::on_disk(&s.0, "__wrap").unwrap();
    assert_eq!(launch.start, 0);
    assert!(!launch.wrapper_alive());
    assert!(!launch.owns_group(me.pgrp));
    assert!(launch.members(me.pgrp).is_empty());
}

#[tokio::test]
async fn an_ended_run_reads_whole_or_says_what_was_not_read() {
    let s = Scratch::new("ended");
    assert_eq!(
        read_status(&s.0, "segment").error,
        "the segment's status is missing"
    );
    std::fs::write(s.0.join(STATUS), b"not json").unwrap();
    assert!(read_status(&s.0, "run")
        .error
        .starts_with("the run's status does not read: "));
    write_json(&s.0, STATUS, &Status::default()).unwrap();
    assert_eq!(read_status(&s.0, "run"), Status::default());
    // A symlink in place of an output is never read; a missing one is empty.
    std::fs::write(s.0.join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(s.0.join("secret"), s.0.join("out")).unwrap();
    std::fs::write(s.0.join("err"), b"complaint").unwrap();
    let got = read_outputs(&s.0, "run", "out", "err", 1024).await.unwrap();
    assert_eq!(got.stdout, b"");
    assert_eq!(got.stderr, b"complaint");
    assert_eq!(got.refusals.len(), 1, "{:?}", got.refusals);
    assert!(
        got.refusals[0].starts_with("the run's out was not read: "),
        "{:?}",
        got.refusals
    );
    let got = read_outputs(&s.0, "run", "none", "err", 1024)
        .await
        .unwrap();
    assert!(got.stdout.is_empty() && got.refusals.is_empty(), "{got:?}");
}

#[test]
fn a_result_older_than_the_status_is_not_the_extensions() {
    let s = Scratch::new("result");
    std::fs::write(s.0.join(RESULT), b"{\"outcome\": \"completed\"}").unwrap();
    assert!(!result_is_current(&s.0), "no status yet");
    // ctime moves on with the clock: wait until it has.
    let before = Dir::open(&s.0).unwrap().changed(RESULT).unwrap();
    loop {
        write_atomic(&s.0, STATUS, b"{}").unwrap();
        if Dir::open(&s.0).unwrap().changed(STATUS).unwrap() > before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(!result_is_current(&s.0));
    assert_eq!(recorded_result::<serde_json::Value>(&s.0), None);
    write_atomic(&s.0, RESULT, b"{\"outcome\": \"failed\"}").unwrap();
    assert!(result_is_current(&s.0));
    assert_eq!(
        recorded_result::<serde_json::Value>(&s.0).unwrap()["outcome"],
        "failed"
    );
    // A symlink is never the result.
    std::fs::remove_file(s.0.join(RESULT)).unwrap();
    std::os::unix::fs::symlink(s.0.join(STATUS), s.0.join(RESULT)).unwrap();
    assert!(!result_is_current(&s.0));
}
