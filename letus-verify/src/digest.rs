//! Digests and digest verification (SPEC.md §7): `(tid, version, root)` plus the history commitment, and the
//! checker that compares digests from several sources and trusted checkpoints to detect forks and rollbacks.

use std::collections::BTreeMap;
use std::string::String;
use std::vec::Vec;

use serde::{Deserialize, Serialize};

use crate::error::{DecodeError, HistoryError};
use crate::hash::history_leaf;
use crate::history::{ConsistencyProof, InclusionProof};
use crate::wire::{object, Reader};
use crate::{Hash, TrieId, Version};

/// One trie's root at one version: what a proof is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commitment {
    /// Trie id.
    pub tid: TrieId,
    /// Version.
    pub version: Version,
    /// Root commitment `comm`.
    pub root: Hash,
}

/// A digest: a commitment plus the history before it (SPEC.md §7).
///
/// Its JSON form deserializes with §7's rules (see the `Deserialize` impl below): an object, every field present
/// once, and `history_len` not 0, so that no caller can forget [`Digest::validate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Digest {
    /// Trie id.
    pub tid: TrieId,
    /// Version.
    pub version: Version,
    /// Root commitment of the trie at `version`.
    pub root: Hash,
    /// Number of history entries up to and including this one (at least 1).
    pub history_len: u64,
    /// `MTH` of those entries.
    pub history_root: Hash,
}

/// Size of a binary digest.
pub const DIGEST_LEN: usize = 2 + 4 + 8 + 32 + 8 + 32;

impl Digest {
    /// The `(tid, version, root)` part.
    pub fn commitment(&self) -> Commitment {
        Commitment {
            tid: self.tid,
            version: self.version,
            root: self.root,
        }
    }

    /// This digest's own history leaf: entry number `history_len - 1`.
    pub fn history_leaf(&self) -> Hash {
        history_leaf(self.tid, self.version, &self.root)
    }

    /// Binary form (86 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DIGEST_LEN);
        out.extend_from_slice(&[crate::FORMAT_VERSION, object::DIGEST]);
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.root.0);
        out.extend_from_slice(&self.history_len.to_le_bytes());
        out.extend_from_slice(&self.history_root.0);
        out
    }

    /// Decodes the binary form.
    pub fn decode(bytes: &[u8]) -> Result<Digest, DecodeError> {
        let mut r = Reader::new(bytes);
        r.header(object::DIGEST)?;
        let d = Digest {
            tid: r.u32()?,
            version: r.u64()?,
            root: r.hash()?,
            history_len: r.u64()?,
            history_root: r.hash()?,
        };
        r.finish()?;
        d.validate()?;
        Ok(d)
    }

    /// Checks the field constraints (for digests obtained from JSON).
    pub fn validate(&self) -> Result<(), DecodeError> {
        if self.history_len == 0 {
            return Err(DecodeError::Malformed("digest history_len is 0"));
        }
        Ok(())
    }

    /// Checks that `(version, root)` of this trie is entry `proof.index` of this digest's history.
    pub fn verify_includes(
        &self,
        version: Version,
        root: &Hash,
        proof: &InclusionProof,
    ) -> Result<(), HistoryError> {
        proof.verify(
            &self.history_root,
            self.history_len,
            &history_leaf(self.tid, version, root),
        )
    }

    /// Checks that this digest's history is `older`'s history plus later entries.
    pub fn verify_extends(
        &self,
        older: &Digest,
        proof: &ConsistencyProof,
    ) -> Result<(), HistoryError> {
        proof.verify(
            older.history_len,
            &older.history_root,
            self.history_len,
            &self.history_root,
        )
    }
}

