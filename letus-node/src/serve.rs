//! `letus serve`: configuration (TOML file < environment < flags), the token, and the server's lifetime with a
//! graceful shutdown that flushes the store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use letus_core::Options;
use std::time::Duration;

use letus_node::http::ServerSettings;
use letus_node::metrics::Metrics;
use letus_node::node::{Node, NodeLimits};
use letus_node::server::{app, AppState};
use serde::Deserialize;

/// Options of `letus serve`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ServeArgs {
    /// TOML configuration file (keys: data, listen, token, max_body_bytes, max_buffered_body_bytes, memory_budget_bytes, max_replay_millis,
    /// keep_versions, prune_garbage_ratio, vlog_gc_garbage, max_traceable_blocks, block_segment_bytes, max_proof_keys, header_timeout_secs, body_timeout_secs, stream_idle_timeout_secs, max_streams,
    /// max_concurrent_reads, shutdown_timeout_secs, max_connections, shard_prefixes).
    #[arg(long, env = "LETUS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory.
    #[arg(long, env = "LETUS_DATA")]
    pub data: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "LETUS_LISTEN")]
    pub listen: Option<String>,
    /// Bearer token required for writes (default: read from DATA/token, or generated and printed at first start).
    #[arg(long, env = "LETUS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Largest request body in bytes.
    #[arg(long, env = "LETUS_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Most bytes of request bodies held at once over all requests (default 256 MiB, at least max_body_bytes):
    /// past it a request gets `503 too_many_bodies` with its body unread.
    #[arg(long, env = "LETUS_MAX_BUFFERED_BODY_BYTES")]
    pub max_buffered_body_bytes: Option<usize>,
    /// The engine's memory budget in bytes (decoded pages, index blocks and unflushed page records together;
    /// default 2 GiB). The state may be far larger: what does not fit is read back from disk.
    #[arg(long, env = "LETUS_MEMORY_BUDGET_BYTES")]
    pub memory_budget_bytes: Option<u64>,
    /// The restart bound: most milliseconds of commit work (trie updates and publishing) not yet in an index
    /// file, which a restart after a crash replays (default 500; lower restarts faster and writes more bytes).
    #[arg(long, env = "LETUS_MAX_REPLAY_MILLIS")]
    pub max_replay_millis: Option<u64>,
    /// Keep the state of only the newest N versions: the pages of older ones are pruned in the background as
    /// index files fill (0 keeps only the latest state; default: keep every version). Reads below the boundary
    /// answer `410 pruned`; digests and history proofs of every version still answer. Can be set, changed or
    /// removed at any restart. Value-log GC runs after each prune (see --vlog-gc-garbage).
    #[arg(long, env = "LETUS_KEEP_VERSIONS")]
    pub keep_versions: Option<u64>,
    /// With --keep-versions: prune once the index files below the window hold this many times the bytes of one
    /// copy of the state's pages (default 2.0; 0 prunes as soon as an index file lies below the window: least
    /// disk, most pruning work).
    #[arg(long, env = "LETUS_PRUNE_GARBAGE_RATIO")]
    pub prune_garbage_ratio: Option<f64>,
    /// With --keep-versions: value-log GC compacts a sealed value-log file to the records the kept versions read
    /// once at least this fraction of its bytes is garbage none of them reads (default 0.33; 1 compacts nothing,
    /// and only files with nothing live are deleted).
    #[arg(long, env = "LETUS_VLOG_GC_GARBAGE")]
    pub vlog_gc_garbage: Option<f64>,
    /// Keep the raw blocks of only the newest N versions: older block-store segments are deleted whole as the
    /// chain grows (default: keep every block). Older blocks answer `410 pruned`.
    #[arg(long, env = "LETUS_MAX_TRACEABLE_BLOCKS")]
    pub max_traceable_blocks: Option<u64>,
    /// Size at which the block store starts a new segment file (default 64 MiB): the tail is cut, and files move
    /// between tiers, a whole segment at a time. With `--max-traceable-blocks N` a segment is also started every
    /// `max(N / 4, 4)` blocks.
    #[arg(long, env = "LETUS_BLOCK_SEGMENT_BYTES")]
    pub block_segment_bytes: Option<u64>,
    /// Seconds a client has to send a request's head (request line and headers); also the longest an idle
    /// keep-alive connection stays open (default 10).
    #[arg(long, env = "LETUS_HEADER_TIMEOUT_SECS")]
    pub header_timeout_secs: Option<u64>,
    /// Seconds a request body has to arrive in full after its head, else `408 body_timeout` (default 60).
    #[arg(long, env = "LETUS_BODY_TIMEOUT_SECS")]
    pub body_timeout_secs: Option<u64>,
    /// Seconds a response (an export stream above all) may wait for its client to read before the connection
    /// is dropped, releasing what the stream held (default 30).
    #[arg(long, env = "LETUS_STREAM_IDLE_TIMEOUT_SECS")]
    pub stream_idle_timeout_secs: Option<u64>,
    /// Most export streams served at once; past it `503 too_many_streams` (default 8).
    #[arg(long, env = "LETUS_MAX_STREAMS")]
    pub max_streams: Option<usize>,
    /// Most read requests computed at once; the others wait their turn (default: the number of cores less one,
    /// at least one, so that commits keep a core).
    #[arg(long, env = "LETUS_MAX_CONCURRENT_READS")]
    pub max_concurrent_reads: Option<usize>,
    /// Seconds the node waits at shutdown for requests in progress before dropping their connections
    /// (default 10).
    #[arg(long, env = "LETUS_SHUTDOWN_TIMEOUT_SECS")]
    pub shutdown_timeout_secs: Option<u64>,
    /// Most client connections open at once; more wait in the listen backlog (default 1024). The node also raises
    /// its open-file limit to the system's hard limit at start.
    #[arg(long, env = "LETUS_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Size at which the value log starts a new file (default 256 MiB); only sealed files move between tiers.
    #[arg(long, env = "LETUS_VDLS_FILE_BYTES")]
    pub vdls_file_bytes: Option<u64>,
    /// Run as a shard behind a sharding router (`letus route`), holding the subtrees whose keys' paths start with
    /// these bytes: two-digit hex prefixes and ranges, e.g. `00-3f` or `00-3f,80`. Writes of other keys are
    /// refused (`wrong_shard`). Give shard `i` of `n` the `i`-th of `n` equal ranges of 00-ff, in the order of the
    /// router's `--shard` flags.
    #[arg(long, env = "LETUS_SHARD_PREFIXES")]
    pub shard_prefixes: Option<String>,
    /// The storage tiers.
    #[command(flatten)]
    pub tiers: TierFlags,
    /// Joining from a snapshot of running nodes.
    #[command(flatten)]
    pub join: JoinFlags,
    /// Serve a directory of static files under a URL prefix, as `PREFIX=DIR` (repeatable), e.g.
    /// `--static /wallet=examples/wallet --static /js=js`.
    #[arg(long = "static", value_name = "PREFIX=DIR")]
    pub static_dirs: Vec<String>,
}

