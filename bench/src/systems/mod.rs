//! One module per compared system.

pub mod jmt_rocks;
pub mod letus;
pub mod mpt;
pub mod nomt_sys;
pub mod rocks;
