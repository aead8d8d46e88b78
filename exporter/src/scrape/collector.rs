//! The collector contract and the scrape loop that runs every enabled
//! collector into one exposition buffer.
//!
//! Each collector owns its [`crate::kernel::source::SourceFile`]s and any state it
//! needs between scrapes (e.g. the per-CPU clamp of /proc/stat). A failing
//! collector's partial output is cut off again, so one bad file never leaves
//! half a family in the output or touches another collector's series.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::kernel::absence;
use crate::kernel::error::CollectError;
use crate::scrape::exposition::{Desc, Encoder, Format};
use crate::scrape::self_metrics::SelfMetrics;

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
    /// Whether an absent source may have appeared since the last scrape.
    appearing: Mutex<Option<absence::Watch>>,
    /// Numbers the scrapes, for sources that collectors share.
    scrapes: AtomicU64,
}

impl Scraper {
    pub fn new(self_metrics: SelfMetrics) -> Scraper {
        Scraper {
            entries: Vec::new(),
            self_metrics: Mutex::new(self_metrics),
            epoch: Instant::now(),
            appearing: Mutex::new(None),
            scrapes: AtomicU64::new(0),
        }
    }

    /// Lets collectors skip looking up sources that were absent until the
    /// kernel signals that one may have appeared (see absence.rs). Without
    /// it, every scrape looks every absent source up again.
    pub fn watch_for_appearing_sources(&mut self, watch: absence::Watch) {
        self.appearing = Mutex::new(Some(watch));
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

    /// The names of the collectors this scraper runs, in registry order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.entries.iter().map(|e| lock(&e.status).name)
    }

    /// One scrape into `buf`: the selected collectors, then the self
    /// metrics. Stops early, leaving `buf` incomplete, once `abandoned` is
    /// set: the caller has answered without this scrape.
    pub fn scrape_into(
        &self,
        format: Format,
        buf: &mut Vec<u8>,
        abandoned: &AtomicBool,
        selection: &Selection,
    ) {
        buf.clear();
        if let Some(watch) = lock(&self.appearing).as_mut() {
            watch.refresh();
        }
        let n = self.scrapes.fetch_add(1, Ordering::Relaxed) + 1;
        let mut enc = Encoder::for_scrape(buf, format, n);
        let selected = || {
            self.entries
                .iter()
                .enumerate()
                .filter(|(i, _)| selection.includes(*i))
                .map(|(_, e)| e)
        };
        for e in selected() {
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
                Err(TryLockError::WouldBlock) => match self.wait_for_a_moment(e) {
                    Some(mut c) => self.run_one(e, &mut **c, &mut enc),
                    None => self.still_inside(e),
                },
            };
            if result.is_err() {
                enc.truncate(mark);
            }
            record(&mut lock(&e.status), result, seconds);
        }
        enc.family(&DURATION);
        for e in selected() {
            let s = lock(&e.status);
            enc.sample(&DURATION, &[("collector", s.name)], s.last_duration_seconds);
        }
        enc.family(&SUCCESS);
        for e in selected() {
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
        self.scrape_into(format, &mut buf, &AtomicBool::new(false), &Selection::All);
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

    /// The collector's lock is held by another scrape. That is normal for a
    /// moment (a scrape whose client hung up keeps running until it
    /// notices), so wait while the holder has been inside for less than
    /// [`STUCK_AFTER`]; past that it is a read that does not return.
    fn wait_for_a_moment<'e>(&self, e: &'e Entry) -> Option<MutexGuard<'e, Box<dyn Collector>>> {
        loop {
            match e.collector.try_lock() {
                Ok(c) => return Some(c),
                Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
            let entered = e.entered_at.load(Ordering::Relaxed);
            let inside = self.now_ms().saturating_sub(entered.saturating_sub(1));
            if entered != 0 && inside >= STUCK_AFTER.as_millis() as u64 {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
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

/// Which collectors one scrape runs: all of them, or those a request named
/// with node_exporter's `collect[]` / `exclude[]` query parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    All,
    /// One flag per collector, in the scraper's order.
    Only(Vec<bool>),
}

impl Selection {
    fn includes(&self, index: usize) -> bool {
        match self {
            Selection::All => true,
            Selection::Only(flags) => flags.get(index).copied().unwrap_or(false),
        }
    }

    /// node_exporter's rules, error texts included:
    /// - neither list: every collector;
    /// - both lists: refused;
    /// - `collect[]`: only the named collectors; a name the daemon does not
    ///   run is an error ("missing collector" if no such collector exists,
    ///   "disabled collector" if it exists but is off, as `is_known` says);
    /// - `exclude[]`: every running collector but the named ones (unknown
    ///   names are ignored). Excluding every collector selects them all
    ///   again: node_exporter treats an empty filter as none.
    pub fn parse(
        running: &[&str],
        collect: &[String],
        exclude: &[String],
        is_known: impl Fn(&str) -> bool,
    ) -> Result<Selection, String> {
        if collect.is_empty() && exclude.is_empty() {
            return Ok(Selection::All);
        }
        if !collect.is_empty() && !exclude.is_empty() {
            return Err("Combined collect and exclude queries are not allowed.".to_string());
        }
        let flags: Vec<bool> = if collect.is_empty() {
            running
                .iter()
                .map(|name| !exclude.iter().any(|x| x == name))
                .collect()
        } else {
            for name in collect {
                if !running.contains(&name.as_str()) {
                    let why = if is_known(name) {
                        "disabled"
                    } else {
                        "missing"
                    };
                    return Err(format!(
                        "Couldn't create filtered metrics handler: couldn't create collector: {why} collector: {name}"
                    ));
                }
            }
            running
                .iter()
                .map(|name| collect.iter().any(|c| c == name))
                .collect()
        };
        Ok(if flags.iter().any(|&f| f) {
            Selection::Only(flags)
        } else {
            Selection::All
        })
    }
}

/// How long a scrape may have been inside a collector before a later scrape
/// stops waiting for it and reports the collector stuck. Far above any
/// real collector (milliseconds) and below any useful scrape deadline.
const STUCK_AFTER: Duration = Duration::from_millis(500);

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A collector that takes `delay` and writes one gauge.
    struct Slow {
        delay: Duration,
    }

    const UP: Desc = Desc::gauge("test_up", "Whether the slow collector ran.");

    impl Collector for Slow {
        fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
            std::thread::sleep(self.delay);
            enc.family(&UP);
            enc.sample(&UP, &[], 1u64);
            Ok(())
        }
    }

    fn scraper_with(delay: Duration) -> Arc<Scraper> {
        let mut s = Scraper::new(SelfMetrics::new());
        s.add("slow", Box::new(Slow { delay }));
        Arc::new(s)
    }

    #[test]
    fn selection_follows_node_exporter() {
        let running = ["cpu", "meminfo", "textfile"];
        let known = |n: &str| n == "zfs" || running.contains(&n);
        let v = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let parse = |c: &[&str], x: &[&str]| Selection::parse(&running, &v(c), &v(x), known);
        assert_eq!(parse(&[], &[]), Ok(Selection::All));
        assert_eq!(
            parse(&["meminfo", "meminfo"], &[]),
            Ok(Selection::Only(vec![false, true, false]))
        );
        assert_eq!(
            parse(&[], &["cpu", "nonesuch"]),
            Ok(Selection::Only(vec![false, true, true]))
        );
        assert_eq!(
            parse(&[], &["cpu", "meminfo", "textfile"]),
            Ok(Selection::All)
        );
        assert_eq!(
            parse(&["nonesuch"], &[]),
            Err("Couldn't create filtered metrics handler: couldn't create collector: missing collector: nonesuch".into())
        );
        assert_eq!(
            parse(&["zfs"], &[]),
            Err("Couldn't create filtered metrics handler: couldn't create collector: disabled collector: zfs".into())
        );
        assert!(
            parse(&["cpu"], &["meminfo"])
                .unwrap_err()
                .contains("Combined")
        );
    }

    #[test]
    fn a_selection_runs_and_reports_only_its_collectors() {
        let mut s = Scraper::new(SelfMetrics::new());
        s.add(
            "slow",
            Box::new(Slow {
                delay: Duration::ZERO,
            }),
        );
        s.add(
            "other",
            Box::new(Slow {
                delay: Duration::ZERO,
            }),
        );
        let mut buf = Vec::new();
        let only_other = Selection::Only(vec![false, true]);
        s.scrape_into(
            Format::PrometheusText,
            &mut buf,
            &AtomicBool::new(false),
            &only_other,
        );
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("collector=\"other\"} 1"), "{text}");
        assert!(!text.contains("collector=\"slow\""), "{text}");
        assert_eq!(s.statuses()[0].last_success, None, "slow must not have run");
    }

