//! VDLS
