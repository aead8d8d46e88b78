//! usescope: a Linux USE-method exporter for Prometheus.
//!
//! Data flow of one scrape (see ARCHITECTURE.md for the full map):
//! [`http`] receives `GET /metrics` → [`collector::Scraper::scrape`] runs
//! each enabled [`collectors`] module (and each attached [`probes`] module)
//! → each reads its [`source::SourceFile`]s, parses with a pure parser, and
//! writes families through the [`exposition::Encoder`] into one reused buffer.

pub mod absence;
pub mod cli;
pub mod collector;
pub mod collectors;
pub mod error;
pub mod exposition;
pub mod file_watch;
pub mod gzip;
pub mod http;
pub mod kernel;
pub mod link_events;
pub mod log_throttle;
pub mod parse;
pub mod privileges;
pub mod probes;
pub mod retained;
pub mod self_metrics;
pub mod server;
pub mod source;
pub mod statfs_pool;
pub mod web_config;

/// The tests' one way to skip (exporter/tests/common/skip.rs), shared with
/// the integration tests so unit tests skip, and fail in CI, the same way.
#[cfg(test)]
#[path = "../tests/common/skip.rs"]
pub(crate) mod test_skip;