/// A node with an empty data directory joins from a snapshot of running nodes, then follows their chain.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct JoinFlags {
    /// A node to join from (repeatable). With an empty data directory the node takes the state of a verified
    /// version from these nodes chunk by chunk (resuming an interrupted join), then applies their later versions.
    #[arg(long = "join", value_name = "URL")]
    pub join: Vec<String>,
    /// The version to join at (default: the newest version of the first source).
    #[arg(long)]
    pub join_version: Option<u64>,
    /// The root of that version you trust (default: the digests of at least two sources, which must agree).
    #[arg(long)]
    pub trusted_root: Option<String>,
    /// The history root of that version you trust (default: the sources' digests).
    #[arg(long)]
    pub trusted_history_root: Option<String>,
    /// The trie to join (default 0).
    #[arg(long, default_value_t = 0)]
    pub join_tid: u32,
    /// Chunks fetched at once (default 4).
    #[arg(long, default_value_t = 4)]
    pub join_parallel: usize,
    /// Pairs per chunk asked of the sources (default 16,384).
    #[arg(long, default_value_t = letus_node::node::DEFAULT_SNAPSHOT_PAIRS)]
    pub join_max_pairs: u64,
    /// Most pairs fetched per second (default 0: no limit), so that serving the join costs the sources less.
    #[arg(long, default_value_t = 0)]
    pub join_max_pairs_per_sec: u64,
    /// After catching up, keep applying the sources' new versions (polling them) instead of stopping.
    #[arg(long)]
    pub follow: bool,
}

impl JoinFlags {
    /// The join settings, `None` without `--join`.
    pub fn resolve(&self) -> Result<Option<(letus_node::join::JoinConfig, bool)>, String> {
        if self.join.is_empty() {
            return Ok(None);
        }
        let hash = |s: &Option<String>, flag: &str| {
            s.as_deref()
                .map(|h| {
                    letus_verify::Hash::from_hex(h)
                        .ok_or_else(|| format!("{flag} `{h}` is not 64 hex digits"))
                })
                .transpose()
        };
        let mut c = letus_node::join::JoinConfig::new(
            self.join
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
        );
        c.tid = self.join_tid;
        c.version = self.join_version;
        c.trusted_root = hash(&self.trusted_root, "--trusted-root")?;
        c.trusted_history_root = hash(&self.trusted_history_root, "--trusted-history-root")?;
        c.parallel = self.join_parallel.max(1);
        c.max_pairs = self.join_max_pairs;
        c.max_pairs_per_sec = self.join_max_pairs_per_sec;
        Ok(Some((c, self.follow)))
    }
}

