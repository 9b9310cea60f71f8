//! The Streamable HTTP endpoint (issue 16) against the fake server: both eras on one URL, the
//! socket and HTTP clients on one child, access control, header checks, cancellation by
//! closing a stream, outages. A minimal HTTP/1.1 client (one request per connection,
//! chunked bodies, SSE events) is below; the real SDK clients are in `interop_http.rs`.

use crate::harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where an HTTP request goes.
#[derive(Clone, Debug)]
pub enum Dest {
    /// `host:port` on TCP.
    Tcp(String),
    /// A Unix socket.
    Unix(PathBuf),
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// The body of a response, decoded (length, chunked, or until close).
struct Body {
    inner: BufReader<Box<dyn Stream>>,
    mode: Mode,
}

enum Mode {
    Length(usize),
    Chunked { left: usize, done: bool },
    Close,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.mode {
            Mode::Length(0) => Ok(0),
            Mode::Length(n) => {
                let max = (*n).min(buf.len());
                let got = self.inner.read(&mut buf[..max])?;
                *n -= got;
                Ok(got)
            }
            Mode::Close => self.inner.read(buf),
            Mode::Chunked { left, done } => {
                if *done {
                    return Ok(0);
                }
                if *left == 0 {
                    let mut line = String::new();
                    self.inner.read_line(&mut line)?;
                    if line.trim().is_empty() {
                        line.clear();
                        self.inner.read_line(&mut line)?;
                    }
                    let size =
                        usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                            .unwrap_or(0);
                    if size == 0 {
                        *done = true;
                        return Ok(0);
                    }
                    *left = size;
                }
                let max = (*left).min(buf.len());
                let got = self.inner.read(&mut buf[..max])?;
                *left -= got;
                Ok(got)
            }
        }
    }
}

/// A response: status, headers, and the body still to be read.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: BufReader<Body>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(mut self) -> String {
        let mut s = String::new();
        let _ = self.body.read_to_string(&mut s);
        s
    }

    /// The body as JSON (a JSON response), or the first SSE event's data.
    pub fn json(mut self) -> Value {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            return self.event(Duration::from_secs(20)).expect("an SSE event");
        }
        let t = self.text();
        serde_json::from_str(&t).unwrap_or_else(|e| panic!("not JSON ({e}): {t}"))
    }

    /// The next SSE `data:` payload as JSON (comments skipped); `None` at the end of the
    /// stream or after `timeout`.
    pub fn event(&mut self, timeout: Duration) -> Option<Value> {
        let end = Instant::now() + timeout;
        let mut data = String::new();
        loop {
            if Instant::now() >= end {
                return None;
            }
            let mut line = String::new();
            match self.body.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(_) => return None,
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if let Some(d) = l.strip_prefix("data:") {
                data.push_str(d.trim_start());
            } else if l.is_empty() && !data.is_empty() {
                return Some(serde_json::from_str(&data).expect("SSE data is JSON"));
            }
        }
    }

    /// Reads events until the response to `id` (others are returned too, in order).
    pub fn events_until_response(&mut self, id: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(v) = self.event(Duration::from_secs(30)) {
            let done = v.get("method").is_none() && v["id"] == *id;
            out.push(v);
            if done {
                return out;
            }
        }
        panic!("no response to {id} on the stream; got {out:?}");
    }
}

/// Sends one request and reads the head of its response.
pub fn request(
    dest: &Dest,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    try_request(dest, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path}: no answer: {e}"))
}

/// [`request`], with the failure to connect or to read an answer as an error (a connection
/// closed by the server unanswered, a head that takes more than 30 s).
pub fn try_request(
    dest: &Dest,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Resp> {
    let (mut stream, host): (Box<dyn Stream>, String) = match dest {
        Dest::Tcp(a) => {
            let s = std::net::TcpStream::connect(a)?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            (Box::new(s), a.clone())
        }
        Dest::Unix(p) => {
            let s = std::os::unix::net::UnixStream::connect(p)?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            (Box::new(s), "localhost".into())
        }
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head += &format!("Host: {host}\r\n");
    }
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    // One write: a server that refuses on the head alone (401, 403) may answer and close
    // before a separately written body arrives, which made the body's write fail with EPIPE
    // (seen once under load). A write that fails still leaves the answer to be read.
    head += body;
    let written = stream.write_all(head.as_bytes());
    let mut inner = BufReader::new(stream);
    let deadline = Instant::now() + Duration::from_secs(30);
    let read_line = |inner: &mut BufReader<Box<dyn Stream>>| -> std::io::Result<String> {
        let mut line = String::new();
        loop {
            match inner.read_line(&mut line) {
                Ok(_) => return Ok(line),
                Err(e)
                    if Instant::now() < deadline
                        && (e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    };
    // No answer at all: the write's error, if it had one, says more than the read's.
    let status_line = read_line(&mut inner).map_err(|e| written.err().unwrap_or(e))?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("bad status line {status_line:?}"),
            )
        })?;
    let mut hdrs = Vec::new();
    loop {
        let l = read_line(&mut inner)?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            hdrs.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let get = |n: &str| {
        hdrs.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mode = if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        Mode::Chunked {
            left: 0,
            done: false,
        }
    } else if let Some(n) = get("content-length").and_then(|n| n.parse().ok()) {
        Mode::Length(n)
    } else {
        Mode::Close
    };
    Ok(Resp {
        status,
        headers: hdrs,
        body: BufReader::new(Body { inner, mode }),
    })
}

/// A supervisor whose servers' `http = true` are served on an ephemeral loopback port.
pub struct HttpSup {
    pub sup: Supervisor,
    pub addr: String,
}

impl HttpSup {
    pub fn start(servers: &str) -> HttpSup {
        let sup = Supervisor::start(&format!("http_listen = \"127.0.0.1:0\"\n\n{servers}"));
        let file = sup.dir.path().join("run/http.addr");
        assert!(
            wait_until(Duration::from_secs(10), || file.exists()),
            "no http.addr; log:\n{}",
            sup.log()
        );
        let addr = std::fs::read_to_string(&file).unwrap().trim().to_string();
        HttpSup { sup, addr }
    }

    pub fn token(&self, name: &str) -> String {
        std::fs::read_to_string(self.sup.dir.path().join(format!("run/{name}.http.token")))
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn tcp(&self) -> Dest {
        Dest::Tcp(self.addr.clone())
    }

    pub fn unix(&self, name: &str) -> Dest {
        Dest::Unix(self.sup.dir.path().join(format!("run/{name}.http.sock")))
    }

    /// A POST of `body` to server `name` over TCP with its token, `extra` headers added.
    pub fn post(&self, name: &str, extra: &[(&str, &str)], body: &Value) -> Resp {
        let auth = format!("Bearer {}", self.token(name));
        let mut h = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        h.extend_from_slice(extra);
        request(
            &self.tcp(),
            "POST",
            &format!("/mcp/{name}"),
            &h,
            &body.to_string(),
        )
    }

    /// Opens a handshake-era session; returns its id.
    pub fn session(&self, name: &str) -> String {
        self.session_with(name, json!({}))
    }

    /// Opens a handshake-era session declaring `capabilities`; returns its id.
    pub fn session_with(&self, name: &str, capabilities: Value) -> String {
        let r = self.post(
            name,
            &[],
            &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                "protocolVersion":"2025-06-18","capabilities":capabilities,"clientInfo":{"name":"it","version":"1"}}}),
        );
        assert_eq!(r.status, 200);
        let sid = r
            .header("mcp-session-id")
            .expect("a session id")
            .to_string();
        let init = r.json();
        assert!(init["result"]["protocolVersion"].is_string(), "{init}");
        let r = self.post(
            name,
            &[
                ("Mcp-Session-Id", &sid),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        );
        assert_eq!(r.status, 202);
        sid
    }
}

/// The 2026-07-28 envelope for a request's params.
pub fn modern(params: Value) -> Value {
    let mut p = params;
    p["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "it-modern", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    p
}

/// The headers a 2026-07-28 request needs.
fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(n) = name {
        h.push(("Mcp-Name", n));
    }
    h
}

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}

