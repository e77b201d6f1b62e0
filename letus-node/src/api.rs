//! Request and response bodies of the HTTP API, shared by the server, the client subcommands and the tests.
//! Bytes are lowercase hex strings; versions are JSON numbers (decimal integers).

use letus_verify::proof_json::ProofJson;
use letus_verify::{ConsistencyProof, Digest, InclusionProof};
use serde::{Deserialize, Serialize};

/// One state change in a block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOp {
    /// Trie id.
    pub tid: u32,
    /// Key (hex).
    pub key: String,
    /// New value (hex), or `null` to delete.
    pub value: Option<String>,
}

/// A key to prefetch before applying a block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    /// Trie id.
    pub tid: u32,
    /// Key (hex).
    pub key: String,
}

/// `POST /v1/blocks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRequest {
    /// Must be exactly the next version (any version >= 1 for the first block).
    pub version: u64,
    /// The block's state changes.
    #[serde(default)]
    pub writes: Vec<WriteOp>,
    /// Raw block bytes for the block store (hex), optional.
    #[serde(default)]
    pub block: Option<String>,
    /// Keys to load in parallel before applying the writes, optional.
    #[serde(default)]
    pub access_list: Vec<AccessKey>,
}

/// `POST /v1/shard/blocks`: a sharding router's part of a block for one shard (a node in the shard role only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardBlockRequest {
    /// The part of the block in the shard's own subtrees, as a client would send it to a node.
    #[serde(flatten)]
    pub block: BlockRequest,
    /// Writes in a subtree the shard does not hold at this version: one being copied to it, or its old copy
    /// being deleted after a move (applied after `writes`; not part of the block's fingerprint, which is the
    /// client's block alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moving: Vec<WriteOp>,
    /// The subtrees the shard holds from this version on, sent at the version a move hands one over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds: Option<String>,
}

/// `GET /v1/tries/{tid}/changes`: the keys whose values differ between two versions, with their values at `to`
/// (`value: null`: deleted), in key-path order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangesResponse {
    /// Trie id.
    pub tid: u32,
    /// The older version.
    pub from: u64,
    /// The newer version.
    pub to: u64,
    /// The changes, as block writes.
    pub changes: Vec<WriteOp>,
}

/// Response of `POST /v1/blocks` and of the digest routes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestsResponse {
    /// The version.
    pub version: u64,
    /// One digest per trie.
    pub digests: Vec<Digest>,
    /// Of `POST /v1/blocks?tops=true`: the tops of every trie at `version` among the subtrees this node holds
    /// (as `GET /v1/shard/tops` answers them), so that a sharding router needs no second request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tops: Option<Vec<TrieTops>>,
}

/// `GET /v1/tries/{tid}/keys/{key}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueResponse {
    /// Trie id.
    pub tid: u32,
    /// The version the value and proof are for.
    pub version: u64,
    /// Key (hex).
    pub key: String,
    /// Value (hex) or `null` when absent.
    pub value: Option<String>,
    /// Inclusion or exclusion proof (SPEC.md §5.5 JSON form).
    pub proof: ProofJson,
    /// The same proof in its binary form (hex).
    pub proof_hex: String,
    /// The digest of the trie at `version`: verify the proof against `digest.root`.
    pub digest: Digest,
}

impl ValueResponse {
    /// The answer for `key`'s `value` at `version` of trie `tid`, its proof in both forms, and the digest.
    pub fn new(
        tid: u32,
        version: u64,
        key: &[u8],
        value: Option<&[u8]>,
        proof: &letus_verify::Proof,
        digest: Digest,
    ) -> Self {
        ValueResponse {
            tid,
            version,
            key: letus_verify::hex::encode(key),
            value: value.map(letus_verify::hex::encode),
            proof: proof.to_json_value(),
            proof_hex: letus_verify::hex::encode(&proof.encode()),
            digest,
        }
    }
}

