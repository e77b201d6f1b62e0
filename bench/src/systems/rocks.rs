//! Plain RocksDB: the latest value of every key, no root, no history. A block is one WriteBatch written with
//! `sync = true` (the durable commit). This is the floor: what a flat key-value store costs.

use std::path::Path;

use anyhow::Result;

use crate::system::{clear_block_cache, rocksdb_options, sync_write, System, Updates};

pub struct Rocks {
    db: rocksdb::DB,
    cache: rocksdb::Cache,
    cache_bytes: usize,
}

impl Rocks {
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Rocks> {
        let (o, cache) = rocksdb_options(cache_bytes);
        Ok(Rocks {
            db: rocksdb::DB::open(&o, dir)?,
            cache,
            cache_bytes,
        })
    }
}

impl System for Rocks {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn apply_block(&mut self, _version: u64, updates: &Updates) -> Result<Vec<u8>> {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in updates {
            b.put(k, v);
        }
        self.db.write_opt(b, &sync_write())?;
        Ok(Vec::new())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    fn get_at(&mut self, _version: u64, _key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(None)
    }

    fn prove(&mut self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.db.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        clear_block_cache(&mut self.cache, self.cache_bytes);
        true
    }
}
