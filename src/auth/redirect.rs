//! The loopback redirect listener of one `login` (issue 30 §1; RFC 8252 §7.3): `GET
//! /callback?code=…&state=…[&iss=…]` on `127.0.0.1`, handed to the waiting login as a
//! [`Callback`]. Anyone on the machine can connect, so it is bounded like the metrics
//! listener: at most [`CONNECTIONS`] at once (more are closed at once), 2 s to send the head,
//! 5 s in all, one request per connection, heads of at most 8 KiB; every connection ends with
//! the login (`stop`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// Connections served at once.
pub const CONNECTIONS: usize = 8;
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
const LIFETIME: Duration = Duration::from_secs(5);
const HEAD_MAX: usize = 8 << 10;

const PAGE_OK: &str = "<!doctype html><title>mcp-supervisor</title><p>Done. You can close this tab and return to the terminal.</p>";
const PAGE_NOT_FOUND: &str = "not found\n";

/// The redirect's query, as the browser (or the pasted URL) gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Callback {
    /// `code`.
    pub code: Option<String>,
    /// `state`.
    pub state: Option<String>,
    /// `iss` (RFC 9207): the authorization server that answered.
    pub iss: Option<String>,
    /// `error`.
    pub error: Option<String>,
    /// `error_description`.
    pub error_description: Option<String>,
}

impl Callback {
    /// The query parameters of `url` (a whole URL, or a path with a query).
    pub fn of(url: &reqwest::Url) -> Callback {
        let mut cb = Callback::default();
        for (k, v) in url.query_pairs() {
            let v = Some(v.into_owned());
            match k.as_ref() {
                "code" => cb.code = v,
                "state" => cb.state = v,
                "iss" => cb.iss = v,
                "error" => cb.error = v,
                "error_description" => cb.error_description = v,
                _ => {}
            }
        }
        cb
    }
}

/// Serves `listener` until `stop`, sending each `/callback` query to `tx` (dropped when the
/// waiting login is full or gone).
pub async fn serve(
    listener: tokio::net::TcpListener,
    tx: mpsc::Sender<Callback>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let conn = tokio::select! {
            r = listener.accept() => r,
            _ = stop.cancelled() => return,
        };
        let Ok((conn, _)) = conn else {
            // Out of descriptors: wait rather than spin.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                _ = stop.cancelled() => return,
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(conn);
            continue;
        };
        let (tx, stop) = (tx.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = serve_one(conn, tx) => {}
                _ = tokio::time::sleep(LIFETIME) => {}
                _ = stop.cancelled() => {}
            }
            drop(slot);
        });
    }
}

async fn serve_one(conn: tokio::net::TcpStream, tx: mpsc::Sender<Callback>) {
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let found = req.method() == hyper::Method::GET && req.uri().path() == "/callback";
        if found {
            let url = reqwest::Url::parse(&format!("http://127.0.0.1{}", req.uri())).ok();
            if let Some(u) = url {
                let _ = tx.try_send(Callback::of(&u));
            }
        }
        let (status, body, kind) = if found {
            (200, PAGE_OK, "text/html; charset=utf-8")
        } else {
            (404, PAGE_NOT_FOUND, "text/plain")
        };
        let resp = hyper::Response::builder()
            .status(status)
            .header("content-type", kind)
            .header("cache-control", "no-store")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                body.as_bytes(),
            )))
            .unwrap_or_default();
        async move { Ok::<_, Infallible>(resp) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(HEAD_MAX)
        .keep_alive(false);
    let _ = builder
        .serve_connection(hyper_util::rt::TokioIo::new(conn), service)
        .await;
}

#[cfg(test)]
mod tests {
    use super::{serve, Callback, CONNECTIONS};
    use std::io::{Read, Write};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn a_redirect_gives_its_parameters() {
        let u = reqwest::Url::parse(
            "http://127.0.0.1:1/callback?code=c&state=s&iss=https%3A%2F%2Fas&error=e&x=y",
        )
        .unwrap();
        let cb = Callback::of(&u);
        assert_eq!(cb.code.as_deref(), Some("c"));
        assert_eq!(cb.state.as_deref(), Some("s"));
        assert_eq!(cb.iss.as_deref(), Some("https://as"));
        assert_eq!(cb.error.as_deref(), Some("e"));
    }

    /// Idle connections beyond the bound are closed at once; the callback still gets through
    /// once they go, and nothing else is served.
    #[test]
    fn idle_connections_are_bounded_and_the_callback_still_arrives() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let (tx, mut rx) = mpsc::channel(4);
            let stop = CancellationToken::new();
            tokio::spawn(serve(listener, tx, stop.clone()));
            let got = tokio::task::spawn_blocking(move || {
                let idle: Vec<_> = (0..CONNECTIONS * 4)
                    .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
                    .collect();
                drop(idle);
                std::thread::sleep(std::time::Duration::from_millis(300));
                let mut other = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                other
                    .write_all(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                let mut text = String::new();
                let _ = other.read_to_string(&mut text);
                assert!(text.starts_with("HTTP/1.1 404"), "{text}");
                let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                c.write_all(b"GET /callback?code=abc&state=xyz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                let mut text = String::new();
                let _ = c.read_to_string(&mut text);
                text
            })
            .await
            .unwrap();
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            let cb = rx.recv().await.unwrap();
            assert_eq!(cb.code.as_deref(), Some("abc"));
            stop.cancel();
        });
    }
}