/// Where a store's sealed files may go (shared by `serve` and the offline tools, which must be given the same
/// tiers to read a tiered store).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TierFlags {
    /// Warm tier: a directory (on a cheaper disk) that sealed files move to (see --tier-warm-after-versions).
    #[arg(long, env = "LETUS_WARM_DIR")]
    pub warm_dir: Option<PathBuf>,
    /// Cold tier: the S3 bucket sealed files move to (see --tier-cold-after-versions). Credentials come from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or --cold-credentials-file; none means unsigned requests.
    #[arg(long, env = "LETUS_COLD_BUCKET")]
    pub cold_bucket: Option<String>,
    /// The object store's endpoint, e.g. `http://127.0.0.1:8333` (default: AWS S3 of --cold-region).
    #[arg(long, env = "LETUS_COLD_ENDPOINT")]
    pub cold_endpoint: Option<String>,
    /// The object store's region (default us-east-1).
    #[arg(long, env = "LETUS_COLD_REGION")]
    pub cold_region: Option<String>,
    /// Prefix of every object this node writes (one node per prefix; a second one fences the first).
    #[arg(long, env = "LETUS_COLD_PREFIX")]
    pub cold_prefix: Option<String>,
    /// Allow a plain-HTTP endpoint (a local test server).
    #[arg(long, env = "LETUS_COLD_ALLOW_HTTP")]
    pub cold_allow_http: bool,
    /// A file with `access_key_id = ...` and `secret_access_key = ...` lines (never logged).
    #[arg(long, env = "LETUS_COLD_CREDENTIALS_FILE")]
    pub cold_credentials_file: Option<PathBuf>,
    /// Bytes of cold-tier blocks cached in memory (default 64 MiB).
    #[arg(long, env = "LETUS_COLD_CACHE_BYTES")]
    pub cold_cache_bytes: Option<u64>,
    /// Sealed files move hot → warm once sealed this many versions (default 100 when a warm tier is set).
    #[arg(long, env = "LETUS_TIER_WARM_AFTER_VERSIONS")]
    pub tier_warm_after_versions: Option<u64>,
    /// Sealed files move to the cold tier once sealed this many versions (default 1,000 when a cold tier is set).
    #[arg(long, env = "LETUS_TIER_COLD_AFTER_VERSIONS")]
    pub tier_cold_after_versions: Option<u64>,
    /// A file read more than this many times per version stays where it is, whatever its age.
    #[arg(long, env = "LETUS_TIER_MAX_READS_PER_VERSION")]
    pub tier_max_reads_per_version: Option<f64>,
}

/// A node restarts after a crash in about this long at most (plus opening its files): see
/// `Options::max_replay_millis`.
const DEFAULT_MAX_REPLAY_MILLIS: u64 = 500;

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data: Option<PathBuf>,
    listen: Option<String>,
    token: Option<String>,
    max_body_bytes: Option<usize>,
    max_buffered_body_bytes: Option<usize>,
    memory_budget_bytes: Option<u64>,
    max_replay_millis: Option<u64>,
    keep_versions: Option<u64>,
    prune_garbage_ratio: Option<f64>,
    vlog_gc_garbage: Option<f64>,
    max_traceable_blocks: Option<u64>,
    block_segment_bytes: Option<u64>,
    max_proof_keys: Option<usize>,
    header_timeout_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    stream_idle_timeout_secs: Option<u64>,
    max_streams: Option<usize>,
    max_concurrent_reads: Option<usize>,
    shutdown_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    vdls_file_bytes: Option<u64>,
    shard_prefixes: Option<String>,
    warm_dir: Option<PathBuf>,
    cold_bucket: Option<String>,
    cold_endpoint: Option<String>,
    cold_region: Option<String>,
    cold_prefix: Option<String>,
    cold_allow_http: Option<bool>,
    cold_credentials_file: Option<PathBuf>,
    cold_cache_bytes: Option<u64>,
    tier_warm_after_versions: Option<u64>,
    tier_cold_after_versions: Option<u64>,
    tier_max_reads_per_version: Option<f64>,
}

/// A number of seconds or streams that must be at least 1: a zero would refuse every request or stream.
fn positive<T: PartialEq + From<u8>>(name: &str, v: Option<T>) -> Result<Option<T>, String> {
    match v {
        Some(x) if x == T::from(0) => Err(format!("{name} must be at least 1")),
        other => Ok(other),
    }
}

/// The longest timeout a setting takes (a year): deadlines are `now + timeout`, which must not overflow.
const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

