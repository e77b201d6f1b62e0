//! `letus demo`: starts a node on a fresh embedded store and feeds it a simulated payment chain (the LETUS
//! evaluation workload: transfers between accounts, 80% of them touching 20% of the accounts), a block every
//! second or so, over the real HTTP API; prints the URLs to open and a line per block.

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use letus_core::workload::Rng;
use letus_node::api::{BlockRequest, DigestsResponse, WriteOp};
use letus_verify::hex::encode as hex;

use crate::serve::{serve, ServeArgs};

/// Options of `letus demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Data directory (default: a fresh temporary directory, removed at exit).
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: String,
    /// Number of accounts.
    #[arg(long, default_value_t = 10_000)]
    accounts: u32,
    /// Transfers per block.
    #[arg(long, default_value_t = 300)]
    transfers: u32,
    /// Milliseconds between blocks.
    #[arg(long, default_value_t = 1_000)]
    interval_ms: u64,
    /// Stop after this many blocks (default: run until Ctrl-C).
    #[arg(long)]
    blocks: Option<u64>,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// The key of account `i` in trie 0.
pub fn account_key(i: u32) -> Vec<u8> {
    format!("acct/{i:08}").into_bytes()
}

pub fn run(a: DemoArgs) -> Result<ExitCode, String> {
    if a.accounts < 2 {
        return Err("--accounts must be at least 2".into());
    }
    let tmp = match &a.data {
        Some(_) => None,
        None => Some(tempdir()?),
    };
    let data = a
        .data
        .clone()
        .or_else(|| tmp.clone())
        .ok_or("no data directory")?;
    // Run from the repository, the demo also serves the wallet page and the JS package it loads.
    let wallet =
        std::path::Path::new("examples/wallet").is_dir() && std::path::Path::new("js/pkg").is_dir();
    let static_dirs = if wallet {
        vec!["/wallet=examples/wallet".to_string(), "/js=js".to_string()]
    } else {
        Vec::new()
    };
    let args = ServeArgs {
        config: None,
        data: Some(data.clone()),
        listen: Some(a.listen.clone()),
        token: None,
        max_body_bytes: None,
        page_cache_bytes: None,
        static_dirs,
    };
    let cfg = args.resolve()?;
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        serve(cfg, move |addr, tok, _| {
            let _ = tx.send((addr, tok.to_string()));
        })
    });
    let (addr, token) =
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| match server.is_finished() {
                true => "the node did not start (is the address in use? try --listen 127.0.0.1:0)"
                    .to_string(),
                false => "the node did not start in time".to_string(),
            })?;
    let base = format!("http://{addr}");
    println!("letus demo: a node on {base} over {}", data.display());
    println!("  digests:      {base}/v1/digest");
    println!(
        "  a balance:    {base}/v1/tries/0/keys/{}   (acct/00000001, with its proof)",
        hex(&account_key(1))
    );
    println!(
        "  history:      {base}/v1/tries/0/keys/{}/history",
        hex(&account_key(1))
    );
    println!("  metrics:      {base}/metrics      API description: {base}/openapi.json");
    if wallet {
        println!("  wallet page:  {base}/wallet/index.html");
    } else {
        println!("  (the wallet page appears at {base}/wallet/ when run from the repository after `sh js/scripts/build.sh`)");
    }
    println!("  write token:  {token}");
    println!("feeding a payment chain: {} accounts, {} transfers per block, 80% of them on 20% of the accounts (Ctrl-C to stop)", a.accounts, a.transfers);

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut rng = Rng::new(a.seed);
    let mut balances = vec![0u64; a.accounts as usize];
    let post = |req: &BlockRequest| -> Result<DigestsResponse, String> {
        let body = serde_json::to_string(req).map_err(|e| e.to_string())?;
        let mut res = agent
            .post(format!("{base}/v1/blocks"))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .send(body.as_bytes())
            .map_err(|e| e.to_string())?;
        let text = res.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("node answered {}: {text}", res.status()));
        }
        serde_json::from_str(&text).map_err(|e| e.to_string())
    };
    // Genesis: every account starts with 1000, in one block.
    let genesis: Vec<WriteOp> = (0..a.accounts)
        .map(|i| {
            balances[i as usize] = 1000;
            WriteOp {
                tid: 0,
                key: hex(&account_key(i)),
                value: Some(hex(&1000u64.to_le_bytes())),
            }
        })
        .collect();
    let r = post(&BlockRequest {
        version: 1,
        writes: genesis,
        block: Some(hex(b"genesis")),
        access_list: vec![],
    })?;
    println!(
        "block     1  genesis  root {}",
        &r.digests[0].root.to_hex()[..16]
    );
    let mut version = 1u64;
    loop {
        if a.blocks.is_some_and(|n| version >= n) || server.is_finished() {
            break;
        }
        let started = Instant::now();
        version += 1;
        let mut touched = std::collections::BTreeMap::new();
        let mut txs = Vec::new();
        for _ in 0..a.transfers {
            let (from, to) = (
                rng.hot_account(u64::from(a.accounts)) as u32,
                rng.hot_account(u64::from(a.accounts)) as u32,
            );
            let amount = rng.below(50) + 1;
            if from == to || balances[from as usize] < amount {
                continue;
            }
            balances[from as usize] -= amount;
            balances[to as usize] += amount;
            touched.insert(from, balances[from as usize]);
            touched.insert(to, balances[to as usize]);
            txs.extend_from_slice(&from.to_le_bytes());
            txs.extend_from_slice(&to.to_le_bytes());
            txs.extend_from_slice(&amount.to_le_bytes());
        }
        let writes: Vec<WriteOp> = touched
            .iter()
            .map(|(i, b)| WriteOp {
                tid: 0,
                key: hex(&account_key(*i)),
                value: Some(hex(&b.to_le_bytes())),
            })
            .collect();
        let access_list = touched
            .keys()
            .map(|i| letus_node::api::AccessKey {
                tid: 0,
                key: hex(&account_key(*i)),
            })
            .collect();
        let r = post(&BlockRequest {
            version,
            writes,
            block: Some(hex(&txs)),
            access_list,
        })?;
        println!(
            "block {version:>5}  {:>4} accounts changed  root {}  history {}  ({} ms)",
            touched.len(),
            &r.digests[0].root.to_hex()[..16],
            r.digests[0].history_len,
            started.elapsed().as_millis()
        );
        std::thread::sleep(Duration::from_millis(a.interval_ms).saturating_sub(started.elapsed()));
    }
    if let Some(t) = tmp {
        // The demo's own temporary store goes away with it.
        let _ = std::fs::remove_dir_all(t);
    }
    Ok(ExitCode::SUCCESS)
}

fn tempdir() -> Result<std::path::PathBuf, String> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| e.to_string())?;
    let p = std::env::temp_dir().join(format!("letus-demo-{}", hex(&raw)));
    std::fs::create_dir_all(&p).map_err(|e| e.to_string())?;
    Ok(p)
}
