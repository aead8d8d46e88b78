//! The collector contract and the scrape loop that runs every enabled
//! collector into one exposition buffer.
//!
//! Each collector owns its [`crate::source::SourceFile`]s and any state it
//! needs between scrapes (e.g. the per-CPU clamp of /proc/stat). A failing
//! collector's partial output is cut off again, so one bad file never leaves
//! half a family in the output or touches another collector's series.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

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

/// One registered collector. The collector sits behind its own lock so
/// that a scrape stuck inside it (a read that never returns, say on a hung
/// FUSE mount) holds only that collector: later scrapes find the lock
/// taken, report the collector as failed, and serve everything else.
struct Entry {
    collector: Mutex<Box<dyn Collector>>,
    status: Mutex<CollectorStatus>,
    /// Milliseconds since the scraper's epoch, plus one, at which a scrape
    /// entered this collector; 0 while none is inside.
    entered_at: AtomicU64,
}

const SUCCESS: Desc = Desc::gauge(
    "node_scrape_collector_success",
    "node_exporter: Whether a collector succeeded.",
);
const DURATION: Desc = Desc::gauge(
    "node_scrape_collector_duration_seconds",
    "node_exporter: Duration of a collector scrape.",
);

/// Runs the collectors. Shared (`&self`) so that the HTTP side can give up
/// on a scrape that passed its deadline and start the next one while the
/// first is still stuck; callers otherwise run one scrape at a time.
pub struct Scraper {
    entries: Vec<Entry>,
    self_metrics: Mutex<SelfMetrics>,
    epoch: Instant,
}

impl Scraper {
    pub fn new(self_metrics: SelfMetrics) -> Scraper {
        Scraper {
            entries: Vec::new(),
            self_metrics: Mutex::new(self_metrics),
            epoch: Instant::now(),
        }
    }

    pub fn add(&mut self, name: &'static str, collector: Box<dyn Collector>) {
        self.entries.push(Entry {
            collector: Mutex::new(collector),
            status: Mutex::new(CollectorStatus {
                name,
                last_success: None,
                last_error: None,
                last_duration_seconds: 0.0,
            }),
            entered_at: AtomicU64::new(0),
        });
    }

    pub fn statuses(&self) -> Vec<CollectorStatus> {
        self.entries
            .iter()
            .map(|e| lock(&e.status).clone())
            .collect()
    }

    /// The collector a scrape has been inside for longer than `at_least`,
    /// and for how long: what an abandoned scrape is stuck on.
    pub fn stuck(&self, at_least: Duration) -> Option<(&'static str, Duration)> {
        let now = self.now_ms();
        self.entries.iter().find_map(|e| {
            let entered = e.entered_at.load(Ordering::Relaxed);
            let inside = Duration::from_millis(now.saturating_sub(entered.checked_sub(1)?));
            (inside >= at_least).then(|| (lock(&e.status).name, inside))
        })
    }

    /// One scrape into `buf`: every collector, then the self metrics.
    /// Stops early, leaving `buf` incomplete, once `abandoned` is set: the
    /// caller has answered without this scrape.
    pub fn scrape_into(&self, format: Format, buf: &mut Vec<u8>, abandoned: &AtomicBool) {
        buf.clear();
        let mut enc = Encoder::new(buf, format);
        for e in &self.entries {
            if abandoned.load(Ordering::Relaxed) {
                return;
            }
            let mark = enc.mark();
            let (result, seconds) = match e.collector.try_lock() {
                Ok(mut c) => self.run_one(e, &mut **c, &mut enc),
                // A collector panicked in an earlier scrape (a bug, logged
                // by the panic hook). Its state is whatever it left; keep
                // going rather than losing it for good.
                Err(TryLockError::Poisoned(p)) => self.run_one(e, &mut **p.into_inner(), &mut enc),
                Err(TryLockError::WouldBlock) => self.still_inside(e),
            };
            if result.is_err() {
                enc.truncate(mark);
            }
            record(&mut lock(&e.status), result, seconds);
        }
        enc.family(&DURATION);
        for e in &self.entries {
            let s = lock(&e.status);
            enc.sample(&DURATION, &[("collector", s.name)], s.last_duration_seconds);
        }
        enc.family(&SUCCESS);
        for e in &self.entries {
            let s = lock(&e.status);
            let ok = u64::from(s.last_success == Some(true));
            enc.sample(&SUCCESS, &[("collector", s.name)], ok);
        }
        lock(&self.self_metrics).write(&mut enc);
        enc.finish();
    }

    /// A scrape into a fresh buffer, for tools and tests that run one
    /// scrape at a time.
    pub fn scrape(&self, format: Format) -> Vec<u8> {
        let mut buf = Vec::with_capacity(64 * 1024);
        self.scrape_into(format, &mut buf, &AtomicBool::new(false));
        buf
    }

    fn run_one(
        &self,
        e: &Entry,
        c: &mut dyn Collector,
        enc: &mut Encoder,
    ) -> (Result<(), CollectError>, f64) {
        let _inside = Inside::enter(&e.entered_at, self.now_ms());
        let start = Instant::now();
        let result = c.collect(enc);
        (result, start.elapsed().as_secs_f64())
    }

    /// The collector's lock is held by a scrape that was abandoned at its
    /// deadline and is still inside: report it failed without waiting.
    fn still_inside(&self, e: &Entry) -> (Result<(), CollectError>, f64) {
        let entered = e.entered_at.load(Ordering::Relaxed);
        let inside = self.now_ms().saturating_sub(entered.saturating_sub(1));
        let seconds = inside as f64 / 1000.0;
        let err = CollectError::other(
            lock(&e.status).name,
            format!(
                "stuck: an earlier scrape has been inside this collector for {:.0} s \
                 (a read that does not return); skipped until it does",
                seconds.floor()
            ),
        );
        (Err(err), seconds)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

/// Marks a collector as entered for as long as it lives, unwinding included.
struct Inside<'a>(&'a AtomicU64);

impl<'a> Inside<'a> {
    fn enter(at: &'a AtomicU64, now_ms: u64) -> Inside<'a> {
        at.store(now_ms, Ordering::Relaxed);
        Inside(at)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Records one collector's result, logging a failure when it is new or
/// different; a repeat goes to debug so a broken file does not flood the log.
fn record(status: &mut CollectorStatus, result: Result<(), CollectError>, seconds: f64) {
    status.last_duration_seconds = seconds;
    match result {
        Ok(()) => {
            if status.last_success == Some(false) {
                tracing::info!(collector = status.name, "collector recovered");
            }
            status.last_success = Some(true);
            status.last_error = None;
        }
        Err(err) => {
            let msg = err.to_string();
            if status.last_error.as_deref() != Some(msg.as_str()) {
                tracing::warn!(
                    collector = status.name,
                    file = %err.file.display(),
                    line = err.line,
                    error = %err.cause,
                    "collector failed"
                );
            } else {
                tracing::debug!(collector = status.name, error = %msg, "collector still failing");
            }
            status.last_success = Some(false);
            status.last_error = Some(msg);
        }
    }
}

/// Status and self-metric locks are held for microseconds and never across
/// a read; a poisoned one (a panic elsewhere) still holds valid data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