fn text(v: &Value) -> String {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn http_and_socket_clients_of_both_eras_share_one_child_and_nothing_crosses() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    // A socket client and its pid.
    let mut sock = s.sup.client("f");
    let pid = Client::text(&sock.call(json!(1), "pid", json!({})));
    // A handshake-era HTTP session, with the same request id as the socket client.
    let sid = s.session("f");
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let r = s.post("f", &h, &call(1, "pid", json!({})));
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["id"], 1);
    assert_eq!(text(&v), pid, "one child for everyone");
    // A 2026-07-28 request, same id again.
    let mut m = call(1, "echo", json!({"text": "modern"}));
    m["params"] = modern(m["params"].clone());
    let r = s.post("f", &modern_headers("tools/call", Some("echo")), &m);
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["id"], 1);
    assert_eq!(text(&v), "modern");
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    // Interleaved: each gets its own answer.
    let a = std::thread::scope(|sc| {
        let t1 = sc.spawn(|| {
            let r = s.post(
                "f",
                &h,
                &call(7, "echo", json!({"text": "session", "delay_ms": 100})),
            );
            r.json()
        });
        let t2 = sc.spawn(|| {
            let mut m = call(7, "echo", json!({"text": "stateless", "delay_ms": 50}));
            m["params"] = modern(m["params"].clone());
            s.post("f", &modern_headers("tools/call", Some("echo")), &m)
                .json()
        });
        let v3 = sock.call(json!(7), "echo", json!({"text": "socket"}));
        (t1.join().unwrap(), t2.join().unwrap(), v3)
    });
    assert_eq!(text(&a.0), "session");
    assert_eq!(text(&a.1), "stateless");
    assert_eq!(Client::text(&a.2), "socket");
    assert_eq!(a.0["id"], 7);
    assert_eq!(a.1["id"], 7);
}

#[test]
fn http_tcp_requires_the_token_and_refuses_foreign_hosts_and_origins() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    let body = init.to_string();
    let accept = ("Accept", "application/json, text/event-stream");
    // The status of an initialize POST to `path` over TCP with `headers` besides Accept.
    let status = |path: &str, headers: &[(&str, &str)]| {
        let mut h = vec![accept];
        h.extend_from_slice(headers);
        request(&s.tcp(), "POST", path, &h, &body).status
    };
    // No token, wrong token.
    let r = request(&s.tcp(), "POST", "/mcp/f", &[accept], &body);
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    assert_eq!(status("/mcp/f", &[("Authorization", "Bearer nope")]), 401);
    let auth = format!("Bearer {}", s.token("f"));
    let token = ("Authorization", auth.as_str());
    // DNS rebinding: a foreign Host or Origin, even with the token.
    assert_eq!(status("/mcp/f", &[token, ("Host", "evil.example:80")]), 403);
    assert_eq!(
        status("/mcp/f", &[token, ("Origin", "http://evil.example")]),
        403
    );
    // A loopback origin and the token: served.
    assert_eq!(
        status("/mcp/f", &[token, ("Origin", "http://localhost:3000")]),
        200
    );
    // Unknown server, other paths.
    assert_eq!(status("/mcp/nope", &[token]), 401);
    let r = request(&s.tcp(), "GET", "/", &[], "");
    assert_eq!(r.status, 404);
    // The Unix socket needs no token (SO_PEERCRED), but still checks Origin.
    let r = request(&s.unix("f"), "POST", "/mcp", &[accept], &body);
    assert_eq!(r.status, 200);
    assert!(r.header("mcp-session-id").is_some());
    let r = request(
        &s.unix("f"),
        "POST",
        "/mcp",
        &[accept, ("Origin", "https://evil.example")],
        &body,
    );
    assert_eq!(r.status, 403);
    // The token file is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(s.sup.dir.path().join("run/f.http.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn http_2026_requests_are_checked_against_their_headers() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let mut m = call(3, "echo", json!({"text": "x"}));
    m["params"] = modern(m["params"].clone());
    // Mcp-Name disagrees with the body: 400, -32020, the request's id.
    let r = s.post("f", &modern_headers("tools/call", Some("add")), &m);
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32020, "{v}");
    assert_eq!(v["id"], 3);
    // Missing Mcp-Method.
    let r = s.post("f", &[("MCP-Protocol-Version", "2026-07-28")], &m);
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32020);
    // A method 2026-07-28 does not have: 404, -32601.
    let ping = json!({"jsonrpc":"2.0","id":4,"method":"ping","params":modern(json!({}))});
    let r = s.post("f", &modern_headers("ping", None), &ping);
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], -32601);
    // No GET stream and no DELETE in 2026-07-28.
    let auth = format!("Bearer {}", s.token("f"));
    for verb in ["GET", "DELETE"] {
        let r = request(
            &s.tcp(),
            verb,
            "/mcp/f",
            &[
                ("Authorization", &auth),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Accept", "text/event-stream"),
            ],
            "",
        );
        assert_eq!(r.status, 405, "{verb}");
    }
    // A client that accepts only JSON gets one JSON body; one that accepts no JSON, 406.
    let mut h = modern_headers("tools/call", Some("echo"));
    h.push(("Accept", "application/json"));
    let auth_h = ("Authorization", auth.as_str());
    h.push(auth_h);
    let r = request(&s.tcp(), "POST", "/mcp/f", &h, &m.to_string());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(text(&r.json()), "x");
    let mut h = modern_headers("tools/call", Some("echo"));
    h.push(("Accept", "text/event-stream"));
    h.push(auth_h);
    let r = request(&s.tcp(), "POST", "/mcp/f", &h, &m.to_string());
    assert_eq!(r.status, 406);
    // Garbage: 400 with -32700, and the endpoint still serves.
    let r = request(
        &s.tcp(),
        "POST",
        "/mcp/f",
        &[
            ("Authorization", &auth),
            ("Accept", "application/json, text/event-stream"),
        ],
        "{not json",
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    let r = s.post("f", &modern_headers("tools/call", Some("echo")), &m);
    assert_eq!(text(&r.json()), "x");
}

