//! usescope: a Linux USE-method exporter for Prometheus.
//!
//! Layers, each building only on those above it (ARCHITECTURE.md has the
//! full map; `scripts/module_graph.py` checks that no collector imports
//! another and that there is no cycle):
//! - [`kernel`]: finding, reading and parsing procfs, sysfs and cgroupfs
//!   files; errors that name the file and line;
//! - [`scrape`]: the encoder, the Collector trait and the Scraper, the
//!   daemon's own metrics;
//! - [`collectors`] and [`probes`]: one module per kernel source or eBPF
//!   probe, each declaring its spec in one registry line;
//! - [`web`]: the server, its limits, TLS and auth, the routes;
//! - [`cli`] and [`privileges`]: start-up.
//!
//! One scrape: [`web::http`] receives `GET /metrics` →
//! [`scrape::collector::Scraper::scrape`] runs each enabled collector (and
//! each attached probe) → each reads its [`kernel::source::SourceFile`]s,
//! parses with a pure parser, and writes families through the
//! [`scrape::exposition::Encoder`] into one reused buffer.

pub mod cli;
pub mod collectors;
pub mod kernel;
pub mod privileges;
pub mod probes;
pub mod scrape;
pub mod web;

/// The tests' one way to skip (exporter/tests/common/skip.rs), shared with
/// the integration tests so unit tests skip, and fail in CI, the same way.
#[cfg(test)]
#[path = "../tests/common/skip.rs"]
pub(crate) mod test_skip;