/// `POST /v1/tries/{tid}/value` request: a value with its proof, for any key (the empty key and keys too long
/// for a URL included).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRequest {
    /// Key (hex; `""` is the empty key).
    pub key: String,
    /// Version (default: latest).
    #[serde(default)]
    pub version: Option<u64>,
}

/// `POST /v1/tries/{tid}/history` request: a key's history, for any key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRequest {
    /// Key (hex; `""` is the empty key).
    pub key: String,
    /// Include a proof and digest with each entry (default false).
    #[serde(default)]
    pub proofs: bool,
    /// Most entries returned (default and maximum: 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next` of an earlier answer: continue with the entries older than it.
    #[serde(default)]
    pub before: Option<u64>,
}

/// `POST /v1/tries/{tid}/proofs` request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiProofRequest {
    /// Keys (hex).
    pub keys: Vec<String>,
    /// Version (default: latest).
    #[serde(default)]
    pub version: Option<u64>,
}

/// `POST /v1/tries/{tid}/proofs` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiProofResponse {
    /// Trie id.
    pub tid: u32,
    /// Version.
    pub version: u64,
    /// Keys (hex), in request order.
    pub keys: Vec<String>,
    /// Values (hex or null), in request order.
    pub values: Vec<Option<String>>,
    /// One multi-proof for all keys.
    pub proof: ProofJson,
    /// Binary form (hex).
    pub proof_hex: String,
    /// Digest at `version`.
    pub digest: Digest,
}

impl MultiProofResponse {
    /// The answer for `keys` and their `values` (in request order) at `version` of trie `tid`, the multi-proof in
    /// both forms, and the digest.
    pub fn new(
        tid: u32,
        version: u64,
        keys: &[Vec<u8>],
        values: &[Option<Vec<u8>>],
        proof: &letus_verify::Proof,
        digest: Digest,
    ) -> Self {
        MultiProofResponse {
            tid,
            version,
            keys: keys.iter().map(|k| letus_verify::hex::encode(k)).collect(),
            values: values
                .iter()
                .map(|x| x.as_deref().map(letus_verify::hex::encode))
                .collect(),
            proof: proof.to_json_value(),
            proof_hex: letus_verify::hex::encode(&proof.encode()),
            digest,
        }
    }
}

/// One entry of a key's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryItem {
    /// Version that wrote it.
    pub version: u64,
    /// Value (hex) or null for a delete.
    pub value: Option<String>,
    /// With `?proofs=true`: the proof of this value at `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof_hex: Option<String>,
    /// With `?proofs=true`: the digest at `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
}

/// `GET /v1/tries/{tid}/keys/{key}/history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryResponse {
    /// Trie id.
    pub tid: u32,
    /// Key (hex).
    pub key: String,
    /// Newest first.
    pub entries: Vec<HistoryItem>,
    /// Set when older entries exist: pass it as `before` to get them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// `GET /v1/digest/frontier`: the history of trie `tid` just before `version`, as the frontier a store seeded
/// from an export of `version` starts its history from (`letus import --history`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontierResponse {
    /// Trie id.
    pub tid: u32,
    /// The exported version: its entry is entry `size` of the history.
    pub version: u64,
    /// Entries before it.
    pub size: u64,
    /// The perfect subtrees those entries make up, largest first (the heights are the binary decomposition of
    /// `size`).
    pub peaks: Vec<FrontierPeak>,
}

impl FrontierResponse {
    /// The answer for `frontier` (`(size, peaks)`, from `Snapshot::history_frontier`) of trie `tid` before
    /// `version`.
    pub fn new(tid: u32, version: u64, frontier: letus_core::Frontier) -> Self {
        let (size, peaks) = frontier;
        FrontierResponse {
            tid,
            version,
            size,
            peaks: peaks
                .into_iter()
                .map(|(height, h)| FrontierPeak {
                    height,
                    hash: h.to_string(),
                })
                .collect(),
        }
    }

