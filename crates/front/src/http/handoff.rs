//! HTTP connections across an upgrade in place (issue 32 §1). When the daemon asks, every
//! connection stops taking new requests (hyper's graceful shutdown: a request under way is
//! answered first), and once it is between requests its socket and the bytes hyper read
//! ahead are parked here, never closed: the next image serves them on, so a client's next
//! request on a kept-alive connection is answered by the new image and no request fails.
//! Standalone GET streams end with an SSE `retry` hint (`stream.rs`) so their clients
//! reconnect.

use bytes::Bytes;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

/// One parked connection.
#[derive(Debug)]
pub struct ParkedConn {
    /// Its socket.
    pub fd: OwnedFd,
    /// What hyper read of the next request.
    pub read_ahead: Bytes,
    /// `None` for the TCP listener, else the server whose `NAME.http.sock` accepted it.
    pub server: Option<String>,
}

/// The front's hand-off state.
#[derive(Debug)]
pub struct Handoff {
    asked: watch::Sender<bool>,
    live: AtomicUsize,
    /// Requests between hyper and their response head (not yet, or no longer, in an actor's
    /// table only).
    handling: AtomicUsize,
    parked: Mutex<Vec<ParkedConn>>,
}

impl Default for Handoff {
    fn default() -> Self {
        Handoff {
            asked: watch::channel(false).0,
            live: AtomicUsize::new(0),
            handling: AtomicUsize::new(0),
            parked: Mutex::new(Vec::new()),
        }
    }
}

/// A served connection, counted while it lives.
#[derive(Debug)]
pub struct Served<'a>(&'a Handoff);

impl Drop for Served<'_> {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request being handled, counted while it lives.
#[derive(Debug)]
pub struct Handling<'a>(&'a Handoff);

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Handoff {
    /// Counts a request until its response head is ready.
    pub fn handling(&self) -> Handling<'_> {
        self.handling.fetch_add(1, Ordering::AcqRel);
        Handling(self)
    }

    /// Whether no request is between hyper and its response head.
    pub fn none_handling(&self) -> bool {
        self.handling.load(Ordering::Acquire) == 0
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Vec<ParkedConn>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a connection while the guard lives.
    pub fn serve(&self) -> Served<'_> {
        self.live.fetch_add(1, Ordering::AcqRel);
        Served(self)
    }

    /// Whether a hand-off is asked, to wait on.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.asked.subscribe()
    }

    /// Asks every connection to park once between requests.
    pub fn ask(&self) {
        self.asked.send_replace(true);
    }

    /// The upgrade was refused: parked connections are closed (they were idle; their clients
    /// open new ones), new ones are served as usual.
    pub fn cancel(&self) {
        self.asked.send_replace(false);
        self.table().clear();
    }

    /// Parks a connection (its serving task ends; the guard is dropped after).
    pub fn park(&self, conn: ParkedConn) {
        self.table().push(conn);
    }

    /// Whether every connection has parked.
    pub fn all_parked(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }

    /// The parked connections, taken.
    pub fn take(&self) -> Vec<ParkedConn> {
        std::mem::take(&mut *self.table())
    }

    /// The parked connections' descriptors and what each is (for the record).
    pub fn parked(&self) -> Vec<(std::os::fd::RawFd, Bytes, Option<String>)> {
        use std::os::fd::AsRawFd;
        self.table()
            .iter()
            .map(|c| (c.fd.as_raw_fd(), c.read_ahead.clone(), c.server.clone()))
            .collect()
    }
}

/// A connection's socket, given back whole for a hand-off.
pub trait IntoFd {
    /// The socket's descriptor (the stream is consumed; the socket stays open).
    fn into_fd(self) -> Option<OwnedFd>;
}

impl IntoFd for tokio::net::TcpStream {
    fn into_fd(self) -> Option<OwnedFd> {
        self.into_std().ok().map(OwnedFd::from)
    }
}

impl IntoFd for tokio::net::UnixStream {
    fn into_fd(self) -> Option<OwnedFd> {
        self.into_std().ok().map(OwnedFd::from)
    }
}

/// A stream whose first bytes were read before (by the previous image's hyper): they are
/// read again first.
#[derive(Debug)]
pub struct Prefixed<I> {
    prefix: Bytes,
    io: I,
}

impl<I> Prefixed<I> {
    /// `io`, read after `prefix`.
    pub fn new(prefix: Bytes, io: I) -> Self {
        Prefixed { prefix, io }
    }

    /// The stream under the prefix.
    pub fn get_ref(&self) -> &I {
        &self.io
    }
}

impl<I: IntoFd> IntoFd for Prefixed<I> {
    fn into_fd(self) -> Option<OwnedFd> {
        // Bytes of the prefix not read yet would be lost: a hand-off happens between
        // requests, after hyper read the prefix (its read-ahead is carried on).
        self.io.into_fd()
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let head = self.prefix.split_to(n);
            buf.put_slice(&head);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_prefixed_stream_reads_its_prefix_first_then_the_socket() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        b.write_all(b" world").await.unwrap();
        drop(b);
        let mut p = Prefixed::new(Bytes::from_static(b"hello"), a);
        let mut all = String::new();
        p.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }

    #[test]
    fn every_connection_counts_until_parked() {
        let h = Handoff::default();
        let served = h.serve();
        assert!(!h.all_parked());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        h.park(ParkedConn {
            fd: OwnedFd::from(a),
            read_ahead: Bytes::from_static(b"GET"),
            server: None,
        });
        drop(served);
        assert!(h.all_parked());
        assert_eq!(h.parked().len(), 1);
        h.cancel();
        assert!(h.take().is_empty());
    }
}
