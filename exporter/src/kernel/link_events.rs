//! Link notifications from rtnetlink: which network interfaces the kernel
//! announced a change on since the last look.
//!
//! The netclass collector reads 22 sysfs attributes per interface, one
//! system call each: 88 on a host with four interfaces, 43 µs of a cold
//! scrape on the development VM (BENCHMARKS.md). Most of those attributes
//! (MTU, addresses, queue length, carrier and its counters, operational
//! state, group, link mode, type) change only on paths that then send an
//! RTM_NEWLINK notification to the RTNLGRP_LINK multicast group, which any
//! process may listen to without privileges. So netclass listens, and reads
//! those attributes again only for an interface that a notification names;
//! the others it reads at every scrape (see netclass.rs for which, and
//! why).
//!
//! Whatever cannot be told exactly is taken as "every interface changed":
//! the socket overflowed (ENOBUFS), a message was cut short or is of an
//! unexpected type, a receive failed, or more messages are queued than one
//! scrape drains ([`MAX_MESSAGES`]). Messages not sent by the kernel (a
//! local process can address our socket) are ignored: they announce
//! nothing, and if they flood the socket, the overflow they cause counts.
//!
//! The socket sees the network namespace the daemon runs in, sysfs shows
//! the one it was mounted in; [`LinkEvents::index_of`] lets netclass check
//! that the two agree before it trusts the notifications.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The most messages one drain receives; past that, everything changed.
pub const MAX_MESSAGES: usize = 256;

const RTMGRP_LINK: u32 = 1;
const NLMSG_HDRLEN: usize = 16;
/// `struct ifinfomsg`: family, pad, type (u16), index (i32), flags, change.
const IFINFOMSG_LEN: usize = 16;

pub struct LinkEvents {
    sock: OwnedFd,
    buf: Vec<u8>,
}

impl LinkEvents {
    /// A non-blocking NETLINK_ROUTE socket subscribed to RTNLGRP_LINK.
    pub fn open() -> io::Result<LinkEvents> {
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: all-zero is a valid sockaddr_nl.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = RTMGRP_LINK;
        // SAFETY: a sockaddr_nl we own, with its size.
        let rc = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LinkEvents {
            sock,
            // A link message with every attribute is a few KiB.
            buf: vec![0; 32 * 1024],
        })
    }

    /// Receives what is queued, calling `changed` with the interface index
    /// of every link notification. Returns false when that list may be
    /// incomplete: the caller must then take every interface as changed.
    pub fn drain(&mut self, mut changed: impl FnMut(i32)) -> bool {
        let mut exact = true;
        for _ in 0..MAX_MESSAGES {
            // SAFETY: all-zero is a valid sockaddr_nl.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: the buffer and address are ours, with their sizes.
            let n = unsafe {
                libc::recvfrom(
                    self.sock.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => return exact,
                    Some(libc::EINTR) => continue,
                    // ENOBUFS: notifications were dropped. Keep draining, so
                    // the next scrape starts from an empty queue.
                    Some(libc::ENOBUFS) => {
                        exact = false;
                        continue;
                    }
                    _ => return false,
                }
            }
            let n = n as usize;
            if from.nl_pid != 0 {
                continue;
            }
            if n > self.buf.len() {
                // MSG_TRUNC reports the datagram's full length.
                exact = false;
                continue;
            }
            exact &= link_indexes(&self.buf[..n], &mut changed);
        }
        false
    }

    /// The index of interface `name` in the socket's network namespace
    /// (SIOCGIFINDEX), or None if it has no interface of that name.
    pub fn index_of(&self, name: &str) -> Option<i32> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return None;
        }
        // SAFETY: all-zero is a valid ifreq.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: an ifreq we own with a NUL-terminated name.
        let rc = unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::SIOCGIFINDEX, &mut req) };
        if rc != 0 {
            return None;
        }
        // SAFETY: SIOCGIFINDEX filled the index member.
        Some(unsafe { req.ifr_ifru.ifru_ifindex })
    }
}

