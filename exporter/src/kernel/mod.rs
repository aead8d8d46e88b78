//! The kernel-file layer: how sources under procfs, sysfs and cgroupfs are
//! found, opened, read and parsed, shared by every collector. Nothing here
//! knows a metric; collectors build on it and never on each other.

pub mod fs_kind;
pub mod go_compat;
