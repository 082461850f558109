#![allow(clippy::unwrap_used)]

use std::time::Duration;

use daemon::{with_deadline, DeadlineElapsed, Signal, Signals};
use nix::sys::signal::{raise, Signal as Sig};

/// Turns a hang into a failure; never reached by a working test.
const HANG: Duration = Duration::from_secs(120);

// One test raises all the signals, so no two tests of this binary wait for signals at once.
#[tokio::test]
async fn real_signals_map_to_stop_and_reload() {
    // Install the handlers first: until then SIGTERM and SIGINT would kill the test binary.
    let mut signals = Signals::new().unwrap();

    raise(Sig::SIGHUP).unwrap();
    let got = tokio::time::timeout(HANG, signals.next()).await.unwrap();
    assert_eq!(got, Signal::Reload);

    raise(Sig::SIGTERM).unwrap();
    let got = tokio::time::timeout(HANG, signals.next()).await.unwrap();
    assert_eq!(got, Signal::Stop);

    raise(Sig::SIGINT).unwrap();
    let got = tokio::time::timeout(HANG, signals.next()).await.unwrap();
    assert_eq!(got, Signal::Stop);

    // A signal that arrives while nobody waits is kept for the next call.
    raise(Sig::SIGHUP).unwrap();
    tokio::task::yield_now().await;
    let got = tokio::time::timeout(HANG, signals.next()).await.unwrap();
    assert_eq!(got, Signal::Reload);
}

#[tokio::test]
async fn deadline_gives_the_output_in_time() {
    let out = with_deadline(HANG, async { 42 }).await;
    assert_eq!(out, Ok(42));
}

#[tokio::test]
async fn deadline_elapses_on_a_stuck_stop() {
    let deadline = Duration::from_millis(20);
    let err = with_deadline(deadline, std::future::pending::<()>())
        .await
        .unwrap_err();
    assert_eq!(err, DeadlineElapsed { deadline });
    assert_eq!(err.to_string(), "did not finish within 20ms");
    let err: daemon::Error = err.into();
    assert_eq!(err.to_string(), "did not finish within 20ms");
}
