#![allow(clippy::unwrap_used)]
//! The daemons as systemd runs them: sockets passed in, `NOTIFY_SOCKET`,
//! `WATCHDOG_USEC` and `JOURNAL_STREAM` set, `--log auto`. Each one reports `READY=1`,
//! pings the watchdog, and logs to journald's native socket (ours here: a datagram
//! socket the daemons see at `/run/systemd/journal/socket`, in a mount namespace of
//! their own) with `SYSLOG_IDENTIFIER`, `PRIORITY` and the correlation fields, so that
//! `journalctl OC_WORK_ID=…` and `journalctl OC_EXTENSION=github` tell their story:
//! one Work's runs from the router's record (which names the intake's event) through
//! extrunner and the shell package's own line to the settled attempt, in order.

mod common;
use common::*;

use oc_systest::{Daemon, Suite, HANG};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One journal entry: each field's values (a field may repeat).
type Entry = BTreeMap<String, Vec<String>>;

/// Parse one datagram of journald's native protocol: `KEY=value\n`, or for a value
/// that may hold newlines `KEY\n` + its length as 64-bit little-endian + the value +
/// `\n`.
fn parse_entry(mut b: &[u8]) -> Entry {
    let mut e = Entry::new();
    while !b.is_empty() {
        let nl = b.iter().position(|&c| c == b'\n').unwrap_or(b.len());
        let line = &b[..nl];
        if let Some(eq) = line.iter().position(|&c| c == b'=') {
            let key = String::from_utf8_lossy(&line[..eq]).into_owned();
            let value = String::from_utf8_lossy(&line[eq + 1..]).into_owned();
            e.entry(key).or_default().push(value);
            b = &b[(nl + 1).min(b.len())..];
        } else {
            let key = String::from_utf8_lossy(line).into_owned();
            let rest = &b[nl + 1..];
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            let value = String::from_utf8_lossy(&rest[8..8 + len]).into_owned();
            e.entry(key).or_default().push(value);
            b = &rest[(8 + len + 1).min(rest.len())..];
        }
    }
    e
}

/// Read the journal's socket on a thread of its own (a writer blocks when its queue is
/// full), keeping every entry.
fn collect(journal: UnixDatagram) -> Arc<Mutex<Vec<Entry>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match journal.recv(&mut buf) {
                Ok(n) => into.lock().unwrap().push(parse_entry(&buf[..n])),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if Arc::strong_count(&into) == 1 {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    seen
}

fn field<'a>(e: &'a Entry, k: &str) -> Option<&'a str> {
    e.get(k).and_then(|v| v.first()).map(String::as_str)
}

