//! The sharding router: the API of one node in front of shard nodes that hold the 256 subtrees between them.
//!
//! ## Commits
//! A block at version `V` is split by subtree into one block per shard (every shard gets one, empty or not, so
//! that every shard holds every version). Before any shard sees it, the split is written durably as the
//! router's **pending decision** (`DIR/pending.json`): from then on version `V` is that block and no other. Then
//! every shard commits its part; a node answers a block it already committed with the same content as a success,
//! so sending the parts again is always safe. Once all have, the router reads the shards' tops at `V`, composes
//! each trie's root, appends the roots to its roots log (FORMAT.md §3.1, fsynced) and answers.
//!
//! Crash points: before the decision is durable, no shard has `V` and the client's block was not acknowledged.
//! After it, the decision rolls forward: a retry of the same block, or the next start of the router, sends the
//! parts again and finishes `V`; a different block at `V` is a `version_conflict`. A shard that is down keeps the
//! version in doubt (writes answer `shard_unavailable`, reads go on at the last finished version) until it is
//! back. The roots log holds only finished versions, so every digest the router ever answered is in it.
//!
//! Nothing is ever rolled back: a shard sees a version only after its decision is durable, so no shard is ever
//! ahead of the decisions, and what a shard would refuse for good (a key or value above the store's limits, bad
//! hex, too many writes) is refused by the router before it decides, so a decided version can fail to finish only
//! for a reason that passes (a shard down or cut off, an I/O error), and rolls forward once it has.
//!
//! ## Reads
//! A read resolves its version against the router's (finished) versions, asks the shards holding the keys for
//! their values and proofs at exactly that version, rebuilds the proof against the composed root from the
//! version's tops ([`letus_core::shard::Tops::prove`]), and checks it before answering: a shard that answers
//! something that does not fit the root is reported as `shard_inconsistent`, never passed on.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use letus_core::roots_log::{RootEntry, RootsLog};
use letus_core::shard::{below_top, Tops};
use letus_verify::hex::encode as hex;
use letus_verify::history::HistoryTree;
use letus_verify::{Claim, Digest, Hash, KeyPath, Limits, Proof, Version};
use serde::{Deserialize, Serialize};

use super::etcd::Etcd;
use super::map::{MoveTask, ShardMap};
use super::tops_from_json;

mod moving;
mod state_sync;
use crate::api::*;
use crate::error::{hex_field, ApiError};
use crate::node::NodeLimits;
pub use moving::{MapResponse, MoveRequest};

/// What the router is started with.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// The router's data directory (its roots log and pending decision).
    pub data: PathBuf,
    /// The shards' base URLs, in map order: shard `i` of `n` holds the subtrees `PrefixSet::part(i, n)`.
    pub shards: Vec<String>,
    /// The bearer token of writes, the router's and the shards'.
    pub token: String,
    /// Request limits, as a node's.
    pub limits: NodeLimits,
    /// How long to wait at start for every shard to answer.
    pub connect_timeout: Duration,
    /// The longest a request to a shard may take (a commit of the largest block included): a shard that does not
    /// answer within it, cut off or stalled, fails the request with `shard_unavailable`.
    pub shard_timeout: Duration,
    /// Coordinate through etcd (the shard map, one leader at a time, its decisions) instead of this directory
    /// alone.
    pub etcd: Option<EtcdConfig>,
    /// A move copies (or deletes) a trie's part of a subtree in one block when it has at most this many pairs,
    /// else in 16 pieces over 16 blocks.
    pub move_step_pairs: usize,
}

/// Where a router keeps the shard map and its decisions in etcd.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// etcd's client URL.
    pub url: String,
    /// The cluster's name: its keys are under `/letus/{cluster}/`.
    pub cluster: String,
    /// The leader's lease, in seconds: a router that stops renewing it (dead, stopped, cut off) is replaced by a
    /// waiting one this long after, and can write no decision from then on.
    pub lease_secs: u64,
}

/// The leadership of a router coordinated through etcd: `/letus/{cluster}/leader` held under its lease, and the
/// revision it was created at, which every decision's write compares (a router whose lease expired can write no
/// decision, even if it does not know yet).
struct Coordinator {
    etcd: Etcd,
    prefix: String,
    lease: i64,
    leader_revision: i64,
    fenced: Arc<AtomicBool>,
}

impl Coordinator {
    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The shard map (stored by the first router of the cluster from its `--shard` flags), then the leadership,
    /// waiting while another router holds it.
    fn start(cfg: &EtcdConfig, flags: &[String]) -> Result<(Coordinator, Vec<String>), String> {
        if cfg.cluster.is_empty() || cfg.cluster.contains('/') {
            return Err(format!("cluster name `{}`: not empty, no `/`", cfg.cluster));
        }
        let etcd = Etcd::new(&cfg.url);
        let prefix = format!("/letus/{}/", cfg.cluster);
        let map_key = format!("{prefix}shards");
        let stored = match etcd.get(&map_key).map_err(|e| e.to_string())? {
            Some(kv) => serde_json::from_slice::<Vec<String>>(&kv.value)
                .map_err(|e| format!("the shard map in etcd ({map_key}): {e}"))?,
            None if flags.is_empty() => {
                return Err(format!(
                    "etcd has no shard map for cluster `{}`: name the shards with --shard",
                    cfg.cluster
                ))
            }
            None => {
                let json = serde_json::to_vec(flags).map_err(|e| e.to_string())?;
                if etcd
                    .create(&map_key, &json, None)
                    .map_err(|e| e.to_string())?
                    .is_none()
                {
                    return Err("another router stored the shard map meanwhile: start again".into());
                }
                flags.to_vec()
            }
        };
        if !flags.is_empty() && flags != stored.as_slice() {
            return Err(format!(
                "the --shard flags {flags:?} are not the cluster's shard map in etcd {stored:?}"
            ));
        }
        let ttl = cfg.lease_secs.max(1);
        let me = format!("letus route, pid {}", std::process::id());
        let mut waiting = false;
        let (lease, leader_revision) = loop {
            let lease = etcd.grant(ttl).map_err(|e| e.to_string())?;
            match etcd
                .create(&format!("{prefix}leader"), me.as_bytes(), Some(lease))
                .map_err(|e| e.to_string())?
            {
                Some(rev) => break (lease, rev),
                None => {
                    let _ = etcd.revoke(lease);
                    if !waiting {
                        tracing::info!(
                            "another router leads the cluster: waiting for its lease to end"
                        );
                        waiting = true;
                    }
                    std::thread::sleep(Duration::from_millis(ttl * 1000 / 4));
                }
            }
        };
        let fenced = Arc::new(AtomicBool::new(false));
        let (e, f) = (etcd.clone(), fenced.clone());
        // Renewed three times per lease: one failed renewal is retried, and the lease is given up (writes refused)
        // as soon as etcd says it ended or could not be reached for a whole lease.
        std::thread::spawn(move || {
            let mut last_ok = std::time::Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(ttl * 1000 / 3));
                match e.keepalive(lease) {
                    Ok(true) => last_ok = std::time::Instant::now(),
                    Ok(false) => break,
                    Err(_) if last_ok.elapsed() >= Duration::from_secs(ttl) => break,
                    Err(_) => {}
                }
            }
            tracing::error!("this router's lease in etcd ended: it writes nothing more");
            f.store(true, Ordering::SeqCst);
        });
        Ok((
            Coordinator {
                etcd,
                prefix,
                lease,
                leader_revision,
                fenced,
            },
            stored,
        ))
    }

    /// The last decision any leader wrote.
    fn decision(&self) -> Result<Option<Pending>, String> {
        self.read("decision")
    }

    /// The JSON value of key `name`, `None` if absent.
    fn read<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, String> {
        match self.etcd.get(&self.key(name)).map_err(|e| e.to_string())? {
            Some(kv) => serde_json::from_slice(&kv.value)
                .map(Some)
                .map_err(|e| format!("{} in etcd: {e}", self.key(name))),
            None => Ok(None),
        }
    }

    /// Writes the decision if this router still leads.
    fn decide(&self, d: &Pending) -> Result<(), ApiError> {
        self.write("decision", d)
    }

    /// Writes key `name` (JSON) if this router still leads.
    fn write(&self, name: &str, value: &impl Serialize) -> Result<(), ApiError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(ApiError::Fenced);
        }
        let json = serde_json::to_vec(value).map_err(|e| ApiError::Internal(e.to_string()))?;
        match self.etcd.put_if(
            &self.key("leader"),
            self.leader_revision,
            &self.key(name),
            &json,
        ) {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.fenced.store(true, Ordering::SeqCst);
                Err(ApiError::Fenced)
            }
            Err(e) => Err(ApiError::Unavailable(e.to_string())),
        }
    }
}