/// The most concurrent reads or streams a setting takes (a semaphore's permits; tokio's own bound is far above).
const MAX_PERMITS: usize = 1 << 20;

/// A count of permits (concurrent reads, streams, connections): 1 to `MAX_PERMITS`.
fn permits(name: &str, v: Option<usize>) -> Result<Option<usize>, String> {
    positive(name, at_most(name, v, MAX_PERMITS)?)
}

/// A setting that must not be above `max`.
fn at_most<T: PartialOrd + std::fmt::Display>(
    name: &str,
    v: Option<T>,
    max: T,
) -> Result<Option<T>, String> {
    match v {
        Some(x) if x > max => Err(format!("{name} must be at most {max}")),
        other => Ok(other),
    }
}

/// The body budget: the setting, or the default raised to `max_body_bytes`; a setting below `max_body_bytes`
/// would refuse the largest bodies the node otherwise accepts, so it is an error.
fn buffered_body_bytes(v: Option<usize>, limits: &NodeLimits) -> Result<usize, String> {
    match v {
        Some(b) if b < limits.max_body_bytes => Err(format!(
            "max_buffered_body_bytes ({b}) must be at least max_body_bytes ({})",
            limits.max_body_bytes
        )),
        Some(b) => Ok(b),
        None => Ok(limits.max_buffered_body_bytes.max(limits.max_body_bytes)),
    }
}

/// The resolved configuration.
pub struct Config {
    pub static_dirs: Vec<(String, PathBuf)>,
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub limits: NodeLimits,
    pub server: ServerSettings,
    pub options: Options,
    /// The tiers, when a warm or cold tier is configured.
    pub tiers: Option<letus_core::storage::tiered::TierConfig>,
    /// Join from these sources when the data directory holds no store; follow them (forever with `true`).
    pub join: Option<(letus_node::join::JoinConfig, bool)>,
    /// The subtrees the node holds as a shard (all of them when not a shard).
    pub shard: Option<letus_node::sharding::PrefixSet>,
}

