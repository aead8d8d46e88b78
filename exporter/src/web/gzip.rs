//! gzip for `/metrics` bodies: ISA-L's igzip, one pass, with Huffman codes
//! fitted to the bodies this daemon writes.
//!
//! Prometheus asks for gzip at every scrape, so compression is a fixed part
//! of every scrape's cost. igzip (Intel's ISA-L, BSD-3, built from source
//! by the `isal-sys` crate and linked statically) picks AVX-512, AVX2 or SSE
//! code at run time.
//!
//! igzip's level 1 makes two passes over the body: one counts its symbols
//! and builds Huffman codes for them, the other encodes. Level 0 makes one
//! pass with codes given in advance. A scrape's body is the previous
//! scrape's with other numbers, so codes fitted to one body fit the next:
//! the encoder counts the symbols of a body now and then (the first, every
//! [`REFIT_EVERY`]th, and one whose length has moved by more than a quarter
//! since, once the codes have served [`REFIT_ON_CHANGE_AFTER`] bodies),
//! keeps the codes, and encodes every body at level 0 with them.
//! On a 71 KB body here, one call after 20 ms idle and back to back
//! (BENCHMARKS.md, "Build and encoding choices"):
//!
//! | compressor | after 20 ms idle | back to back | body |
//! |---|---:|---:|---:|
//! | igzip level 0, fitted codes | 72 µs | 40 µs | 12.66 KB |
//! | igzip level 1 | 90 µs | 46 µs | 12.63 KB |
//! | igzip level 0, igzip's default codes | 73 µs | 40 µs | 14.3 KB |
//!
//! Fitting costs ~100 µs, once per [`REFIT_EVERY`] bodies. The codes give
//! every byte value, length and distance a code, so any input can be
//! encoded with them (bytes the fitted body lacked only cost more bits),
//! and igzip falls back to stored blocks if a body would grow.
//!
//! The encoder keeps its buffers between scrapes (scrapes take turns, so
//! one is enough): igzip's stream state (82 KB, far too much for a stack
//! frame that runs inside a tokio task), the fitted codes, and the output
//! buffer, of which the caller gets an exact-length copy, so a held
//! response costs what it sends and not the worst case.

use isal_sys::igzip_lib as isal;

/// Bodies encoded with one set of fitted codes before they are fitted again.
const REFIT_EVERY: u32 = 256;

/// Bodies encoded with one set of fitted codes before a change of length
/// may fit them again: bodies whose lengths alternate (two scrapers, a
/// collector failing every other scrape) then cost one fitting per this
/// many bodies, not one each. The old codes still encode any body.
const REFIT_ON_CHANGE_AFTER: u32 = 16;

/// Bytes of a body that fitting looks at: the start of a large body is as
/// good a sample as the whole, and this bounds the fitting pass's cost.
const FIT_SAMPLE_BYTES: usize = 256 * 1024;

/// Bytes needed for any input of `len` bytes: igzip falls back to stored
/// blocks when compressing would not fit, which adds 5 bytes per 65535
/// bytes of input, plus the gzip header and trailer and a block header.
fn bound(len: usize) -> usize {
    len + 5 * (len / 65535 + 1) + isal::ISAL_DEF_MAX_HDR_SIZE as usize + 64
}

/// Huffman codes fitted to one body, and how long ago.
struct FittedCodes {
    /// None if igzip could not make codes for that body (it then encodes
    /// with its default codes until the next fitting).
    tables: Option<Box<isal::isal_hufftables>>,
    /// The length of the body they were fitted to.
    fitted_len: usize,
    /// Bodies encoded with them since.
    uses: u32,
}

impl FittedCodes {
    /// Codes for `data`'s symbols.
    fn fit(data: &[u8]) -> FittedCodes {
        let sample = &data[..data.len().min(FIT_SAMPLE_BYTES)];
        // SAFETY: a C struct of integer arrays, for which zero is a valid
        // value; igzip wants the histogram zeroed before it counts.
        let mut histogram = unsafe { Box::<isal::isal_huff_histogram>::new_zeroed().assume_init() };
        // SAFETY: a C struct of integer arrays, which igzip fills.
        let mut tables = unsafe { Box::<isal::isal_hufftables>::new_zeroed().assume_init() };
        // SAFETY: igzip reads `sample.len()` bytes (at most FIT_SAMPLE_BYTES,
        // so the length fits a C int) and never writes through the input
        // pointer; it writes only into the two structs, which we own.
        let rc = unsafe {
            isal::isal_update_histogram(
                sample.as_ptr().cast_mut(),
                sample.len() as std::os::raw::c_int,
                &mut *histogram,
            );
            isal::isal_create_hufftables(&mut *tables, &mut *histogram)
        };
        FittedCodes {
            tables: (rc == 0).then_some(tables),
            fitted_len: data.len(),
            uses: 0,
        }
    }

