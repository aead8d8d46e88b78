//! Serving: the accept loop and its limits, TLS and basic auth, the
//! routes, gzip, and the buffers and log throttle they use. Builds on the
//! scrape layer.

pub mod gzip;
pub mod http;
pub mod log_throttle;
pub mod retained;
pub mod server;
pub mod web_config;
