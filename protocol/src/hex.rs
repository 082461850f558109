//! Lowercase hexadecimal, for digests, signatures and random IDs: one encoder and
//! one decoder for every crate (signature headers, tokens, IDs).

use std::fmt::Write as _;

/// `bytes` in lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The bytes `text` spells in hex (either case); `None` for an odd length or a
/// character that is not a hex digit. The empty text is no bytes.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let pairs = text.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    pairs
        .map(|p| Some((nibble(p[0])? << 4) | nibble(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_spells_each_byte_and_decode_reads_it_back() {
        assert_eq!(encode(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(decode("000fA0ff"), Some(vec![0x00, 0x0f, 0xa0, 0xff]));
        assert_eq!(decode(""), Some(vec![]));
        assert_eq!(decode("abc"), None);
        assert_eq!(decode("zz"), None);
    }
}
