//! The encoder decision, measured: the same scrape written by usescope's
//! own encoder (exporter/src/scrape/exposition.rs) and by prometheus-client's
//! Collector / DescriptorEncoder API (BENCHMARKS.md, "The encoder").
//!
//! The real collectors run once on a tree (the checked-in fixture by
//! default, or the live host); each collector's output is read back into a
//! model (model.rs) and both encoders write that model, so they see the
//! same families, samples and values. The collectors themselves are the
//! same in either design, so the comparison is of the encoding alone; the
//! `collect` variant (the real collectors into the own encoder, i.e. the
//! scrape minus HTTP and self metrics) puts it in proportion.
//!
//! ```sh
//! cargo run --release -p encoder-compare -- report [--live] [--rounds N]
//! cargo run --release -p encoder-compare -- loop VARIANT N [--live]   # for callgrind
//! bench/encoder-compare/callgrind.sh                                  # instructions per encode
//! ```

mod alloc_count;
mod compare;
mod model;
mod own;
mod pc;

use std::path::PathBuf;
use std::time::Instant;

use usescope::collectors::{self, Settings};
use usescope::scrape::collector::Collector;
use usescope::scrape::exposition::{Encoder, Format};

use model::Chunk;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

const VARIANTS: &[&str] = &[
    "own-text",
    "own-openmetrics",
    "pc-plain",
    "pc-guarded",
    "collect",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let live = args.iter().any(|a| a == "--live");
    let rounds = flag(&args, "--rounds").unwrap_or(2000);
    let settings = settings(live);
    match args.first().map(String::as_str) {
        Some("report") => report(&settings, rounds),
        Some("loop") => {
            let variant = args.get(1).map(String::as_str).unwrap_or("");
            let n = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100);
            run_loop(&settings, variant, n);
        }
        _ => {
            eprintln!(
                "usage: encoder-compare report [--live] [--rounds N] | loop VARIANT N [--live]"
            );
            eprintln!("variants: {}", VARIANTS.join(" "));
            std::process::exit(2);
        }
    }
}

fn flag(args: &[String], name: &str) -> Option<usize> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn settings(live: bool) -> Settings {
    if live {
        return Settings::with_roots("/proc", "/sys");
    }
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../exporter/tests/fixtures");
    let mut s = Settings::with_roots(fixtures.join("proc"), fixtures.join("sys"));
    // The fixture's mount points are not this machine's: statfs fails the
    // same way everywhere instead of measuring the host's disks.
    s.rootfs = PathBuf::from("/nonexistent/encoder-compare-rootfs");
    s
}

/// The default collectors, built as the daemon builds them.
fn build(settings: &Settings) -> Vec<(&'static str, Box<dyn Collector>)> {
    collectors::ALL
        .iter()
        .filter(|spec| spec.default_enabled)
        .map(|spec| (spec.name, (spec.build)(settings)))
        .collect()
}

/// One scrape of every collector, each read back into the model. A
/// collector that fails on this tree is left out (and named).
fn model(settings: &Settings) -> &'static [Chunk] {
    let mut chunks = Vec::new();
    for (name, mut collector) in build(settings) {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        if let Err(e) = collector.collect(&mut enc) {
            eprintln!("collector {name} failed on this tree and is left out: {e}");
            continue;
        }
        let text = String::from_utf8(buf).expect("the encoder writes UTF-8");
        match model::parse(name, &text) {
            Ok(chunk) => chunks.push(chunk),
            Err(e) => panic!("cannot read back {name}'s output: {e}"),
        }
    }
    Box::leak(chunks.into_boxed_slice())
}

/// The variants as closures over their reused state; each call is one scrape.
struct Runner {
    chunks: &'static [Chunk],
    collectors: Vec<(&'static str, Box<dyn Collector>)>,
    bytes: Vec<u8>,
    text: String,
    plain: pc::Plain,
    guarded: pc::Guarded,
}

impl Runner {
    fn new(settings: &Settings) -> Runner {
        let chunks = model(settings);
        Runner {
            chunks,
            collectors: build(settings),
            bytes: Vec::new(),
            text: String::new(),
            plain: pc::Plain::new(chunks),
            guarded: pc::Guarded::new(chunks),
        }
    }

