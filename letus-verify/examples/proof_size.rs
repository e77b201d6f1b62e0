//! Measures the size of one-key proofs (inclusion and exclusion) in tries of N keys.
//!
//! `cargo run --release -p letus-verify --example proof_size --features reference -- 1000000 10000000`
//! Each size builds the reference trie (about 150 bytes of memory per key) and proves sampled keys; every
//! proof is verified before it is counted.

use letus_verify::reference::ReferenceTrie;
use letus_verify::{verify_proof, Limits};

/// Trie sizes to measure (default 1000 100000 1000000).
#[derive(clap::Parser)]
struct Args {
    /// Numbers of keys.
    sizes: Vec<u64>,
}

fn main() {
    let sizes = <Args as clap::Parser>::parse().sizes;
    let sizes = if sizes.is_empty() {
        vec![1_000, 100_000, 1_000_000]
    } else {
        sizes
    };
    println!("| keys | samples | inclusion bytes (mean / max) | exclusion bytes (mean / max) | branch levels (mean) |");
    println!("|---:|---:|---:|---:|---:|");
    for n in sizes {
        let t = ReferenceTrie::from_pairs(
            (0..n).map(|i| (format!("account-{i}").into_bytes(), (i * 31).to_le_bytes())),
        );
        let root = t.root();
        let samples = 8u64;
        let (mut inc, mut exc, mut levels) = (Vec::new(), Vec::new(), 0usize);
        for s in 0..samples {
            let i = (s * 7_919_993) % n;
            let k = format!("account-{i}").into_bytes();
            let p = t.prove(&[&k]);
            let read = verify_proof(&root, &k, t.get(&k), &p, &Limits::default())
                .expect("inclusion verifies");
            assert!(read.is_present());
            levels += p.records.len() - 1;
            inc.push(p.encoded_len());
            let missing = format!("missing-{s}").into_bytes();
            let p = t.prove(&[&missing]);
            let read = verify_proof(&root, &missing, None, &p, &Limits::default())
                .expect("exclusion verifies");
            assert!(!read.is_present());
            exc.push(p.encoded_len());
        }
        let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64;
        let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
        println!(
            "| {n} | {samples} | {:.0} / {} | {:.0} / {} | {:.1} |",
            mean(&inc),
            max(&inc),
            mean(&exc),
            max(&exc),
            levels as f64 / samples as f64
        );
    }
}
