//! What a detached executor keeps of each run it follows, beside the run's own
//! files: its order (the oldest ended runs are dropped first), the epoch it was
//! started or last adopted at (an older one is refused), and whether it ended. The
//! shell and claude-code executors each keep a table of runs; this is their shared
//! part, with the bounded read of a run's output.

use protocol::{Code, RpcError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// `invalid` unless `executor` is empty or `served`, the one executor answering.
pub fn check_executor(executor: &str, served: &str) -> Result<(), RpcError> {
    if executor.is_empty() || executor == served {
        return Ok(());
    }
    Err(RpcError::new(
        Code::Invalid,
        format!("executor `{executor}` is not served here (only `{served}`)"),
    ))
}

/// An execution ID names a directory: it must be one path component.
pub fn check_id(id: &str) -> Result<(), RpcError> {
    let ok =
        !id.is_empty() && id.len() <= 255 && id != "." && id != ".." && !id.contains(['/', '\0']);
    if ok {
        return Ok(());
    }
    Err(RpcError::new(
        Code::Invalid,
        "execution_id must be one path component: non-empty, at most 255 bytes, without / or NUL",
    ))
}

/// `not_adoptable` for execution `id`, saying why.
pub fn not_adoptable(id: &str, why: impl std::fmt::Display) -> RpcError {
    RpcError::new(
        Code::NotAdoptable,
        format!("execution {id} is not adoptable: {why}"),
    )
}

/// The recovery metadata a detached executor keeps for a run: at least the epoch
/// the run was started (or last adopted) at.
pub trait Recovery: serde::de::DeserializeOwned {
    /// The epoch in the metadata.
    fn epoch(&self) -> u64;
}

/// The opening of `executor.recover` every detached executor shares: the metadata
/// is of `schema` and reads as `D`, the new `epoch` is not older than it, and a run
/// this process still follows (`followed`) takes the new epoch. `Ok(None)`: that run
/// is adopted at `epoch`, nothing more to prove; `Ok(Some(data))`: the metadata, for
/// the executor to prove the run by. Anything else is `not_adoptable`, saying why.
pub fn recovery_opening<D: Recovery>(
    id: &str,
    schema: &str,
    recovery: &protocol::wire::Payload,
    epoch: u64,
    followed: Option<&Tracked>,
) -> Result<Option<D>, RpcError> {
    if recovery.schema != schema {
        return Err(not_adoptable(
            id,
            format!("the recovery metadata is not {schema}"),
        ));
    }
    let data: D = serde_json::from_value(recovery.data.clone())
        .map_err(|e| not_adoptable(id, format!("the recovery metadata does not read: {e}")))?;
    if epoch < data.epoch() {
        return Err(not_adoptable(
            id,
            format!("epoch {epoch} is lower than the run's {}", data.epoch()),
        ));
    }
    if let Some(run) = followed {
        if let Err(current) = run.raise_epoch(epoch) {
            return Err(not_adoptable(
                id,
                format!("epoch {epoch} is lower than the run's {current}"),
            ));
        }
        return Ok(None);
    }
    Ok(Some(data))
}

/// A run's order, epoch and end.
#[derive(Debug)]
pub struct Tracked {
    seq: u64,
    epoch: AtomicU64,
    ended: AtomicBool,
}

impl Tracked {
    /// Run number `seq` of its table, at `epoch`, ended already or not.
    pub fn new(seq: u64, epoch: u64, ended: bool) -> Tracked {
        Tracked {
            seq,
            epoch: AtomicU64::new(epoch),
            ended: AtomicBool::new(ended),
        }
    }

    /// The epoch now.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Takes `epoch` when it is not older than the run's; else the run's, unchanged.
    pub fn raise_epoch(&self, epoch: u64) -> Result<(), u64> {
        self.epoch
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |current| {
                (epoch >= current).then_some(epoch)
            })
            .map(|_| ())
    }

    /// `conflict` when `epoch` is older than the run's: a superseded holder.
    pub fn check_epoch(&self, epoch: u64) -> Result<(), RpcError> {
        let current = self.epoch();
        if epoch < current {
            return Err(RpcError::new(
                Code::Conflict,
                format!("epoch {epoch} is superseded by {current}"),
            ));
        }
        Ok(())
    }

    /// Whether its result is known.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Its result is known.
    pub fn set_ended(&self) {
        self.ended.store(true, Ordering::SeqCst);
    }
}

/// Drops the oldest ended runs of `runs` beyond `max` (their directories stay, and a
/// recover finds them again).
pub fn evict<R>(runs: &mut HashMap<String, Arc<R>>, max: usize, tracked: impl Fn(&R) -> &Tracked) {
    let mut ended: Vec<(u64, String)> = runs
        .iter()
        .filter(|(_, r)| tracked(r).ended())
        .map(|(id, r)| (tracked(r).seq, id.clone()))
        .collect();
    if ended.len() <= max {
        return;
    }
    ended.sort_unstable();
    let extra = ended.len() - max;
    for (_, id) in ended.into_iter().take(extra) {
        runs.remove(&id);
    }
}

/// Reads a run's output file, bounded: all of it up to `max` bytes; beyond that its
/// first and last `max / 2` bytes with a marker. A missing file reads as empty; a
/// symlink or anything but a regular file there (a command that swapped its output
/// for a link to a secret) is refused, never read ([`crate::nofollow`]).
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file in a directory", path.display()),
        ));
    };
    match crate::nofollow::Dir::open(parent) {
        Ok(dir) => dir.read_bounded(name, max),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn epochs_only_rise_and_older_ones_are_refused() {
        let t = Tracked::new(0, 3, false);
        assert_eq!(t.raise_epoch(2), Err(3));
        assert!(t.check_epoch(2).is_err());
        assert_eq!(t.raise_epoch(5), Ok(()));
        assert_eq!(t.epoch(), 5);
        assert!(t.check_epoch(5).is_ok());
    }

    #[test]
    fn the_oldest_ended_runs_go_first() {
        let mut runs: HashMap<String, Arc<Tracked>> = HashMap::new();
        for seq in 0..5u64 {
            runs.insert(format!("r{seq}"), Arc::new(Tracked::new(seq, 1, seq != 1)));
        }
        evict(&mut runs, 2, |r| r);
        let mut left: Vec<&String> = runs.keys().collect();
        left.sort();
        // r1 runs on; of the ended r0, r2, r3, r4 the two newest stay.
        assert_eq!(left, ["r1", "r3", "r4"]);
    }
}
