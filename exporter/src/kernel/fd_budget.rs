//! Process-wide budgets of kept file descriptors. Keeping a source's
//! descriptor open between scrapes halves the kernel's cost of reading it,
//! but each pins kernel memory and counts against the open-files limit that
//! connections share, so every kind of kept descriptor has a budget: a
//! share of the soft `RLIMIT_NOFILE`, capped. Past it, files are reopened
//! at every read.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A budget: at most `soft limit / divisor` descriptors, and at most `cap`.
pub struct Budget {
    divisor: usize,
    cap: usize,
    limit: OnceLock<usize>,
    kept: AtomicUsize,
}

impl Budget {
    pub const fn new(divisor: usize, cap: usize) -> Budget {
        Budget {
            divisor,
            cap,
            limit: OnceLock::new(),
            kept: AtomicUsize::new(0),
        }
    }

    /// Most descriptors kept at once, from the soft open-files limit as it
    /// is at the first call (the daemon raises it to the hard limit at
    /// start, before any collector runs).
    pub fn limit(&self) -> usize {
        *self
            .limit
            .get_or_init(|| (soft_open_files() / self.divisor).min(self.cap))
    }

    /// Descriptors kept now.
    pub fn kept(&self) -> usize {
        self.kept.load(Ordering::Relaxed)
    }

    /// One unit of the budget, given back when the [`Unit`] drops; None
    /// when the budget is spent.
    pub fn take(&'static self) -> Option<Unit> {
        self.kept
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.limit()).then_some(n + 1)
            })
            .ok()
            .map(|_| Unit(self))
    }
}

/// One kept descriptor's share of a [`Budget`].
#[derive(Debug)]
pub struct Unit(&'static Budget);

impl Drop for Unit {
    fn drop(&mut self) {
        self.0.kept.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limit", &self.limit())
            .field("kept", &self.kept())
            .finish()
    }
}

/// The soft open-files limit, or 1024 if it cannot be read.
fn soft_open_files() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_counted_and_given_back() {
        static SMALL: Budget = Budget::new(usize::MAX, 2);
        assert_eq!(SMALL.limit(), 0, "a share of nothing");
        assert!(SMALL.take().is_none());
        static TWO: Budget = Budget::new(1, 2);
        assert_eq!(TWO.limit(), 2);
        let a = TWO.take().unwrap();
        let b = TWO.take().unwrap();
        assert!(TWO.take().is_none(), "spent");
        assert_eq!(TWO.kept(), 2);
        drop(a);
        assert_eq!(TWO.kept(), 1);
        let _c = TWO.take().unwrap();
        drop(b);
        assert_eq!(TWO.kept(), 1);
    }
}
