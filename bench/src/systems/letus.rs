//! letus itself (letus-core's `Store`, one trie, default options: fsync at every commit).

use std::path::Path;

use anyhow::Result;
use letus_core::{Options, Store};

use crate::system::{System, Updates};

pub struct Letus {
    store: Store,
    version: u64,
}

impl Letus {
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Letus> {
        let opts = Options {
            page_cache_bytes: cache_bytes as u64,
            ..Options::default()
        };
        Ok(Letus {
            store: Store::open(dir, opts)?,
            version: 0,
        })
    }
}

impl System for Letus {
    fn name(&self) -> &'static str {
        "letus"
    }

    fn apply_block(&mut self, version: u64, updates: &Updates) -> Result<Vec<u8>> {
        for (k, v) in updates {
            self.store.put(0, k, v)?;
        }
        let digests = self.store.commit(version)?;
        self.version = version;
        Ok(digests
            .first()
            .map(|d| d.root.0.to_vec())
            .unwrap_or_default())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(0, self.version, key)?)
    }

    fn get_at(&mut self, version: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(Some(self.store.get(0, version, key)?))
    }

    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (_, proof) = self.store.get_proof(0, self.version, key)?;
        Ok(Some(proof.encode()))
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.store.flush()?)
    }

    fn clear_caches(&mut self) -> bool {
        self.store.clear_caches();
        true
    }
}
