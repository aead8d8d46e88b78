//! /proc/sys/kernel/hung_task_detect_count → `node_kernel_hung_tasks_total`,
//! node_exporter's kernel_hung collector (collector/kernel_hung_linux.go,
//! procfs `KernelHung`).
//!
//! The sysctl (Linux 6.14+, with CONFIG_DETECT_HUNG_TASK) counts the tasks
//! the hung-task detector has reported since boot: a task in
//! uninterruptible sleep (D state) for longer than
//! `kernel.hung_task_timeout_secs`. Any increase means something (storage,
//! NFS, a driver) stalled a task for minutes. An older kernel has no file:
//! no series, and the collector succeeds (node_exporter reports
//! `ErrNoData`, which sets its success to 0).

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{parse_fresh, u64_sysctl_into};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "kernel_hung",
    default_enabled: true,
    help: "Tasks the hung-task detector reported, from /proc/sys/kernel/hung_task_detect_count",
    flags: &[],
    build,
    sources: &[Source::proc(
        "sys/kernel/hung_task_detect_count",
        "kernel_hung",
    )],
    parsers: &[Parser::numeric("kernel_hung", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const HUNG: Desc = Desc::counter(
    "node_kernel_hung_tasks_total",
    "Total number of tasks that have been detected as hung since the system booted.",
);

/// Parses `3\n`: one unsigned number (procfs trims and `ParseUint`s it).
pub fn parse_into(s: &str, out: &mut u64) -> Result<(), ParseError> {
    u64_sysctl_into(s, out)
}

pub struct KernelHungCollector {
    file: SourceFile,
    count: u64,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(KernelHungCollector {
        file: SourceFile::small(&s.procfs, "sys/kernel/hung_task_detect_count"),
        count: 0,
    })
}

impl Collector for KernelHungCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let count = &mut self.count;
        if self.file.parse_with(|t| parse_into(t, count))?.is_none() {
            return Ok(());
        }
        enc.family(&HUNG);
        enc.sample(&HUNG, &[], self.count);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<u64, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn parses_real_format() {
        assert_eq!(parse("10\n").unwrap(), 10);
        assert_eq!(parse("0").unwrap(), 0);
        assert_eq!(parse("18446744073709551615\n").unwrap(), u64::MAX);
    }

    #[test]
    fn malformed() {
        assert!(parse("").unwrap_err().msg.contains("value"));
        assert!(parse("-1\n").unwrap_err().msg.contains("value"));
        assert!(parse("18446744073709551616\n").is_err());
        assert!(parse("1 2\n").unwrap_err().msg.contains("extra"));
        assert_eq!(parse("1\n\n2\n").unwrap_err().line, 1);
        assert!(parse("x\n").is_err());
    }

    #[test]
    fn collector_on_fixture_and_absent() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        assert_eq!(
            render(build(&s).as_mut()).unwrap(),
            "# HELP node_kernel_hung_tasks_total Total number of tasks that have been detected as hung since the system booted.\n\
             # TYPE node_kernel_hung_tasks_total counter\n\
             node_kernel_hung_tasks_total 10\n"
        );
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
