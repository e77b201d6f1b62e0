//! letus itself (letus-core's `Store`, one trie, default options: fsync at every commit).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use letus_core::{Options, Store};

use crate::system::{System, Updates};

pub struct Letus {
    /// Always `Some` outside `reopen`.
    store: Option<Store>,
    dir: PathBuf,
    version: u64,
    max_delta_chain: Option<u32>,
}

/// letus' memory budget is the cache budget given to every system (the engine splits it between its caches).
fn options(cache_bytes: usize, max_delta_chain: Option<u32>) -> Options {
    let d = Options::default();
    Options {
        memory_budget_bytes: cache_bytes as u64,
        max_delta_chain: max_delta_chain.unwrap_or(d.max_delta_chain),
        ..d
    }
}

impl Letus {
    pub fn open(dir: &Path, cache_bytes: usize, max_delta_chain: Option<u32>) -> Result<Letus> {
        Ok(Letus {
            store: Some(Store::open(dir, options(cache_bytes, max_delta_chain))?),
            dir: dir.to_path_buf(),
            version: 0,
            max_delta_chain,
        })
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open outside reopen")
    }
}

impl System for Letus {
    fn name(&self) -> &'static str {
        "letus"
    }

    fn apply_block(&mut self, version: u64, updates: &Updates) -> Result<Vec<u8>> {
        let store = self.store.as_mut().ok_or_else(|| anyhow!("closed"))?;
        for (k, v) in updates {
            store.put(0, k, v)?;
        }
        let digests = store.commit(version)?;
        self.version = version;
        Ok(digests
            .first()
            .map(|d| d.root.0.to_vec())
            .unwrap_or_default())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.store().get(0, self.version, key)?)
    }

    fn get_at(&mut self, version: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(Some(self.store().get(0, version, key)?))
    }

    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (_, proof) = self.store().get_proof(0, self.version, key)?;
        Ok(Some(proof.encode()))
    }

    fn flush(&mut self) -> Result<()> {
        let store = self.store.as_mut().ok_or_else(|| anyhow!("closed"))?;
        Ok(store.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        self.store().clear_caches();
        true
    }

    fn reopen(&mut self, cache_bytes: usize) -> Result<()> {
        if let Some(s) = self.store.take() {
            s.close()?;
        }
        self.store = Some(Store::open(
            &self.dir,
            options(cache_bytes, self.max_delta_chain),
        )?);
        Ok(())
    }

    fn get_many(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        Ok(self.store().get_many(0, self.version, &refs)?)
    }
}
