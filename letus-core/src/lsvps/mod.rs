//! LSVPS