    fn success(out: &[u8]) -> bool {
        String::from_utf8_lossy(out).contains("node_scrape_collector_success{collector=\"slow\"} 1")
    }

    /// A scrape that meets a collector another scrape is briefly inside
    /// (its client hung up, so the two overlap) waits for it: no false
    /// "stuck".
    #[test]
    fn a_collector_busy_for_a_moment_is_waited_for() {
        let s = scraper_with(Duration::from_millis(150));
        let first = std::thread::spawn({
            let s = s.clone();
            move || s.scrape(Format::PrometheusText)
        });
        std::thread::sleep(Duration::from_millis(30));
        let second = s.scrape(Format::PrometheusText);
        assert!(success(&second), "{}", String::from_utf8_lossy(&second));
        assert!(success(&first.join().unwrap()));
    }

    /// Inside for longer than STUCK_AFTER: the next scrape reports it and
    /// goes on without waiting for the read to return.
    #[test]
    fn a_collector_stuck_past_the_limit_is_skipped() {
        let s = scraper_with(STUCK_AFTER + Duration::from_millis(1500));
        let _first = std::thread::spawn({
            let s = s.clone();
            move || s.scrape(Format::PrometheusText)
        });
        std::thread::sleep(Duration::from_millis(30));
        let start = Instant::now();
        let second = s.scrape(Format::PrometheusText);
        let took = start.elapsed();
        assert!(!success(&second));
        assert!(took < STUCK_AFTER + Duration::from_millis(400), "{took:?}");
        let status = &s.statuses()[0];
        assert!(
            status.last_error.as_deref().unwrap_or("").contains("stuck"),
            "{status:?}"
        );
        assert_eq!(s.stuck(STUCK_AFTER).map(|(n, _)| n), Some("slow"));
    }
}
