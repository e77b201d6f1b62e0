//! Proof verification (SPEC.md §5.3). The only way to learn a value from a proof is through the
//! [`VerifiedRead`] / [`VerifiedReads`] these functions return, so a caller cannot forget to check.

use std::vec::Vec;

use crate::error::{DecodeError, ProofError};
use crate::fold::{fold_mixed, Frontier};
use crate::hash::{leaf_hash, value_hash};
use crate::proof::{Proof, Record};
use crate::{Hash, KeyPath, Limits, EMPTY};

/// What a caller says about one key: present with `value`, or absent (`value: None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Its value, or `None` for "absent".
    pub value: Option<&'a [u8]>,
}

impl<'a> Claim<'a> {
    /// The key is present with this value.
    pub fn present(key: &'a [u8], value: &'a [u8]) -> Self {
        Claim {
            key,
            value: Some(value),
        }
    }

    /// The key is absent.
    pub fn absent(key: &'a [u8]) -> Self {
        Claim { key, value: None }
    }

    /// Claims from parallel lists of keys and values (`None`: absent), as an answer to a batch read carries them.
    /// Extra entries of the longer list are ignored; callers that accept the lists from outside check the lengths.
    pub fn zip<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        keys: &'a [K],
        values: &'a [Option<V>],
    ) -> Vec<Claim<'a>> {
        keys.iter()
            .zip(values)
            .map(|(k, v)| Claim {
                key: k.as_ref(),
                value: v.as_ref().map(AsRef::as_ref),
            })
            .collect()
    }
}

/// One key's value (or absence), proven against `root`.
#[must_use = "a verified read is the only trustworthy answer; use its value"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedRead {
    root: Hash,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

impl VerifiedRead {
    /// The root this read was proven against.
    pub fn root(&self) -> &Hash {
        &self.root
    }
    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
    /// The proven value, or `None` when the key is proven absent.
    pub fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }
    /// Whether the key is proven present.
    pub fn is_present(&self) -> bool {
        self.value.is_some()
    }
}

/// Many keys' values (or absences) proven together by one multi-proof, in the caller's order.
#[must_use = "verified reads are the only trustworthy answer; use their values"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedReads {
    root: Hash,
    entries: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl VerifiedReads {
    /// The root these reads were proven against.
    pub fn root(&self) -> &Hash {
        &self.root
    }
    /// `(key, value or None)` in the order the claims were given.
    pub fn entries(&self) -> &[(Vec<u8>, Option<Vec<u8>>)] {
        &self.entries
    }
    /// The proven value of `key`: `Some(None)` for a proven absence, `None` when `key` was not claimed.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref())
    }
}

/// Verifies a one-key proof: `value` is `Some` for an inclusion proof, `None` for an exclusion proof.
pub fn verify_proof(
    root: &Hash,
    key: &[u8],
    value: Option<&[u8]>,
    proof: &Proof,
    limits: &Limits,
) -> Result<VerifiedRead, ProofError> {
    check(root, &[Claim { key, value }], proof, limits)?;
    Ok(VerifiedRead {
        root: *root,
        key: key.into(),
        value: value.map(Into::into),
    })
}

