//! One test binary for the integration tests that share nothing with each
//! other but the usescope binary they start: each module is one area
//! (node_exporter compatibility, golden output, malformed and hostile input,
//! HTTP and web attacks, textfiles), and each test makes its own trees,
//! ports and daemons. One binary is linked once, and its tests share the
//! harness's threads, so a long test (malformed's every corruption of every
//! file) runs beside the short ones instead of after them.
//!
//! The tests that read or change host-wide state stay binaries of their
//! own, because tests in one binary run at the same time and cargo runs
//! binaries one after another: the probes and BPF program counts, mounts
//! (loop devices, hung FUSE servers, the host's mount table), cgroups,
//! network namespaces and TCP load, privileges, and the counts of this
//! process's children and the host's zombies. TESTING.md lists both kinds.

#[path = "../common/mod.rs"]
mod common;

mod compat_hardware;
mod compat_network;
mod compat_system;
mod faults;
mod golden;
mod hostile_requests;
mod hostile_sources;
mod http;
mod malformed;
mod os_release_watch;
mod parsers_fuzz_smoke;
mod procfs_crosscheck;
mod promtool;
mod skip_helper;
mod slow_readers;
mod textfile_attacks;
mod web_attacks;
mod web_security;
