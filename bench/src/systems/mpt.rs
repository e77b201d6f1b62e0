//! Ethereum's Merkle Patricia Trie (`eth_trie` crate) on RocksDB, archive mode: trie nodes are stored by their
//! keccak hash and never deleted, so every version's root stays readable (like an archive node). Keys are hashed
//! with keccak-256 first, as in Ethereum's secure state trie. A block = the trie's changed nodes + the version's
//! root in one WriteBatch written with `sync = true`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use eth_trie::{EthTrie, Trie, DB};
use parking_lot::Mutex;

use crate::system::{
    clear_block_cache, parallel_gets, rocksdb_options, sync_write, System, Updates,
};

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

/// The open database and the trie on it (reopened together: the trie holds the node store).
struct Open {
    nodes: Arc<RocksNodes>,
    trie: EthTrie<RocksNodes>,
    cache: rocksdb::Cache,
    cache_bytes: usize,
}

pub struct Mpt {
    dir: PathBuf,
    /// Always `Some` outside `reopen`.
    open: Option<Open>,
    root_of: HashMap<u64, [u8; 32]>,
    last: Option<u64>,
}

fn hashed(key: &[u8]) -> [u8; 32] {
    keccak_hash::keccak(key).0
}

fn open_db(dir: &Path, cache_bytes: usize, root: Option<[u8; 32]>) -> Result<Open> {
    let (o, cache) = rocksdb_options(cache_bytes);
    let db = rocksdb::DB::open(&o, dir)?;
    let nodes = Arc::new(RocksNodes {
        db,
        pending: Mutex::new(HashMap::new()),
    });
    let trie = match root {
        Some(r) => {
            EthTrie::from(nodes.clone(), r.into()).map_err(|e| anyhow!("mpt from root: {e}"))?
        }
        None => EthTrie::new(nodes.clone()),
    };
    Ok(Open {
        nodes,
        trie,
        cache,
        cache_bytes,
    })
}

impl Mpt {
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Mpt> {
        Ok(Mpt {
            dir: dir.to_path_buf(),
            open: Some(open_db(dir, cache_bytes, None)?),
            root_of: HashMap::new(),
            last: None,
        })
    }

    fn o(&mut self) -> Result<&mut Open> {
        self.open.as_mut().ok_or_else(|| anyhow!("closed"))
    }
}

impl System for Mpt {
    fn name(&self) -> &'static str {
        "mpt"
    }

    fn apply_block(&mut self, version: u64, updates: &Updates) -> Result<Vec<u8>> {
        let o = self.o()?;
        for (k, v) in updates {
            o.trie
                .insert(&hashed(k), v)
                .map_err(|e| anyhow!("mpt insert: {e}"))?;
        }
        let root = o.trie.root_hash().map_err(|e| anyhow!("mpt root: {e}"))?;
        let mut rk = vec![ROOT];
        rk.extend_from_slice(&version.to_be_bytes());
        o.nodes.commit((&rk, root.as_slice()))?;
        let mut r = [0u8; 32];
        r.copy_from_slice(root.as_slice());
        self.root_of.insert(version, r);
        self.last = Some(version);
        Ok(r.to_vec())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.o()?
            .trie
            .get(&hashed(key))
            .map_err(|e| anyhow!("mpt get: {e}"))
    }

    fn get_at(&mut self, version: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let root = *self
            .root_of
            .get(&version)
            .ok_or_else(|| anyhow!("no root for version {version}"))?;
        let nodes = self.o()?.nodes.clone();
        let t = EthTrie::from(nodes, root.into()).map_err(|e| anyhow!("mpt from root: {e}"))?;
        Ok(Some(
            t.get(&hashed(key)).map_err(|e| anyhow!("mpt get: {e}"))?,
        ))
    }

    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let nodes = self
            .o()?
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
        Ok(self.o()?.nodes.db.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        match self.open.as_mut() {
            Some(o) => {
                clear_block_cache(&mut o.cache, o.cache_bytes);
                true
            }
            None => false,
        }
    }

    fn reopen(&mut self, cache_bytes: usize) -> Result<()> {
        drop(self.open.take());
        let root = self.last.and_then(|v| self.root_of.get(&v).copied());
        self.open = Some(open_db(&self.dir, cache_bytes, root)?);
        Ok(())
    }

    fn get_many(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let root = self
            .last
            .and_then(|v| self.root_of.get(&v).copied())
            .ok_or_else(|| anyhow!("empty"))?;
        let nodes = self.o()?.nodes.clone();
        // One trie handle per get: an `EthTrie` caches nodes it walks and is not shared between threads.
        parallel_gets(keys, |k| {
            let t = EthTrie::from(nodes.clone(), root.into())
                .map_err(|e| anyhow!("mpt from root: {e}"))?;
            t.get(&hashed(k)).map_err(|e| anyhow!("mpt get: {e}"))
        })
    }
}
