//! Reads for a walk that visits index files in key order: a prune's base-file walk (`store/prune.rs`) reads,
//! level by level and in prefix order, the newest record of tens of thousands of pages, and in each file those
//! records come in the order they are stored. While a [`Sequential`] scope is open on a thread, that thread's
//! index-file reads change in two ways:
//! - a page record (or a chain read with it) inside the page region is served from a window of the file read
//!   ahead, [`WINDOW`] bytes in one read, instead of one read per record;
//! - an index-block lookup reuses the block it used last in that file when the key falls in it, and a block not
//!   in the shared cache is read without being added to it: the files a prune replaces are about to go, and their
//!   blocks would evict the ones commits use.
//!
//! What is read does not change, only how: every record is still checked against its index entry's length and
//! CRC, and a read outside a window (a key out of order) refills it. Index files are immutable and a cache id
//! names one file while the block cache lives, so a window is never stale. The windows of a scope hold at most
//! [`MAX_WINDOW_BYTES`]; the scope's memory goes when it ends.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use super::index_file::IndexBlock;

/// Bytes read ahead at a time in one file.
pub(crate) const WINDOW: u64 = 128 << 10;

/// The most window bytes a scope holds over all files (the least recently used window goes first).
const MAX_WINDOW_BYTES: usize = 32 << 20;

struct Window {
    file: u64,
    at: u64,
    bytes: Vec<u8>,
    used: u64,
}

#[derive(Default)]
struct State {
    windows: Vec<Window>,
    /// The last index block used in each file: `(file, block number, block)`.
    blocks: Vec<(u64, usize, Arc<IndexBlock>)>,
    tick: u64,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// An open scope of sequential reads on this thread (see the module). Not `Send`: it belongs to the thread that
/// opened it. Scopes do not nest: opening one while one is open keeps the outer one's windows.
pub(crate) struct Sequential {
    outer: bool,
    _thread: PhantomData<*const ()>,
}

impl Sequential {
    pub(crate) fn begin() -> Sequential {
        let outer = STATE.with(|s| {
            let mut s = s.borrow_mut();
            if s.is_some() {
                return false;
            }
            *s = Some(State::default());
            true
        });
        Sequential {
            outer,
            _thread: PhantomData,
        }
    }
}

impl Drop for Sequential {
    fn drop(&mut self) {
        if self.outer {
            STATE.with(|s| *s.borrow_mut() = None);
        }
    }
}

/// Whether a scope is open on this thread.
pub(crate) fn active() -> bool {
    STATE.with(|s| s.borrow().is_some())
}

/// The bytes `[lo, hi)` of file `file`, from its window, refilled from `lo` with `read(at, buf)` when they are not
/// in it. `None` when no scope is open, or the span is larger than a window or reaches past `region_end` (the
/// caller reads it itself).
pub(crate) fn read_span<E>(
    file: u64,
    lo: u64,
    hi: u64,
    region_end: u64,
    read: impl FnOnce(u64, &mut [u8]) -> Result<(), E>,
) -> Option<Result<Vec<u8>, E>> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let st = s.as_mut()?;
        if hi < lo || hi - lo > WINDOW || hi > region_end {
            return None;
        }
        st.tick += 1;
        let tick = st.tick;
        let covers = |w: &Window| w.file == file && w.at <= lo && hi <= w.at + w.bytes.len() as u64;
        let i = match st.windows.iter().position(covers) {
            Some(i) => i,
            None => {
                let len = usize::try_from(WINDOW.min(region_end - lo)).unwrap_or(0);
                let mut bytes = vec![0u8; len];
                if let Err(e) = read(lo, &mut bytes) {
                    return Some(Err(e));
                }
                st.windows.retain(|w| w.file != file);
                let mut held: usize = st.windows.iter().map(|w| w.bytes.len()).sum();
                while held + len > MAX_WINDOW_BYTES && !st.windows.is_empty() {
                    let oldest = st
                        .windows
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, w)| w.used)
                        .map_or(0, |(i, _)| i);
                    held -= st.windows.swap_remove(oldest).bytes.len();
                }
                st.windows.push(Window {
                    file,
                    at: lo,
                    bytes,
                    used: tick,
                });
                st.windows.len() - 1
            }
        };
        let w = &mut st.windows[i];
        w.used = tick;
        let from = usize::try_from(lo - w.at).ok()?;
        let to = usize::try_from(hi - w.at).ok()?;
        Some(Ok(w.bytes[from..to].to_vec()))
    })
}

/// The block this scope used last in `file`, if it is block number `i`.
pub(crate) fn last_block(file: u64, i: usize) -> Option<Arc<IndexBlock>> {
    STATE.with(|s| {
        let s = s.borrow();
        s.as_ref()?
            .blocks
            .iter()
            .find(|(f, n, _)| *f == file && *n == i)
            .map(|(_, _, b)| b.clone())
    })
}