    /// The frontier as `(size, peaks)`, for `Store::set_history_base`; `None` if a hash is not 64 hex digits.
    pub fn to_frontier(&self) -> Option<letus_core::Frontier> {
        let peaks = self
            .peaks
            .iter()
            .map(|p| letus_verify::Hash::from_hex(&p.hash).map(|h| (p.height, h)))
            .collect::<Option<_>>()?;
        Some((self.size, peaks))
    }
}

/// One peak of a [`FrontierResponse`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontierPeak {
    /// Height of the perfect subtree (it covers `2^height` entries).
    pub height: u32,
    /// Its `MTH` (hex).
    pub hash: String,
}

/// `GET /v1/blocks/{version}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockResponse {
    /// Version.
    pub version: u64,
    /// Raw block bytes (hex).
    pub block: String,
}

/// `GET /v1/digest/consistency`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistencyResponse {
    /// Trie id.
    pub tid: u32,
    /// Digest at `from`.
    pub from: Digest,
    /// Digest at `to`.
    pub to: Digest,
    /// Proof that `from`'s history is a prefix of `to`'s (SPEC.md §8.3).
    pub proof: ConsistencyProof,
    /// Binary form (hex).
    pub proof_hex: String,
}

impl ConsistencyResponse {
    /// The answer for `proof` between the digests `from` and `to` of trie `tid`, with the proof's binary form.
    pub fn new(
        tid: u32,
        from: Digest,
        to: Digest,
        proof: ConsistencyProof,
    ) -> Result<Self, String> {
        Ok(ConsistencyResponse {
            tid,
            from,
            to,
            proof_hex: letus_verify::hex::encode(&proof.encode().map_err(|e| e.to_string())?),
            proof,
        })
    }
}

/// `GET /v1/digest/inclusion`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InclusionResponse {
    /// Trie id.
    pub tid: u32,
    /// The entry's version.
    pub version: u64,
    /// The digest whose history includes it.
    pub at: Digest,
    /// The root at `version`.
    pub root: letus_verify::Hash,
    /// Proof (SPEC.md §8.2).
    pub proof: InclusionProof,
    /// Binary form (hex).
    pub proof_hex: String,
}

/// `GET /v1/shard/tops`: the non-empty subtrees at depth 2 of every trie at one version, of the subtrees this
/// node holds (what a sharding router composes roots and proofs from).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardTopsResponse {
    /// The subtrees this node holds (`00-ff` unless it runs with `--shard-prefixes`).
    pub prefixes: String,
    /// The version.
    pub version: u64,
    /// Every trie that exists at `version`.
    pub tries: Vec<TrieTops>,
}

/// The tops of one trie.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrieTops {
    /// Trie id.
    pub tid: u32,
    /// Its non-empty subtrees, by prefix.
    pub tops: Vec<TopJson>,
}

/// The node at depth 2 of one non-empty subtree: a branch (`hash`) or the leaf of its one key (`path`,
/// `value_hash`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopJson {
    /// The subtree: the first byte of its key paths.
    pub prefix: u8,
    /// A branch's hash (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// A leaf's key path (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A leaf's value hash (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_hash: Option<String>,
}

impl InclusionResponse {
    /// The answer for `proof` that `(version, root)` is in trie `tid`'s history as of the digest `at`, with the
    /// proof's binary form.
    pub fn new(
        tid: u32,
        version: u64,
        root: letus_verify::Hash,
        at: Digest,
        proof: InclusionProof,
    ) -> Result<Self, String> {
        Ok(InclusionResponse {
            tid,
            version,
            at,
            root,
            proof_hex: letus_verify::hex::encode(&proof.encode().map_err(|e| e.to_string())?),
            proof,
        })
    }
}

/// Every error: `{"error": {"code": "...", "message": "..."}}` (and `"oldest"` where it says so).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// A stable code and a human message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable error code.
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Of `pruned` and `before_snapshot`: the oldest version whose state the node holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest: Option<u64>,
}

