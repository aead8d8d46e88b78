//! /proc/loadavg → `node_load1`, `node_load5`, `node_load15`, and
//! `usescope_tasks` against `usescope_pid_max` and `usescope_threads_max`.
//!
//! loadavg's fourth field ends in the kernel's `nr_threads`: every task on
//! the host, threads and zombies included, each holding a PID. Compared
//! with /proc/sys/kernel/pid_max (and threads-max, the other cap on fork)
//! it says how close the host is to fork failing with EAGAIN, exactly and
//! without the walk of /proc that node_exporter's processes collector
//! does. The two sysctls are read each scrape too: an administrator may
//! raise them at run time.
//!
//! One of the smallest collectors and a template for the others (see
//! docs/adding-a-collector.md): a `SPEC`, a pure `parse_into`, a collector
//! that owns its [`SourceFile`] and parsed output, and `Desc` constants
//! with node_exporter's names and help text.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{
    f64_field, fields, next_field, parse_fresh, u64_field, u64_sysctl_into,
};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "loadavg",
    default_enabled: true,
    help: "Load averages from /proc/loadavg",
    flags: &[],
    build,
    sources: &[
        Source::proc("loadavg", "loadavg"),
        Source::proc("sys/kernel/pid_max", "sysctl"),
        Source::proc("sys/kernel/threads-max", "sysctl"),
    ],
    parsers: &[
        Parser::numeric("loadavg", |t| parse_fresh(t, parse_into).map(drop)),
        Parser::numeric("sysctl", |t| parse_fresh(t, u64_sysctl_into).map(drop)),
    ],
};

const LOAD1: Desc = Desc::gauge("node_load1", "1m load average.");
const LOAD5: Desc = Desc::gauge("node_load5", "5m load average.");
const LOAD15: Desc = Desc::gauge("node_load15", "15m load average.");
const TASKS: Desc = Desc::gauge(
    "usescope_tasks",
    "Tasks (processes and threads, zombies included) on the host, each holding a PID: the total of /proc/loadavg's fourth field (nr_threads).",
);
const PID_MAX: Desc = Desc::gauge(
    "usescope_pid_max",
    "kernel.pid_max: PIDs run from 1 to this minus one, so fork fails once as many tasks exist.",
);
const THREADS_MAX: Desc = Desc::gauge(
    "usescope_threads_max",
    "kernel.threads-max: the most tasks fork will create host-wide.",
);

#[derive(Debug, Default, PartialEq)]
pub struct LoadAvg {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
    /// Tasks on the host (nr_threads), the total after the slash.
    pub tasks: u64,
}

/// Parses `0.08 0.06 0.02 1/123 4567`: the averages and the total of tasks
/// are exported; the runnable count and last pid are validated too, so a
/// file that is not /proc/loadavg is reported rather than half-read.
pub fn parse_into(s: &str, out: &mut LoadAvg) -> Result<(), ParseError> {
    let line = s
        .lines()
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    let mut f = fields(line);
    *out = LoadAvg {
        one: f64_field(next_field(&mut f, 1, "load1")?, 1, "load1")?,
        five: f64_field(next_field(&mut f, 1, "load5")?, 1, "load5")?,
        fifteen: f64_field(next_field(&mut f, 1, "load15")?, 1, "load15")?,
        tasks: 0,
    };
    let tasks = next_field(&mut f, 1, "runnable/total")?;
    let (runnable, total) = tasks.split_once('/').ok_or_else(|| {
        ParseError::new(1, format!("runnable/total: expected N/M, got {tasks:?}"))
    })?;
    u64_field(runnable, 1, "runnable")?;
    out.tasks = u64_field(total, 1, "total")?;
    u64_field(next_field(&mut f, 1, "last_pid")?, 1, "last_pid")?;
    if let Some(extra) = f.next() {
        return Err(ParseError::new(
            1,
            format!("unexpected extra field {extra:?}"),
        ));
    }
    Ok(())
}

pub struct LoadAvgCollector {
    file: SourceFile,
    parsed: LoadAvg,
    pid_max: SourceFile,
    threads_max: SourceFile,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(LoadAvgCollector {
        file: SourceFile::new(&s.procfs, "loadavg"),
        parsed: LoadAvg::default(),
        pid_max: SourceFile::small(&s.procfs, "sys/kernel/pid_max"),
        threads_max: SourceFile::small(&s.procfs, "sys/kernel/threads-max"),
    })
}

impl Collector for LoadAvgCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let parsed = &mut self.parsed;
        if self.file.parse_with(|t| parse_into(t, parsed))?.is_none() {
            return Ok(());
        }
        let l = &self.parsed;
        for (desc, v) in [(&LOAD1, l.one), (&LOAD5, l.five), (&LOAD15, l.fifteen)] {
            enc.family(desc);
            enc.sample(desc, &[], v);
        }
        enc.family(&TASKS);
        enc.sample(&TASKS, &[], l.tasks);
        // The limits after the task count: a kernel without one (absent)
        // costs only its own family.
        for (desc, file) in [
            (&PID_MAX, &mut self.pid_max),
            (&THREADS_MAX, &mut self.threads_max),
        ] {
            let mut v = 0;
            if file.parse_with(|t| u64_sysctl_into(t, &mut v))?.is_some() {
                enc.family(desc);
                enc.sample(desc, &[], v);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<LoadAvg, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn parses_real_format() {
        let l = parse("0.08 0.06 0.02 1/123 4567\n").unwrap();
        assert_eq!(
            l,
            LoadAvg {
                one: 0.08,
                five: 0.06,
                fifteen: 0.02,
                tasks: 123,
            }
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(parse("").unwrap_err().line, 1);
        assert!(parse("0.1 0.2\n").unwrap_err().msg.contains("load15"));
        assert!(parse("a b c\n").is_err());
        assert!(parse("nan 1 1\n").is_err());
        assert!(
            parse("0.1 0.2 0.3\n")
                .unwrap_err()
                .msg
                .contains("runnable/total")
        );
        assert!(
            parse("0.1 0.2 0.3 1/2 99999999999999999999\n")
                .unwrap_err()
                .msg
                .contains("last_pid")
        );
        assert!(parse("0.1 0.2 0.3 12 5\n").is_err());
        assert!(
            parse("0.1 0.2 0.3 1/2 5 6\n")
                .unwrap_err()
                .msg
                .contains("extra")
        );
    }
}
