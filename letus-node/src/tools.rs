//! Offline tools over a data directory: `letus verify`, `letus export`, `letus import`, `letus prune`.

use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use letus_core::{Options, Store};
use letus_verify::export::{ExportReader, ExportSummary};
use letus_verify::{Hash, Limits};

/// Opens the store of an existing data directory; a directory without one is an error, never created. A tiered
/// store is opened on its tiers, which `tiers` must name as `letus serve` was given them.
fn open_state(data: &std::path::Path, tiers: &crate::serve::TierFlags) -> Result<Store, String> {
    let state = data.join("state");
    if !state.is_dir() {
        return Err(format!(
            "no store in {}: {} does not exist (is --data right?)",
            data.display(),
            state.display()
        ));
    }
    let mut opts = Options::default();
    match tiers.config(data)? {
        Some(cfg) => {
            let t = letus_core::storage::tiered::Tiered::open(cfg)
                .map_err(|e| format!("opening the tiers: {e}"))?;
            opts.storage = t.shared();
        }
        None => {
            let m = letus_core::storage::tiered::Manifest::load(&letus_core::storage::Local, data)
                .map_err(|e| e.to_string())?;
            if m.files
                .values()
                .any(|f| f.tier != letus_core::storage::tiered::Tier::Hot)
            {
                return Err(format!(
                    "{} is a tiered store with files in the warm or cold tier: pass the tier flags it is served                      with (--warm-dir, --cold-bucket, --cold-endpoint, ...)",
                    data.display()
                ));
            }
        }
    }
    Store::open(state, opts).map_err(|e| match e {
        letus_core::Error::Locked(_) => format!("{} is in use by a running node; stop it first (or verify its HTTP export: GET /v1/tries/T/export)", data.display()),
        other => other.to_string(),
    })
}

/// A spinner counting with `template`, hidden when the output is machine-readable.
fn spinner(hidden: bool, template: &str) -> indicatif::ProgressBar {
    let bar = if hidden {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar
}

fn parse_root(s: &str) -> Result<Hash, String> {
    Hash::from_hex(s).ok_or_else(|| format!("--root `{s}` is not 64 hex digits"))
}

/// Options of `letus verify`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Data directory of a (stopped) node.
    #[arg(long, default_value = "letus-data")]
    data: PathBuf,
    /// Trie id.
    #[arg(long, default_value_t = 0)]
    tid: u32,
    /// Version to verify (default: latest).
    #[arg(long)]
    version: Option<u64>,
    /// The root you trust for that version (hex).
    #[arg(long)]
    root: String,
    /// Print a machine-readable summary.
    #[arg(long)]
    json: bool,
    /// The store's tiers, if it is tiered.
    #[command(flatten)]
    tiers: crate::serve::TierFlags,
}

/// Why `letus verify` could not check anything (exit 2), as opposed to a check that failed (MISMATCH, exit 1).
struct VerifyError {
    code: &'static str,
    message: String,
}

fn verify_error(code: &'static str) -> impl FnOnce(String) -> VerifyError {
    move |message| VerifyError { code, message }
}

pub fn verify(a: VerifyArgs) -> Result<ExitCode, String> {
    match verify_checked(&a) {
        Ok(code) => Ok(code),
        Err(e) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"ok": false, "tid": a.tid, "version": a.version, "error": e.code, "message": e.message})
                );
            } else {
                eprintln!("error: {}", e.message);
            }
            Ok(ExitCode::from(2))
        }
    }
}

