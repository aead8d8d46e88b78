//! Time to gzip one scrape body: usescope's reused compressor
//! (src/gzip.rs) against a fresh `GzEncoder` per response (what http.rs
//! did before). Best of 5 batches of 400, three rounds.
//!
//! usage: curl -s 127.0.0.1:9200/metrics > /tmp/body.txt
//!        cargo run --release --example gzip_time /tmp/body.txt

use std::io::Write;
use std::time::Instant;

/// Best per-call microseconds over 5 batches of 400 calls, and the size.
fn best_of(mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..400 {
            size = f();
        }
        best = best.min(t.elapsed().as_secs_f64() / 400.0 * 1e6);
    }
    (best, size)
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: gzip_time FILE");
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut gz = usescope::gzip::Gzip::default();
    for round in 1..=3 {
        let (reused, size) = best_of(|| gz.compress(&data).expect("deflate").len());
        let (fresh, fresh_size) = best_of(|| {
            let mut e = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 4),
                flate2::Compression::fast(),
            );
            e.write_all(&data).expect("deflate");
            e.finish().expect("deflate").len()
        });
        println!(
            "round {round}: {} bytes; reused compressor {reused:.1} µs ({size} B), \
             fresh GzEncoder {fresh:.1} µs ({fresh_size} B)",
            data.len()
        );
    }
}
