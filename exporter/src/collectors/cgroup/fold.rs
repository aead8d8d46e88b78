//! Which selected cgroups keep series of their own when there are more
//! than `--collector.cgroup.max`, and how the rest add up in
//! `cgroup="other"`.
//!
//! **Who keeps a place.** Each cgroup has a score: its CPU time, decayed
//! with a half-life of [`HALF_LIFE`] (a cgroup first seen starts at its
//! whole CPU time so far). Cgroups that had their own series keep them;
//! free places go to the highest scores; an outsider takes the place of
//! the lowest-scoring member only when it scores more than [`SWAP_FACTOR`]
//! times as much plus [`SWAP_MARGIN`], and at most `max / 10 + 1` such
//! swaps happen per scrape. So a set of cgroups near the cut does not
//! change places at every scrape (each change ends one series and starts
//! another), while one that starts to work hard gets a place within a few
//! scrapes.
//!
//! **What `other` holds.** Its gauges (memory usage, working set, limits,
//! pids) are the sums over the cgroups folded into it at this scrape. Its
//! counters must never go down, or `rate()` would read each decrease as a
//! reset and count the whole counter again; a plain sum would drop
//! whenever a folded cgroup ended or got its own series. So each counter
//! of `other` grows by what the folded cgroups' counters grew since the
//! last scrape, a cgroup new to the collector bringing its whole count
//! (it was counted nowhere before) and one that just lost its own series
//! bringing nothing until its next increase. That is how a parent
//! cgroup's counters behave: they keep what children that have gone away
//! used. `rate(sum by (…) (…))` over all series stays right; an instant
//! sum of counters over all series can exceed the sum over the cgroups
//! alive now by what folded cgroups used before they went away.

use std::time::Duration;

/// The half-life of a cgroup's CPU score.
pub const HALF_LIFE: Duration = Duration::from_secs(300);

/// How many times the lowest member's score an outsider must have to take
/// its place...
pub const SWAP_FACTOR: f64 = 2.0;

/// ...plus this many CPU-seconds, so near-idle cgroups never trade places.
pub const SWAP_MARGIN: f64 = 1.0;

/// The factor a score decays by over `elapsed`.
pub fn decay(elapsed: Duration) -> f64 {
    0.5f64.powf(elapsed.as_secs_f64() / HALF_LIFE.as_secs_f64())
}

/// One cgroup that may have series of its own.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub score: f64,
    /// It had its own series at the last scrape.
    pub member: bool,
}

/// Sets `keep[i]` for the candidates that get their own series: all of
/// them if they fit in `max`, else as the module documentation says.
/// Ties go to the lower index (the caller passes them in label order).
pub fn choose(cands: &[Candidate], max: usize, keep: &mut Vec<bool>, scratch: &mut Vec<usize>) {
    keep.clear();
    keep.resize(cands.len(), false);
    if cands.len() <= max {
        keep.fill(true);
        return;
    }
    let by_score_desc =
        |a: &usize, b: &usize| cands[*b].score.total_cmp(&cands[*a].score).then(a.cmp(b));
    // Members, best first; more than fit (a lower --collector.cgroup.max
    // is not possible at run time, but the first scrape has none) keep the
    // best.
    scratch.clear();
    scratch.extend((0..cands.len()).filter(|&i| cands[i].member));
    scratch.sort_by(by_score_desc);
    scratch.truncate(max);
    for &i in scratch.iter() {
        keep[i] = true;
    }
    let mut members = scratch.len();
    // Outsiders, best first, fill the free places.
    scratch.clear();
    scratch.extend((0..cands.len()).filter(|&i| !keep[i]));
    scratch.sort_by(by_score_desc);
    let mut outsiders = scratch.iter().copied().peekable();
    while members < max {
        let Some(i) = outsiders.next() else { break };
        keep[i] = true;
        members += 1;
    }
    // Then swaps, the best outsider against the weakest member, while the
    // outsider is clearly ahead.
    let mut weakest: Vec<usize> = (0..cands.len()).filter(|&i| keep[i]).collect();
    weakest.sort_by(|a, b| by_score_desc(b, a));
    let swaps = max / 10 + 1;
    for (out, &member) in outsiders.zip(weakest.iter()).take(swaps) {
        if cands[out].score > SWAP_FACTOR * cands[member].score + SWAP_MARGIN {
            keep[out] = true;
            keep[member] = false;
        } else {
            break;
        }
    }
}

