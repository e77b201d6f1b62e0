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
    pub fn render(
        &self,
        (m, state_bytes, block_bytes, latest): (
            letus_core::metrics::Snapshot,
            u64,
            u64,
            Option<u64>,
        ),
    ) -> String {
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
            "letus_updates_total",
            "Committed puts and deletes",
            m.updates,
        );
        let gauge = |name: &str, help: &str, v: f64| {
            if let Ok(g) = Gauge::new(name, help) {
                g.set(v);
                let _ = engine.register(Box::new(g));
            }
        };
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
