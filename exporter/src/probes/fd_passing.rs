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

/// The most descriptors one message carries. Three probes need about 21
/// (a map, three programs and three links each); the kernel's own limit
/// is 253 (SCM_MAX_FD).
pub const MAX_FDS: usize = 64;
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
    let sent = sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::empty(),
    )
    .map_err(io::Error::from)?;
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
    let msg = recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
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
