//! SELinux state → `node_selinux_enabled`, `node_selinux_config_mode` and
//! `node_selinux_current_mode`: node_exporter's selinux collector
//! (collector/selinux_linux.go, which asks opencontainers/go-selinux).
//!
//! - SELinux is enabled when selinuxfs is mounted (its `enforce` file
//!   exists under `--path.sysfs`, `fs/selinux/enforce`) and this process's
//!   label is not `kernel` (the label every process has while no policy
//!   is loaded; `--path.procfs`, `self/attr/current`). Otherwise only
//!   `node_selinux_enabled 0` is written, as node_exporter does.
//! - `current_mode` is the number in `enforce`: 1 enforcing, 0 permissive.
//! - `config_mode` is the boot-time mode from `SELINUX=` in
//!   `etc/selinux/config` under `--path.rootfs`: enforcing 1, permissive
//!   0, anything else (or no file) -1, go-selinux's `DefaultEnforceMode`.
//!
//! Unlike node_exporter, which always reads the container's own
//! /sys/fs/selinux and /etc/selinux/config, usescope reads them under
//! `--path.sysfs` and `--path.rootfs`, so a containerised usescope with the
//! host's trees mounted reports the host (docs/collectors/selinux.md). On
//! a host without SELinux a scrape looks the file up only after a uevent
//! or a mount (absence.rs).

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{i64_field, lines, parse_fresh, single_field};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "selinux",
    default_enabled: true,
    help: "SELinux enablement and enforcing mode from selinuxfs and /etc/selinux/config",
    flags: &[],
    build,
    sources: &[
        Source::sys("fs/selinux/enforce", "selinux_enforce"),
        Source::rootfs("etc/selinux/config", "selinux_config"),
    ],
    parsers: &[
        Parser::numeric("selinux_enforce", |t| {
            parse_fresh(t, parse_enforce_into).map(drop)
        }),
        Parser::text("selinux_config", |t| {
            parse_fresh(t, parse_config_into).map(drop)
        }),
    ],
};

const ENABLED: Desc = Desc::gauge(
    "node_selinux_enabled",
    "SELinux is enabled, 1 is true, 0 is false",
);
const CONFIG_MODE: Desc = Desc::gauge(
    "node_selinux_config_mode",
    "Configured SELinux enforcement mode",
);
const CURRENT_MODE: Desc = Desc::gauge(
    "node_selinux_current_mode",
    "Current SELinux enforcement mode",
);

/// go-selinux's `Disabled`: the config mode when the file says neither
/// enforcing nor permissive, or is missing.
const DISABLED: i64 = -1;

/// selinuxfs' `enforce`: one integer, written by the kernel without a
/// newline (`0` permissive, `1` enforcing).
pub fn parse_enforce_into(text: &str, out: &mut i64) -> Result<(), ParseError> {
    let tok = single_field(text).ok_or_else(|| ParseError::new(1, "expected one integer"))?;
    *out = i64_field(tok, 1, "enforce")?;
    Ok(())
}

/// `/etc/selinux/config` as go-selinux's `readConfig` reads it: trimmed
/// lines, `#` and `;` start comments, the first `SELINUX=value` counts
/// (double quotes around the value dropped), lines without `=` are
/// ignored. Any text is a valid config; `out` is the mode it configures.
pub fn parse_config_into(text: &str, out: &mut i64) -> Result<(), ParseError> {
    *out = DISABLED;
    for line in lines(text) {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(("SELINUX", value)) = line.split_once('=') {
            *out = match value.trim_matches('"') {
                "enforcing" => 1,
                "permissive" => 0,
                _ => DISABLED,
            };
            break;
        }
    }
    Ok(())
}

pub struct SelinuxCollector {
    enforce: SourceFile,
    config: SourceFile,
    /// This process's SELinux label; `kernel` means no policy is loaded.
    label: SourceFile,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(SelinuxCollector {
        enforce: SourceFile::small(&s.sysfs, "fs/selinux/enforce"),
        config: SourceFile::new(&s.rootfs, "etc/selinux/config"),
        label: SourceFile::transient(&s.procfs, "self/attr/current"),
    })
}

impl SelinuxCollector {
    /// Whether this process runs without a policy (label `kernel`). An
    /// unreadable label does not disable SELinux, as in go-selinux.
    fn unlabelled(&mut self) -> bool {
        match self.label.read() {
            Ok(Read::Text(t)) => t.trim_end_matches('\0').trim() == "kernel",
            _ => false,
        }
    }
}

