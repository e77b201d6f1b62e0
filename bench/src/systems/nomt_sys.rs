//! NOMT (`nomt` crate, BLAKE3 binary trie): keys are hashed to 32-byte key paths with SHA-256; one session per
//! block, committed with `FinishedSession::commit` (durable when it returns). NOMT keeps only the latest state
//! (its rollback log is off), so historical reads are unsupported.

use std::path::Path;

use anyhow::Result;
use nomt::hasher::Blake3Hasher;
use nomt::{KeyReadWrite, Nomt, Options, Session, SessionParams};
use sha2::Digest;

use crate::system::{parallel_gets, System, Updates};

pub struct NomtSys {
    dir: std::path::PathBuf,
    buckets: u32,
    cache_bytes: usize,
    /// Always `Some` outside `reopen`.
    nomt: Option<Nomt<Blake3Hasher>>,
    /// A read session kept between proofs (dropped before every commit, which needs the write lock).
    session: Option<Session<Blake3Hasher>>,
}

fn path(key: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(key).into()
}

impl NomtSys {
    pub fn open(dir: &Path, cache_bytes: usize, accounts: u64) -> Result<NomtSys> {
        // Room for the accounts' trie pages with headroom (the default is 64,000 4-KiB buckets).
        let buckets = (accounts / 8).max(64_000) as u32;
        Ok(NomtSys {
            dir: dir.to_path_buf(),
            buckets,
            cache_bytes,
            nomt: Some(open_nomt(dir, cache_bytes, buckets)?),
            session: None,
        })
    }

    fn nomt(&self) -> Result<&Nomt<Blake3Hasher>> {
        self.nomt.as_ref().ok_or_else(|| anyhow::anyhow!("closed"))
    }
}

fn open_nomt(dir: &Path, cache_bytes: usize, buckets: u32) -> Result<Nomt<Blake3Hasher>> {
    let mut o = Options::new();
    o.path(dir);
    o.commit_concurrency(2);
    // NOMT sizes its page cache and its leaf cache in MiB; the budget is split evenly between them.
    o.page_cache_size((cache_bytes >> 21).max(1));
    o.leaf_cache_size((cache_bytes >> 21).max(1));
    o.hashtable_buckets(buckets);
    Nomt::open(o)
}

impl System for NomtSys {
    fn name(&self) -> &'static str {
        "nomt"
    }

    fn apply_block(&mut self, _version: u64, updates: &Updates) -> Result<Vec<u8>> {
        self.session = None;
        let session = self.nomt()?.begin_session(SessionParams::default());
        let mut actuals: Vec<([u8; 32], KeyReadWrite)> = updates
            .iter()
            .map(|(k, v)| (path(k), KeyReadWrite::Write(Some(v.clone()))))
            .collect();
        actuals.sort_by(|a, b| a.0.cmp(&b.0));
        for (p, _) in &actuals {
            session.warm_up(*p);
        }
        let finished = session.finish(actuals)?;
        let root = finished.root();
        finished.commit(self.nomt()?)?;
        Ok(root.into_inner().to_vec())
    }

    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.nomt()?.read(path(key))
    }

    fn get_at(&mut self, _version: u64, _key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(None)
    }

    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let nomt = self
            .nomt
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("closed"))?;
        let s = self
            .session
            .get_or_insert_with(|| nomt.begin_session(SessionParams::default()));
        let proof = s.prove(path(key))?;
        // Size as borsh would encode it: terminal (tag + leaf key path and value hash, or tag + bit length + path
        // bytes of a terminator) + sibling count + 32 bytes per sibling. The bytes are zeros: only the size is used.
        let terminal = match &proof.terminal {
            nomt::proof::PathProofTerminal::Leaf(_) => 1 + 64,
            nomt::proof::PathProofTerminal::Terminator(_) => {
                1 + 2 + proof.terminal.path().len().div_ceil(8)
            }
        };
        Ok(Some(vec![0u8; terminal + 4 + 32 * proof.siblings.len()]))
    }

    /// NOMT has no call that empties its caches: it is closed and reopened, which also empties them.
    fn clear_caches(&mut self) -> bool {
        self.reopen(self.cache_bytes).is_ok()
    }

    fn reopen(&mut self, cache_bytes: usize) -> Result<()> {
        self.session = None;
        drop(self.nomt.take());
        self.cache_bytes = cache_bytes;
        self.nomt = Some(open_nomt(&self.dir, cache_bytes, self.buckets)?);
        Ok(())
    }

    fn get_many(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let nomt = self.nomt()?;
        parallel_gets(keys, |k| nomt.read(path(k)))
    }
}
