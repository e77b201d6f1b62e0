//! The DMM-Trie over pages: batch updates that produce new page versions, reads, proofs and leaf walks at any
//! version. Pages come from a [`PageSource`] (the store: page cache in front of LSVPS); this module never does I/O.

pub mod node;
pub mod page;

use std::sync::Arc;

use letus_verify::fold::{fold_range, Frontier};
use letus_verify::proof::Record as ProofRecord;
use letus_verify::{Hash, KeyPath, Proof, TrieId, Version};

use crate::error::Result;
use crate::lsvps::PageId;
pub use node::{Leaf, Node};
pub use page::Page;

/// Where pages come from: `load` returns page `id` of trie `tid` exactly as it was at `version` (a version at
/// which that page was written).
pub trait PageSource: Sync {
    /// Loads one page version.
    fn load(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>>;
}

/// The id of the page whose root sits at `depth` (even) on `path`.
pub fn page_id(path: &KeyPath, depth: usize) -> PageId {
    let mut prefix = [0u8; 32];
    let full = depth / 2;
    if let (Some(dst), Some(src)) = (prefix.get_mut(..full), path.0.get(..full)) {
        dst.copy_from_slice(src);
    }
    if depth % 2 == 1 {
        if let (Some(d), Some(s)) = (prefix.get_mut(full), path.0.get(full)) {
            *d = s & 0xf0;
        }
    }
    PageId {
        depth: depth as u8,
        prefix,
    }
}

/// Splits `items` (sorted by path) into the runs whose paths share nibble `depth`: `(nibble, first path, run)`,
/// in order. Every walk that descends with a sorted batch (updates, builds, proofs) groups it this way.
fn nibble_groups<'a, T>(
    items: &'a [T],
    depth: usize,
    path: impl Fn(&T) -> &KeyPath + 'a,
) -> impl Iterator<Item = (u8, &'a KeyPath, &'a [T])> + 'a {
    let mut rest = items;
    std::iter::from_fn(move || {
        let first = path(rest.first()?);
        let c = first.nibble(depth);
        let n = rest
            .iter()
            .take_while(|x| path(x).nibble(depth) == c)
            .count();
        let (group, tail) = rest.split_at(n);
        rest = tail;
        Some((c, first, group))
    })
}

/// One staged change of a key: its new leaf, or `None` to delete it.
#[derive(Clone, Debug)]
pub struct Write {
    /// The key path.
    pub path: KeyPath,
    /// The new leaf, or `None` for a delete.
    pub leaf: Option<Leaf>,
}

/// A page written by an update: the new root node of page `id`, and the version it replaces (if any).
#[derive(Clone, Debug)]
pub struct PageWrite {
    /// Which page.
    pub id: PageId,
    /// The page as it was before (for the delta), `None` for a page that did not exist.
    pub old: Option<Arc<Page>>,
    /// The page's new root node (a branch, or for the root page possibly empty or a leaf).
    pub new_root: Node,
}

struct Updater<'a, S: PageSource> {
    src: &'a S,
    tid: TrieId,
    version: Version,
    pages: Vec<PageWrite>,
}

/// Applies `writes` (sorted by path, unique) to the trie whose root page is `root` (`None` for a new trie) and
/// returns the new root node and every page written, child pages before their parents.
pub fn update<S: PageSource>(
    src: &S,
    tid: TrieId,
    root: Option<Arc<Page>>,
    writes: &[Write],
    version: Version,
) -> Result<(Node, Vec<PageWrite>)> {
    let mut u = Updater {
        src,
        tid,
        version,
        pages: Vec::new(),
    };
    let empty = Node::Empty;
    let root_node = root.as_ref().map_or(&empty, |p| &p.root);
    let new_root = match root_node {
        // The usual case: the 16 subtrees below the root are independent, so they are updated on all cores.
        Node::Branch(b) => {
            let (children, pages) =
                update_children_parallel(src, tid, version, &b.children, writes)?;
            u.pages = pages;
            Node::normalize(children)
        }
        _ => u.update(0, root_node, writes)?.0,
    };
    u.pages.push(PageWrite {
        id: PageId::ROOT,
        old: root,
        new_root: new_root.clone(),
    });
    Ok((new_root, u.pages))
}

