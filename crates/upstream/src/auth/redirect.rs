//! The loopback redirect listener of one `login` (issue 30 §1; RFC 8252 §7.3): `GET
//! /callback?code=…&state=…[&iss=…]` on `127.0.0.1`, handed to the waiting login as a
//! [`Callback`], and the start page `GET /start/<nonce>` that sends the browser on to the
//! authorization URL (issue 47 §2: so that URL, with its `state` and PKCE challenge, is never
//! on a browser's command line, where every local user can read it).
//!
//! A sign-in belongs to the user who started it (issue 47 §2, decisions): a connection is
//! served only when the kernel says its client socket belongs to one of the login's owners
//! ([`base::loopback::tcp_peer_uid`]); any other, or one whose owner cannot be found, is
//! dropped at accept, costing no slot and no task: at most a short 403 page naming
//! `--no-browser` is written without waiting, then it is closed. Owners' connections are
//! bounded like the metrics listener: at most [`CONNECTIONS`] at once (more are closed at
//! once), 2 s to send the head, 5 s in all, one request per connection, heads of at most 8 KiB;
//! every connection ends with the login (`stop`). A callback whose `state` is not the login's
//! is answered 400 and never reaches the login. Refusals (another user, no owner, a wrong
//! `state`, another path) are logged within a budget: [`REFUSALS_LOGGED`] lines per
//! [`REFUSALS_WINDOW`] per login, the next line counting those suppressed. Neither the
//! `state`, the nonce nor the authorization URL is ever logged.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use subtle::ConstantTimeEq;
use support::logging::LogBudget;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Connections of the login's owners served at once.
pub const CONNECTIONS: usize = 8;
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
const LIFETIME: Duration = Duration::from_secs(5);
const HEAD_MAX: usize = 8 << 10;

/// Refusal lines logged per [`REFUSALS_WINDOW`], per login (issue 47 §2, N18).
pub const REFUSALS_LOGGED: u32 = 20;
/// The window of [`REFUSALS_LOGGED`].
pub const REFUSALS_WINDOW: Duration = Duration::from_secs(10);

const PAGE_OK: &str = "<!doctype html><title>mcp-supervisor</title><p>Done. You can close this tab and return to the terminal.</p>";
const PAGE_NOT_FOUND: &str = "not found\n";
const PAGE_NOT_THIS: &str = "<!doctype html><title>mcp-supervisor</title><p>This is not the address of the sign-in that is waiting (its <code>state</code> does not match), so it was ignored; the sign-in goes on waiting. Use the browser that <code>mcp-supervisor login</code> opened, or run it again.</p>";
/// The answer to a connection of another user than the login's, written at accept.
const FORBIDDEN: &str = "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\nconnection: close\r\ncontent-length: 309\r\n\r\nThis sign-in belongs to another user: only the user who ran `mcp-supervisor login` (their own browser, or their own ssh -L tunnel) may use this address.\nFrom another account or another machine, run `mcp-supervisor login --no-browser NAME` and paste the address the browser ends on into that terminal instead.\n";

/// The budget of one login's refusal lines, shared by its listener and its wait (pasted
/// redirects).
pub fn refusal_budget() -> Arc<Mutex<LogBudget>> {
    Arc::new(Mutex::new(LogBudget::new(REFUSALS_LOGGED, REFUSALS_WINDOW)))
}

/// Logs refusal `what` of server `server`'s login within `budget`, with the peer's uid when
/// known and the count of lines suppressed since the last one.
pub fn log_refusal(budget: &Mutex<LogBudget>, server: &str, peer_uid: Option<u32>, what: &str) {
    let allowed = budget
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .allow(std::time::Instant::now());
    if let Some(suppressed) = allowed {
        warn!(server, peer_uid, suppressed, "login: {what}");
    }
}

/// What one login's listener serves, and to whom.
pub struct Gate {
    server: String,
    owners: Vec<u32>,
    state: String,
    start: String,
    authorize: String,
    refusals: Arc<Mutex<LogBudget>>,
}

