//! The remote row (issue 29 §6): a url server, the supervisor relaying to an MCP server over
//! Streamable HTTP on loopback, against an HTTP client talking to that server directly.
//!
//! The HTTP upstream is an `mcp-supervisor run` (the *upstream daemon*) serving its one fake
//! server with `http = true` on `http_listen = "127.0.0.1:0"` (the bound address from
//! `<socket_dir>/http.addr`, the bearer token from `<socket_dir>/bench.http.token`). The relay
//! under test is a second `mcp-supervisor run` whose server `bench` is a url server pointing at
//! `http://ADDR/mcp/bench` with that token in `headers`.
//!
//! - **direct**: the benchmark's own HTTP client (reqwest, as the relay uses) does the MCP
//!   session against the upstream daemon: POST `initialize` (`Accept: application/json,
//!   text/event-stream`, as the relay sends), keeps `Mcp-Session-Id`, POSTs
//!   `notifications/initialized`, then one POST per `echo` call, each read to its end;
//! - **through**: the same `echo` calls over the relay's `<socket_dir>/bench.sock`.
//!
//! The upstream daemon is the same for both, so the difference is what the supervisor adds:
//! one more socket hop and its relay, plus its own HTTP client's hop. Both daemons run with the
//! proxy variables removed from their environment (a proxy would be a third hop).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{classify, head, Conn, Reply};
use crate::measure::{LAT_PER_ROUND, LAT_ROUNDS};
use crate::procs::{cpu_of, phase, Proc};
use crate::results::{percentile, Results};
use crate::rig::{Rig, FAKE};

/// The server's name in both daemons.
const NAME: &str = "bench";

/// What the remote row measured.
pub struct RemoteResult {
    /// p50, p99 (µs) and samples of the direct HTTP client.
    pub direct: (f64, f64, usize),
    /// The same through the relay's socket.
    pub through: (f64, f64, usize),
    /// CPU time of the relay daemon per call in the through rounds, µs.
    pub relay_cpu_us: f64,
    /// CPU time of the upstream daemon per call, direct and through, µs (should be alike).
    pub upstream_cpu_us: (f64, f64),
}

/// The two daemons, and how to reach them.
pub struct Remote<'a> {
    rig: &'a Rig,
    pub upstream: Proc,
    pub relay: Proc,
    /// `http://ADDR/mcp/bench` of the upstream daemon.
    pub url: String,
    token: String,
    pub relay_sock: PathBuf,
}

