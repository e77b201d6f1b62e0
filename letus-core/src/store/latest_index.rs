//! The latest-value index: where the value record of a key's newest version is, so that a `get` at the latest
//! version costs one value read and no page walk, however little of the trie is cached.
//!
//! It is a cache, never the truth, and it holds nothing on disk: a fixed-size, 8-way set-associative table from a
//! fingerprint of `(tid, key path)` to a packed value-log [`Location`], filled by every commit (each Put's new
//! location, each Delete removing its key) and by reads that had to walk the trie. A reopened store starts it
//! empty.
//!
//! ## Why an entry can be trusted
//! Invariant: every location in the table is the newest record, as of the engine's latest version, of the key
//! *stored in that record*. Commits keep it: they run with the engine held exclusively and update or remove every
//! entry whose tag matches a key they write, before the version is published. Reads insert only what they read
//! at the engine's latest version, under the engine's read lock (no commit can publish meanwhile). A lookup may
//! still find the location of *another* key (two keys sharing a bucket and a tag, or a slot two readers wrote at
//! once, tag from one and location from the other); so the reader reads the record and uses it only when its
//! trie id and key are the ones asked for, and otherwise walks the trie. So a hit is always right, and a miss or
//! a mismatch costs what a `get` cost without the index.
//!
//! ## Filling
//! When the index is on, a store fills it after every open on a background thread ([`Filler`]): a walk of each
//! trie's newest state in path order, a batch of leaves per hold of the engine (taken after any writer waiting for
//! it, reading pages without filling the page cache), each batch at the engine's newest version while it holds
//! it, so that what it inserts is the newest (the same rule as a reader's insert). Commits go on meanwhile; gets
//! that miss walk the trie until the filler has passed their keys.
//!
//! ## Memory
//! 12 bytes a slot (a `u32` tag, a `u64` location), allocated zeroed, so untouched parts cost no RSS. The slots
//! are split into stripes, each behind its own lock (readers share a stripe; a reader inserting takes it alone
//! for a few nanoseconds; a commit, holding the engine exclusively, takes none).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};

use letus_verify::{KeyPath, TrieId};

use super::engine::ScanSource;
use super::snapshot::Shared;
use crate::error::{Error, Result};
use crate::metrics::Counters;
use crate::trie;
use crate::vdls::Location;

/// Slots per bucket. With 1.7 slots a key, 4 ways lost 6% of the keys to full buckets (10M keys, 192 MiB); 8 ways
/// keep the tags of a bucket in one 32-byte run.
const WAYS: usize = 8;
/// Most stripes (locks); a table gets fewer when it is small, so that every stripe has at least
/// `MIN_STRIPE_BUCKETS` buckets. A power of two, so that the stripe is the low bits of the fingerprint.
const MAX_STRIPES: usize = 1024;
const MIN_STRIPE_BUCKETS: usize = 64;
/// Bytes a slot costs.
pub(crate) const SLOT_BYTES: u64 = 4 + 8;

// A packed location: file id (20 bits) | offset (32 bits) | record length (12 bits). Records that do not fit
// (value-log files past 4 GiB, records past 4 KiB, more than a million files) are not indexed; their keys are
// read through the trie.
const LEN_BITS: u32 = 12;
const OFFSET_BITS: u32 = 32;
const FILE_BITS: u32 = 20;

fn pack(loc: Location) -> Option<u64> {
    let fits = u64::from(loc.len) < 1 << LEN_BITS
        && loc.offset < 1 << OFFSET_BITS
        && u64::from(loc.file_id) < 1 << FILE_BITS
        && loc.file_id != 0;
    fits.then(|| {
        u64::from(loc.file_id) << (OFFSET_BITS + LEN_BITS)
            | loc.offset << LEN_BITS
            | u64::from(loc.len)
    })
}

fn unpack(p: u64) -> Location {
    Location {
        file_id: (p >> (OFFSET_BITS + LEN_BITS)) as u32,
        offset: (p >> LEN_BITS) & ((1 << OFFSET_BITS) - 1),
        len: (p & ((1 << LEN_BITS) - 1)) as u32,
    }
}