/// SPEC.md §7's JSON form: an object only (a derived impl would also take an array of the fields), each field
/// once, fields it does not name ignored, and the constraints of [`Digest::validate`].
impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, IgnoredAny, MapAccess, Visitor};

        struct DigestObject;

        impl<'de> Visitor<'de> for DigestObject {
            type Value = Digest;

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a digest object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Digest, A::Error> {
                let (mut tid, mut version, mut root, mut history_len, mut history_root) =
                    (None, None, None, None, None);
                fn once<T, E: Error>(
                    slot: &mut Option<T>,
                    v: T,
                    name: &'static str,
                ) -> Result<(), E> {
                    match slot.replace(v) {
                        Some(_) => Err(E::duplicate_field(name)),
                        None => Ok(()),
                    }
                }
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "tid" => once(&mut tid, m.next_value()?, "tid")?,
                        "version" => once(&mut version, m.next_value()?, "version")?,
                        "root" => once(&mut root, m.next_value()?, "root")?,
                        "history_len" => once(&mut history_len, m.next_value()?, "history_len")?,
                        "history_root" => once(&mut history_root, m.next_value()?, "history_root")?,
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                let d = Digest {
                    tid: tid.ok_or_else(|| A::Error::missing_field("tid"))?,
                    version: version.ok_or_else(|| A::Error::missing_field("version"))?,
                    root: root.ok_or_else(|| A::Error::missing_field("root"))?,
                    history_len: history_len
                        .ok_or_else(|| A::Error::missing_field("history_len"))?,
                    history_root: history_root
                        .ok_or_else(|| A::Error::missing_field("history_root"))?,
                };
                d.validate().map_err(A::Error::custom)?;
                Ok(d)
            }
        }

        d.deserialize_struct(
            "Digest",
            &["tid", "version", "root", "history_len", "history_root"],
            DigestObject,
        )
    }
}

/// Where a digest came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceId {
    /// A digest the user trusts (e.g. from a validator-signed header).
    Checkpoint,
    /// A named source: a node URL, a peer, an explorer.
    Source(String),
}

/// The checker's verdict on one observation (SPEC.md §7.1).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Report {
    /// Nothing comparable was seen before.
    New,
    /// An identical digest is already known.
    Agreement,
    /// Two digests for one version (or one history length) that cannot belong to one history.
    Fork {
        /// The earlier digest it conflicts with.
        existing: Digest,
        /// Who reported that earlier digest.
        existing_source: SourceId,
    },
    /// A fork in which one side is a trusted checkpoint.
    CheckpointConflict {
        /// The digest on the other side.
        other: Digest,
    },
    /// The source went back to an older version or a shorter history.
    Rollback {
        /// The newest digest the source reported before.
        previous: Digest,
    },
}

impl Report {
    /// The stable report code: `new`, `agreement`, `fork`, `checkpoint_conflict`, `rollback`.
    pub fn code(&self) -> &'static str {
        match self {
            Report::New => "new",
            Report::Agreement => "agreement",
            Report::Fork { .. } => "fork",
            Report::CheckpointConflict { .. } => "checkpoint_conflict",
            Report::Rollback { .. } => "rollback",
        }
    }

    /// Whether this report is an alarm (fork, checkpoint conflict or rollback).
    pub fn is_alarm(&self) -> bool {
        !matches!(self, Report::New | Report::Agreement)
    }
}

/// Digest verification: compares digests from sources and checkpoints (SPEC.md §7.1).
///
/// A digest can only conflict with, or equal, digests of its trie at its version or with its history length, so
/// the digests seen are indexed by those: with agreeing sources an observation costs a few map lookups however
/// many were seen (a light client observes one or more a block, for as long as it runs). Every distinct digest is
/// kept, so a source that reports many different digests for one version (each one already reported as a fork)
/// makes each later observation of that version cost time, and the checker memory, in proportion to them: stop
/// observing a source once it is reported.
#[derive(Clone, Debug, Default)]
pub struct DigestChecker {
    /// Every distinct `(digest, origin)` seen, in arrival order.
    known: Vec<(Digest, SourceId)>,
    /// Positions in `known` by `(tid, version)` and by `(tid, history_len)`, ascending.
    by_version: BTreeMap<(TrieId, Version), Vec<usize>>,
    by_len: BTreeMap<(TrieId, u64), Vec<usize>>,
    /// The newest digest of each source and trie.
    newest: BTreeMap<(String, TrieId), Digest>,
}

impl DigestChecker {
    /// An empty checker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a trusted checkpoint.
    pub fn add_checkpoint(&mut self, digest: &Digest) -> Report {
        self.observe_from(SourceId::Checkpoint, digest)
    }

    /// Records a digest reported by `source`.
    pub fn observe(&mut self, source: &str, digest: &Digest) -> Report {
        self.observe_from(SourceId::Source(source.into()), digest)
    }

