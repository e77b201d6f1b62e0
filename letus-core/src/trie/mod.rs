//! trie