    /// Runs one variant once; returns the bytes it wrote.
    fn run(&mut self, variant: &str) -> usize {
        match variant {
            "own-text" => {
                own::encode(self.chunks, Format::PrometheusText, &mut self.bytes);
                self.bytes.len()
            }
            "own-openmetrics" => {
                own::encode(self.chunks, Format::OpenMetrics, &mut self.bytes);
                self.bytes.len()
            }
            "pc-plain" => {
                if self.plain.encode(&mut self.text).is_err() {
                    eprintln!("pc-plain: encode returned fmt::Error; the body stops there");
                }
                self.text.len()
            }
            "pc-guarded" => {
                self.guarded.encode(&mut self.text);
                self.text.len()
            }
            "collect" => {
                self.bytes.clear();
                let mut enc = Encoder::new(&mut self.bytes, Format::PrometheusText);
                for (_, c) in &mut self.collectors {
                    let mark = enc.mark();
                    if c.collect(&mut enc).is_err() {
                        enc.truncate(mark);
                    }
                }
                self.bytes.len()
            }
            other => panic!("unknown variant {other}; variants: {}", VARIANTS.join(" ")),
        }
    }
}

fn run_loop(settings: &Settings, variant: &str, n: usize) {
    let mut r = Runner::new(settings);
    let mut bytes = 0;
    for _ in 0..n {
        bytes = r.run(variant);
    }
    println!("{variant}: {n} runs, {bytes} bytes");
}

fn report(settings: &Settings, rounds: usize) {
    let mut r = Runner::new(settings);
    let families: usize = r.chunks.iter().map(|c| c.families.len()).sum();
    let samples: usize = r
        .chunks
        .iter()
        .flat_map(|c| &c.families)
        .map(|f| f.members.len())
        .sum();
    let summaries: Vec<&str> = r
        .chunks
        .iter()
        .flat_map(|c| &c.families)
        .filter(|f| !pc::expressible(f))
        .map(|f| f.name)
        .collect();
    println!(
        "model: {} collectors, {families} families, {samples} samples/histograms; \
         {} summary families prometheus-client cannot write (left out of pc-*): {summaries:?}",
        r.chunks.len(),
        summaries.len()
    );

    // Warm up (buffers grow to size), then count one scrape's heap traffic.
    println!("\nvariant            bytes   allocs/scrape  alloc bytes/scrape");
    for v in VARIANTS {
        for _ in 0..3 {
            r.run(v);
        }
        let mut bytes = 0;
        let (calls, alloc_bytes) = alloc_count::during(|| bytes = r.run(v));
        println!("{v:<17} {bytes:>7} {calls:>14} {alloc_bytes:>19}");
    }

    // Wall time: the variants take turns, round after round, so a burst of
    // load on this shared machine falls on all of them alike.
    let mut times: Vec<Vec<u64>> = vec![Vec::with_capacity(rounds); VARIANTS.len()];
    for round in 0..rounds {
        for k in 0..VARIANTS.len() {
            let i = (round + k) % VARIANTS.len();
            let start = Instant::now();
            std::hint::black_box(r.run(VARIANTS[i]));
            times[i].push(start.elapsed().as_nanos() as u64);
        }
    }
    println!("\nwall time per scrape over {rounds} rounds (µs): median  p10  p90");
    for (v, t) in VARIANTS.iter().zip(&mut times) {
        t.sort_unstable();
        let at = |q: f64| t[((t.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        println!("{v:<17} {:>7.1} {:>5.1} {:>5.1}", at(0.5), at(0.1), at(0.9));
    }

    output_differences(&mut r);
    hazards();
}

fn output_differences(r: &mut Runner) {
    r.run("own-openmetrics");
    let own = String::from_utf8(r.bytes.clone()).expect("UTF-8");
    r.run("pc-plain");
    let plain = r.text.clone();
    r.run("pc-guarded");
    let guarded = r.text.clone();
    println!("\noutput, own OpenMetrics against prometheus-client (plain; guarded):");
    let show = |label: &str, d: &compare::Differences| {
        println!(
            "  {label}: {} series in both, {} only in own, {} only in pc, {} with another value text \
             ({} another number), {} HELP lines differ",
            d.common,
            d.only_left.len(),
            d.only_right.len(),
            d.value_text.len(),
            d.value_number,
            d.help.len()
        );
        for s in d.only_left.iter().take(3) {
            println!("    only own: {s}");
        }
        for s in d.only_right.iter().take(3) {
            println!("    only pc:  {s}");
        }
        for (s, a, b) in d.value_text.iter().take(3) {
            println!("    value:    {s}: own {a}, pc {b}");
        }
        for (s, a, b) in d.help.iter().take(3) {
            println!("    HELP:     {s}: own {a:?}, pc {b:?}");
        }
    };
    show("plain", &compare::diff(&own, &plain));
    show("guarded", &compare::diff(&own, &guarded));
    println!("  pc writes `# EOF` (OpenMetrics) and has no text format 0.0.4 at all");
}

/// Inputs this host's scrape does not contain but a real one can: a HELP
/// text or label value that needs escaping, and a gauge above i64::MAX.
fn hazards() {
    let text = "# HELP hazard_info a \\\\ b\n# TYPE hazard_info gauge\n\
                hazard_info{path=\"C:\\\\x\",name=\"say \\\"hi\\\"\"} 1\n\
                # HELP hazard_big_bytes A u64 gauge.\n# TYPE hazard_big_bytes gauge\nhazard_big_bytes 18446744073709551615\n\
                # HELP after_the_big_one Written after it.\n# TYPE after_the_big_one gauge\nafter_the_big_one 1\n";
    let chunks: &'static [Chunk] =
        Box::leak(vec![model::parse("hazards", text).expect("valid")].into_boxed_slice());
    let mut own_buf = Vec::new();
    own::encode(chunks, Format::OpenMetrics, &mut own_buf);
    let mut plain = String::new();
    let result = pc::Plain::new(chunks).encode(&mut plain);
    let mut guarded = String::new();
    let failed = pc::Guarded::new(chunks).encode(&mut guarded);
    println!("\nhazards (a crafted collector output):");
    println!("--- own OpenMetrics\n{}", String::from_utf8_lossy(&own_buf));
    println!("--- pc-plain (encode returned {result:?})\n{plain}");
    println!("--- pc-guarded ({failed} collector dropped whole)\n{guarded}");
}
