//! The kernel-file layer: how sources under procfs, sysfs and cgroupfs are
//! found, opened, read and parsed, shared by every collector. Nothing here
//! knows a metric; collectors build on it and never on each other.

pub mod absence;
pub mod btrfs_ioctl;
pub mod cgroup_path;
pub mod dirents;
pub mod error;
pub mod fd_budget;
pub mod file_watch;
pub mod fs_kind;
pub mod go_compat;
pub mod link_events;
pub mod mount_changes;
pub mod mountinfo;
pub mod parse;
pub mod proc_stat;
pub mod psi;
pub mod rpc_stats;
pub mod sockstat;
pub mod source;
pub mod statfs_pool;
