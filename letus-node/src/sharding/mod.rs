//! Subtree sharding over HTTP: shard nodes each hold some of a trie's 256 subtrees (split by the first byte of
//! the key path), and a router offers the API of a single node in front of them, with the roots, values and
//! proofs one node holding every key would give (`letus_core::shard` composes them).
//!
//! - A **shard** is an ordinary `letus serve` with `--shard-prefixes`: it refuses writes outside its subtrees and
//!   answers `GET /v1/shard/tops` (any node does: a node without the flag holds all 256).
//! - The **router** (`letus route`, [`router`]) splits each block's writes by subtree, commits the version on
//!   every shard, composes each trie's root from the shards' tops, and keeps the history of those roots (its
//!   digests and history proofs). Reads go to the shard holding the key, at the router's version, and their
//!   proofs are rebuilt against the composed root and checked before they are answered.

pub mod etcd;
pub mod http;
pub mod map;
pub mod router;

use std::fmt;

use letus_core::shard::{Top, Tops};
use letus_verify::{Hash, KeyPath};

use crate::api::TopJson;

/// A set of subtrees, by the first byte of their key paths.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrefixSet([bool; 256]);

impl PrefixSet {
    /// All 256 subtrees.
    pub const ALL: PrefixSet = PrefixSet([true; 256]);

    /// No subtree.
    pub const NONE: PrefixSet = PrefixSet([false; 256]);

    /// The subtrees `p` for which `f(p)`.
    pub fn from_fn(f: impl Fn(u8) -> bool) -> PrefixSet {
        PrefixSet(std::array::from_fn(|p| f(p as u8)))
    }

    /// Parses a comma-separated list of two-digit hex prefixes and inclusive ranges: `00-3f,80,c0-ff`.
    pub fn parse(s: &str) -> Result<PrefixSet, String> {
        let byte = |x: &str| {
            let x = x.trim();
            (x.len() == 2)
                .then(|| u8::from_str_radix(x, 16).ok())
                .flatten()
                .ok_or_else(|| format!("`{x}` is not a two-digit hex prefix (00 to ff)"))
        };
        let mut set = [false; 256];
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (byte(a)?, byte(b)?),
                None => (byte(part)?, byte(part)?),
            };
            if lo > hi {
                return Err(format!("`{part}`: the range runs backwards"));
            }
            for p in lo..=hi {
                set[usize::from(p)] = true;
            }
        }
        if !set.contains(&true) {
            return Err(format!("`{s}` names no subtree"));
        }
        Ok(PrefixSet(set))
    }

    /// The `i`-th of `n` equal contiguous parts of the 256 subtrees (`n` at most 256).
    pub fn part(i: usize, n: usize) -> PrefixSet {
        PrefixSet(std::array::from_fn(|p| p * n / 256 == i))
    }

    /// The number of subtrees in the set.
    pub fn count(&self) -> usize {
        self.0.iter().filter(|x| **x).count()
    }

    /// Whether subtree `prefix` is in the set.
    pub fn contains(&self, prefix: u8) -> bool {
        self.0[usize::from(prefix)]
    }

    /// Whether the key path `path` is in one of the set's subtrees.
    pub fn holds(&self, path: &KeyPath) -> bool {
        self.contains(path.0[0])
    }
}

