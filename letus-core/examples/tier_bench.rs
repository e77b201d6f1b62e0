//! Tiering on the bench's payment workload, against a real S3-compatible server (SeaweedFS, started here on
//! 127.0.0.1 from `target/tools/seaweedfs`, which `scripts/test-all.sh` installs):
//!
//! 1. the same load and payment blocks are committed to an untiered store and to a tiered one (cold tier on the
//!    object store, files sealed `--cold-after` versions ago moved by the background mover); commit rates of both;
//! 2. where the tiered store's bytes are (hot share of the whole);
//! 3. differential: digests of every version, values and proofs of sampled keys at sampled old versions, key
//!    histories and history proofs, identical in both stores;
//! 4. proofs at old versions served from the cold tier, the engine's caches cleared before each: ranged GETs and
//!    latency per proof (p50, p99, max), with the bounded cold cache kept, and with it cleared too;
//! 5. requests sent by the idle store over `--idle-secs`.
//!
//! ```sh
//! cargo run --release -p letus-core --features s3 --example tier_bench -- --accounts 1000000 --blocks 1001
//! ```

#[path = "../tests/support/s3_server.rs"]
mod s3_server;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use letus_core::storage::s3::S3;
use letus_core::storage::tiered::{ColdStore, TierConfig, TierPolicy, Tiered};
use letus_core::{Options, Store};
use letus_workload::Rng;

#[global_allocator]
static GLOBAL: letus_alloc::MiMalloc = letus_alloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// Accounts.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Payment blocks after the load.
    #[arg(long, default_value_t = 1001)]
    blocks: u64,
    /// Transfers per block (two updates each).
    #[arg(long, default_value_t = 1000)]
    txs: u64,
    /// Files sealed this many versions ago go to the cold tier.
    #[arg(long, default_value_t = 100)]
    cold_after: u64,
    /// Value-log file size (both stores).
    #[arg(long, default_value_t = 32 << 20)]
    vdls_file_bytes: u64,
    /// Size of one ranged GET (the cold cache's block), KiB.
    #[arg(long, default_value_t = 256)]
    cold_block_kib: u64,
    /// Records of pages shallower than this depth stay on the hot disk when their index file goes cold (0: none,
    /// 2: the root page, 4: the root and the 256 pages below it); index blocks always do.
    #[arg(long, default_value_t = 2)]
    pin_depth: u8,
    /// Move index files to the cold tier as they are, without consolidating them first (so that a page whose
    /// DeltaPage chain spans files costs one GET per record).
    #[arg(long)]
    no_consolidate: bool,
    /// Proofs measured from the cold tier.
    #[arg(long, default_value_t = 300)]
    proofs: usize,
    /// Seconds of idleness whose object-store requests are counted.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Where the stores go (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

const TID: u32 = 0;

