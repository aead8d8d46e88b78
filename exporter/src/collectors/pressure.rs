//! /proc/pressure/{cpu,io,memory,irq} → `node_pressure_*_seconds_total`.
//!
//! Pressure stall information (PSI, Linux 4.20+). Like node_exporter 1.9 this
//! exports only the cumulative `total=` stall time, converted from
//! microseconds to seconds; the kernel's averages are better computed with
//! `rate()`. "some" is exported as `*_waiting_*` (at least one task stalled),
//! "full" as `*_stalled_*` (all non-idle tasks stalled). CPU "full" is not
//! exported, as in node_exporter, and irq has only "full".
//!
//! Each resource file is optional: no /proc/pressure at all means the kernel
//! has no PSI, and /proc/pressure/irq needs CONFIG_IRQ_TIME_ACCOUNTING.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::parse_fresh;
use crate::kernel::psi::{Psi, parse_into};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "pressure",
    default_enabled: true,
    help: "Pressure stall information from /proc/pressure",
    flags: &[],
    build,
    sources: &[
        Source::proc("pressure/cpu", "pressure"),
        Source::proc("pressure/io", "pressure"),
        Source::proc("pressure/memory", "pressure"),
        Source::proc("pressure/irq", "pressure"),
    ],
    parsers: &[Parser::numeric("pressure", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const CPU_WAITING: Desc = Desc::counter(
    "node_pressure_cpu_waiting_seconds_total",
    "Total time in seconds that processes have waited for CPU time",
);
const IO_WAITING: Desc = Desc::counter(
    "node_pressure_io_waiting_seconds_total",
    "Total time in seconds that processes have waited due to IO congestion",
);
const IO_STALLED: Desc = Desc::counter(
    "node_pressure_io_stalled_seconds_total",
    "Total time in seconds no process could make progress due to IO congestion",
);
const MEMORY_WAITING: Desc = Desc::counter(
    "node_pressure_memory_waiting_seconds_total",
    "Total time in seconds that processes have waited for memory",
);
const MEMORY_STALLED: Desc = Desc::counter(
    "node_pressure_memory_stalled_seconds_total",
    "Total time in seconds no process could make progress due to memory congestion",
);
const IRQ_STALLED: Desc = Desc::counter(
    "node_pressure_irq_stalled_seconds_total",
    "Total time in seconds no process could make progress due to IRQ congestion",
);

/// One PSI resource: its file and which of its lines are exported as what.
struct Resource {
    file: &'static str,
    some: Option<&'static Desc>,
    full: Option<&'static Desc>,
}

const RESOURCES: [Resource; 4] = [
    Resource {
        file: "pressure/cpu",
        some: Some(&CPU_WAITING),
        full: None,
    },
    Resource {
        file: "pressure/io",
        some: Some(&IO_WAITING),
        full: Some(&IO_STALLED),
    },
    Resource {
        file: "pressure/memory",
        some: Some(&MEMORY_WAITING),
        full: Some(&MEMORY_STALLED),
    },
    Resource {
        file: "pressure/irq",
        some: None,
        full: Some(&IRQ_STALLED),
    },
];

/// Microseconds to seconds, dividing twice as node_exporter does so the
/// float is bit-for-bit the same.
fn seconds(us: u64) -> f64 {
    us as f64 / 1000.0 / 1000.0
}

pub struct PressureCollector {
    files: [SourceFile; 4],
    parsed: Psi,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(PressureCollector {
        files: RESOURCES.map(|r| SourceFile::new(&s.procfs, r.file)),
        parsed: Psi::default(),
    })
}

impl Collector for PressureCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let psi = &mut self.parsed;
        for (res, file) in RESOURCES.iter().zip(&mut self.files) {
            let parsed = file.parse_with(|t| {
                parse_into(t, psi)?;
                // A line this resource must have is missing: node_exporter
                // reports "no data" (success 0) here too. The error points
                // past the last line, where the line was expected.
                for (wanted, total, kind) in [
                    (res.some.is_some(), psi.some_total_us, "some"),
                    (res.full.is_some(), psi.full_total_us, "full"),
                ] {
                    if wanted && total.is_none() {
                        let end = t.lines().count() + 1;
                        return Err(ParseError::new(end, format!("no `{kind}` line")));
                    }
                }
                Ok(())
            })?;
            if parsed.is_none() {
                continue;
            }
            let lines = [(res.some, psi.some_total_us), (res.full, psi.full_total_us)];
            for (desc, total) in lines {
                if let (Some(desc), Some(total)) = (desc, total) {
                    enc.family(desc);
                    enc.sample(desc, &[], seconds(total));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;

    #[test]
    fn seconds_match_go_arithmetic() {
        assert_eq!(seconds(7713082), 7713082f64 / 1000.0 / 1000.0);
        assert_eq!(seconds(7713082).to_string(), "7.713082");
        assert_eq!(seconds(1).to_string(), "0.000001");
    }

    fn scrape(root: &std::path::Path) -> Result<String, CollectError> {
        let mut c = build(&Settings::with_roots(root, "/nonexistent"));
        let mut buf = Vec::new();
        c.collect(&mut Encoder::new(&mut buf, Format::PrometheusText))?;
        Ok(String::from_utf8(buf).unwrap())
    }

    #[test]
    fn collector_output_on_fixture() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc");
        assert_eq!(
            scrape(root.as_ref()).unwrap(),
            "# HELP node_pressure_cpu_waiting_seconds_total Total time in seconds that processes have waited for CPU time\n\
             # TYPE node_pressure_cpu_waiting_seconds_total counter\n\
             node_pressure_cpu_waiting_seconds_total 7.713082\n\
             # HELP node_pressure_io_waiting_seconds_total Total time in seconds that processes have waited due to IO congestion\n\
             # TYPE node_pressure_io_waiting_seconds_total counter\n\
             node_pressure_io_waiting_seconds_total 2.987636\n\
             # HELP node_pressure_io_stalled_seconds_total Total time in seconds no process could make progress due to IO congestion\n\
             # TYPE node_pressure_io_stalled_seconds_total counter\n\
             node_pressure_io_stalled_seconds_total 2.779424\n\
             # HELP node_pressure_memory_waiting_seconds_total Total time in seconds that processes have waited for memory\n\
             # TYPE node_pressure_memory_waiting_seconds_total counter\n\
             node_pressure_memory_waiting_seconds_total 0\n\
             # HELP node_pressure_memory_stalled_seconds_total Total time in seconds no process could make progress due to memory congestion\n\
             # TYPE node_pressure_memory_stalled_seconds_total counter\n\
             node_pressure_memory_stalled_seconds_total 0\n"
        );
    }

    #[test]
    fn collector_handles_irq_and_missing_lines() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let p = dir.join("pressure");
        std::fs::create_dir_all(&p).unwrap();
        // No PSI at all: nothing, and no error.
        assert_eq!(scrape(&dir.join("none")).unwrap(), "");
        std::fs::write(
            p.join("irq"),
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=2500000\n",
        )
        .unwrap();
        let out = scrape(dir).unwrap();
        assert!(
            out.ends_with("node_pressure_irq_stalled_seconds_total 2.5\n"),
            "{out}"
        );
        // A memory file without its "full" line cannot be exported.
        std::fs::write(
            p.join("memory"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        let e = scrape(dir).unwrap_err();
        assert!(
            e.to_string().contains("pressure/memory:2: no `full` line"),
            "{e}"
        );
    }
}
