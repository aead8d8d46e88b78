//! Buffers kept between scrapes give memory back after a peak.
//!
//! The scrape, gzip and collector buffers are reused so that a scrape
//! allocates nothing, but a reused buffer keeps the largest capacity it
//! ever had: one huge page (a 20 MB textfile, since removed) would hold its
//! memory for the daemon's life. Each owner calls [`release_excess`] with
//! what it needs now. The allocator hands blocks this large back to the
//! kernel when they are freed (main.rs sets a fixed mmap threshold).

/// Spare capacity below this is kept whatever the need: shrinking a buffer
/// that small saves nothing worth a reallocation.
const SLACK: usize = 256 * 1024;

/// Shrinks `buf` to `need` when it holds more than twice that plus
/// [`SLACK`]. Call it on an empty (or about to be refilled) buffer: a
/// shrink copies what the buffer holds.
pub fn release_excess<T>(buf: &mut Vec<T>, need: usize) {
    let keep = need
        .saturating_mul(2)
        .saturating_add(SLACK / size_of::<T>().max(1));
    if buf.capacity() > keep {
        buf.shrink_to(need);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_is_released_and_a_steady_size_kept() {
        let mut buf: Vec<u8> = Vec::with_capacity(64 << 20);
        release_excess(&mut buf, 100_000);
        assert!(
            buf.capacity() >= 100_000 && buf.capacity() < 1 << 20,
            "{}",
            buf.capacity()
        );
        let mut steady: Vec<u8> = Vec::with_capacity(300_000);
        release_excess(&mut steady, 200_000);
        assert_eq!(steady.capacity(), 300_000);
    }
}