#[test]
fn http_session_streams_progress_server_requests_and_ends_on_delete() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let sid = s.session_with("f", json!({"elicitation": {}}));
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    // Progress rides on the POST's SSE stream, before the result.
    let mut c = call(5, "progress", json!({"count": 3}));
    c["params"]["_meta"] = json!({"progressToken": "tok"});
    let mut r = s.post("f", &h, &c);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let evs = r.events_until_response(&json!(5));
    let progress: Vec<_> = evs
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{evs:?}");
    assert!(progress
        .iter()
        .all(|p| p["params"]["progressToken"] == "tok"));
    // The child's own request (elicitation) reaches the session and its answer goes back.
    let mut r = s.post("f", &h, &call(6, "confirm", json!({"question": "go?"})));
    let asked = r
        .event(Duration::from_secs(10))
        .expect("the child's request");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let answer = json!({"jsonrpc":"2.0","id":asked["id"],"result":{"action":"accept","content":{"ok":true}}});
    assert_eq!(s.post("f", &h, &answer).status, 202);
    let evs = r.events_until_response(&json!(6));
    let last = evs.last().unwrap();
    assert!(text(last).starts_with("confirmed:"), "{last}");
    assert!(text(last).contains("accept"), "{last}");
    // A session client that accepts only JSON gets its answer as one JSON body.
    let auth = format!("Bearer {}", s.token("f"));
    let mut hj = h.to_vec();
    hj.extend([
        ("Accept", "application/json"),
        ("Authorization", auth.as_str()),
    ]);
    let r = request(
        &s.tcp(),
        "POST",
        "/mcp/f",
        &hj,
        &call(8, "echo", json!({"text": "json"})).to_string(),
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(text(&r.json()), "json");
    // DELETE ends it; its id is then unknown (404).
    let r = request(
        &s.tcp(),
        "DELETE",
        "/mcp/f",
        &[("Authorization", &auth), ("Mcp-Session-Id", &sid)],
        "",
    );
    assert_eq!(r.status, 200);
    let r = s.post("f", &h, &call(7, "echo", json!({"text": "x"})));
    assert_eq!(r.status, 404);
}

/// Closing a response stream cancels exactly that request toward the child, in both eras.
#[test]
fn http_closing_a_response_stream_cancels_that_request_in_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let s = HttpSup::start(&fake_server(
        "f",
        &["--log", log.to_str().unwrap()],
        "http = true",
    ));
    // 2026-07-28: the stream is the request.
    let mut m = call(9, "slow", json!({"ms": 60000}));
    m["params"] = modern(m["params"].clone());
    let r = s.post("f", &modern_headers("tools/call", Some("slow")), &m);
    assert_eq!(r.status, 200);
    assert!(wait_until(Duration::from_secs(10), || child_saw(&log)
        .iter()
        .any(|l| l.contains("\"slow\""))));
    drop(r);
    assert!(
        wait_until(Duration::from_secs(10), || child_saw_method(
            &log,
            "notifications/cancelled"
        ) == 1),
        "no cancel reached the child; saw {:?}",
        child_saw(&log)
    );
    // Handshake era: one POST stream closed, the other request of the session unharmed.
    let sid = s.session("f");
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let r1 = s.post("f", &h, &call(10, "slow", json!({"ms": 60000})));
    let mut r2 = s.post(
        "f",
        &h,
        &call(11, "echo", json!({"text": "kept", "delay_ms": 300})),
    );
    assert!(wait_until(Duration::from_secs(10), || child_saw(&log)
        .iter()
        .filter(|l| l.contains("\"slow\""))
        .count()
        == 2));
    drop(r1);
    assert!(wait_until(Duration::from_secs(10), || child_saw_method(
        &log,
        "notifications/cancelled"
    ) == 2));
    let evs = r2.events_until_response(&json!(11));
    assert_eq!(text(evs.last().unwrap()), "kept");
    assert_eq!(
        child_saw_method(&log, "notifications/cancelled"),
        2,
        "only the closed stream's request"
    );
}