/// Calls `changed` with the interface index of each RTM_NEWLINK and
/// RTM_DELLINK message in one datagram. False if the datagram holds
/// anything else, or is malformed.
pub fn link_indexes(mut data: &[u8], changed: &mut impl FnMut(i32)) -> bool {
    let u32_at = |d: &[u8], at: usize| u32::from_ne_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
    let mut exact = true;
    while !data.is_empty() {
        if data.len() < NLMSG_HDRLEN {
            return false;
        }
        let len = u32_at(data, 0) as usize;
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        if len < NLMSG_HDRLEN || len > data.len() {
            return false;
        }
        if (kind == libc::RTM_NEWLINK || kind == libc::RTM_DELLINK)
            && len >= NLMSG_HDRLEN + IFINFOMSG_LEN
        {
            changed(u32_at(data, NLMSG_HDRLEN + 4) as i32);
        } else {
            exact = false;
        }
        // Messages are aligned to 4 bytes.
        let next = (len + 3) & !3;
        data = data.get(next..).unwrap_or(&[]);
    }
    exact
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, index: i32, pad_to: usize) -> Vec<u8> {
        let len = NLMSG_HDRLEN + IFINFOMSG_LEN;
        let mut m = vec![0u8; len.max(pad_to)];
        m[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[NLMSG_HDRLEN + 4..NLMSG_HDRLEN + 8].copy_from_slice(&index.to_ne_bytes());
        m
    }

    fn indexes(data: &[u8]) -> (Vec<i32>, bool) {
        let mut seen = Vec::new();
        let exact = link_indexes(data, &mut |i| seen.push(i));
        (seen, exact)
    }

    #[test]
    fn link_messages_name_their_interface() {
        let mut d = message(libc::RTM_NEWLINK, 7, 0);
        d.extend(message(libc::RTM_DELLINK, 3, 0));
        assert_eq!(indexes(&d), (vec![7, 3], true));
        assert_eq!(indexes(&[]), (vec![], true));
    }

    #[test]
    fn anything_else_means_every_interface() {
        // Another message type.
        let mut d = message(libc::RTM_NEWLINK, 7, 0);
        d.extend(message(libc::RTM_NEWADDR, 1, 0));
        assert_eq!(indexes(&d), (vec![7], false));
        // Cut short, a length past the end, a length under the header.
        let whole = message(libc::RTM_NEWLINK, 7, 0);
        assert!(!indexes(&whole[..20]).1);
        assert!(!indexes(&whole[..10]).1);
        let mut bad = whole.clone();
        bad[0..4].copy_from_slice(&999u32.to_ne_bytes());
        assert!(!indexes(&bad).1);
        bad[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert!(!indexes(&bad).1);
        // A link message too short for its ifinfomsg.
        let mut short = whole;
        short[0..4].copy_from_slice(&20u32.to_ne_bytes());
        assert_eq!(indexes(&short[..20]), (vec![], false));
    }

    /// Whatever bytes arrive, parsing ends without a panic.
    #[test]
    fn arbitrary_bytes_do_not_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..300 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = indexes(&data);
            // The same bytes behind a plausible header.
            let mut framed = message(libc::RTM_NEWLINK, 1, 0);
            framed[0..4].copy_from_slice(&((len as u32) % 64).to_ne_bytes());
            framed.extend(&data);
            let _ = indexes(&framed);
        }
    }

    /// The live kernel: loopback is in every network namespace, and a
    /// quiet socket drains exactly (nothing, or real link messages).
    #[test]
    fn live_socket() {
        let mut l = LinkEvents::open().unwrap();
        assert_eq!(l.index_of("lo"), Some(1));
        assert_eq!(l.index_of("usescope-none"), None);
        assert_eq!(l.index_of(""), None);
        let _ = l.drain(|_| {});
    }
}
