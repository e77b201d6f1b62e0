//! Unsigned LEB128 varints, as stored in compact slot entries (`trie/page.rs`) and compact index entries
//! (`lsvps/index_file.rs`): seven bits a byte, low bits first, the high bit set on every byte but the last; at most
//! 10 bytes, the tenth holding only the 64th bit.

/// Appends `v`.
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes the varint at the start of `b`: its value and its length. `Err` if `b` ends inside it, if it is longer
/// than 10 bytes or if its value does not fit 64 bits.
pub(crate) fn get(b: &[u8]) -> Result<(u64, usize), &'static str> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some(&byte) = b.get(i) else {
            return Err("varint ends early");
        };
        // The tenth byte holds the 64th bit only, and ends the varint.
        if i == 9 && byte > 1 {
            return Err("varint overflows 64 bits");
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err("varint longer than 10 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_malformed() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(get(&b), Ok((v, b.len())));
            assert!(get(&b[..b.len() - 1]).is_err());
        }
        assert!(get(&[0xff; 10]).is_err());
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(get(&over).is_err());
        assert!(get(&[0x80; 11]).is_err());
    }
}