/// Wait until an entry satisfies `f`; answers it.
fn wait_entry(seen: &Mutex<Vec<Entry>>, what: &str, f: impl Fn(&Entry) -> bool) -> Entry {
    let deadline = Instant::now() + HANG;
    loop {
        {
            let seen = seen.lock().unwrap();
            if let Some(e) = seen.iter().find(|e| f(e)) {
                return e.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no journal entry {what} within {HANG:?}; got {} entries, the last: {:#?}",
                seen.len(),
                seen.iter().rev().take(10).collect::<Vec<_>>()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_daemons_run_as_systemd_runs_them_notify_ping_and_log_to_the_journal() {
    if !Suite::can_fake_journald() {
        // Replacing /run needs a mount namespace (root or CAP_SYS_ADMIN), as CI has.
        eprintln!("skipped: `unshare -m` is not permitted here");
        return;
    }
    let suite = Suite::new(Path::new(BIN), "journal", &Suite::first_party()).unwrap();
    let seen = collect(suite.journal().unwrap());
    // A watchdog of 400 ms: the daemons ping every 200 ms.
    for d in Daemon::ALL {
        suite.as_systemd(d, 400_000);
    }
    suite.start_all().unwrap();
    suite.apply_config(&config(&suite), HOOK).unwrap();
    suite.wait_for_route(HOOK).unwrap();

    // Watchdog pings from the broker (socket passed in) and from ingressd.
    for d in [Daemon::Broker, Daemon::Ingressd] {
        let deadline = Instant::now() + HANG;
        let mut pings = 0;
        while pings < 2 {
            pings += suite
                .notifications(d)
                .iter()
                .filter(|m| m.lines().any(|l| l == "WATCHDOG=1"))
                .count();
            assert!(
                Instant::now() < deadline,
                "{} sent no watchdog pings",
                d.name()
            );
        }
    }

    // Each daemon's records carry its identifier and a priority from its level.
    for d in Daemon::ALL {
        let id = format!("open-conduit-{}", d.name());
        let e = wait_entry(&seen, &format!("from {id}"), |e| {
            field(e, "SYSLOG_IDENTIFIER") == Some(id.as_str())
        });
        assert!(field(&e, "MESSAGE").is_some_and(|m| !m.is_empty()), "{e:?}");
        let p: u8 = field(&e, "PRIORITY").unwrap().parse().unwrap();
        assert!(p <= 7, "{e:?}");
    }
    // extrunner's story of one extension: OC_EXTENSION=github, at info (6).
    let started = wait_entry(&seen, "OC_EXTENSION=github", |e| {
        field(e, "OC_EXTENSION") == Some("github")
            && field(e, "SYSLOG_IDENTIFIER") == Some("open-conduit-extrunner")
    });
    assert_eq!(field(&started, "PRIORITY"), Some("6"), "{started:?}");

    // A Work's story: a delivery becomes Work, and schedulerd's records of its attempt
    // carry OC_WORK_ID.
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] =
        json!([{"name": "run", "executor": "shell", "config": {"command": ["true"]}}]);
    suite.apply_config(&c, HOOK).unwrap();
    let deadline = Instant::now() + HANG;
    let work_id = loop {
        let _ = deliver(&suite, "j-1", br#"{"number": 1}"#);
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        if let Some(id) = works["works"][0]["id"].as_str() {
            break id.to_owned();
        }
        assert!(Instant::now() < deadline, "no Work");
        std::thread::sleep(Duration::from_millis(100));
    };
    let settled = wait_entry(&seen, "OC_WORK_ID of the Work", |e| {
        field(e, "OC_WORK_ID") == Some(work_id.as_str())
            && field(e, "SYSLOG_IDENTIFIER") == Some("open-conduit-schedulerd")
            && field(e, "MESSAGE").is_some_and(|m| m.contains("settled"))
    });
    assert!(field(&settled, "OC_EXECUTION_ID").is_some(), "{settled:?}");

    // The whole story, in the order it happened: the router's record links the
    // intake's (OC_EVENT_ID) to the Work; extrunner hands the run to the shell
    // package; the package's own line (its stderr, through extrunner) names the Work
    // as a journal field; schedulerd settles the attempt.
    let of_work = |e: &Entry| field(e, "OC_WORK_ID") == Some(work_id.as_str());
    let says = |e: &Entry, m: &str| field(e, "MESSAGE").is_some_and(|t| t.contains(m));
    let routed = wait_entry(&seen, "routing the event to the Work", |e| {
        of_work(e) && says(e, "event routed to the Work")
    });
    let event_id = field(&routed, "OC_EVENT_ID").unwrap().to_owned();
    wait_entry(&seen, "ingressd's record of the delivery", |e| {
        field(e, "OC_EVENT_ID") == Some(event_id.as_str())
            && field(e, "SYSLOG_IDENTIFIER") == Some("open-conduit-ingressd")
            && says(e, "delivery accepted")
    });
    wait_entry(&seen, "the shell package's line", |e| {
        of_work(e) && says(e, "the run's command started")
    });
    let story: Vec<Entry> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| of_work(e))
        .cloned()
        .collect();
    let at = |what: &str, f: &dyn Fn(&Entry) -> bool| {
        story
            .iter()
            .position(f)
            .unwrap_or_else(|| panic!("no {what} in the Work's story: {story:#?}"))
    };
    let from = |e: &Entry, id: &str| field(e, "SYSLOG_IDENTIFIER") == Some(id);
    let steps = [
        at("routing", &|e| {
            from(e, "open-conduit-schedulerd") && says(e, "event routed to the Work")
        }),
        at("start", &|e| {
            from(e, "open-conduit-schedulerd") && says(e, "attempt started")
        }),
        at("hand-over", &|e| {
            from(e, "open-conduit-extrunner")
                && field(e, "OC_EXTENSION") == Some("shell")
                && says(e, "the run goes to its executor")
        }),
        at("the package's line", &|e| {
            from(e, "open-conduit-extrunner")
                && field(e, "OC_EXTENSION") == Some("shell")
                && field(e, "OC_EXECUTION_ID").is_some()
                && says(e, "the run's command started")
        }),
    ];
    // Each step is logged before the next is asked for (the package's line before
    // its `executor.run` answers); the settling comes after the hand-over, while
    // extrunner may still be copying the package's stderr.
    let settling = at("settling", &|e| {
        from(e, "open-conduit-schedulerd") && says(e, "attempt settled")
    });
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]) && steps[2] < settling,
        "out of order {steps:?}, settled at {settling}: {story:#?}"
    );

    // Under journald, nothing went to stderr as text lines.
    let stderr = suite.log(Daemon::Schedulerd);
    assert!(!stderr.contains("attempt settled"), "{stderr}");
}
