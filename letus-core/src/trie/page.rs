//! A page of the DMM-Trie (two levels: the node at depth `2j` and its children at `2j+1`, with the nodes at
//! `2j+2` as leaves or references to child pages) and its two stored forms, the BasePage and the DeltaPage.
//!
//! ## Slots
//! A page is stored as a sparse map of **slots**: slot 0 is the page root when it is a leaf (root page only),
//! slot `1 + c` is child `c` when it is a leaf, slot `17 + 16c + g` is grandchild `(c, g)` (a leaf or a child-page
//! reference). Branches are implied: child `c` is a branch iff some grandchild `(c, _)` is non-empty, and the
//! page root is a branch iff some child is non-empty. Hashes of inline branches are recomputed on load.
//!
//! ## Format (inside an LSVPS page record, which carries its own checksum)
//! ```text
//! BasePage:  u8 1 (format) | u8 0 (base)  | u64 version | u32 since_base | u16 n | n × slot_entry
//! DeltaPage: u8 1 (format) | u8 1 (delta) | u64 first_version | u32 since_base | u8 has_prev
//!            | [u64 prev_version | u8 prev_kind] | u16 entries | entries × (u64 version | u16 n | n × slot_entry)
//! slot_entry: u16 slot | u8 tag | payload       tag 0 empty (deltas only) | tag 1 leaf (88 bytes) | tag 2 page (40 bytes)
//! leaf:  path[32] | value_hash[32] | u64 version | u32 file_id | u64 offset | u32 len
//! page:  hash[32] | u64 version
//! ```
//! `since_base` counts slot updates since the page's last BasePage, so that a reopened store continues the
//! Base/Delta schedule where it stopped.

use std::collections::BTreeMap;
use std::sync::Arc;

use letus_verify::{Hash, KeyPath, Version};

use super::node::{Leaf, Node};
use crate::lsvps::{PageId, PageKind};
use crate::vdls::Location;

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// A key's leaf.
    Leaf(Leaf),
    /// A child page.
    Page {
        /// Its root hash.
        hash: Hash,
        /// Its version.
        version: Version,
    },
}

/// A page's slots.
pub type Slots = BTreeMap<u16, Cell>;

/// A slot change: the new content, `None` for emptied.
pub type Change = (u16, Option<Cell>);

const FORMAT: u8 = 1;
const LEAF_LEN: usize = 32 + 32 + 8 + 4 + 8 + 4;
const PAGE_LEN: usize = 32 + 8;

/// A decoded page at one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Which page.
    pub id: PageId,
    /// The version of the newest data in the page (the version it was loaded at).
    pub version: Version,
    /// The node at the page's depth.
    pub root: Node,
    /// The newest stored record of this page at `version`, if the page was loaded from storage.
    pub head: Option<Head>,
    /// Rough memory footprint, computed once for the cache's weigher.
    pub weight: u32,
}

/// The stored record a page was loaded from, which the next update chains to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The record's key version (a BasePage's version or a DeltaPage's first version).
    pub key_version: Version,
    /// Base or Delta.
    pub kind: PageKind,
    /// Slot updates since the last BasePage, including this record's.
    pub since_base: u32,
    /// Slot updates in this record when it is a DeltaPage.
    pub delta_updates: u32,
    /// Stored records from this one back to its BasePage, both included: what a load of the page reads.
    pub chain: u32,
}

impl Page {
    /// A page, with its weight computed.
    pub fn new(id: PageId, version: Version, root: Node, head: Option<Head>) -> Page {
        let weight = Page::weight_of(&root);
        Page::with_weight(id, version, root, head, weight)
    }

    /// The cache weight of a page whose root is `root`.
    pub fn weight_of(root: &Node) -> u32 {
        (std::mem::size_of::<Page>() + root.heap_bytes()).min(u32::MAX as usize) as u32
    }

    /// A page whose weight [`Page::weight_of`] was computed beforehand (on another thread).
    pub fn with_weight(
        id: PageId,
        version: Version,
        root: Node,
        head: Option<Head>,
        weight: u32,
    ) -> Page {
        Page {
            id,
            version,
            root,
            head,
            weight,
        }
    }
}

