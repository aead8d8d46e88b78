//! A connection whose writes fail once they make no progress for a while.
//!
//! hyper has no write timeout: a client that sends a request and then never
//! reads would keep its connection, the response buffers and (with the
//! scrape permit held until the body is sent) a scrape slot forever. The
//! header-read timeout does not help, since hyper is not reading headers
//! while it writes a response.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Wraps the TCP stream (under TLS, if any), so a stalled TLS handshake
/// write counts too.
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Made on the first write that cannot proceed; most connections
    /// never need one.
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer is counting: the last write attempt made no progress.
    armed: bool,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            limit,
            timer: None,
            armed: false,
        }
    }

    /// Progress (any ready result) disarms the timer; no progress arms it
    /// if it is not already counting, and turns into `TimedOut` once it
    /// fires. The timer registers the task's waker, so hyper retries the
    /// write when it fires even if the client never reads again.
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.armed = false;
            return r;
        }
        let deadline = Instant::now() + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            timer.as_mut().reset(deadline);
            self.armed = true;
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    async fn write(w: &mut WriteDeadline<tokio::net::UnixStream>, buf: &[u8]) -> io::Result<usize> {
        std::future::poll_fn(|cx| Pin::new(&mut *w).poll_write(cx, buf)).await
    }

    #[tokio::test]
    async fn slow_progress_is_fine_and_a_stall_times_out() {
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let mut w = WriteDeadline::new(ours, Duration::from_millis(200));
        let theirs = theirs.into_std().unwrap();
        theirs.set_nonblocking(false).unwrap();
        // A reader that takes 64 KiB every 50 ms for a second, then stops
        // reading but keeps its end open.
        let reader = std::thread::spawn(move || {
            let mut theirs = theirs;
            let mut buf = vec![0u8; 64 * 1024];
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(50));
                let _ = theirs.read(&mut buf);
            }
            theirs
        });
        let chunk = vec![0u8; 16 * 1024];
        let start = std::time::Instant::now();
        let err = loop {
            if let Err(e) = write(&mut w, &chunk).await {
                break e;
            }
        };
        let took = start.elapsed();
        let _theirs = reader.join().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            took > Duration::from_millis(1000),
            "timed out after {took:?}, while the reader was still reading"
        );
    }
}
