#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{child, is_child, run_ok, TempDir, HANG};
use daemon::{fields, Error, LogTarget};

const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Runs `name` as a child with its stderr going to a file, and `JOURNAL_STREAM` set by
/// `journal_stream` from the file's (dev, ino). Returns what the child wrote to stderr.
fn run_with_stderr_file(
    name: &str,
    journal_stream: impl FnOnce(u64, u64) -> Option<String>,
    configure: impl FnOnce(&mut Command),
) -> String {
    let dir = TempDir::new("log");
    let path = dir.path().join("stderr");
    let file = File::create(&path).unwrap();
    let meta = file.metadata().unwrap();
    let mut cmd = child(name);
    cmd.stderr(Stdio::from(file));
    match journal_stream(meta.dev(), meta.ino()) {
        Some(v) => cmd.env("JOURNAL_STREAM", v),
        None => cmd.env_remove("JOURNAL_STREAM"),
    };
    configure(&mut cmd);
    run_ok(cmd);
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn stderr_is_journal_compares_device_and_inode() {
    let expect = |cmd: &mut Command, v: bool| {
        cmd.env("OC_TEST_EXPECT", if v { "true" } else { "false" });
    };
    run_with_stderr_file(
        "child_stream_check",
        |dev, ino| Some(format!("{dev}:{ino}")),
        |c| expect(c, true),
    );
    run_with_stderr_file(
        "child_stream_check",
        |dev, ino| Some(format!("{dev}:{}", ino + 1)),
        |c| expect(c, false),
    );
    run_with_stderr_file(
        "child_stream_check",
        |dev, ino| Some(format!("{}:{ino}", dev + 1)),
        |c| expect(c, false),
    );
    run_with_stderr_file("child_stream_check", |_, _| None, |c| expect(c, false));

    // Set, and naming a real file, but not our stderr (a pipe here): not the journal.
    let dir = TempDir::new("log-other");
    let other = dir.path().join("other");
    let meta = File::create(&other).unwrap().metadata().unwrap();
    let mut cmd = child("child_stream_check");
    cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    expect(&mut cmd, false);
    run_ok(cmd);
}

#[test]
fn child_stream_check() {
    if !is_child("child_stream_check") {
        return;
    }
    let expected: bool = std::env::var("OC_TEST_EXPECT").unwrap().parse().unwrap();
    assert_eq!(daemon::log::stderr_is_journal(), expected);
}

#[test]
fn stderr_lines_carry_target_span_fields_and_no_colours() {
    let out = run_with_stderr_file(
        "child_stderr_output",
        |_, _| None,
        |c| {
            c.env("OC_LOG", "debug");
        },
    );
    assert!(out.contains("hello from the child"), "{out}");
    assert!(out.contains("oc_test_target"), "target missing:\n{out}");
    assert!(out.contains("attempt{"), "span missing:\n{out}");
    assert!(
        out.contains("OC_WORK_ID=w-42"),
        "span field missing:\n{out}"
    );
    assert!(
        out.contains("OC_EXTENSION=\"github\""),
        "span field missing:\n{out}"
    );
    assert!(out.contains("answer=42"), "event field missing:\n{out}");
    assert!(
        out.contains("a debug line"),
        "OC_LOG=debug not applied:\n{out}"
    );
    assert!(
        !out.contains("a trace line"),
        "OC_LOG=debug not applied:\n{out}"
    );
    assert!(!out.contains('\x1b'), "colours on a file:\n{out}");
}

#[test]
fn child_stderr_output() {
    if !is_child("child_stderr_output") {
        return;
    }
    daemon::log::init("oc-test", LogTarget::Stderr).unwrap();
    let span = tracing::info_span!(
        "attempt",
        { fields::WORK_ID } = %"w-42",
        { fields::EXTENSION } = "github",
    );
    let _entered = span.enter();
    tracing::info!(target: "oc_test_target", answer = 42, "hello from the child");
    tracing::debug!("a debug line");
    tracing::trace!("a trace line");

    // A second subscriber is refused.
    let err = daemon::log::init("oc-test", LogTarget::Stderr).unwrap_err();
    assert!(matches!(err, Error::LogInit(_)), "{err}");
}

#[test]
fn default_filter_is_info() {
    let out = run_with_stderr_file(
        "child_default_filter",
        |_, _| None,
        |c| {
            c.env_remove("OC_LOG");
        },
    );
    assert!(out.contains("an info line"), "{out}");
    assert!(!out.contains("a debug line"), "{out}");
}

#[test]
fn child_default_filter() {
    if !is_child("child_default_filter") {
        return;
    }
    daemon::log::init("oc-test", LogTarget::Auto).unwrap();
    tracing::info!("an info line");
    tracing::debug!("a debug line");
}

#[test]
fn invalid_filter_is_an_error() {
    let mut cmd = child("child_bad_filter");
    cmd.env("OC_LOG", "broker=loud");
    run_ok(cmd);
}

#[test]
fn child_bad_filter() {
    if !is_child("child_bad_filter") {
        return;
    }
    let err = daemon::log::init("oc-test", LogTarget::Stderr).unwrap_err();
    assert!(
        matches!(err, Error::InvalidEnv { var: "OC_LOG", .. }),
        "{err}"
    );
}

#[test]
fn without_journald_auto_falls_back_and_journald_fails() {
    if Path::new(JOURNAL_SOCKET).exists() {
        println!("skipped: journald is running here (see journald_receives_unprefixed_fields)");
        return;
    }
    let out = run_with_stderr_file(
        "child_auto_fallback",
        |dev, ino| Some(format!("{dev}:{ino}")),
        |_| {},
    );
    assert!(out.contains("journald cannot be reached"), "{out}");
    assert!(out.contains("still logged"), "{out}");

    run_ok(child("child_journald_missing"));
}

#[test]
fn child_auto_fallback() {
    if !is_child("child_auto_fallback") {
        return;
    }
    assert!(daemon::log::stderr_is_journal());
    daemon::log::init("oc-test", LogTarget::Auto).unwrap();
    tracing::info!("still logged");
}

#[test]
fn child_journald_missing() {
    if !is_child("child_journald_missing") {
        return;
    }
    let err = daemon::log::init("oc-test", LogTarget::Journald).unwrap_err();
    assert!(matches!(err, Error::Journald(_)), "{err}");
}

#[test]
fn journald_receives_unprefixed_fields() {
    if !Path::new(JOURNAL_SOCKET).exists() || !Path::new("/usr/bin/journalctl").exists() {
        println!("skipped: no journald here ({JOURNAL_SOCKET} or journalctl missing)");
        return;
    }
    let work_id = format!("w-test-{}-{:?}", std::process::id(), Instant::now());
    let work_id: String = work_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let mut cmd = child("child_journald");
    cmd.env("OC_TEST_WORK_ID", &work_id);
    run_ok(cmd);

    let start = Instant::now();
    loop {
        let out = Command::new("/usr/bin/journalctl")
            .args(["--no-pager", "-o", "export"])
            .arg(format!("OC_WORK_ID={work_id}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("MESSAGE=journald test entry") {
            assert!(
                text.contains("SYSLOG_IDENTIFIER=open-conduit-test"),
                "{text}"
            );
            assert!(text.contains("OC_SCOPE=team-a"), "{text}");
            assert!(!text.contains("F_OC_WORK_ID"), "{text}");
            break;
        }
        assert!(start.elapsed() < HANG, "entry never reached the journal");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn child_journald() {
    if !is_child("child_journald") {
        return;
    }
    let work_id = std::env::var("OC_TEST_WORK_ID").unwrap();
    daemon::log::init("open-conduit-test", LogTarget::Journald).unwrap();
    let span = tracing::info_span!(
        "attempt",
        { fields::WORK_ID } = %work_id,
        { fields::SCOPE } = "team-a",
    );
    let _entered = span.enter();
    tracing::info!("journald test entry");
}