impl ServeArgs {
    /// Flags and environment over the file over the defaults.
    pub fn resolve(&self) -> Result<Config, String> {
        let file: FileConfig = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => FileConfig::default(),
        };
        let listen = self
            .listen
            .clone()
            .or(file.listen.clone())
            .unwrap_or_else(|| "127.0.0.1:7878".into());
        let mut limits = NodeLimits::default();
        if let Some(b) = self.max_body_bytes.or(file.max_body_bytes) {
            limits.max_body_bytes = b;
        }
        limits.max_buffered_body_bytes = buffered_body_bytes(
            self.max_buffered_body_bytes
                .or(file.max_buffered_body_bytes),
            &limits,
        )?;
        if let Some(k) = file.max_proof_keys {
            // A verifier with SPEC.md's default limits checks at most this many claims in one proof (and decodes
            // at most this many terminal records): a node serving larger multi-proofs would serve proofs no client
            // accepts.
            let most = letus_verify::Limits::default().max_keys;
            if k == 0 || k > most {
                return Err(format!(
                    "max_proof_keys must be 1 to {most} (what a verifier checks in one proof, SPEC.md §6)"
                ));
            }
            limits.max_proof_keys = k;
        }
        if let Some(b) = positive(
            "block_segment_bytes",
            self.block_segment_bytes.or(file.block_segment_bytes),
        )? {
            limits.block_segment_bytes = b;
        }
        limits.max_traceable_blocks = positive(
            "max_traceable_blocks",
            self.max_traceable_blocks.or(file.max_traceable_blocks),
        )?;
        let secs = |name: &str, flag: Option<u64>, file: Option<u64>| {
            positive(name, at_most(name, flag.or(file), MAX_TIMEOUT_SECS)?)
                .map(|s| s.map(Duration::from_secs))
        };
        if let Some(d) = secs(
            "body_timeout_secs",
            self.body_timeout_secs,
            file.body_timeout_secs,
        )? {
            limits.body_timeout = d;
        }
        if let Some(n) = permits(
            "max_concurrent_reads",
            self.max_concurrent_reads.or(file.max_concurrent_reads),
        )? {
            limits.max_concurrent_reads = n;
        }
        if let Some(n) = permits("max_streams", self.max_streams.or(file.max_streams))? {
            limits.max_streams = n;
        }
        let mut server = ServerSettings::default();
        if let Some(d) = secs(
            "header_timeout_secs",
            self.header_timeout_secs,
            file.header_timeout_secs,
        )? {
            server.header_timeout = d;
        }
        if let Some(d) = secs(
            "stream_idle_timeout_secs",
            self.stream_idle_timeout_secs,
            file.stream_idle_timeout_secs,
        )? {
            server.stream_idle_timeout = d;
        }
        if let Some(d) = secs(
            "shutdown_timeout_secs",
            self.shutdown_timeout_secs,
            file.shutdown_timeout_secs,
        )? {
            server.shutdown_timeout = d;
        }
        if let Some(n) = permits(
            "max_connections",
            self.max_connections.or(file.max_connections),
        )? {
            server.max_connections = n;
        }
        let mut options = Options {
            max_replay_millis: DEFAULT_MAX_REPLAY_MILLIS,
            ..Options::default()
        };
        if let Some(c) = self.memory_budget_bytes.or(file.memory_budget_bytes) {
            options.memory_budget_bytes = c;
        }
        if let Some(b) = positive(
            "vdls_file_bytes",
            self.vdls_file_bytes.or(file.vdls_file_bytes),
        )? {
            options.vdls_file_bytes = b;
        }
        if let Some(m) = self.max_replay_millis.or(file.max_replay_millis) {
            options.max_replay_millis = m;
        }
        options.keep_versions = self.keep_versions.or(file.keep_versions);
        if let Some(r) = self.prune_garbage_ratio.or(file.prune_garbage_ratio) {
            if !(r.is_finite() && r >= 0.0) {
                return Err(format!(
                    "prune_garbage_ratio must be a number at least 0, not {r}"
                ));
            }
            options.prune_garbage_ratio = r;
        }
        if let Some(g) = self.vlog_gc_garbage.or(file.vlog_gc_garbage) {
            if !(g.is_finite() && g > 0.0 && g <= 1.0) {
                return Err(format!(
                    "vlog_gc_garbage must be a number above 0 and at most 1, not {g}"
                ));
            }
            options.vlog_gc_garbage = g;
        }
        let mut static_dirs = Vec::new();
        for s in &self.static_dirs {
            let (prefix, dir) = s
                .split_once('=')
                .ok_or_else(|| format!("--static `{s}`: use PREFIX=DIR"))?;
            if !prefix.starts_with('/') || prefix.len() < 2 {
                return Err(format!(
                    "--static `{s}`: the prefix must start with / and name a path"
                ));
            }
            static_dirs.push((prefix.to_string(), PathBuf::from(dir)));
        }
        let data = self
            .data
            .clone()
            .or(file.data.clone())
            .unwrap_or_else(|| "letus-data".into());
        let tiers = self.tiers.resolve(&file, &data)?;
        let shard = self
            .shard_prefixes
            .as_deref()
            .or(file.shard_prefixes.as_deref())
            .map(letus_node::sharding::PrefixSet::parse)
            .transpose()
            .map_err(|e| format!("shard prefixes: {e}"))?;
        Ok(Config {
            shard,
            static_dirs,
            join: self.join.resolve()?,
            tiers,
            data,
            listen: listen
                .parse()
                .map_err(|e| format!("listen address `{listen}`: {e}"))?,
            token: self.token.clone().or(file.token),
            limits,
            server,
            options,
        })
    }
}

impl TierFlags {
    /// The tier configuration (flags over the file), `None` without a warm or cold tier.
    fn resolve(
        &self,
        file: &FileConfig,
        data: &Path,
    ) -> Result<Option<letus_core::storage::tiered::TierConfig>, String> {
        use letus_core::storage::s3::{S3Config, S3};
        use letus_core::storage::tiered::{TierConfig, TierPolicy};
        let warm = self.warm_dir.clone().or(file.warm_dir.clone());
        let bucket = self.cold_bucket.clone().or(file.cold_bucket.clone());
        if warm.is_none() && bucket.is_none() {
            return Ok(None);
        }
        let mut t = TierConfig::new(data);
        // What opening the node reads of a cold file stays on the hot disk, so that it opens (and serves hot
        // data) while the object store is down: the engine's pins, and block segments' headers and footers.
        let engine_pins = t.pins.take();
        t.pins = Some(std::sync::Arc::new(
            move |fs: &letus_core::storage::SharedStorage, p: &Path| {
                if p.extension().is_some_and(|e| e == "seg") {
                    letus_node::blockstore::tier_pins(fs, p)
                } else {
                    engine_pins
                        .as_ref()
                        .map_or(Ok(Vec::new()), |pins| pins(fs, p))
                }
            },
        ));
        t.policy = TierPolicy {
            warm_after_versions: warm.as_ref().map(|_| {
                self.tier_warm_after_versions
                    .or(file.tier_warm_after_versions)
                    .unwrap_or(100)
            }),
            cold_after_versions: bucket.as_ref().map(|_| {
                self.tier_cold_after_versions
                    .or(file.tier_cold_after_versions)
                    .unwrap_or(1_000)
            }),
            max_reads_per_version: self
                .tier_max_reads_per_version
                .or(file.tier_max_reads_per_version),
            ..TierPolicy::default()
        };
        t.warm_dir = warm;
        if let Some(c) = self.cold_cache_bytes.or(file.cold_cache_bytes) {
            t.cold_cache_bytes = c;
        }
        if let Some(p) = self.cold_prefix.clone().or(file.cold_prefix.clone()) {
            if p.is_empty() || p.len() > 512 {
                return Err("cold_prefix must have 1 to 512 characters".into());
            }
            t.cold_prefix = p;
        }
        if let Some(bucket) = bucket {
            let mut c = S3Config {
                endpoint: self.cold_endpoint.clone().or(file.cold_endpoint.clone()),
                bucket,
                region: self.cold_region.clone().or(file.cold_region.clone()),
                allow_http: self.cold_allow_http || file.cold_allow_http.unwrap_or(false),
                ..S3Config::default()
            }
            .credentials_from_env();
            if let Some(f) = self
                .cold_credentials_file
                .clone()
                .or(file.cold_credentials_file.clone())
            {
                c = c
                    .credentials_from_file(&f)
                    .map_err(|e| format!("credentials file {}: {e}", f.display()))?;
            }
            let s3 = S3::new(&c).map_err(|e| format!("the object store: {e}"))?;
            t.cold = Some(std::sync::Arc::new(s3));
        }
        Ok(Some(t))
    }
}

