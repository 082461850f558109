#![allow(clippy::unwrap_used)]
//! The notes example through its three releases, with real processes: an
//! in-process broker on a temp socket, an in-process storaged, and extrunner's
//! runner and `ext.*` service in process (the `oc-notes-extension` binary is
//! this crate's, copied into the package `notes`). The release and the crash
//! switch reach the extension as granted variables of the daemon's
//! environment, so the phases run one after another in one test.

use daemon::bus::{Bus, BusOptions};
use extrunner::process::{State, SupervisorOptions};
use extrunner::runner::{Runner, RunnerConfig};
use extrunner::service::Service;
use protocol::manifest::MANIFEST_FILE;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const NOTES: &str = env!("CARGO_BIN_EXE_oc-notes-extension");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);
const IDS: [(&str, &str); 3] = [("a", "alpha"), ("b", "bravo"), ("c", "charlie")];

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("timed out")
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("oc-notes-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_broker(socket: &Path) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let broker = broker::Broker::new(broker::Config::default());
    tokio::spawn(async move {
        let _ = broker.serve(&listener).await;
    });
}

fn start_storaged(s: &Scratch) -> Bus {
    let store = storaged::Store::open(&s.join("store"), storaged::Limits::default()).unwrap();
    let service = storaged::service::Service::new(store, Arc::new(std::sync::OnceLock::new()));
    Bus::start(BusOptions::service(
        s.join("bus.sock"),
        "storaged",
        &["store"],
        Arc::new(service),
    ))
}

fn client(s: &Scratch) -> Bus {
    let mut opts = BusOptions::client(s.join("bus.sock"));
    opts.call_wait = HANG;
    Bus::start(opts)
}

async fn call(bus: &Bus, method: &str, params: Value) -> Result<Value, protocol::CallError> {
    within(bus.call(method, &params)).await
}

/// One phase: the package `notes` at `release`, extrunner's runner over it and
/// its `ext.*` service on the bus.
struct Phase {
    runner: Arc<Runner>,
    service: Bus,
    host: Bus,
}

impl Phase {
    fn start(s: &Scratch, release: u32, crash: bool) -> Phase {
        let dir = s.join("etc/extensions/notes");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(MANIFEST_FILE),
            oc_notes::manifest(release).unwrap(),
        )
        .unwrap();
        if !dir.join("oc-notes-extension").exists() {
            std::fs::copy(NOTES, dir.join("oc-notes-extension")).unwrap();
        }
        // The runner snapshots the daemon's environment when it loads; this
        // test is the only one in its binary, so nothing reads it meanwhile.
        std::env::set_var(oc_notes::RELEASE_ENV, release.to_string());
        if crash {
            std::env::set_var(oc_notes::CRASH_ENV, "1");
        } else {
            std::env::remove_var(oc_notes::CRASH_ENV);
        }
        let host = Bus::start(BusOptions::client(s.join("bus.sock")));
        let config = RunnerConfig {
            installed_root: s.join("etc/extensions"),
            bundled_root: None,
            state_dir: s.join("state"),
            grants: HashMap::from([(
                "notes".to_string(),
                vec![
                    oc_notes::RELEASE_ENV.to_string(),
                    oc_notes::CRASH_ENV.to_string(),
                ],
            )]),
            options: SupervisorOptions {
                // A crashing phase never restarts within the test: the next
                // start is the next phase's.
                backoff_initial: if crash {
                    Duration::from_secs(3600)
                } else {
                    Duration::from_millis(10)
                },
                grace: Duration::from_millis(500),
                ..SupervisorOptions::default()
            },
            host_bus: Some(host.clone()),
            initial: None,
        };
        let runner = Arc::new(Runner::load(config));
        let service = Bus::start(BusOptions::service(
            s.join("bus.sock"),
            "extrunner",
            &["ext"],
            Arc::new(Service::new(runner.clone())),
        ));
        Phase {
            runner,
            service,
            host,
        }
    }

    async fn stop(self) {
        within(self.runner.stop_all()).await;
        self.service.close();
        self.host.close();
    }

    /// Poll until the supervisor's state satisfies `cond`.
    async fn wait(&self, cond: impl Fn(&State, u64) -> bool) {
        let sup = self.runner.supervisor("notes").unwrap();
        within(async {
            let mut rx = sup.subscribe();
            loop {
                let state = rx.borrow_and_update().clone();
                if cond(&state, sup.restarts()) {
                    return;
                }
                let _ = rx.changed().await;
            }
        })
        .await
    }
}

async fn layout(bus: &Bus) -> Value {
    call(bus, "store.kv_layout_get", json!({"extension": "notes"}))
        .await
        .unwrap()["version"]
        .clone()
}

async fn stored(bus: &Bus, id: &str) -> Value {
    call(
        bus,
        "store.kv_get",
        json!({"owner": "notes", "key": format!("note/{id}")}),
    )
    .await
    .unwrap()["value"]
        .clone()
}

async fn get(bus: &Bus, id: &str) -> Value {
    let answer = call(
        bus,
        "ext.call",
        json!({"name": "notes", "method": "notes.get", "params": {"id": id}}),
    )
    .await
    .unwrap();
    answer["note"].clone()
}

