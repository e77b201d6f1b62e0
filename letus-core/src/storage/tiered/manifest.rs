//! The tier manifest (`tiers.manifest` in the hot root): where each sealed file of a tiered store lives.
//!
//! ## Format (version 1)
//!
//! ```text
//! magic "LETUSTMF" | u32 format = 1 | u32 crc32(magic || format)        the small-log header (FORMAT.md)
//! u64 epoch                    the object-store epoch this store holds (0: no cold tier claimed yet)
//! u32 n_epochs | n_epochs × u64  every epoch this store has held (whose orphans it may delete)
//! u32 n_files  | n_files × file
//! u32 crc32 of everything before it
//!
//! file := u16 rel_len | rel (UTF-8, '/'-separated, relative to the hot root)
//!         u8 tier (0 hot, 1 warm, 2 cold) | u64 size | u32 crc32 of the file's bytes (0 while hot)
//!         u64 sealed_at (the version at which the file was first seen sealed)
//!         u16 key_len | key (the object's key when cold, empty otherwise)
//!         u16 n_pins | n_pins × (u64 start, u64 len)   ranges kept in `tier-pins/<rel>` while cold, in order,
//!                                                      disjoint, inside the file
//! ```
//!
//! The manifest is the one authority on where a file is: it is replaced whole (`fsutil::write_whole_file`:
//! temporary name, fsync, rename, directory fsync), so a crash leaves the old or the new one, never a mix, and a
//! file moved between tiers is switched only after its copy was verified (see `mover.rs`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, u64_at, LOG_HEADER_LEN};
use crate::storage::Storage;

/// The manifest's file name in the hot root.
pub const MANIFEST_NAME: &str = "tiers.manifest";
const MAGIC: &[u8; 8] = b"LETUSTMF";
const FORMAT: u32 = 1;

/// A storage tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Tier {
    /// The store's own directory (fast disk).
    Hot,
    /// A second local directory (cheaper disk).
    Warm,
    /// An object store.
    Cold,
}

impl Tier {
    /// All tiers, hottest first.
    pub const ALL: [Tier; 3] = [Tier::Hot, Tier::Warm, Tier::Cold];

    /// Its name in status reports and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Hot => "hot",
            Tier::Warm => "warm",
            Tier::Cold => "cold",
        }
    }

    fn code(self) -> u8 {
        match self {
            Tier::Hot => 0,
            Tier::Warm => 1,
            Tier::Cold => 2,
        }
    }

    fn from_code(c: u8) -> Option<Tier> {
        match c {
            0 => Some(Tier::Hot),
            1 => Some(Tier::Warm),
            2 => Some(Tier::Cold),
            _ => None,
        }
    }
}

/// One sealed file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRecord {
    /// Where it is.
    pub tier: Tier,
    /// Its length in bytes.
    pub size: u64,
    /// CRC-32 of its bytes, verified on every move (0 until its first move).
    pub crc: u32,
    /// The version at which it was first seen sealed: its age is counted from there.
    pub sealed_at: u64,
    /// Its object key while cold.
    pub key: String,
    /// The `(start, len)` ranges kept on the hot disk while it is cold (its pin file holds them back to back).
    pub pins: Vec<(u64, u64)>,
}

/// The decoded manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The object-store epoch held (0: none).
    pub epoch: u64,
    /// Every epoch this store has held.
    pub epochs: Vec<u64>,
    /// The sealed files, by path relative to the hot root.
    pub files: BTreeMap<String, FileRecord>,
}