/// Where a key lives in the table: its stripe, its bucket in the stripe and its tag (never 0, which marks an
/// empty slot). The key path is a BLAKE3 output, so its bytes are already uniform; the trie id is mixed in.
fn place(tid: TrieId, path: &KeyPath, stripes: usize, buckets: usize) -> (usize, usize, u32) {
    let b = &path.0;
    let word = |i: usize| {
        u64::from_le_bytes([
            b[i],
            b[i + 1],
            b[i + 2],
            b[i + 3],
            b[i + 4],
            b[i + 5],
            b[i + 6],
            b[i + 7],
        ])
    };
    let h = word(0) ^ u64::from(tid).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let stripe = (h as usize) & (stripes - 1);
    let bucket = ((u128::from(h >> 10) * buckets as u128) >> 54) as usize;
    let tag = (word(8) as u32 ^ tid.rotate_left(16)).max(1);
    (stripe, bucket, tag)
}

struct Stripe {
    tags: Vec<u32>,
    locs: Vec<u64>,
}

impl Stripe {
    fn bucket(&self, bucket: usize) -> std::ops::Range<usize> {
        bucket * WAYS..bucket * WAYS + WAYS
    }

    fn get(&self, bucket: usize, tag: u32) -> Option<u64> {
        self.bucket(bucket)
            .find(|&i| self.tags[i] == tag)
            .map(|i| self.locs[i])
    }

    /// Stores `loc` for `tag` in an empty slot of the bucket or, when it is full, in the slot the tag picks (so
    /// that keys sharing a bucket evict each other rather than always the same one).
    fn insert(&mut self, bucket: usize, tag: u32, loc: u64) {
        let r = self.bucket(bucket);
        let i = r
            .clone()
            .find(|&i| self.tags[i] == 0)
            .unwrap_or(r.start + (tag as usize >> 8) % WAYS);
        self.tags[i] = tag;
        self.locs[i] = loc;
    }
}

/// See the module documentation.
pub(crate) struct LatestIndex {
    stripes: Box<[RwLock<Stripe>]>,
    /// Buckets per stripe; 0 when the index is off.
    buckets: usize,
}

impl LatestIndex {
    /// A table of about `bytes` (rounded down to whole buckets of 8 slots in every stripe; below one bucket, the
    /// index is off and every lookup misses).
    pub(crate) fn new(bytes: u64) -> LatestIndex {
        let all = usize::try_from(bytes / (SLOT_BYTES * WAYS as u64)).unwrap_or(usize::MAX);
        let n = (all / MIN_STRIPE_BUCKETS).clamp(1, MAX_STRIPES);
        let n = if n.is_power_of_two() {
            n
        } else {
            n.next_power_of_two() / 2
        };
        let buckets = all / n;
        let slots = buckets * WAYS;
        let stripes = (0..if buckets == 0 { 0 } else { n })
            .map(|_| {
                RwLock::new(Stripe {
                    tags: vec![0; slots],
                    locs: vec![0; slots],
                })
            })
            .collect();
        LatestIndex { stripes, buckets }
    }

    /// Bytes the table was given (touched or not).
    pub(crate) fn bytes(&self) -> u64 {
        (self.buckets * WAYS * self.stripes.len()) as u64 * SLOT_BYTES
    }

    /// The location stored for `(tid, path)`, if any. It may belong to another key: the caller checks the
    /// record it reads.
    pub(crate) fn get(&self, tid: TrieId, path: &KeyPath) -> Option<Location> {
        if self.buckets == 0 {
            return None;
        }
        let (s, b, tag) = place(tid, path, self.stripes.len(), self.buckets);
        let stripe = self.stripes[s]
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        stripe.get(b, tag).map(unpack)
    }