#[test]
fn http_clients_of_both_eras_get_a_readable_outage_when_the_child_dies_and_then_work() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let s = HttpSup::start(&fake_server(
        "f",
        &["--log", log.to_str().unwrap()],
        "http = true\nbackoff_initial = \"100ms\"",
    ));
    let sid = s.session("f");
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let pid_before = text(&s.post("f", &h, &call(1, "pid", json!({}))).json());
    let (session_outage, modern_outage) = std::thread::scope(|sc| {
        let a = sc.spawn(|| {
            s.post("f", &h, &call(2, "slow", json!({"ms": 60000})))
                .json()
        });
        let b = sc.spawn(|| {
            let mut m = call(2, "slow", json!({"ms": 60000}));
            m["params"] = modern(m["params"].clone());
            s.post("f", &modern_headers("tools/call", Some("slow")), &m)
                .json()
        });
        // Both calls in flight, then the child is killed.
        assert!(wait_until(Duration::from_secs(10), || {
            child_saw(&log)
                .iter()
                .filter(|l| l.contains("\"slow\""))
                .count()
                == 2
        }));
        let pid: i32 = pid_before.parse().unwrap();
        unsafe { libc::kill(pid, libc::SIGKILL) };
        (a.join().unwrap(), b.join().unwrap())
    });
    for (era, v) in [("handshake", &session_outage), ("2026", &modern_outage)] {
        assert_eq!(v["id"], 2, "{era}: {v}");
        let readable = v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
            || v["result"]["isError"] == true;
        assert!(readable, "{era}: not a readable outage: {v}");
    }
    // The next call of each works, on a new child.
    assert!(wait_until(Duration::from_secs(20), || s
        .sup
        .server_status("f")["state"]
        == "ready"));
    let pid_after = text(&s.post("f", &h, &call(3, "pid", json!({}))).json());
    assert_ne!(pid_after, pid_before);
    let mut m = call(3, "echo", json!({"text": "back"}));
    m["params"] = modern(m["params"].clone());
    assert_eq!(
        text(
            &s.post("f", &modern_headers("tools/call", Some("echo")), &m)
                .json()
        ),
        "back"
    );
}

