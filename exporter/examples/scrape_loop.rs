//! Runs N scrapes in-process with every default collector and no HTTP, for
//! profilers: `cargo build --release --example scrape_loop` then
//! `valgrind --tool=callgrind target/release/examples/scrape_loop 200 /proc`.
//!
//! A third argument, a comma-separated list of collectors, times only those
//! (`scrape_loop 2000 /proc netclass,bonding`).
//!
//! Prints the mean wall time per scrape and the output size.

use std::time::Instant;

use usescope::collector::Scraper;
use usescope::collectors::{self, Settings};
use usescope::exposition::Format;
use usescope::self_metrics::SelfMetrics;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let procfs = args.next().unwrap_or_else(|| "/proc".to_string());
    let only = args.next();
    let settings = Settings::with_roots(procfs, "/sys");
    let mut scraper = Scraper::new(SelfMetrics::new());
    let chosen = |name: &str| match &only {
        Some(list) => list.split(',').any(|c| c == name),
        None => true,
    };
    for spec in collectors::ALL
        .iter()
        .filter(|s| s.default_enabled && chosen(s.name))
    {
        scraper.add(spec.name, (spec.build)(&settings));
    }
    let mut bytes = 0;
    let start = Instant::now();
    for _ in 0..n {
        bytes = scraper.scrape(Format::PrometheusText).len();
    }
    let per = start.elapsed() / n as u32;
    println!("{n} scrapes, {per:?} per scrape, {bytes} bytes");
}