/// The slots of a page whose root node is `root`.
pub fn slots(root: &Node) -> Slots {
    let mut s = Slots::new();
    match root {
        Node::Leaf(l) => {
            s.insert(0, Cell::Leaf(**l));
        }
        Node::Branch(b) => {
            for (c, child) in b.children.iter().enumerate() {
                match child {
                    Node::Leaf(l) => {
                        s.insert(1 + c as u16, Cell::Leaf(**l));
                    }
                    Node::Branch(cb) => {
                        for (g, gc) in cb.children.iter().enumerate() {
                            let slot = 17 + 16 * c as u16 + g as u16;
                            match gc {
                                Node::Leaf(l) => {
                                    s.insert(slot, Cell::Leaf(**l));
                                }
                                Node::Page { hash, version } => {
                                    s.insert(
                                        slot,
                                        Cell::Page {
                                            hash: *hash,
                                            version: *version,
                                        },
                                    );
                                }
                                // The page shape never puts an inline branch at depth 2j+2.
                                Node::Branch(_) | Node::Empty => {}
                            }
                        }
                    }
                    Node::Page { .. } | Node::Empty => {}
                }
            }
        }
        Node::Empty | Node::Page { .. } => {}
    }
    s
}

/// Rebuilds the root node of page `id` from its slots; `Err` names what is inconsistent.
pub fn from_slots(id: &PageId, slots: &Slots) -> Result<Node, &'static str> {
    if let Some(Cell::Leaf(l)) = slots.get(&0) {
        if slots.len() != 1 || id.depth != 0 {
            return Err("a page root leaf shares its page with other slots");
        }
        return Ok(Node::Leaf(Arc::new(*l)));
    }
    let mut children: [Node; 16] = Default::default();
    let mut grand: [[Node; 16]; 16] = Default::default();
    let mut has_grand = [false; 16];
    for (&slot, cell) in slots {
        match slot {
            0 => return Err("slot 0 holds a page reference"),
            1..=16 => match cell {
                Cell::Leaf(l) => children[usize::from(slot - 1)] = Node::Leaf(Arc::new(*l)),
                Cell::Page { .. } => return Err("a child slot holds a page reference"),
            },
            17..=272 => {
                let i = usize::from(slot - 17);
                let (c, g) = (i / 16, i % 16);
                has_grand[c] = true;
                grand[c][g] = match cell {
                    Cell::Leaf(l) => Node::Leaf(Arc::new(*l)),
                    Cell::Page { hash, version } => Node::Page {
                        hash: *hash,
                        version: *version,
                    },
                };
            }
            _ => return Err("slot number out of range"),
        }
    }
    for c in 0..16 {
        if has_grand[c] {
            if !children[c].is_empty() {
                return Err("a child is both a leaf and a branch");
            }
            let g = std::mem::take(&mut grand[c]);
            children[c] = Node::branch(g);
        }
    }
    if children.iter().all(Node::is_empty) {
        if id.depth != 0 {
            return Err("a non-root page with no content");
        }
        return Ok(Node::Empty);
    }
    // Node::branch computes each branch's hash and version from its children, bottom-up.
    Ok(Node::branch(children))
}

/// The changes that turn `old` into `new`.
pub fn diff(old: &Slots, new: &Slots) -> Vec<Change> {
    let mut out = Vec::new();
    for (slot, cell) in new {
        if old.get(slot) != Some(cell) {
            out.push((*slot, Some(*cell)));
        }
    }
    for slot in old.keys() {
        if !new.contains_key(slot) {
            out.push((*slot, None));
        }
    }
    out.sort_by_key(|(s, _)| *s);
    out
}

/// The changes that turn the page whose root is `old` into the page whose root is `new`, found by walking both
/// trees and skipping shared (unchanged) nodes, so the cost follows the changes rather than the page size.
pub fn diff_nodes(old: &Node, new: &Node) -> Vec<Change> {
    let (Node::Branch(a), Node::Branch(b)) = (old, new) else {
        // A root page that is or was empty or a single leaf: small, compare whole slot maps.
        return diff(&slots(old), &slots(new));
    };
    let mut out = Vec::new();
    if Arc::ptr_eq(a, b) {
        return out;
    }
    for c in 0..16 {
        let (o, n) = (&a.children[c], &b.children[c]);
        if same(o, n) {
            continue;
        }
        match (o, n) {
            (Node::Branch(x), Node::Branch(y)) => {
                for g in 0..16 {
                    let (go, gn) = (&x.children[g], &y.children[g]);
                    if !same(go, gn) {
                        out.push((17 + 16 * c as u16 + g as u16, cell(gn)));
                    }
                }
            }
            _ => {
                // The child changed kind (leaf, branch, empty): rewrite its slots.
                let mut before = Slots::new();
                child_slots(c, o, &mut before);
                let mut after = Slots::new();
                child_slots(c, n, &mut after);
                out.extend(diff(&before, &after));
            }
        }
    }
    out.sort_by_key(|(s, _)| *s);
    out
}