fn log(s: &Scratch) -> String {
    std::fs::read_to_string(s.join("state/logs/extensions/notes.log")).unwrap_or_default()
}

/// Wait until the log (written as the extension's stderr is read) holds `line`.
async fn wait_log(s: &Scratch, line: &str) {
    within(async {
        while !log(s).lines().any(|l| l == line) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn count(s: &Scratch, line: &str) -> usize {
    log(s).lines().filter(|l| *l == line).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_migrate_through_three_releases_and_never_downgrade() {
    let s = Scratch::new("releases");
    start_broker(&s.join("bus.sock"));
    let _storaged = start_storaged(&s);
    let bus = client(&s);

    // Release 1: a fresh layout, recorded 1 once configure succeeded.
    let phase = Phase::start(&s, 1, false);
    phase.wait(|st, _| *st == State::Running).await;
    assert_eq!(layout(&bus).await, json!(1));
    for (id, text) in IDS {
        call(
            &bus,
            "ext.call",
            json!({"name": "notes", "method": "notes.put", "params": {"id": id, "text": text}}),
        )
        .await
        .unwrap();
    }
    assert_eq!(get(&bus, "a").await, json!({"text": "alpha"}));
    phase.stop().await;

    // Release 2, crashing right after migrating the first note: configure never
    // succeeds, so the layout stays 1; the other notes are untouched.
    let phase = Phase::start(&s, 2, true);
    phase
        .wait(|st, restarts| matches!(st, State::Backoff { .. }) && restarts >= 1)
        .await;
    wait_log(&s, "migrated note/a to 2").await;
    assert_eq!(layout(&bus).await, json!(1));
    assert_eq!(stored(&bus, "a").await, json!({"body": "alpha", "v": 2}));
    assert_eq!(stored(&bus, "b").await, json!({"text": "bravo"}));
    assert_eq!(stored(&bus, "c").await, json!({"text": "charlie"}));
    let inspect = call(&bus, "ext.inspect", json!({"name": "notes"}))
        .await
        .unwrap();
    assert_eq!(inspect["state"], "backoff", "{inspect}");
    assert_eq!(
        inspect["last_exit"]["status"], "exited with code 3",
        "{inspect}"
    );
    phase.stop().await;

    // Release 2 again, without the crash: the migration is retried and
    // finishes; every note was migrated exactly once.
    let phase = Phase::start(&s, 2, false);
    phase.wait(|st, _| *st == State::Running).await;
    for (id, text) in IDS {
        assert_eq!(get(&bus, id).await, json!({"body": text, "v": 2}));
    }
    assert_eq!(layout(&bus).await, json!(2));
    for (id, _) in IDS {
        wait_log(&s, &format!("migrated note/{id} to 2")).await;
    }
    for (id, _) in IDS {
        assert_eq!(
            count(&s, &format!("migrated note/{id} to 2")),
            1,
            "{}",
            log(&s)
        );
    }
    assert_eq!(phase.runner.supervisor("notes").unwrap().restarts(), 0);
    phase.stop().await;

    // Release 3: 2→3 adds len.
    let phase = Phase::start(&s, 3, false);
    phase.wait(|st, _| *st == State::Running).await;
    for (id, text) in IDS {
        assert_eq!(
            get(&bus, id).await,
            json!({"body": text, "v": 3, "len": text.len()})
        );
    }
    assert_eq!(layout(&bus).await, json!(3));
    for (id, _) in IDS {
        wait_log(&s, &format!("migrated note/{id} to 3")).await;
        assert_eq!(count(&s, &format!("migrated note/{id} to 2")), 1);
    }
    phase.stop().await;

    // Back to release 2: refused before its process starts, never restarted.
    let lines_before = log(&s).lines().count();
    let phase = Phase::start(&s, 2, false);
    phase
        .wait(|st, _| matches!(st, State::Refused { .. }))
        .await;
    let sup = phase.runner.supervisor("notes").unwrap();
    assert_eq!(sup.restarts(), 0);
    assert_eq!(sup.pid(), None, "the process never started");
    let inspect = call(&bus, "ext.inspect", json!({"name": "notes"}))
        .await
        .unwrap();
    assert_eq!(inspect["state"], "refused", "{inspect}");
    assert_eq!(inspect["restarts"], 0, "{inspect}");
    let refusal = inspect["refusal"].as_str().unwrap();
    assert!(refusal.contains("kv_downgrade"), "{refusal}");
    let answer = call(
        &bus,
        "ext.call",
        json!({"name": "notes", "method": "notes.get", "params": {"id": "a"}}),
    )
    .await;
    assert_eq!(answer.unwrap_err().code(), Some("unavailable"));
    assert_eq!(layout(&bus).await, json!(3));
    assert_eq!(
        stored(&bus, "a").await,
        json!({"body": "alpha", "v": 3, "len": 5})
    );
    assert_eq!(log(&s).lines().count(), lines_before, "nothing ran");
    phase.stop().await;
}
