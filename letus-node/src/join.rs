//! Joining from a snapshot: a new node takes the verified state of trie `tid` at version `V` from running nodes,
//! chunk by chunk (SPEC.md §12 of `letus-verify`), then follows their chain.
//!
//! 1. **Trust.** `(V, root, history_root)` comes from the caller, or from the digests of at least two sources that
//!    agree; it is recorded in `DIR/join.json` before anything else, so a resumed join finishes the same version.
//! 2. **Manifest.** Fetched from a source and verified against the trusted root; saved as `DIR/manifest.bin`.
//! 3. **Chunks.** Fetched in parallel, round-robin over the sources, each verified against its manifest entry on
//!    arrival and only then written (`chunks/NNNNNN`: temporary name, fsync, rename). A chunk that fails is named
//!    (index, depth, prefix, source, error code) and fetched again from the next source. After a SIGKILL the join
//!    resumes with the chunks not yet on disk: a chunk file exists only once it verified.
//! 4. **History.** The frontier of the trie's history before `V`, checked to give the trusted history root.
//! 5. **Import.** [`import`] reads the chunks in entry order (each checked to be its manifest entry's: index,
//!    depth, prefix and pair count; a file that is not is removed, so that the next run fetches it again),
//!    bulk-loads them into `state.joining` with the history frontier, checks the new store's digest at `V`
//!    against the trusted one (a file damaged since it verified shows there, and is then found by verifying each
//!    file again, named and removed), and renames it to `state`. Reads and blocks below `V` then answer
//!    `410 before_snapshot`. The raw block of `V` is stored before that rename.
//! 6. **Follow.** [`follow`] applies each later version as a block: the key changes from `V` to `V+1`
//!    (`GET /v1/tries/{tid}/changes`) and the raw block; the node's resulting digest must equal the source's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use letus_core::{BulkPair, Options, Store};
use letus_verify::hash::history_leaf;
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::snapshot::{Chunk, Manifest, VerifiedChunk, VerifiedManifest};
use letus_verify::{Digest, Hash, HistoryTree, Limits, SnapshotError, Version};
use serde::{Deserialize, Serialize};

use crate::api::{BlockRequest, BlockResponse, ChangesResponse, DigestsResponse, FrontierResponse};
use crate::node::{Node, DEFAULT_SNAPSHOT_PAIRS};

/// Why a join or the follower stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum JoinError {
    /// The settings cannot work (no source, one source and no trusted root, a resumed join for another version).
    Config(String),
    /// No source gave a usable answer for this; each source's failure is listed.
    Sources(String),
    /// The sources disagree about the trusted state: nothing is trusted.
    Disagree(String),
    /// Every source has pruned a version this node still needs (HTTP 410 `pruned`): it cannot follow them.
    SourcesPruned(String),
    /// What a source sent did not verify (a SPEC.md error code), after every source was tried.
    Verify {
        /// What was being verified.
        what: String,
        /// The SPEC.md error code.
        code: &'static str,
    },
    /// The joined node's state differs from its sources' (a fork, or a source that lied).
    Diverged(String),
    /// A local file.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The store.
    Store(letus_core::Error),
}

impl JoinError {
    /// A stable code.
    pub fn code(&self) -> &'static str {
        match self {
            JoinError::Config(_) => "join_config",
            JoinError::Sources(_) => "sources_failed",
            JoinError::Disagree(_) => "sources_disagree",
            JoinError::SourcesPruned(_) => "sources_pruned",
            JoinError::Verify { code, .. } => code,
            JoinError::Diverged(_) => "diverged",
            JoinError::Io { .. } => "io",
            JoinError::Store(_) => "store",
        }
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::Config(m) => write!(f, "join: {m}"),
            JoinError::Sources(m) => write!(f, "join: no source answered: {m}"),
            JoinError::Disagree(m) => write!(f, "join: the sources disagree: {m}"),
            JoinError::SourcesPruned(m) => write!(f, "join: {m}"),
            JoinError::Verify { what, code } => write!(f, "join: {what} did not verify ({code})"),
            JoinError::Diverged(m) => write!(f, "join: the state diverged from the sources': {m}"),
            JoinError::Io { path, source } => write!(f, "join: {}: {source}", path.display()),
            JoinError::Store(e) => write!(f, "join: store: {e}"),
        }
    }
}

