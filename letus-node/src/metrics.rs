//! `/metrics` in the Prometheus text format: request counts and latencies per route, commit time per block,
//! and the engine's counters (pages and values read from disk, cache hits, bytes written, disk usage).

use std::time::Duration;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
    Registry, TextEncoder,
};

/// The node's metrics.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    commit: Histogram,
    /// One status read (`/metrics`, `/v1/tiers`) on the blocking pool at a time, its permit held by the blocking
    /// work itself: the others wait their turn as async tasks, so a flood of them (or of clients that hang up)
    /// neither fills the blocking pool that block writes use nor piles up work that outlives its clients.
    pub status_reads: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "letus_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["route", "status"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "letus_http_request_duration_seconds",
                "HTTP request latency by route",
            )
            .buckets(vec![
                0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
            &["route"],
        )
        .expect("valid metric");
        let commit = Histogram::with_opts(
            HistogramOpts::new(
                "letus_block_commit_seconds",
                "Time to write one block (block store + durable state commit)",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
        )
        .expect("valid metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(commit.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Metrics {
            registry,
            requests,
            latency,
            commit,
            status_reads: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Records one request.
    pub fn observe_request(&self, route: &str, status: u16, took: Duration) {
        self.requests
            .with_label_values(&[route, &status.to_string()])
            .inc();
        self.latency
            .with_label_values(&[route])
            .observe(took.as_secs_f64());
    }

    /// Records one block commit.
    pub fn observe_commit(&self, took: Duration) {
        self.commit.observe(took.as_secs_f64());
    }

    /// Renders every metric, with the engine's counters.
    pub fn render(&self, stats: crate::node::NodeStats) -> String {
        let crate::node::NodeStats {
            engine: m,
            state_bytes,
            block_bytes,
            latest,
            prune,
            vlog_gc_running,
            tail_cut,
        } = stats;
        // The engine's counters are kept by the engine; each render copies them into a registry of its own, so
        // the crate writes every line (names, help, types) as it does for the node's own metrics.
        let engine = Registry::new();
        let counter = |name: &str, help: &str, v: u64| {
            if let Ok(c) = IntCounter::new(name, help) {
                c.inc_by(v);
                let _ = engine.register(Box::new(c));
            }
        };
        counter(
            "letus_gets_total",
            "Point reads served by the engine",
            m.gets,
        );
        counter(
            "letus_latest_index_hits_total",
            "Point reads at the latest version answered by the latest-value index (one value read, no page walked)",
            m.latest_index_hits,
        );
        counter(
            "letus_page_reads_total",
            "Page records read from index files",
            m.page_reads,
        );
        counter(
            "letus_index_block_reads_total",
            "Index blocks read from index files",
            m.index_block_reads,
        );
        counter(
            "letus_value_reads_total",
            "Value records read from the value log",
            m.value_reads,
        );
        counter(
            "letus_page_cache_hits_total",
            "Page cache hits",
            m.page_cache_hits,
        );
        counter(
            "letus_page_cache_misses_total",
            "Page cache misses",
            m.page_cache_misses,
        );
        counter(
            "letus_block_cache_hits_total",
            "Index block cache hits",
            m.block_cache_hits,
        );
        counter(
            "letus_bytes_written_total",
            "Bytes written by the engine",
            m.bytes_written,
        );
        counter("letus_commits_total", "Committed versions", m.commits);
        counter(
            "letus_rebase_pages_total",
            "Rebase DeltaPages written in place of BasePages",
            m.rebase_pages,
        );
        counter(
            "letus_updates_total",
            "Committed puts and deletes",
            m.updates,
        );
        counter(
            "letus_prunes_total",
            "Prunes that removed index files",
            m.prunes,
        );
        counter(
            "letus_pruned_files_total",
            "Index files removed by prunes",
            m.pruned_files,
        );
        counter(
            "letus_pruned_bytes_total",
            "Bytes of the index files removed by prunes",
            m.pruned_bytes,
        );
        counter(
            "letus_prune_pages_total",
            "Pages written to base files by prunes (grows while a prune runs)",
            m.pruned_pages,
        );
        counter(
            "letus_prune_errors_total",
            "Background prunes that failed (each is tried again after the next commit)",
            m.prune_errors,
        );
        counter(
            "letus_vlog_gc_passes_total",
            "Value-log GC passes (an accounting walk of the newest state after each prune)",
            m.vlog_gc_passes,
        );
        counter(
            "letus_vlog_moved_records_total",
            "Live value records that GC copied into compacted value-log files",
            m.vlog_moved_records,
        );
        counter(
            "letus_vlog_moved_bytes_total",
            "Bytes of the value records copied by GC",
            m.vlog_moved_bytes,
        );
        counter(
            "letus_vlog_compacted_files_total",
            "Value-log data files compacted by GC",
            m.vlog_files_compacted,
        );
        counter(
            "letus_vlog_compacted_bytes_reclaimed_total",
            "Bytes that value-log compactions gave back (size before less size after)",
            m.vlog_bytes_reclaimed,
        );
        counter(
            "letus_vlog_deleted_files_total",
            "Value-log data files deleted by GC",
            m.vlog_files_deleted,
        );
        counter(
            "letus_vlog_deleted_bytes_total",
            "Bytes of the value-log files deleted by GC (reclaimed)",
            m.vlog_bytes_deleted,
        );
        counter(
            "letus_vlog_gc_errors_total",
            "Background value-log GC passes that failed (each is tried again after the next prune)",
            m.vlog_gc_errors,
        );
        counter(
            "letus_block_segments_cut_total",
            "Block-store segments deleted by cutting the tail (--max-traceable-blocks)",
            tail_cut.0,
        );
        counter(
            "letus_block_bytes_cut_total",
            "Bytes of the block-store segments deleted by cutting the tail",
            tail_cut.1,
        );
        let gauge = |name: &str, help: &str, v: f64| set_gauge(&engine, name, help, v);
        gauge(
            "letus_prune_running",
            "1 while a prune runs (the background pruner's or one asked for), else 0",
            if prune.is_some() { 1.0 } else { 0.0 },
        );
        gauge(
            "letus_vlog_gc_running",
            "1 while a value-log GC pass runs, else 0",
            if vlog_gc_running { 1.0 } else { 0.0 },
        );
        gauge(
            "letus_prune_level_pages_done",
            "Of the level of pages the running prune walks now, the pages done (0 when none runs)",
            prune.map_or(0.0, |p| p.progress.level_done as f64),
        );
        gauge(
            "letus_prune_level_pages",
            "The pages of the level the running prune walks now (0 when none runs)",
            prune.map_or(0.0, |p| p.progress.level_pages as f64),
        );
        let lookups = (m.page_cache_hits + m.page_cache_misses).max(1) as f64;
        gauge(
            "letus_page_cache_hit_ratio",
            "Page cache hits / lookups since start",
            m.page_cache_hits as f64 / lookups,
        );
        gauge(
            "letus_pages_read_per_get",
            "Page records read from disk per get since start",
            m.page_reads as f64 / m.gets.max(1) as f64,
        );
        gauge(
            "letus_state_disk_bytes",
            "Bytes on disk of the state (value log, index files, roots log, tombstone log)",
            state_bytes as f64,
        );
        gauge(
            "letus_block_store_disk_bytes",
            "Bytes on disk of the block store",
            block_bytes as f64,
        );
        gauge(
            "letus_latest_version",
            "Latest committed version",
            latest.unwrap_or(0) as f64,
        );
        let mut families = self.registry.gather();
        families.extend(engine.gather());
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&families, &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// What a sharding router reports beside its requests and commits.
#[derive(Clone, Debug, Default)]
pub struct RouterStatus {
    /// The last finished version.
    pub version: Option<u64>,
    /// Whether a decided version is not finished yet (a shard failed).
    pub in_doubt: bool,
    /// Whether the router lost its lease in etcd.
    pub fenced: bool,
    /// Subtree handovers in the map.
    pub handovers: u64,
    /// The move under way: 0 none, 1 clear, 2 copy, 3 drop.
    pub move_phase: u8,
    /// Per shard (URL): the calls that failed (unreachable, or answers that do not fit).
    pub shard_failures: Vec<(String, u64)>,
}

impl Metrics {
    /// A sharding router's metrics: its requests and commits, and its [`RouterStatus`].
    pub fn render_router(&self, r: &RouterStatus) -> String {
        let reg = Registry::new();
        let gauge = |name: &str, help: &str, v: f64| set_gauge(&reg, name, help, v);
        gauge(
            "letus_latest_version",
            "Latest version the router finished",
            r.version.unwrap_or(0) as f64,
        );
        gauge(
            "letus_router_version_in_doubt",
            "1 while a decided version is not finished on every shard",
            f64::from(u8::from(r.in_doubt)),
        );
        gauge(
            "letus_router_fenced",
            "1 once this router's lease in etcd ended (it writes nothing more)",
            f64::from(u8::from(r.fenced)),
        );
        gauge(
            "letus_router_move_phase",
            "The subtree move under way: 0 none, 1 clear, 2 copy, 3 drop",
            f64::from(r.move_phase),
        );
        if let Ok(c) = IntCounter::new(
            "letus_router_handovers_total",
            "Subtrees handed from one shard to another",
        ) {
            c.inc_by(r.handovers);
            let _ = reg.register(Box::new(c));
        }
        if let Ok(c) = IntCounterVec::new(
            Opts::new(
                "letus_router_shard_failures_total",
                "Calls to a shard that failed: unreachable, timed out, or an answer that does not fit",
            ),
            &["shard"],
        ) {
            for (url, n) in &r.shard_failures {
                c.with_label_values(&[url.as_str()]).inc_by(*n);
            }
            let _ = reg.register(Box::new(c));
        }
        let mut families = self.registry.gather();
        families.extend(reg.gather());
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&families, &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The tiers' gauges and counters in the Prometheus text format (appended to `/metrics` on a tiered node).
pub fn render_tiers(t: &letus_core::storage::tiered::TierStatus) -> String {
    use letus_core::storage::tiered::Tier;
    let reg = Registry::new();
    let vec = |name: &str, help: &str, label: &str, values: &[(&str, f64)]| {
        if let Ok(g) = prometheus::GaugeVec::new(Opts::new(name, help), &[label]) {
            for (l, v) in values {
                g.with_label_values(&[l]).set(*v);
            }
            let _ = reg.register(Box::new(g));
        }
    };
    let per_tier = |f: &dyn Fn(usize) -> f64| -> Vec<(&str, f64)> {
        Tier::ALL
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name(), f(i)))
            .collect()
    };
    vec(
        "letus_tier_bytes",
        "Bytes of sealed files per tier",
        "tier",
        &per_tier(&|i| t.tiers[i].bytes as f64),
    );
    vec(
        "letus_tier_files",
        "Sealed files per tier",
        "tier",
        &per_tier(&|i| t.tiers[i].files as f64),
    );
    vec(
        "letus_tier_reads",
        "File reads served per tier since start",
        "tier",
        &per_tier(&|i| t.reads[i] as f64),
    );
    vec(
        "letus_object_store_requests",
        "Object-store requests since start, by kind",
        "kind",
        &[
            ("get", t.cold_requests[0] as f64),
            ("put", t.cold_requests[1] as f64),
            ("delete", t.cold_requests[2] as f64),
            ("list", t.cold_requests[3] as f64),
            ("error", t.cold_requests[4] as f64),
        ],
    );
    let gauge = |name: &str, help: &str, v: f64| set_gauge(&reg, name, help, v);
    gauge(
        "letus_tier_hot_other_bytes",
        "Bytes on the hot disk that are not tiered (active files, logs)",
        t.hot_other_bytes as f64,
    );
    gauge(
        "letus_tier_migration_backlog_files",
        "Sealed files the policy wants moved that are not moved yet",
        t.backlog.files as f64,
    );
    gauge(
        "letus_tier_migration_backlog_bytes",
        "Bytes of the files in the migration backlog",
        t.backlog.bytes as f64,
    );
    gauge(
        "letus_tier_move_failures",
        "Moves that failed since start (retried later)",
        t.move_failures as f64,
    );
    let lookups = (t.cold_cache[0] + t.cold_cache[1]).max(1) as f64;
    gauge(
        "letus_cold_cache_hit_ratio",
        "Cold block cache hits / lookups since start",
        t.cold_cache[0] as f64 / lookups,
    );
    gauge(
        "letus_cold_cache_bytes",
        "Bytes held by the cold block cache",
        t.cold_cache[2] as f64,
    );
    gauge(
        "letus_object_store_fenced",
        "1 when another writer claimed this store's object-store prefix",
        if t.fenced { 1.0 } else { 0.0 },
    );
    let mut buf = Vec::new();
    let _ = TextEncoder::new().encode(&reg.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Registers gauge `name` with value `v` in `reg` (a render's own registry; a name registered twice is skipped).
fn set_gauge(reg: &Registry, name: &str, help: &str, v: f64) {
    if let Ok(g) = Gauge::new(name, help) {
        g.set(v);
        let _ = reg.register(Box::new(g));
    }
}