impl fmt::Display for PrefixSet {
    /// The canonical form [`PrefixSet::parse`] reads: ranges, in order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut p = 0usize;
        while p < 256 {
            if !self.0[p] {
                p += 1;
                continue;
            }
            let start = p;
            while p < 256 && self.0[p] {
                p += 1;
            }
            let sep = if first { "" } else { "," };
            first = false;
            if p - 1 == start {
                write!(f, "{sep}{start:02x}")?;
            } else {
                write!(f, "{sep}{start:02x}-{:02x}", p - 1)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for PrefixSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrefixSet({self})")
    }
}

/// A shard's subtrees in its data directory (FORMAT.md §3.2).
pub const SHARD_FILE: &str = "shard.json";

/// The magic of [`SHARD_FILE`].
const SHARD_MAGIC: &str = "letus-shard";

#[derive(serde::Serialize, serde::Deserialize)]
struct HeldFile {
    magic: String,
    format: u32,
    prefixes: String,
    /// The BLAKE3 value hash (SPEC.md §2) of `prefixes`, hex: a damaged file is an error, never another set.
    check: String,
}

fn held_check(prefixes: &str) -> String {
    letus_verify::hash::value_hash(prefixes.as_bytes()).to_string()
}

/// The subtrees saved in `file`, `None` if it does not exist.
pub fn read_held(file: &std::path::Path) -> Result<Option<PrefixSet>, String> {
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let bad = |why: String| format!("{}: {why}", file.display());
    let f: HeldFile = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if f.magic != SHARD_MAGIC || f.format != 1 {
        return Err(bad(format!(
            "not a shard file of format 1 ({} {})",
            f.magic, f.format
        )));
    }
    if f.check != held_check(&f.prefixes) {
        return Err(bad(
            "its checksum does not match: the file is damaged".into()
        ));
    }
    PrefixSet::parse(&f.prefixes).map(Some).map_err(bad)
}

/// Saves `set` in `file` durably: a temporary file, fsync, rename, fsync of the directory.
pub fn write_held(file: &std::path::Path, set: &PrefixSet) -> std::io::Result<()> {
    use std::io::Write as _;
    let prefixes = set.to_string();
    let json = serde_json::to_vec(&HeldFile {
        magic: SHARD_MAGIC.into(),
        format: 1,
        check: held_check(&prefixes),
        prefixes,
    })
    .map_err(std::io::Error::other)?;
    let tmp = file.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&json)?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    let dir = file.parent().unwrap_or(std::path::Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

/// The JSON form of a trie's tops.
pub fn tops_json(tops: &Tops) -> Vec<TopJson> {
    tops.entries()
        .iter()
        .map(|(prefix, top)| match top {
            Top::Leaf { path, value_hash } => TopJson {
                prefix: *prefix,
                hash: None,
                path: Some(letus_verify::hex::encode(&path.0)),
                value_hash: Some(value_hash.to_string()),
            },
            Top::Branch(h) => TopJson {
                prefix: *prefix,
                hash: Some(h.to_string()),
                path: None,
                value_hash: None,
            },
        })
        .collect()
}

/// Tops from their JSON form, checked ([`Tops::new`]); `Err` says what is wrong.
pub fn tops_from_json(json: &[TopJson]) -> Result<Tops, String> {
    let hash = |s: &Option<String>, what: &str, p: u8| {
        s.as_deref()
            .and_then(Hash::from_hex)
            .ok_or_else(|| format!("top {p:02x}: `{what}` is not a hash"))
    };
    let mut entries = Vec::with_capacity(json.len());
    for t in json {
        let top = match (&t.hash, &t.path) {
            (Some(_), None) => Top::Branch(hash(&t.hash, "hash", t.prefix)?),
            (None, Some(_)) => Top::Leaf {
                path: KeyPath(hash(&t.path, "path", t.prefix)?.0),
                value_hash: hash(&t.value_hash, "value_hash", t.prefix)?,
            },
            _ => {
                return Err(format!(
                    "top {:02x}: either `hash` (a branch) or `path` and `value_hash` (a leaf)",
                    t.prefix
                ))
            }
        };
        entries.push((t.prefix, top));
    }
    Tops::new(entries).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_sets_parse_and_print_canonically() {
        let s = PrefixSet::parse("00-3f, 80,c0-ff").unwrap();
        assert!(s.contains(0x3f) && s.contains(0x80) && !s.contains(0x40) && s.contains(0xff));
        assert_eq!(s.to_string(), "00-3f,80,c0-ff");
        assert_eq!(PrefixSet::parse(&s.to_string()).unwrap(), s);
        assert_eq!(PrefixSet::ALL.to_string(), "00-ff");
        assert_eq!(PrefixSet::part(1, 4).to_string(), "40-7f");
        assert_eq!(PrefixSet::part(15, 16).to_string(), "f0-ff");
        for bad in ["", "g0", "1", "100", "40-3f", ","] {
            assert!(PrefixSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_shards_subtrees_survive_a_restart_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(SHARD_FILE);
        assert_eq!(read_held(&file).unwrap(), None);
        let set = PrefixSet::parse("00-3e,80").unwrap();
        write_held(&file, &set).unwrap();
        assert_eq!(read_held(&file).unwrap(), Some(set));
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replace("00-3e", "00-3f")).unwrap();
        assert!(read_held(&file).unwrap_err().contains("checksum"));
    }
}
