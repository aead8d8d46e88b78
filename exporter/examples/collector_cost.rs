//! Mean wall time of one `collect` per collector, in-process, for the cost
//! tables in docs/collectors/: `cargo run --release --example collector_cost
//! -- N PROCFS SYSFS [NAME[:FLAG,...]]...` (default: every registered
//! collector, flags at their defaults). A `:FLAG` turns a Bool flag on,
//! e.g. `cpu:collector.cpu.info`.

use std::time::Instant;

use usescope::collectors::{self, FlagValue, Settings};
use usescope::scrape::exposition::{Encoder, Format};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let procfs = args.next().unwrap_or_else(|| "/proc".into());
    let sysfs = args.next().unwrap_or_else(|| "/sys".into());
    let mut wanted: Vec<String> = args.collect();
    if wanted.is_empty() {
        wanted = collectors::ALL.iter().map(|s| s.name.to_string()).collect();
    }
    let mut buf = Vec::with_capacity(1 << 20);
    for w in &wanted {
        let (name, flags) = w.split_once(':').unwrap_or((w, ""));
        let Some(spec) = collectors::find(name) else {
            eprintln!("unknown collector {name}");
            continue;
        };
        let mut s = Settings::with_roots(&procfs, &sysfs);
        for f in flags.split(',').filter(|f| !f.is_empty()) {
            let flag = spec
                .flags
                .iter()
                .find(|x| x.name == f)
                .expect("a flag of the collector");
            s.set(flag.name, Some(FlagValue::Bool(true)));
        }
        let mut c = (spec.build)(&s);
        // One warm-up: kept descriptors opened, buffers grown.
        buf.clear();
        let ok = c
            .collect(&mut Encoder::new(&mut buf, Format::PrometheusText))
            .is_ok();
        let start = Instant::now();
        for _ in 0..n {
            buf.clear();
            let _ = c.collect(&mut Encoder::new(&mut buf, Format::PrometheusText));
        }
        let per = start.elapsed() / n;
        println!(
            "{w:40} {per:>12?} per collect, {:>7} bytes{}",
            buf.len(),
            if ok { "" } else { " (FAILED)" }
        );
    }
}
