//! `letus-wasm`: thin wasm-bindgen bindings over `letus-verify`; it only converts types between JS and Rust.
//!
//! Bytes are `Uint8Array`, versions are `bigint`, and every failure is a JS `Error` whose `code` property is the
//! stable SPEC.md error code. The binary forms cross the boundary; JSON forms are converted on the JS side, which
//! keeps serde's deserializer (and its float formatting) out of the module: 27 KB gzipped instead of 54 KB.
#![forbid(unsafe_code)]

use js_sys::{Error, Reflect};
use letus_verify::export::ExportReader;
use letus_verify::hash::{history_leaf, key_path};
use letus_verify::{Claim, ConsistencyProof, Digest, Hash, InclusionProof, Limits, Proof};
use wasm_bindgen::prelude::*;

/// A JS `Error` with a `code` property.
fn js_error(code: &str, message: &str) -> JsValue {
    let e = Error::new(message);
    let _ = Reflect::set(&e, &JsValue::from_str("code"), &JsValue::from_str(code));
    e.into()
}

fn hash(bytes: &[u8], what: &str) -> Result<Hash, JsValue> {
    Hash::from_slice(bytes)
        .ok_or_else(|| js_error("malformed", &format!("{what} must be 32 bytes")))
}

fn decode_proof(proof: &[u8]) -> Result<Proof, JsValue> {
    Proof::decode(proof, &Limits::default()).map_err(|e| js_error(e.code(), &e.to_string()))
}

/// Verifies a one-key proof (binary form) against a trusted root; `value` undefined means "absent".
/// Returns whether the key is present; throws an Error with `code` when the proof does not verify.
#[wasm_bindgen(js_name = verifyProof)]
pub fn verify_proof(
    root: &[u8],
    key: &[u8],
    value: Option<Vec<u8>>,
    proof: &[u8],
) -> Result<bool, JsValue> {
    let root = hash(root, "root")?;
    let p = decode_proof(proof)?;
    letus_verify::verify_proof(&root, key, value.as_deref(), &p, &Limits::default())
        .map(|r| r.is_present())
        .map_err(|e| js_error(e.code(), &e.to_string()))
}

/// Verifies a multi-proof: `keys[i]` with `values[i]` (undefined for absent) against a trusted root.
#[wasm_bindgen(js_name = verifyMultiProof)]
pub fn verify_multi_proof(
    root: &[u8],
    keys: Vec<js_sys::Uint8Array>,
    values: Vec<JsValue>,
    proof: &[u8],
) -> Result<(), JsValue> {
    let root = hash(root, "root")?;
    if keys.len() != values.len() {
        return Err(js_error("malformed", "keys and values differ in length"));
    }
    let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
    let values: Vec<Option<Vec<u8>>> = values
        .iter()
        .map(|v| (!v.is_undefined() && !v.is_null()).then(|| js_sys::Uint8Array::new(v).to_vec()))
        .collect();
    let claims = Claim::zip(&keys, &values);
    let p = decode_proof(proof)?;
    letus_verify::verify_multi_proof(&root, &claims, &p, &Limits::default())
        .map(|_| ())
        .map_err(|e| js_error(e.code(), &e.to_string()))
}

fn set(o: &js_sys::Object, name: &str, v: JsValue) {
    let _ = Reflect::set(o, &JsValue::from_str(name), &v);
}

/// Decodes a binary digest (SPEC.md §7, 86 bytes) into `{tid, version, root, history_len, history_root}`,
/// versions and lengths as `bigint`, hashes as `Uint8Array`.
#[wasm_bindgen(js_name = decodeDigest)]
pub fn decode_digest(bytes: &[u8]) -> Result<js_sys::Object, JsValue> {
    let d = Digest::decode(bytes).map_err(|e| js_error(e.code(), &e.to_string()))?;
    let o = js_sys::Object::new();
    set(&o, "tid", JsValue::from(d.tid));
    set(&o, "version", JsValue::from(d.version));
    set(&o, "root", js_sys::Uint8Array::from(&d.root.0[..]).into());
    set(&o, "history_len", JsValue::from(d.history_len));
    set(
        &o,
        "history_root",
        js_sys::Uint8Array::from(&d.history_root.0[..]).into(),
    );
    Ok(o)
}

