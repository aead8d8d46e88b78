//! /proc/sys/kernel/random/{entropy_avail,poolsize} →
//! `node_entropy_available_bits` and `node_entropy_pool_size_bits`,
//! node_exporter's entropy collector (collector/entropy_linux.go).
//!
//! Since Linux 5.18 both read 256 whatever the state of the generator, so
//! these mostly matter on older kernels, where a starved pool made reads of
//! /dev/random block. Each file is handled on its own: one the kernel lacks
//! is not exported (node_exporter fails the collector instead).

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::CollectError;
use crate::kernel::parse::{parse_fresh, u64_sysctl_into};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

const AVAILABLE: &str = "sys/kernel/random/entropy_avail";
const POOL_SIZE: &str = "sys/kernel/random/poolsize";

pub const SPEC: Spec = Spec {
    name: "entropy",
    default_enabled: true,
    help: "Available entropy and pool size from /proc/sys/kernel/random",
    flags: &[],
    build,
    sources: &[
        Source::proc(AVAILABLE, "entropy"),
        Source::proc(POOL_SIZE, "entropy"),
    ],
    parsers: &[Parser::numeric("entropy", |t| {
        parse_fresh(t, u64_sysctl_into).map(drop)
    })],
};

const AVAILABLE_BITS: Desc =
    Desc::gauge("node_entropy_available_bits", "Bits of available entropy.");
const POOL_SIZE_BITS: Desc = Desc::gauge("node_entropy_pool_size_bits", "Bits of entropy pool.");

pub struct EntropyCollector {
    available: SourceFile,
    pool_size: SourceFile,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(EntropyCollector {
        available: SourceFile::small(&s.procfs, AVAILABLE),
        pool_size: SourceFile::small(&s.procfs, POOL_SIZE),
    })
}

impl Collector for EntropyCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        for (file, desc) in [
            (&mut self.available, &AVAILABLE_BITS),
            (&mut self.pool_size, &POOL_SIZE_BITS),
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
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        assert_eq!(
            render(build(&s).as_mut()).unwrap(),
            "# HELP node_entropy_available_bits Bits of available entropy.\n\
             # TYPE node_entropy_available_bits gauge\n\
             node_entropy_available_bits 256\n\
             # HELP node_entropy_pool_size_bits Bits of entropy pool.\n\
             # TYPE node_entropy_pool_size_bits gauge\n\
             node_entropy_pool_size_bits 256\n"
        );
    }

    #[test]
    fn each_file_on_its_own() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let random = dir.join("sys/kernel/random");
        std::fs::create_dir_all(&random).unwrap();
        let mut c = build(&Settings::with_roots(dir, "/nonexistent"));
        assert_eq!(render(c.as_mut()).unwrap(), "");
        std::fs::write(random.join("entropy_avail"), "3712\n").unwrap();
        let out = render(c.as_mut()).unwrap();
        assert!(out.ends_with("node_entropy_available_bits 3712\n"), "{out}");
        assert!(!out.contains("pool_size"));
        std::fs::write(random.join("poolsize"), "4096 x\n").unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(e.file, random.join("poolsize"));
        assert_eq!(e.line, Some(1));
    }
}
