//! LSVPS, the Log-Structured Versioned Page Store: the pages of the DMM-Trie stored as BasePages (full page
//! checkpoints) and DeltaPages (changes since), keyed by `K_P = (tid, page id, version, kind)`.
//!
//! - [`PageId`], [`PageKind`], [`PageKey`]: the key and its fixed 46-byte encoding; the key order puts all
//!   records of one page together, by version, so "the page as of version V" is a floor lookup.
//! - [`MemIndexTable`]: records created in memory, not yet flushed.
//! - [`IndexFileWriter`] / [`IndexFile`]: one immutable index file (page blocks, index blocks, a lookup block kept
//!   in memory, a footer), written once by a flush and never modified. Every record of file `k` has its version
//!   in `(max_version of file k-1, max_version of file k]`, so the engine picks the one file to search from the
//!   [`FileMeta`] of each file. A file may be replaced whole by a *consolidated* generation of itself (the same
//!   records, plus a BasePage under every DeltaPage chain that began in an older file; see the store's
//!   `consolidate` module), under a new name ([`index_file_name`]).
//! - [`BlockCache`]: decoded index blocks shared by all files, bounded in bytes.
//! - [`Sequential`]: a scope in which one thread's reads of index files, made in key order, read ahead.
//!
//! Page records are opaque byte strings here; the trie module encodes them. The byte layout, the checksums and the
//! crash argument are in `letus-core/FORMAT.md §2`.

mod block_cache;
mod index_file;
mod mem_index;
mod page_key;
mod sequential;

#[cfg(test)]
mod tests;

pub use block_cache::{BlockCache, MAX_OPEN_FILES};
pub(crate) use index_file::IndexEntry;
pub use index_file::{FileMeta, IndexFile, IndexFileWriter};
// The sizes and constants the format tests check (FORMAT.md §2 is normative for them).
#[cfg(test)]
pub use index_file::{
    FOOTER_LEN, HEADER_LEN, MAX_ENTRIES_PER_BLOCK, MAX_RECORD_LEN, PAGE_BLOCK_HEADER_LEN,
};
pub use mem_index::MemIndexTable;
#[cfg(test)]
pub use mem_index::ENTRY_OVERHEAD;
pub use page_key::{PageId, PageKey, PageKind, MAX_PAGE_DEPTH};
pub(crate) use sequential::Sequential;

/// The name of generation `generation` of index file `no`: `NNNNNN.idx` for the one a flush writes (generation
/// 0), `NNNNNN.G.idx` for a consolidated one (FORMAT.md §2.8).
pub fn index_file_name(no: u64, generation: u32) -> String {
    match generation {
        0 => format!("{no:06}.idx"),
        g => format!("{no:06}.{g}.idx"),
    }
}

/// The number and generation of an index file's name ([`index_file_name`]); `None` for any other name.
pub fn parse_index_file_name(name: &str) -> Option<(u64, u32)> {
    let stem = name.strip_suffix(".idx")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match stem.split_once('.') {
        None if digits(stem) => Some((stem.parse().ok()?, 0)),
        Some((n, g)) if digits(n) && digits(g) => {
            let g: u32 = g.parse().ok()?;
            (g > 0).then_some(())?;
            Some((n.parse().ok()?, g))
        }
        _ => None,
    }
}

/// The key of index file `no`'s generation `generation` in the [`BlockCache`]: distinct for every generation, so
/// that a consolidated file never sees the blocks or the descriptor of the file it replaces (file numbers stay
/// below 2^40: a flush per version would take longer than any store lives to reach them).
pub fn cache_id(no: u64, generation: u32) -> u64 {
    (u64::from(generation) << 40) | (no & ((1 << 40) - 1))
}

/// Page depths below which a cold index file keeps its records on the hot disk ([`tier_pins`]) by default: 2,
/// the root page only. (Depth 4, the root and the 256 pages below it, keeps about a third of an index file's bytes
/// at 1M keys: every block touches every depth-2 page.)
pub const TIER_PIN_DEPTH: u8 = 2;

/// The ranges of index file `path` (on `fs`) that stay on the hot disk when the file moves to the cold tier: its
/// index and the records of pages shallower than `depth` (see [`IndexFile::hot_ranges`]). What
/// [`crate::storage::tiered::index_pins`], the default of [`crate::storage::tiered::TierConfig::pins`], calls
/// for `*.idx` files.
pub fn tier_pins(
    fs: &crate::storage::SharedStorage,
    path: &std::path::Path,
    depth: u8,
) -> crate::Result<Vec<(u64, u64)>> {
    let cache = std::sync::Arc::new(BlockCache::with_open_files(fs.clone(), 1 << 20, 1));
    let f = IndexFile::open(path, 0, std::sync::Arc::default(), cache)?;
    f.hot_ranges(depth)
}