/// Where a folded cgroup was at the last scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// Not known to the collector (new, recreated, or out of the walk).
    New,
    Folded,
    /// It had its own series.
    Member,
}

/// What a folded cgroup's counter adds to `other`'s at this scrape.
pub fn increase(now: u64, last: Option<u64>, before: Before) -> u64 {
    match (before, last) {
        (Before::New, _) | (_, None) => now,
        (Before::Member, Some(_)) => 0,
        // A counter that went down was reset (v1 blkio.reset_stats).
        (Before::Folded, Some(last)) => now.checked_sub(last).unwrap_or(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(cands: &[Candidate], max: usize) -> Vec<usize> {
        let (mut keep, mut scratch) = (Vec::new(), Vec::new());
        choose(cands, max, &mut keep, &mut scratch);
        (0..cands.len()).filter(|&i| keep[i]).collect()
    }

    fn c(score: f64, member: bool) -> Candidate {
        Candidate { score, member }
    }

    #[test]
    fn all_fit() {
        assert_eq!(kept(&[c(0.0, false), c(5.0, true)], 2), [0, 1]);
        assert_eq!(kept(&[], 0), Vec::<usize>::new());
    }

    #[test]
    fn first_scrape_takes_the_top_scores_ties_by_order() {
        let cands = [c(1.0, false), c(9.0, false), c(3.0, false), c(3.0, false)];
        assert_eq!(kept(&cands, 2), [1, 2]);
        assert_eq!(kept(&cands, 0), Vec::<usize>::new());
    }

    #[test]
    fn members_stay_until_clearly_beaten() {
        // Member at 10; an outsider at 20 is not enough (needs > 21).
        assert_eq!(kept(&[c(10.0, true), c(20.0, false)], 1), [0]);
        assert_eq!(kept(&[c(10.0, true), c(21.5, false)], 1), [1]);
        // Near-idle cgroups never trade places.
        assert_eq!(kept(&[c(0.0, true), c(0.9, false)], 1), [0]);
        // A place freed by a cgroup that went away goes to the best outsider.
        assert_eq!(
            kept(&[c(1.0, true), c(2.0, false), c(3.0, false)], 2),
            [0, 2]
        );
    }

    #[test]
    fn swaps_per_scrape_are_bounded() {
        // 20 members at 0, 20 busy outsiders: max/10 + 1 = 3 swaps.
        let mut cands: Vec<Candidate> = (0..20).map(|_| c(0.0, true)).collect();
        cands.extend((0..20).map(|_| c(100.0, false)));
        let k = kept(&cands, 20);
        assert_eq!(k.len(), 20);
        assert_eq!(k.iter().filter(|&&i| i >= 20).count(), 3);
    }

    #[test]
    fn other_counters_only_grow() {
        assert_eq!(increase(50, None, Before::New), 50);
        assert_eq!(increase(50, Some(40), Before::New), 50);
        assert_eq!(increase(50, Some(40), Before::Folded), 10);
        assert_eq!(increase(5, Some(40), Before::Folded), 5);
        assert_eq!(increase(50, Some(40), Before::Member), 0);
        assert_eq!(increase(50, None, Before::Member), 50);
    }

    #[test]
    fn decay_halves_per_half_life() {
        assert!((decay(HALF_LIFE) - 0.5).abs() < 1e-12);
        assert_eq!(decay(Duration::ZERO), 1.0);
    }
}