impl Gate {
    /// The gate of server `server`'s login: served to `owners` (uids) only; the start page is
    /// `/start/<nonce>`, redirecting to `authorize`; a callback must carry `state`; refusals
    /// are logged within `refusals`.
    pub fn new(
        server: &str,
        owners: &[u32],
        (state, nonce, authorize): (&str, &str, &str),
        refusals: Arc<Mutex<LogBudget>>,
    ) -> Gate {
        Gate {
            server: server.to_string(),
            owners: owners.to_vec(),
            state: state.to_string(),
            start: format!("/start/{nonce}"),
            authorize: authorize.to_string(),
            refusals,
        }
    }

    fn refused(&self, peer_uid: Option<u32>, what: &str) {
        log_refusal(&self.refusals, &self.server, peer_uid, what);
    }

    fn is_start(&self, path: &str) -> bool {
        path.len() == self.start.len() && bool::from(path.as_bytes().ct_eq(self.start.as_bytes()))
    }

    fn is_state(&self, state: Option<&str>) -> bool {
        state.is_some_and(|s| {
            s.len() == self.state.len() && bool::from(s.as_bytes().ct_eq(self.state.as_bytes()))
        })
    }
}

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

/// Serves `listener` until `stop` to the owners `gate` names, sending each `/callback` query
/// with the login's `state` to `tx` (dropped when the waiting login is full or gone).
///
/// The owner of each connection is asked of the kernel at accept, inline (a netlink round
/// trip; see [`base::loopback::tcp_peer_uid`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    gate: Arc<Gate>,
    tx: mpsc::Sender<Callback>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let conn = tokio::select! {
            r = listener.accept() => r,
            _ = stop.cancelled() => return,
        };
        let Ok((conn, peer)) = conn else {
            // Out of descriptors: wait rather than spin.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                _ = stop.cancelled() => return,
            }
        };
        let owner = conn
            .local_addr()
            .ok()
            .and_then(|local| base::loopback::tcp_peer_uid(local, peer));
        match owner {
            Some(uid) if gate.owners.contains(&uid) => {}
            Some(uid) => {
                turn_away(conn);
                gate.refused(Some(uid), "refused a connection to the redirect listener: its socket belongs to another user than the one who ran `login`");
                continue;
            }
            None => {
                turn_away(conn);
                gate.refused(None, "refused a connection to the redirect listener: the owner of its socket could not be found");
                continue;
            }
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(conn);
            continue;
        };
        let (tx, stop, gate) = (tx.clone(), stop.clone(), gate.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = serve_one(conn, gate, tx) => {}
                _ = tokio::time::sleep(LIFETIME) => {}
                _ = stop.cancelled() => {}
            }
            drop(slot);
        });
    }
}

/// Writes [`FORBIDDEN`] to a foreign connection without waiting, and closes it: what it sent
/// so far is read and dropped first (so the close is a FIN after the page, not a reset).
fn turn_away(conn: tokio::net::TcpStream) {
    use std::io::{Read, Write};
    let Ok(mut conn) = conn.into_std() else {
        return;
    };
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        match conn.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = conn.write(FORBIDDEN.as_bytes());
}

fn page(
    status: u16,
    kind: &str,
    body: &'static str,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", kind)
        .header("cache-control", "no-store")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            body.as_bytes(),
        )))
        .unwrap_or_default()
}

/// The answer to one request of an owner's connection.
fn answer(
    req: &hyper::Request<hyper::body::Incoming>,
    gate: &Gate,
    tx: &mpsc::Sender<Callback>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    let get = req.method() == hyper::Method::GET;
    if get && gate.is_start(req.uri().path()) {
        return hyper::Response::builder()
            .status(302)
            .header("location", gate.authorize.as_str())
            .header("cache-control", "no-store")
            .header("referrer-policy", "no-referrer")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap_or_else(|_| {
                page(
                    500,
                    "text/plain",
                    "the authorization URL is not a header value\n",
                )
            });
    }
    if get && req.uri().path() == "/callback" {
        let cb = reqwest::Url::parse(&format!("http://127.0.0.1{}", req.uri()))
            .ok()
            .map(|u| Callback::of(&u))
            .unwrap_or_default();
        if gate.is_state(cb.state.as_deref()) {
            let _ = tx.try_send(cb);
            return page(200, "text/html; charset=utf-8", PAGE_OK);
        }
        gate.refused(None, "a redirect without this login's state was ignored");
        return page(400, "text/html; charset=utf-8", PAGE_NOT_THIS);
    }
    gate.refused(
        None,
        "the redirect listener answered 404 to a request for another path",
    );
    page(404, "text/plain", PAGE_NOT_FOUND)
}

