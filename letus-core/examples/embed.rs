//! Embedding the letus engine: open a store, write a few blocks into two tries, read the latest and an old
//! version, get a proof and check it with `letus-verify`, read a snapshot on another thread while blocks commit,
//! look at a key's history, verify a whole version, and reopen the store to see that nothing was lost.
//!
//! `cargo run -p letus-core --example embed`

use letus_core::{Options, Store};
use letus_verify::{verify_proof, Limits};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("letus-embed-{}", std::process::id()));
    const ACCOUNTS: u32 = 0; // trie ids are yours to choose: one per contract, per shard, ...
    const NONCES: u32 = 1;

    let mut store = Store::open(&dir, Options::default())?;
    // Block 1: stage writes, then commit them as version 1. The digests are durable when commit returns.
    store.put(ACCOUNTS, b"alice", b"100")?;
    store.put(ACCOUNTS, b"bob", b"50")?;
    store.put(NONCES, b"alice", b"0")?;
    let block1 = store.commit(1)?;
    // Block 2: alice pays bob 30.
    store.put(ACCOUNTS, b"alice", b"70")?;
    store.put(ACCOUNTS, b"bob", b"80")?;
    store.put(NONCES, b"alice", b"1")?;
    let block2 = store.commit(2)?;
    // Block 5 (versions only need to increase): bob's account is closed.
    store.delete(ACCOUNTS, b"bob")?;
    store.commit(5)?;

    println!("root of accounts at v1: {}", block1[0].root);
    println!("root of accounts at v2: {}", block2[0].root);
    println!(
        "alice at v5: {:?}",
        store.get_latest(ACCOUNTS, b"alice")?.map(String::from_utf8)
    );
    println!(
        "bob at v2: {:?}, at v5: {:?}",
        store.get(ACCOUNTS, 2, b"bob")?.map(String::from_utf8),
        store.get(ACCOUNTS, 5, b"bob")?
    );

    // A proof a light client can check against the digest it trusts.
    let digest = store.digest(ACCOUNTS, 2)?;
    let (value, proof) = store.get_proof(ACCOUNTS, 2, b"alice")?;
    let read = verify_proof(
        &digest.root,
        b"alice",
        value.as_deref(),
        &proof,
        &Limits::default(),
    )?;
    println!(
        "proof of alice at v2: {} bytes, verified value {:?}",
        proof.encoded_len(),
        read.value().map(String::from_utf8_lossy)
    );

    // Readers on other threads read snapshots (`store.reader()` hands out more from any thread): a snapshot
    // reads its version, whatever commits meanwhile, and never waits for a commit's fsync.
    let snap = store.snapshot();
    store.put(ACCOUNTS, b"alice", b"60")?;
    store.commit(6)?;
    let auditor = std::thread::spawn(move || -> letus_core::Result<(u64, Option<Vec<u8>>)> {
        let v = snap.version().unwrap_or(0);
        Ok((v, snap.get_latest(ACCOUNTS, b"alice")?))
    });
    let (v, alice) = auditor.join().map_err(|_| "the reader panicked")??;
    println!(
        "a snapshot taken at v{v} still reads alice = {:?} after v6 committed 60",
        alice.map(String::from_utf8)
    );

    // The history commitment links versions: v1 is in the history of v5.
    let v5 = store.digest(ACCOUNTS, 5)?;
    let incl = store.history_inclusion_proof(ACCOUNTS, 1, 5)?;
    v5.verify_includes(1, &block1[0].root, &incl)?;
    println!(
        "v1 is in the history committed by v5 ({} hashes)",
        incl.hashes.len()
    );

    for h in store.history(NONCES, b"alice", None, 10)?.entries {
        println!(
            "nonce of alice changed at v{} to {:?}",
            h.version,
            h.value.map(String::from_utf8)
        );
    }

    // Full verification: every value read back and hashed up to the root.
    let report = store.verify_full(ACCOUNTS, 2, &block2[0].root)?;
    println!(
        "full verification of v2: {} keys, {} pages, root ok",
        report.keys, report.pages
    );

    store.close()?;
    let store = Store::open(&dir, Options::default())?;
    assert_eq!(store.latest_version(), Some(6));
    assert_eq!(store.get(ACCOUNTS, 2, b"bob")?.as_deref(), Some(&b"80"[..]));
    println!(
        "reopened at version {:?}; metrics: {:?}",
        store.latest_version(),
        store.metrics()
    );
    drop(store);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