/// Verifies a multi-proof for a batch of claims at one root.
pub fn verify_multi_proof(
    root: &Hash,
    claims: &[Claim<'_>],
    proof: &Proof,
    limits: &Limits,
) -> Result<VerifiedReads, ProofError> {
    check(root, claims, proof, limits)?;
    Ok(VerifiedReads {
        root: *root,
        entries: claims
            .iter()
            .map(|c| (c.key.into(), c.value.map(Into::into)))
            .collect(),
    })
}

struct Entry {
    path: KeyPath,
    value_hash: Option<Hash>,
    index: usize,
}

fn too_large(what: &'static str, size: usize, limit: usize) -> ProofError {
    ProofError::Decode(crate::DecodeError::TooLarge {
        what,
        size: size as u64,
        limit: limit as u64,
    })
}

/// Steps 3-8 of SPEC.md §5.3 (steps 1-2 are [`Proof::decode`]).
fn check(
    root: &Hash,
    claims: &[Claim<'_>],
    proof: &Proof,
    limits: &Limits,
) -> Result<(), ProofError> {
    if claims.is_empty() || claims.len() > limits.max_keys {
        return Err(ProofError::TooManyKeys {
            count: claims.len(),
            limit: limits.max_keys,
        });
    }
    for c in claims {
        if c.key.len() > limits.max_key_bytes {
            return Err(too_large("key", c.key.len(), limits.max_key_bytes));
        }
        if let Some(v) = c.value {
            if v.len() > limits.max_value_bytes {
                return Err(too_large("value", v.len(), limits.max_value_bytes));
            }
        }
    }
    let mut q: Vec<Entry> = claims
        .iter()
        .enumerate()
        .map(|(index, c)| Entry {
            path: KeyPath::of(c.key),
            value_hash: c.value.map(value_hash),
            index,
        })
        .collect();
    q.sort_by_key(|e| e.path);
    for w in q.windows(2) {
        if let [a, b] = w {
            if a.path == b.path {
                return Err(ProofError::DuplicateKey(a.index.max(b.index)));
            }
        }
    }
    let mut records = proof.records.iter();
    let (computed, _) = walk(0, &q, &mut records)?;
    let unused = records.len();
    if unused != 0 {
        return Err(ProofError::UnusedRecords(unused));
    }
    if computed != *root {
        return Err(ProofError::RootMismatch {
            expected: *root,
            computed,
        });
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Empty,
    Leaf,
    Branch,
}

fn walk<'r>(
    depth: usize,
    q: &[Entry],
    records: &mut core::slice::Iter<'r, Record>,
) -> Result<(Hash, Kind), ProofError> {
    let record = records.next().ok_or(ProofError::ProofExhausted)?;
    let mut present = q.iter().filter(|e| e.value_hash.is_some());
    match record {
        Record::Empty => match present.next() {
            Some(e) => Err(ProofError::ExpectedPresent(e.index)),
            None => Ok((EMPTY, Kind::Empty)),
        },
        Record::Leaf => {
            let Some(first) = present.next() else {
                let index = q.first().map_or(0, |e| e.index);
                return Err(ProofError::ExpectedAbsent(index));
            };
            if let Some(second) = present.next() {
                return Err(ProofError::ExpectedAbsent(second.index));
            }
            let vh = first.value_hash.unwrap_or(EMPTY);
            Ok((leaf_hash(&first.path, &vh), Kind::Leaf))
        }
        Record::OtherLeaf { path, value_hash } => {
            if let Some(e) = present.next() {
                return Err(ProofError::ExpectedPresent(e.index));
            }
            if let Some(e) = q
                .iter()
                .find(|e| e.path == *path || e.path.lcp(path) < depth)
            {
                return Err(ProofError::OtherLeafMismatch(e.index));
            }
            Ok((leaf_hash(path, value_hash), Kind::Leaf))
        }
        Record::Branch { mask, hashes } => {
            if depth >= crate::path::NIBBLES {
                return Err(ProofError::DepthExceeded);
            }
            let expanded = q.iter().fold(0u16, |m, e| m | 1 << e.path.nibble(depth));
            let frontier = Frontier::of(expanded);
            if u32::from(*mask) >> frontier.len() != 0 {
                return Err(ProofError::NonCanonical(
                    "branch mask has bits beyond its frontier",
                ));
            }
            // What the decoders refuse, refused here too and with their codes (SPEC.md §5.4, §5.5): a `Proof` built
            // in code (its fields are public) must not pass with hashes its mask does not account for
            // (`malformed`), or with an empty subtree's hash written (`non_canonical`).
            if hashes.len() != mask.count_ones() as usize {
                return Err(ProofError::Decode(DecodeError::Malformed(
                    "branch has a hash count other than popcount(mask)",
                )));
            }
            crate::proof::check_branch_hashes(hashes)?;
            let mut units = mask.count_ones();
            let mut leaf_units = 0u32;
            let mut children = [EMPTY; 16];
            // q is sorted by path, so the claims under each child form one contiguous run, in nibble order.
            let mut rest = q;
            while let Some(first) = rest.first() {
                let c = first.path.nibble(depth);
                let run = rest
                    .iter()
                    .take_while(|e| e.path.nibble(depth) == c)
                    .count();
                let (group, tail) = rest.split_at(run);
                rest = tail;
                let (h, kind) = walk(depth + 1, group, records)?;
                if !h.is_empty() {
                    units += 1;
                }
                if kind == Kind::Leaf {
                    leaf_units += 1;
                }
                if let Some(slot) = children.get_mut(usize::from(c)) {
                    *slot = h;
                }
            }
            if units == 0 {
                return Err(ProofError::NonCanonical("branch with no non-empty child"));
            }
            if units == 1 && leaf_units == 1 {
                return Err(ProofError::NonCanonical(
                    "branch whose only child is a leaf",
                ));
            }
            // Expand the mask into the frontier hash list, EMPTY where the bit is clear.
            let mut given = hashes.iter();
            let frontier_hashes: Vec<Hash> = (0..frontier.len())
                .map(|i| {
                    if mask >> i & 1 == 1 {
                        given.next().copied().unwrap_or(EMPTY)
                    } else {
                        EMPTY
                    }
                })
                .collect();
            Ok((
                fold_mixed(expanded, &frontier_hashes, &children),
                Kind::Branch,
            ))
        }
    }
}