async fn serve_one(conn: tokio::net::TcpStream, gate: Arc<Gate>, tx: mpsc::Sender<Callback>) {
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let resp = answer(&req, &gate, &tx);
        async move { Ok::<_, Infallible>(resp) }
    });
    let bounds = base::http1::Bounds {
        head_timeout: HEAD_TIMEOUT,
        buffer_max: HEAD_MAX,
        keep_alive: false,
    };
    base::http1::serve(conn, bounds, service).await;
}

#[cfg(test)]
mod tests {
    use super::{refusal_budget, serve, Callback, Gate, CONNECTIONS, FORBIDDEN};
    use std::io::{Read, Write};
    use std::sync::Arc;
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

    #[test]
    fn the_refusal_page_says_its_length() {
        let (head, body) = FORBIDDEN.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}\r\n", body.len()))
                || head.ends_with(&format!("content-length: {}", body.len())),
            "{head}"
        );
        assert!(body.contains("--no-browser"));
    }

    fn get(port: u16, path: &str) -> String {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut text = String::new();
        let _ = c.read_to_string(&mut text);
        text
    }

    /// A listener for the login of `owners` (state `xyz`, nonce `n0nce`): its port, what it
    /// sends on, and its stop.
    async fn listening(owners: &[u32]) -> (u16, mpsc::Receiver<Callback>, CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel(4);
        let stop = CancellationToken::new();
        let gate = Gate::new(
            "s",
            owners,
            ("xyz", "n0nce", "https://as.example/authorize?state=xyz"),
            refusal_budget(),
        );
        tokio::spawn(serve(listener, Arc::new(gate), tx, stop.clone()));
        (port, rx, stop)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Idle connections beyond the bound are closed at once; the callback still gets through
    /// once they go, and nothing else is served: another path is 404, another state 400.
    #[test]
    fn idle_connections_are_bounded_and_the_callback_still_arrives() {
        runtime().block_on(async {
            let me = unsafe { libc::geteuid() };
            let (port, mut rx, stop) = listening(&[me]).await;
            let got = tokio::task::spawn_blocking(move || {
                let idle: Vec<_> = (0..CONNECTIONS * 4)
                    .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
                    .collect();
                drop(idle);
                std::thread::sleep(std::time::Duration::from_millis(300));
                let text = get(port, "/other");
                assert!(text.starts_with("HTTP/1.1 404"), "{text}");
                let text = get(port, "/start/n0nc3");
                assert!(text.starts_with("HTTP/1.1 404"), "{text}");
                let text = get(port, "/callback?code=abc&state=xyw");
                assert!(text.starts_with("HTTP/1.1 400"), "{text}");
                let text = get(port, "/start/n0nce");
                assert!(text.starts_with("HTTP/1.1 302"), "{text}");
                assert!(
                    text.contains("location: https://as.example/authorize?state=xyz\r\n"),
                    "{text}"
                );
                assert!(text.contains("cache-control: no-store"), "{text}");
                get(port, "/callback?code=abc&state=xyz")
            })
            .await
            .unwrap();
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            let cb = rx.recv().await.unwrap();
            assert_eq!(cb.code.as_deref(), Some("abc"));
            assert!(rx.try_recv().is_err(), "the wrong state was handed on");
            stop.cancel();
        });
    }

    /// A connection whose socket is not an owner's is answered the refusal page and closed;
    /// nothing reaches the login.
    #[test]
    fn a_connection_of_another_uid_is_turned_away() {
        runtime().block_on(async {
            let me = unsafe { libc::geteuid() };
            let (port, mut rx, stop) = listening(&[me.wrapping_add(1)]).await;
            let got = tokio::task::spawn_blocking(move || {
                (0..CONNECTIONS * 4)
                    .map(|_| get(port, "/callback?code=abc&state=xyz"))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap();
            for text in got {
                assert!(
                    text.is_empty() || text.starts_with("HTTP/1.1 403"),
                    "{text}"
                );
            }
            assert!(rx.try_recv().is_err());
            stop.cancel();
        });
    }
}
