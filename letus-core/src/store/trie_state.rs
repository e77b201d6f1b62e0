//! One trie's history of roots and its history tree.

use super::*;

/// One trie's history: its root and root-page version after every commit since it was created.
#[derive(Default)]
pub(super) struct TrieState {
    pub(super) versions: Vec<Version>,
    pub(super) roots: Vec<Hash>,
    pub(super) page_versions: Vec<Version>,
    pub(super) history: HistoryTree,
    pub(super) history_roots: Vec<Hash>,
}

impl TrieState {
    pub(super) fn push(
        &mut self,
        tid: TrieId,
        version: Version,
        root: Hash,
        page_version: Version,
    ) {
        self.versions.push(version);
        self.roots.push(root);
        self.page_versions.push(page_version);
        self.history
            .push(letus_verify::hash::history_leaf(tid, version, &root));
        self.history_roots.push(self.history.root());
    }

    /// Index of the newest commit at or below `version`.
    pub(super) fn index_at(&self, version: Version) -> Option<usize> {
        self.versions
            .partition_point(|v| *v <= version)
            .checked_sub(1)
    }
}
