//! Runs N scrapes in-process with every default collector and no HTTP, for
//! profilers: `cargo build --release --example scrape_loop` then
//! `valgrind --tool=callgrind target/release/examples/scrape_loop 200 /proc`.
//!
//! Prints the mean wall time per scrape and the output size. A third
//! argument, a comma-separated list of collectors (`filesystem`), runs only
//! those: `scrape_loop 2000 /proc filesystem`.

use std::time::Instant;

use usescope::collectors::{self, Settings};
use usescope::scrape::collector::Scraper;
use usescope::scrape::exposition::Format;
use usescope::scrape::self_metrics::SelfMetrics;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let procfs = args.next().unwrap_or_else(|| "/proc".to_string());
    let only: Option<Vec<String>> = args
        .next()
        .map(|a| a.split(',').map(str::to_string).collect());
    let settings = Settings::with_roots(procfs, "/sys");
    let mut scraper = Scraper::new(SelfMetrics::new());
    // As the daemon does: absent sources are not looked up on every scrape.
    scraper.watch_for_appearing_sources(usescope::kernel::absence::Watch::new(
        &settings.procfs,
        &settings.sysfs,
    ));
    let enabled = |name: &str, default: bool| match &only {
        Some(list) => list.iter().any(|n| n == name),
        None => default,
    };
    for spec in collectors::ALL
        .iter()
        .filter(|s| enabled(s.name, s.default_enabled))
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