impl TierFlags {
    /// The tiers these flags (with their environment variables) give for data directory `data`; `None` when
    /// they name no tier.
    pub fn config(
        &self,
        data: &Path,
    ) -> Result<Option<letus_core::storage::tiered::TierConfig>, String> {
        self.resolve(&FileConfig::default(), data)
    }
}

/// The write token: configured, or kept in DATA/token (created with mode 0600 at first start).
///
/// An empty token (or one of spaces) is refused: `Authorization: Bearer ` with nothing after it never matches,
/// so such a node would refuse every write while it looked configured. The file is written under a temporary
/// name, fsynced and renamed (then the directory fsynced), so a crash never leaves an empty one.
pub fn token(data: &Path, configured: Option<String>) -> Result<(String, bool), String> {
    if let Some(t) = configured {
        if t.trim().is_empty() {
            return Err(
                "the configured token is empty: give a token, or none to have one made".into(),
            );
        }
        return Ok((t, false));
    }
    let path = data.join("token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim().to_string();
        if t.is_empty() {
            return Err(format!(
                "{} is empty: remove it to have a token made, or write one into it",
                path.display()
            ));
        }
        return Ok((t, false));
    }
    let mut raw = [0u8; 24];
    getrandom::fill(&mut raw).map_err(|e| format!("no randomness for a token: {e}"))?;
    let t = letus_verify::hex::encode(&raw);
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = data.join("token.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(t.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::File::open(data)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("{}: {e}", data.display()))?;
    Ok((t, true))
}

/// Opens the node and serves until SIGINT/SIGTERM; `ready` is called with the bound address and the token.
pub fn serve(
    cfg: Config,
    ready: impl FnOnce(SocketAddr, &str, bool) + Send + 'static,
) -> Result<(), String> {
    serve_until(cfg, ready, std::future::pending())
}

/// [`serve`], also stopping (gracefully, the store flushed and closed) when `stop` completes.
pub fn serve_until(
    cfg: Config,
    ready: impl FnOnce(SocketAddr, &str, bool) + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (tok, generated) = token(&cfg.data, cfg.token.clone())?;
    if let Some(n) = letus_alloc::raise_open_file_limit() {
        tracing::debug!(open_files = n, "open-file limit");
    }
    let mut options = cfg.options.clone();
    let tiers = match &cfg.tiers {
        Some(t) => {
            let tiered = letus_core::storage::tiered::Tiered::open(t.clone())
                .map_err(|e| format!("opening the tiers: {e}"))?;
            options.storage = tiered.shared();
            // Cold reads take milliseconds each: a page's chain is read at once rather than record by record.
            options.prefetch_delta_chains = t.cold.is_some();
            Some(tiered)
        }
        None => {
            let m =
                letus_core::storage::tiered::Manifest::load(&letus_core::storage::Local, &cfg.data)
                    .map_err(|e| e.to_string())?;
            if m.files
                .values()
                .any(|f| f.tier != letus_core::storage::tiered::Tier::Hot)
            {
                return Err(format!(
                    "{} is a tiered store with files in the warm or cold tier: start it with the tier settings it \
                     was served with (--warm-dir, --cold-bucket, --cold-endpoint, ...)",
                    cfg.data.display()
                ));
            }
            None
        }
    };
    let mut joined_pages = None;
    if let Some((j, _)) = &cfg.join {
        match letus_node::join::join(&cfg.data, j, options.clone()).map_err(|e| e.to_string())? {
            Some((f, mut i)) => {
                joined_pages = Some(std::mem::take(&mut i.pages));
                tracing::info!(
                    chunks = f.chunks,
                    fetched = f.fetched,
                    reused = f.reused,
                    pairs = f.pairs,
                    failures = f.failures.len(),
                    fetch_seconds = f.seconds,
                    import_seconds = i.seconds,
                    handed_over = i.handed_over,
                    "joined from a snapshot"
                )
            }
            None => tracing::info!("the data directory holds a store: no join needed"),
        }
    }
    let mut node = Node::open(&cfg.data, options, tok.clone(), cfg.limits.clone())
        .map_err(|e| e.to_string())?;
    if let Some(p) = joined_pages {
        let n = node.warm(p);
        tracing::debug!(pages = n, "page cache warmed with the pages the join built");
    }
    if let Some(t) = tiers {
        node = node.with_tiers(t);
    }
    if let Some(p) = cfg.shard {
        node = node.with_shard(p, &cfg.data)?;
    }
    let node = Arc::new(node);
    let stop_following = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let follower = cfg.join.as_ref().map(|(j, forever)| {
        letus_node::join::spawn_follower(
            node.clone(),
            j.sources.clone(),
            j.tid,
            stop_following.clone(),
            *forever,
        )
    });
    let state = AppState {
        node: node.clone(),
        metrics: Arc::new(Metrics::new()),
        static_dirs: cfg.static_dirs.clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let shutdown_timeout = cfg.server.shutdown_timeout;
    // When the shutdown began: one deadline for the connections, the blocking work and the follower together.
    let signalled = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let at_signal = signalled.clone();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        ready(addr, &tok, generated);
        letus_node::http::serve(listener, app(state), cfg.server.clone(), async move {
            tokio::select! { _ = shutdown_signal() => {}, _ = stop => {} }
            *at_signal.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        })
        .await;
        Ok::<(), String>(())
    })?;
    let deadline = signalled
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_else(std::time::Instant::now)
        + shutdown_timeout;
    // Blocking work still running is waited for until the deadline (a commit whose connection was dropped
    // finishes; an export's walk ends at its next chunk, its receiver gone), and then left: it was not
    // acknowledged, and the store loses nothing acknowledged wherever a process stops.
    rt.shutdown_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
    // The follower stops between versions; one stuck in a request to a silent source is not waited for past the
    // shutdown deadline (the node then exits without closing the store: what it acknowledged is durable).
    stop_following.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(f) = follower {
        while !f.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if f.is_finished() {
            let _ = f.join();
        } else {
            tracing::warn!(
                "the follower did not stop within the shutdown deadline; exiting without it"
            );
        }
    }
    // Every acknowledged block is already durable; closing flushes the page index so the next start is quick.
    match Arc::try_unwrap(node) {
        Ok(node) => node.close().map_err(|e| e.to_string()),
        Err(_) => Ok(()),
    }
}

