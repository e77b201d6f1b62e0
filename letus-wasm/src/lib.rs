//! `letus-wasm`: thin wasm-bindgen bindings over `letus-verify`; it only converts types between JS and Rust.
//!
//! Bytes are `Uint8Array`, versions are `bigint`, and every failure is a JS `Error` whose `code` property is the
//! stable SPEC.md error code. The binary forms cross the boundary; JSON forms are converted on the JS side, which
//! keeps serde's deserializer (and its float formatting) out of the module: 27 KB gzipped instead of 54 KB.
#![forbid(unsafe_code)]

use js_sys::{Error, Reflect};
use letus_verify::export::ExportReader;
use letus_verify::{Claim, Hash, Limits, Proof};
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
    let claims: Vec<Claim<'_>> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| Claim {
            key: k,
            value: v.as_deref(),
        })
        .collect();
    let p = decode_proof(proof)?;
    letus_verify::verify_multi_proof(&root, &claims, &p, &Limits::default())
        .map(|_| ())
        .map_err(|e| js_error(e.code(), &e.to_string()))
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
