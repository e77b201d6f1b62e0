//! The Jellyfish Merkle Tree (`jmt` crate, SHA-256) on RocksDB: nodes keyed by their borsh-encoded `NodeKey`
//! (version + nibble path), values keyed by `(key hash, version)` so that any version can be read. Stale nodes
//! are kept (no pruning: every version stays readable, as in letus). A block = the `TreeUpdateBatch`'s nodes and
//! values in one WriteBatch written with `sync = true`.

use std::path::Path;

use anyhow::{anyhow, Result};
use jmt::storage::{LeafNode, Node, NodeBatch, NodeKey, TreeReader, TreeWriter};
use jmt::{JellyfishMerkleTree, KeyHash, OwnedValue, Sha256Jmt};

use crate::system::{
    clear_block_cache, parallel_gets, rocksdb_options, sync_write, System, Updates,
};

const NODE: u8 = b'n';
const VALUE: u8 = b'v';

pub struct RocksTree {
    db: rocksdb::DB,
}

fn value_key(kh: &KeyHash, version: u64) -> [u8; 41] {
    let mut k = [0u8; 41];
    k[0] = VALUE;
    k[1..33].copy_from_slice(&kh.0);
    k[33..].copy_from_slice(&version.to_be_bytes());
    k
}

fn node_key(nk: &NodeKey) -> Result<Vec<u8>> {
    let mut k = vec![NODE];
    k.extend(borsh::to_vec(nk)?);
    Ok(k)
}

impl TreeReader for RocksTree {
    fn get_node_option(&self, node_key_: &NodeKey) -> Result<Option<Node>> {
        match self.db.get_pinned(node_key(node_key_)?)? {
            Some(b) => Ok(Some(borsh::from_slice(&b)?)),
            None => Ok(None),
        }
    }

    fn get_value_option(&self, max_version: u64, key_hash: KeyHash) -> Result<Option<OwnedValue>> {
        let mut it = self.db.raw_iterator();
        it.seek_for_prev(value_key(&key_hash, max_version));
        if !it.valid() {
            return Ok(None);
        }
        let k = it.key().unwrap_or_default();
        if k.len() != 41 || k[0] != VALUE || k[1..33] != key_hash.0 {
            return Ok(None);
        }
        let v = it.value().unwrap_or_default();
        // First byte 1 = value, 0 = deleted.
        Ok(if v.first() == Some(&1) {
            Some(v[1..].to_vec())
        } else {
            None
        })
    }

    fn get_rightmost_leaf(&self) -> Result<Option<(NodeKey, LeafNode)>> {
        Err(anyhow!(
            "get_rightmost_leaf is only used by JMT restore, not implemented"
        ))
    }
}

impl TreeWriter for RocksTree {
    fn write_node_batch(&self, batch: &NodeBatch) -> Result<()> {
        let mut b = rocksdb::WriteBatch::default();
        for (nk, node) in batch.nodes() {
            b.put(node_key(nk)?, borsh::to_vec(node)?);
        }
        for ((version, kh), v) in batch.values() {
            let mut val = Vec::with_capacity(1 + v.as_ref().map_or(0, Vec::len));
            match v {
                Some(v) => {
                    val.push(1);
                    val.extend_from_slice(v);
                }
                None => val.push(0),
            }
            b.put(value_key(kh, *version), val);
        }
        self.db.write_opt(b, &sync_write())?;
        Ok(())
    }
}

pub struct Jmt {
    dir: std::path::PathBuf,
    /// Always `Some` outside `reopen`.
    store: Option<RocksTree>,
    version: Option<u64>,
    cache: rocksdb::Cache,
    cache_bytes: usize,
}

impl Jmt {
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Jmt> {
        let (o, cache) = rocksdb_options(cache_bytes);
        Ok(Jmt {
            dir: dir.to_path_buf(),
            store: Some(RocksTree {
                db: rocksdb::DB::open(&o, dir)?,
            }),
            version: None,
            cache,
            cache_bytes,
        })
    }

    fn store(&self) -> Result<&RocksTree> {
        self.store.as_ref().ok_or_else(|| anyhow!("closed"))
    }

    fn tree(&self) -> Result<Sha256Jmt<'_, RocksTree>> {
        Ok(JellyfishMerkleTree::new(self.store()?))
    }
}

fn kh(key: &[u8]) -> KeyHash {
    KeyHash::with::<sha2::Sha256>(key)
}

impl System for Jmt {
    fn name(&self) -> &'static str {
        "jmt"
    }

    fn apply_block(&mut self, version: u64, updates: &Updates) -> Result<Vec<u8>> {
        let set: Vec<(KeyHash, Option<OwnedValue>)> = updates
            .iter()
            .map(|(k, v)| (kh(k), Some(v.clone())))
            .collect();
        // JMT versions must be consecutive from 0 for the tree to find the previous root; map ours (1, 2, ...) to
        // version - 1.
        let (root, batch) = self.tree()?.put_value_set(set, version - 1)?;
        self.store()?.write_node_batch(&batch.node_batch)?;
        self.version = Some(version - 1);
        Ok(root.0.to_vec())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.version.ok_or_else(|| anyhow!("empty"))?;
        self.tree()?.get(kh(key), v)
    }

    fn get_at(&mut self, version: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(Some(self.tree()?.get(kh(key), version - 1)?))
    }

    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.version.ok_or_else(|| anyhow!("empty"))?;
        let (_, proof) = self.tree()?.get_with_proof(kh(key), v)?;
        Ok(Some(borsh::to_vec(&proof)?))
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.store()?.db.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        clear_block_cache(&mut self.cache, self.cache_bytes);
        true
    }

    fn reopen(&mut self, cache_bytes: usize) -> Result<()> {
        drop(self.store.take());
        let (o, cache) = rocksdb_options(cache_bytes);
        self.store = Some(RocksTree {
            db: rocksdb::DB::open(&o, &self.dir)?,
        });
        self.cache = cache;
        self.cache_bytes = cache_bytes;
        Ok(())
    }

    fn get_many(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let v = self.version.ok_or_else(|| anyhow!("empty"))?;
        let tree = self.tree()?;
        parallel_gets(keys, |k| tree.get(kh(k), v))
    }
}