impl Manifest {
    /// Encodes the manifest.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = log_header(MAGIC, FORMAT).to_vec();
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&(self.epochs.len() as u32).to_le_bytes());
        for e in &self.epochs {
            b.extend_from_slice(&e.to_le_bytes());
        }
        b.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for (rel, f) in &self.files {
            put_str(&mut b, rel);
            b.push(f.tier.code());
            b.extend_from_slice(&f.size.to_le_bytes());
            b.extend_from_slice(&f.crc.to_le_bytes());
            b.extend_from_slice(&f.sealed_at.to_le_bytes());
            put_str(&mut b, &f.key);
            let n = u16::try_from(f.pins.len()).unwrap_or(u16::MAX);
            b.extend_from_slice(&n.to_le_bytes());
            for (s, l) in f.pins.iter().take(usize::from(n)) {
                b.extend_from_slice(&s.to_le_bytes());
                b.extend_from_slice(&l.to_le_bytes());
            }
        }
        let c = crc(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes manifest bytes read from `path` (named in errors).
    pub fn decode(path: &Path, b: &[u8]) -> Result<Manifest> {
        check_log_header(path, b, MAGIC, FORMAT, "tier manifest")?;
        let bad = |at: usize, what: &str| Error::corrupt(path, at as u64, what.to_string());
        let body_end = b
            .len()
            .checked_sub(4)
            .filter(|&e| e >= LOG_HEADER_LEN)
            .ok_or_else(|| bad(0, "tier manifest is cut"))?;
        if u32_at(b, body_end) != Some(crc(&b[..body_end])) {
            return Err(bad(body_end, "tier manifest checksum"));
        }
        let body = &b[..body_end];
        let mut r = Cursor {
            b: body,
            at: LOG_HEADER_LEN,
        };
        let cut = |at: usize| bad(at, "tier manifest ends inside a field");
        let epoch = r.u64().ok_or_else(|| cut(r.at))?;
        let n_epochs = r.u32().ok_or_else(|| cut(r.at))?;
        let mut epochs = Vec::new();
        for _ in 0..n_epochs {
            epochs.push(r.u64().ok_or_else(|| cut(r.at))?);
        }
        let n = r.u32().ok_or_else(|| cut(r.at))?;
        let mut files = BTreeMap::new();
        for _ in 0..n {
            let at = r.at;
            let rel = r
                .str()
                .filter(|s| is_store_path(s))
                .ok_or_else(|| bad(at, "tier manifest: bad file name"))?;
            let tier = r
                .u8()
                .and_then(Tier::from_code)
                .ok_or_else(|| bad(at, "tier manifest: bad tier"))?;
            let size = r.u64().ok_or_else(|| cut(r.at))?;
            let fcrc = r.u32().ok_or_else(|| cut(r.at))?;
            let sealed_at = r.u64().ok_or_else(|| cut(r.at))?;
            let key = r.str().ok_or_else(|| bad(at, "tier manifest: bad key"))?;
            if tier == Tier::Cold && key.is_empty() {
                return Err(bad(at, "tier manifest: a cold file without a key"));
            }
            let n_pins = r
                .take(2)
                .map(|s| u16::from_le_bytes([s[0], s[1]]))
                .ok_or_else(|| cut(r.at))?;
            let mut pins = Vec::new();
            let mut end = 0u64;
            for _ in 0..n_pins {
                let (s, l) = (
                    r.u64().ok_or_else(|| cut(r.at))?,
                    r.u64().ok_or_else(|| cut(r.at))?,
                );
                // In order, disjoint, inside the file: a read is served from at most one range.
                if s < end || s.checked_add(l).is_none_or(|e| e > size) {
                    return Err(bad(
                        at,
                        "tier manifest: a pinned range outside the file or out of order",
                    ));
                }
                end = s + l;
                pins.push((s, l));
            }
            files.insert(
                rel,
                FileRecord {
                    tier,
                    size,
                    crc: fcrc,
                    sealed_at,
                    key,
                    pins,
                },
            );
        }
        if r.at != body.len() {
            return Err(bad(r.at, "tier manifest: bytes after the last file"));
        }
        Ok(Manifest {
            epoch,
            epochs,
            files,
        })
    }

    /// Reads the manifest of hot root `root`, empty if there is none.
    pub fn load(fs: &dyn Storage, root: &Path) -> Result<Manifest> {
        let path = root.join(MANIFEST_NAME);
        match fsutil::read_if_exists(fs, &path)? {
            Some(b) => Manifest::decode(&path, &b),
            None => Ok(Manifest::default()),
        }
    }

    /// Replaces the manifest of `root` durably (old or new after a crash, never a mix).
    pub fn store(&self, fs: &dyn Storage, root: &Path) -> Result<()> {
        fsutil::write_whole_file(fs, root, MANIFEST_NAME, &self.encode()).map(drop)
    }
}

/// A path a manifest may name: relative, `/`-separated, without `.`, `..` or empty components (recovery deletes
/// files by these names, so a manifest can never point it outside the store).
fn is_store_path(s: &str) -> bool {
    !s.is_empty()
        && s.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && !s.contains('\\')
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    // Names are store paths and object keys: far below 64 KiB (checked where they are made).
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&s.as_bytes()[..usize::from(len)]);
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    fn u32(&mut self) -> Option<u32> {
        let v = u32_at(self.b, self.at)?;
        self.at += 4;
        Some(v)
    }
    fn u64(&mut self) -> Option<u64> {
        let v = u64_at(self.b, self.at)?;
        self.at += 8;
        Some(v)
    }
    fn str(&mut self) -> Option<String> {
        let len = self.take(2).map(|s| u16::from_le_bytes([s[0], s[1]]))?;
        let s = self.take(usize::from(len))?;
        String::from_utf8(s.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut m = Manifest {
            epoch: 7,
            epochs: vec![3, 7],
            ..Manifest::default()
        };
        m.files.insert(
            "state/lsvps/000001.idx".into(),
            FileRecord {
                tier: Tier::Cold,
                size: 1234,
                crc: 99,
                sealed_at: 5,
                key: "p/data/7/state/lsvps/000001.idx".into(),
                pins: vec![(0, 100), (1000, 234)],
            },
        );
        m.files.insert(
            "state/vdls/000001.vdl".into(),
            FileRecord {
                tier: Tier::Hot,
                size: 10,
                crc: 0,
                sealed_at: 9,
                key: String::new(),
                pins: Vec::new(),
            },
        );
        m
    }

    #[test]
    fn a_manifest_round_trips() {
        let m = sample();
        let b = m.encode();
        assert_eq!(Manifest::decode(Path::new("m"), &b).unwrap(), m);
    }

    #[test]
    fn a_name_outside_the_store_is_refused() {
        for bad in [
            "../etc/passwd",
            "/abs/000001.idx",
            "a//000001.idx",
            "./000001.idx",
            "",
        ] {
            let mut m = sample();
            let f = m.files.values().next().unwrap().clone();
            m.files.insert(bad.into(), f);
            assert!(
                Manifest::decode(Path::new("m"), &m.encode()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_refused() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(
                Manifest::decode(Path::new("m"), &b[..n]).is_err(),
                "cut at {n}"
            );
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(Manifest::decode(Path::new("m"), &c).is_err(), "flip at {i}");
        }
    }
}