    /// Whether `len` bytes should be encoded with codes fitted afresh.
    fn stale_for(&self, len: usize) -> bool {
        let moved = len < self.fitted_len - self.fitted_len / 4
            || len > self.fitted_len + self.fitted_len / 4;
        self.uses >= REFIT_EVERY || (moved && self.uses >= REFIT_ON_CHANGE_AFTER)
    }
}

pub struct GzipEncoder {
    stream: Box<isal::isal_zstream>,
    codes: Option<FittedCodes>,
    out: Vec<u8>,
}

// SAFETY: the raw pointers inside the stream state point into buffers this
// value owns, or into the caller's input for the duration of one call; igzip
// keeps no thread-local state, so the encoder may move between threads.
unsafe impl Send for GzipEncoder {}

impl Default for GzipEncoder {
    fn default() -> Self {
        GzipEncoder::new()
    }
}

impl GzipEncoder {
    pub fn new() -> GzipEncoder {
        // SAFETY: isal_zstream is a C struct of integers, byte arrays and
        // pointers, for all of which zero is a valid value;
        // isal_deflate_stateless_init sets what it needs before each use.
        let stream = unsafe { Box::<isal::isal_zstream>::new_zeroed().assume_init() };
        GzipEncoder {
            stream,
            codes: None,
            out: Vec::new(),
        }
    }

