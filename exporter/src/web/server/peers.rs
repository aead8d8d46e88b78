//! Counting by peer, for the per-peer connection and pending-login limits.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

/// What a per-peer limit counts by: the IPv4 address, or the IPv6 /64. One
/// host is normally given a whole /64, so counting single IPv6 addresses
/// would be no limit at all.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        v4 => v4,
    }
}

/// How many of something each peer holds. Entries exist only while their
/// count is above zero, so the map never outgrows what is held.
#[derive(Default)]
pub struct PeerCounts {
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One unit held by a peer, given back on drop.
pub struct PeerSlot {
    counts: Arc<PeerCounts>,
    key: IpAddr,
}

impl PeerCounts {
    /// Takes one unit for `ip`'s peer unless it already holds `max`.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let key = peer_key(ip);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let n = counts.entry(key).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: self.clone(),
            key,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self
            .counts
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(peer_key(a), peer_key(b));
        assert_ne!(peer_key(a), peer_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(peer_key(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn limit_per_peer_and_release_on_drop() {
        let counts = Arc::new(PeerCounts::default());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let first = counts.try_acquire(ip, 2).unwrap();
        let _second = counts.try_acquire(ip, 2).unwrap();
        assert!(counts.try_acquire(ip, 2).is_none());
        assert!(counts.try_acquire(other, 2).is_some());
        drop(first);
        assert!(counts.try_acquire(ip, 2).is_some());
        drop(_second);
        assert!(counts.counts.lock().unwrap().is_empty());
    }
}
