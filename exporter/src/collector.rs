//! The collector contract and the scrape loop that runs every enabled
//! collector into one exposition buffer.
//!
//! Each collector owns its [`crate::source::SourceFile`]s and any state it
//! needs between scrapes (e.g. the per-CPU clamp of /proc/stat). A failing
//! collector's partial output is cut off again, so one bad file never leaves
//! half a family in the output or touches another collector's series.

use std::time::Instant;

use crate::error::CollectError;
use crate::exposition::{Desc, Encoder, Format};
use crate::self_metrics::SelfMetrics;

/// One source of metrics, read at scrape time.
pub trait Collector: Send {
    /// Reads the sources and writes complete families into `enc`.
    /// An absent source (the kernel lacks the feature) writes nothing and
    /// returns `Ok`. Anything else that stops the collector returns `Err`.
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError>;
}

/// What the landing page shows about a collector.
#[derive(Clone, Debug)]
pub struct CollectorStatus {
    pub name: &'static str,
    pub last_success: Option<bool>,
    pub last_error: Option<String>,
    pub last_duration_seconds: f64,
}

struct Entry {
    collector: Box<dyn Collector>,
    status: CollectorStatus,
}

const SUCCESS: Desc = Desc::gauge(
    "node_scrape_collector_success",
    "node_exporter: Whether a collector succeeded.",
);
const DURATION: Desc = Desc::gauge(
    "node_scrape_collector_duration_seconds",
    "node_exporter: Duration of a collector scrape.",
);

/// Runs the collectors; owns the reused output buffer.
pub struct Scraper {
    entries: Vec<Entry>,
    self_metrics: SelfMetrics,
    buf: Vec<u8>,
}

impl Scraper {
    pub fn new(self_metrics: SelfMetrics) -> Scraper {
        Scraper {
            entries: Vec::new(),
            self_metrics,
            buf: Vec::with_capacity(64 * 1024),
        }
    }

    pub fn add(&mut self, name: &'static str, collector: Box<dyn Collector>) {
        self.entries.push(Entry {
            collector,
            status: CollectorStatus {
                name,
                last_success: None,
                last_error: None,
                last_duration_seconds: 0.0,
            },
        });
    }

    pub fn statuses(&self) -> Vec<CollectorStatus> {
        self.entries.iter().map(|e| e.status.clone()).collect()
    }

    /// One scrape: every collector, then the self metrics. Returns the
    /// encoded exposition, valid until the next call.
    pub fn scrape(&mut self, format: Format) -> &[u8] {
        self.buf.clear();
        let mut enc = Encoder::new(&mut self.buf, format);
        for e in &mut self.entries {
            let mark = enc.mark();
            let start = Instant::now();
            let result = e.collector.collect(&mut enc);
            e.status.last_duration_seconds = start.elapsed().as_secs_f64();
            match result {
                Ok(()) => {
                    if e.status.last_success == Some(false) {
                        tracing::info!(collector = e.status.name, "collector recovered");
                    }
                    e.status.last_success = Some(true);
                    e.status.last_error = None;
                }
                Err(err) => {
                    enc.truncate(mark);
                    let msg = err.to_string();
                    // Warn when the failure is new or different; repeat it
                    // at debug so a broken file does not flood the log.
                    if e.status.last_error.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(
                            collector = e.status.name,
                            file = %err.file.display(),
                            line = err.line,
                            error = %err.cause,
                            "collector failed"
                        );
                    } else {
                        tracing::debug!(collector = e.status.name, error = %msg, "collector still failing");
                    }
                    e.status.last_success = Some(false);
                    e.status.last_error = Some(msg);
                }
            }
        }
        enc.family(&DURATION);
        for e in &self.entries {
            enc.sample(
                &DURATION,
                &[("collector", e.status.name)],
                e.status.last_duration_seconds,
            );
        }
        enc.family(&SUCCESS);
        for e in &self.entries {
            let ok = u64::from(e.status.last_success == Some(true));
            enc.sample(&SUCCESS, &[("collector", e.status.name)], ok);
        }
        self.self_metrics.write(&mut enc);
        enc.finish();
        &self.buf
    }
}
