//! The bounds a verifier enforces so that a hostile input cannot exhaust memory or time (SPEC.md §6).

/// Verifier limits; [`Limits::default`] gives the normative defaults of SPEC.md §6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest encoded state proof, in bytes.
    pub max_proof_bytes: usize,
    /// Most claims checked by one proof.
    pub max_keys: usize,
    /// Longest key, in bytes.
    pub max_key_bytes: usize,
    /// Longest value, in bytes.
    pub max_value_bytes: usize,
    /// Most entries in one snapshot manifest.
    pub max_snapshot_items: usize,
    /// Largest encoded snapshot chunk, in bytes.
    pub max_chunk_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_proof_bytes: 4 * 1024 * 1024,
            max_keys: 10_000,
            max_key_bytes: 65_535,
            max_value_bytes: 16 * 1024 * 1024,
            max_snapshot_items: 262_144,
            max_chunk_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The most hashes a history proof may carry: `2 * 64` (SPEC.md §6).
pub const MAX_HISTORY_PROOF_HASHES: usize = 128;