    /// A reader's insert: `loc` is the newest record of `(tid, path)` at the engine's latest version, read while
    /// holding the engine (see the module documentation). Does nothing when an entry for the tag is there.
    pub(crate) fn remember(&self, tid: TrieId, path: &KeyPath, loc: Location) {
        let Some(p) = (self.buckets > 0).then(|| pack(loc)).flatten() else {
            return;
        };
        let (s, b, tag) = place(tid, path, self.stripes.len(), self.buckets);
        let mut stripe = self.stripes[s]
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if stripe.get(b, tag).is_none() {
            stripe.insert(b, tag, p);
        }
    }

    /// A commit's change of `(tid, path)`: its new record, or `None` for a delete. Every slot with the key's tag
    /// is updated or emptied, so no older location of the key survives anywhere in the table. Only with the
    /// engine held exclusively.
    pub(crate) fn set(&mut self, tid: TrieId, path: &KeyPath, loc: Option<Location>) {
        if self.buckets == 0 {
            return;
        }
        let (s, b, tag) = place(tid, path, self.stripes.len(), self.buckets);
        let stripe = self.stripes[s]
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let mut new = loc.and_then(pack);
        for i in stripe.bucket(b) {
            if stripe.tags[i] == tag {
                match new.take() {
                    Some(p) => stripe.locs[i] = p,
                    None => stripe.tags[i] = 0,
                }
            }
        }
        if let Some(p) = new {
            stripe.insert(b, tag, p);
        }
    }

    /// Empties the table (to measure cold reads).
    pub(crate) fn clear(&self) {
        for s in self.stripes.iter() {
            let mut s = s.write().unwrap_or_else(PoisonError::into_inner);
            s.tags.fill(0);
        }
    }
}

/// Leaves the filler inserts per hold of the engine.
const FILL_BATCH: usize = 4096;

