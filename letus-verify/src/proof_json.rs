//! The JSON form of a state proof (SPEC.md §5.5).
//!
//! [`ProofJson`] keeps each field as the kind of JSON value it is ([`JsonField`]), so that any JSON object
//! deserializes and [`Proof::try_from`] checks the fields in SPEC.md's order with its error codes: a derived,
//! typed shape would refuse `{"format": 2, "records": "x"}` as malformed (SPEC.md: `unsupported_format`, the
//! format is checked first) and a leaf record carrying `"mask": "x"` (a field its record type does not use, so
//! ignored).

use std::boxed::Box;
use std::string::String;
use std::vec::Vec;

use core::fmt;

use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::DecodeError;
use crate::proof::{check_branch_hashes, Proof, Record};
use crate::{Hash, KeyPath};

/// `{"format": 1, "records": [...]}`; other fields are ignored. A field is `None` when it is absent.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ProofJson {
    /// Must be the integer 1.
    pub format: Option<JsonField>,
    /// Must be an array of records, in pre-order.
    pub records: Option<JsonField>,
}

/// One record: `{"t": "empty" | "leaf" | "other_leaf" | "branch", ...}`; fields its type does not use, and
/// fields the form does not define, are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RecordJson {
    /// The record type (a string).
    pub t: Option<JsonField>,
    /// BRANCH: the frontier mask (an integer in 0..=255).
    pub mask: Option<JsonField>,
    /// BRANCH: the frontier hashes (an array of hex strings).
    pub hashes: Option<JsonField>,
    /// OTHER_LEAF: the other key's path (hex).
    pub path: Option<JsonField>,
    /// OTHER_LEAF: the other key's value hash (hex).
    pub value_hash: Option<JsonField>,
}

/// A JSON value, told apart as far as SPEC.md §5.5 needs: a negative or fractional number, `true`, `false` and
/// `null` are all [`JsonField::Other`], and every object is read as a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonField {
    /// A non-negative integer that fits in 64 bits.
    Int(u64),
    /// An integer outside `0..=u64::MAX`, clamped into it (a `format` of that value is an unsupported format, not
    /// a malformed one).
    OutOfRange(u64),
    /// A string.
    Str(String),
    /// An array.
    List(Vec<JsonField>),
    /// An object, as a record.
    Object(Box<RecordJson>),
    /// Anything else.
    Other,
}

impl Serialize for JsonField {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            JsonField::Int(n) | JsonField::OutOfRange(n) => s.serialize_u64(*n),
            JsonField::Str(t) => s.serialize_str(t),
            JsonField::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            JsonField::Object(r) => r.serialize(s),
            JsonField::Other => s.serialize_unit(),
        }
    }
}

/// An object of the fields that are present, in the order given.
fn serialize_fields<S: Serializer>(
    s: S,
    fields: &[(&str, &Option<JsonField>)],
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(fields.iter().filter(|(_, v)| v.is_some()).count()))?;
    for (k, v) in fields {
        if let Some(v) = v {
            map.serialize_entry(k, v)?;
        }
    }
    map.end()
}

impl Serialize for RecordJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_fields(
            s,
            &[
                ("t", &self.t),
                ("mask", &self.mask),
                ("hashes", &self.hashes),
                ("path", &self.path),
                ("value_hash", &self.value_hash),
            ],
        )
    }
}

impl Serialize for ProofJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_fields(s, &[("format", &self.format), ("records", &self.records)])
    }
}

