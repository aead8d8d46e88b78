//! One message of bytes plus file descriptors over a `SOCK_SEQPACKET` unix
//! socket (`SCM_RIGHTS`): how the probe loader process hands its BPF maps,
//! programs and links to the daemon.
//!
//! A seqpacket socket keeps message boundaries, so the bytes and the fds
//! arrive together in one `recvmsg`, and a peer that exits without sending
//! reads as an empty message instead of a partial one.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// The most descriptors one message carries: the kernel's own limit
/// (SCM_MAX_FD). Each probe hands over its map, programs and links; the
/// ten probes together need 68, past the 64 this once was.
pub const MAX_FDS: usize = 253;
/// The largest message body (a JSON report of a few kilobytes).
pub const MAX_BYTES: usize = 64 * 1024;

/// Sends `bytes` and `fds` as one message.
pub fn send(sock: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS || bytes.len() > MAX_BYTES {
        return Err(io::Error::other(format!(
            "message too large: {} bytes and {} fds (at most {MAX_BYTES} and {MAX_FDS})",
            bytes.len(),
            fds.len()
        )));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("fds do not fit the control buffer"));
    }
    let sock = sock.as_fd();
    let sent = loop {
        match sendmsg(
            sock,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::empty(),
        ) {
            // A signal with a handler arrived before anything was sent.
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.map_err(io::Error::from)?,
        }
    };
    if sent != bytes.len() {
        return Err(io::Error::other(format!(
            "short send: {sent} of {} bytes",
            bytes.len()
        )));
    }
    Ok(())
}

/// Receives one message. An empty body means the peer closed its end
/// without sending. The fds arrive close-on-exec.
pub fn recv(sock: impl AsFd) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut bytes = vec![0u8; MAX_BYTES];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let sock = sock.as_fd();
    let msg = loop {
        match recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut bytes)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            // A signal with a handler arrived before the message: nothing
            // was received, so wait again. (The daemon holds its signals
            // during start-up, but a caller may not.)
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.map_err(io::Error::from)?,
        }
    };
    // Take ownership of every fd that arrived before judging the message,
    // so none leaks when it is refused.
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if msg
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
    {
        return Err(io::Error::other(format!(
            "message truncated (more than {MAX_BYTES} bytes or {MAX_FDS} fds)"
        )));
    }
    bytes.truncate(msg.bytes);
    Ok((bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
    use std::io::{Read, Write};

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    /// A signal whose handler interrupts the blocking recvmsg must not turn
    /// into a failed hand-over (it disabled every probe, once).
    #[test]
    fn recv_survives_signals() {
        extern "C" fn noop(_: libc::c_int) {}
        // SAFETY: installs a no-op handler without SA_RESTART for SIGUSR1,
        // so a blocked recvmsg returns EINTR; sends it to one thread.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = noop as *const () as usize;
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        }
        let (a, b) = pair();
        let receiver = std::thread::spawn(move || recv(&b));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let tid = std::os::unix::thread::JoinHandleExt::as_pthread_t(&receiver);
        for _ in 0..20 {
            // SAFETY: the thread is alive until it receives the message below.
            unsafe { libc::pthread_kill(tid, libc::SIGUSR1) };
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        send(&a, b"after signals", &[]).unwrap();
        assert_eq!(receiver.join().unwrap().unwrap().0, b"after signals");
    }

    #[test]
    fn bytes_and_fds_arrive_together() {
        let (a, b) = pair();
        let (reader, mut writer) = std::io::pipe().unwrap();
        send(&a, b"hello", &[reader.as_fd()]).unwrap();
        drop(reader);
        let (bytes, fds) = recv(&b).unwrap();
        assert_eq!(bytes, b"hello");
        assert_eq!(fds.len(), 1);
        writer.write_all(b"through the socket").unwrap();
        drop(writer);
        let mut text = String::new();
        std::fs::File::from(fds.into_iter().next().unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "through the socket");
    }

    #[test]
    fn a_closed_peer_reads_as_an_empty_message() {
        let (a, b) = pair();
        drop(a);
        let (bytes, fds) = recv(&b).unwrap();
        assert!(bytes.is_empty() && fds.is_empty());
    }

    #[test]
    fn too_many_fds_are_refused_before_sending() {
        let (a, _b) = pair();
        let many = vec![a.as_fd(); MAX_FDS + 1];
        assert!(send(&a, b"x", &many).is_err());
    }
}
