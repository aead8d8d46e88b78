//! gzip for `/metrics`, with one compressor kept for the daemon's life.
//!
//! Prometheus asks for gzip on every scrape. Building a fresh
//! `GzEncoder` per response allocated and zeroed the compressor's hash
//! tables each time, which cost more instructions than the scrape itself;
//! this keeps one raw-deflate stream, resets it per response, and writes
//! the gzip header and trailer (RFC 1952) around it.

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// ID1 ID2, CM = deflate, no flags, MTIME 0, XFL 0, OS 255 (unknown).
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

pub struct Gzip {
    deflate: Compress,
    out: Vec<u8>,
}

impl Default for Gzip {
    fn default() -> Gzip {
        Gzip {
            // Level 1: a scrape compresses about 6:1 at this level, and
            // higher levels cost far more CPU for a few percent.
            deflate: Compress::new(Compression::fast(), false),
            out: Vec::new(),
        }
    }
}

impl Gzip {
    /// `data` as one gzip member, in a buffer reused by the next call.
    pub fn compress(&mut self, data: &[u8]) -> Result<&[u8], flate2::CompressError> {
        self.deflate.reset();
        self.out.clear();
        self.out.extend_from_slice(&HEADER);
        // Text exposition compresses well; start with room for a quarter
        // and grow if the stream has not ended.
        self.out.reserve(data.len() / 4 + 64);
        loop {
            let consumed = self.deflate.total_in() as usize;
            let status = self.deflate.compress_vec(
                &data[consumed..],
                &mut self.out,
                FlushCompress::Finish,
            )?;
            if status == Status::StreamEnd {
                break;
            }
            self.out.reserve(self.out.capacity().max(4096));
        }
        let mut crc = Crc::new();
        crc.update(data);
        self.out.extend_from_slice(&crc.sum().to_le_bytes());
        // ISIZE is the length modulo 2^32 (RFC 1952 §2.3.1).
        self.out
            .extend_from_slice(&(data.len() as u32).to_le_bytes());
        Ok(&self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .expect("valid gzip");
        out
    }

    #[test]
    fn round_trips_repeatedly_through_one_compressor() {
        let mut gz = Gzip::default();
        let texts: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"node_load1 0.5\n".to_vec(),
            (0..20_000)
                .flat_map(|i| format!("metric_{i} {i}\n").into_bytes())
                .collect(),
            // Incompressible: the output outgrows the first reservation.
            (0..200_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect(),
        ];
        for _ in 0..2 {
            for t in &texts {
                let z = gz.compress(t).unwrap().to_vec();
                assert_eq!(&z[..2], &[0x1f, 0x8b]);
                assert_eq!(&gunzip(&z), t);
            }
        }
    }
}