#[test]
fn url_prints_the_endpoint_token_and_client_snippets() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let out = std::process::Command::new(SUPERVISOR)
        .args(["url", "f", "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let url = format!("http://{}/mcp/f", s.addr);
    assert!(text.contains(&url), "{text}");
    assert!(text.contains(&format!("Authorization: Bearer {}", s.token("f"))));
    for client in [
        "claude mcp add --transport http",
        "\"mcpServers\"",
        "\"type\": \"http\"",
        "[mcp_servers.f]",
    ] {
        assert!(text.contains(client), "{client} missing:\n{text}");
    }
    let out = std::process::Command::new(SUPERVISOR)
        .args(["url", "f", "--json", "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["url"], url);
    assert_eq!(v["token"], s.token("f"));
    // A server without http: exit 4 with the fix.
    let cfg = std::fs::read_to_string(&s.sup.config).unwrap();
    std::fs::write(
        &s.sup.config,
        format!("{cfg}\n{}", fake_server("g", &[], "")),
    )
    .unwrap();
    let out = std::process::Command::new(SUPERVISOR)
        .args(["url", "g", "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http = true"));
}

/// `http` turned on and off by reload: the Unix socket, the token and the TCP path follow,
/// and the child is never restarted for it.
#[test]
fn http_is_turned_on_and_off_by_reload_without_restarting_the_child() {
    let s = HttpSup::start(&format!(
        "{}{}",
        fake_server("f", &[], "http = true"),
        fake_server("g", &[], "")
    ));
    let mut g = s.sup.client("g");
    let g_pid = Client::text(&g.call(json!(1), "pid", json!({})));
    let g_sock = s.sup.dir.path().join("run/g.http.sock");
    let f_sock = s.sup.dir.path().join("run/f.http.sock");
    assert!(!g_sock.exists());
    let cfg = std::fs::read_to_string(&s.sup.config).unwrap();
    let cfg = cfg
        .replace("http = true", "http = false")
        .replace("[servers.g]\n", "[servers.g]\nhttp = true\n");
    std::fs::write(&s.sup.config, cfg).unwrap();
    let out = std::process::Command::new(SUPERVISOR)
        .args(["reload", "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wait_until(Duration::from_secs(10), || g_sock.exists()
        && !f_sock.exists()));
    let mut m = call(2, "pid", json!({}));
    m["params"] = modern(m["params"].clone());
    let r = s.post("g", &modern_headers("tools/call", Some("pid")), &m);
    assert_eq!(r.status, 200);
    assert_eq!(text(&r.json()), g_pid, "the same child: no restart");
    let r = s.post("f", &modern_headers("tools/call", Some("pid")), &m);
    // f has no HTTP endpoint any more: refused like an unknown name (no token to check).
    assert_eq!(r.status, 401);
    assert_eq!(Client::text(&g.call(json!(3), "pid", json!({}))), g_pid);
}

/// A POST body over `max_message_size` is 413; one that stops arriving is 408 after
/// `client_stall_timeout`; the endpoint keeps serving.
#[test]
fn http_bodies_are_bounded_in_size_and_in_time() {
    let s = HttpSup::start(&fake_server(
        "f",
        &[],
        "http = true\nmax_message_size = 2048\nclient_stall_timeout = \"300ms\"",
    ));
    let big = call(1, "echo", json!({"text": "x".repeat(4096)}));
    let r = s.post("f", &[], &big);
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], -32600);
    // Half a body, then silence.
    let auth = format!("Bearer {}", s.token("f"));
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    let head = format!(
        "POST /mcp/f HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\nAccept: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"",
        s.addr
    );
    c.write_all(head.as_bytes()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let sid = s.session("f");
    let r = s.post(
        "f",
        &[("Mcp-Session-Id", &sid)],
        &call(2, "echo", json!({"text": "still"})),
    );
    assert_eq!(text(&r.json()), "still");
}

// ----- issue 26: what an anonymous peer, a token holder or a revoked uid can do ----------------

/// The session headers of a handshake-era session.
fn in_session(sid: &str) -> [(&str, &str); 2] {
    [
        ("Mcp-Session-Id", sid),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]
}

/// Opens session `sid`'s GET stream over TCP (with the token).
fn get_stream(s: &HttpSup, name: &str, sid: &str) -> Resp {
    let auth = format!("Bearer {}", s.token(name));
    request(
        &s.tcp(),
        "GET",
        &format!("/mcp/{name}"),
        &[
            ("Authorization", &auth),
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", sid),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        "",
    )
}

/// Lines of the supervisor's log above debug level.
fn above_debug(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" INFO ") || l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

/// Issue 26 §4: request heads half sent without a token, more than the endpoint's 1,024
/// connections and held open, neither lock out a client that has the token nor stay for long.
#[test]
fn http_half_sent_heads_without_a_token_do_not_lock_out_a_client_with_one() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let mut held = Vec::new();
    for _ in 0..1100 {
        let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
        c.write_all(b"POST /mcp/f HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            .unwrap();
        held.push(c);
    }
    // A well-behaved client, while every one of those is held: served.
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    let auth = format!("Bearer {}", s.token("f"));
    let r = try_request(
        &s.tcp(),
        "POST",
        "/mcp/f",
        &[
            ("Authorization", &auth),
            ("Accept", "application/json, text/event-stream"),
        ],
        &init.to_string(),
    );
    let r = r.unwrap_or_else(|e| {
        panic!(
            "a client with the token was refused during the flood: {e}\nlog:\n{}",
            s.sup.log()
        )
    });
    assert_eq!(r.status, 200);
    let sid = r.header("mcp-session-id").expect("a session").to_string();
    let v = s
        .post(
            "f",
            &in_session(&sid),
            &call(1, "echo", json!({"text": "served"})),
        )
        .json();
    assert_eq!(text(&v), "served");
    // The newest of the half-sent heads is closed soon, unanswered: heads without a token
    // cannot hold a connection for long.
    let last = held.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    let r = last.read_to_end(&mut got);
    assert!(
        r.is_ok() && got.is_empty(),
        "a half-sent head without a token was kept (or answered): {r:?} {:?}",
        String::from_utf8_lossy(&got)
    );
}

/// Issue 26 §4: request bodies are charged to `client_memory` while they are read and held;
/// beyond it they are refused (503, a JSON-RPC error naming `client_memory`), so twelve
/// parallel bodies of 6 MiB cannot take the supervisor past its budget.
#[test]
fn http_parallel_large_bodies_stay_within_client_memory() {
    const MIB: usize = 1 << 20;
    let s = HttpSup::start(&format!(
        "client_memory = {}\n\n{}",
        16 * MIB,
        fake_server("f", &[], "http = true\nmax_message_size = 67108864")
    ));
    let mut m = call(1, "pid", json!({"pad": "x".repeat(6 * MIB)}));
    m["params"] = modern(m["params"].clone());
    let body = std::sync::Arc::new(m.to_string());
    let auth = format!("Bearer {}", s.token("f"));
    let head = format!(
        "POST /mcp/f HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\nAccept: application/json\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: pid\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        s.addr,
        body.len()
    );
    let n = 12;
    // The supervisor's peak resident memory so far, in KiB.
    let peak = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.sup.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .unwrap()
    };
    let before = peak();
    let all_sent = std::sync::Arc::new(std::sync::Barrier::new(n));
    let answers: Vec<(u16, String)> = std::thread::scope(|sc| {
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (body, head, all_sent) = (body.clone(), head.clone(), all_sent.clone());
                let addr = s.addr.clone();
                sc.spawn(move || {
                    let mut c = std::net::TcpStream::connect(&addr).unwrap();
                    c.write_all(head.as_bytes()).unwrap();
                    // Everything but the last byte, then wait for the others: every body is
                    // in the supervisor's hands at once.
                    let (most, last) = body.as_bytes().split_at(body.len() - 1);
                    c.write_all(most).unwrap();
                    all_sent.wait();
                    c.write_all(last).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    let mut out = String::new();
                    let _ = c.read_to_string(&mut out);
                    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
                    let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
                    (status, body.to_string())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let grown_kib = peak().saturating_sub(before);
    let served = answers.iter().filter(|(c, _)| *c == 200).count();
    let refused: Vec<&String> = answers
        .iter()
        .filter(|(c, _)| *c == 503)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(
        served + refused.len(),
        n,
        "every body is served or refused: {:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    assert!(served >= 1, "the budget holds at least one body");
    assert!(!refused.is_empty(), "nothing refused beyond client_memory");
    for b in refused {
        let v: Value = serde_json::from_str(b).unwrap_or_else(|e| panic!("{e}: {b}"));
        assert_eq!(v["error"]["code"], -32002, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("client_memory")),
            "{v}"
        );
    }
    // The bodies alone are 12 x 6 MiB = 72 MiB; the budget is 16 MiB. (A body that passes is
    // copied on its way to the child, id rewritten and era translated: outside the budget,
    // and bounded by the few that pass.)
    assert!(
        grown_kib < 72 * 1024,
        "the supervisor's peak RSS grew by {} MiB",
        grown_kib / 1024
    );
    // And the endpoint serves as before.
    let mut m = call(2, "echo", json!({"text": "after"}));
    m["params"] = modern(m["params"].clone());
    let r = s.post("f", &modern_headers("tools/call", Some("echo")), &m);
    assert_eq!(text(&r.json()), "after");
}

/// Each of the sessions `sids` of server `f` still answers a call (with `text`).
fn assert_sessions_answer(s: &HttpSup, sids: &[&String], text_: &str) {
    for sid in sids {
        let v = s
            .post(
                "f",
                &in_session(sid),
                &call(2, "echo", json!({"text": text_})),
            )
            .json();
        assert_eq!(text(&v), text_, "session {sid}");
    }
}

/// Issue 26 §4: when `http_max_sessions` are open, `initialize` ends the longest-idle session
/// with no open stream instead of being refused; only when every session has a stream open
/// is the newcomer refused.
#[test]
fn http_when_sessions_are_full_the_longest_idle_one_without_a_stream_is_ended() {
    let s = HttpSup::start(&format!(
        "http_max_sessions = 2\n\n{}",
        fake_server("f", &[], "http = true")
    ));
    let a = s.session("f");
    let mut a_stream = get_stream(&s, "f", &a);
    assert_eq!(a_stream.status, 200);
    let b = s.session("f");
    // Full: b (idle, no stream) makes room for c.
    let c = s.session("f");
    let r = s.post("f", &in_session(&b), &call(1, "echo", json!({"text": "b"})));
    assert_eq!(r.status, 404, "the idle session was not the one ended");
    assert_sessions_answer(&s, &[&a, &c], "kept");
    assert!(
        s.sup
            .wait_log("ended the least active one", Duration::from_secs(5)),
        "{}",
        s.sup.log()
    );
    // Every session has a stream open: the newcomer is refused, and nobody is ended.
    let mut c_stream = get_stream(&s, "f", &c);
    assert_eq!(c_stream.status, 200);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    let r = s.post("f", &[], &init);
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], -32002);
    assert_sessions_answer(&s, &[&a, &c], "still");
    assert!(a_stream.event(Duration::from_millis(10)).is_none());
    assert!(c_stream.event(Duration::from_millis(10)).is_none());
}

/// Issue 26 §4: a token holder that keeps a GET stream open on every one of the
/// `http_max_sessions` (4 here) cannot keep another caller out, nor end its session: a caller
/// holding three quarters or more may end only its own idle sessions (none here: refused), and
/// another caller's newcomer ends the token holder's least active session.
#[test]
fn http_one_token_holding_every_session_with_streams_does_not_keep_another_caller_out() {
    let s = HttpSup::start(&format!(
        "http_max_sessions = 4\n\n{}",
        fake_server("f", &[], "http = true")
    ));
    let mut held = Vec::new();
    for _ in 0..4 {
        let sid = s.session("f");
        let stream = get_stream(&s, "f", &sid);
        assert_eq!(stream.status, 200);
        held.push((sid, stream));
    }
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    // The token holder itself gets no fifth.
    assert_eq!(s.post("f", &[], &init).status, 503);
    // Another caller (a uid on the Unix socket) gets in: the token's oldest session ends.
    let accept = ("Accept", "application/json, text/event-stream");
    let r = request(&s.unix("f"), "POST", "/mcp", &[accept], &init.to_string());
    assert_eq!(r.status, 200);
    let usid = r.header("mcp-session-id").unwrap().to_string();
    let r = s.post("f", &in_session(&held[0].0), &call(1, "echo", json!({})));
    assert_eq!(r.status, 404, "the token's least active session was ended");
    let kept: Vec<&String> = held[1..].iter().map(|(sid, _)| sid).collect();
    assert_sessions_answer(&s, &kept, "kept");
    // The token holder cannot end the other caller's idle session to get back in.
    for _ in 0..3 {
        assert_eq!(s.post("f", &[], &init).status, 503);
    }
    let echo = call(3, "echo", json!({"text": "mine"})).to_string();
    let mut h = vec![accept];
    h.extend_from_slice(&in_session(&usid));
    let r = request(&s.unix("f"), "POST", "/mcp", &h, &echo);
    assert_eq!(r.status, 200, "the other caller's session was ended");
    assert!(
        s.sup
            .wait_log("a caller holds its share", Duration::from_secs(5)),
        "{}",
        s.sup.log()
    );
}

/// Issue 26 §5: a session answers only the peer that opened it (the same transport, and the
/// same token on TCP, the same uid on `NAME.http.sock`), and its id is logged at debug only.
#[test]
fn http_a_session_answers_only_the_peer_that_opened_it() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let accept = ("Accept", "application/json, text/event-stream");
    let echo = call(1, "echo", json!({"text": "x"})).to_string();
    // Opened over TCP with the token: unknown on the Unix socket.
    let sid = s.session("f");
    let h = in_session(&sid);
    let over_unix = |verb: &str, sid_h: &[(&str, &str)], body: &str| {
        let mut hh = vec![accept];
        hh.extend_from_slice(sid_h);
        request(&s.unix("f"), verb, "/mcp", &hh, body).status
    };
    assert_eq!(over_unix("POST", &h, &echo), 404);
    assert_eq!(over_unix("GET", &h, ""), 404);
    assert_eq!(over_unix("DELETE", &h, ""), 404);
    // ... and still the TCP client's.
    let v = s
        .post("f", &h, &call(2, "echo", json!({"text": "mine"})))
        .json();
    assert_eq!(text(&v), "mine");
    // Opened over the Unix socket: TCP with the token cannot use it.
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    let r = request(&s.unix("f"), "POST", "/mcp", &[accept], &init.to_string());
    assert_eq!(r.status, 200);
    let usid = r.header("mcp-session-id").unwrap().to_string();
    assert_eq!(
        s.post("f", &in_session(&usid), &call(3, "echo", json!({})))
            .status,
        404
    );
    assert_eq!(over_unix("POST", &in_session(&usid), &echo), 200);
    // The token rotates (its file deleted, then a reload): the session opened with the old
    // token does not answer the new one.
    let old = s.token("f");
    std::fs::remove_file(s.sup.dir.path().join("run/f.http.token")).unwrap();
    let out = std::process::Command::new(SUPERVISOR)
        .args(["reload", "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(s.sup.dir.path().join("run/f.http.token"))
            .is_ok_and(|t| !t.trim().is_empty() && t.trim() != old)
    }));
    assert_eq!(s.post("f", &h, &call(4, "echo", json!({}))).status, 404);
    // Session ids never reach the log above debug.
    let log = s.sup.log();
    for id in [&sid, &usid] {
        let leaked: Vec<&str> = above_debug(&log)
            .into_iter()
            .filter(|l| l.contains(id.as_str()))
            .collect();
        assert!(
            leaked.is_empty(),
            "session id logged above debug: {leaked:?}"
        );
    }
}

/// Issue 26 §6: refused Host and Origin requests are logged at most 20 per 10 s with a count
/// of what was suppressed; failed token attempts are logged the same way, never the token.
#[test]
fn http_refusals_and_failed_tokens_are_logged_rate_limited_and_never_the_token() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let auth = format!("Bearer {}", s.token("f"));
    let accept = ("Accept", "application/json, text/event-stream");
    for i in 0..60 {
        let origin = format!("http://evil{i}.example");
        let r = request(
            &s.tcp(),
            "POST",
            "/mcp/f",
            &[("Authorization", &auth), accept, ("Origin", &origin)],
            "{}",
        );
        assert_eq!(r.status, 403);
        let wrong = format!("Bearer not-the-token-{i:04}");
        let r = request(
            &s.tcp(),
            "POST",
            "/mcp/f",
            &[("Authorization", &wrong), accept],
            "{}",
        );
        assert_eq!(r.status, 401);
    }
    let r = request(&s.tcp(), "POST", "/mcp/f", &[accept], "{}");
    assert_eq!(r.status, 401);
    assert!(
        s.sup.wait_log(
            "HTTP request refused: wrong bearer token",
            Duration::from_secs(5)
        ),
        "a failed token attempt was not logged\n{}",
        s.sup.log()
    );
    let count = |needle: &str| {
        s.sup
            .log()
            .lines()
            .filter(|l| l.contains("HTTP request refused: ") && l.contains(needle))
            .count()
    };
    let (origins, tokens) = (count("Origin not allowed"), count("bearer token"));
    assert!(origins <= 20, "{origins} Origin lines");
    assert!(tokens <= 20, "{tokens} token lines");
    assert!(
        !s.sup.log().contains("not-the-token-"),
        "an attempted token reached the log"
    );
    assert!(
        !s.sup.log().contains(&s.token("f")),
        "the token reached the log"
    );
    // Once the window has passed, the next refusal says how many were suppressed.
    let mut last = Instant::now() - Duration::from_secs(1);
    let told = wait_until(Duration::from_secs(25), || {
        if last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            let r = request(
                &s.tcp(),
                "POST",
                "/mcp/f",
                &[
                    ("Authorization", &auth),
                    accept,
                    ("Origin", "http://late.example"),
                ],
                "{}",
            );
            assert_eq!(r.status, 403);
        }
        s.sup.log().lines().any(|l| {
            l.contains("Origin not allowed")
                && l.contains("suppressed=")
                && !l.contains("suppressed=0")
        })
    });
    assert!(told, "no count of suppressed lines\n{}", s.sup.log());
}

