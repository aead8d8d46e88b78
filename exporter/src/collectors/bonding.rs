//! /sys/class/net/bonding_masters, BOND/bonding/slaves and each slave's
//! `bonding_slave/mii_status` → `node_bonding_slaves{master}` and
//! `node_bonding_active{master}`, node_exporter's bonding collector
//! (collector/bonding_linux.go).
//!
//! A slave counts as active when its MII status is `up`. Active below
//! configured is a bond running without its redundancy: an error of the
//! USE method that no throughput graph shows.
//!
//! Each slave's status is `BOND/lower_SLAVE/bonding_slave/mii_status`, or
//! `BOND/slave_SLAVE/...` on kernels before 4.x, as node_exporter reads it.
//! Files that vanish between two reads (a bond deleted, a slave released
//! during the scrape) leave that bond or slave out; node_exporter fails
//! the collector then. Without the bonding driver there is no
//! `bonding_masters`: no series, and success.

use std::path::{Path, PathBuf};

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines, parse_fresh};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "bonding",
    default_enabled: true,
    help: "Configured and active slaves of bonding interfaces from /sys/class/net",
    flags: &[],
    build,
    sources: &[
        Source::sys("class/net/bonding_masters", "bonding_names"),
        Source::sys("class/net/bond0/bonding/slaves", "bonding_names"),
        Source::sys(
            "class/net/bond0/lower_va/bonding_slave/mii_status",
            "bonding_mii_status",
        ),
    ],
    parsers: &[
        Parser::text("bonding_names", |t| {
            parse_fresh(t, parse_names_into).map(drop)
        }),
        Parser::text("bonding_mii_status", |t| {
            parse_fresh(t, parse_mii_status_into).map(drop)
        }),
    ],
};

const SLAVES: Desc = Desc::gauge(
    "node_bonding_slaves",
    "Number of configured slaves per bonding interface.",
);
const ACTIVE: Desc = Desc::gauge(
    "node_bonding_active",
    "Number of active slaves per bonding interface.",
);

/// Interface names, space-separated on one line (`bond0 bond1\n`); an
/// empty file is an empty list. Each name must be usable as one path
/// component: not `.` or `..`, no `/` (dev_valid_name).
pub fn parse_names_into(s: &str, out: &mut Vec<String>) -> Result<(), ParseError> {
    let mut n = 0;
    for (i, line) in lines(s).enumerate() {
        if i > 0 {
            return Err(ParseError::new(i + 1, "expected a single line"));
        }
        for name in fields(line) {
            if name == "." || name == ".." || name.contains('/') {
                return Err(ParseError::new(
                    1,
                    format!("invalid interface name {}", excerpt(name)),
                ));
            }
            if n == out.len() {
                out.push(String::new());
            }
            out[n].clear();
            out[n].push_str(name);
            n += 1;
        }
    }
    out.truncate(n);
    Ok(())
}

/// MII status of a slave: one line, `up`, `down`, `going down` or
/// `going back` (bond_slave_link_status). Sets whether it is `up`.
pub fn parse_mii_status_into(s: &str, up: &mut bool) -> Result<(), ParseError> {
    let mut lines = lines(s);
    let status = lines.next().unwrap_or("").trim();
    if lines.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    if status.is_empty() || !status.bytes().all(|b| b.is_ascii_lowercase() || b == b' ') {
        return Err(ParseError::new(
            1,
            format!("invalid MII status {}", excerpt(status)),
        ));
    }
    *up = status == "up";
    Ok(())
}

/// A slave's status file, `lower_` first, then the older `slave_`.
struct Slave {
    name: String,
    lower: SourceFile,
    older: SourceFile,
    seen: u64,
}

struct Master {
    name: String,
    slaves_file: SourceFile,
    slave_names: Vec<String>,
    slaves: Vec<Slave>,
    /// Configured and active this scrape; `None`: the bond vanished.
    counts: Option<(u64, u64)>,
    seen: u64,
}

pub struct BondingCollector {
    net: PathBuf,
    masters_file: SourceFile,
    names: Vec<String>,
    /// Sorted by name; bonds not listed any more are dropped.
    masters: Vec<Master>,
    scrape: u64,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    let net = s.sysfs.join("class/net");
    Box::new(BondingCollector {
        masters_file: SourceFile::attribute(&net, "bonding_masters"),
        net,
        names: Vec::new(),
        masters: Vec::new(),
        scrape: 0,
    })
}

/// The entry for `name` in a Vec sorted by `key`, created by `make`.
fn entry<'a, T>(
    v: &'a mut Vec<T>,
    name: &str,
    key: impl Fn(&T) -> &str,
    make: impl FnOnce() -> T,
) -> &'a mut T {
    let i = match v.binary_search_by(|e| key(e).cmp(name)) {
        Ok(i) => i,
        Err(i) => {
            v.insert(i, make());
            i
        }
    };
    &mut v[i]
}

impl Master {
    fn new(net: &Path, name: &str) -> Master {
        Master {
            name: name.to_string(),
            slaves_file: SourceFile::attribute(net, format!("{name}/bonding/slaves")),
            slave_names: Vec::new(),
            slaves: Vec::new(),
            counts: None,
            seen: 0,
        }
    }

