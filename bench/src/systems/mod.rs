//! One module per compared system.

#[cfg(feature = "rocksdb-peers")]
pub mod jmt_rocks;
pub mod letus;
#[cfg(feature = "rocksdb-peers")]
pub mod mpt;
pub mod nomt_sys;
#[cfg(feature = "rocksdb-peers")]
pub mod rocks;
