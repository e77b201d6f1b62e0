//! `letus demo`: a simulated payment chain (the LETUS evaluation workload: 80% of the transfers touch 20% of
//! the accounts), committed block by block into the reference DMM-Trie, with every answer checked by
//! `letus-verify` exactly as a wallet, a light client and an auditor would check it.

use std::fmt::Write as _;

use letus_verify::export::{encode_record, encode_trailer, ExportHeader, ExportReader};
use letus_verify::hash::history_leaf;
use letus_verify::proof::Record;
use letus_verify::reference::ReferenceTrie;
use letus_verify::{
    verify_multi_proof, verify_proof, Claim, Digest, DigestChecker, HistoryTree, Limits,
};

/// Options of `letus demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Number of accounts.
    #[arg(long, default_value_t = 10_000)]
    accounts: u32,
    /// Number of blocks to commit.
    #[arg(long, default_value_t = 5)]
    blocks: u64,
    /// Transfers per block.
    #[arg(long, default_value_t = 300)]
    transfers: u32,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// A small deterministic generator (xorshift64*), so that every run shows the same chain.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// An account where 80% of the picks fall on the first 20% of the accounts.
    fn account(&mut self, n: u32) -> u32 {
        let hot = (n / 5).max(1);
        let r = self.next();
        if r % 10 < 8 {
            (r >> 8) as u32 % hot
        } else {
            hot + (r >> 8) as u32 % (n - hot).max(1)
        }
    }
}

fn account_key(i: u32) -> Vec<u8> {
    format!("acct/{i:08}").into_bytes()
}

fn balance(t: &ReferenceTrie, key: &[u8]) -> u64 {
    t.get(key)
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map_or(0, u64::from_le_bytes)
}