    /// Reads the slave list and each slave's status into `counts`.
    fn read(&mut self, net: &Path, scrape: u64) -> Result<(), CollectError> {
        self.counts = None;
        let names = &mut self.slave_names;
        if self
            .slaves_file
            .parse_with(|t| parse_names_into(t, names))?
            .is_none()
        {
            return Ok(());
        }
        let (mut configured, mut active) = (0, 0);
        for name in &self.slave_names {
            let master = &self.name;
            let slave = entry(
                &mut self.slaves,
                name,
                |s| &s.name,
                || Slave {
                    name: name.clone(),
                    lower: SourceFile::attribute(
                        net,
                        format!("{master}/lower_{name}/bonding_slave/mii_status"),
                    ),
                    older: SourceFile::attribute(
                        net,
                        format!("{master}/slave_{name}/bonding_slave/mii_status"),
                    ),
                    seen: 0,
                },
            );
            slave.seen = scrape;
            let mut up = false;
            let found = match slave
                .lower
                .parse_with(|t| parse_mii_status_into(t, &mut up))?
            {
                Some(()) => true,
                None => slave
                    .older
                    .parse_with(|t| parse_mii_status_into(t, &mut up))?
                    .is_some(),
            };
            if found {
                configured += 1;
                active += u64::from(up);
            }
        }
        self.slaves.retain(|s| s.seen == scrape);
        self.counts = Some((configured, active));
        Ok(())
    }
}

impl Collector for BondingCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.scrape += 1;
        let scrape = self.scrape;
        let names = &mut self.names;
        if self
            .masters_file
            .parse_with(|t| parse_names_into(t, names))?
            .is_none()
        {
            self.masters.clear();
            return Ok(());
        }
        for name in &self.names {
            let net = &self.net;
            let m = entry(
                &mut self.masters,
                name,
                |m| &m.name,
                || Master::new(net, name),
            );
            m.seen = scrape;
            m.read(net, scrape)?;
        }
        self.masters.retain(|m| m.seen == scrape);
        let present = || {
            self.masters
                .iter()
                .filter_map(|m| Some((&m.name, m.counts?)))
        };
        if present().next().is_none() {
            return Ok(());
        }
        enc.family(&SLAVES);
        for (name, (configured, _)) in present() {
            enc.sample(&SLAVES, &[("master", name)], configured);
        }
        enc.family(&ACTIVE);
        for (name, (_, active)) in present() {
            enc.sample(&ACTIVE, &[("master", name)], active);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn names() {
        let parse = |s| parse_fresh(s, parse_names_into);
        assert_eq!(parse("bond0 bond1\n").unwrap(), ["bond0", "bond1"]);
        assert!(parse("").unwrap().is_empty());
        assert!(parse("\n").unwrap().is_empty());
        assert_eq!(parse("a\nb\n").unwrap_err().line, 2);
        assert!(parse("bond0 ..\n").unwrap_err().msg.contains("invalid"));
        assert!(parse("../etc\n").unwrap_err().msg.contains("invalid"));
        // The reused Vec shrinks with the list.
        let mut v = Vec::new();
        parse_names_into("a b c\n", &mut v).unwrap();
        parse_names_into("d\n", &mut v).unwrap();
        assert_eq!(v, ["d"]);
    }

    #[test]
    fn mii_status() {
        let parse = |s| parse_fresh(s, parse_mii_status_into);
        assert!(parse("up\n").unwrap());
        assert!(!parse("down\n").unwrap());
        assert!(!parse("going back\n").unwrap());
        assert!(!parse("going down\n").unwrap());
        assert!(parse("").is_err());
        assert!(parse("UP\n").is_err());
        assert_eq!(parse("up\nup\n").unwrap_err().line, 2);
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let mut c = build(&s);
        let out = render(c.as_mut()).unwrap();
        assert_eq!(
            out,
            "# HELP node_bonding_slaves Number of configured slaves per bonding interface.\n\
             # TYPE node_bonding_slaves gauge\n\
             node_bonding_slaves{master=\"bond0\"} 2\n\
             node_bonding_slaves{master=\"bond1\"} 1\n\
             # HELP node_bonding_active Number of active slaves per bonding interface.\n\
             # TYPE node_bonding_active gauge\n\
             node_bonding_active{master=\"bond0\"} 1\n\
             node_bonding_active{master=\"bond1\"} 0\n"
        );
        assert_eq!(render(c.as_mut()).unwrap(), out);
        let absent = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }

    #[test]
    fn vanishing_bonds_and_slaves_and_the_older_layout() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("class/net");
        let w = |rel: &str, text: &str| {
            let p = net.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w("bonding_masters", "bond0 gone\n");
        w("bond0/bonding/slaves", "eth0 eth1 eth2\n");
        w("bond0/lower_eth0/bonding_slave/mii_status", "up\n");
        // Before 4.x the link was named slave_.
        w("bond0/slave_eth1/bonding_slave/mii_status", "up\n");
        // eth2 released during the scrape: no status file.
        let mut c = build(&Settings::with_roots("/nonexistent", dir.path()));
        let out = render(c.as_mut()).unwrap();
        assert!(
            out.contains("node_bonding_slaves{master=\"bond0\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("node_bonding_active{master=\"bond0\"} 2\n"),
            "{out}"
        );
        assert!(!out.contains("gone"), "{out}");
        w("bond0/lower_eth0/bonding_slave/mii_status", "sideways?\n");
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(
            e.file,
            net.join("bond0/lower_eth0/bonding_slave/mii_status")
        );
        w("bonding_masters", "");
        assert_eq!(render(c.as_mut()).unwrap(), "");
    }
}
