//! Lowercase hexadecimal, as used by every JSON form (SPEC.md §1).

use std::string::String;
use std::vec::Vec;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes hex of even length; `None` on any other character or an odd length.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some(digit(*hi)? << 4 | digit(*lo)?),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip_and_rejects() {
        assert_eq!(super::encode(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(super::decode("00ABff"), Some(std::vec![0x00, 0xab, 0xff]));
        assert_eq!(super::decode("0"), None);
        assert_eq!(super::decode("0g"), None);
        assert_eq!(super::decode(""), Some(std::vec![]));
    }
}