impl Drop for Coordinator {
    /// A router that stops cleanly hands the leadership over at once rather than after its lease.
    fn drop(&mut self) {
        if !self.fenced.load(Ordering::SeqCst) {
            let _ = self.etcd.revoke(self.lease);
        }
    }
}

struct Shard {
    url: String,
}

/// One trie's history of composed roots, from the version that created it.
struct TrieHistory {
    first: Version,
    roots: Vec<Hash>,
    history: HistoryTree,
}

impl TrieHistory {
    fn index(&self, v: Version) -> Option<usize> {
        let i = usize::try_from(v.checked_sub(self.first)?).ok()?;
        (i < self.roots.len()).then_some(i)
    }
}

/// The finished versions: `first..=latest`, every one with a root of every trie that existed then.
#[derive(Default)]
struct Finished {
    first: Option<Version>,
    latest: Option<Version>,
    tries: BTreeMap<u32, TrieHistory>,
}

impl Finished {
    fn push(&mut self, e: &RootEntry) -> Result<(), String> {
        if let Some(l) = self.latest {
            if e.version != l && Some(e.version) != l.checked_add(1) {
                return Err(format!(
                    "version {} follows {l}: versions must be consecutive",
                    e.version
                ));
            }
        }
        let t = self.tries.entry(e.tid).or_insert_with(|| TrieHistory {
            first: e.version,
            roots: Vec::new(),
            history: HistoryTree::new(),
        });
        if t.first + t.roots.len() as u64 != e.version {
            return Err(format!(
                "trie {} has no root at a version before {}, or two at it",
                e.tid, e.version
            ));
        }
        t.roots.push(e.root);
        t.history
            .push(letus_verify::hash::history_leaf(e.tid, e.version, &e.root));
        self.first.get_or_insert(e.version);
        self.latest = Some(e.version);
        Ok(())
    }

    /// The digest of `tid` at `v`; a trie that did not exist yet at `v` is `unknown_trie`, as on a node.
    fn digest(&self, tid: u32, v: Version) -> Result<Digest, ApiError> {
        self.history_digest(tid, v).map_err(|e| match e {
            ApiError::VersionNotFound(_) => ApiError::UnknownTrie(tid),
            e => e,
        })
    }

    /// [`Finished::digest`] for the history routes, which answer a version before the trie's first one as
    /// `version_not_found`, as a node's history proofs do.
    fn history_digest(&self, tid: u32, v: Version) -> Result<Digest, ApiError> {
        let t = self.tries.get(&tid).ok_or(ApiError::UnknownTrie(tid))?;
        let i = t.index(v).ok_or(ApiError::VersionNotFound(v))?;
        Ok(Digest {
            tid,
            version: v,
            root: t.roots[i],
            history_len: i as u64 + 1,
            history_root: t
                .history
                .root_at(i as u64 + 1)
                .ok_or_else(|| ApiError::Internal("history root".into()))?,
        })
    }

    fn digests(&self, v: Version) -> Result<Vec<Digest>, ApiError> {
        self.tries
            .iter()
            .filter(|(_, t)| t.index(v).is_some())
            .map(|(tid, _)| self.digest(*tid, v))
            .collect()
    }

    /// `version` if finished, the latest if `None`.
    fn resolve(&self, version: Option<Version>) -> Result<Version, ApiError> {
        let latest = self.latest.ok_or(ApiError::Empty)?;
        match version {
            None => Ok(latest),
            Some(v) if self.first.is_some_and(|f| f <= v) && v <= latest => Ok(v),
            Some(v) => Err(ApiError::VersionNotFound(v)),
        }
    }
}

/// The `root_page_version` of the entry that closes a version in the router's roots log (its `tid` is the number
/// of entries it closes): the router's own entries have 0 there.
const VERSION_END: u64 = u64::MAX;

/// The durable decision of the version being committed: each shard's part, and the shard map after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Pending {
    version: Version,
    parts: Vec<ShardBlockRequest>,
    #[serde(default)]
    map: ShardMap,
}

struct Writer {
    log: RootsLog,
    /// Entries of `log` that are durable and whole (every version closed): where a failed append is cut back to,
    /// so that a retry never leaves a version in the log twice.
    logged: usize,
    /// A version decided but not finished (a shard failed): only the same block may be written next.
    pending: Option<Pending>,
}

/// The finished versions of a router's roots log (`entries`, up to the first entry failing its checksum, and
/// `after`, the whole entries after that one), and how many of `entries` are kept. A version counts once its
/// closing entry is in; what follows the last closed version can only be the one append a crash tore (entries of
/// the next version, the one decided next, or the last one again), so anything else after it, or after a
/// damaged entry, is damage in the log, refused rather than cut: the versions after it were acknowledged. A closed version that repeats the
/// one before it entry for entry (an append retried after its fsync failed and its cut failed too) counts once.
fn finished_from_log(
    entries: &[RootEntry],
    after: &[RootEntry],
) -> Result<(usize, Finished), String> {
    let whole = entries
        .iter()
        .rposition(|e| e.page_version == VERSION_END)
        .map_or(0, |i| i + 1);
    let closed = entries[..whole].last().map(|e| e.version);
    let torn: Vec<&RootEntry> = entries[whole..].iter().chain(after).collect();
    // The torn append is of the next version, or of the last one again (a retry whose earlier append stayed).
    let first = torn.first().map(|e| e.version);
    let allowed =
        closed.is_none() || first == closed || first == closed.and_then(|c| c.checked_add(1));
    if let Some(e) = torn.iter().find(|e| !allowed || Some(e.version) != first) {
        return Err(format!(
            "the router's roots log is damaged: an entry of version {} follows the last whole version {closed:?} \
             (a torn append holds only the next version's entries); restore the file, or move it away and \
             start this router with etcd to compose the roots from the shards",
            e.version
        ));
    }
    let mut finished = Finished::default();
    let mut group: Vec<&RootEntry> = Vec::new();
    let mut last: Vec<&RootEntry> = Vec::new();
    for e in &entries[..whole] {
        if e.page_version != VERSION_END {
            group.push(e);
            continue;
        }
        if e.tid as usize != group.len() {
            return Err(format!(
                "the router's roots log: version {} closes {} entries, not {}",
                e.version,
                e.tid,
                group.len()
            ));
        }
        if !group.is_empty() && group == last {
            group.clear();
            continue;
        }
        for g in &group {
            finished
                .push(g)
                .map_err(|m| format!("the router's roots log: {m}"))?;
        }
        last = std::mem::take(&mut group);
    }
    Ok((whole, finished))
}

