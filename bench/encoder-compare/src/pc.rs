//! The model through prometheus-client 0.24's `Collector` /
//! `DescriptorEncoder` API: one `Collector` per usescope collector, each
//! writing its families with `encode_descriptor` and its samples with
//! `encode_family(labels).encode_counter/encode_gauge/encode_histogram`.
//!
//! Two ways to drive it:
//! - `Plain`: one `Registry` holding every collector, `text::encode` into
//!   one reused `String`. What the crate offers out of the box: HELP and
//!   label values unescaped, and a collector that fails cannot take back
//!   what it already wrote (an `Err` is `fmt::Error` and stops the whole
//!   registry's encode).
//! - `Guarded`: what usescope would have to build around it to keep its
//!   guarantees: HELP and label values escaped before they go in (only those
//!   that need it: a scan of every value, a copy of the few that do), and
//!   one `Registry` per collector encoded into a scratch `String` that is
//!   appended only when the collector succeeded.

use std::borrow::Cow;
use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode, encode_eof, encode_registry};
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType as PcType;
use prometheus_client::registry::Registry;
use usescope::scrape::exposition::{MetricType, Value};

use crate::model::{Chunk, Family, Member};

/// Whether prometheus-client can write a family at all: it has no summary
/// type (OpenMetrics' GaugeHistogram, StateSet and Summary are "not (yet)
/// supported" in its MetricType).
pub fn expressible(f: &Family) -> bool {
    f.kind != MetricType::Summary
}

struct ChunkCollector {
    chunk: &'static Chunk,
    escape: bool,
}

impl fmt::Debug for ChunkCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.chunk.collector)
    }
}

impl Collector for ChunkCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        for f in self.chunk.families.iter().filter(|f| expressible(f)) {
            let (name, kind) = match f.kind {
                // prometheus-client appends `_total` to every counter sample.
                MetricType::Counter => (
                    f.name.strip_suffix("_total").unwrap_or(f.name),
                    PcType::Counter,
                ),
                MetricType::Gauge => (f.name, PcType::Gauge),
                MetricType::Untyped | MetricType::Summary => (f.name, PcType::Unknown),
                MetricType::Histogram => (f.name, PcType::Histogram),
            };
            let help = if self.escape && !f.help_plain {
                escape(f.help, false)
            } else {
                Cow::Borrowed(f.help)
            };
            let mut metric = encoder.encode_descriptor(name, &help, None, kind)?;
            for member in &f.members {
                encode_member(&mut metric, f.kind, member, self.escape)?;
            }
        }
        Ok(())
    }
}

fn encode_member(
    metric: &mut MetricEncoder,
    kind: MetricType,
    member: &Member,
    escape_values: bool,
) -> Result<(), fmt::Error> {
    let labels = match member {
        Member::Sample { labels, .. } | Member::Histogram { labels, .. } => labels,
    };
    // A sample without labels goes straight to the family's encoder:
    // through `encode_family` with an empty set the crate writes `name{}`.
    if labels.is_empty() {
        return write_member(metric, kind, member);
    }
    if escape_values && labels.iter().any(|(_, v)| needs_escape(v, true)) {
        let escaped: Vec<(&str, Cow<str>)> =
            labels.iter().map(|(k, v)| (*k, escape(v, true))).collect();
        write_member(&mut metric.encode_family(&escaped)?, kind, member)
    } else {
        let borrowed: &[(&str, &str)] = labels;
        write_member(&mut metric.encode_family(&borrowed)?, kind, member)
    }
}

fn write_member(
    m: &mut MetricEncoder,
    kind: MetricType,
    member: &Member,
) -> Result<(), fmt::Error> {
    match (member, kind) {
        (
            Member::Histogram {
                buckets,
                sum,
                count,
                ..
            },
            _,
        ) => {
            // The crate wants per-bucket counts and an explicit f64::MAX
            // bucket for +Inf.
            let mut previous = 0;
            let mut per_bucket: Vec<(f64, u64)> = buckets
                .iter()
                .map(|&(le, cumulative)| {
                    let n = cumulative.saturating_sub(previous);
                    previous = cumulative;
                    (le, n)
                })
                .collect();
            per_bucket.push((f64::MAX, count.saturating_sub(previous)));
            m.encode_histogram::<NoLabelSet>(*sum, *count, &per_bucket, None)
        }
        (Member::Sample { value, .. }, MetricType::Counter) => match *value {
            Value::U64(n) => m.encode_counter::<NoLabelSet, _, f64>(&n, None),
            Value::I64(n) => m.encode_counter::<NoLabelSet, _, f64>(&(n as f64), None),
            Value::F64(x) => m.encode_counter::<NoLabelSet, _, f64>(&x, None),
        },
        // A u64 gauge above i64::MAX is an Err in the crate, which ends the
        // whole encode; passed as it comes, as a user of the crate would.
        (Member::Sample { value, .. }, _) => match *value {
            Value::U64(n) => m.encode_gauge(&n),
            Value::I64(n) => m.encode_gauge(&n),
            Value::F64(x) => m.encode_gauge(&x),
        },
    }
}

fn needs_escape(s: &str, quote: bool) -> bool {
    s.bytes()
        .any(|b| b == b'\\' || b == b'\n' || (quote && b == b'"'))
}

/// The text format's escaping: `\\`, newline and (in label values) `"`.
fn escape(s: &str, quote: bool) -> Cow<'_, str> {
    if !needs_escape(s, quote) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

pub struct Plain {
    registry: Registry,
}

impl Plain {
    pub fn new(chunks: &'static [Chunk]) -> Plain {
        let mut registry = Registry::default();
        for chunk in chunks {
            registry.register_collector(Box::new(ChunkCollector {
                chunk,
                escape: false,
            }));
        }
        Plain { registry }
    }

    pub fn encode(&self, body: &mut String) -> fmt::Result {
        body.clear();
        encode(body, &self.registry)
    }
}

pub struct Guarded {
    registries: Vec<Registry>,
    scratch: String,
}

impl Guarded {
    pub fn new(chunks: &'static [Chunk]) -> Guarded {
        let registries = chunks
            .iter()
            .map(|chunk| {
                let mut r = Registry::default();
                r.register_collector(Box::new(ChunkCollector {
                    chunk,
                    escape: true,
                }));
                r
            })
            .collect();
        Guarded {
            registries,
            scratch: String::new(),
        }
    }

    /// Returns how many collectors failed (their output was dropped).
    pub fn encode(&mut self, body: &mut String) -> usize {
        body.clear();
        let mut failed = 0;
        for registry in &self.registries {
            self.scratch.clear();
            match encode_registry(&mut self.scratch, registry) {
                Ok(()) => body.push_str(&self.scratch),
                Err(fmt::Error) => failed += 1,
            }
        }
        let _ = encode_eof(body);
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_only_what_needs_it() {
        assert!(matches!(escape("plain", true), Cow::Borrowed("plain")));
        assert_eq!(escape("a\"b\\c\nd", true), "a\\\"b\\\\c\\nd");
        assert_eq!(escape("a\"b", false), "a\"b");
    }
}
