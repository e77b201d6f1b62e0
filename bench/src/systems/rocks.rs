//! Plain RocksDB: the block's key-value pairs in one synced write batch, no authentication. The lower bound of
//! what an LSM store costs.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use crate::system::{
    clear_block_cache, parallel_gets, rocksdb_options, sync_write, System, Updates,
};

pub struct Rocks {
    dir: PathBuf,
    /// Always `Some` outside `reopen` (the old DB must close, releasing its lock, before the new one opens).
    db: Option<rocksdb::DB>,
    cache: rocksdb::Cache,
    cache_bytes: usize,
}

impl Rocks {
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Rocks> {
        let (o, cache) = rocksdb_options(cache_bytes);
        Ok(Rocks {
            dir: dir.to_path_buf(),
            db: Some(rocksdb::DB::open(&o, dir)?),
            cache,
            cache_bytes,
        })
    }

    fn db(&self) -> Result<&rocksdb::DB> {
        self.db.as_ref().ok_or_else(|| anyhow!("closed"))
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
        self.db()?.write_opt(b, &sync_write())?;
        Ok(Vec::new())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db()?.get(key)?)
    }

    fn get_at(&mut self, _version: u64, _key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(None)
    }

    fn prove(&mut self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.db()?.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        clear_block_cache(&mut self.cache, self.cache_bytes);
        true
    }

    fn reopen(&mut self, cache_bytes: usize) -> Result<()> {
        drop(self.db.take());
        let (o, cache) = rocksdb_options(cache_bytes);
        self.db = Some(rocksdb::DB::open(&o, &self.dir)?);
        self.cache = cache;
        self.cache_bytes = cache_bytes;
        Ok(())
    }

    fn get_many(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let db = self.db()?;
        parallel_gets(keys, |k| Ok(db.get(k)?))
    }
}
