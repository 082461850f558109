//! The tunnel runs extrunner holds for tunneld, and the tunnel's public URL.
//!
//! A `tunnel.run` that tunneld asks for (through `ext.call` with `hold`) is recorded
//! here by run ID and package for as long as the call is open ([`TunnelRuns::open`]);
//! the package's `tunnel.url` is forwarded to tunneld on the bus only when it quotes a
//! run this package is running (spec: Crash and reconnect, `tunnel.run`), and refused
//! `conflict` otherwise.
//!
//! The public URL a published tunnel gives wins over `settings.webhooks.public_url` in
//! every package's `configure` ([`TunnelRuns::public_url`]); extrunner follows it from
//! the store (`store.tunnel_get`) and the `tunnel.changed` notification tunneld
//! publishes, and configures every running package again when it changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The most tunnel runs held at once (one is configured; a few overlap while one ends).
pub const MAX_RUNS: usize = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The open `tunnel.run` calls, and the tunnel's public URL.
#[derive(Debug, Default)]
pub struct TunnelRuns {
    runs: Mutex<HashMap<String, String>>,
    url: Mutex<Option<String>>,
}

/// An open run: dropping it (the call answered, failed or was cancelled) forgets it.
#[derive(Debug)]
pub struct OpenRun {
    runs: Arc<TunnelRuns>,
    run_id: String,
}

impl Drop for OpenRun {
    fn drop(&mut self) {
        lock(&self.runs.runs).remove(&self.run_id);
    }
}

impl TunnelRuns {
    /// Record `run_id` as `package`'s open run. `None` when the ID is empty, already
    /// open, or [`MAX_RUNS`] are open.
    pub fn open(self: &Arc<Self>, package: &str, run_id: &str) -> Option<OpenRun> {
        let mut runs = lock(&self.runs);
        if run_id.is_empty() || runs.contains_key(run_id) || runs.len() >= MAX_RUNS {
            return None;
        }
        runs.insert(run_id.to_owned(), package.to_owned());
        Some(OpenRun {
            runs: self.clone(),
            run_id: run_id.to_owned(),
        })
    }

    /// Whether `package` runs the open run `run_id`.
    pub fn holds(&self, package: &str, run_id: &str) -> bool {
        lock(&self.runs).get(run_id).is_some_and(|p| p == package)
    }

    /// The tunnel's public URL now, when one is published.
    pub fn public_url(&self) -> Option<String> {
        lock(&self.url).clone()
    }

    /// Set the public URL (`None` or empty: none); answers whether it changed.
    pub fn set_public_url(&self, url: Option<String>) -> bool {
        let url = url.filter(|u| !u.is_empty());
        let mut now = lock(&self.url);
        if *now == url {
            return false;
        }
        *now = url;
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_run_is_held_by_its_package_while_open() {
        let runs = Arc::new(TunnelRuns::default());
        let open = runs.open("ssh", "run_1").unwrap();
        assert!(runs.holds("ssh", "run_1"));
        assert!(!runs.holds("other", "run_1"));
        assert!(!runs.holds("ssh", "run_2"));
        assert!(runs.open("ssh", "run_1").is_none());
        assert!(runs.open("ssh", "").is_none());
        drop(open);
        assert!(!runs.holds("ssh", "run_1"));
        let held: Vec<_> = (0..MAX_RUNS)
            .map(|i| runs.open("ssh", &format!("r{i}")).unwrap())
            .collect();
        assert!(runs.open("ssh", "one-more").is_none());
        drop(held);
    }

    #[test]
    fn the_public_url_changes_once() {
        let runs = TunnelRuns::default();
        assert!(runs.set_public_url(Some("https://a.example".into())));
        assert!(!runs.set_public_url(Some("https://a.example".into())));
        assert_eq!(runs.public_url().as_deref(), Some("https://a.example"));
        assert!(runs.set_public_url(Some(String::new())));
        assert_eq!(runs.public_url(), None);
        assert!(!runs.set_public_url(None));
    }
}