/// The block number this scope used last in `file`.
pub(crate) fn last_block_number(file: u64) -> Option<usize> {
    STATE.with(|s| {
        let s = s.borrow();
        s.as_ref()?
            .blocks
            .iter()
            .find(|(f, _, _)| *f == file)
            .map(|(_, n, _)| *n)
    })
}

/// Records block number `i` of `file` as the one used last there.
pub(crate) fn remember_block(file: u64, i: usize, block: &Arc<IndexBlock>) {
    STATE.with(|s| {
        if let Some(st) = s.borrow_mut().as_mut() {
            match st.blocks.iter_mut().find(|(f, _, _)| *f == file) {
                Some(slot) => *slot = (file, i, block.clone()),
                None => st.blocks.push((file, i, block.clone())),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_bytes(at: u64, buf: &mut [u8]) -> Result<(), ()> {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = ((at + i as u64) % 251) as u8;
        }
        Ok(())
    }

    fn expect(lo: u64, hi: u64) -> Vec<u8> {
        (lo..hi).map(|x| (x % 251) as u8).collect()
    }

    #[test]
    fn spans_are_served_from_windows_and_refilled_out_of_order() {
        assert!(read_span(1, 0, 10, 1000, file_bytes).is_none(), "no scope");
        let scope = Sequential::begin();
        assert!(active());
        let reads = std::cell::Cell::new(0);
        let counted = |at: u64, buf: &mut [u8]| {
            reads.set(reads.get() + 1);
            file_bytes(at, buf)
        };
        let end = 3 * WINDOW;
        assert_eq!(
            read_span(1, 16, 100, end, counted).unwrap().unwrap(),
            expect(16, 100)
        );
        assert_eq!(
            read_span(1, 100, 4000, end, counted).unwrap().unwrap(),
            expect(100, 4000)
        );
        assert_eq!(reads.get(), 1, "the second span came from the window");
        // Another file has its own window.
        assert_eq!(
            read_span(2, 0, 8, end, counted).unwrap().unwrap(),
            expect(0, 8)
        );
        assert_eq!(reads.get(), 2);
        // Past the window, and back before it: each refills.
        let far = WINDOW + 50;
        assert_eq!(
            read_span(1, far, far + 10, end, counted).unwrap().unwrap(),
            expect(far, far + 10)
        );
        assert_eq!(
            read_span(1, 20, 30, end, counted).unwrap().unwrap(),
            expect(20, 30)
        );
        assert_eq!(reads.get(), 4);
        // A window stops at the region's end; spans past it or larger than a window are the caller's.
        assert_eq!(
            read_span(3, end - 5, end, end, counted).unwrap().unwrap(),
            expect(end - 5, end)
        );
        assert!(read_span(3, end - 5, end + 1, end, counted).is_none());
        assert!(read_span(3, 0, WINDOW + 1, end, counted).is_none());
        // A failed read is returned, and nothing is kept of it.
        let failing = |_: u64, _: &mut [u8]| Err(());
        assert_eq!(read_span(4, 0, 10, end, failing), Some(Err(())));
        assert_eq!(
            read_span(4, 0, 10, end, counted).unwrap().unwrap(),
            expect(0, 10)
        );
        drop(scope);
        assert!(!active());
        assert!(read_span(1, 16, 100, end, file_bytes).is_none());
    }

    #[test]
    fn windows_are_bounded_in_bytes() {
        let _scope = Sequential::begin();
        let files = (MAX_WINDOW_BYTES as u64 / WINDOW) + 8;
        for f in 0..files {
            read_span(f, 0, 10, 10 * WINDOW, file_bytes)
                .unwrap()
                .unwrap();
        }
        let held: usize = STATE.with(|s| {
            s.borrow()
                .as_ref()
                .unwrap()
                .windows
                .iter()
                .map(|w| w.bytes.len())
                .sum()
        });
        assert!(held <= MAX_WINDOW_BYTES, "{held}");
        // The newest are kept, the oldest went.
        let reads = std::cell::Cell::new(0);
        let counted = |at: u64, buf: &mut [u8]| {
            reads.set(reads.get() + 1);
            file_bytes(at, buf)
        };
        read_span(files - 1, 0, 10, 10 * WINDOW, counted)
            .unwrap()
            .unwrap();
        assert_eq!(reads.get(), 0);
        read_span(0, 0, 10, 10 * WINDOW, counted).unwrap().unwrap();
        assert_eq!(reads.get(), 1);
    }

    #[test]
    fn nested_scopes_keep_the_outer_one() {
        let outer = Sequential::begin();
        {
            let _inner = Sequential::begin();
        }
        assert!(
            active(),
            "the inner scope's end does not close the outer one"
        );
        drop(outer);
        assert!(!active());
    }
}