fn key(a: u64) -> Vec<u8> {
    format!("account-{a:010}").into_bytes()
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The object store, with the ranged GETs since the last clear written down (to show where a costly proof's
/// GETs went).
#[derive(Debug)]
struct Logged {
    inner: Arc<dyn ColdStore>,
    gets: Mutex<Vec<(String, u64, u64)>>,
}

impl ColdStore for Logged {
    fn upload(
        &self,
        key: &str,
        src: letus_core::storage::FileRef,
        len: u64,
    ) -> std::io::Result<()> {
        self.inner.upload(key, src, len)
    }
    fn get_range(&self, key: &str, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
        let mut g = self.gets.lock().unwrap();
        if g.len() < 64 {
            g.push((key.to_string(), start, end));
        }
        drop(g);
        self.inner.get_range(key, start, end)
    }
    fn get(&self, key: &str) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> std::io::Result<bool> {
        self.inner.put_if_absent(key, bytes)
    }
    fn delete(&self, key: &str) -> std::io::Result<()> {
        self.inner.delete(key)
    }
    fn list(&self, prefix: &str) -> std::io::Result<Vec<String>> {
        self.inner.list(prefix)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

fn main() {
    letus_alloc::init();
    let a = Args::parse();
    let tmp = tempfile::tempdir_in(a.dir.clone().unwrap_or_else(std::env::temp_dir)).unwrap();
    let s3 = s3_server::S3Server::start();
    println!("object store: SeaweedFS at {}", s3.endpoint);
    let plain_dir = tmp.path().join("plain");
    let root = tmp.path().join("tiered");
    let logged = Arc::new(Logged {
        inner: Arc::new(S3::new(&s3.config()).unwrap()),
        gets: Mutex::default(),
    });
    let cold: Arc<dyn ColdStore> = logged.clone();
    let tiers = Tiered::open(TierConfig {
        cold: Some(cold),
        cold_prefix: "bench".into(),
        cold_block_bytes: a.cold_block_kib << 10,
        pins: Some(letus_core::storage::tiered::index_pins(a.pin_depth)),
        policy: TierPolicy {
            cold_after_versions: Some(a.cold_after),
            ..TierPolicy::default()
        },
        ..TierConfig::new(&root)
    })
    .unwrap();
    tiers.start_mover();
    let opts = |storage, prefetch_delta_chains| Options {
        storage,
        prefetch_delta_chains,
        vdls_file_bytes: a.vdls_file_bytes,
        ..Options::default()
    };
    let mut plain = Store::open(&plain_dir, opts(letus_core::storage::local(), false)).unwrap();
    let mut tiered = Store::open(root.join("state"), opts(tiers.shared(), true)).unwrap();
    if !a.no_consolidate {
        tiers.set_before_cold(tiered.reader().cold_preparer());
    }

    // The load, in blocks of 50,000 accounts, then the payment blocks: the same writes to both stores.
    let mut balances = vec![1_000_000u64; a.accounts as usize];
    let mut blocks: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
    for start in (0..a.accounts).step_by(50_000) {
        let end = (start + 50_000).min(a.accounts);
        blocks.push(
            (start..end)
                .map(|i| (key(i), balances[i as usize].to_le_bytes().to_vec()))
                .collect(),
        );
    }
    let load_versions = blocks.len() as u64;
    let mut rng = Rng::new(42);
    for _ in 0..a.blocks {
        let mut touched = std::collections::BTreeMap::new();
        for _ in 0..a.txs {
            let (from, to) = (rng.hot_account(a.accounts), rng.hot_account(a.accounts));
            let amount = rng.below(100);
            balances[from as usize] = balances[from as usize].saturating_sub(amount);
            balances[to as usize] += amount;
            touched.insert(from, ());
            touched.insert(to, ());
        }
        blocks.push(
            touched
                .keys()
                .map(|&i| (key(i), balances[i as usize].to_le_bytes().to_vec()))
                .collect(),
        );
    }
    let versions = blocks.len() as u64;
    let updates: u64 = blocks[load_versions as usize..]
        .iter()
        .map(|b| b.len() as u64)
        .sum();
    let mut rates = Vec::new();
    for (name, store, t) in [
        ("untiered", &mut plain, None),
        ("tiered", &mut tiered, Some(&tiers)),
    ] {
        let started = Instant::now();
        let mut pay_started = started;
        for (i, b) in blocks.iter().enumerate() {
            let v = i as u64 + 1;
            if v == load_versions + 1 {
                pay_started = Instant::now();
            }
            for (k, val) in b {
                store.put(TID, k, val).unwrap();
            }
            store.commit(v).unwrap();
            if let Some(t) = t {
                t.note_version(v);
                if v.is_multiple_of(100) {
                    let st = t.status();
                    println!(
                        "  at version {v}: {} s; hot sealed {} files, cold {} files; moved {}, backlog {}; {} GETs",
                        started.elapsed().as_secs(),
                        st.tiers[0].files,
                        st.tiers[2].files,
                        st.moved_files,
                        st.backlog.files,
                        st.cold_requests[0]
                    );
                }
            }
        }
        let pay = pay_started.elapsed().as_secs_f64();
        println!(
            "{name}: {versions} versions in {:.1} s; payment blocks {:.0} committed updates/s",
            started.elapsed().as_secs_f64(),
            updates as f64 / pay
        );
        rates.push(updates as f64 / pay);
    }
    println!("tiered / untiered commit rate: {:.2}", rates[1] / rates[0]);
    tiers.stop_mover();
    while tiers.migrate_now().unwrap() > 0 {}
    let st = tiers.status();
    let hot = st.tiers[0].bytes + st.hot_other_bytes;
    let all = hot + st.tiers[1].bytes + st.tiers[2].bytes;
    println!(
        "tiered store: {} bytes; hot {} ({:.1}%: {} sealed files {} B, active files and logs {} B), cold {} files {} B; \
         untiered store {} B",
        all,
        hot,
        100.0 * hot as f64 / all as f64,
        st.tiers[0].files,
        st.tiers[0].bytes,
        st.hot_other_bytes,
        st.tiers[2].files,
        st.tiers[2].bytes,
        plain.disk_bytes()
    );

    let mut hot_idx: Vec<String> = std::fs::read_dir(root.join("state/lsvps"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| {
                    let len = e.metadata().map_or(0, |m| m.len());
                    format!("{} {len} B", e.file_name().to_string_lossy())
                })
                .collect()
        })
        .unwrap_or_default();
    hot_idx.sort();
    if let Ok(m) = letus_core::storage::tiered::Manifest::load(&letus_core::storage::Local, &root) {
        let hot: Vec<String> = m
            .files
            .iter()
            .filter(|(_, f)| f.tier == letus_core::storage::tiered::Tier::Hot)
            .map(|(rel, f)| format!("{rel} sealed at {}", f.sealed_at))
            .collect();
        println!("hot sealed files at version {versions}: {hot:?}");
    }
    println!(
        "index files on the hot disk: {hot_idx:?}; moves failed: {} ({:?})",
        st.move_failures, st.last_error
    );

    // Differential.
    let started = Instant::now();
    for v in 1..=versions {
        assert_eq!(
            plain.digest(TID, v).unwrap(),
            tiered.digest(TID, v).unwrap(),
            "digest of {v}"
        );
    }
    let mut r = Rng::new(7);
    let mut checked = 0;
    for v in (1..=versions).step_by(25) {
        for _ in 0..20 {
            let k = key(r.hot_account(a.accounts));
            assert_eq!(
                plain.get_proof(TID, v, &k).unwrap(),
                tiered.get_proof(TID, v, &k).unwrap()
            );
            checked += 1;
        }
        assert_eq!(
            plain.history_inclusion_proof(TID, v, versions).unwrap(),
            tiered.history_inclusion_proof(TID, v, versions).unwrap()
        );
    }
    for _ in 0..50 {
        let k = key(r.hot_account(a.accounts));
        let (h1, h2) = (
            plain.history(TID, &k, None, 50).unwrap(),
            tiered.history(TID, &k, None, 50).unwrap(),
        );
        assert_eq!(format!("{h1:?}"), format!("{h2:?}"));
    }
    println!(
        "differential: digests of all {versions} versions, {checked} values with proofs at old versions, 50 key \
         histories and history proofs: identical ({:.1} s)",
        started.elapsed().as_secs_f64()
    );

    // Proofs at old versions from the cold tier: (a) steady state, nothing cleared, after as many proofs again
    // as warm-up; (b) the engine's caches cleared before each proof, the cold block cache kept; (c) both cleared.
    let c = tiers.cold_counters().unwrap();
    for mode in [
        "steady",
        "engine caches cleared",
        "engine and cold caches cleared",
    ] {
        let (mut gets, mut ms, mut reads) = (Vec::new(), Vec::new(), [0u64; 3]);
        tiered.clear_caches();
        tiers.clear_cold_cache();
        let mut r = Rng::new(99);
        let warmup = if mode == "steady" { a.proofs } else { 0 };
        for i in 0..warmup + a.proofs {
            let v = 1 + r.below(versions.saturating_sub(a.cold_after).max(1));
            let k = key(r.below(a.accounts));
            if mode != "steady" {
                tiered.clear_caches();
            }
            if mode == "engine and cold caches cleared" {
                tiers.clear_cold_cache();
            }
            logged.gets.lock().unwrap().clear();
            let (g0, m0) = (c.gets.load(Ordering::Relaxed), tiered.metrics());
            let t0 = Instant::now();
            let (_, proof) = tiered.get_proof(TID, v, &k).unwrap();
            let took = t0.elapsed().as_secs_f64() * 1e3;
            std::hint::black_box(proof);
            if i >= warmup {
                ms.push(took);
                let g = c.gets.load(Ordering::Relaxed) - g0;
                gets.push(g as f64);
                let d = tiered.metrics() - m0;
                if g >= 5 {
                    println!(
                        "  {mode}: proof {i} at version {v} made {g} GETs: {} page records, {} index blocks, \
                         {} values read by the engine, {took:.1} ms",
                        d.page_reads, d.index_block_reads, d.value_reads
                    );
                    for (key, start, end) in logged.gets.lock().unwrap().iter() {
                        println!("    GET {key} {start}..{end}");
                    }
                }
                reads[0] += d.page_reads;
                reads[1] += d.index_block_reads;
                reads[2] += d.value_reads;
            }
        }
        let n = a.proofs as f64;
        let (g50, g99, gmax) = (
            pct(&mut gets, 0.5),
            pct(&mut gets, 0.99),
            pct(&mut gets, 1.0),
        );
        let gmean = gets.iter().sum::<f64>() / n;
        let (m50, m99, mmax) = (pct(&mut ms, 0.5), pct(&mut ms, 0.99), pct(&mut ms, 1.0));
        println!(
            "{} proofs at old versions, {mode}: ranged GETs mean {gmean:.2} p50 {g50} p99 {g99} max {gmax}; latency \
             p50 {m50:.2} ms p99 {m99:.2} ms max {mmax:.2} ms; per proof {:.2} page records, {:.2} index blocks, \
             {:.2} values read by the engine",
            a.proofs,
            reads[0] as f64 / n,
            reads[1] as f64 / n,
            reads[2] as f64 / n,
        );
    }

    // Idle.
    let before = c.requests();
    std::thread::sleep(Duration::from_secs(a.idle_secs));
    println!(
        "idle {} s: {} object-store requests",
        a.idle_secs,
        c.requests() - before
    );
    drop(tiered);
    drop(plain);
}