/// Issue 26 §7: a further GET stream on a session is served (the specification allows a
/// stream or 405; 409 is neither), and each message goes on one stream: the newest open.
#[test]
fn http_a_further_get_stream_is_served_and_messages_go_on_the_newest() {
    let s = HttpSup::start(&fake_server("f", &[], "http = true"));
    let sid = s.session("f");
    let mut older = get_stream(&s, "f", &sid);
    assert_eq!(older.status, 200);
    let mut newer = get_stream(&s, "f", &sid);
    assert_eq!(newer.status, 200, "a second GET stream was refused");
    assert_eq!(newer.header("content-type"), Some("text/event-stream"));
    // A handshake child's log messages go to every handshake client: this session has no
    // POST open, so its newest GET stream carries them.
    let mut sock = s.sup.client("f");
    sock.call(json!(1), "log", json!({"data": "first"}));
    let got = newer
        .event(Duration::from_secs(10))
        .expect("on the newest stream");
    assert_eq!(got["method"], "notifications/message", "{got}");
    assert_eq!(got["params"]["data"], "first");
    assert!(
        older.event(Duration::from_millis(500)).is_none(),
        "a message went on two streams"
    );
    // The newest closed: the one still open carries them.
    drop(newer);
    let mut n = 1;
    let reached = wait_until(Duration::from_secs(20), || {
        n += 1;
        sock.call(json!(n), "log", json!({"data": n}));
        older.event(Duration::from_millis(200)).is_some()
    });
    assert!(reached, "the older stream never carried a message");
}