/// Tops of the versions read most recently, per trie.
type VersionTops = Arc<BTreeMap<u32, Tops>>;

/// Versions whose tops are kept in memory (the newest ones, which most reads ask for).
const TOPS_CACHED: usize = 64;

/// The router's state: the shard map, the finished versions, the writer.
pub struct Router {
    shards: Vec<Shard>,
    agent: ureq::Agent,
    /// The bearer token writes must carry (also sent to the shards).
    pub token: String,
    /// Request limits.
    pub limits: NodeLimits,
    dir: PathBuf,
    coord: Option<Coordinator>,
    writer: Mutex<Writer>,
    finished: RwLock<Finished>,
    /// The shard map of the last decision (its handovers are final for every version up to it).
    map: RwLock<ShardMap>,
    /// A move asked for and not yet in a decision: the next block's decision starts it. Taken after `writer`
    /// when both are.
    requested: Mutex<Option<MoveTask>>,
    /// Whether the writer holds a decided version not finished yet (for `/metrics`, which must not wait for a
    /// commit).
    in_doubt: AtomicBool,
    /// Failed calls per shard, in map order.
    failures: Vec<std::sync::atomic::AtomicU64>,
    /// Requests, latencies and commits (`GET /metrics`).
    pub metrics: crate::metrics::Metrics,
    /// See [`RouterConfig::move_step_pairs`].
    move_step_pairs: usize,
    /// Exports running (each holds a blocking thread until its client has read it), at most `max_streams`.
    pub streams: Arc<tokio::sync::Semaphore>,
    /// Permits for the reads being computed (each may hold answers of every shard), `max_concurrent_reads` in
    /// all, as on a node.
    pub reads: Arc<tokio::sync::Semaphore>,
    /// The bytes of request bodies held at once (`limits.max_buffered_body_bytes`), as on a node: public reads'.
    pub bodies: crate::body_budget::BodyBudget,
    /// The same for requests with the write token, apart, as on a node.
    pub write_bodies: crate::body_budget::BodyBudget,
    tops: Mutex<VecDeque<(Version, VersionTops)>>,
}

/// Most bytes read from one shard answer.
const MAX_ANSWER: u64 = 256 << 20;

fn shard_err(url: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::ShardUnavailable(format!("{url}: {e}"))
}

