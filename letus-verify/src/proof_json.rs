//! The JSON form of a state proof (SPEC.md §5.5).
//!
//! [`ProofJson`] is the serde shape, with every field loosely typed so that [`Proof::try_from`] can give each
//! problem its SPEC.md error code instead of a generic deserializer message.

use std::string::String;
use std::vec::Vec;

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::proof::{check_branch_hashes, Proof, Record};
use crate::{Hash, KeyPath};

/// `{"format": 1, "records": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofJson {
    /// Must be 1.
    pub format: u64,
    /// The records in pre-order.
    pub records: Vec<RecordJson>,
}

/// One record: `{"t": "empty" | "leaf" | "other_leaf" | "branch", ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordJson {
    /// The record type.
    pub t: String,
    /// BRANCH: the frontier mask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<u64>,
    /// BRANCH: the frontier hashes (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashes: Option<Vec<String>>,
    /// OTHER_LEAF: the other key's path (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// OTHER_LEAF: the other key's value hash (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_hash: Option<String>,
}

impl RecordJson {
    fn bare(t: &str) -> Self {
        RecordJson {
            t: t.into(),
            mask: None,
            hashes: None,
            path: None,
            value_hash: None,
        }
    }
}

impl From<&Proof> for ProofJson {
    fn from(p: &Proof) -> Self {
        let records = p
            .records
            .iter()
            .map(|r| match r {
                Record::Empty => RecordJson::bare("empty"),
                Record::Leaf => RecordJson::bare("leaf"),
                Record::OtherLeaf { path, value_hash } => RecordJson {
                    path: Some(path.as_hash().to_hex()),
                    value_hash: Some(value_hash.to_hex()),
                    ..RecordJson::bare("other_leaf")
                },
                Record::Branch { mask, hashes } => RecordJson {
                    mask: Some(u64::from(*mask)),
                    hashes: Some(hashes.iter().map(Hash::to_hex).collect()),
                    ..RecordJson::bare("branch")
                },
            })
            .collect();
        ProofJson {
            format: u64::from(crate::FORMAT_VERSION),
            records,
        }
    }
}

fn hash_field(s: Option<&String>) -> Result<Hash, DecodeError> {
    s.and_then(|s| Hash::from_hex(s))
        .ok_or(DecodeError::Malformed(
            "a hash field is missing or not 64 hex digits",
        ))
}

impl Proof {
    /// Converts the JSON form, enforcing the record counts of SPEC.md §5.4 and `limits.max_proof_bytes` on the
    /// equivalent binary length.
    pub fn from_json(j: &ProofJson, limits: &crate::Limits) -> Result<Proof, DecodeError> {
        let p = Proof::try_from(j)?;
        let mut counts = crate::proof::RecordCounts::new(limits);
        for r in &p.records {
            counts.count(match r {
                Record::Empty => crate::proof::record_tag::EMPTY,
                Record::Leaf => crate::proof::record_tag::LEAF,
                Record::OtherLeaf { .. } => crate::proof::record_tag::OTHER_LEAF,
                Record::Branch { .. } => crate::proof::record_tag::BRANCH,
            })?;
        }
        let size = p.encoded_len();
        if size > limits.max_proof_bytes {
            return Err(DecodeError::TooLarge {
                what: "proof",
                size: size as u64,
                limit: limits.max_proof_bytes as u64,
            });
        }
        Ok(p)
    }
}

/// Converts without a size limit; use [`Proof::from_json`] for input from outside.
impl TryFrom<&ProofJson> for Proof {
    type Error = DecodeError;

    fn try_from(j: &ProofJson) -> Result<Proof, DecodeError> {
        if j.format != u64::from(crate::FORMAT_VERSION) {
            return Err(DecodeError::UnsupportedFormat(j.format));
        }
        let mut records = Vec::with_capacity(j.records.len());
        for r in &j.records {
            records.push(match r.t.as_str() {
                "empty" => Record::Empty,
                "leaf" => Record::Leaf,
                "other_leaf" => Record::OtherLeaf {
                    path: KeyPath(hash_field(r.path.as_ref())?.0),
                    value_hash: hash_field(r.value_hash.as_ref())?,
                },
                "branch" => {
                    let mask =
                        r.mask
                            .and_then(|m| u8::try_from(m).ok())
                            .ok_or(DecodeError::Malformed(
                                "branch mask is missing or above 255",
                            ))?;
                    let hashes = r
                        .hashes
                        .as_ref()
                        .ok_or(DecodeError::Malformed("branch hashes are missing"))?
                        .iter()
                        .map(|h| hash_field(Some(h)))
                        .collect::<Result<Vec<_>, _>>()?;
                    if hashes.len() != mask.count_ones() as usize {
                        return Err(DecodeError::Malformed(
                            "branch has a hash count other than popcount(mask)",
                        ));
                    }
                    check_branch_hashes(&hashes)?;
                    Record::Branch { mask, hashes }
                }
                _ => return Err(DecodeError::UnknownTag(0xff)),
            });
        }
        Ok(Proof { records })
    }
}