pub fn run(args: &DemoArgs) -> Result<(), String> {
    if args.accounts < 2 {
        return Err("--accounts must be at least 2".into());
    }
    let limits = Limits::default();
    let mut rng = Rng(args.seed | 1);
    let mut state = ReferenceTrie::new();
    let mut history = HistoryTree::new();
    let mut digests = Vec::new();
    let tid = 0;

    println!(
        "letus demo: {} accounts, {} blocks of {} transfers (80% of transfers on 20% of accounts)",
        args.accounts, args.blocks, args.transfers
    );
    println!("genesis: every account starts with 1000");
    for i in 0..args.accounts {
        state.insert(&account_key(i), &1000u64.to_le_bytes());
    }
    for v in 1..=args.blocks {
        for _ in 0..args.transfers {
            let (from, to) = (rng.account(args.accounts), rng.account(args.accounts));
            let (fk, tk) = (account_key(from), account_key(to));
            let amount = rng.next() % 50 + 1;
            let fb = balance(&state, &fk);
            if from == to || fb < amount {
                continue;
            }
            state.insert(&fk, &(fb - amount).to_le_bytes());
            state.insert(&tk, &(balance(&state, &tk) + amount).to_le_bytes());
        }
        let root = state.root();
        history.push(history_leaf(tid, v, &root));
        let d = Digest {
            tid,
            version: v,
            root,
            history_len: history.len(),
            history_root: history.root(),
        };
        println!(
            "block {v:>3}  root {}  history {} entries, root {}",
            short(&root.to_hex()),
            d.history_len,
            short(&d.history_root.to_hex())
        );
        digests.push((d, state.clone()));
    }
    let Some((latest, _)) = digests.last().cloned() else {
        return Err("--blocks must be at least 1".into());
    };

    println!(
        "\n1. proof verification (what a wallet does): balance of acct/00000001 at version {}",
        latest.version
    );
    let key = account_key(1);
    let proof = state.prove(&[&key]);
    let read = verify_proof(&latest.root, &key, state.get(&key), &proof, &limits)
        .map_err(|e| e.to_string())?;
    let bal = read
        .value()
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map_or(0, u64::from_le_bytes);
    println!(
        "   verified: balance {bal}; proof {} bytes, {} levels",
        proof.encoded_len(),
        proof
            .records
            .iter()
            .filter(|r| matches!(r, Record::Branch { .. }))
            .count()
    );
    let forged = (bal + 1_000_000).to_le_bytes();
    match verify_proof(&latest.root, &key, Some(&forged), &proof, &limits) {
        Err(e) => println!(
            "   a node that inflates the balance is caught: {} ({})",
            e.code(),
            e
        ),
        Ok(_) => return Err("a forged balance verified".into()),
    }
    let missing = b"acct/unknown";
    let absent = state.prove(&[missing]);
    let r =
        verify_proof(&latest.root, missing, None, &absent, &limits).map_err(|e| e.to_string())?;
    println!(
        "   proven absent: {} ({} bytes)",
        String::from_utf8_lossy(r.key()),
        absent.encoded_len()
    );

    println!("\n2. multi-proof for a block's access list (what a light client does)");
    let batch: Vec<Vec<u8>> = (0..20)
        .map(|_| account_key(rng.account(args.accounts)))
        .collect();
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let multi = state.prove(&refs);
    let claims: Vec<Claim<'_>> = batch
        .iter()
        .map(|k| Claim {
            key: k,
            value: state.get(k),
        })
        .collect();
    let reads =
        verify_multi_proof(&latest.root, &claims, &multi, &limits).map_err(|e| e.to_string())?;
    let singles: usize = refs.iter().map(|k| state.prove(&[k]).encoded_len()).sum();
    println!(
        "   {} keys verified with one {}-byte proof ({} bytes as single proofs)",
        reads.entries().len(),
        multi.encoded_len(),
        singles
    );

    println!("\n3. digest verification (fork and rollback detection)");
    let mut checker = DigestChecker::new();
    let first = digests[0].0;
    println!(
        "   trusted checkpoint v{}: {}",
        first.version,
        checker.add_checkpoint(&first).code()
    );
    println!(
        "   node-a reports v{}: {}",
        latest.version,
        checker.observe("node-a", &latest).code()
    );
    println!(
        "   node-b reports v{}: {}",
        latest.version,
        checker.observe("node-b", &latest).code()
    );
    let mut evil = latest;
    evil.root = letus_verify::hash::value_hash(b"a different state");
    println!(
        "   node-c reports another root for v{}: {}",
        latest.version,
        checker.observe("node-c", &evil).code()
    );
    if let Some((older, _)) = digests.get(digests.len().saturating_sub(2)) {
        println!(
            "   node-a goes back to v{}: {}",
            older.version,
            checker.observe("node-a", older).code()
        );
        let proof = history
            .consistency_proof(older.history_len, latest.history_len)
            .ok_or("no consistency proof")?;
        latest
            .verify_extends(older, &proof)
            .map_err(|e| e.to_string())?;
        println!(
            "   history v{} -> v{} is consistent ({} hashes)",
            older.version,
            latest.version,
            proof.hashes.len()
        );
        let incl = history
            .inclusion_proof(0, latest.history_len)
            .ok_or("no inclusion proof")?;
        latest
            .verify_includes(first.version, &first.root, &incl)
            .map_err(|e| e.to_string())?;
        println!(
            "   (v{}, root {}) is in the history of v{}",
            first.version,
            short(&first.root.to_hex()),
            latest.version
        );
    }

    println!(
        "\n4. full verification (what an auditor does): stream the export of version {}",
        latest.version
    );
    let mut stream = ExportHeader {
        tid,
        version: latest.version,
        root: latest.root,
    }
    .encode();
    for (k, v) in state.pairs() {
        encode_record(k, v, &mut stream);
    }
    stream.extend_from_slice(&encode_trailer(state.len() as u64));
    let mut reader = ExportReader::new(limits);
    for chunk in stream.chunks(64 * 1024) {
        reader.feed(chunk).map_err(|e| e.to_string())?;
    }
    let summary = reader.finish(&latest.root).map_err(|e| e.to_string())?;
    println!(
        "   {} pairs, {} bytes: root recomputed and equal",
        summary.records, summary.bytes
    );

    let mut out = String::new();
    let _ = write!(
        out,
        "\nEvery answer above was checked by letus-verify (SPEC.md). "
    );
    let _ = write!(
        out,
        "The persistent engine and the HTTP node come with letus-core and letus-node."
    );
    println!("{out}");
    Ok(())
}

fn short(hex: &str) -> &str {
    hex.get(..16).unwrap_or(hex)
}
