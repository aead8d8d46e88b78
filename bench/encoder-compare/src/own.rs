//! The model through usescope's own encoder, the way the scraper drives it:
//! one reused buffer, a mark before each collector (where a failed
//! collector's output would be cut off again), `family` then samples.

use usescope::scrape::exposition::{Desc, Encoder, Format};

use crate::model::{Chunk, Member};

pub fn encode(chunks: &[Chunk], format: Format, buf: &mut Vec<u8>) {
    buf.clear();
    let mut enc = Encoder::new(buf, format);
    for chunk in chunks {
        let mark = enc.mark();
        for f in &chunk.families {
            enc.family_named(f.name, f.help, f.help_plain, f.kind);
            for member in &f.members {
                match member {
                    Member::Sample {
                        suffix,
                        labels,
                        value,
                    } => enc.sample_named(f.name, suffix, labels, None, *value),
                    Member::Histogram {
                        labels,
                        buckets,
                        sum,
                        count,
                    } => {
                        let desc = Desc {
                            name: f.name,
                            help: f.help,
                            kind: f.kind,
                            help_plain: f.help_plain,
                        };
                        enc.histogram(&desc, labels, buckets, *sum, *count);
                    }
                }
            }
        }
        // Every model collector succeeded; the scraper would truncate here
        // on an error.
        if enc.mark() < mark {
            enc.truncate(mark);
        }
    }
    enc.finish();
}
