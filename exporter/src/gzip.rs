//! gzip for `/metrics` bodies: ISA-L's igzip at level 1.
//!
//! Prometheus asks for gzip at every scrape, so compression is a fixed part
//! of every scrape's cost. igzip (Intel's ISA-L, BSD-3, built from source
//! by the `isal-sys` crate and linked statically) picks AVX-512, AVX2 or SSE
//! code at run time. On a 71 KB body here, one call with the caches as a
//! scrape leaves them (BENCHMARKS.md, "gzip by igzip"):
//!
//! | compressor | after 20 ms idle | back to back | body |
//! |---|---:|---:|---:|
//! | igzip level 1 | 77 µs | 45 µs | 12.6 KB |
//! | libdeflate level 1 | 163 µs | 75 µs | 12.2 KB |
//!
//! Level 1 writes about the same body as libdeflate's level 1 did; igzip's
//! level 0 would save 10 µs more for a 13 % larger body.
//!
//! The encoder keeps its buffers between scrapes (scrapes take turns, so
//! one is enough): igzip's stream state (82 KB, far too much for a stack
//! frame that runs inside a tokio task), its level-1 hash buffer, and the
//! output buffer, of which the caller gets an exact-length copy, so a held
//! response costs what it sends and not the worst case.

use isal_sys::igzip_lib as isal;

/// igzip's level 1 (levels are 0 to 3).
const LEVEL: u32 = 1;

/// igzip's "small" level-1 buffer: the same output as its default (large)
/// one on bodies of this size, at the same speed, in a third of the memory.
const LEVEL_BUF_BYTES: usize = isal::ISAL_DEF_LVL1_SMALL as usize;

/// Bytes needed for any input of `len` bytes: igzip falls back to stored
/// blocks when compressing would not fit, which adds 5 bytes per 65535
/// bytes of input, plus the gzip header and trailer and a block header.
fn bound(len: usize) -> usize {
    len + 5 * (len / 65535 + 1) + isal::ISAL_DEF_MAX_HDR_SIZE as usize + 64
}

pub struct GzipEncoder {
    stream: Box<isal::isal_zstream>,
    level_buf: Box<[u8]>,
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
            level_buf: vec![0u8; LEVEL_BUF_BYTES].into_boxed_slice(),
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
        self.out.clear();
        self.out.reserve(cap);
        let s: &mut isal::isal_zstream = &mut self.stream;
        // SAFETY: the stream is initialised by isal_deflate_stateless_init
        // before any field is set. igzip reads at most avail_in bytes from
        // next_in (it never writes through it, the pointer is only *mut in
        // the C declaration), writes at most avail_out bytes to next_out,
        // which points at `cap` bytes of reserved capacity, and uses at most
        // level_buf_size bytes of level_buf. It keeps no pointer after
        // returning: the next call initialises the stream again.
        let (rc, written) = unsafe {
            isal::isal_deflate_stateless_init(s);
            s.level = LEVEL;
            s.level_buf = self.level_buf.as_mut_ptr();
            s.level_buf_size = self.level_buf.len() as u32;
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
    fn a_reused_encoder_gives_the_same_bytes_as_a_new_one() {
        let text = exposition(500);
        let mut used = GzipEncoder::new();
        used.compress(&noise(100_000, 7)).unwrap();
        assert_eq!(
            used.compress(&text).unwrap(),
            GzipEncoder::new().compress(&text).unwrap()
        );
    }
}