/// Options of `letus route`.
#[derive(clap::Args, Clone, Debug)]
pub struct RouteArgs {
    /// The router's data directory (the roots of every version it committed, and the version being committed).
    #[arg(long, env = "LETUS_DATA")]
    pub data: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "LETUS_LISTEN", default_value = "127.0.0.1:7878")]
    pub listen: String,
    /// A shard's base URL (repeatable; required unless etcd holds the cluster's map): shard `i` of `n` must first
    /// run with `--shard-prefixes` the `i`-th of `n` equal ranges of 00-ff (two shards: 00-7f and 80-ff); subtree
    /// moves change that later (the router checks at start that each shard holds what its map says).
    #[arg(long = "shard")]
    pub shards: Vec<String>,
    /// Coordinate through the etcd at this client URL: the shard map, one leading router at a time under a
    /// lease, and each version's decision, so that a router that dies is replaced by a waiting one (started with
    /// the same `--etcd` and `--cluster`), which finishes what it left. A router whose lease ended writes nothing.
    #[arg(long, env = "LETUS_ETCD")]
    pub etcd: Option<String>,
    /// The cluster's name in etcd (its keys are under /letus/NAME/).
    #[arg(long, default_value = "default")]
    pub cluster: String,
    /// Seconds of the leader's lease in etcd: how long after a router stops a waiting one takes over.
    #[arg(long, default_value_t = 5)]
    pub lease_secs: u64,
    /// Bearer token of writes, the router's and the shards' (default: read from DATA/token, or generated and
    /// printed at first start; the shards must be started with the same token).
    #[arg(long, env = "LETUS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Largest request body in bytes.
    #[arg(long, env = "LETUS_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Most bytes of request bodies held at once over all requests (default 256 MiB, at least max_body_bytes):
    /// past it a request gets `503 too_many_bodies` with its body unread.
    #[arg(long, env = "LETUS_MAX_BUFFERED_BODY_BYTES")]
    pub max_buffered_body_bytes: Option<usize>,
    /// Seconds a request to a shard may take, a commit of the largest block included: a shard that does not answer
    /// within it (cut off, stalled) fails the write with `502 shard_unavailable`.
    #[arg(long, default_value_t = 60)]
    pub shard_timeout_secs: u64,
    /// Seconds to wait at start for every shard to answer (default 30).
    #[arg(long, default_value_t = 30)]
    pub connect_timeout_secs: u64,
    /// Seconds a request body has to arrive in full after its head, else `408 body_timeout`.
    #[arg(long, default_value_t = 60)]
    pub body_timeout_secs: u64,
    /// Seconds the request head has to arrive in (also how long an idle keep-alive connection stays open).
    #[arg(long, default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// A subtree move copies a trie's part of the subtree in one block when it has at most this many pairs, else
    /// in 16 pieces over 16 blocks (so that no block carries more than about this many extra writes).
    #[arg(long, default_value_t = 10_000)]
    pub move_step_pairs: usize,
}