/// Encodes a digest in its binary form; rejects `history_len == 0` (`malformed`).
#[wasm_bindgen(js_name = encodeDigest)]
pub fn encode_digest(
    tid: u32,
    version: u64,
    root: &[u8],
    history_len: u64,
    history_root: &[u8],
) -> Result<Vec<u8>, JsValue> {
    let d = Digest {
        tid,
        version,
        root: hash(root, "root")?,
        history_len,
        history_root: hash(history_root, "history_root")?,
    };
    d.validate()
        .map_err(|e| js_error(e.code(), &e.to_string()))?;
    Ok(d.encode())
}

/// Verifies a history inclusion proof (binary, SPEC.md §8.2): entry `(tid, version, root)` is in the history
/// with root `history_root` and `tree_size` entries. Returns the entry's index.
#[wasm_bindgen(js_name = verifyHistoryInclusion)]
pub fn verify_history_inclusion(
    history_root: &[u8],
    tree_size: u64,
    tid: u32,
    version: u64,
    root: &[u8],
    proof: &[u8],
) -> Result<u64, JsValue> {
    let history_root = hash(history_root, "history_root")?;
    let root = hash(root, "root")?;
    let p = InclusionProof::decode(proof).map_err(|e| js_error(e.code(), &e.to_string()))?;
    p.verify(&history_root, tree_size, &history_leaf(tid, version, &root))
        .map(|_| p.index)
        .map_err(|e| js_error(e.code(), &e.to_string()))
}

/// Verifies a history consistency proof (binary, SPEC.md §8.3).
#[wasm_bindgen(js_name = verifyHistoryConsistency)]
pub fn verify_history_consistency(
    old_size: u64,
    old_root: &[u8],
    new_size: u64,
    new_root: &[u8],
    proof: &[u8],
) -> Result<(), JsValue> {
    let old_root = hash(old_root, "old_root")?;
    let new_root = hash(new_root, "new_root")?;
    let p = ConsistencyProof::decode(proof).map_err(|e| js_error(e.code(), &e.to_string()))?;
    p.verify(old_size, &old_root, new_size, &new_root)
        .map_err(|e| js_error(e.code(), &e.to_string()))
}

/// `path(key)` (SPEC.md §2).
#[wasm_bindgen(js_name = keyPath)]
pub fn key_path_of(key: &[u8]) -> Vec<u8> {
    key_path(key).0.to_vec()
}

/// `value_hash(value)` (SPEC.md §2).
#[wasm_bindgen(js_name = valueHash)]
pub fn value_hash_of(value: &[u8]) -> Vec<u8> {
    letus_verify::hash::value_hash(value).0.to_vec()
}

/// `history_leaf(tid, version, root)` (SPEC.md §8).
#[wasm_bindgen(js_name = historyLeaf)]
pub fn history_leaf_of(tid: u32, version: u64, root: &[u8]) -> Result<Vec<u8>, JsValue> {
    Ok(history_leaf(tid, version, &hash(root, "root")?).0.to_vec())
}

/// `MTH` (SPEC.md §8) of the concatenated 32-byte leaf hashes.
#[wasm_bindgen(js_name = historyRoot)]
pub fn history_root(leaves: &[u8]) -> Result<Vec<u8>, JsValue> {
    if !leaves.len().is_multiple_of(32) {
        return Err(js_error(
            "malformed",
            "leaves must be a multiple of 32 bytes",
        ));
    }
    let leaves: Vec<Hash> = leaves
        .chunks_exact(32)
        .filter_map(Hash::from_slice)
        .collect();
    Ok(letus_verify::history::mth(&leaves).0.to_vec())
}

/// Streaming verification of a state export (SPEC.md §9.2): feed chunks, then finish with a trusted root.
#[wasm_bindgen]
pub struct ExportVerifier {
    inner: Option<ExportReader>,
}

