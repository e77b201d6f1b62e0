//! Ethereum's Merkle Patricia Trie (`eth_trie` crate) on RocksDB, archive mode: trie nodes are stored by their
//! keccak hash and never deleted, so every version's root stays readable (like an archive node). Keys are hashed
//! with keccak-256 first, as in Ethereum's secure state trie. A block = the trie's changed nodes + the version's
//! root in one WriteBatch written with `sync = true`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use eth_trie::{EthTrie, Trie, DB};
use parking_lot::Mutex;

use crate::system::{clear_block_cache, rocksdb_options, sync_write, System, Updates};

/// eth_trie's node store: inserts are buffered (and readable) until `flush`, which writes them durably.
pub struct RocksNodes {
    db: rocksdb::DB,
    pending: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
}

#[derive(Debug)]
pub struct NodeError(String);
impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for NodeError {}

const NODE: u8 = b'n';
const ROOT: u8 = b'r';

fn node_key(hash: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(33);
    k.push(NODE);
    k.extend_from_slice(hash);
    k
}

impl RocksNodes {
    /// Writes the buffered nodes and `extra` (the version's root) in one synced batch.
    fn commit(&self, extra: (&[u8], &[u8])) -> Result<()> {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in self.pending.lock().drain() {
            b.put(node_key(&k), v);
        }
        b.put(extra.0, extra.1);
        self.db.write_opt(b, &sync_write())?;
        Ok(())
    }
}

impl DB for RocksNodes {
    type Error = NodeError;

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, NodeError> {
        if let Some(v) = self.pending.lock().get(key) {
            return Ok(Some(v.clone()));
        }
        self.db
            .get(node_key(key))
            .map_err(|e| NodeError(e.to_string()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> Result<(), NodeError> {
        self.pending.lock().insert(key.to_vec(), value);
        Ok(())
    }

    /// Archive mode: old nodes stay, so that old roots can be read.
    fn remove(&self, _key: &[u8]) -> Result<(), NodeError> {
        Ok(())
    }

    fn flush(&self) -> Result<(), NodeError> {
        Ok(())
    }
}

pub struct Mpt {
    nodes: Arc<RocksNodes>,
    trie: EthTrie<RocksNodes>,
    root_of: HashMap<u64, [u8; 32]>,
    cache: rocksdb::Cache,
    cache_bytes: usize,
}

fn hashed(key: &[u8]) -> [u8; 32] {
    keccak_hash::keccak(key).0
}

impl Mpt {
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Mpt> {
        let (o, cache) = rocksdb_options(cache_bytes);
        let db = rocksdb::DB::open(&o, dir)?;
        let nodes = Arc::new(RocksNodes {
            db,
            pending: Mutex::new(HashMap::new()),
        });
        Ok(Mpt {
            trie: EthTrie::new(nodes.clone()),
            nodes,
            root_of: HashMap::new(),
            cache,
            cache_bytes,
        })
    }
}

impl System for Mpt {
    fn name(&self) -> &'static str {
        "mpt"
    }

    fn apply_block(&mut self, version: u64, updates: &Updates) -> Result<Vec<u8>> {
        for (k, v) in updates {
            self.trie
                .insert(&hashed(k), v)
                .map_err(|e| anyhow!("mpt insert: {e}"))?;
        }
        let root = self
            .trie
            .root_hash()
            .map_err(|e| anyhow!("mpt root: {e}"))?;
        let mut rk = vec![ROOT];
        rk.extend_from_slice(&version.to_be_bytes());
        self.nodes.commit((&rk, root.as_slice()))?;
        let mut r = [0u8; 32];
        r.copy_from_slice(root.as_slice());
        self.root_of.insert(version, r);
        Ok(r.to_vec())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.trie
            .get(&hashed(key))
            .map_err(|e| anyhow!("mpt get: {e}"))
    }

    fn get_at(&mut self, version: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let root = self
            .root_of
            .get(&version)
            .ok_or_else(|| anyhow!("no root for version {version}"))?;
        let t = EthTrie::from(self.nodes.clone(), (*root).into())
            .map_err(|e| anyhow!("mpt from root: {e}"))?;
        Ok(Some(
            t.get(&hashed(key)).map_err(|e| anyhow!("mpt get: {e}"))?,
        ))
    }

    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let nodes = self
            .trie
            .get_proof(&hashed(key))
            .map_err(|e| anyhow!("mpt proof: {e}"))?;
        // The proof as sent: the RLP-encoded nodes, root first (length-prefixed list; 4 bytes per node overhead).
        let mut out = Vec::new();
        for n in nodes {
            out.extend_from_slice(&(n.len() as u32).to_le_bytes());
            out.extend_from_slice(&n);
        }
        Ok(Some(out))
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.nodes.db.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        clear_block_cache(&mut self.cache, self.cache_bytes);
        true
    }
}