/// The root branch's children after `writes` (sorted), each child's subtree updated by its own [`Updater`] on the
/// rayon pool; the pages written, in the order a serial update would list them (child pages before parents).
fn update_children_parallel<S: PageSource>(
    src: &S,
    tid: TrieId,
    version: Version,
    children: &[Node; 16],
    writes: &[Write],
) -> Result<([Node; 16], Vec<PageWrite>)> {
    use rayon::prelude::*;
    let groups: Vec<(usize, &[Write])> = nibble_groups(writes, 0, |w| &w.path)
        .map(|(c, _, group)| (usize::from(c), group))
        .collect();
    let done: Vec<Result<(usize, Node, Vec<PageWrite>)>> = groups
        .into_par_iter()
        .map(|(c, group)| {
            let mut u = Updater {
                src,
                tid,
                version,
                pages: Vec::new(),
            };
            // Depth 1 is odd: the child stays inline in the root page, so there is nothing to wrap.
            let (raw, _) = u.update(1, &children[c], group)?;
            Ok((c, raw, u.pages))
        })
        .collect();
    let mut out = children.clone();
    let mut pages = Vec::new();
    for d in done {
        let (c, node, p) = d?;
        out[c] = node;
        pages.extend(p);
    }
    Ok((out, pages))
}

impl<S: PageSource> Updater<'_, S> {
    /// Returns the updated node at `depth` (not yet wrapped into a page) and, when `node` was a page reference, the
    /// page it referred to.
    fn update(
        &mut self,
        depth: usize,
        node: &Node,
        writes: &[Write],
    ) -> Result<(Node, Option<Arc<Page>>)> {
        let Some(first) = writes.first() else {
            return Ok((node.clone(), None));
        };
        match node {
            Node::Page { version, .. } => {
                let page = self
                    .src
                    .load(self.tid, page_id(&first.path, depth), *version)?;
                let (raw, _) = self.update(depth, &page.root, writes)?;
                Ok((raw, Some(page)))
            }
            Node::Empty => Ok((self.build(depth, &puts(None, writes)), None)),
            Node::Leaf(l) => Ok((self.build(depth, &puts(Some(l), writes)), None)),
            Node::Branch(b) => {
                let mut children = b.children.clone();
                for (c, first, group) in nibble_groups(writes, depth, |w| &w.path) {
                    let slot = &mut children[usize::from(c)];
                    let (raw, old) = self.update(depth + 1, slot, group)?;
                    *slot = self.wrap(depth + 1, first, raw, old);
                }
                Ok((Node::normalize(children), None))
            }
        }
    }

    /// A subtree holding exactly `leaves` (sorted by path) at `depth`.
    fn build(&mut self, depth: usize, leaves: &[Leaf]) -> Node {
        match leaves {
            [] => Node::Empty,
            [one] => Node::Leaf(Arc::new(*one)),
            _ => {
                let mut children: [Node; 16] = Default::default();
                for (c, first, group) in nibble_groups(leaves, depth, |l| &l.path) {
                    let raw = self.build(depth + 1, group);
                    children[usize::from(c)] = self.wrap(depth + 1, first, raw, None);
                }
                Node::normalize(children)
            }
        }
    }

    /// A branch at an even depth > 0 becomes its own page (page shape invariant); anything else stays inline.
    fn wrap(&mut self, depth: usize, path: &KeyPath, raw: Node, old: Option<Arc<Page>>) -> Node {
        if depth % 2 == 1 || depth == 0 || !matches!(raw, Node::Branch(_)) {
            return raw;
        }
        // An unchanged page keeps its version, so that its parent does not change either.
        if let Some(o) = &old {
            if o.root == raw {
                return Node::Page {
                    hash: raw.hash(),
                    version: o.version,
                };
            }
        }
        let hash = raw.hash();
        self.pages.push(PageWrite {
            id: page_id(path, depth),
            old,
            new_root: raw,
        });
        Node::Page {
            hash,
            version: self.version,
        }
    }
}

/// The leaves below a node after the writes: the existing leaf (unless overwritten or deleted) plus new puts.
fn puts(existing: Option<&Leaf>, writes: &[Write]) -> Vec<Leaf> {
    let mut out: Vec<Leaf> = writes.iter().filter_map(|w| w.leaf).collect();
    if let Some(l) = existing {
        if !writes.iter().any(|w| w.path == l.path) {
            let at = out.partition_point(|x| x.path < l.path);
            out.insert(at, *l);
        }
    }
    out
}