impl std::error::Error for JoinError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JoinError::Io { source, .. } => Some(source),
            JoinError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<letus_core::Error> for JoinError {
    fn from(e: letus_core::Error) -> Self {
        JoinError::Store(e)
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JoinError + '_ {
    move |source| JoinError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What to join.
#[derive(Clone, Debug)]
pub struct JoinConfig {
    /// Base URLs of the source nodes (`http://host:port`).
    pub sources: Vec<String>,
    /// The trie.
    pub tid: u32,
    /// The version to join at (default: the newest version of the first source that answers).
    pub version: Option<Version>,
    /// The trusted root at that version (default: the digests of at least two sources, which must agree).
    pub trusted_root: Option<Hash>,
    /// The trusted history root at that version (default: the agreeing digests).
    pub trusted_history_root: Option<Hash>,
    /// Chunks fetched at once.
    pub parallel: usize,
    /// Pairs per chunk asked of the source.
    pub max_pairs: u64,
    /// Tries of one chunk (each from the next source) before the join gives up.
    pub attempts: usize,
    /// Most pairs fetched per second (0: no limit): a joiner paces itself so that serving it costs its sources
    /// less of their commit throughput.
    pub max_pairs_per_sec: u64,
}

impl JoinConfig {
    /// A join of trie 0 from `sources` with the defaults.
    pub fn new(sources: Vec<String>) -> Self {
        JoinConfig {
            sources,
            tid: 0,
            version: None,
            trusted_root: None,
            trusted_history_root: None,
            parallel: 4,
            max_pairs: DEFAULT_SNAPSHOT_PAIRS,
            attempts: 6,
            max_pairs_per_sec: 0,
        }
    }
}

/// What is trusted, recorded in `join.json` before the first chunk is fetched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trusted {
    /// Trie id.
    pub tid: u32,
    /// Version.
    pub version: Version,
    /// Root (hex).
    pub root: String,
    /// History length at the version.
    pub history_len: u64,
    /// History root (hex).
    pub history_root: String,
    /// The manifest's chunk size asked of the sources.
    pub max_pairs: u64,
}

impl Trusted {
    fn root(&self) -> Hash {
        Hash::from_hex(&self.root).unwrap_or(letus_verify::EMPTY)
    }
    fn history_root(&self) -> Hash {
        Hash::from_hex(&self.history_root).unwrap_or(letus_verify::EMPTY)
    }
}

/// What [`fetch`] did.
#[derive(Clone, Debug, Default)]
pub struct FetchReport {
    /// Chunks in the manifest.
    pub chunks: usize,
    /// Pairs in the state.
    pub pairs: u64,
    /// Chunks fetched and verified by this run.
    pub fetched: usize,
    /// Chunks already on disk from an earlier run (not fetched again).
    pub reused: usize,
    /// Bytes of chunks fetched by this run.
    pub bytes: u64,
    /// Each chunk (or manifest) that failed, with its source and error code, in the order seen.
    pub failures: Vec<String>,
    /// Time taken.
    pub seconds: f64,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// Most bytes read from one answer: a chunk is at most `max_chunk_bytes`; a manifest at most its entries.
const MAX_ANSWER: u64 = 80 << 20;

fn get_bytes(agent: &ureq::Agent, url: &str) -> Result<Vec<u8>, String> {
    let mut res = agent.get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let status = res.status();
    let body = res
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_vec()
        .map_err(|e| format!("{url}: reading the answer: {e}"))?;
    if !status.is_success() {
        let code = serde_json::from_slice::<crate::api::ErrorBody>(&body)
            .map(|b| b.error.code)
            .unwrap_or_default();
        return Err(format!("{url}: {status} {code}"));
    }
    Ok(body)
}

fn get_json<T: serde::de::DeserializeOwned>(agent: &ureq::Agent, url: &str) -> Result<T, String> {
    let b = get_bytes(agent, url)?;
    serde_json::from_slice(&b).map_err(|e| format!("{url}: not the documented JSON: {e}"))
}

/// Like [`get_json`], but a 404 or a 410 (what the source never had or no longer holds) is `Ok(None)`.
fn get_json_opt<T: serde::de::DeserializeOwned>(
    agent: &ureq::Agent,
    url: &str,
) -> Result<Option<T>, String> {
    match get_json(agent, url) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.contains(" 404 ") || e.contains(" 410 ") => Ok(None),
        Err(e) => Err(e),
    }
}

fn digest_of(d: &DigestsResponse, tid: u32) -> Option<Digest> {
    d.digests.iter().find(|x| x.tid == tid).cloned()
}

/// Removes the saved manifest and the chunks verified against it: the next manifest fetched may split the state
/// into other chunks.
fn forget_manifest(dir: &Path) {
    let _ = std::fs::remove_file(dir.join("manifest.bin"));
    let _ = std::fs::remove_dir_all(dir.join("chunks"));
}

/// Writes `bytes` to `path` durably: a temporary name, fsync, rename, fsync of the directory.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), JoinError> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn sync_dir(dir: &Path) -> Result<(), JoinError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

fn chunk_path(dir: &Path, i: usize) -> PathBuf {
    dir.join("chunks").join(format!("{i:06}"))
}

/// The number of different sources among `urls`, ignoring case and trailing slashes.
fn distinct_sources<'a>(urls: impl Iterator<Item = &'a str>) -> usize {
    urls.map(|u| u.trim_end_matches('/').to_ascii_lowercase())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Establishes what is trusted (see the module documentation), or reads it back from `DIR/join.json`.
fn trust(dir: &Path, cfg: &JoinConfig, agent: &ureq::Agent) -> Result<Trusted, JoinError> {
    let file = dir.join("join.json");
    if file.exists() {
        let text = std::fs::read(&file).map_err(io(&file))?;
        let t: Trusted = serde_json::from_slice(&text)
            .map_err(|e| JoinError::Config(format!("{}: {e}", file.display())))?;
        let conflict = cfg.version.is_some_and(|v| v != t.version)
            || cfg.tid != t.tid
            || cfg.trusted_root.is_some_and(|r| r != t.root())
            || cfg
                .trusted_history_root
                .is_some_and(|h| h != t.history_root());
        if conflict {
            return Err(JoinError::Config(format!(
                "{} holds an unfinished join of trie {} at version {}; finish it, or remove the directory to join another",
                dir.display(),
                t.tid,
                t.version
            )));
        }
        return Ok(t);
    }
    if cfg.sources.is_empty() {
        return Err(JoinError::Config("no source given".into()));
    }
    let mut errors = Vec::new();
    let version = match cfg.version {
        Some(v) => v,
        None => cfg
            .sources
            .iter()
            .find_map(
                |s| match get_json::<DigestsResponse>(agent, &format!("{s}/v1/digest")) {
                    Ok(d) => Some(d.version),
                    Err(e) => {
                        errors.push(e);
                        None
                    }
                },
            )
            .ok_or_else(|| JoinError::Sources(errors.join("; ")))?,
    };
    let mut seen: Vec<(String, Digest)> = Vec::new();
    for s in &cfg.sources {
        match get_json::<DigestsResponse>(agent, &format!("{s}/v1/digest/{version}")) {
            Ok(d) => match digest_of(&d, cfg.tid) {
                Some(d) => seen.push((s.clone(), d)),
                None => errors.push(format!("{s}: no trie {} at version {version}", cfg.tid)),
            },
            Err(e) => errors.push(e),
        }
    }
    let Some((first_src, first)) = seen.first().cloned() else {
        return Err(JoinError::Sources(errors.join("; ")));
    };
    if let Some((s, d)) = seen.iter().find(|(_, d)| *d != first) {
        return Err(JoinError::Disagree(format!(
            "{first_src} says root {} history {} at version {version}, {s} says root {} history {}",
            first.root, first.history_root, d.root, d.history_root
        )));
    }
    match cfg.trusted_root {
        Some(r) if r != first.root => {
            return Err(JoinError::Disagree(format!(
                "the sources say root {} at version {version}, the trusted root is {r}",
                first.root
            )))
        }
        Some(_) => {}
        // Two spellings of one address are one source.
        None if distinct_sources(seen.iter().map(|(s, _)| s.as_str())) >= 2 => {}
        None => {
            return Err(JoinError::Config(format!(
                "only {} source(s) answered: give a trusted root (--trusted-root) or at least two sources that agree",
                distinct_sources(seen.iter().map(|(s, _)| s.as_str()))
            )))
        }
    }
    if let Some(h) = cfg.trusted_history_root {
        if h != first.history_root {
            return Err(JoinError::Disagree(format!(
                "the sources say history root {} at version {version}, the trusted one is {h}",
                first.history_root
            )));
        }
    }
    let t = Trusted {
        tid: cfg.tid,
        version,
        root: first.root.to_hex(),
        history_len: first.history_len,
        history_root: first.history_root.to_hex(),
        max_pairs: cfg.max_pairs,
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let text = serde_json::to_vec_pretty(&t).map_err(|e| JoinError::Config(e.to_string()))?;
    write_durably(&file, &text)?;
    Ok(t)
}

/// The manifest in `bytes`, decoded and verified against the trusted root (SPEC.md §12.2); the error's stable
/// code and its text otherwise.
///
/// Refused too (`count_mismatch`) when an entry counts more pairs than the `max_pairs` asked for: a source splits
/// every subtree above it (one key, the most a subtree at depth 64 holds, is always allowed), and a count above
/// one is not hashed, so nothing else bounds what a lying source could make the joiner expect of a chunk.
fn verified_manifest(
    t: &Trusted,
    bytes: &[u8],
) -> Result<VerifiedManifest, (&'static str, String)> {
    let m = Manifest::decode(bytes, &Limits::default())
        .map_err(SnapshotError::from)
        .and_then(|m| m.verify(t.tid, t.version, &t.root()))
        .map_err(|e| (e.code(), e.to_string()))?;
    let max = t.max_pairs.max(1);
    if let Some((i, item)) = m.items().iter().enumerate().find(|(_, e)| e.count > max) {
        return Err((
            "count_mismatch",
            format!(
                "manifest entry {i} counts {} pairs, above the {max} asked for per entry",
                item.count
            ),
        ));
    }
    Ok(m)
}

/// Steps 1-4: the trusted state's manifest, chunks and history frontier, verified, in `dir` (resumed if `dir`
/// holds an unfinished fetch). Returns the trust record and what was done.
pub fn fetch(dir: &Path, cfg: &JoinConfig) -> Result<(Trusted, FetchReport), JoinError> {
    let started = Instant::now();
    let mut report = FetchReport::default();
    let (t, manifest) = prepare(dir, cfg, &mut report)?;
    fetch_chunks(
        dir,
        cfg,
        &t,
        &manifest,
        &mut report,
        &AtomicBool::new(false),
        None,
    )?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok((t, report))
}

/// Steps 1, 2 and 4: the trust record, the verified manifest and the verified history frontier, in `dir`.
fn prepare(
    dir: &Path,
    cfg: &JoinConfig,
    report: &mut FetchReport,
) -> Result<(Trusted, VerifiedManifest), JoinError> {
    let agent = agent();
    let t = trust(dir, cfg, &agent)?;
    let mpath = dir.join("manifest.bin");
    let saved = std::fs::read(&mpath).ok().and_then(|b| {
        verified_manifest(&t, &b)
            .inspect_err(|(code, e)| {
                // Damaged on disk since it verified: fetched again, and the chunks with it.
                let f = format!(
                    "{} (saved earlier): {code}: {e}; fetching it again",
                    mpath.display()
                );
                tracing::warn!("{f}");
                report.failures.push(f);
                forget_manifest(dir);
            })
            .ok()
    });
    let manifest = match saved {
        Some(m) => m,
        None => {
            let mut got = None;
            let mut errors = Vec::new();
            for s in &cfg.sources {
                let url = format!(
                    "{s}/v1/tries/{}/snapshot?version={}&max_pairs={}",
                    t.tid, t.version, t.max_pairs
                );
                match get_bytes(&agent, &url) {
                    Ok(b) => match verified_manifest(&t, &b) {
                        Ok(m) => {
                            write_durably(&mpath, &b)?;
                            got = Some(m);
                            break;
                        }
                        Err((code, e)) => {
                            let f = format!("manifest from {s}: {code}: {e}");
                            tracing::warn!("{f}");
                            report.failures.push(f);
                        }
                    },
                    Err(e) => errors.push(e),
                }
            }
            got.ok_or_else(|| {
                JoinError::Sources(format!(
                    "no verified manifest: {}",
                    errors
                        .into_iter()
                        .chain(report.failures.iter().cloned())
                        .collect::<Vec<_>>()
                        .join("; ")
                ))
            })?
        }
    };
    report.chunks = manifest.items().len();
    report.pairs = manifest.pairs();
    fetch_frontier(dir, &t, cfg, &agent)?;
    Ok((t, manifest))
}

/// Step 3: every chunk not yet in `dir`, verified on arrival. Sets `failed` when it gives up or panics (an
/// importer waiting for the chunks then stops).
fn fetch_chunks(
    dir: &Path,
    cfg: &JoinConfig,
    t: &Trusted,
    manifest: &VerifiedManifest,
    report: &mut FetchReport,
    failed: &AtomicBool,
    handoff: Option<&Handoff>,
) -> Result<(), JoinError> {
    /// Sets the flag when dropped armed: on an error, and on a panic, which unwinds through here.
    struct FailOnDrop<'a>(&'a AtomicBool, bool);
    impl Drop for FailOnDrop<'_> {
        fn drop(&mut self) {
            if self.1 {
                self.0.store(true, Ordering::Release);
            }
        }
    }
    let mut guard = FailOnDrop(failed, true);
    let r = fetch_chunks_inner(dir, cfg, t, manifest, report, handoff, failed);
    guard.1 = r.is_err();
    r
}