/// The background thread that fills the latest-value index after an open (see the module documentation). It holds
/// the store weakly; the store stops and joins it when dropped.
pub(super) struct Filler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Filler {
    pub(super) fn start(shared: &Arc<Shared>) -> Result<Filler> {
        let weak = Arc::downgrade(shared);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = std::thread::Builder::new()
            .name("letus-latest-fill".into())
            .spawn(move || {
                // A walk that fails (a page that cannot be read) leaves the rest of the index to reads: it is a
                // cache, and the same read fails for the get that needs it, with its error.
                let _ = fill(&weak, &stopped);
            })
            .map_err(|e| Error::io("letus-latest-fill", e))?;
        Ok(Filler {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn fill(weak: &Weak<Shared>, stop: &AtomicBool) -> Result<()> {
    let tries: Vec<TrieId> = match weak.upgrade() {
        Some(shared) => shared.engine().tries.keys().copied().collect(),
        None => return Ok(()),
    };
    for tid in tries {
        let mut after: Option<KeyPath> = None;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let Some(shared) = weak.upgrade() else {
                return Ok(());
            };
            let e = shared.engine_after_writers();
            let Some(&latest) = e.versions.last() else {
                return Ok(());
            };
            // A trie without a root at the newest version (emptied, or never written) has nothing to index.
            let Ok(root) = e.root_page(tid, latest) else {
                break;
            };
            let mut n = 0usize;
            let mut last = None;
            let finished = trie::walk_slots_after(
                &ScanSource(&e),
                tid,
                root.id,
                root.cells(),
                after.as_ref(),
                &mut |leaf| {
                    e.latest.remember(tid, &leaf.path, leaf.loc);
                    last = Some(leaf.path);
                    n += 1;
                    Ok(n < FILL_BATCH)
                },
            )?;
            Counters::add(&e.counters.latest_index_filled, n as u64);
            if finished || last.is_none() {
                break;
            }
            after = last;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(i: u64) -> Location {
        Location {
            file_id: 1 + (i % 7) as u32,
            offset: 32 + i * 50,
            len: 50 + (i % 100) as u32,
        }
    }

    #[test]
    fn locations_round_trip_through_the_packing_and_those_too_large_are_refused() {
        for l in [
            loc(0),
            loc(12_345),
            Location {
                file_id: (1 << 20) - 1,
                offset: u32::MAX.into(),
                len: 4095,
            },
        ] {
            assert_eq!(unpack(pack(l).expect("fits")), l);
        }
        assert_eq!(
            pack(Location {
                file_id: 1 << 20,
                offset: 0,
                len: 1
            }),
            None
        );
        assert_eq!(
            pack(Location {
                file_id: 1,
                offset: 1 << 32,
                len: 1
            }),
            None
        );
        assert_eq!(
            pack(Location {
                file_id: 1,
                offset: 0,
                len: 4096
            }),
            None
        );
    }

    #[test]
    fn a_commit_replaces_and_removes_every_copy_and_readers_never_overwrite() {
        let mut ix = LatestIndex::new(1 << 20);
        let p = KeyPath::of(b"alice");
        assert_eq!(ix.get(0, &p), None);
        ix.remember(0, &p, loc(1));
        assert_eq!(ix.get(0, &p), Some(loc(1)));
        // A reader's insert never replaces an entry (it may be a commit's newer one).
        ix.remember(0, &p, loc(2));
        assert_eq!(ix.get(0, &p), Some(loc(1)));
        ix.set(0, &p, Some(loc(3)));
        assert_eq!(ix.get(0, &p), Some(loc(3)));
        assert_eq!(ix.get(1, &p), None, "another trie's key is another entry");
        ix.set(0, &p, None);
        assert_eq!(ix.get(0, &p), None);
        // Two slots with the same tag (two readers at once): a commit leaves one, with its location.
        let (s, b, tag) = place(0, &p, ix.stripes.len(), ix.buckets);
        {
            let st = ix.stripes[s].get_mut().unwrap();
            let r = st.bucket(b);
            st.tags[r.start] = tag;
            st.locs[r.start] = pack(loc(4)).unwrap();
            st.tags[r.start + 2] = tag;
            st.locs[r.start + 2] = pack(loc(5)).unwrap();
        }
        ix.set(0, &p, Some(loc(6)));
        let st = ix.stripes[s].read().unwrap();
        let found: Vec<u64> = st
            .bucket(b)
            .filter(|&i| st.tags[i] == tag)
            .map(|i| st.locs[i])
            .collect();
        assert_eq!(found, vec![pack(loc(6)).unwrap()]);
    }

    #[test]
    fn a_full_table_evicts_but_every_entry_it_keeps_is_the_newest() {
        // 8 stripes of 64 buckets: 4,096 slots for 20,000 keys.
        let mut ix = LatestIndex::new(SLOT_BYTES * 4096);
        assert_eq!((ix.stripes.len(), ix.buckets), (8, 64));
        assert_eq!(ix.bytes(), SLOT_BYTES * 4096);
        let paths: Vec<KeyPath> = (0..20_000u32)
            .map(|i| KeyPath::of(&i.to_le_bytes()))
            .collect();
        for round in 0..3u64 {
            for (i, p) in paths.iter().enumerate() {
                ix.set(7, p, Some(loc(round * 100_000 + i as u64)));
            }
        }
        let mut kept = 0;
        for (i, p) in paths.iter().enumerate() {
            if let Some(l) = ix.get(7, p) {
                // A colliding tag could give another key's location; with 31-bit tags none is expected here.
                assert_eq!(l, loc(200_000 + i as u64));
                kept += 1;
            }
        }
        assert!(kept > 3_000 && kept <= 4_096, "kept {kept}");
        ix.clear();
        assert!(paths.iter().all(|p| ix.get(7, p).is_none()));
    }

    #[test]
    fn below_one_bucket_the_index_is_off() {
        let mut ix = LatestIndex::new(SLOT_BYTES * 4 - 1);
        assert_eq!(ix.bytes(), 0);
        let p = KeyPath::of(b"k");
        ix.set(0, &p, Some(loc(1)));
        ix.remember(0, &p, loc(1));
        assert_eq!(ix.get(0, &p), None);
    }
}
