//! The in-memory table of page records not yet in an index file.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;

#[cfg(test)]
use super::index_file::FileMeta;
use super::index_file::{IndexFileWriter, MAX_RECORD_LEN};
use super::page_key::PageKey;

/// Bytes counted per record on top of its length, for the key and the map's bookkeeping. An estimate: it only has
/// to make [`MemIndexTable::bytes`] grow with the number of records, so that many tiny records still trigger a flush.
pub const ENTRY_OVERHEAD: usize = 96;

/// Page records created in memory and not yet flushed, in key order.
///
/// Answers [`MemIndexTable::floor`] and [`MemIndexTable::get`] exactly like [`super::IndexFile`] would after the
/// table is flushed with [`MemIndexTable::write_to`]. Records are `Arc<[u8]>` so that readers can hold one after
/// releasing whatever lock the engine keeps around the table.
///
/// Not synchronized itself: the engine wraps it (e.g. in a `RwLock`) and freezes it (`std::mem::take`) to flush.
#[derive(Clone, Default)]
pub struct MemIndexTable {
    map: BTreeMap<PageKey, Arc<[u8]>>,
    /// Sum over records of `len + ENTRY_OVERHEAD`.
    bytes: usize,
    /// Lowest and highest version inserted (replacement never removes a key, so this stays exact).
    versions: Option<(u64, u64)>,
}

impl MemIndexTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces the record of `key` (the active DeltaPage of a page grows until frozen, so replacing is
    /// expected). Returns the previous record.
    ///
    /// The record must be at most [`MAX_RECORD_LEN`] bytes and the page id valid ([`super::PageId::is_valid`]):
    /// [`IndexFileWriter::add`] rejects anything else when the table is flushed.
    pub fn insert(&mut self, key: PageKey, record: impl Into<Arc<[u8]>>) -> Option<Arc<[u8]>> {
        let record = record.into();
        debug_assert!(
            record.len() <= MAX_RECORD_LEN,
            "page record above MAX_RECORD_LEN"
        );
        debug_assert!(key.page.is_valid(), "invalid page id {:?}", key.page);
        self.bytes += record.len();
        self.versions = Some(match self.versions {
            None => (key.version, key.version),
            Some((lo, hi)) => (lo.min(key.version), hi.max(key.version)),
        });
        let old = self.map.insert(key, record);
        match &old {
            Some(old) => self.bytes -= old.len(),
            None => self.bytes += ENTRY_OVERHEAD,
        }
        old
    }

    /// The record stored under exactly `key`.
    pub fn get(&self, key: &PageKey) -> Option<Arc<[u8]>> {
        self.map.get(key).cloned()
    }

    /// The record with the greatest key `<= key` whose `(tid, page)` equal `key`'s: the newest record of that page
    /// at or below `key.version`. Same answer as [`super::IndexFile::floor`] on the flushed table.
    pub fn floor(&self, key: &PageKey) -> Option<(PageKey, Arc<[u8]>)> {
        let (k, v) = self
            .map
            .range((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        k.same_page(key).then(|| (*k, v.clone()))
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table holds no record.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Approximate memory held: record bytes plus [`ENTRY_OVERHEAD`] per record. The engine flushes when this
    /// passes its threshold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Lowest and highest version of the records, `None` when empty.
    #[cfg(test)]
    pub fn version_range(&self) -> Option<(u64, u64)> {
        self.versions
    }

    /// The records in key order (the order [`IndexFileWriter::add`] requires).
    #[cfg(test)]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&PageKey, &Arc<[u8]>)> + '_ {
        self.map.iter()
    }

    /// Adds every record to `writer`, in key order. The caller then calls [`IndexFileWriter::finish`] with a
    /// [`FileMeta`] whose `records` is [`MemIndexTable::len`].
    pub fn write_to(&self, writer: &mut IndexFileWriter) -> Result<()> {
        for (k, v) in &self.map {
            writer.add(k, v)?;
        }
        Ok(())
    }

    /// A [`FileMeta`] for flushing this table with the given version bounds and replay position (`records` filled
    /// in).
    #[cfg(test)]
    pub fn file_meta(
        &self,
        min_version: u64,
        max_version: u64,
        replay_from: (u32, u64),
    ) -> FileMeta {
        FileMeta {
            min_version,
            max_version,
            replay_from,
            records: self.map.len() as u64,
        }
    }

    /// Removes every record.
    #[cfg(test)]
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
        self.versions = None;
    }
}

impl std::fmt::Debug for MemIndexTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemIndexTable")
            .field("records", &self.map.len())
            .field("bytes", &self.bytes)
            .field("versions", &self.versions)
            .finish()
    }
}