fn fetch_chunks_inner(
    dir: &Path,
    cfg: &JoinConfig,
    t: &Trusted,
    manifest: &VerifiedManifest,
    report: &mut FetchReport,
    handoff: Option<&Handoff>,
    // Set by the importer when it fails: the chunks left are not fetched for nothing.
    halt: &AtomicBool,
) -> Result<(), JoinError> {
    let agent = agent();
    let cdir = dir.join("chunks");
    std::fs::create_dir_all(&cdir).map_err(io(&cdir))?;
    let missing: Vec<usize> = (0..report.chunks)
        .filter(|&i| !chunk_path(dir, i).exists())
        .collect();
    report.reused = report.chunks - missing.len();
    tracing::info!(
        chunks = report.chunks,
        pairs = report.pairs,
        to_fetch = missing.len(),
        "joining trie {} at version {}",
        t.tid,
        t.version
    );
    let next = AtomicUsize::new(0);
    let fetched = AtomicUsize::new(0);
    let bytes = AtomicU64::new(0);
    let failures = Mutex::new(Vec::new());
    let fatal: Mutex<Option<JoinError>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let sources = &cfg.sources;
    // The pace: each chunk takes its pairs' share of the rate; a worker waits for its slot.
    let pace = Mutex::new(Instant::now());
    let work = || {
        let agent = agent.clone();
        while !stop.load(Ordering::Relaxed) && !halt.load(Ordering::Acquire) {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let Some(&i) = missing.get(n) else { return };
            let item = manifest.items()[i];
            if cfg.max_pairs_per_sec > 0 {
                let slot = {
                    let mut next_slot = pace.lock().unwrap_or_else(|p| p.into_inner());
                    let start = (*next_slot).max(Instant::now());
                    // At most `max_pairs` (the manifest is refused otherwise), but a flag may make that large.
                    let share = Duration::try_from_secs_f64(
                        item.count as f64 / cfg.max_pairs_per_sec as f64,
                    )
                    .unwrap_or(Duration::from_secs(3600));
                    *next_slot = start.checked_add(share).unwrap_or(start);
                    start
                };
                // In steps, so that a worker waiting for its slot stops with the others.
                while !stop.load(Ordering::Relaxed) {
                    let left = slot.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    std::thread::sleep(left.min(Duration::from_millis(200)));
                }
                // Stopped while waiting: whatever stopped the others is the error to report, not this fetch's.
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
            let mut last_code = "sources_failed";
            // Attempts whose answer arrived and did not verify against this entry.
            let mut refuted = 0;
            let mut done = false;
            for attempt in 0..cfg.attempts.max(1) {
                let s = &sources[(i + attempt) % sources.len()];
                let url = format!(
                    "{s}/v1/tries/{}/snapshot/chunks/{i}?version={}&depth={}&prefix={}",
                    t.tid,
                    t.version,
                    item.depth,
                    hex(&item.prefix)
                );
                let b = match get_bytes(&agent, &url) {
                    Ok(b) => b,
                    Err(e) => {
                        let f = format!("chunk {i}: {e}");
                        tracing::warn!("{f}");
                        failures.lock().map(|mut v| v.push(f)).ok();
                        std::thread::sleep(Duration::from_millis(50 << attempt.min(5)));
                        continue;
                    }
                };
                match manifest.verify_chunk_hashed(i as u32, &b, &Limits::default()) {
                    Ok(verified) => {
                        // Handed over before the file is in place, which is when the importer looks for it.
                        if let Some(h) = handoff {
                            h.offer(i, verified, b.len());
                        }
                        if let Err(e) = write_durably(&chunk_path(dir, i), &b) {
                            *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            stop.store(true, Ordering::Relaxed);
                            return;
                        }
                        bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
                        let f = fetched.fetch_add(1, Ordering::Relaxed) + 1;
                        if f.is_multiple_of(64) {
                            tracing::info!("{f}/{} chunks fetched and verified", missing.len());
                        }
                        done = true;
                        break;
                    }
                    Err(e @ SnapshotError::CountMismatch { .. }) => {
                        // The pairs verified: the saved manifest is what is wrong (a count above one is not
                        // hashed). It goes, so that the next run fetches the manifest again, from another source,
                        // with the chunks verified against it (another manifest may split the state otherwise).
                        forget_manifest(dir);
                        *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(JoinError::Verify {
                            what: format!(
                                "the manifest's entry {i} ({e}); the manifest was removed: run the join again, with another source first"
                            ),
                            code: e.code(),
                        });
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                    Err(e) => {
                        last_code = e.code();
                        refuted += 1;
                        let f = format!(
                            "chunk {i} (depth {}, prefix {}) from {s}: {}: {e}",
                            item.depth,
                            hex(&item.prefix[..usize::from(item.depth).div_ceil(2)]),
                            e.code()
                        );
                        tracing::warn!("{f}; fetching it again from the next source");
                        failures.lock().map(|mut v| v.push(f)).ok();
                    }
                }
            }
            if !done {
                let attempts = cfg.attempts.max(1);
                // Every source's chunk failed against this entry: the entry itself may be what is wrong (a
                // manifest can verify against the root with an entry no chunk satisfies), and a saved manifest
                // would fail the same way on every restart. It goes with its chunks; the next run fetches it again.
                let suspect = refuted == attempts && attempts > 1;
                if suspect {
                    forget_manifest(dir);
                }
                *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(JoinError::Verify {
                    what: if suspect {
                        format!(
                            "chunk {i} (after {attempts} tries, each answered and none verified: the manifest's entry may be wrong; the manifest was removed, run the join again with another source first)"
                        )
                    } else {
                        format!("chunk {i} (after {attempts} tries)")
                    },
                    code: last_code,
                });
                stop.store(true, Ordering::Relaxed);
                return;
            }
        }
    };
    std::thread::scope(|sc| {
        for _ in 0..cfg.parallel.max(1) {
            sc.spawn(work);
        }
    });
    report
        .failures
        .extend(failures.into_inner().unwrap_or_default());
    report.fetched = fetched.into_inner();
    report.bytes = bytes.into_inner();
    if let Some(e) = fatal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    sync_dir(&cdir)
}

/// The history frontier before `t.version`, verified: with the trusted root appended it gives the trusted
/// history root and length. Saved as `DIR/history.json`.
fn fetch_frontier(
    dir: &Path,
    t: &Trusted,
    cfg: &JoinConfig,
    agent: &ureq::Agent,
) -> Result<(), JoinError> {
    let path = dir.join("history.json");
    if let Ok(b) = std::fs::read(&path) {
        let saved = serde_json::from_slice::<FrontierResponse>(&b)
            .map_err(|e| e.to_string())
            .and_then(|f| check_frontier(t, &f));
        match saved {
            Ok(()) => return Ok(()),
            // Damaged on disk since it verified: fetched again.
            Err(e) => {
                tracing::warn!("{} (saved earlier): {e}; fetching it again", path.display());
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let mut errors = Vec::new();
    for s in &cfg.sources {
        let url = format!("{s}/v1/digest/frontier?tid={}&version={}", t.tid, t.version);
        match get_json::<FrontierResponse>(agent, &url) {
            Ok(f) => match check_frontier(t, &f) {
                Ok(()) => {
                    let text = serde_json::to_vec_pretty(&f)
                        .map_err(|e| JoinError::Config(e.to_string()))?;
                    return write_durably(&path, &text);
                }
                Err(e) => errors.push(format!("{s}: {e}")),
            },
            Err(e) => errors.push(e),
        }
    }
    Err(JoinError::Sources(format!(
        "no verified history frontier: {}",
        errors.join("; ")
    )))
}

fn check_frontier(t: &Trusted, f: &FrontierResponse) -> Result<(), String> {
    if (f.tid, f.version) != (t.tid, t.version) {
        return Err("a frontier for another trie or version".into());
    }
    let (size, peaks) = f.to_frontier().ok_or("a peak is not 64 hex digits")?;
    let mut tree = HistoryTree::from_frontier(size, peaks).map_err(|e| e.to_string())?;
    tree.push(history_leaf(t.tid, t.version, &t.root()));
    if tree.len() != t.history_len || tree.root() != t.history_root() {
        return Err(format!(
            "the frontier gives history {} of length {}, the trusted history is {} of length {}",
            tree.root(),
            tree.len(),
            t.history_root,
            t.history_len
        ));
    }
    Ok(())
}

/// What [`import`] did.
#[derive(Clone, Debug)]
pub struct ImportReport {
    /// Pairs stored.
    pub pairs: u64,
    /// Chunks stored as the fetchers handed them over, with their verification's hashes (the others were read
    /// back from their files and hashed again).
    pub handed_over: usize,
    /// Time taken (reading and storing; with `join`, from the start of the join).
    pub seconds: f64,
    /// The pages the bulk load built and left in the store's page cache (with `Options::bulk_load_keeps_pages`,
    /// which a join sets), for the node that opens the store ([`letus_core::Store::warm`]): its first commits,
    /// catching up with the chain, then find them there.
    pub pages: letus_core::CachedPages,
}

/// Step 5: bulk-loads the verified chunks in `dir` into a new store at `data/state` (see the module
/// documentation); `dir` must hold a finished [`fetch`].
pub fn import(
    dir: &Path,
    data: &Path,
    opts: Options,
) -> Result<(Trusted, ImportReport), JoinError> {
    import_while_fetching(dir, data, opts, None, None)
}

/// Chunks the fetchers verified that the importer has not stored yet, with the key paths and value hashes their
/// verification computed: once a chunk's file is in place, the importer takes the chunk from here instead of
/// reading the file back and hashing its pairs again. A fetcher hands a chunk over just before saving it (one
/// whose save fails stays here, and the join fails). Bounded by [`HANDOFF_BYTES`] (an estimate of the decoded
/// chunks' memory); a chunk that does not fit is read from its file, as after a restart.
#[derive(Default)]
struct Handoff {
    held: Mutex<Held>,
}

/// The chunks by entry index, each with its cost, and the sum of the costs.
#[derive(Default)]
struct Held {
    chunks: std::collections::HashMap<usize, (VerifiedChunk, usize)>,
    cost: usize,
}

/// What [`Handoff`] holds at most.
const HANDOFF_BYTES: usize = 64 << 20;

impl Handoff {
    /// Memory of a decoded chunk of `bytes` encoded bytes and `pairs` pairs: its bytes, two vectors and a path
    /// and a hash per pair.
    fn cost(bytes: usize, pairs: usize) -> usize {
        bytes + pairs * (2 * std::mem::size_of::<Vec<u8>>() + 64)
    }

    fn offer(&self, i: usize, c: VerifiedChunk, bytes: usize) {
        let cost = Self::cost(bytes, c.hashes.len());
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.cost + cost <= HANDOFF_BYTES {
            held.cost += cost;
            held.chunks.insert(i, (c, cost));
        }
    }

    fn take(&self, i: usize) -> Option<VerifiedChunk> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (c, cost) = held.chunks.remove(&i)?;
        held.cost -= cost;
        Some(c)
    }
}

/// A chunk's pairs for the bulk load, with their verification's hashes when there are some.
fn bulk_pairs(
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    hashes: Option<Vec<(letus_verify::KeyPath, Hash)>>,
) -> Box<dyn Iterator<Item = BulkPair>> {
    let hashes = hashes
        .into_iter()
        .flatten()
        .map(Some)
        .chain(std::iter::repeat(None));
    Box::new(
        pairs
            .into_iter()
            .zip(hashes)
            .map(|((key, value), hashed)| BulkPair { key, value, hashed }),
    )
}

/// [`import`]; with `fetching`, the chunks are still arriving: each one is waited for (until the fetch gives
/// up, which sets the flag), so that storing overlaps fetching.
fn import_while_fetching(
    dir: &Path,
    data: &Path,
    opts: Options,
    fetching: Option<&AtomicBool>,
    handoff: Option<&Handoff>,
) -> Result<(Trusted, ImportReport), JoinError> {
    let started = Instant::now();
    let keep_pages = opts.bulk_load_keeps_pages;
    let file = dir.join("join.json");
    let t: Trusted = serde_json::from_slice(&std::fs::read(&file).map_err(io(&file))?)
        .map_err(|e| JoinError::Config(format!("{}: {e}", file.display())))?;
    let mpath = dir.join("manifest.bin");
    let manifest = verified_manifest(&t, &std::fs::read(&mpath).map_err(io(&mpath))?).map_err(
        |(code, _)| JoinError::Verify {
            what: mpath.display().to_string(),
            code,
        },
    )?;
    let hpath = dir.join("history.json");
    let f: FrontierResponse =
        serde_json::from_slice(&std::fs::read(&hpath).map_err(io(&hpath))?)
            .map_err(|e| JoinError::Config(format!("{}: {e}", hpath.display())))?;
    check_frontier(&t, &f).map_err(JoinError::Config)?;
    let frontier = f.to_frontier();
    let state = data.join("state");
    if state.exists() {
        return Err(JoinError::Config(format!(
            "{} already holds a store",
            data.display()
        )));
    }
    let tmp = data.join("state.joining");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(data).map_err(io(data))?;
    let pairs = manifest.pairs();
    let mut handed_over = 0usize;
    // A trie empty at the version has a manifest of no entries: the bulk load of no pairs is the empty trie at
    // that version with the frontier's history, as the source holds it.
    let store = {
        let items = manifest.items().len();
        let mut next_chunk = 0usize;
        let mut current: Box<dyn Iterator<Item = BulkPair>> = Box::new(std::iter::empty());
        let mut bad: Option<JoinError> = None;
        let loaded = Store::bulk_load_hashed(&tmp, opts, t.tid, t.version, frontier, || loop {
            if let Some(p) = current.next() {
                return Ok(Some(p));
            }
            if next_chunk == items {
                return Ok(None);
            }
            let path = chunk_path(dir, next_chunk);
            if let Some(failed) = fetching {
                while !path.exists() {
                    if failed.load(Ordering::Acquire) {
                        return Err(letus_core::Error::Cancelled);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            // Verified by a fetcher of this run, which handed it over before saving it: its pairs with the hashes
            // that verification computed.
            if let Some(v) = handoff.and_then(|h| h.take(next_chunk)) {
                next_chunk += 1;
                handed_over += 1;
                current = bulk_pairs(v.chunk.pairs, Some(v.hashes));
                continue;
            }
            let b = std::fs::read(&path).map_err(|e| {
                letus_core::Error::InvalidBulkLoad(format!("{}: {e}", path.display()))
            })?;
            // Each chunk verified when it arrived, and the root of everything loaded is checked against the
            // trusted one below: hashing every chunk again here would only name a damaged file earlier (which
            // the check below does when the root differs). What is checked here is that the file is the entry's.
            let item = manifest.items()[next_chunk];
            let c = Chunk::decode(&b, &Limits::default())
                .ok()
                .filter(|c| {
                    (
                        c.tid,
                        c.version,
                        c.index as usize,
                        c.depth,
                        c.prefix,
                        c.pairs.len() as u64,
                    ) == (
                        t.tid,
                        t.version,
                        next_chunk,
                        item.depth,
                        item.prefix,
                        item.count,
                    )
                })
                .ok_or_else(|| {
                    // Removed, so that the next run fetches it again instead of failing here every time.
                    let _ = std::fs::remove_file(&path);
                    bad = Some(JoinError::Verify {
                        what: format!(
                            "{} (removed: the next run fetches it again)",
                            path.display()
                        ),
                        code: "chunk_mismatch",
                    });
                    letus_core::Error::InvalidBulkLoad(format!(
                        "{} is not chunk {next_chunk}",
                        path.display()
                    ))
                })?;
            next_chunk += 1;
            current = bulk_pairs(c.pairs, None);
        });
        match loaded {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(bad.unwrap_or(JoinError::Store(e)));
            }
        }
    };
    let d = store.digest(t.tid, t.version)?;
    if d.root != t.root() || d.history_root != t.history_root() || d.history_len != t.history_len {
        drop(store);
        let _ = std::fs::remove_dir_all(&tmp);
        // A chunk file changed since it verified: name it and remove it, so that the next run fetches it again.
        for i in 0..manifest.items().len() {
            let path = chunk_path(dir, i);
            let ok = std::fs::read(&path).ok().is_some_and(|b| {
                manifest
                    .verify_chunk(i as u32, &b, &Limits::default())
                    .is_ok()
            });
            if !ok {
                let _ = std::fs::remove_file(&path);
                return Err(JoinError::Verify {
                    what: format!(
                        "{} (damaged since it was fetched; removed, run the join again)",
                        path.display()
                    ),
                    code: "root_mismatch",
                });
            }
        }
        return Err(JoinError::Diverged(format!(
            "the imported store's digest at {} is root {} history {}/{}, the trusted one root {} history {}/{}",
            t.version, d.root, d.history_len, d.history_root, t.root, t.history_len, t.history_root
        )));
    }
    let pages = match keep_pages {
        true => store.cached_pages(t.tid, t.version)?,
        false => Default::default(),
    };
    store.close()?;
    std::fs::rename(&tmp, &state).map_err(io(&state))?;
    sync_dir(data)?;
    Ok((
        t,
        ImportReport {
            pairs,
            handed_over,
            seconds: started.elapsed().as_secs_f64(),
            pages,
        },
    ))
}

/// Steps 1-5 for a node's data directory: fetches into `data/join` (resuming it), imports, stores the raw
/// block of the snapshot's version, and removes `data/join`. Nothing to do when `data/state` exists.
pub fn join(
    data: &Path,
    cfg: &JoinConfig,
    opts: Options,
) -> Result<Option<(FetchReport, ImportReport)>, JoinError> {
    let dir = data.join("join");
    if data.join("state").exists() {
        // A crash after the store was renamed into place can leave the staging directory behind.
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        return Ok(None);
    }
    // The store is built on the local disk and renamed into place outside any tiering: a tiered node's tiers see
    // its files once it opens.
    // The pages the import builds go to the node's page cache (see `ImportReport::pages`).
    let opts = Options {
        storage: letus_core::storage::local(),
        bulk_load_keeps_pages: true,
        ..opts
    };
    let started = Instant::now();
    let mut fetched = FetchReport::default();
    let (t, manifest) = prepare(&dir, cfg, &mut fetched)?;
    // The raw block of version V, stored before the state is renamed into place: after that rename a restart
    // takes the joined node as it is and would never store it.
    let agent = agent();
    if let Some(b) = cfg.sources.iter().find_map(|s| {
        get_json_opt::<BlockResponse>(&agent, &format!("{s}/v1/blocks/{}", t.version))
            .ok()
            .flatten()
    }) {
        if let Some(raw) = unhex(&b.block) {
            let mut blocks = crate::blockstore::BlockStore::open(
                &data.join("blocks"),
                crate::blockstore::BlockStoreOptions::default(),
            )
            .map_err(|e| JoinError::Config(format!("block store: {e}")))?;
            if blocks.latest_version().is_none() {
                blocks
                    .append(
                        t.version,
                        crate::node::request_hash(t.version, &[], &raw),
                        &raw,
                    )
                    .map_err(|e| JoinError::Config(format!("block store: {e}")))?;
            }
        }
    }
    // The chunks are stored as they arrive, in entry order, while the next ones are fetched.
    let failed = AtomicBool::new(false);
    let handoff = Handoff::default();
    let (f, imported) = std::thread::scope(|sc| {
        let fetcher = sc.spawn(|| {
            let r = fetch_chunks(
                &dir,
                cfg,
                &t,
                &manifest,
                &mut fetched,
                &failed,
                Some(&handoff),
            );
            fetched.seconds = started.elapsed().as_secs_f64();
            r
        });
        let imported = import_while_fetching(&dir, data, opts, Some(&failed), Some(&handoff));
        if imported.is_err() {
            failed.store(true, Ordering::Release);
        }
        (fetcher.join(), imported)
    });
    match f {
        Ok(r) => r?,
        Err(_) => return Err(JoinError::Config("the chunk fetcher panicked".into())),
    }
    let (_, imported) = imported?;
    std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    sync_dir(data)?;
    Ok(Some((fetched, imported)))
}

/// Step 6: applies the source's versions after the node's newest one, as blocks, until the node has the
/// source's newest version (and then, with `forever`, keeps polling until `stop`). Each applied version's
/// digest must equal the source's. Returns the number of versions applied.
pub fn follow(
    node: &Node,
    sources: &[String],
    tid: u32,
    stop: &AtomicBool,
    forever: bool,
) -> Result<u64, JoinError> {
    // A version's answers are small: a source silent for this long is skipped for the next one.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut applied = 0u64;
    let mut source = 0usize;
    // Failed batches in a row, and of those the last ones in a row that a source refused as pruned.
    let mut failures = (0u32, 0usize);
    while !stop.load(Ordering::Relaxed) {
        let s = &sources[source % sources.len()];
        let head = match get_json::<DigestsResponse>(&agent, &format!("{s}/v1/digest")) {
            Ok(d) => d.version,
            Err(e) => {
                tracing::warn!("following: {e}");
                source += 1;
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        let ours = node
            .digests(None)
            .map(|d| d.version)
            .map_err(|e| JoinError::Config(format!("{e:?}")))?;
        if ours >= head {
            if !forever {
                return Ok(applied);
            }
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        // The next versions are fetched ahead, by several fetchers at once, while this one is applied: a
        // version's answers take several round trips and the source's diff of its pages, and one fetcher at a
        // time set the pace of the whole catch-up.
        let batch = fetch_and_apply(node, &agent, s, tid, ours + 1..=head, stop, &mut applied);
        match batch {
            Ok(()) => failures = (0, 0),
            Err(JoinError::Sources(e)) => {
                tracing::warn!("following: {e}");
                source += 1;
                // A source that has pruned the next version will never serve it: once every source in a row
                // says so, following cannot go on and says why, instead of asking again forever.
                failures.0 += 1;
                failures.1 = if e.contains(" 410 ") {
                    failures.1 + 1
                } else {
                    0
                };
                if failures.1 >= sources.len() {
                    return Err(JoinError::SourcesPruned(format!(
                        "version {} is pruned on every source: {e}",
                        ours + 1
                    )));
                }
                // Back off (0.25 s doubling up to 8 s) so that a failing source is not asked in a tight loop.
                let wait = Duration::from_millis(250 << failures.0.min(5));
                let until = Instant::now() + wait;
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(applied)
}

/// Versions fetched ahead of the one being applied: the most held in memory, fetched and not yet applied.
const FETCH_AHEAD: u64 = 8;

/// Versions fetched at once from the source.
const FETCHERS: usize = 4;

/// Applies `versions` from source `s` in order (see [`pipeline`]).
fn fetch_and_apply(
    node: &Node,
    agent: &ureq::Agent,
    s: &str,
    tid: u32,
    versions: std::ops::RangeInclusive<Version>,
    stop: &AtomicBool,
    applied: &mut u64,
) -> Result<(), JoinError> {
    pipeline(
        versions,
        stop,
        |v| {
            let t = Instant::now();
            let f = fetch_version(agent, s, tid, v);
            tracing::debug!(version = v, ms = t.elapsed().as_secs_f64() * 1e3, "fetched");
            f
        },
        |f| {
            let t = Instant::now();
            apply_fetched(node, s, f)?;
            tracing::debug!(ms = t.elapsed().as_secs_f64() * 1e3, "applied");
            *applied += 1;
            Ok(())
        },
    )
}

/// Calls `apply` on `fetch(v)` for every `v` of `versions` in order, with [`FETCHERS`] threads fetching at most
/// [`FETCH_AHEAD`] versions ahead of the one being applied. Stops at the first fetch or apply that fails (the
/// fetchers stop too) and returns that error, every version before it applied; stops without error when `stop`
/// is set.
fn pipeline<F: Send>(
    versions: std::ops::RangeInclusive<Version>,
    stop: &AtomicBool,
    fetch: impl Fn(Version) -> Result<F, JoinError> + Sync,
    mut apply: impl FnMut(F) -> Result<(), JoinError>,
) -> Result<(), JoinError> {
    let first = *versions.start();
    let last = *versions.end();
    let next = AtomicU64::new(first);
    // The next version to apply; fetchers wait on it to stay within the window. `halt` ends the fetchers.
    let window = (Mutex::new(first), std::sync::Condvar::new());
    let halt = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<(Version, Result<F, JoinError>)>();
    std::thread::scope(|sc| {
        for _ in 0..FETCHERS {
            let tx = tx.clone();
            let (next, window, halt, fetch) = (&next, &window, &halt, &fetch);
            sc.spawn(move || loop {
                if stop.load(Ordering::Relaxed) || halt.load(Ordering::Relaxed) {
                    return;
                }
                let v = next.fetch_add(1, Ordering::Relaxed);
                if v > last {
                    return;
                }
                {
                    let mut want = window.0.lock().unwrap_or_else(|e| e.into_inner());
                    while v >= *want + FETCH_AHEAD {
                        if stop.load(Ordering::Relaxed) || halt.load(Ordering::Relaxed) {
                            return;
                        }
                        want = window
                            .1
                            .wait_timeout(want, Duration::from_millis(100))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
                let f = fetch(v);
                let failed = f.is_err();
                if tx.send((v, f)).is_err() || failed {
                    halt.store(true, Ordering::Relaxed);
                    return;
                }
            });
        }
        drop(tx);
        let r = (|| {
            // Fetched out of order, applied in order.
            let mut pending = std::collections::BTreeMap::new();
            let mut want = first;
            for (v, f) in rx.iter() {
                pending.insert(v, f);
                while let Some(f) = pending.remove(&want) {
                    apply(f?)?;
                    want += 1;
                    *window.0.lock().unwrap_or_else(|e| e.into_inner()) = want;
                    window.1.notify_all();
                }
            }
            // The fetchers stopped before `last`: one failed, and the versions before its own never came.
            match pending.into_values().find(Result::is_err) {
                Some(Err(e)) => Err(e),
                _ => Ok(()),
            }
        })();
        halt.store(true, Ordering::Relaxed);
        window.1.notify_all();
        r
    })
}

/// What a source says about one version: its digests, key changes and raw block.
struct Fetched {
    version: Version,
    digests: DigestsResponse,
    changes: ChangesResponse,
    block: Option<String>,
}

fn fetch_version(agent: &ureq::Agent, s: &str, tid: u32, v: Version) -> Result<Fetched, JoinError> {
    let src = JoinError::Sources;
    let digests: DigestsResponse = get_json(agent, &format!("{s}/v1/digest/{v}")).map_err(src)?;
    if digests.digests.iter().any(|d| d.tid != tid) {
        return Err(JoinError::Config(format!(
            "version {v} of {s} has tries other than {tid}: a joined node follows one trie"
        )));
    }
    let changes: ChangesResponse = get_json(
        agent,
        &format!("{s}/v1/tries/{tid}/changes?from={}&to={v}", v - 1),
    )
    .map_err(src)?;
    let block = get_json_opt::<BlockResponse>(agent, &format!("{s}/v1/blocks/{v}"))
        .map_err(src)?
        .map(|b| b.block);
    Ok(Fetched {
        version: v,
        digests,
        changes,
        block,
    })
}

fn apply_fetched(node: &Node, s: &str, f: Fetched) -> Result<(), JoinError> {
    let v = f.version;
    // The changed keys as the access list: their pages and values load in parallel before the writes apply.
    let access_list = f
        .changes
        .changes
        .iter()
        .map(|w| crate::api::AccessKey {
            tid: w.tid,
            key: w.key.clone(),
        })
        .collect();
    let ours = node
        .write_block(BlockRequest {
            version: v,
            writes: f.changes.changes,
            block: f.block,
            access_list,
        })
        .map_err(|e| JoinError::Config(format!("applying version {v}: {e:?}")))?;
    if ours.digests != f.digests.digests {
        return Err(JoinError::Diverged(format!(
            "at version {v} this node has {:?}, {s} has {:?}",
            ours.digests, f.digests.digests
        )));
    }
    Ok(())
}

/// The follower as a background thread for a serving node: stops when `stop` is set.
pub fn spawn_follower(
    node: Arc<Node>,
    sources: Vec<String>,
    tid: u32,
    stop: Arc<AtomicBool>,
    forever: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || match follow(&node, &sources, tid, &stop, forever) {
        Ok(n) => tracing::info!(versions = n, "caught up with the sources"),
        Err(e) => tracing::error!(code = e.code(), "following stopped: {e}"),
    })
}

#[cfg(test)]
mod pipeline_tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use super::{pipeline, JoinError, FETCH_AHEAD};

    /// A fetch that takes a pseudo-random few milliseconds, so versions arrive out of order.
    fn slow_fetch(v: u64) -> Result<u64, JoinError> {
        std::thread::sleep(Duration::from_millis((v * 7919) % 5));
        Ok(v)
    }

    #[test]
    fn versions_fetched_out_of_order_are_applied_in_order_within_the_window() {
        let applied_upto = AtomicU64::new(99);
        let most_ahead = AtomicU64::new(0);
        let mut got = Vec::new();
        let stop = AtomicBool::new(false);
        pipeline(
            100..=300,
            &stop,
            |v| {
                let behind = applied_upto.load(Ordering::SeqCst);
                most_ahead.fetch_max(v - behind, Ordering::SeqCst);
                slow_fetch(v)
            },
            |v| {
                got.push(v);
                applied_upto.store(v, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(got, (100..=300).collect::<Vec<_>>());
        // A fetch starts only while its version is within FETCH_AHEAD of the next one to apply.
        assert!(most_ahead.load(Ordering::SeqCst) <= FETCH_AHEAD);
    }

    #[test]
    fn a_failed_fetch_stops_after_every_version_before_it_is_applied() {
        let mut got = Vec::new();
        let stop = AtomicBool::new(false);
        let r = pipeline(
            1..=100,
            &stop,
            |v| {
                if v == 37 {
                    return Err(JoinError::Sources(format!("version {v}")));
                }
                slow_fetch(v)
            },
            |v| {
                got.push(v);
                Ok(())
            },
        );
        assert!(matches!(r, Err(JoinError::Sources(m)) if m == "version 37"));
        assert_eq!(got, (1..37).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_apply_stops_the_fetchers() {
        let fetched = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let r = pipeline(
            1..=1000,
            &stop,
            |v| {
                fetched.fetch_add(1, Ordering::SeqCst);
                slow_fetch(v)
            },
            |v| {
                if v == 10 {
                    return Err(JoinError::Diverged(format!("version {v}")));
                }
                Ok(())
            },
        );
        assert!(matches!(r, Err(JoinError::Diverged(_))));
        assert!(fetched.load(Ordering::SeqCst) < 10 + FETCH_AHEAD + 4);
    }
}

#[cfg(test)]
mod handoff_tests {
    use letus_verify::snapshot::{Chunk, VerifiedChunk};
    use letus_verify::KeyPath;

    use super::{Handoff, HANDOFF_BYTES};

    fn chunk(index: u32, pairs: usize) -> VerifiedChunk {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..pairs)
            .map(|i| (format!("k{index}-{i}").into_bytes(), b"v".to_vec()))
            .collect();
        let hashes = pairs
            .iter()
            .map(|(k, v)| (KeyPath::of(k), letus_verify::hash::value_hash(v)))
            .collect();
        VerifiedChunk {
            chunk: Chunk {
                tid: 0,
                version: 1,
                index,
                depth: 2,
                prefix: [0; 32],
                pairs,
            },
            hashes,
        }
    }

    #[test]
    fn the_handoff_keeps_what_fits_and_gives_each_chunk_once() {
        let h = Handoff::default();
        // Chunks of a quarter of the bound each: the fifth does not fit until one is taken.
        let bytes = HANDOFF_BYTES / 4 - Handoff::cost(0, 10);
        for i in 0..5 {
            h.offer(i, chunk(i as u32, 10), bytes);
        }
        assert!(h.take(4).is_none(), "over the bound: left to its file");
        let c = h.take(1).unwrap();
        assert_eq!(c.chunk.index, 1);
        assert_eq!(c.hashes.len(), 10);
        assert!(h.take(1).is_none(), "given once");
        h.offer(4, chunk(4, 10), bytes);
        for i in [0, 2, 3, 4] {
            assert_eq!(h.take(i).unwrap().chunk.index, i as u32);
        }
        let held = h.held.lock().unwrap();
        assert_eq!((held.chunks.len(), held.cost), (0, 0));
    }
}

#[cfg(test)]
mod manifest_tests {
    use letus_verify::snapshot::{Manifest, ManifestBuilder};
    use letus_verify::{FullVerifier, KeyPath};

    use super::{verified_manifest, Trusted};

    /// A manifest of 500 pairs split at `max` pairs an entry, and the trust record of its state.
    fn manifest(max: u64) -> (Manifest, Trusted) {
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..500)
            .map(|i| (format!("k{i}").into_bytes(), b"v".to_vec()))
            .collect();
        pairs.sort_by_key(|(k, _)| KeyPath::of(k));
        let mut full = FullVerifier::new();
        let mut b = ManifestBuilder::new(2, max);
        for (k, v) in &pairs {
            full.update(k, v).unwrap();
            b.push_pair(k, v).unwrap();
        }
        let root = full.finalize();
        let m = Manifest {
            tid: 0,
            version: 7,
            root,
            items: b.finish(),
        };
        let t = Trusted {
            tid: 0,
            version: 7,
            root: root.to_hex(),
            history_len: 7,
            history_root: root.to_hex(),
            max_pairs: max,
        };
        (m, t)
    }

    #[test]
    fn a_manifest_entry_counting_more_than_asked_is_refused() {
        let (mut m, t) = manifest(4);
        assert!(verified_manifest(&t, &m.encode()).is_ok());
        // Counts above one are not hashed: an inflated count still verifies against the root, and would make
        // the joiner pace (and expect) a chunk of that many pairs.
        let i = m.items.iter().position(|e| e.count > 1).unwrap();
        m.items[i].count = 1 << 50;
        let (code, why) = verified_manifest(&t, &m.encode()).unwrap_err();
        assert_eq!(code, "count_mismatch");
        assert!(why.contains(&format!("entry {i}")), "{why}");
        // Up to the pairs asked for is a manifest's own business.
        m.items[i].count = 4;
        assert!(verified_manifest(&t, &m.encode()).is_ok());
    }
}

#[cfg(test)]
mod follow_tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use letus_core::Options;

    use super::{follow, JoinError};
    use crate::api::{BlockRequest, WriteOp};
    use crate::node::{Node, NodeLimits};

    /// A source whose head is version 9 and that answers every other request `410 pruned`, counting them.
    fn pruned_source() -> (String, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let mut line = String::new();
                let mut r = BufReader::new(s.try_clone().unwrap());
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                // The request's head, up to its blank line (GETs have no body).
                let mut h = String::new();
                while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let (status, body) = if line.starts_with("GET /v1/digest ") {
                    ("200 OK", r#"{"version":9,"digests":[]}"#.to_string())
                } else {
                    count.fetch_add(1, Ordering::Relaxed);
                    let e = r#"{"error":{"code":"pruned","message":"pruned below 50"}}"#;
                    ("410 Gone", e.to_string())
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, asked)
    }

    /// A follower whose next version every source has pruned stops with `sources_pruned` once each source said
    /// so, instead of asking again forever.
    #[test]
    fn a_follower_stops_when_every_source_has_pruned_its_next_version() {
        let dir = tempfile::tempdir().unwrap();
        let node = Node::open(
            dir.path(),
            Options::default(),
            "t".into(),
            NodeLimits::default(),
        )
        .unwrap();
        node.write_block(BlockRequest {
            version: 1,
            writes: vec![WriteOp {
                tid: 0,
                key: "01".into(),
                value: Some("02".into()),
            }],
            block: None,
            access_list: vec![],
        })
        .unwrap();
        let (a, asked_a) = pruned_source();
        let (b, asked_b) = pruned_source();
        let stop = AtomicBool::new(false);
        let t = Instant::now();
        let e = follow(&node, &[a, b], 0, &stop, true).unwrap_err();
        assert!(matches!(e, JoinError::SourcesPruned(_)), "{e}");
        assert_eq!(e.code(), "sources_pruned");
        assert!(e.to_string().contains("version 2"), "{e}");
        // Both sources were asked, each a handful of times (one batch of at most a few fetchers), with a pause
        // between them.
        let (na, nb) = (
            asked_a.load(Ordering::Relaxed),
            asked_b.load(Ordering::Relaxed),
        );
        assert!(na >= 1 && nb >= 1, "{na} {nb}");
        assert!(na + nb <= 20, "{na} {nb}");
        assert!(t.elapsed() < Duration::from_secs(30));
    }
}

#[cfg(test)]
mod source_tests {
    use super::distinct_sources;

    #[test]
    fn one_source_spelled_twice_is_one_source() {
        let urls = ["http://a:1", "http://A:1/", "http://b:1", "http://b:1//"];
        assert_eq!(distinct_sources(urls.into_iter()), 2);
        assert_eq!(distinct_sources(urls[..2].iter().copied()), 1);
    }
}