/// Whether two nodes are the same without a deep comparison: shared, or equal small values.
fn same(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Empty, Node::Empty) => true,
        (Node::Leaf(x), Node::Leaf(y)) => Arc::ptr_eq(x, y) || x == y,
        (Node::Branch(x), Node::Branch(y)) => Arc::ptr_eq(x, y),
        (
            Node::Page {
                hash: h1,
                version: v1,
            },
            Node::Page {
                hash: h2,
                version: v2,
            },
        ) => h1 == h2 && v1 == v2,
        _ => false,
    }
}

fn cell(n: &Node) -> Option<Cell> {
    match n {
        Node::Leaf(l) => Some(Cell::Leaf(**l)),
        Node::Page { hash, version } => Some(Cell::Page {
            hash: *hash,
            version: *version,
        }),
        Node::Empty | Node::Branch(_) => None,
    }
}

fn child_slots(c: usize, child: &Node, out: &mut Slots) {
    match child {
        Node::Leaf(l) => {
            out.insert(1 + c as u16, Cell::Leaf(**l));
        }
        Node::Branch(b) => {
            for (g, gc) in b.children.iter().enumerate() {
                if let Some(x) = cell(gc) {
                    out.insert(17 + 16 * c as u16 + g as u16, x);
                }
            }
        }
        Node::Empty | Node::Page { .. } => {}
    }
}

/// Applies changes to slots.
pub fn apply(slots: &mut Slots, changes: &[Change]) {
    for (slot, cell) in changes {
        match cell {
            Some(c) => {
                slots.insert(*slot, *c);
            }
            None => {
                slots.remove(slot);
            }
        }
    }
}

/// A stored page record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A full page.
    Base {
        /// The page version.
        version: Version,
        /// Updates since the previous base (0 for a base itself; kept for format symmetry).
        since_base: u32,
        /// All slots.
        slots: Slots,
    },
    /// Changes since the previous record.
    Delta {
        /// Version of the first entry (the record's key version).
        first_version: Version,
        /// Slot updates since the last base, including this record's entries.
        since_base: u32,
        /// The previous record of this page (key version and kind); `None` never happens for a stored delta but
        /// is representable so that decoding can report it.
        prev: Option<(Version, PageKind)>,
        /// Per-version changes, in increasing version order.
        entries: Vec<(Version, Vec<Change>)>,
    },
}

/// The bytes of a DeltaPage record, from borrowed entries (the store encodes its growing active delta at every
/// commit without copying the entries into a [`Record`]).
pub fn encode_delta(
    first_version: Version,
    since_base: u32,
    prev: Option<(Version, PageKind)>,
    entries: &[(Version, Vec<Change>)],
) -> Vec<u8> {
    let cells: usize = entries.iter().map(|(_, c)| c.len() + 1).sum();
    let mut out = Vec::with_capacity(32 + cells * (3 + LEAF_LEN));
    out.push(FORMAT);
    encode_delta_into(&mut out, first_version, since_base, prev, entries);
    out
}

