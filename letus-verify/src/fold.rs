//! The hash of a 16-way branch as a 4-level binary Merkle tree over its children (SPEC.md §3.3), and the
//! frontier of a branch for proofs (SPEC.md §5.2).

use crate::hash::{inner, Hash, EMPTY};

/// `fold(c[0..16])`: the hash of a branch with child hashes `children`.
pub fn fold(children: &[Hash; 16]) -> Hash {
    fold_range(children, 0, 16)
}

/// The binary-tree node covering child positions `lo..hi` (a power-of-two aligned range within `0..16`).
pub fn fold_range(children: &[Hash; 16], lo: usize, hi: usize) -> Hash {
    if hi - lo <= 1 {
        return children.get(lo).copied().unwrap_or(EMPTY);
    }
    let mid = (lo + hi) / 2;
    inner(
        &fold_range(children, lo, mid),
        &fold_range(children, mid, hi),
    )
}

/// The hash of a branch whose only non-empty child is `child` at position `nibble`.
pub fn fold_single(nibble: u8, child: &Hash) -> Hash {
    let mut h = *child;
    let mut pos = usize::from(nibble & 0x0f);
    // Climb the four binary levels; at each, the sibling is empty.
    for _ in 0..4 {
        h = if pos % 2 == 0 {
            inner(&h, &EMPTY)
        } else {
            inner(&EMPTY, &h)
        };
        pos /= 2;
    }
    h
}

/// The most frontier subtrees a branch can have (SPEC.md §5.2).
pub const MAX_FRONTIER: usize = 8;

/// The frontier subtrees of a branch with expanded children `expanded` (bit `c` set for child `c`), as
/// half-open ranges of child positions in depth-first, left-to-right order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frontier {
    ranges: [(u8, u8); MAX_FRONTIER],
    len: usize,
}

impl Frontier {
    /// Computes the frontier; `expanded` must not be 0 (a branch on a walk has an expanded child).
    pub fn of(expanded: u16) -> Frontier {
        let mut f = Frontier {
            ranges: [(0, 0); MAX_FRONTIER],
            len: 0,
        };
        f.visit(expanded, 0, 16);
        f
    }

    fn visit(&mut self, expanded: u16, lo: u8, hi: u8) {
        let span = ((1u32 << hi) - (1u32 << lo)) as u16;
        if expanded & span == 0 {
            // At most 8 frontier subtrees exist (SPEC.md §5.2), so the slot is always there.
            if let Some(slot) = self.ranges.get_mut(self.len) {
                *slot = (lo, hi);
                self.len += 1;
            }
            return;
        }
        if hi - lo == 1 {
            return;
        }
        let mid = (lo + hi) / 2;
        self.visit(expanded, lo, mid);
        self.visit(expanded, mid, hi);
    }

    /// Number of frontier subtrees.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no frontier subtree (all 16 children expanded).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges, in order.
    pub fn ranges(&self) -> &[(u8, u8)] {
        self.ranges.get(..self.len).unwrap_or(&[])
    }
}

/// Folds a branch from its frontier hashes (in frontier order) and its expanded children's hashes.
pub fn fold_mixed(expanded: u16, frontier: &[Hash], children: &[Hash; 16]) -> Hash {
    let mut next = 0usize;
    fold_mixed_range(expanded, frontier, &mut next, children, 0, 16)
}

fn fold_mixed_range(
    expanded: u16,
    frontier: &[Hash],
    next: &mut usize,
    children: &[Hash; 16],
    lo: u8,
    hi: u8,
) -> Hash {
    let span = ((1u32 << hi) - (1u32 << lo)) as u16;
    if expanded & span == 0 {
        let h = frontier.get(*next).copied().unwrap_or(EMPTY);
        *next += 1;
        return h;
    }
    if hi - lo == 1 {
        return children.get(usize::from(lo)).copied().unwrap_or(EMPTY);
    }
    let mid = (lo + hi) / 2;
    let l = fold_mixed_range(expanded, frontier, next, children, lo, mid);
    let r = fold_mixed_range(expanded, frontier, next, children, mid, hi);
    inner(&l, &r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u8) -> Hash {
        crate::hash::value_hash(&[i])
    }

    #[test]
    fn frontier_of_one_child_is_its_four_siblings() {
        let f = Frontier::of(1 << 0);
        assert_eq!(f.ranges(), &[(1, 2), (2, 4), (4, 8), (8, 16)]);
        let f = Frontier::of(1 << 15);
        assert_eq!(f.ranges(), &[(0, 8), (8, 12), (12, 14), (14, 15)]);
    }

    #[test]
    fn frontier_never_exceeds_eight() {
        let mut max = 0;
        for e in 1..=u16::MAX {
            max = max.max(Frontier::of(e).len());
        }
        assert_eq!(max, MAX_FRONTIER);
        assert_eq!(Frontier::of(0x5555).len(), 8);
        assert!(Frontier::of(0xffff).is_empty());
    }

    #[test]
    fn mixed_fold_matches_full_fold() {
        let mut children = [EMPTY; 16];
        for i in [0u8, 3, 4, 9, 15] {
            children[usize::from(i)] = h(i);
        }
        let full = fold(&children);
        for expanded in [1u16, 1 << 3, (1 << 9) | (1 << 2), 0xffff, 0x8001] {
            let fr: std::vec::Vec<Hash> = Frontier::of(expanded)
                .ranges()
                .iter()
                .map(|&(lo, hi)| fold_range(&children, lo.into(), hi.into()))
                .collect();
            assert_eq!(fold_mixed(expanded, &fr, &children), full);
        }
    }

    #[test]
    fn single_child_fold() {
        let mut children = [EMPTY; 16];
        children[6] = h(6);
        assert_eq!(fold_single(6, &h(6)), fold(&children));
        assert_eq!(fold(&[EMPTY; 16]), EMPTY);
    }
}