/// Issue 26 §7: a child's question to a handshake-era client whose POST accepts only JSON
/// reaches it on its GET stream; with no stream able to carry it, the child is answered an
/// error at once (its own fallback runs) and the log says why.
#[test]
fn http_a_childs_question_to_a_json_only_client_uses_its_get_stream_or_fails_at_once() {
    let s = HttpSup::start(&fake_server(
        "f",
        &[],
        "http = true\nrequest_timeout = \"120s\"",
    ));
    let auth = format!("Bearer {}", s.token("f"));
    let json_only = |sid: &str, body: &Value| {
        let mut h = in_session(sid).to_vec();
        h.extend([
            ("Accept", "application/json"),
            ("Authorization", auth.as_str()),
        ]);
        request(&s.tcp(), "POST", "/mcp/f", &h, &body.to_string())
    };
    let sid = s.session_with("f", json!({"elicitation": {}}));
    let mut stream = get_stream(&s, "f", &sid);
    assert_eq!(stream.status, 200);
    let answer = std::thread::scope(|sc| {
        let asking =
            sc.spawn(|| json_only(&sid, &call(6, "confirm", json!({"question": "go?"}))).json());
        let asked = stream
            .event(Duration::from_secs(10))
            .expect("the child's question on the GET stream");
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        let reply = json!({"jsonrpc":"2.0","id":asked["id"],"result":{"action":"accept","content":{"ok":true}}});
        assert_eq!(s.post("f", &in_session(&sid), &reply).status, 202);
        asking.join().unwrap()
    });
    assert!(text(&answer).starts_with("confirmed:"), "{answer}");
    // A session with no stream that can carry the question: the child hears an error at once
    // (the fake server's fallback answers `error:...`), long before request_timeout.
    let other = s.session_with("f", json!({"elicitation": {}}));
    let v = json_only(&other, &call(7, "confirm", json!({"question": "go?"}))).json();
    assert!(text(&v).starts_with("error:"), "{v}");
    assert!(
        s.sup
            .wait_log("no stream can carry it", Duration::from_secs(5)),
        "{}",
        s.sup.log()
    );
}

/// A keep-alive HTTP/1.1 connection to a Unix socket as another uid: `socat` run by `setpriv`
/// (the tests run as root), its stdin and stdout the connection.
struct AsUid {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    got: std::sync::mpsc::Receiver<Vec<u8>>,
    buf: Vec<u8>,
}

impl AsUid {
    fn connect(uid: u32, path: &std::path::Path) -> AsUid {
        let mut child = std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "socat",
                "-",
            ])
            .arg(format!("UNIX-CONNECT:{}", path.display()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let (tx, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut b = [0u8; 8192];
            while let Ok(n) = out.read(&mut b) {
                if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        AsUid {
            stdin: child.stdin.take(),
            child,
            got,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, headers: &[(&str, &str)], body: &str) {
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head += &format!("{k}: {v}\r\n");
        }
        head += "\r\n";
        let stdin = self.stdin.as_mut().unwrap();
        let _ = stdin.write_all(head.as_bytes());
        let _ = stdin.write_all(body.as_bytes());
        let _ = stdin.flush();
    }

    /// The next response (one with a `Content-Length`): status, headers, body; `None` when
    /// the connection closes, or nothing complete comes within `timeout`.
    fn response(&mut self, timeout: Duration) -> Option<(u16, String, String)> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if self.buf.len() >= at + 4 + len {
                    let body =
                        String::from_utf8_lossy(&self.buf[at + 4..at + 4 + len]).into_owned();
                    self.buf.drain(..at + 4 + len);
                    let status = head.get(9..12)?.parse().ok()?;
                    return Some((status, head, body));
                }
            }
            let left = end.checked_duration_since(Instant::now())?;
            match self.got.recv_timeout(left) {
                Ok(b) => self.buf.extend(b),
                Err(_) => return None,
            }
        }
    }

    /// Whether the connection was closed (by the supervisor) within `timeout`.
    fn closed_within(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let Some(left) = end.checked_duration_since(Instant::now()) else {
                return false;
            };
            match self.got.recv_timeout(left) {
                Ok(b) => self.buf.extend(b),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return true,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }
}