fn encode_delta_into(
    out: &mut Vec<u8>,
    first_version: Version,
    since_base: u32,
    prev: Option<(Version, PageKind)>,
    entries: &[(Version, Vec<Change>)],
) {
    out.push(1);
    out.extend_from_slice(&first_version.to_le_bytes());
    out.extend_from_slice(&since_base.to_le_bytes());
    match prev {
        Some((v, k)) => {
            out.push(1);
            out.extend_from_slice(&v.to_le_bytes());
            out.push(k as u8);
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (v, changes) in entries {
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&(changes.len() as u16).to_le_bytes());
        for (s, c) in changes {
            put_cell(out, *s, c.as_ref());
        }
    }
}

fn put_cell(out: &mut Vec<u8>, slot: u16, cell: Option<&Cell>) {
    out.extend_from_slice(&slot.to_le_bytes());
    match cell {
        None => out.push(0),
        Some(Cell::Leaf(l)) => {
            out.push(1);
            out.extend_from_slice(&l.path.0);
            out.extend_from_slice(&l.value_hash.0);
            out.extend_from_slice(&l.version.to_le_bytes());
            out.extend_from_slice(&l.loc.file_id.to_le_bytes());
            out.extend_from_slice(&l.loc.offset.to_le_bytes());
            out.extend_from_slice(&l.loc.len.to_le_bytes());
        }
        Some(Cell::Page { hash, version }) => {
            out.push(2);
            out.extend_from_slice(&hash.0);
            out.extend_from_slice(&version.to_le_bytes());
        }
    }
}

impl Record {
    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let cells = match self {
            Record::Base { slots, .. } => slots.len(),
            Record::Delta { entries, .. } => entries.iter().map(|(_, c)| c.len() + 1).sum(),
        };
        let mut out = Vec::with_capacity(32 + cells * (3 + LEAF_LEN));
        out.push(FORMAT);
        match self {
            Record::Base {
                version,
                since_base,
                slots,
            } => {
                out.push(0);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&since_base.to_le_bytes());
                out.extend_from_slice(&(slots.len() as u16).to_le_bytes());
                for (s, c) in slots {
                    put_cell(&mut out, *s, Some(c));
                }
            }
            Record::Delta {
                first_version,
                since_base,
                prev,
                entries,
            } => encode_delta_into(&mut out, *first_version, *since_base, *prev, entries),
        }
        out
    }

    /// Decodes a record; `Err` says what is malformed (the caller adds file and offset).
    pub fn decode(b: &[u8]) -> Result<Record, &'static str> {
        let mut r = Cursor { b };
        if r.u8()? != FORMAT {
            return Err("unknown page record format");
        }
        match r.u8()? {
            0 => {
                let version = r.u64()?;
                let since_base = r.u32()?;
                let n = r.u16()?;
                let mut slots = Slots::new();
                for _ in 0..n {
                    let (s, c) = r.cell()?;
                    slots.insert(s, c.ok_or("empty slot in a base page")?);
                }
                r.end()?;
                Ok(Record::Base {
                    version,
                    since_base,
                    slots,
                })
            }
            1 => {
                let first_version = r.u64()?;
                let since_base = r.u32()?;
                let prev = match r.u8()? {
                    0 => None,
                    1 => {
                        let v = r.u64()?;
                        let k = match r.u8()? {
                            0 => PageKind::Base,
                            1 => PageKind::Delta,
                            _ => return Err("unknown previous record kind"),
                        };
                        Some((v, k))
                    }
                    _ => return Err("bad previous-record flag"),
                };
                let n = r.u16()?;
                let mut entries = Vec::with_capacity(usize::from(n).min(1024));
                let mut last = None;
                for _ in 0..n {
                    let v = r.u64()?;
                    if last.is_some_and(|l| v <= l) || v < first_version {
                        return Err("delta entries out of version order");
                    }
                    last = Some(v);
                    let m = r.u16()?;
                    let mut changes = Vec::with_capacity(usize::from(m).min(512));
                    for _ in 0..m {
                        changes.push(r.cell()?);
                    }
                    entries.push((v, changes));
                }
                r.end()?;
                Ok(Record::Delta {
                    first_version,
                    since_base,
                    prev,
                    entries,
                })
            }
            _ => Err("unknown page record kind"),
        }
    }
}

struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.b.len() < n {
            return Err("page record ends early");
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| "page record ends early")
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.arr::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn end(&self) -> Result<(), &'static str> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes in page record")
        }
    }
    fn cell(&mut self) -> Result<(u16, Option<Cell>), &'static str> {
        let slot = self.u16()?;
        if slot > 272 {
            return Err("slot number out of range");
        }
        let cell = match self.u8()? {
            0 => None,
            1 => {
                let b = self.take(LEAF_LEN)?;
                let mut c = Cursor { b };
                let path = KeyPath(c.arr()?);
                let value_hash = Hash(c.arr()?);
                let version = c.u64()?;
                let loc = Location {
                    file_id: c.u32()?,
                    offset: c.u64()?,
                    len: c.u32()?,
                };
                Some(Cell::Leaf(Leaf::new(path, value_hash, version, loc)))
            }
            2 => {
                let b = self.take(PAGE_LEN)?;
                let mut c = Cursor { b };
                Some(Cell::Page {
                    hash: Hash(c.arr()?),
                    version: c.u64()?,
                })
            }
            _ => return Err("unknown slot tag"),
        };
        Ok((slot, cell))
    }
}