    fn observe_from(&mut self, origin: SourceId, d: &Digest) -> Report {
        let same_version = self
            .by_version
            .get(&(d.tid, d.version))
            .map_or(&[][..], Vec::as_slice);
        let same_len = self
            .by_len
            .get(&(d.tid, d.history_len))
            .map_or(&[][..], Vec::as_slice);
        // The digests it could conflict with, in arrival order (each once).
        let mut candidates: Vec<usize> = same_version.iter().chain(same_len).copied().collect();
        candidates.sort_unstable();
        candidates.dedup();
        let conflicts = || {
            candidates
                .iter()
                .map(|&i| &self.known[i])
                .filter(|(k, _)| k != d)
        };
        let report = if let Some((k, _)) =
            conflicts().find(|(_, o)| *o == SourceId::Checkpoint || origin == SourceId::Checkpoint)
        {
            let other = if origin == SourceId::Checkpoint {
                *k
            } else {
                *d
            };
            Report::CheckpointConflict { other }
        } else if let Some((k, o)) = conflicts().next() {
            Report::Fork {
                existing: *k,
                existing_source: o.clone(),
            }
        } else if let Some(prev) = self
            .newest_of(&origin, d.tid)
            .filter(|p| d.version < p.version || d.history_len < p.history_len)
        {
            Report::Rollback { previous: prev }
        } else if same_version.iter().any(|&i| self.known[i].0 == *d) {
            Report::Agreement
        } else {
            Report::New
        };
        if !same_version
            .iter()
            .any(|&i| self.known[i].0 == *d && self.known[i].1 == origin)
        {
            let at = self.known.len();
            self.known.push((*d, origin.clone()));
            self.by_version
                .entry((d.tid, d.version))
                .or_default()
                .push(at);
            self.by_len
                .entry((d.tid, d.history_len))
                .or_default()
                .push(at);
        }
        if let SourceId::Source(name) = origin {
            let newest = self.newest.entry((name, d.tid)).or_insert(*d);
            if d.version >= newest.version {
                *newest = *d;
            }
        }
        report
    }

    fn newest_of(&self, origin: &SourceId, tid: TrieId) -> Option<Digest> {
        let SourceId::Source(name) = origin else {
            return None;
        };
        self.newest.get(&(name.clone(), tid)).copied()
    }

    /// The newest digest `source` reported for `tid`.
    pub fn newest(&self, source: &str, tid: TrieId) -> Option<Digest> {
        self.newest_of(&SourceId::Source(source.into()), tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::value_hash;

    fn d(version: u64, root: &[u8], len: u64) -> Digest {
        Digest {
            tid: 0,
            version,
            root: value_hash(root),
            history_len: len,
            history_root: value_hash(&[root, &len.to_le_bytes()].concat()),
        }
    }

    #[test]
    fn binary_round_trip_and_rejects() {
        let x = d(7, b"a", 8);
        let b = x.encode();
        assert_eq!(b.len(), DIGEST_LEN);
        assert_eq!(Digest::decode(&b), Ok(x));
        assert_eq!(Digest::decode(&b[..85]), Err(DecodeError::Truncated));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(Digest::decode(&long), Err(DecodeError::TrailingData(1)));
        let zero = Digest {
            history_len: 0,
            ..x
        };
        assert_eq!(
            Digest::decode(&zero.encode()).map_err(|e| e.code()),
            Err("malformed")
        );
    }

    #[test]
    fn detects_fork_rollback_and_checkpoint_conflict() {
        let mut c = DigestChecker::new();
        assert_eq!(c.observe("a", &d(1, b"r1", 1)), Report::New);
        assert_eq!(c.observe("b", &d(1, b"r1", 1)), Report::Agreement);
        assert_eq!(c.observe("a", &d(2, b"r2", 2)), Report::New);
        assert_eq!(c.observe("b", &d(2, b"evil", 2)).code(), "fork");
        assert_eq!(c.observe("a", &d(1, b"r1", 1)).code(), "rollback");
        // The checkpoint sides with "a": the digest "b" reported is named as the wrong one.
        assert_eq!(
            c.add_checkpoint(&d(2, b"r2", 2)),
            Report::CheckpointConflict {
                other: d(2, b"evil", 2)
            }
        );
        assert_eq!(c.add_checkpoint(&d(1, b"r1", 1)), Report::Agreement);
        assert_eq!(
            c.observe("c", &d(2, b"evil2", 2)).code(),
            "checkpoint_conflict"
        );
        assert!(c.observe("c", &d(2, b"evil2", 2)).is_alarm());
    }
}