/// Waits (bounded) for a file the daemon `pid` writes at start; returns its trimmed text.
fn read_when_written(
    path: &Path,
    pid: i32,
    fail: &dyn Fn(String) -> String,
) -> Result<String, String> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(t) = std::fs::read_to_string(path) {
            if !t.trim().is_empty() {
                return Ok(t.trim().to_string());
            }
        }
        if !crate::rig::alive(pid) || Instant::now() > until {
            return Err(fail(format!("{} was not written", path.display())));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl<'a> Remote<'a> {
    /// Starts the upstream daemon, then the relay, and waits until both answer a handshake
    /// (the relay's once its HTTP session with the upstream is up).
    pub fn start(rig: &'a Rig) -> Result<Remote<'a>, String> {
        let up_dir = rig.dir.join("remote-up-sock");
        let up_config = rig.dir.join("remote-up.toml");
        let text = format!(
            "[supervisor]\nsocket_dir = \"{}\"\nhttp_listen = \"127.0.0.1:0\"\n\n[servers.{NAME}]\ncommand = \"{FAKE}\"\nargs = [\"--pidfile\", \"{}\"]\nhttp = true\n",
            up_dir.display(),
            rig.pidfile().display()
        );
        std::fs::write(&up_config, text).map_err(|e| format!("write the config: {e}"))?;
        let upstream = rig.supervisor(&up_config, "remote-up");
        rig.await_ready(
            "remote-up",
            upstream.pid(),
            &[up_dir.join(format!("{NAME}.sock"))],
        )?;
        let fail = rig.failure("remote-up", upstream.pid());
        let addr = read_when_written(&up_dir.join("http.addr"), upstream.pid(), &fail)?;
        let token = read_when_written(
            &up_dir.join(format!("{NAME}.http.token")),
            upstream.pid(),
            &fail,
        )?;
        let url = format!("http://{addr}/mcp/{NAME}");

        let relay_dir = rig.dir.join("remote-relay-sock");
        let relay_config = rig.dir.join("remote-relay.toml");
        let text = format!(
            "[supervisor]\nsocket_dir = \"{}\"\n\n[servers.{NAME}]\nurl = \"{url}\"\nheaders = {{ Authorization = \"Bearer {token}\" }}\n",
            relay_dir.display()
        );
        std::fs::write(&relay_config, text).map_err(|e| format!("write the config: {e}"))?;
        let relay = rig.supervisor(&relay_config, "remote-relay");
        let relay_sock = relay_dir.join(format!("{NAME}.sock"));
        rig.await_ready(
            "remote-relay",
            relay.pid(),
            std::slice::from_ref(&relay_sock),
        )?;
        Ok(Remote {
            rig,
            upstream,
            relay,
            url,
            token,
            relay_sock,
        })
    }

    /// A client of the relay's socket that has done the handshake.
    pub fn through(&self) -> Result<Conn, String> {
        let fail = self.rig.failure("remote-relay", self.relay.pid());
        let mut c = Conn::socket(&self.relay_sock).map_err(&fail)?;
        c.handshake().map_err(&fail)?;
        Ok(c)
    }

    /// An HTTP session with the upstream daemon.
    pub fn direct(&self) -> Result<HttpConn, String> {
        let fail = self.rig.failure("remote-up", self.upstream.pid());
        HttpConn::open(&self.url, &self.token).map_err(&fail)
    }
}

/// The benchmark's MCP session over Streamable HTTP (one POST per message, answers read to
/// the end of their body, JSON or SSE).
pub struct HttpConn {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    url: String,
    auth: String,
    session: String,
    version: String,
    next_id: u64,
}

impl HttpConn {
    pub fn open(url: &str, token: &str) -> Result<HttpConn, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a tokio runtime: {e}"))?;
        // Plain HTTP only; reqwest is built without a default TLS provider, so it gets one.
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let mut c = HttpConn {
            rt,
            client,
            url: url.to_string(),
            auth: format!("Bearer {token}"),
            session: String::new(),
            version: String::new(),
            next_id: 1,
        };
        let (status, headers, body) = c.post(crate::client::INITIALIZE)?;
        let answer = answer_of(&body);
        if !status.is_success() || classify(answer) != Reply::Result {
            return Err(format!("initialize: HTTP {status}: {}", head(&body)));
        }
        c.session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or("initialize: no Mcp-Session-Id in the answer")?
            .to_string();
        let v: serde_json::Value =
            serde_json::from_slice(answer).map_err(|e| format!("initialize answer: {e}"))?;
        c.version = v["result"]["protocolVersion"]
            .as_str()
            .unwrap_or("2025-11-25")
            .to_string();
        let (status, _, body) = c.post(crate::client::INITIALIZED)?;
        if !status.is_success() {
            return Err(format!("initialized: HTTP {status}: {}", head(&body)));
        }
        Ok(c)
    }

    /// One POST of `line`; its status, headers and whole body.
    fn post(
        &mut self,
        line: &[u8],
    ) -> Result<
        (
            reqwest::StatusCode,
            reqwest::header::HeaderMap,
            bytes::Bytes,
        ),
        String,
    > {
        let mut req = self
            .client
            .post(&self.url)
            .header("authorization", &self.auth)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if !self.session.is_empty() {
            req = req
                .header("mcp-session-id", &self.session)
                .header("mcp-protocol-version", &self.version);
        }
        let req = req.body(line.to_vec());
        self.rt.block_on(async move {
            let resp = req.send().await.map_err(|e| format!("POST: {e}"))?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp
                .bytes()
                .await
                .map_err(|e| format!("read the body: {e}"))?;
            Ok((status, headers, body))
        })
    }

    /// One sequential round trip: the same `echo` call as [`Conn::echo`].
    pub fn echo(&mut self) -> Result<Duration, String> {
        let id = self.next_id;
        self.next_id += 1;
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"hello\"}}}}}}\n"
        );
        let t = Instant::now();
        let (status, _, body) = self.post(line.as_bytes())?;
        let d = t.elapsed();
        match (status.is_success(), classify(answer_of(&body))) {
            (true, Reply::Result) => Ok(d),
            _ => Err(format!("echo: HTTP {status}: {}", head(&body))),
        }
    }
}

