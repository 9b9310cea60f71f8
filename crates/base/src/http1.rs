//! One HTTP/1.1 connection served with hyper under stated bounds: the one way every listener
//! of the daemon (the HTTP front, `/metrics` and `/healthz`, the sign-in's redirect listener)
//! builds its server (issue 48 §6).
//!
//! Owns: [`Bounds`] (how long a request head may take, how large it and the read buffer may
//! grow, whether the connection is kept for another request) and the builder made from them.
//! Knows nothing of what is served: the caller's service answers every request.

use std::time::Duration;

/// What an anonymous peer may hold on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Deadline for a request head, from its first byte (hyper's `header_read_timeout`): a peer
    /// that sends a head slowly is cut off with 408 or a close.
    pub head_timeout: Duration,
    /// Largest read buffer, bytes (hyper's `max_buf_size`; at least 8,192, hyper's floor): a
    /// head that does not fit is answered 431.
    pub buffer_max: usize,
    /// Whether the connection serves another request after the first.
    pub keep_alive: bool,
}

/// hyper's HTTP/1.1 connection builder with `bounds` applied and tokio's timer (without a
/// timer hyper ignores `header_read_timeout`).
pub fn builder(bounds: Bounds) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(bounds.head_timeout)
        .max_buf_size(bounds.buffer_max.max(8192))
        .keep_alive(bounds.keep_alive);
    builder
}

/// Serves `conn` with `service` under `bounds` until the peer or the service ends it. A
/// connection's error (a reset, a timed-out head, a malformed request) ends it quietly: it
/// concerns that peer alone.
pub async fn serve<I, S>(conn: I, bounds: Bounds, service: S)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = builder(bounds)
        .serve_connection(hyper_util::rt::TokioIo::new(conn), service)
        .await;
}

#[cfg(test)]
mod tests {
    use super::{builder, serve, Bounds};
    use std::convert::Infallible;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn bounds(buffer_max: usize) -> Bounds {
        Bounds {
            head_timeout: Duration::from_secs(5),
            buffer_max,
            keep_alive: false,
        }
    }

    /// Writes `request` to a connection served under `bounds`; what the peer reads until close.
    async fn exchange(bounds: Bounds, request: Vec<u8>) -> String {
        let (mut peer, conn) = tokio::io::duplex(1 << 20);
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(hyper::Response::new(String::from("served")))
        });
        let served = tokio::spawn(serve(conn, bounds, service));
        peer.write_all(&request).await.unwrap();
        let mut out = Vec::new();
        peer.read_to_end(&mut out).await.unwrap();
        served.await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_buffer_bound_below_hypers_floor_is_raised_not_a_panic() {
        let _ = builder(bounds(0));
        let _ = builder(bounds(100));
    }

    #[tokio::test]
    async fn one_request_is_served_and_the_connection_closes() {
        let got = exchange(
            bounds(8192),
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.ends_with("served"), "one answer only: {got}");
        assert_eq!(got.matches("HTTP/1.1").count(), 1, "{got}");
    }

    #[tokio::test]
    async fn a_head_past_the_buffer_bound_is_refused_with_431() {
        let mut request = b"GET / HTTP/1.1\r\nhost: x\r\nx-big: ".to_vec();
        request.extend(std::iter::repeat_n(b'a', 20_000));
        request.extend(b"\r\n\r\n");
        let got = exchange(bounds(8192), request).await;
        assert!(got.starts_with("HTTP/1.1 431"), "{got}");
    }
}
