//! What more than one example needs (a directory with a `mod.rs`, so that cargo does not take it for an example).

use letus_core::{Options, Store};
use letus_verify::KeyPath;

/// The key of account `i`, as every example names it.
pub fn account(i: u64) -> Vec<u8> {
    format!("account-{i:010}").into_bytes()
}

/// Bulk-loads `n` accounts of balance 100 as trie 0 at version 1 into `dir` (fed in key-path order, as
/// `Store::bulk_load` requires): the store, and how long the load took (the sort by key path before it not
/// counted).
pub fn bulk_accounts(dir: &std::path::Path, n: u64) -> (Store, std::time::Duration) {
    let mut keys: Vec<(KeyPath, u64)> = (0..n).map(|i| (KeyPath::of(&account(i)), i)).collect();
    keys.sort_unstable();
    let mut it = keys.into_iter();
    let t = std::time::Instant::now();
    let s = Store::bulk_load(dir, Options::default(), 0, 1, None, || {
        Ok(it
            .next()
            .map(|(_, i)| (account(i), b"balance 100".to_vec())))
    })
    .expect("bulk load");
    (s, t.elapsed())
}