/// The JSON-RPC answer in a body: the body itself (JSON), or the `data:` of the SSE event
/// that is a response.
fn answer_of(body: &[u8]) -> &[u8] {
    if body.trim_ascii_start().starts_with(b"{") {
        return body;
    }
    body.split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"))
        .map(|d| d.trim_ascii())
        .find(|d| classify(d) != Reply::Other)
        .unwrap_or(b"")
}

/// Both daemons started, and a session each way: direct to the upstream, through the relay.
fn open(rig: &Rig) -> (Remote<'_>, HttpConn, Conn) {
    let remote = Remote::start(rig).unwrap_or_else(|e| panic!("remote: {e}"));
    let direct = remote
        .direct()
        .unwrap_or_else(|e| panic!("remote direct: {e}"));
    let through = remote
        .through()
        .unwrap_or_else(|e| panic!("remote through: {e}"));
    (remote, direct, through)
}

/// `cargo test --benches`: a few calls each way.
pub fn smoke(rig: &Rig) {
    let (_remote, mut direct, mut through) = open(rig);
    let mut buf = Vec::new();
    for _ in 0..3 {
        direct
            .echo()
            .unwrap_or_else(|e| panic!("remote direct: {e}"));
        through
            .echo(&mut buf)
            .unwrap_or_else(|e| panic!("remote through: {e}"));
    }
}

/// Sequential `echo` round trips, direct and through the relay in alternating rounds (the
/// order swaps every round), with the daemons' CPU time around every round.
pub fn measure_remote(rig: &Rig, res: &mut Results) {
    phase(
        "remote: round trips to an HTTP upstream, direct and through the supervisor",
        Duration::from_secs(90),
    );
    let (remote, mut direct, mut through) = open(rig);
    let mut buf = Vec::new();
    for _ in 0..200 {
        direct
            .echo()
            .unwrap_or_else(|e| panic!("remote direct (warm-up): {e}"));
        through
            .echo(&mut buf)
            .unwrap_or_else(|e| panic!("remote through (warm-up): {e}"));
    }
    let (up, relay) = ([remote.upstream.pid()], [remote.relay.pid()]);
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    // [direct, through]: upstream CPU; through only: relay CPU.
    let mut up_cpu = [0f64; 2];
    let mut relay_cpu = 0f64;
    for r in 0..LAT_ROUNDS {
        for which in [r % 2, 1 - r % 2] {
            let until = Instant::now() + Duration::from_secs(2);
            let (u0, r0) = (cpu_of(&up), cpu_of(&relay));
            for _ in 0..LAT_PER_ROUND {
                if Instant::now() > until {
                    break;
                }
                let d = if which == 0 {
                    direct.echo()
                } else {
                    through.echo(&mut buf)
                };
                samples[which].push(d.unwrap_or_else(|e| panic!("remote: {e}")));
            }
            up_cpu[which] += cpu_of(&up) - u0;
            if which == 1 {
                relay_cpu += cpu_of(&relay) - r0;
            }
        }
    }
    let per = |cpu: f64, n: usize| cpu / n.max(1) as f64 * 1e6;
    let stats = |s: &mut Vec<Duration>| {
        s.sort();
        (percentile(s, 0.50), percentile(s, 0.99), s.len())
    };
    let (nd, nt) = (samples[0].len(), samples[1].len());
    res.remote = Some(RemoteResult {
        direct: stats(&mut samples[0]),
        through: stats(&mut samples[1]),
        relay_cpu_us: per(relay_cpu, nt),
        upstream_cpu_us: (per(up_cpu[0], nd), per(up_cpu[1], nt)),
    });
}