/// `letus route`: a sharding router in front of shard nodes, until SIGINT/SIGTERM.
pub fn run_route(args: RouteArgs) -> Result<ExitCode, String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    std::fs::create_dir_all(&args.data)
        .map_err(|e| format!("creating {}: {e}", args.data.display()))?;
    let (tok, generated) = token(&args.data, args.token.clone())?;
    let mut limits = NodeLimits::default();
    if let Some(b) = args.max_body_bytes {
        limits.max_body_bytes = b;
    }
    limits.max_buffered_body_bytes = buffered_body_bytes(args.max_buffered_body_bytes, &limits)?;
    limits.body_timeout = Duration::from_secs(args.body_timeout_secs.max(1));
    let settings = ServerSettings {
        header_timeout: Duration::from_secs(args.header_timeout_secs.max(1)),
        ..ServerSettings::default()
    };
    let listen: SocketAddr = args
        .listen
        .parse()
        .map_err(|e| format!("listen address `{}`: {e}", args.listen))?;
    let router =
        letus_node::sharding::router::Router::open(letus_node::sharding::router::RouterConfig {
            data: args.data.clone(),
            shards: args.shards.clone(),
            token: tok.clone(),
            limits,
            connect_timeout: Duration::from_secs(args.connect_timeout_secs),
            shard_timeout: Duration::from_secs(args.shard_timeout_secs.max(1)),
            etcd: args
                .etcd
                .clone()
                .map(|url| letus_node::sharding::router::EtcdConfig {
                    url,
                    cluster: args.cluster.clone(),
                    lease_secs: args.lease_secs,
                }),
            move_step_pairs: args.move_step_pairs,
        })?;
    let router = Arc::new(router);
    let app = letus_node::sharding::http::app(router.clone());
    let shards = router.shard_count();
    let watched = router.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!(
            "letus router on http://{addr} over {} shards (data: {})",
            shards,
            args.data.display()
        );
        if generated {
            println!(
                "write token (saved in {}): {tok}",
                args.data.join("token").display()
            );
        }
        // A router whose lease ended stops: another leads the cluster, and this one's view ends where it lost it.
        let fenced = {
            let r = watched;
            async move {
                while !r.is_fenced() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        letus_node::http::serve(listener, app, settings, async move {
            tokio::select! { _ = shutdown_signal() => {}, _ = fenced => {} }
        })
        .await;
        Ok::<(), String>(())
    })?;
    if router.is_fenced() {
        return Err("this router's lease in etcd ended: another router leads the cluster".into());
    }
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}

pub fn run(args: ServeArgs) -> Result<ExitCode, String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cfg = args.resolve()?;
    let data = cfg.data.clone();
    serve(cfg, move |addr, tok, generated| {
        println!("letus node on http://{addr} (data: {})", data.display());
        if generated {
            println!(
                "write token (saved in {}): {tok}",
                data.join("token").display()
            );
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod token_tests {
    use super::token;

    #[test]
    fn an_empty_token_is_refused_and_a_made_one_is_kept() {
        let d = tempfile::tempdir().unwrap();
        assert!(token(d.path(), Some("  ".into())).is_err());
        assert_eq!(
            token(d.path(), Some("abc".into())).unwrap(),
            ("abc".into(), false)
        );
        let (made, generated) = token(d.path(), None).unwrap();
        assert!(generated && made.len() == 48, "{made}");
        assert_eq!(token(d.path(), None).unwrap(), (made, false));
        assert!(!d.path().join("token.tmp").exists());
        std::fs::write(d.path().join("token"), "\n").unwrap();
        let e = token(d.path(), None).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
    }
}
