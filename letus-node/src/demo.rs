//! `letus demo`: starts a node on a fresh embedded store and feeds it a simulated payment chain (the LETUS
//! evaluation workload: transfers between accounts, 80% of them touching 20% of the accounts), a block every
//! second or so, over the real HTTP API; prints the URLs to open and a line per block.

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use letus_node::api::{BlockRequest, DigestsResponse, WriteOp};
use letus_verify::hex::encode as hex;
use letus_workload::Rng;

use crate::serve::{serve_until, ServeArgs};

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
    /// Stop feeding after this many blocks; the node keeps serving until Ctrl-C (default: feed until Ctrl-C).
    #[arg(long)]
    blocks: Option<u64>,
    /// With --blocks: exit once the blocks are fed instead of serving on.
    #[arg(long, requires = "blocks")]
    exit: bool,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// The key of account `i` in trie 0.
pub fn account_key(i: u32) -> Vec<u8> {
    format!("acct/{i:08}").into_bytes()
}

/// Prints a line; false once stdout is closed (`letus demo | head -1`), which ends the demo instead of a panic.
fn say(line: impl std::fmt::Display) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// The wallet page and the JS package it loads, when the demo runs from a clone of the repository (the current
/// directory, else the clone the binary was built from) and the package is built: `(examples/wallet, js)`.
pub fn wallet_dirs() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let built_from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    [std::path::PathBuf::from("."), built_from]
        .into_iter()
        .map(|root| (root.join("examples/wallet"), root.join("js")))
        .find(|(wallet, js)| {
            wallet.join("index.html").is_file() && js.join("pkg/letus_wasm.js").is_file()
        })
}

pub fn run(a: DemoArgs) -> Result<ExitCode, String> {
    if a.accounts < 2 {
        return Err("--accounts must be at least 2".into());
    }
    // The demo's own temporary store is removed however the demo ends (an error, a busy port, a closed stdout).
    let tmp = match &a.data {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("letus-demo-")
                .tempdir()
                .map_err(|e| format!("a temporary directory: {e}"))?,
        ),
    };
    let data = a
        .data
        .clone()
        .or_else(|| tmp.as_ref().map(|t| t.path().to_path_buf()))
        .ok_or("no data directory")?;
    let wallet = wallet_dirs();
    let static_dirs = match &wallet {
        Some((w, js)) => vec![
            format!("/wallet={}", w.display()),
            format!("/js={}", js.display()),
        ],
        None => Vec::new(),
    };
    let args = ServeArgs {
        config: None,
        data: Some(data.clone()),
        listen: Some(a.listen.clone()),
        token: None,
        max_body_bytes: None,
        memory_budget_bytes: None,
        max_replay_millis: None,
        header_timeout_secs: None,
        body_timeout_secs: None,
        stream_idle_timeout_secs: None,
        max_streams: None,
        max_concurrent_reads: None,
        shutdown_timeout_secs: None,
        static_dirs,
        ..ServeArgs::default()
    };
    let cfg = args.resolve()?;
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        serve_until(
            cfg,
            move |addr, tok, _| {
                let _ = tx.send((addr, tok.to_string()));
            },
            async move {
                let _ = stop_rx.await;
            },
        )
    });
    let (addr, token) = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(started) => started,
        Err(e) => {
            let why = match e {
                // The node ended before it was ready: its own error says why.
                mpsc::RecvTimeoutError::Disconnected => match server.join() {
                    Ok(Err(e)) => e,
                    _ => "the node stopped".to_string(),
                },
                mpsc::RecvTimeoutError::Timeout => "the node did not start in time".to_string(),
            };
            return Err(format!(
                "{why} (another node on that address? try --listen 127.0.0.1:0)"
            ));
        }
    };
    let fed = feed(&a, addr, &token, &data, wallet.is_some(), &server);
    // Stop the node (if Ctrl-C has not already), wait until its store is closed, then drop the temporary store.
    let _ = stop_tx.send(());
    let served = server.join().map_err(|_| "the node panicked".to_string())?;
    drop(tmp);
    fed?;
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the URLs and feeds the chain; returns when the blocks are done (and, without `--exit`, Ctrl-C stopped
/// the node), when the node stopped, or when stdout was closed.
fn feed(
    a: &DemoArgs,
    addr: std::net::SocketAddr,
    token: &str,
    data: &std::path::Path,
    wallet: bool,
    server: &std::thread::JoinHandle<Result<(), String>>,
) -> Result<(), String> {
    let base = format!("http://{addr}");
    let intro = [
        format!("letus demo: a node on {base}/ over {}", data.display()),
        format!("  digests:      {base}/v1/digest"),
        format!(
            "  a balance:    {base}/v1/tries/0/keys/{}   (acct/00000001, with its proof)",
            hex(&account_key(1))
        ),
        format!(
            "  history:      {base}/v1/tries/0/keys/{}/history",
            hex(&account_key(1))
        ),
        format!("  metrics:      {base}/metrics      API description: {base}/openapi.json"),
        if wallet {
            format!("  wallet page:  {base}/wallet/index.html")
        } else {
            "  (no wallet page: the JS package is not built; scripts/demo.sh builds it and starts this demo with it)".to_string()
        },
        format!("  write token:  {token}"),
        format!("feeding a payment chain: {} accounts, {} transfers per block, 80% of them on 20% of the accounts (Ctrl-C to stop)", a.accounts, a.transfers),
    ];
    for line in intro {
        if !say(line) {
            return Ok(());
        }
    }
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
    let r = match post(&BlockRequest {
        version: 1,
        writes: genesis,
        block: Some(hex(b"genesis")),
        access_list: vec![],
    }) {
        Ok(r) => r,
        // Ctrl-C stopped the node.
        Err(_) if server.is_finished() => return Ok(()),
        Err(e) => return Err(e),
    };
    if !say(format!(
        "block     1  genesis  root {}",
        &r.digests[0].root.to_hex()[..16]
    )) {
        return Ok(());
    }
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
        let r = match post(&BlockRequest {
            version,
            writes,
            block: Some(hex(&txs)),
            access_list,
        }) {
            Ok(r) => r,
            Err(_) if server.is_finished() => return Ok(()),
            Err(e) => return Err(e),
        };
        if !say(format!(
            "block {version:>5}  {:>4} accounts changed  root {}  history {}  ({} ms)",
            touched.len(),
            &r.digests[0].root.to_hex()[..16],
            r.digests[0].history_len,
            started.elapsed().as_millis()
        )) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(a.interval_ms).saturating_sub(started.elapsed()));
    }
    if a.blocks.is_some() && !a.exit && !server.is_finished() {
        say(format!(
            "fed {version} blocks; the node keeps serving at {base}/ until Ctrl-C (--exit to stop here)"
        ));
        while !server.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}