#[wasm_bindgen]
impl ExportVerifier {
    /// A verifier with the default limits.
    #[wasm_bindgen(constructor)]
    pub fn new() -> ExportVerifier {
        ExportVerifier {
            inner: Some(ExportReader::new(Limits::default())),
        }
    }

    /// Feeds the next chunk.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        let r = self
            .inner
            .as_mut()
            .ok_or_else(|| js_error("finished", "verifier already finished"))?;
        r.feed(chunk)
            .map_err(|e| js_error(e.code(), &e.to_string()))
    }

    /// Pairs verified so far.
    #[wasm_bindgen(getter)]
    pub fn records(&self) -> u64 {
        self.inner.as_ref().map_or(0, |r| r.records())
    }

    /// Ends the stream; returns the number of pairs, or throws (`root_mismatch`, `truncated`, ...).
    pub fn finish(&mut self, trusted_root: &[u8]) -> Result<u64, JsValue> {
        let root = hash(trusted_root, "root")?;
        let r = self
            .inner
            .take()
            .ok_or_else(|| js_error("finished", "verifier already finished"))?;
        r.finish(&root)
            .map(|s| s.records)
            .map_err(|e| js_error(e.code(), &e.to_string()))
    }
}

impl Default for ExportVerifier {
    fn default() -> Self {
        Self::new()
    }
}

/// A snapshot manifest verified against a trusted root (SPEC.md §12.2); chunks are verified against it.
#[wasm_bindgen]
pub struct SnapshotManifest {
    inner: letus_verify::snapshot::VerifiedManifest,
}

#[wasm_bindgen]
impl SnapshotManifest {
    /// Decodes `bytes` and verifies it as trie `tid` at `version` with root `trusted_root`; throws with `code`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        bytes: &[u8],
        tid: u32,
        version: u64,
        trusted_root: &[u8],
    ) -> Result<SnapshotManifest, JsValue> {
        let root = hash(trusted_root, "root")?;
        let inner = letus_verify::snapshot::Manifest::decode(bytes, &Limits::default())
            .map_err(letus_verify::SnapshotError::from)
            .and_then(|m| m.verify(tid, version, &root))
            .map_err(|e| js_error(e.code(), &e.to_string()))?;
        Ok(SnapshotManifest { inner })
    }

    /// Number of entries (chunks).
    #[wasm_bindgen(getter)]
    pub fn entries(&self) -> u32 {
        self.inner.items().len() as u32
    }

    /// Number of pairs in the whole state.
    #[wasm_bindgen(getter)]
    pub fn pairs(&self) -> u64 {
        self.inner.pairs()
    }

    /// Entry `index` as `[depth, prefix (32 bytes), count (bigint), hash (32 bytes)]`, or undefined.
    pub fn entry(&self, index: u32) -> JsValue {
        let Some(it) = self.inner.items().get(index as usize) else {
            return JsValue::UNDEFINED;
        };
        let a = js_sys::Array::new();
        a.push(&JsValue::from(it.depth));
        a.push(&js_sys::Uint8Array::from(&it.prefix[..]));
        a.push(&JsValue::from(it.count));
        a.push(&js_sys::Uint8Array::from(&it.hash.0[..]));
        a.into()
    }

    /// Verifies `bytes` as the chunk of entry `index` (SPEC.md §12.3); returns its pairs as `[key, value]`
    /// arrays of bytes, in path order; throws with `code`.
    #[wasm_bindgen(js_name = verifyChunk)]
    pub fn verify_chunk(&self, index: u32, bytes: &[u8]) -> Result<js_sys::Array, JsValue> {
        let chunk = self
            .inner
            .verify_chunk(index, bytes, &Limits::default())
            .map_err(|e| js_error(e.code(), &e.to_string()))?;
        let out = js_sys::Array::new();
        for (k, v) in &chunk.pairs {
            let pair = js_sys::Array::new();
            pair.push(&js_sys::Uint8Array::from(&k[..]));
            pair.push(&js_sys::Uint8Array::from(&v[..]));
            out.push(&pair);
        }
        Ok(out)
    }
}