/// The body of `GET /v1/tiers` (also what `letus tier status` prints): files and bytes per tier, the mover's
/// backlog and totals, the object store's requests and cache. Never a credential.
pub fn tier_status_json(t: &letus_core::storage::tiered::TierStatus) -> serde_json::Value {
    use letus_core::storage::tiered::Tier;
    let mut tiers = serde_json::Map::new();
    for (i, tier) in Tier::ALL.iter().enumerate() {
        tiers.insert(
            tier.name().into(),
            serde_json::json!({ "files": t.tiers[i].files, "bytes": t.tiers[i].bytes }),
        );
    }
    serde_json::json!({
        "version": t.version,
        "tiers": tiers,
        "hot_other_bytes": t.hot_other_bytes,
        "backlog": { "files": t.backlog.files, "bytes": t.backlog.bytes },
        "moved": { "files": t.moved_files, "bytes": t.moved_bytes, "failures": t.move_failures },
        "reads": { "hot": t.reads[0], "warm": t.reads[1], "cold": t.reads[2], "cold_pinned": t.pinned_reads },
        "object_store": {
            "where": t.cold_store,
            "epoch": t.epoch,
            "fenced": t.fenced,
            "requests": {
                "get": t.cold_requests[0], "put": t.cold_requests[1], "delete": t.cold_requests[2],
                "list": t.cold_requests[3], "errors": t.cold_requests[4],
            },
            "bytes": { "received": t.cold_bytes[0], "sent": t.cold_bytes[1] },
            "cache": { "hits": t.cold_cache[0], "misses": t.cold_cache[1], "bytes": t.cold_cache[2] },
        },
        "last_error": t.last_error,
    })
}

/// The body of `POST /v1/admin/prune`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// Versions whose state is kept besides the latest (0: only the latest).
    pub keep: u64,
    /// Merge every base file into one (a full walk of the state: the index files come down to one copy of the
    /// state's pages), not only the pages changed since the last prune.
    #[serde(default)]
    pub merge: bool,
}

/// The answer of `GET /v1/admin/prune`: the prune running now, if any (the background pruner's or one asked
/// for), and how far it is (its page walk and the swap of its files), and whether a value-log GC pass runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PruneStatusResponse {
    /// Whether a prune is running.
    pub running: bool,
    /// Whether it merges the base files (a full walk of the state).
    pub merge: bool,
    /// How long it has run, in seconds.
    pub elapsed_secs: f64,
    /// Pages written to its base file so far.
    pub pages: u64,
    /// The depth of the pages it walks now (one depth after another; the deepest take most of the time).
    pub depth: u8,
    /// Of that level's pages, how many are done...
    pub level_done: u64,
    /// ... and how many there are.
    pub level_pages: u64,
    /// Whether a value-log GC pass is running (one follows every prune; with `merge` it compacts every file
    /// with garbage, which can take longer than the prune).
    pub vlog_gc_running: bool,
    /// The oldest version whose state the node holds (`None`: never pruned).
    pub oldest: Option<u64>,
}

/// The answer of `POST /v1/admin/prune` (and what `letus prune` prints).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneResponse {
    /// Whether this prune removed anything (`false`: nothing lay below the window, or it was pruned already).
    pub pruned: bool,
    /// The oldest version whose state the node holds, once pruned.
    pub oldest: Option<u64>,
    /// Index files removed.
    pub files_removed: u64,
    /// Their bytes.
    pub bytes_removed: u64,
    /// The bytes of the base file that replaced them.
    pub base_bytes: u64,
    /// Pages written to it.
    pub pages: u64,
    /// Value-log bytes after the GC pass that follows the prune.
    pub vlog_bytes: u64,
    /// Of those, the record bytes the newest state refers to.
    pub vlog_live_bytes: u64,
    /// Value-log files that pass deleted (retired by an earlier pass, now below the boundary).
    pub vlog_files_deleted: u64,
    /// Their bytes.
    pub vlog_bytes_deleted: u64,
}