impl Drop for AsUid {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 26 §5: a reload that takes a uid out of `allowed_uids` closes that uid's HTTP
/// connections on `NAME.http.sock` (kept-alive ones too) and ends its sessions, as it ends its
/// socket sessions; meanwhile, its session answers no other uid.
#[test]
fn http_a_reload_that_revokes_a_uid_closes_its_http_connections_and_sessions() {
    if !needs_root(
        "http_a_reload_that_revokes_a_uid_closes_its_http_connections_and_sessions",
        &["setpriv", "socat"],
    ) {
        return;
    }
    let servers = fake_server("f", &[], "http = true");
    let s = HttpSup::start(&format!(
        "socket_mode = \"0666\"\nallowed_uids = [65534]\n\n{servers}"
    ));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(s.sup.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&s.sup.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = s.sup.dir.path().join("run/f.http.sock");
    let mut nobody = AsUid::connect(65534, &path);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"nobody","version":"1"}}});
    nobody.send(&[], &init.to_string());
    let (status, head, _) = nobody
        .response(Duration::from_secs(10))
        .expect("uid 65534 is allowed");
    assert_eq!(status, 200, "{head}");
    let sid = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .trim()
        .to_string();
    // Its session is its own: root, on the same socket, does not find it.
    let r = request(
        &s.unix("f"),
        "POST",
        "/mcp",
        &[("Accept", "application/json"), ("Mcp-Session-Id", &sid)],
        &call(1, "echo", json!({})).to_string(),
    );
    assert_eq!(r.status, 404, "another uid used the session");
    let mut tools_list =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":modern(json!({}))});
    let modern_h = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    nobody.send(&modern_h, &tools_list.to_string());
    let (status, _, _) = nobody
        .response(Duration::from_secs(10))
        .expect("kept alive");
    assert_eq!(status, 200);
    // The uid is revoked by a reload.
    let cfg = std::fs::read_to_string(&s.sup.config).unwrap();
    std::fs::write(&s.sup.config, cfg.replace("allowed_uids = [65534]\n", "")).unwrap();
    let out = std::process::Command::new(SUPERVISOR)
        .args(["reload", "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tools_list["id"] = json!(3);
    nobody.send(&modern_h, &tools_list.to_string());
    assert!(
        nobody.closed_within(Duration::from_secs(10)),
        "the revoked uid's connection is still served: {:?}",
        String::from_utf8_lossy(&nobody.buf)
    );
    assert!(
        !String::from_utf8_lossy(&nobody.buf).contains("\"tools\""),
        "answered after the revocation"
    );
    assert!(
        s.sup
            .wait_log("no longer allowed after a reload", Duration::from_secs(5)),
        "{}",
        s.sup.log()
    );
    assert!(
        s.sup.wait_log(
            "closed the HTTP connections of uid 65534",
            Duration::from_secs(5)
        ),
        "{}",
        s.sup.log()
    );
}

/// The attacker's side of [`http_users_sharing_one_token_are_each_held_to_their_own_share`]:
/// opens `N` sessions on `HOST:PORT` with `TOKEN`, keeps a GET stream open on each, says
/// `ready`, and holds them until its stdin closes.
const HOLD_SESSIONS: &str = r#"
import http.client, json, sys
host, port, token, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hold", "version": "1"}}})
auth = {"Authorization": "Bearer " + token}
streams = []
for _ in range(n):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("POST", "/mcp/f", init, {**auth, "Content-Type": "application/json",
              "Accept": "application/json, text/event-stream"})
    r = c.getresponse()
    sid = r.getheader("mcp-session-id")
    r.read()
    c.request("POST", "/mcp/f", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
              {**auth, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"})
    c.getresponse().read()
    g = http.client.HTTPConnection(host, port, timeout=30)
    g.request("GET", "/mcp/f", headers={**auth, "Accept": "text/event-stream", "Mcp-Session-Id": sid,
              "MCP-Protocol-Version": "2025-06-18"})
    gr = g.getresponse()
    assert gr.status == 200, gr.status
    streams.append((c, g, gr))
print("ready", flush=True)
sys.stdin.read()
"#;

/// Issue 47 §4: on loopback TCP, users who share one bearer token are each held to their own
/// share of `http_max_sessions`: the kernel's uid for the connection tells them apart. Uid
/// 65534, with the server's token, keeps a GET stream open on every one of the 4 sessions;
/// root, with the same token, still opens one (ending 65534's least active), and 65534 cannot
/// take it back.
#[test]
fn http_users_sharing_one_token_are_each_held_to_their_own_share() {
    use std::process::{Command, Stdio};
    if !needs_root(
        "http_users_sharing_one_token_are_each_held_to_their_own_share",
        &["setpriv"],
    ) {
        return;
    }
    let s = HttpSup::start(&format!(
        "http_max_sessions = 4\n\n{}",
        fake_server("f", &[], "http = true")
    ));
    let (host, port) = s.addr.rsplit_once(':').unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hold.py");
    std::fs::write(&script, HOLD_SESSIONS).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a system python3");
    let mut holder = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", python])
        .arg(&script)
        .args([host, port, &s.token("f"), "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the holder failed\n{}", s.sup.log());
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    let r = s.post("f", &[], &init);
    assert_eq!(
        r.status,
        200,
        "root was kept out by uid 65534 holding the same token's sessions\n{}",
        s.sup.log()
    );
    let sid = r.header("mcp-session-id").unwrap().to_string();
    let v = s
        .post(
            "f",
            &in_session(&sid),
            &call(1, "echo", json!({"text": "mine"})),
        )
        .json();
    assert_eq!(text(&v), "mine");
    let _ = holder.stdin.take().unwrap().write_all(b"");
    let _ = holder.kill();
    let _ = holder.wait();
}
