//! One scrape: the Collector trait and the Scraper that runs the
//! collectors and probes, the encoder they write through, and the daemon's
//! own metrics. Builds on the kernel layer; knows nothing of HTTP.

pub mod collector;
pub mod exposition;
pub mod self_metrics;
