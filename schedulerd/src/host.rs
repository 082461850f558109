//! This host among the hosts of one suite.
//!
//! Several hosts may run the whole suite on one PostgreSQL database. Each has an ID:
//! `--host-id` (what `open-conduit up` passes: a random ID kept in
//! `<state>/host-id`, so two `up` on one machine are two hosts), else one derived
//! from `/etc/machine-id` (one packaged suite per machine; the hostname where no
//! machine ID exists). schedulerd names its host
//! on every attempt it starts, and beats for it (`store.host_beat`) every
//! [`HOST_BEAT`]: a host whose beat is older than its host lease is gone, and only
//! then may another host take over its expired attempts; until then they are its own
//! to adopt.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use busapi::store::HostBeatRequest;
use busapi::Call;
use sha2::{Digest, Sha256};

use crate::ports::Store;

/// How often the host beats.
pub const HOST_BEAT: Duration = Duration::from_secs(3);
/// How soon a failed beat is tried again (so that a database back from an outage
/// hears this host within a second: storaged gives every host a full lease from then,
/// see docs/decisions.md, "Leases after a database outage (issue 47)").
pub const HOST_BEAT_RETRY: Duration = Duration::from_secs(1);
/// How long a host counts as alive after its last beat, unless `--host-lease-s` says.
pub const DEFAULT_HOST_LEASE: Duration = Duration::from_secs(30);
/// The shortest host lease: a few beats.
pub const MIN_HOST_LEASE: Duration = Duration::from_secs(10);
/// The longest host lease.
pub const MAX_HOST_LEASE: Duration = Duration::from_secs(3600);
/// The longest host ID.
pub const MAX_HOST_ID: usize = 64;

/// Whether `id` is a host ID: 1 to [`MAX_HOST_ID`] of `A-Z a-z 0-9 _ - .`.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_HOST_ID {
        return Err(format!(
            "a host ID is 1 to {MAX_HOST_ID} bytes (the host ID limit), not {}",
            id.len()
        ));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(format!(
            "the host ID {id:?} may hold only A-Z a-z 0-9 _ - ."
        ));
    }
    Ok(())
}

/// The host ID derived from a machine ID (never the machine ID itself, which is
/// meant to stay private): `m-` and 24 hex digits of a digest.
pub fn from_machine_id(machine_id: &str) -> String {
    let digest = Sha256::digest(format!("open-conduit host\n{}", machine_id.trim()).as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("m-{hex}")
}

/// Where a machine ID is looked for, in order; the hostname is the last resort (a
/// container without a machine ID has a name of its own).
const MACHINE_IDS: [&str; 4] = [
    "/etc/machine-id",
    "/var/lib/dbus/machine-id",
    "/proc/sys/kernel/hostname",
    "/etc/hostname",
];

/// This host's ID: `given`, else derived from the machine ID (see [`MACHINE_IDS`]).
pub fn resolve_id(given: Option<&str>) -> Result<String, String> {
    if let Some(id) = given {
        let id = id.trim();
        check_id(id)?;
        return Ok(id.to_owned());
    }
    for path in MACHINE_IDS {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.trim().is_empty() {
                return Ok(from_machine_id(&format!("{path}\n{}", text.trim())));
            }
        }
    }
    Err(format!(
        "no host ID given (--host-id) and none of {} names this machine",
        MACHINE_IDS.join(", ")
    ))
}

/// A host lease within [`MIN_HOST_LEASE`] and [`MAX_HOST_LEASE`].
pub fn check_lease(lease: Duration) -> Result<Duration, String> {
    if lease < MIN_HOST_LEASE || lease > MAX_HOST_LEASE {
        return Err(format!(
            "a host lease of {lease:?} is outside the limits ({MIN_HOST_LEASE:?} to {MAX_HOST_LEASE:?})"
        ));
    }
    Ok(lease)
}

/// This host: its ID, its name for people and its lease; whether it has beaten yet.
#[derive(Debug, Clone)]
pub struct Host {
    /// Its ID.
    pub id: String,
    /// Its name for people.
    pub name: String,
    /// How long it counts as alive after a beat.
    pub lease: Duration,
    beaten: Arc<AtomicBool>,
}

impl Host {
    /// A host that has not beaten yet.
    pub fn new(id: String, name: String, lease: Duration) -> Host {
        Host {
            id,
            name,
            lease,
            beaten: Arc::default(),
        }
    }

    /// Whether a beat was recorded: nothing starts (or is taken over) before, so that
    /// no attempt names a host the others would find gone.
    pub fn beaten(&self) -> bool {
        self.beaten.load(Ordering::SeqCst)
    }

    /// One beat: when this host returns from being gone, since when it was gone.
    pub async fn beat(&self, store: &Store) -> Result<Option<i64>, String> {
        let answer = store
            .call(&HostBeatRequest {
                host: self.id.clone(),
                name: self.name.clone(),
                lease_ms: crate::ports::ms(self.lease),
            })
            .await
            .map_err(|e| format!("{}: {e}", HostBeatRequest::METHOD))?;
        if !self.beaten.swap(true, Ordering::SeqCst) || answer.returned {
            tracing::info!(host = %self.id, name = %self.name, lease = ?self.lease, "this host is alive in the store");
        }
        Ok(answer.gone_since_ms)
    }

    /// Beat every [`HOST_BEAT`], forever; `returned` is told, each time this host
    /// comes back from being gone, since when it was gone.
    pub async fn run<F: Fn(i64) + Send + 'static>(self, store: Store, returned: F) {
        let mut failing = false;
        loop {
            match self.beat(&store).await {
                Ok(gone) => {
                    failing = false;
                    if let Some(since) = gone {
                        tracing::warn!(host = %self.id, gone_since = %protocol::time::format_rfc3339_ms(since), "this host was gone: the other hosts may have settled its attempts");
                        returned(since);
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(host = %self.id, error = %e, "this host cannot beat now; past its host lease the other hosts take its attempts over");
                    }
                    failing = true;
                }
            }
            tokio::time::sleep(if failing { HOST_BEAT_RETRY } else { HOST_BEAT }).await;
        }
    }

    /// The lease owner this process writes: `schedulerd:<pid>@<host>`.
    pub fn owner(&self) -> String {
        format!("schedulerd:{}@{}", std::process::id(), self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_and_machine_ids_hidden() {
        assert!(check_id("h-0123abcd").is_ok());
        assert!(check_id("").unwrap_err().contains("host ID limit"));
        assert!(check_id(&"x".repeat(65))
            .unwrap_err()
            .contains("host ID limit"));
        assert!(check_id("a b").unwrap_err().contains("may hold only"));
        let id = from_machine_id("0123456789abcdef0123456789abcdef\n");
        assert_eq!(id, from_machine_id("0123456789abcdef0123456789abcdef"));
        assert!(id.starts_with("m-") && id.len() == 26, "{id}");
        assert!(!id.contains("0123456789abcdef"), "{id}");
        assert_eq!(resolve_id(Some(" h-1 ")).unwrap(), "h-1");
        assert!(resolve_id(Some("no/slash")).is_err());
    }

    #[test]
    fn host_leases_are_bounded() {
        assert!(check_lease(Duration::from_secs(30)).is_ok());
        assert!(check_lease(Duration::from_secs(1))
            .unwrap_err()
            .contains("outside the limits"));
        assert!(check_lease(Duration::from_secs(7200)).is_err());
    }
}