impl Router {
    /// Opens the router's directory, checks every shard's subtrees against the map, and finishes a version a
    /// crash left decided but not finished.
    pub fn open(cfg: RouterConfig) -> Result<Router, String> {
        let (coord, shard_urls) = match &cfg.etcd {
            Some(e) => {
                let (c, urls) = Coordinator::start(e, &cfg.shards)?;
                (Some(c), urls)
            }
            None => (None, cfg.shards.clone()),
        };
        let n = shard_urls.len();
        if n == 0 || n > 256 {
            return Err(format!(
                "{n} shards: a router needs 1 to 256 (one per subtree at most)"
            ));
        }
        std::fs::create_dir_all(&cfg.data)
            .map_err(|e| format!("creating {}: {e}", cfg.data.display()))?;
        let (mut log, entries, after) = RootsLog::open_all(&letus_core::storage::Local, &cfg.data)
            .map_err(|e| format!("the router's roots log: {e}"))?;
        let (whole, finished) = finished_from_log(&entries, &after)?;
        // The rest (a torn last append) is cut, and the pending decision finishes that version again.
        log.cut_to(whole)
            .map_err(|e| format!("the router's roots log: {e}"))?;
        // The last decision carries the map, finished or not: it stays in etcd, and `pending.json` is replaced by
        // the next one rather than removed.
        let pending = match &coord {
            Some(c) => c.decision()?,
            None => read_pending(&cfg.data)?,
        };
        let map = pending.as_ref().map(|p| p.map.clone()).unwrap_or_default();
        // A move asked for counts until the decision of the version it was asked before (`started`) is written.
        let requested: Option<MoveTask> = match &coord {
            Some(c) => c.read::<Option<MoveTask>>("requested")?.flatten(),
            None => {
                read_record::<Option<MoveTask>>(&cfg.data, REQUESTED, REQUESTED_MAGIC)?.flatten()
            }
        }
        .filter(|r| pending.as_ref().is_none_or(|p| p.version < r.started));
        let max_streams = cfg.limits.max_streams;
        let budget = || {
            crate::body_budget::BodyBudget::new(
                cfg.limits.max_buffered_body_bytes,
                cfg.limits.max_body_bytes,
            )
        };
        let (bodies, write_bodies) = (budget(), budget());
        let max_reads = cfg.limits.max_concurrent_reads.max(1);
        let router = Router {
            shards: shard_urls
                .iter()
                .map(|url| Shard {
                    url: url.trim_end_matches('/').to_string(),
                })
                .collect(),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(cfg.shard_timeout))
                .timeout_connect(Some(cfg.shard_timeout.min(Duration::from_secs(2))))
                .build()
                .into(),
            token: cfg.token,
            limits: cfg.limits,
            dir: cfg.data,
            coord,
            writer: Mutex::new(Writer {
                log,
                logged: whole,
                pending: None,
            }),
            requested: Mutex::new(requested),
            in_doubt: AtomicBool::new(false),
            finished: RwLock::new(finished),
            map: RwLock::new(map),
            failures: (0..n).map(|_| Default::default()).collect(),
            metrics: crate::metrics::Metrics::new(),
            move_step_pairs: cfg.move_step_pairs.max(1),
            streams: Arc::new(tokio::sync::Semaphore::new(max_streams)),
            reads: Arc::new(tokio::sync::Semaphore::new(max_reads)),
            bodies,
            write_bodies,
            tops: Mutex::new(VecDeque::new()),
        };
        let latest = router.finished().latest;
        let pending = pending.filter(|p| latest.is_none_or(|l| p.version > l));
        let newest =
            router.check_shards(cfg.connect_timeout, pending.as_ref().map(|p| p.version))?;
        // Through etcd, this router may be behind the versions other leaders finished: their roots are composed
        // again from the shards' tops, the last decision's version (which a shard may lack) finished from it.
        if router.coord.is_some() {
            let mut w = router.writer.lock().map_err(|_| "poisoned")?;
            let from = match latest {
                Some(l) => l + 1,
                None => router.first_version(newest)?,
            };
            for v in from..=newest.unwrap_or(0) {
                if pending.as_ref().is_some_and(|p| p.version == v) {
                    break;
                }
                if v == from {
                    tracing::info!(from, to = ?newest, "composing the roots other routers finished");
                }
                let tops = router
                    .fetch_tops(v)
                    .map_err(|e| format!("composing version {v}: {e:?}"))?;
                router
                    .record(&mut w, v, tops)
                    .map_err(|e| format!("composing version {v}: {e:?}"))?;
            }
        }
        let latest = router.finished().latest;
        let pending = pending.filter(|p| latest.is_none_or(|l| p.version > l));
        if let Some(p) = pending {
            tracing::info!(
                version = p.version,
                "finishing the version decided before the restart"
            );
            let mut w = router.writer.lock().map_err(|_| "poisoned")?;
            w.pending = Some(p.clone());
            router.in_doubt.store(true, Ordering::Relaxed);
            router
                .finish(&mut w, p)
                .map_err(|e| format!("finishing the pending version: {e:?}"))?;
        }
        Ok(router)
    }

    fn finished(&self) -> std::sync::RwLockReadGuard<'_, Finished> {
        self.finished
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every shard answers, holds the subtrees the map gives it, and holds every version the router finished and
    /// none past them but the `pending` one (a shard behind would have lost acknowledged versions; one further
    /// ahead was written without this router's decisions, or the router's roots log lost some).
    fn check_shards(
        &self,
        wait: Duration,
        pending: Option<Version>,
    ) -> Result<Option<Version>, String> {
        let deadline = std::time::Instant::now() + wait;
        let latest = self.finished().latest;
        let map = self.map();
        let n = self.shards.len();
        let mut newest = None;
        for (i, s) in self.shards.iter().enumerate() {
            let info = loop {
                match self.get_json::<ShardTopsResponse>(&s.url, "/v1/shard/tops") {
                    Ok(t) => break Some(t),
                    Err(ApiError::Upstream { detail, .. })
                        if detail.code == "version_not_found" =>
                    {
                        break None
                    }
                    Err(e) if std::time::Instant::now() >= deadline => {
                        return Err(format!("shard {}: {e:?}", s.url))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            let shard_latest = info.as_ref().map(|t| t.version);
            if let Some(t) = &info {
                let holds = super::PrefixSet::parse(&t.prefixes)
                    .map_err(|e| format!("shard {}: {e}", s.url))?;
                // At the last finished version, or at the next (decided) one if it hands a subtree over.
                let at = |v: Version| map.holds(i, v, n);
                let (now, next) = (at(t.version), at(t.version.saturating_add(1)));
                if Some(holds) != now && Some(holds) != next {
                    let shown = now.map_or("none".to_string(), |x| x.to_string());
                    return Err(format!(
                        "shard {} holds the subtrees {holds}; the map gives it {shown}",
                        s.url
                    ));
                }
            }
            newest = newest.max(shard_latest);
            if self.coord.is_none() && shard_latest > pending.or(latest) {
                return Err(format!(
                    "shard {} is at version {shard_latest:?}, ahead of the router's {latest:?} with no decision of \
                     this router for it",
                    s.url
                ));
            }
            if shard_latest < latest {
                return Err(format!(
                    "shard {} is at version {shard_latest:?}, behind the router's {latest:?}: it lost versions \
                     the router acknowledged",
                    s.url
                ));
            }
        }
        Ok(newest)
    }

    fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        base: &str,
        path: &str,
    ) -> Result<T, ApiError> {
        let url = format!("{base}{path}");
        read_answer(&url, self.agent.get(&url).call())
    }

    fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        base: &str,
        path: &str,
        body: &impl Serialize,
        auth: bool,
    ) -> Result<T, ApiError> {
        let url = format!("{base}{path}");
        let mut req = self.agent.post(&url);
        if auth {
            req = req.header("Authorization", &format!("Bearer {}", self.token));
        }
        read_answer(&url, req.send_json(body))
    }

    /// The shard holding subtree `prefix` at version `v`.
    fn owner(&self, prefix: u8, v: Version) -> usize {
        self.map().owner(prefix, v, self.shards.len())
    }

    fn map(&self) -> ShardMap {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Runs `f` for every shard at once and collects the answers in shard order.
    fn each_shard<T: Send>(
        &self,
        f: impl Fn(usize, &Shard) -> Result<T, ApiError> + Sync,
    ) -> Vec<Result<T, ApiError>> {
        self.on_shards(&(0..self.shards.len()).collect::<Vec<_>>(), f)
    }

    /// Runs `f` for the shards `which` at once (one alone on this thread) and collects the answers in order.
    fn on_shards<T: Send>(
        &self,
        which: &[usize],
        f: impl Fn(usize, &Shard) -> Result<T, ApiError> + Sync,
    ) -> Vec<Result<T, ApiError>> {
        self.in_parallel(which, |i| *i, |i| f(*i, &self.shards[*i]))
    }

    /// Runs `f` for every ask at once (one alone on this thread) and collects the answers in order, counting the
    /// failures of the shard `shard(ask)` each one calls.
    pub(super) fn in_parallel<A: Sync, T: Send>(
        &self,
        asks: &[A],
        shard: impl Fn(&A) -> usize,
        f: impl Fn(&A) -> Result<T, ApiError> + Sync,
    ) -> Vec<Result<T, ApiError>> {
        let answers = match asks {
            [a] => vec![f(a)],
            _ => std::thread::scope(|scope| {
                let handles: Vec<_> = asks
                    .iter()
                    .map(|a| {
                        let f = &f;
                        scope.spawn(move || f(a))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(ApiError::Internal("a shard call panicked".into()))
                        })
                    })
                    .collect()
            }),
        };
        asks.iter()
            .zip(answers)
            .map(|(a, r)| {
                if matches!(
                    r,
                    Err(ApiError::ShardUnavailable(_) | ApiError::ShardInconsistent(_))
                ) {
                    self.failures[shard(a)].fetch_add(1, Ordering::Relaxed);
                }
                r
            })
            .collect()
    }

    /// What `GET /metrics` reports beside requests and commits.
    pub fn status(&self) -> crate::metrics::RouterStatus {
        let in_doubt = self.in_doubt.load(Ordering::Relaxed);
        let map = self.map();
        crate::metrics::RouterStatus {
            version: self.finished().latest,
            in_doubt,
            fenced: self.is_fenced(),
            handovers: map.moved.values().map(|h| h.len() as u64).sum(),
            move_phase: map.task.map_or(0, |t| match t.phase {
                super::map::Phase::Clear => 1,
                super::map::Phase::Copy => 2,
                super::map::Phase::Drop => 3,
            }),
            shard_failures: self
                .shards
                .iter()
                .zip(&self.failures)
                .map(|(s, n)| (s.url.clone(), n.load(Ordering::Relaxed)))
                .collect(),
        }
    }

    // ---- writes ----

    /// Commits a block on every shard (see the module documentation).
    pub fn write_block(&self, req: BlockRequest) -> Result<DigestsResponse, ApiError> {
        if req.writes.len() > self.limits.max_block_writes
            || req.access_list.len() > self.limits.max_block_writes
        {
            return Err(ApiError::TooLarge(format!(
                "{} writes and {} access-list keys; at most {} each per block",
                req.writes.len(),
                req.access_list.len(),
                self.limits.max_block_writes
            )));
        }
        if req.version == 0 {
            return Err(ApiError::BadRequest("versions start at 1".into()));
        }
        let mut w = self.writer_unfenced()?;
        let latest = self.finished().latest;
        let mut map = self.map();
        let parts = self.split(&req, &map)?;
        if let Some(p) = &w.pending {
            if p.version != req.version {
                return Err(ApiError::NotNext {
                    got: req.version,
                    expected: p.version,
                });
            }
            // The decided parts carry the move that rode along; the client's block is what must match.
            if !Self::same_block(&p.parts, &parts)? {
                return Err(ApiError::Conflict(req.version));
            }
            let d = p.clone();
            return self.finish(&mut w, d);
        } else if latest.is_some_and(|l| req.version <= l) {
            // A retry of a finished version: each shard compares its part with what it committed.
            self.send_parts(&Pending {
                version: req.version,
                parts,
                map,
            })?;
            let f = self.finished();
            return Ok(DigestsResponse {
                version: req.version,
                digests: f.digests(req.version)?,
                tops: None,
            });
        } else if let Some(l) = latest {
            if l.checked_add(1) != Some(req.version) {
                return Err(ApiError::NotNext {
                    got: req.version,
                    expected: l + 1,
                });
            }
        }
        // A new version: the move under way (or the one asked for) takes its step in it.
        let mut parts = parts;
        let mut started = false;
        if latest.is_some() {
            if map.task.is_none() {
                map.task = self.requested_move()?;
                started = map.task.is_some();
            }
            self.take_move_step(req.version, &req, &mut map, &mut parts);
        }
        let decision = Pending {
            version: req.version,
            parts,
            map,
        };
        match &self.coord {
            Some(c) => c.decide(&decision)?,
            None => write_pending(&self.dir, &decision)
                .map_err(|e| ApiError::Unavailable(format!("writing the decision: {e}")))?,
        }
        if started {
            // Best effort: a request left behind is ignored at the next start, its version being decided.
            let _ = self.save_request(None);
            *self
                .requested
                .lock()
                .map_err(|_| ApiError::Internal("poisoned".into()))? = None;
        }
        *self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = decision.map.clone();
        w.pending = Some(decision.clone());
        self.in_doubt.store(true, Ordering::Relaxed);
        self.finish(&mut w, decision)
    }

    /// Saves the move asked for (or that there is none) where decisions go: etcd, or `DIR/move.json`.
    pub(super) fn save_request(&self, r: Option<&MoveTask>) -> Result<(), ApiError> {
        match &self.coord {
            Some(c) => c.write("requested", &r),
            None => write_record(&self.dir, REQUESTED, REQUESTED_MAGIC, &r)
                .map_err(|e| ApiError::Unavailable(format!("saving the move asked for: {e}"))),
        }
    }

    /// The writer, while this router leads (`fenced` once its lease ended).
    fn writer_unfenced(&self) -> Result<std::sync::MutexGuard<'_, Writer>, ApiError> {
        let w = self
            .writer
            .lock()
            .map_err(|_| ApiError::Internal("poisoned".into()))?;
        if self.is_fenced() {
            return Err(ApiError::Fenced);
        }
        Ok(w)
    }

    /// The block's part for each shard: its writes and access-list keys in the subtrees the shard holds at the
    /// block's version by `map`, in block order; the raw block goes to shard 0 (which serves
    /// `GET /v1/blocks/{v}`).
    fn split(
        &self,
        req: &BlockRequest,
        map: &ShardMap,
    ) -> Result<Vec<ShardBlockRequest>, ApiError> {
        let n = self.shards.len();
        let owner = |key: &[u8]| map.owner(KeyPath::of(key).0[0], req.version, n);
        let mut parts: Vec<ShardBlockRequest> = (0..n)
            .map(|i| ShardBlockRequest {
                block: BlockRequest {
                    version: req.version,
                    writes: Vec::new(),
                    block: if i == 0 { req.block.clone() } else { None },
                    access_list: Vec::new(),
                },
                moving: Vec::new(),
                holds: None,
            })
            .collect();
        // What a shard would refuse for good is refused here, before anything is decided: a decided version
        // must be one every shard can commit, so that it only ever rolls forward.
        let limits = letus_core::Options::default();
        for (i, w) in req.writes.iter().enumerate() {
            let key = hex_field(&w.key, &format!("writes[{i}].key"))?;
            let value_len = match &w.value {
                Some(v) => hex_field(v, &format!("writes[{i}].value"))?.len(),
                None => 0,
            };
            if key.len() > limits.max_key_bytes || value_len > limits.max_value_bytes {
                return Err(ApiError::TooLarge(format!(
                    "writes[{i}]: a key of {} bytes or a value of {value_len} (at most {} and {})",
                    key.len(),
                    limits.max_key_bytes,
                    limits.max_value_bytes
                )));
            }
            parts[owner(&key)].block.writes.push(w.clone());
        }
        for (i, a) in req.access_list.iter().enumerate() {
            let key = hex_field(&a.key, &format!("access_list[{i}].key"))?;
            parts[owner(&key)].block.access_list.push(a.clone());
        }
        if let Some(b) = &req.block {
            let len = hex_field(b, "block")?.len();
            if len > crate::blockstore::MAX_BLOCK_BYTES {
                return Err(ApiError::TooLarge(format!(
                    "a block of {len} bytes; at most {}",
                    crate::blockstore::MAX_BLOCK_BYTES
                )));
            }
        }
        // A part is a request body of its own, and can be larger than the client's (a delete sent without its
        // `value` is sent with `"value":null`): shards take bodies as large as the router's (API.md), so a part
        // above that would be refused by its shard for good.
        for (i, part) in parts.iter().enumerate() {
            let bytes = serde_json::to_vec(part).map_or(usize::MAX, |b| b.len());
            if bytes > self.limits.max_body_bytes {
                return Err(ApiError::TooLarge(format!(
                    "the part of this block for shard {i} is {bytes} bytes as a request; at most {}",
                    self.limits.max_body_bytes
                )));
            }
        }
        Ok(parts)
    }

    /// Whether two splits of a block are the same block for each shard: the same writes (decoded: hex in either
    /// case is one key) and raw block; access lists are hints and do not count, as for a node.
    fn same_block(a: &[ShardBlockRequest], b: &[ShardBlockRequest]) -> Result<bool, ApiError> {
        let fingerprint = |p: &ShardBlockRequest| -> Result<[u8; 32], ApiError> {
            let writes = p
                .block
                .writes
                .iter()
                .enumerate()
                .map(|(i, w)| crate::node::decode_write(w, "writes", i))
                .collect::<Result<Vec<_>, _>>()?;
            let block = p
                .block
                .block
                .as_deref()
                .map(|b| hex_field(b, "block"))
                .transpose()?
                .unwrap_or_default();
            Ok(crate::node::request_hash(p.block.version, &writes, &block))
        };
        if a.len() != b.len() {
            return Ok(false);
        }
        for (x, y) in a.iter().zip(b) {
            if fingerprint(x)? != fingerprint(y)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sends every shard its part; their tops at the version come back with the answers.
    fn send_parts(&self, d: &Pending) -> Result<VersionTops, ApiError> {
        let answers = self.each_shard(|i, s| {
            let a: DigestsResponse =
                self.post_json(&s.url, "/v1/shard/blocks", &d.parts[i], true)?;
            let tops = a.tops.ok_or_else(|| {
                ApiError::ShardInconsistent(format!("{} answered a block without its tops", s.url))
            })?;
            Ok((a.version, tops))
        });
        self.merge_tops(d.version, answers)
    }

    /// Sends a decided version's parts to every shard, composes its roots, appends them durably, publishes.
    fn finish(&self, w: &mut Writer, d: Pending) -> Result<DigestsResponse, ApiError> {
        let tops = self.send_parts(&d)?;
        let v = d.version;
        self.record(w, v, tops)?;
        w.pending = None;
        self.in_doubt.store(false, Ordering::Relaxed);
        let f = self.finished();
        Ok(DigestsResponse {
            version: v,
            digests: f.digests(v)?,
            tops: None,
        })
    }

    /// Composes the roots of version `v` (every shard holds it) from its tops, appends them durably, publishes.
    fn record(&self, w: &mut Writer, v: Version, tops: VersionTops) -> Result<(), ApiError> {
        let mut entries = Vec::new();
        {
            let f = self.finished();
            let tids: std::collections::BTreeSet<u32> =
                f.tries.keys().chain(tops.keys()).copied().collect();
            for tid in tids {
                let root = tops.get(&tid).map_or(letus_verify::EMPTY, Tops::root);
                entries.push(RootEntry {
                    version: v,
                    tid,
                    root,
                    page_version: 0,
                });
            }
        }
        for e in &entries {
            w.log.push(e);
        }
        w.log.push(&RootEntry {
            version: v,
            tid: entries.len() as u32,
            root: letus_verify::EMPTY,
            page_version: VERSION_END,
        });
        if let Err(e) = w.log.sync() {
            // What reached the file (all of it, if only the fsync failed) is cut off: the retry appends it again.
            let cut = w.log.cut_to(w.logged);
            return Err(ApiError::Unavailable(format!(
                "the roots log: {e}{}",
                cut.err()
                    .map(|c| format!(" (and cutting it back: {c})"))
                    .unwrap_or_default()
            )));
        }
        w.logged += entries.len() + 1;
        {
            let mut f = self
                .finished
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for e in &entries {
                f.push(e).map_err(ApiError::Internal)?;
            }
        }
        self.remember_tops(v, tops);
        Ok(())
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Whether this router lost its lease in etcd (it then writes nothing; reads of the versions it finished go
    /// on).
    pub fn is_fenced(&self) -> bool {
        self.coord
            .as_ref()
            .is_some_and(|c| c.fenced.load(Ordering::SeqCst))
    }

    // ---- reads ----

    /// Every trie's tops at `v`, merged over the shards (cached for the newest versions).
    fn tops_at(&self, v: Version) -> Result<VersionTops, ApiError> {
        if let Some((_, t)) = self
            .tops
            .lock()
            .map_err(|_| ApiError::Internal("poisoned".into()))?
            .iter()
            .find(|(x, _)| *x == v)
        {
            return Ok(t.clone());
        }
        let t = self.fetch_tops(v)?;
        self.remember_tops(v, t.clone());
        Ok(t)
    }

    fn remember_tops(&self, v: Version, t: VersionTops) {
        if let Ok(mut c) = self.tops.lock() {
            c.retain(|(x, _)| *x != v);
            c.push_back((v, t));
            while c.len() > TOPS_CACHED {
                c.pop_front();
            }
        }
    }

    /// The first version of the chain the shards hold (up to `newest`), for a router whose roots log is empty: a
    /// chain need not start at version 1. Found by bisection on shard 0's tops (below the first version a shard
    /// answers `version_not_found`). A version the shards no longer hold (pruned, or before a snapshot they
    /// joined from) cannot be composed again, so this router cannot serve the history: an error.
    fn first_version(&self, newest: Option<Version>) -> Result<Version, String> {
        let Some(newest) = newest else {
            return Ok(1);
        };
        let s = &self.shards[0];
        let held = |v: Version| -> Result<bool, String> {
            match self.get_json::<ShardTopsResponse>(&s.url, &format!("/v1/shard/tops?version={v}")) {
                Ok(_) => Ok(true),
                Err(ApiError::Upstream { detail, .. }) if detail.code == "version_not_found" => {
                    Ok(false)
                }
                Err(ApiError::Upstream { detail, .. })
                    if detail.code == "pruned" || detail.code == "before_snapshot" =>
                {
                    Err(format!(
                        "{} no longer holds version {v} ({}): a router without the roots log of the versions \
                         before it cannot compose the history; start it with a copy of another router's data \
                         directory",
                        s.url, detail.code
                    ))
                }
                Err(e) => Err(format!("finding the chain's first version on {}: {e:?}", s.url)),
            }
        };
        let (mut lo, mut hi) = (1, newest);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if held(mid)? {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        // `lo` is held unless the shard answered otherwise for it: asked again, its answer decides.
        held(lo)?;
        Ok(lo)
    }

    fn fetch_tops(&self, v: Version) -> Result<VersionTops, ApiError> {
        let answers = self.each_shard(|_, s| {
            self.get_json::<ShardTopsResponse>(&s.url, &format!("/v1/shard/tops?version={v}"))
                .map(|a| (a.version, a.tries))
        });
        self.merge_tops(v, answers)
    }

    /// The tops of version `v` from every shard's answer `(its version, its tops)`, in shard order, checked and
    /// merged per trie.
    fn merge_tops(
        &self,
        v: Version,
        answers: Vec<Result<(Version, Vec<TrieTops>), ApiError>>,
    ) -> Result<VersionTops, ApiError> {
        let mut per_trie: BTreeMap<u32, Vec<Tops>> = BTreeMap::new();
        let map = self.map();
        let n = self.shards.len();
        for (i, (s, a)) in self.shards.iter().zip(answers).enumerate() {
            let (version, tries) = a?;
            if version != v {
                return Err(ApiError::ShardInconsistent(format!(
                    "{} answered the tops of version {version} for {v}",
                    s.url
                )));
            }
            for t in tries {
                // A shard may also hold a subtree it is being given or whose old copy it is dropping: only the
                // subtrees it holds at `v` count.
                let tops = tops_from_json(&t.tops)
                    .map_err(|e| ApiError::ShardInconsistent(format!("{}: {e}", s.url)))?
                    .filter(|p| map.owner(p, v, n) == i);
                per_trie.entry(t.tid).or_default().push(tops);
            }
        }
        let mut out = BTreeMap::new();
        for (tid, parts) in per_trie {
            let t = Tops::merge(parts).map_err(|e| ApiError::ShardInconsistent(e.to_string()))?;
            out.insert(tid, t);
        }
        Ok(Arc::new(out))
    }

    /// Digests of every trie at `version` (default latest).
    pub fn digests(&self, version: Option<Version>) -> Result<DigestsResponse, ApiError> {
        let f = self.finished();
        let v = f.resolve(version)?;
        Ok(DigestsResponse {
            version: v,
            digests: f.digests(v)?,
            tops: None,
        })
    }

    /// The values of `keys` (unique) in trie `tid` at `v` and one proof for all of them against the composed
    /// root, checked against it.
    fn prove(&self, tid: u32, v: Version, keys: &[Vec<u8>]) -> Result<Proved, ApiError> {
        let digest = self.finished().digest(tid, v)?;
        let all = self.tops_at(v)?;
        let empty = Tops::default();
        let tops = all.get(&tid).unwrap_or(&empty);
        // Keys by subtree, subtrees by shard: each shard is asked once per subtree, all shards at once.
        let mut by_prefix: BTreeMap<u8, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            by_prefix.entry(KeyPath::of(k).0[0]).or_default().push(i);
        }
        let map = self.map();
        let n = self.shards.len();
        let owner = |p: u8| map.owner(p, v, n);
        let mut which: Vec<usize> = by_prefix.keys().map(|p| owner(*p)).collect();
        which.sort_unstable();
        which.dedup();
        let answers = self.on_shards(&which, |si, s| {
            let mut out = Vec::new();
            for (prefix, idx) in by_prefix.iter().filter(|(p, _)| owner(**p) == si) {
                let req = MultiProofRequest {
                    keys: idx.iter().map(|i| hex(&keys[*i])).collect(),
                    version: Some(v),
                };
                let path = format!("/v1/tries/{tid}/proofs");
                let answer = match self.post_json::<MultiProofResponse>(&s.url, &path, &req, false)
                {
                    Ok(a) => Some(a),
                    // The trie exists, but none of its keys ever were in this shard's subtrees.
                    Err(ApiError::Upstream { detail, .. }) if detail.code == "unknown_trie" => None,
                    Err(e) => return Err(e),
                };
                out.push((*prefix, answer));
            }
            Ok(out)
        });
        let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        let mut below: BTreeMap<u8, Proof> = BTreeMap::new();
        for a in answers {
            for (prefix, answer) in a? {
                let Some(answer) = answer else { continue };
                let idx = &by_prefix[&prefix];
                if answer.values.len() != idx.len() || answer.version != v {
                    return Err(ApiError::ShardInconsistent(format!(
                        "the answer for subtree {prefix:02x} does not match its request"
                    )));
                }
                for (i, value) in idx.iter().zip(answer.values) {
                    values[*i] = value
                        .map(|x| hex_field(&x, "a shard's value"))
                        .transpose()
                        .map_err(|_| ApiError::ShardInconsistent("a value is not hex".into()))?;
                }
                let bytes = hex_field(&answer.proof_hex, "proof_hex")
                    .map_err(|_| ApiError::ShardInconsistent("a proof is not hex".into()))?;
                let proof = Proof::decode(&bytes, &Limits::default())
                    .map_err(|e| ApiError::ShardInconsistent(format!("a shard's proof: {e}")))?;
                below.insert(prefix, proof);
            }
        }
        let mut paths: Vec<KeyPath> = keys.iter().map(|k| KeyPath::of(k)).collect();
        paths.sort();
        let proof = tops.prove(&paths, |prefix, _| {
            let p = below.remove(&prefix).ok_or_else(|| {
                ApiError::ShardInconsistent(format!(
                    "subtree {prefix:02x} is a branch, but its shard has no such trie"
                ))
            })?;
            below_top(p).map_err(|e| ApiError::ShardInconsistent(e.to_string()))
        })?;
        let claims: Vec<Claim<'_>> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| Claim {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        let _checked =
            letus_verify::verify_multi_proof(&digest.root, &claims, &proof, &Limits::default())
                .map_err(|e| {
                    ApiError::ShardInconsistent(format!(
                        "the composed proof does not verify against the root of version {v}: {e}"
                    ))
                })?;
        Ok(Proved {
            values,
            proof,
            digest,
        })
    }

    /// A value and its proof.
    pub fn value(
        &self,
        tid: u32,
        key_hex: &str,
        version: Option<Version>,
    ) -> Result<ValueResponse, ApiError> {
        let key = hex_field(key_hex, "key")?;
        let v = self.finished().resolve(version)?;
        let Proved {
            mut values,
            proof,
            digest,
        } = self.prove(tid, v, std::slice::from_ref(&key))?;
        Ok(ValueResponse::new(
            tid,
            v,
            &key,
            values.pop().flatten().as_deref(),
            &proof,
            digest,
        ))
    }

    /// A batch multi-proof.
    pub fn multi_proof(
        &self,
        tid: u32,
        req: MultiProofRequest,
    ) -> Result<MultiProofResponse, ApiError> {
        let keys = crate::node::proof_keys(&req, &self.limits)?;
        let v = self.finished().resolve(req.version)?;
        let Proved {
            values,
            proof,
            digest,
        } = self.prove(tid, v, &keys)?;
        Ok(MultiProofResponse::new(
            tid, v, &keys, &values, &proof, digest,
        ))
    }

    /// A key's history from the shard holding it; with proofs, each rebuilt against the composed root of its
    /// version.
    pub fn history(&self, tid: u32, req: HistoryRequest) -> Result<HistoryResponse, ApiError> {
        let key = hex_field(&req.key, "key")?;
        let latest = self.finished().latest.ok_or(ApiError::Empty)?;
        let prefix = KeyPath::of(&key).0[0];
        let mut answer = if self.map().moved.contains_key(&prefix) {
            self.finished().digest(tid, latest)?;
            self.history_across_moves(tid, &key, &req, latest)?
        } else {
            let s = &self.shards[self.owner(prefix, latest)];
            let ask = HistoryRequest {
                proofs: false,
                ..req.clone()
            };
            let mut a: HistoryResponse =
                self.post_json(&s.url, &format!("/v1/tries/{tid}/history"), &ask, false)?;
            // Entries the shard committed after the router's last finished version are not answered yet.
            a.entries.retain(|e| e.version <= latest);
            a
        };
        if req.proofs {
            for e in &mut answer.entries {
                let Proved {
                    mut values,
                    proof,
                    digest,
                } = self.prove(tid, e.version, std::slice::from_ref(&key))?;
                if values.pop().flatten().as_deref().map(hex) != e.value {
                    return Err(ApiError::ShardInconsistent(format!(
                        "the history's value at version {} is not the value there",
                        e.version
                    )));
                }
                e.proof_hex = Some(hex(&proof.encode()));
                e.digest = Some(digest);
            }
        }
        Ok(answer)
    }

    /// A raw block, from shard 0, which stores them.
    pub fn block(&self, version: Version) -> Result<BlockResponse, ApiError> {
        if self.finished().latest.is_none_or(|l| version > l) {
            return Err(ApiError::BlockNotFound(version));
        }
        self.get_json(&self.shards[0].url, &format!("/v1/blocks/{version}"))
    }

    /// History consistency proof between two finished versions of a trie.
    pub fn consistency(
        &self,
        tid: u32,
        from: Version,
        to: Option<Version>,
    ) -> Result<ConsistencyResponse, ApiError> {
        let f = self.finished();
        let to = f.resolve(to)?;
        if from > to {
            return Err(ApiError::BadRequest("`from` must not be above `to`".into()));
        }
        let (a, b) = (f.history_digest(tid, from)?, f.history_digest(tid, to)?);
        let t = &f.tries[&tid];
        let proof = t
            .history
            .consistency_proof(a.history_len, b.history_len)
            .ok_or(ApiError::VersionNotFound(from))?;
        ConsistencyResponse::new(tid, a, b, proof).map_err(ApiError::Internal)
    }

    /// History inclusion proof: (version, root) is in the history at `at`.
    pub fn inclusion(
        &self,
        tid: u32,
        version: Version,
        at: Option<Version>,
    ) -> Result<InclusionResponse, ApiError> {
        let f = self.finished();
        let at = f.resolve(at)?;
        if version > at {
            return Err(ApiError::BadRequest(
                "`version` must not be above `at`".into(),
            ));
        }
        let (d, a) = (f.history_digest(tid, version)?, f.history_digest(tid, at)?);
        let proof = f.tries[&tid]
            .history
            .inclusion_proof(d.history_len - 1, a.history_len)
            .ok_or(ApiError::VersionNotFound(version))?;
        InclusionResponse::new(tid, version, d.root, a, proof).map_err(ApiError::Internal)
    }

    /// The frontier of trie `tid`'s history just before `version` (default latest).
    pub fn frontier(
        &self,
        tid: u32,
        version: Option<Version>,
    ) -> Result<FrontierResponse, ApiError> {
        let f = self.finished();
        let v = f.resolve(version)?;
        let d = f.history_digest(tid, v)?;
        let frontier = f.tries[&tid]
            .history
            .frontier_at(d.history_len - 1)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(FrontierResponse::new(tid, v, frontier))
    }
}

/// Values of keys at a version, with their proof against the composed root and that root's digest.
struct Proved {
    values: Vec<Option<Vec<u8>>>,
    proof: Proof,
    digest: Digest,
}

/// Reads a shard's answer: its JSON on success, its error passed on as it is, anything else
/// `shard_unavailable`.
fn read_answer<T: serde::de::DeserializeOwned>(
    url: &str,
    res: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<T, ApiError> {
    let body = read_body(url, res)?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::ShardInconsistent(format!("{url}: not the documented JSON: {e}")))
}

/// Reads a shard's answer: its body on success, its error passed on as it is, anything else
/// `shard_unavailable`.
fn read_body(
    url: &str,
    res: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<Vec<u8>, ApiError> {
    let mut res = res.map_err(|e| shard_err(url, e))?;
    let status = res.status();
    let body = res
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_vec()
        .map_err(|e| shard_err(url, format!("reading the answer: {e}")))?;
    if !status.is_success() {
        return Err(match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(b) => ApiError::Upstream {
                status: axum::http::StatusCode::from_u16(status.as_u16())
                    .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
                detail: b.error,
            },
            Err(_) => shard_err(url, format!("answered {status}")),
        });
    }
    Ok(body)
}

const PENDING: &str = "pending.json";

/// The magic of `pending.json`.
const PENDING_MAGIC: &str = "letus-router-decision";

/// A move asked for and not yet started (`move.json`).
const REQUESTED: &str = "move.json";

/// The magic of `move.json`.
const REQUESTED_MAGIC: &str = "letus-router-move";

/// A record file of the router's directory (FORMAT.md §3.1): the record's JSON text with a magic, a format and a
/// check.
#[derive(Serialize, Deserialize)]
struct RecordFile {
    magic: String,
    format: u32,
    /// The value hash (SPEC.md §2) of `record`.
    check: String,
    /// The record's JSON text.
    #[serde(alias = "decision")]
    record: String,
}

fn read_pending(dir: &Path) -> Result<Option<Pending>, String> {
    read_record(dir, PENDING, PENDING_MAGIC)
}

/// Writes the decision durably: a temporary file, fsync, rename, fsync of the directory.
fn write_pending(dir: &Path, p: &Pending) -> std::io::Result<()> {
    write_record(dir, PENDING, PENDING_MAGIC, p)
}

fn read_record<T: serde::de::DeserializeOwned>(
    dir: &Path,
    name: &str,
    magic: &str,
) -> Result<Option<T>, String> {
    let path = dir.join(name);
    let bad = |why: String| format!("{}: {why}", path.display());
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let f: RecordFile = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if f.magic != magic || f.format != 1 {
        return Err(bad(format!(
            "not a {magic} record of format 1 ({} {})",
            f.magic, f.format
        )));
    }
    if f.check != letus_verify::hash::value_hash(f.record.as_bytes()).to_string() {
        return Err(bad(
            "its checksum does not match: the file is damaged".into()
        ));
    }
    serde_json::from_str(&f.record)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

/// Writes a record durably: a temporary file, fsync, rename, fsync of the directory.
fn write_record(dir: &Path, name: &str, magic: &str, r: &impl Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string(r).map_err(std::io::Error::other)?;
    let file = RecordFile {
        magic: magic.into(),
        format: 1,
        check: letus_verify::hash::value_hash(text.as_bytes()).to_string(),
        record: text,
    };
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(&file).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(v: Version, tries: u32) -> Vec<RootEntry> {
        let mut g: Vec<RootEntry> = (0..tries)
            .map(|tid| RootEntry {
                version: v,
                tid,
                root: letus_verify::hash::value_hash(&v.to_le_bytes()),
                page_version: 0,
            })
            .collect();
        g.push(RootEntry {
            version: v,
            tid: tries,
            root: letus_verify::EMPTY,
            page_version: VERSION_END,
        });
        g
    }

    /// Found by review: a damaged entry in the middle of the roots log cut every version after it (acknowledged
    /// ones), and an append retried after a failed fsync left a version twice, which no open accepted.
    #[test]
    fn a_roots_log_keeps_its_versions_cuts_only_a_torn_append_and_refuses_damage() {
        let log: Vec<RootEntry> = (1..=3).flat_map(|v| version(v, 2)).collect();
        let (whole, f) = finished_from_log(&log, &[]).unwrap();
        assert_eq!((whole, f.latest), (log.len(), Some(3)));
        // A torn append of version 4: part of its entries, a damaged one, maybe more of them after it.
        let v4 = version(4, 2);
        let torn: Vec<RootEntry> = log.iter().chain(&v4[..1]).copied().collect();
        let (whole, f) = finished_from_log(&torn, &v4[2..]).unwrap();
        assert_eq!((whole, f.latest), (log.len(), Some(3)));
        // Damage inside version 2, with whole versions after it: refused, nothing cut.
        let e = finished_from_log(&log[..4], &log[5..]).err().unwrap();
        assert!(e.contains("damaged"), "{e}");
        // Entries of another version than the next after the last whole one: refused.
        let e = finished_from_log(&log, &version(6, 1)).err().unwrap();
        assert!(e.contains("damaged"), "{e}");
        // A version appended twice counts once.
        let twice: Vec<RootEntry> = log.iter().chain(&version(3, 2)).copied().collect();
        let (whole, f) = finished_from_log(&twice, &[]).unwrap();
        assert_eq!((whole, f.latest), (twice.len(), Some(3)));
        assert!(finished_from_log(&twice[..twice.len() - 1], &[]).is_ok());
    }

    #[test]
    fn a_decision_survives_a_restart_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_pending(dir.path()).unwrap(), None);
        let mut map = ShardMap::default();
        map.moved.insert(
            0x3f,
            vec![super::super::map::Handover { from: 7, shard: 1 }],
        );
        let d = Pending {
            version: 7,
            parts: vec![ShardBlockRequest {
                block: BlockRequest {
                    version: 7,
                    writes: vec![WriteOp {
                        tid: 0,
                        key: "6b".into(),
                        value: Some("01".into()),
                    }],
                    block: None,
                    access_list: vec![],
                },
                moving: vec![],
                holds: Some("3f,80-ff".into()),
            }],
            map,
        };
        write_pending(dir.path(), &d).unwrap();
        assert_eq!(read_pending(dir.path()).unwrap(), Some(d));
        let path = dir.path().join(PENDING);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("3f,80-ff", "3f,81-ff")).unwrap();
        assert!(read_pending(dir.path()).unwrap_err().contains("checksum"));
        std::fs::write(&path, b"{\"magic\": \"x\"").unwrap();
        assert!(read_pending(dir.path()).is_err());
    }
}
