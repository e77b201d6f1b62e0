//! Digests and digest verification (SPEC.md §7): `(tid, version, root)` plus the history commitment, and the
//! checker that compares digests from several sources and trusted checkpoints to detect forks and rollbacks.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default)]
pub struct DigestChecker {
    known: Vec<(Digest, SourceId)>,
    newest: Vec<(String, TrieId, Digest)>,
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
        let conflicts = || {
            self.known.iter().filter(|(k, _)| {
                k.tid == d.tid
                    && (k.version == d.version || k.history_len == d.history_len)
                    && k != d
            })
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
        } else if self.known.iter().any(|(k, _)| k == d) {
            Report::Agreement
        } else {
            Report::New
        };
        if !self.known.iter().any(|(k, o)| k == d && *o == origin) {
            self.known.push((*d, origin.clone()));
        }
        if let SourceId::Source(name) = origin {
            match self
                .newest
                .iter_mut()
                .find(|(n, t, _)| *n == name && *t == d.tid)
            {
                Some((_, _, newest)) if d.version >= newest.version => *newest = *d,
                Some(_) => {}
                None => self.newest.push((name, d.tid, *d)),
            }
        }
        report
    }

    fn newest_of(&self, origin: &SourceId, tid: TrieId) -> Option<Digest> {
        let SourceId::Source(name) = origin else {
            return None;
        };
        self.newest
            .iter()
            .find(|(n, t, _)| n == name && *t == tid)
            .map(|(_, _, d)| *d)
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