impl Collector for SelinuxCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut current = 0;
        let mounted = self
            .enforce
            .parse_with(|t| parse_enforce_into(t, &mut current))?
            .is_some();
        if !mounted || self.unlabelled() {
            enc.family(&ENABLED);
            enc.sample(&ENABLED, &[], 0u64);
            return Ok(());
        }
        let mut configured = DISABLED;
        self.config
            .parse_with(|t| parse_config_into(t, &mut configured))?;
        enc.family(&CONFIG_MODE);
        enc.sample(&CONFIG_MODE, &[], configured);
        enc.family(&CURRENT_MODE);
        enc.sample(&CURRENT_MODE, &[], current);
        enc.family(&ENABLED);
        enc.sample(&ENABLED, &[], 1u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn enforce_is_one_integer() {
        assert_eq!(parse_fresh("1", parse_enforce_into).unwrap(), 1);
        assert_eq!(parse_fresh("0\n", parse_enforce_into).unwrap(), 0);
        let e = parse_fresh("", parse_enforce_into).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse_fresh("1 0", parse_enforce_into).is_err());
        assert!(parse_fresh("on", parse_enforce_into).is_err());
    }

    #[test]
    fn config_as_go_selinux_reads_it() {
        let mode = |t| parse_fresh(t, parse_config_into).unwrap();
        assert_eq!(mode("SELINUX=enforcing\nSELINUXTYPE=targeted\n"), 1);
        assert_eq!(mode("# SELINUX=enforcing\n  SELINUX=\"permissive\"  \n"), 0);
        assert_eq!(mode("; comment\nSELINUX=disabled\n"), -1);
        assert_eq!(mode("SELINUXTYPE=mls\n"), -1);
        // The first SELINUX= line wins.
        assert_eq!(mode("SELINUX=permissive\nSELINUX=enforcing\n"), 0);
        // A key with spaces around `=` is not go-selinux's SELINUX.
        assert_eq!(mode("SELINUX = enforcing\n"), -1);
        assert_eq!(mode(""), -1);
    }

    fn settings(sys: &std::path::Path, proc: &std::path::Path) -> Settings {
        let mut s = Settings::with_roots(proc, sys);
        s.rootfs = fixture("rootfs");
        s
    }

    #[test]
    fn enabled_host_from_the_fixture() {
        let s = settings(&fixture("sys"), &fixture("proc"));
        assert_eq!(
            render(build(&s).as_mut()).unwrap(),
            "# HELP node_selinux_config_mode Configured SELinux enforcement mode\n\
             # TYPE node_selinux_config_mode gauge\n\
             node_selinux_config_mode 1\n\
             # HELP node_selinux_current_mode Current SELinux enforcement mode\n\
             # TYPE node_selinux_current_mode gauge\n\
             node_selinux_current_mode 0\n\
             # HELP node_selinux_enabled SELinux is enabled, 1 is true, 0 is false\n\
             # TYPE node_selinux_enabled gauge\n\
             node_selinux_enabled 1\n"
        );
    }

    #[test]
    fn disabled_without_selinuxfs_or_without_a_policy() {
        let disabled = "# HELP node_selinux_enabled SELinux is enabled, 1 is true, 0 is false\n\
                        # TYPE node_selinux_enabled gauge\n\
                        node_selinux_enabled 0\n";
        let none = std::path::Path::new("/nonexistent-usescope");
        let s = settings(none, &fixture("proc"));
        assert_eq!(render(build(&s).as_mut()).unwrap(), disabled);

        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(proc.path().join("self/attr")).unwrap();
        std::fs::write(proc.path().join("self/attr/current"), "kernel\0").unwrap();
        let s = settings(&fixture("sys"), proc.path());
        assert_eq!(render(build(&s).as_mut()).unwrap(), disabled);
    }

    #[test]
    fn a_bad_enforce_file_is_named() {
        let sys = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(sys.path().join("fs/selinux")).unwrap();
        std::fs::write(sys.path().join("fs/selinux/enforce"), "x").unwrap();
        let s = settings(sys.path(), &fixture("proc"));
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("fs/selinux/enforce"), "{e}");
        assert_eq!(e.line, Some(1));
    }
}