fn verify_checked(a: &VerifyArgs) -> Result<ExitCode, VerifyError> {
    let root = parse_root(&a.root).map_err(verify_error("bad_argument"))?;
    let store = open_state(&a.data, &a.tiers).map_err(verify_error("no_store"))?;
    let version = match a.version {
        Some(v) if store.versions().binary_search(&v).is_err() => {
            return Err(VerifyError {
                code: "version_not_found",
                message: format!("version {v} was never written to {}", a.data.display()),
            })
        }
        Some(v) => v,
        None => store.latest_version().ok_or_else(|| VerifyError {
            code: "version_not_found",
            message: format!("the store in {} is empty", a.data.display()),
        })?,
    };
    match store.digest(a.tid, version) {
        Ok(_) => {}
        Err(letus_core::Error::UnknownTrie(_)) | Err(letus_core::Error::VersionNotFound(_)) => {
            return Err(VerifyError {
                code: "unknown_trie",
                message: format!("trie {} does not exist at version {version}", a.tid),
            })
        }
        Err(e) => return Err(verify_error("internal")(e.to_string())),
    }
    let bar = spinner(a.json, "{spinner} {pos} keys verified {per_sec} {elapsed}");
    let started = std::time::Instant::now();
    let result =
        store.verify_full_with_progress(a.tid, version, &root, &mut |n| bar.set_position(n));
    bar.finish_and_clear();
    // Only a recomputation that disagrees (or data that fails its checksums) is a MISMATCH; anything else
    // (an I/O error) means nothing was checked.
    if let Err(e) = &result {
        if !matches!(
            e,
            letus_core::Error::Mismatch { .. } | letus_core::Error::Corrupt { .. }
        ) {
            return Err(verify_error("internal")(e.to_string()));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (ok, summary) = match &result {
        Ok(r) => (
            true,
            serde_json::json!({"ok": true, "tid": a.tid, "version": version, "root": r.root.to_hex(), "keys": r.keys, "pages": r.pages, "seconds": secs}),
        ),
        Err(e) => (
            false,
            serde_json::json!({"ok": false, "tid": a.tid, "version": version, "expected_root": root.to_hex(), "error": "mismatch", "message": e.to_string(), "seconds": secs}),
        ),
    };
    if a.json {
        println!("{summary}");
    } else if let Ok(r) = &result {
        println!("OK: trie {} at version {version}: {} keys and {} pages recomputed, root {} matches ({secs:.1}s)", a.tid, r.keys, r.pages, r.root);
    } else if let Err(e) = &result {
        println!("MISMATCH: trie {} at version {version}: {e}", a.tid);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Options of `letus prune`.
#[derive(clap::Args)]
pub struct PruneArgs {
    /// Data directory of a (stopped) node; a running node prunes with `POST /v1/admin/prune` or `--keep-versions`.
    #[arg(long, default_value = "letus-data")]
    data: PathBuf,
    /// Versions whose state is kept besides the latest (0: keep only the latest state). Reads below the boundary
    /// then answer `pruned`; digests and history proofs of every version still answer. Value-log files that no
    /// kept version reads are deleted too; the block store is not pruned.
    #[arg(long)]
    keep: u64,
    /// Merge every base file into one (a full walk of the state), so that the index files come down to one copy
    /// of the state's pages, and compact every value-log file with any garbage (with --keep 0 now; with a window,
    /// once a node has committed past it): the least disk a prune can leave. Without it, a prune writes only the
    /// pages changed since the last one, and compacts the value-log files at least a third garbage.
    #[arg(long)]
    merge: bool,
    /// Print a machine-readable summary.
    #[arg(long)]
    json: bool,
    /// The store's tiers, if it is tiered.
    #[command(flatten)]
    tiers: crate::serve::TierFlags,
}

pub fn prune(a: PruneArgs) -> Result<ExitCode, String> {
    let store = open_state(&a.data, &a.tiers)?;
    let before = store.disk_bytes();
    // One bar per level of the walk (a level's pages are known before it is walked; the deepest levels take
    // most of the time), with the pages written so far.
    let bar = if a.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "pruning: {msg} [{bar:30}] {pos}/{len} pages of this depth {elapsed}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = std::time::Instant::now();
    let result = store
        .reader()
        .prune_with_progress(a.keep, a.merge, &mut |p| {
            bar.set_length(p.level_pages);
            bar.set_position(p.level_done);
            bar.set_message(format!("{} pages written, depth {}", p.pages, p.depth));
        });
    bar.finish_and_clear();
    let report = result.map_err(|e| e.to_string())?;
    let gc_bar = spinner(a.json, "{spinner} value-log GC {elapsed}");
    gc_bar.enable_steady_tick(std::time::Duration::from_millis(200));
    // Value-log GC: the first pass retires the files the newest state does not refer to and chooses victims, the
    // second deletes and compacts those the boundary has passed (with --keep 0, all of them; with a window, the
    // node compacts them once it has committed past it); with --merge, every file with any garbage.
    let gc = store
        .vlog_gc()
        .and_then(|first| {
            let second = if a.merge {
                store.vlog_gc_all()
            } else {
                store.vlog_gc()
            };
            second.map(|second| {
                (
                    first.files_deleted + second.files_deleted,
                    first.bytes_deleted + second.bytes_deleted,
                    second,
                )
            })
        })
        .map_err(|e| e.to_string());
    gc_bar.finish_and_clear();
    let gc = gc?;
    let after = store.disk_bytes();
    let secs = started.elapsed().as_secs_f64();
    let oldest = store.pruned_below();
    store.close().map_err(|e| e.to_string())?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "pruned": report.is_some(),
                "oldest": oldest,
                "files_removed": report.as_ref().map_or(0, |r| r.files_removed),
                "bytes_removed": report.as_ref().map_or(0, |r| r.bytes_removed),
                "base_bytes": report.as_ref().map_or(0, |r| r.base_bytes),
                "pages": report.as_ref().map_or(0, |r| r.pages),
                "vlog_files_deleted": gc.0,
                "vlog_bytes_deleted": gc.1,
                "vlog_bytes": gc.2.log_bytes,
                "vlog_live_bytes": gc.2.live_bytes,
                "state_bytes_before": before,
                "state_bytes_after": after,
                "seconds": secs,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    match (report, oldest) {
        (Some(r), _) => println!(
            "pruned below version {}: {} index files ({} bytes) replaced by one base file of {} pages ({} bytes); state {} -> {} bytes ({secs:.1}s)",
            r.boundary, r.files_removed, r.bytes_removed, r.pages, r.base_bytes, before, after
        ),
        (None, Some(b)) => println!("nothing to prune: the store is pruned below version {b} already, and no index file lies wholly below the window"),
        (None, None) => println!("nothing to prune: no index file lies wholly below the window (the store keeps every version)"),
    }
    println!(
        "value log: {} files ({} bytes) deleted; {} bytes, {} of them live",
        gc.0, gc.1, gc.2.log_bytes, gc.2.live_bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// Options of `letus export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// Data directory of a (stopped) node.
    #[arg(long, default_value = "letus-data")]
    data: PathBuf,
    /// Trie id.
    #[arg(long, default_value_t = 0)]
    tid: u32,
    /// Version (default: latest).
    #[arg(long)]
    version: Option<u64>,
    /// Output file (`-` for stdout).
    #[arg(long, default_value = "-")]
    out: PathBuf,
    /// Where to write the frontier of the trie's history before the exported version (JSON), which `letus
    /// import` needs to carry the history commitment (default: OUT.history.json; none when OUT is stdout).
    #[arg(long)]
    history_out: Option<PathBuf>,
    /// The store's tiers, if it is tiered.
    #[command(flatten)]
    tiers: crate::serve::TierFlags,
}

/// The history frontier file written next to an export: the history of trie `tid` just before `version`, in the
/// shape `GET /v1/digest/frontier` answers.
type FrontierFile = letus_node::api::FrontierResponse;

fn history_file_next_to(export: &std::path::Path) -> PathBuf {
    let mut name = export.as_os_str().to_owned();
    name.push(".history.json");
    PathBuf::from(name)
}

pub fn export(a: ExportArgs) -> Result<ExitCode, String> {
    let store = open_state(&a.data, &a.tiers)?;
    let version = a
        .version
        .or(store.latest_version())
        .ok_or("the store is empty")?;
    let digest = store.digest(a.tid, version).map_err(|e| e.to_string())?;
    let sink: Box<dyn Write> = if a.out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::fs::File::create(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?)
    };
    let mut w = BufWriter::new(sink);
    let mut failed: Option<std::io::Error> = None;
    let written =
        letus_node::export::write_export(&store.snapshot(), a.tid, version, digest.root, |chunk| {
            match w.write_all(&chunk) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let n = match (written, failed) {
        (Some(n), None) => n,
        (_, Some(e)) => return Err(format!("{}: {e}", a.out.display())),
        (None, None) => return Err("the export stopped".into()),
    };
    w.flush().map_err(|e| format!("{}: {e}", a.out.display()))?;
    let history_out = a
        .history_out
        .clone()
        .or_else(|| (a.out.as_os_str() != "-").then(|| history_file_next_to(&a.out)));
    if let Some(path) = history_out {
        let frontier = store
            .history_frontier(a.tid, version)
            .map_err(|e| e.to_string())?;
        let f = FrontierFile::new(a.tid, version, frontier);
        let json = serde_json::to_string(&f).map_err(|e| e.to_string())?;
        std::fs::write(&path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    eprintln!(
        "exported {n} pairs of trie {} at version {version}, root {}",
        a.tid, digest.root
    );
    Ok(ExitCode::SUCCESS)
}

/// Options of `letus import`.
#[derive(clap::Args)]
pub struct ImportArgs {
    /// Data directory of the new node (must not hold a store yet).
    #[arg(long)]
    data: PathBuf,
    /// The export file.
    #[arg(long)]
    file: PathBuf,
    /// The root you trust for the exported version (default: trust the root written in the export).
    #[arg(long)]
    root: Option<String>,
    /// The history frontier written by `letus export` (default: FILE.history.json if it exists). With it the new
    /// store's digests carry the source's history commitment (`history_len`, `history_root`); without it the
    /// history starts at the imported version.
    #[arg(long)]
    history: Option<PathBuf>,
    /// The `history_root` you trust for the exported version (checked against what the frontier gives).
    #[arg(long)]
    history_root: Option<String>,
}

/// Reads and checks a history frontier file against the export's header.
fn read_frontier(
    path: &std::path::Path,
    tid: u32,
    version: u64,
) -> Result<(u64, Vec<(u32, Hash)>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let f: FrontierFile = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a history frontier: {e}", path.display()))?;
    if (f.tid, f.version) != (tid, version) {
        return Err(format!(
            "{} is the history of trie {} before version {}, the export is trie {tid} at version {version}",
            path.display(),
            f.tid,
            f.version
        ));
    }
    f.to_frontier()
        .ok_or_else(|| format!("{}: a peak hash is not 64 hex digits", path.display()))
}

/// Bytes of the export read at a time: besides the engine's write set, the importer holds this chunk, the reader's
/// copy of it and the unfinished record before it.
const IMPORT_CHUNK_BYTES: usize = 1 << 20;

/// Where, inside `--data`, an import writes its store until the export is verified; then it is renamed to `state`.
/// A failed import removes it, so `letus serve` never opens a store whose export did not verify.
const IMPORT_DIR: &str = "state.importing";

/// The lock file (inside `--data`) held by a running import.
const IMPORT_LOCK: &str = "state.importing.lock";

/// Removes the store left in `dir` by an import that did not finish (it was killed): called with the import lock
/// held, so no import is running there.
fn remove_stale_import(dir: &std::path::Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    eprintln!(
        "warning: removing {}, left by an import that did not finish",
        dir.display()
    );
    std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

fn sync_dir(dir: &std::path::Path) -> Result<(), String> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("{}: {e}", dir.display()))
}

pub fn import(a: ImportArgs) -> Result<ExitCode, String> {
    let trusted_root = a.root.as_deref().map(parse_root).transpose()?;
    let trusted_history = a
        .history_root
        .as_deref()
        .map(|r| {
            Hash::from_hex(r).ok_or_else(|| format!("--history-root `{r}` is not 64 hex digits"))
        })
        .transpose()?;
    let history_path = a.history.clone().or_else(|| {
        let p = history_file_next_to(&a.file);
        p.exists().then_some(p)
    });
    if trusted_history.is_some() && history_path.is_none() {
        return Err("--history-root needs the history frontier (--history FILE)".into());
    }
    let file = std::fs::File::open(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let state = a.data.join("state");
    if state.exists() {
        return Err(format!("{} already holds a store", a.data.display()));
    }
    let created_data = !a.data.exists();
    std::fs::create_dir_all(&a.data).map_err(|e| format!("{}: {e}", a.data.display()))?;
    // One import at a time into a data directory: the lock is held until the store is renamed into place.
    let lock_path = a.data.join(IMPORT_LOCK);
    let lock = letus_core::fsutil::lock_dir(&letus_core::storage::Local, &a.data, IMPORT_LOCK)
        .map_err(|e| match e {
            letus_core::Error::Locked(_) => {
                format!("another import into {} is running", a.data.display())
            }
            e => e.to_string(),
        })?;
    let tmp = a.data.join(IMPORT_DIR);
    // Nothing of a failed import stays behind (nor the data directory, if the import created it).
    let clean_up = || {
        let _ = std::fs::remove_dir_all(&tmp);
        let _ = std::fs::remove_file(&lock_path);
        if created_data {
            let _ = std::fs::remove_dir(&a.data);
        }
    };
    if state.exists() {
        clean_up();
        return Err(format!("{} already holds a store", a.data.display()));
    }
    let result = remove_stale_import(&tmp).and_then(|()| {
        import_into(
            &a,
            file,
            &tmp,
            trusted_root,
            history_path.as_deref(),
            trusted_history,
        )
    });
    let (summary, root, digest) = match result {
        Ok(done) => done,
        Err(e) => {
            clean_up();
            return Err(e);
        }
    };
    std::fs::rename(&tmp, &state).map_err(|e| {
        format!(
            "{} verified, but renaming it to {}: {e}",
            tmp.display(),
            state.display()
        )
    })?;
    // The lock file goes before the lock: an import that opens it after this finds the store and stops.
    let _ = std::fs::remove_file(&lock_path);
    drop(lock);
    sync_dir(&a.data)?;
    if created_data {
        if let Some(parent) = a.data.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    match (&history_path, trusted_history) {
        (Some(p), Some(_)) => println!(
            "history: {} entries, history_root {} from {}, verified against --history-root",
            digest.history_len,
            digest.history_root,
            p.display()
        ),
        (Some(p), None) => println!(
            "history: {} entries, history_root {} from {} (compare it with the source's digest, or pass --history-root)",
            digest.history_len,
            digest.history_root,
            p.display()
        ),
        (None, _) => println!(
            "history: no history frontier given, so the history starts here (history_len 1) and digests differ from the source's"
        ),
    }
    if trusted_root.is_some() {
        println!(
            "imported {} pairs of trie {} at version {}; root {root} verified against --root",
            summary.records, summary.header.tid, summary.header.version
        );
    } else {
        println!(
            "imported {} pairs of trie {} at version {}; root {root} is the export's own, NOT verified against a trusted root (pass --root)",
            summary.records, summary.header.tid, summary.header.version
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Streams the export in `file` into a new store in `tmp` with `Store::bulk_load`: each chunk read is fed to the
/// reader and each record it decodes goes straight into the store's value log and pages, so memory does not grow
/// with the export. The store is checked against the trusted root (and history root) once the whole export has
/// verified, and closed before this returns; the caller removes `tmp` on an error.
fn import_into(
    a: &ImportArgs,
    mut file: std::fs::File,
    tmp: &std::path::Path,
    trusted_root: Option<Hash>,
    history_path: Option<&std::path::Path>,
    trusted_history: Option<Hash>,
) -> Result<(ExportSummary, Hash, letus_verify::Digest), String> {
    let in_file = |e: letus_verify::error::ExportError| format!("{}: {e}", a.file.display());
    let mut reader = ExportReader::new(Limits::default());
    let mut chunk = vec![0u8; IMPORT_CHUNK_BYTES];
    let mut read_chunk = |reader: &mut ExportReader| -> Result<bool, String> {
        loop {
            match file.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    reader.push(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("{}: {e}", a.file.display())),
            }
        }
    };
    let header = loop {
        if let Some(h) = reader.read_header().map_err(in_file)? {
            break *h;
        }
        if !read_chunk(&mut reader)? {
            return Err("the export has no header".into());
        }
    };
    let trusted = trusted_root.unwrap_or_else(|| {
        eprintln!(
            "warning: no --root given; trusting the root written in the export ({})",
            header.root
        );
        header.root
    });
    let frontier = history_path
        .map(|p| read_frontier(p, header.tid, header.version))
        .transpose()?;
    // The source's errors (reading the file, decoding the stream) stop the load and are reported as they are.
    let mut failed: Option<String> = None;
    // An empty trie (every key deleted) loads as one with the empty root.
    let loaded = Store::bulk_load(
        tmp,
        Options::default(),
        header.tid,
        header.version,
        frontier.clone(),
        || loop {
            match reader.next_record() {
                Ok(Some((k, v))) => return Ok(Some((k.to_vec(), v.to_vec()))),
                Ok(None) => {}
                Err(e) => {
                    failed = Some(in_file(e));
                    return Err(letus_core::Error::Cancelled);
                }
            }
            match read_chunk(&mut reader) {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => {
                    failed = Some(e);
                    return Err(letus_core::Error::Cancelled);
                }
            }
        },
    );
    let store = match loaded {
        Ok(store) => store,
        Err(e) => {
            if let Some(f) = failed {
                return Err(f);
            }
            // An export that does not verify is the reason to report (a cut one ends its pairs early). Its
            // records are consumed as they are read, so that the rest of a large file is never held at once.
            loop {
                match reader.next_record() {
                    Ok(Some(_)) => continue,
                    Ok(None) => {}
                    Err(v) => return Err(format!("the export does not verify: {v}")),
                }
                if !read_chunk(&mut reader)? {
                    break;
                }
            }
            if let Err(v) = reader.finish(&trusted) {
                return Err(format!("the export does not verify: {v}"));
            }
            return Err(e.to_string());
        }
    };
    // The rest of the file (the trailer) is read before the verdict.
    while read_chunk(&mut reader)? {}
    let summary = reader
        .finish(&trusted)
        .map_err(|e| format!("the export does not verify: {e}"))?;
    let digest = store
        .digest(header.tid, header.version)
        .map_err(|e| e.to_string())?;
    let root = digest.root;
    if root != trusted {
        return Err(format!(
            "imported state has root {root}, expected {trusted}"
        ));
    }
    if let Some(h) = trusted_history {
        if digest.history_root != h {
            return Err(format!(
                "the history frontier gives history_root {}, expected {h}",
                digest.history_root
            ));
        }
    }
    store.close().map_err(|e| e.to_string())?;
    sync_dir(tmp)?;
    Ok((summary, root, digest))
}

/// `letus snapshot`: take a verified snapshot from running nodes into a directory, or a store from one.
#[derive(clap::Args)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(clap::Subcommand)]
enum SnapshotCommand {
    /// Fetch the manifest, chunks and history frontier of one version into DIR, verifying each chunk as it
    /// arrives (run it again to resume: verified chunks are not fetched again).
    Fetch {
        /// Where the snapshot goes.
        #[arg(long)]
        out: PathBuf,
        /// The sources (`--join URL`, repeatable), version and trust, as for `letus serve --join`.
        #[command(flatten)]
        join: crate::serve::JoinFlags,
    },
    /// Create the store of a new node from a fetched snapshot (each chunk checked to be its manifest entry's, the
    /// whole state's root against the trusted one; a damaged chunk file is then found, named and removed).
    Import {
        /// The directory `letus snapshot fetch` wrote.
        #[arg(long)]
        dir: PathBuf,
        /// Data directory of the new node (must not hold a store yet).
        #[arg(long)]
        data: PathBuf,
    },
}

pub fn snapshot(a: SnapshotArgs) -> Result<ExitCode, String> {
    match a.command {
        SnapshotCommand::Fetch { out, join } => {
            let (cfg, _) = join
                .resolve()?
                .ok_or("give at least one source with --join URL")?;
            let (t, r) = letus_node::join::fetch(&out, &cfg).map_err(|e| e.to_string())?;
            for f in &r.failures {
                eprintln!("warning: {f}");
            }
            println!(
                "{}",
                serde_json::json!({
                    "tid": t.tid, "version": t.version, "root": t.root, "history_root": t.history_root,
                    "chunks": r.chunks, "pairs": r.pairs, "fetched": r.fetched, "reused": r.reused,
                    "bytes": r.bytes, "failures": r.failures.len(), "seconds": r.seconds,
                })
            );
            Ok(ExitCode::SUCCESS)
        }
        SnapshotCommand::Import { dir, data } => {
            let (t, r) = letus_node::join::import(&dir, &data, Options::default())
                .map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::json!({
                    "tid": t.tid, "version": t.version, "root": t.root, "history_root": t.history_root,
                    "pairs": r.pairs, "seconds": r.seconds,
                    "pairs_per_second": r.pairs as f64 / r.seconds.max(1e-9),
                })
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