/// The leaf of `path` below `node` (at `depth`), if any.
pub fn get<S: PageSource>(
    src: &S,
    tid: TrieId,
    node: &Node,
    depth: usize,
    path: &KeyPath,
) -> Result<Option<Leaf>> {
    match node {
        Node::Empty => Ok(None),
        Node::Leaf(l) => Ok((l.path == *path).then_some(**l)),
        Node::Branch(b) => match b.children.get(usize::from(path.nibble(depth))) {
            Some(child) => get(src, tid, child, depth + 1, path),
            None => Ok(None),
        },
        Node::Page { version, .. } => {
            let page = src.load(tid, page_id(path, depth), *version)?;
            get(src, tid, &page.root, depth, path)
        }
    }
}

/// The proof (SPEC.md §5) for `paths` (sorted, unique) below the root node `root`.
pub fn prove<S: PageSource>(src: &S, tid: TrieId, root: &Node, paths: &[KeyPath]) -> Result<Proof> {
    let mut records = Vec::new();
    if !paths.is_empty() {
        prove_node(src, tid, root, 0, paths, &mut records)?;
    }
    Ok(Proof { records })
}

fn prove_node<S: PageSource>(
    src: &S,
    tid: TrieId,
    node: &Node,
    depth: usize,
    q: &[KeyPath],
    out: &mut Vec<ProofRecord>,
) -> Result<()> {
    match node {
        Node::Empty => out.push(ProofRecord::Empty),
        Node::Leaf(l) if q.contains(&l.path) => out.push(ProofRecord::Leaf),
        Node::Leaf(l) => out.push(ProofRecord::OtherLeaf {
            path: l.path,
            value_hash: l.value_hash,
        }),
        Node::Page { version, .. } => {
            let Some(first) = q.first() else {
                return Ok(());
            };
            let page = src.load(tid, page_id(first, depth), *version)?;
            prove_node(src, tid, &page.root, depth, q, out)?;
        }
        Node::Branch(b) => {
            let hashes: [Hash; 16] = std::array::from_fn(|i| b.children[i].hash());
            let expanded = q.iter().fold(0u16, |m, p| m | 1 << p.nibble(depth));
            let mut mask = 0u8;
            let mut frontier = Vec::new();
            for (i, &(lo, hi)) in Frontier::of(expanded).ranges().iter().enumerate() {
                let h = fold_range(&hashes, lo.into(), hi.into());
                if !h.is_empty() {
                    mask |= 1 << i;
                    frontier.push(h);
                }
            }
            out.push(ProofRecord::Branch {
                mask,
                hashes: frontier,
            });
            for (c, _, group) in nibble_groups(q, depth, |p| p) {
                if let Some(child) = b.children.get(usize::from(c)) {
                    prove_node(src, tid, child, depth + 1, group, out)?;
                }
            }
        }
    }
    Ok(())
}

/// Calls `f` for every leaf below `node` in path order. `prefix` is any path on which `node` lies (used to name
/// pages); `on_page` sees each page reference with the page loaded, so that callers can check stored hashes.
pub fn walk<S: PageSource>(
    src: &S,
    tid: TrieId,
    node: &Node,
    depth: usize,
    prefix: &KeyPath,
    f: &mut dyn FnMut(&Leaf) -> Result<()>,
) -> Result<()> {
    match node {
        Node::Empty => Ok(()),
        Node::Leaf(l) => f(l),
        Node::Branch(b) => {
            for (c, child) in b.children.iter().enumerate() {
                if child.is_empty() {
                    continue;
                }
                let mut p = *prefix;
                set_nibble(&mut p, depth, c as u8);
                walk(src, tid, child, depth + 1, &p, f)?;
            }
            Ok(())
        }
        Node::Page { version, .. } => {
            let page = src.load(tid, page_id(prefix, depth), *version)?;
            walk(src, tid, &page.root, depth, prefix, f)
        }
    }
}

/// Sets nibble `i` of `p`.
pub fn set_nibble(p: &mut KeyPath, i: usize, v: u8) {
    if let Some(b) = p.0.get_mut(i / 2) {
        *b = if i.is_multiple_of(2) {
            (*b & 0x0f) | (v << 4)
        } else {
            (*b & 0xf0) | (v & 0x0f)
        };
    }
}
