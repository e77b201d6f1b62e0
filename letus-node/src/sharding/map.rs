//! The shard map: which shard holds each of the 256 subtrees at every version, and the subtree move under way.
//!
//! Shard `i` of `n` starts with the `i`-th of `n` equal ranges ([`PrefixSet::part`]). A move hands one subtree
//! to another shard from a version on; the map keeps every handover, so that a read of an older version still
//! goes to the shard that held the subtree then (which keeps its history). The map travels inside every commit
//! decision of the router (`pending.json` or etcd's decision key): the map after a version is the one its
//! decision carries, made durable before any shard sees the version.

use std::collections::BTreeMap;

use letus_verify::Version;
use serde::{Deserialize, Serialize};

use super::PrefixSet;

/// A subtree held by `shard` from version `from` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    /// The first version at which `shard` holds the subtree.
    pub from: Version,
    /// The shard's index in the map.
    pub shard: usize,
}

/// Where a move is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Deleting whatever the target holds of the subtree (nothing, unless an earlier copy was abandoned), one
    /// trie per block (or one sixteenth of a trie's part, when it is large).
    Clear,
    /// Copying the subtree, one trie (or one sixteenth of a large trie's part) per block, each from the source's
    /// state at the version before; every block's writes in the subtree go to both shards.
    Copy,
    /// Handed over: deleting the old copy on the source, one trie (or sixteenth) per block.
    Drop,
}

/// A subtree on its way from one shard to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveTask {
    /// The subtree (first byte of its key paths).
    pub prefix: u8,
    /// The shard that holds it.
    pub from: usize,
    /// The shard it goes to.
    pub to: usize,
    /// The version whose decision started the move.
    pub started: Version,
    /// Where the move is.
    pub phase: Phase,
    /// In [`Phase::Copy`]: the tries whose part of the subtree is still to copy, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tries: Vec<u32>,
    /// The version from which `to` holds the subtree, once handed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_over: Option<Version>,
    /// The next piece (depth 3) of the trie being copied or deleted, when it has too many pairs for one block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<u8>,
}

/// The map of `n` shards (their count is fixed; their URLs are the router's `--shard` flags or etcd's list).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// The handovers of every subtree that ever moved, in increasing version order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub moved: BTreeMap<u8, Vec<Handover>>,
    /// The move under way (one at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<MoveTask>,
    /// Why the last move abandoned, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned: Option<String>,
}

impl ShardMap {
    /// The shard of `n` holding subtree `prefix` at version `v`.
    pub fn owner(&self, prefix: u8, v: Version, n: usize) -> usize {
        self.moved
            .get(&prefix)
            .and_then(|h| h.iter().rev().find(|h| h.from <= v))
            .map_or(usize::from(prefix) * n / 256, |h| h.shard)
    }

    /// The subtrees shard `i` of `n` holds at version `v` (possibly none).
    pub fn holds(&self, i: usize, v: Version, n: usize) -> Option<PrefixSet> {
        let set = PrefixSet::from_fn(|p| self.owner(p, v, n) == i);
        (set != PrefixSet::NONE).then_some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_follow_the_handovers_by_version() {
        let mut m = ShardMap::default();
        assert_eq!(m.owner(0x3f, 5, 2), 0);
        assert_eq!(m.owner(0x80, 5, 2), 1);
        m.moved.insert(
            0x3f,
            vec![
                Handover { from: 10, shard: 1 },
                Handover { from: 20, shard: 0 },
            ],
        );
        assert_eq!(m.owner(0x3f, 9, 2), 0);
        assert_eq!(m.owner(0x3f, 10, 2), 1);
        assert_eq!(m.owner(0x3f, 19, 2), 1);
        assert_eq!(m.owner(0x3f, 20, 2), 0);
        assert_eq!(m.holds(1, 15, 2).unwrap().to_string(), "3f,80-ff");
        assert_eq!(m.holds(0, 15, 2).unwrap().to_string(), "00-3e,40-7f");
        assert_eq!(m.holds(0, 25, 2).unwrap().to_string(), "00-7f");
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<ShardMap>(&json).unwrap(), m);
        assert_eq!(
            serde_json::from_str::<ShardMap>("{}").unwrap(),
            ShardMap::default()
        );
    }
}