    /// `data` as one gzip member, in a buffer of exactly its length.
    pub fn compress(&mut self, data: &[u8]) -> Result<Vec<u8>, String> {
        let avail_in = u32::try_from(data.len())
            .map_err(|_| format!("a body of {} bytes is too large for gzip", data.len()))?;
        let cap = bound(data.len());
        let avail_out = u32::try_from(cap)
            .map_err(|_| format!("a body of {} bytes is too large for gzip", data.len()))?;
        let codes = match &mut self.codes {
            Some(c) if !c.stale_for(data.len()) => c,
            slot => slot.insert(FittedCodes::fit(data)),
        };
        codes.uses += 1;
        self.out.clear();
        crate::web::retained::release_excess(&mut self.out, cap);
        self.out.reserve(cap);
        let s: &mut isal::isal_zstream = &mut self.stream;
        // SAFETY: the stream is initialised by isal_deflate_stateless_init
        // before any field is set (which also points it at igzip's default
        // codes). igzip reads at most avail_in bytes from next_in (it never
        // writes through it, the pointer is only *mut in the C declaration),
        // writes at most avail_out bytes to next_out, which points at `cap`
        // bytes of reserved capacity, and only reads the fitted codes. It
        // keeps no pointer after returning: the next call initialises the
        // stream again.
        let (rc, written) = unsafe {
            isal::isal_deflate_stateless_init(s);
            s.level = 0;
            if let Some(tables) = codes.tables.as_mut() {
                let rc = isal::isal_deflate_set_hufftables(
                    s,
                    &mut **tables,
                    isal::IGZIP_HUFFTABLE_CUSTOM as std::os::raw::c_int,
                );
                if rc != isal::COMP_OK as i32 {
                    return Err(format!("igzip refused the fitted codes (code {rc})"));
                }
            }
            s.gzip_flag = isal::IGZIP_GZIP as u16;
            s.flush = isal::NO_FLUSH as u16;
            s.end_of_stream = 1;
            s.next_in = data.as_ptr().cast_mut();
            s.avail_in = avail_in;
            s.next_out = self.out.as_mut_ptr();
            s.avail_out = avail_out;
            let rc = isal::isal_deflate_stateless(s);
            (rc, s.total_out as usize)
        };
        if rc != isal::COMP_OK as i32 {
            return Err(format!(
                "igzip failed with code {rc} on a body of {} bytes",
                data.len()
            ));
        }
        if written > cap {
            return Err(format!("igzip reported {written} bytes written into {cap}"));
        }
        // SAFETY: igzip initialised `written` bytes, and written <= cap
        // <= capacity (checked above).
        unsafe { self.out.set_len(written) };
        Ok(self.out.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(z: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(z)
            .read_to_end(&mut out)
            .expect("a valid gzip member");
        out
    }

    /// A deterministic byte stream that does not compress (xorshift).
    fn noise(len: usize, mut seed: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    fn exposition(lines: usize) -> Vec<u8> {
        let mut s = String::from(
            "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter\n",
        );
        for i in 0..lines {
            s.push_str(&format!(
                "node_cpu_seconds_total{{cpu=\"{}\",mode=\"idle\"}} {}.{}\n",
                i % 64,
                i * 7919,
                i % 100
            ));
        }
        s.into_bytes()
    }

    #[test]
    fn round_trips_through_an_independent_decoder() {
        let mut gz = GzipEncoder::new();
        for data in [
            Vec::new(),
            b"x".to_vec(),
            exposition(2000),
            noise(300_000, 0x9e3779b97f4a7c15),
            exposition(10),
        ] {
            let z = gz.compress(&data).expect("compresses");
            assert_eq!(gunzip(&z), data, "{} bytes", data.len());
        }
    }

    #[test]
    fn text_shrinks_and_noise_fits_the_bound() {
        let mut gz = GzipEncoder::new();
        let text = exposition(2000);
        let z = gz.compress(&text).unwrap();
        assert!(
            z.len() * 4 < text.len(),
            "{} -> {} bytes",
            text.len(),
            z.len()
        );
        for len in [1, 65_534, 65_535, 65_536, 1 << 20] {
            let data = noise(len, len as u64 + 1);
            let z = gz.compress(&data).unwrap();
            assert!(z.len() <= bound(len), "{len}: {} > {}", z.len(), bound(len));
            assert_eq!(gunzip(&z), data);
        }
    }

    #[test]
    fn codes_fitted_to_text_encode_noise_of_the_same_length() {
        let text = exposition(2000);
        let mut gz = GzipEncoder::new();
        gz.compress(&text).unwrap();
        let data = noise(text.len(), 11);
        let z = gz.compress(&data).unwrap();
        assert_eq!(
            gz.codes.as_ref().unwrap().fitted_len,
            text.len(),
            "the text's codes were used"
        );
        assert_eq!(gunzip(&z), data);
        assert!(z.len() <= bound(data.len()));
        // Every byte value, in codes fitted to a body that has one.
        let all: Vec<u8> = (0..=255u8).cycle().take(text.len()).collect();
        let mut gz = GzipEncoder::new();
        gz.compress(&vec![b'a'; text.len()]).unwrap();
        assert_eq!(gunzip(&gz.compress(&all).unwrap()), all);
    }

    #[test]
    fn codes_are_fitted_again_when_the_body_moves_or_ages() {
        let mut gz = GzipEncoder::new();
        let text = exposition(1000);
        gz.compress(&text).unwrap();
        let fitted = |gz: &GzipEncoder| {
            let c = gz.codes.as_ref().unwrap();
            (c.fitted_len, c.uses)
        };
        assert_eq!(fitted(&gz), (text.len(), 1));
        // Within a quarter of the length: the same codes.
        let longer = exposition(1200);
        gz.compress(&longer).unwrap();
        assert_eq!(fitted(&gz), (text.len(), 2));
        // Beyond it: fitted again, once the codes have served a few bodies.
        let much_longer = exposition(2000);
        gz.compress(&much_longer).unwrap();
        assert_eq!(fitted(&gz), (text.len(), 3), "too soon to fit again");
        for _ in 3..REFIT_ON_CHANGE_AFTER {
            gz.compress(&text).unwrap();
        }
        gz.compress(&much_longer).unwrap();
        assert_eq!(fitted(&gz), (much_longer.len(), 1));
        // Lengths that alternate: one fitting per REFIT_ON_CHANGE_AFTER.
        let mut fits = 0;
        for i in 0..4 * REFIT_ON_CHANGE_AFTER {
            gz.compress(if i % 2 == 0 { &text } else { &much_longer })
                .unwrap();
            fits += u32::from(gz.codes.as_ref().unwrap().uses == 1);
        }
        assert!((3..=4).contains(&fits), "{fits} fittings in 64 bodies");
        // Bodies of one length: fitted again only when the codes are old.
        let mut gz = GzipEncoder::new();
        for _ in 0..REFIT_EVERY {
            gz.compress(&much_longer).unwrap();
        }
        assert_eq!(fitted(&gz), (much_longer.len(), REFIT_EVERY));
        gz.compress(&much_longer).unwrap();
        assert_eq!(
            fitted(&gz),
            (much_longer.len(), 1),
            "aged codes are fitted again"
        );
    }

    #[test]
    fn fitted_codes_compress_a_body_like_igzip_level_1() {
        // igzip's level 1 wrote 12627 bytes for a 70.6 KB body of this
        // daemon, fitted codes 12662: within a few percent, not the 13 %
        // more of level 0's default codes.
        let text = exposition(3000);
        let mut gz = GzipEncoder::new();
        gz.compress(&text).unwrap();
        let fitted = gz.compress(&text).unwrap().len();
        let mut default_codes = GzipEncoder::new();
        default_codes.compress(&[]).unwrap();
        default_codes.codes.as_mut().unwrap().tables = None;
        default_codes.codes.as_mut().unwrap().fitted_len = text.len();
        let default = default_codes.compress(&text).unwrap().len();
        assert!(
            fitted < default,
            "fitted {fitted} against default {default}"
        );
        assert_eq!(gunzip(&default_codes.compress(&text).unwrap()), text);
    }
}
