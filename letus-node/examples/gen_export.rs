//! Writes a state export (SPEC.md §9.2) of `N` synthetic pairs of trie 0 at version 1, straight from letus-verify
//! (no store needed), to measure `letus import` on a large export:
//!
//! ```text
//! cargo run --release -p letus-node --example gen_export -- 1000000 /tmp/1m.export
//! /usr/bin/time -v target/release/letus import --data /tmp/1m-data --file /tmp/1m.export --root ROOT
//! ```
//!
//! Keys are `key/{i:010}`, values 100 bytes derived from `i`. Prints the root.

use std::io::{BufWriter, Write};

use letus_verify::export::{encode_record, encode_trailer, ExportHeader};
use letus_verify::full::FullVerifier;
use letus_verify::path::KeyPath;

fn key(i: u32) -> Vec<u8> {
    format!("key/{i:010}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    (0..100u32)
        .map(|j| (i.wrapping_mul(2_654_435_761).wrapping_add(j)) as u8)
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: gen_export N OUT");
        std::process::exit(2);
    };
    let n: u32 = n.parse().expect("N is a number");
    let mut order: Vec<(KeyPath, u32)> = (0..n).map(|i| (KeyPath::of(&key(i)), i)).collect();
    order.sort_unstable();
    let mut f = FullVerifier::new();
    for &(_, i) in &order {
        f.update(&key(i), &value(i)).expect("sorted, distinct");
    }
    let root = f.finalize();
    let mut w = BufWriter::new(std::fs::File::create(&out).expect("create OUT"));
    let header = ExportHeader {
        tid: 0,
        version: 1,
        root,
    };
    w.write_all(&header.encode()).expect("write");
    let mut buf = Vec::new();
    for &(_, i) in &order {
        buf.clear();
        encode_record(&key(i), &value(i), &mut buf);
        w.write_all(&buf).expect("write");
    }
    w.write_all(&encode_trailer(u64::from(n))).expect("write");
    w.flush().expect("flush");
    println!("{root}");
}
