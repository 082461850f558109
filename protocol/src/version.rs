//! Integer protocol versions and their negotiation.
//!
//! `initialize` carries the host's versions; the extension answers the highest
//! version both speak. No common version is a deterministic refusal,
//! `unsupported_protocol_version`, before any other call.

use crate::error::{Code, RpcError};

/// The protocol versions this build speaks. Version 1 is the first.
pub const PROTOCOL_VERSIONS: &[u32] = &[1];

/// The highest version in both lists.
pub fn negotiate(ours: &[u32], theirs: &[u32]) -> Option<u32> {
    ours.iter().copied().filter(|v| theirs.contains(v)).max()
}

/// The refusal for no common version, naming both lists.
pub fn unsupported(ours: &[u32], theirs: &[u32]) -> RpcError {
    RpcError::new(
        Code::UnsupportedProtocolVersion,
        format!("no common protocol version: this side speaks {ours:?}, the peer {theirs:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_highest_common_version() {
        assert_eq!(negotiate(&[1, 2, 3], &[2, 3, 4]), Some(3));
        assert_eq!(negotiate(&[1], &[1]), Some(1));
        assert_eq!(negotiate(&[1], &[2]), None);
        assert_eq!(negotiate(&[], &[1]), None);
    }

    #[test]
    fn refusal_names_both_lists() {
        let e = unsupported(&[1], &[7, 8]);
        assert!(e.is(Code::UnsupportedProtocolVersion));
        assert!(
            e.message.contains("[1]") && e.message.contains("[7, 8]"),
            "{}",
            e.message
        );
    }
}
