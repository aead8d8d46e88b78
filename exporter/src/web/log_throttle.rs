//! One log line per second for events a client can cause at will (failed
//! logins, refused connections, accept errors, missed scrape deadlines,
//! refused scrapes, panics), so that no client can flood the log. What was
//! held back is counted and reported with the next line let through.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Throttle {
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    pub const fn new() -> Throttle {
        Throttle {
            state: Mutex::new((None, 0)),
        }
    }

    /// Some(how many were held back since the last one let through) when
    /// this event may be logged.
    pub fn admit(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, suppressed) = &mut *state;
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            *suppressed += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_one_per_second_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.admit(), Some(0));
        assert_eq!(t.admit(), None);
        assert_eq!(t.admit(), None);
        t.state.lock().unwrap().0 = Some(Instant::now() - Duration::from_secs(2));
        assert_eq!(t.admit(), Some(2));
    }
}