struct FieldVisitor;

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = JsonField;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<JsonField, E> {
        Ok(JsonField::Int(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<JsonField, E> {
        Ok(u64::try_from(v).map_or(JsonField::OutOfRange(0), JsonField::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<JsonField, E> {
        // A parser gives an integer outside i64 and u64 as a float (every float that large is a whole number); one
        // written with a fraction or exponent is not an integer (SPEC.md §5.5), and there it cannot be told apart.
        Ok(if v >= 18_446_744_073_709_551_616.0 {
            JsonField::OutOfRange(u64::MAX)
        } else if v <= -9_223_372_036_854_775_809.0 {
            JsonField::OutOfRange(0)
        } else {
            JsonField::Other
        })
    }
    fn visit_bool<E>(self, _: bool) -> Result<JsonField, E> {
        Ok(JsonField::Other)
    }
    fn visit_unit<E>(self) -> Result<JsonField, E> {
        Ok(JsonField::Other)
    }
    fn visit_none<E>(self) -> Result<JsonField, E> {
        Ok(JsonField::Other)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<JsonField, D::Error> {
        JsonField::deserialize(d)
    }
    fn visit_str<E>(self, v: &str) -> Result<JsonField, E> {
        Ok(JsonField::Str(v.into()))
    }
    fn visit_string<E>(self, v: String) -> Result<JsonField, E> {
        Ok(JsonField::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonField, A::Error> {
        // No reservation from the size hint: a caller bounds the text, and each element is built as it is read.
        let mut items = Vec::new();
        while let Some(i) = seq.next_element()? {
            items.push(i);
        }
        Ok(JsonField::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<JsonField, A::Error> {
        RecordVisitor
            .visit_map(map)
            .map(|r| JsonField::Object(Box::new(r)))
    }
}

impl<'de> Deserialize<'de> for JsonField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

/// Reads an object's fields: those named are kept (the last of a repeated name, as `JSON.parse` does), the others
/// skipped without building them.
fn read_fields<'de, A: MapAccess<'de>>(
    mut map: A,
    mut slot: impl FnMut(&str) -> Option<usize>,
    out: &mut [&mut Option<JsonField>],
) -> Result<(), A::Error> {
    while let Some(k) = map.next_key::<KeyName>()? {
        match slot(&k.0) {
            Some(i) => *out[i] = Some(map.next_value()?),
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(())
}

/// An object key, borrowed when the input allows.
struct KeyName(String);

impl<'de> Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyName, E> {
                // The names the form defines are short; a long one is kept only as far as needed to tell.
                Ok(KeyName(v.chars().take(16).collect()))
            }
        }
        d.deserialize_str(V)
    }
}

struct RecordVisitor;

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = RecordJson;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RecordJson, A::Error> {
        let mut r = RecordJson::default();
        let RecordJson {
            t,
            mask,
            hashes,
            path,
            value_hash,
        } = &mut r;
        read_fields(
            map,
            |k| {
                ["t", "mask", "hashes", "path", "value_hash"]
                    .iter()
                    .position(|n| *n == k)
            },
            &mut [t, mask, hashes, path, value_hash],
        )?;
        Ok(r)
    }
}

impl<'de> Deserialize<'de> for RecordJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RecordVisitor)
    }
}

impl<'de> Deserialize<'de> for ProofJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProofJson;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object (SPEC.md §5.5)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ProofJson, A::Error> {
                let mut p = ProofJson::default();
                let ProofJson { format, records } = &mut p;
                read_fields(
                    map,
                    |k| ["format", "records"].iter().position(|n| *n == k),
                    &mut [format, records],
                )?;
                Ok(p)
            }
        }
        d.deserialize_map(V)
    }
}

impl RecordJson {
    fn bare(t: &str) -> Self {
        RecordJson {
            t: Some(JsonField::Str(t.into())),
            ..RecordJson::default()
        }
    }
}

impl From<&Proof> for ProofJson {
    fn from(p: &Proof) -> Self {
        let hex = |h: &Hash| JsonField::Str(h.to_hex());
        let records = p
            .records
            .iter()
            .map(|r| {
                JsonField::Object(Box::new(match r {
                    Record::Empty => RecordJson::bare("empty"),
                    Record::Leaf => RecordJson::bare("leaf"),
                    Record::OtherLeaf { path, value_hash } => RecordJson {
                        path: Some(hex(&path.as_hash())),
                        value_hash: Some(hex(value_hash)),
                        ..RecordJson::bare("other_leaf")
                    },
                    Record::Branch { mask, hashes } => RecordJson {
                        mask: Some(JsonField::Int(u64::from(*mask))),
                        hashes: Some(JsonField::List(hashes.iter().map(hex).collect())),
                        ..RecordJson::bare("branch")
                    },
                }))
            })
            .collect();
        ProofJson {
            format: Some(JsonField::Int(u64::from(crate::FORMAT_VERSION))),
            records: Some(JsonField::List(records)),
        }
    }
}

fn hash_field(f: Option<&JsonField>) -> Result<Hash, DecodeError> {
    match f {
        Some(JsonField::Str(s)) => Hash::from_hex(s),
        _ => None,
    }
    .ok_or(DecodeError::Malformed(
        "a hash field is missing, not a string or not 64 hex digits",
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

/// Converts without a size limit; use [`Proof::from_json`] for input from outside. The checks and their order are
/// SPEC.md §5.5's: `format`, `records`, then each record in order.
impl TryFrom<&ProofJson> for Proof {
    type Error = DecodeError;

    fn try_from(j: &ProofJson) -> Result<Proof, DecodeError> {
        match j.format {
            Some(JsonField::Int(f)) if f == u64::from(crate::FORMAT_VERSION) => {}
            Some(JsonField::Int(f) | JsonField::OutOfRange(f)) => {
                return Err(DecodeError::UnsupportedFormat(f))
            }
            _ => {
                return Err(DecodeError::Malformed(
                    "format is missing or not an integer",
                ))
            }
        }
        let Some(JsonField::List(items)) = &j.records else {
            return Err(DecodeError::Malformed("records is missing or not an array"));
        };
        let mut records = Vec::with_capacity(items.len());
        for r in items {
            let JsonField::Object(r) = r else {
                return Err(DecodeError::Malformed("a record is not an object"));
            };
            let Some(JsonField::Str(t)) = &r.t else {
                return Err(DecodeError::Malformed(
                    "a record's t is missing or not a string",
                ));
            };
            records.push(match t.as_str() {
                "empty" => Record::Empty,
                "leaf" => Record::Leaf,
                "other_leaf" => Record::OtherLeaf {
                    path: KeyPath(hash_field(r.path.as_ref())?.0),
                    value_hash: hash_field(r.value_hash.as_ref())?,
                },
                "branch" => {
                    let mask = match r.mask {
                        Some(JsonField::Int(m)) => u8::try_from(m).ok(),
                        _ => None,
                    }
                    .ok_or(DecodeError::Malformed(
                        "branch mask is missing, not an integer or above 255",
                    ))?;
                    let Some(JsonField::List(hashes)) = &r.hashes else {
                        return Err(DecodeError::Malformed(
                            "branch hashes are missing or not an array",
                        ));
                    };
                    let hashes = hashes
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
