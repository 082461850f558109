//! Random bytes and IDs from the operating system's random source (`getrandom`:
//! `getrandom(2)` on Linux, no file to open), for the suite's nonces, keys and IDs.
//!
//! Two kinds of callers: those for whom a failure is an error to report ([`bytes`],
//! [`hex`]: keys, nonces, temporary names) and those that need an ID that is unique
//! even when the source fails ([`unique_bytes`], [`unique_hex`]: they fall back on
//! the time, the process ID and a counter: unique in this process, if not
//! unguessable).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// `N` random bytes from the operating system, or an error naming the random source.
pub fn bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut out = [0u8; N];
    fill(&mut out)?;
    Ok(out)
}

/// Fills `buf` with random bytes from the operating system, or an error naming the
/// random source.
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    getrandom::fill(buf)
        .map_err(|e| io::Error::other(format!("the system's random source failed: {e}")))
}

/// `n` random bytes from the operating system in lowercase hex (`2 * n` digits).
pub fn hex(n: usize) -> io::Result<String> {
    let mut buf = vec![0u8; n];
    fill(&mut buf)?;
    Ok(crate::hex::encode(&buf))
}

/// `N` random bytes from the operating system; when it cannot give them, bytes made
/// of the time, the process ID and a counter (unique in this process, not
/// unguessable). For IDs that must not fail, never for keys or nonces.
pub fn unique_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if fill(&mut out).is_err() {
        static N_CALLS: AtomicU64 = AtomicU64::new(0);
        let n = N_CALLS.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        let pid = u64::from(std::process::id());
        // The counter first (it alone tells two IDs of one process apart), then the
        // time and the process ID mixed.
        let words = [n, t ^ (pid << 32)];
        for (i, b) in out.iter_mut().enumerate() {
            let word = words[(i / 8) % 2];
            *b = word.to_le_bytes()[i % 8];
        }
    }
    out
}

/// [`unique_bytes`] in lowercase hex (`2 * N` digits).
pub fn unique_hex<const N: usize>() -> String {
    crate::hex::encode(&unique_bytes::<N>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_of_the_asked_length_and_differs() {
        let a = hex(16).expect("random source");
        let b = hex(16).expect("random source");
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        assert_ne!(a, b);
        assert_eq!(hex(0).expect("random source"), "");
    }

    #[test]
    fn unique_ids_differ() {
        let a = unique_hex::<12>();
        assert_eq!(a.len(), 24);
        assert_ne!(a, unique_hex::<12>());
        assert_ne!(bytes::<8>().expect("random source"), [0u8; 8]);
    }
}
