//! The benchmark's MCP client: one connection over a socket or a child's pipes, and the
//! three loads (sequential round trips, pipelined calls, paced round trips).
//!
//! Every operation returns `Result<_, String>`: a failure of the supervisor, socat or a direct
//! server panics in the caller (the benchmark is broken), one of rmcp-mux is recorded as the
//! reason its column is empty (see `measure::Live`).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use crate::procs::{contains, Proc};

/// How long a client waits for a line before giving up (a stuck relay fails its column
/// instead of hanging the run). 60 s: the daemon's spawn budget (R11: a burst of 8, then 4
/// spawns/s) starts the idle phase's 100 servers over about 23 s, and a client's `initialize`
/// waits for its server.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Way {
    Direct,
    Socat,
    Supervisor,
    Attach,
    RmcpMux,
}

pub const ALL_WAYS: [Way; 5] = [
    Way::Direct,
    Way::Socat,
    Way::Supervisor,
    Way::Attach,
    Way::RmcpMux,
];

impl Way {
    pub fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Socat => "socat",
            Way::Supervisor => "supervisor",
            Way::Attach => "attach",
            Way::RmcpMux => "rmcp-mux",
        }
    }

    pub fn idx(self) -> usize {
        self as usize
    }
}

/// The order of `ways` in round `r` (rotated, so no way is always first).
pub fn rotation(ways: &[Way], r: usize) -> Vec<Way> {
    (0..ways.len())
        .map(|i| ways[(i + r) % ways.len()])
        .collect()
}

/// One MCP client connection over a socket or a child's pipes.
pub struct Conn {
    r: BufReader<Box<dyn Read + Send>>,
    w: Box<dyn Write + Send>,
    /// The process behind the pipes (direct server, attach bridge), stopped on drop.
    pub proc: Option<Proc>,
    pub next_id: u64,
    /// Lines [`Conn::response`] skipped (notifications, requests) so far.
    pub skipped: u64,
    /// Put before the `echo` tool's name (`bench__` through an endpoint, issue 31).
    pub prefix: &'static str,
}

#[derive(PartialEq, Eq, Debug, Clone, Copy)]
pub enum Reply {
    Result,
    Error,
    Other,
}

pub const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":\"init\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"relay-bench\",\"version\":\"1\"}}}\n";
pub const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

impl Conn {
    pub fn socket(path: &Path) -> Result<Conn, String> {
        let s = UnixStream::connect(path)
            .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
        s.set_read_timeout(Some(READ_TIMEOUT)).ok();
        let r = s.try_clone().map_err(|e| format!("clone a socket: {e}"))?;
        Ok(Conn {
            r: BufReader::with_capacity(64 * 1024, Box::new(r)),
            w: Box::new(s),
            proc: None,
            next_id: 1,
            skipped: 0,
            prefix: "",
        })
    }

    pub fn pipes(mut cmd: Command) -> Conn {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut p = Proc::spawn(&mut cmd, None);
        let w = p.child.stdin.take().expect("piped stdin");
        let r = p.child.stdout.take().expect("piped stdout");
        Conn {
            r: BufReader::with_capacity(64 * 1024, Box::new(r)),
            w: Box::new(w),
            proc: Some(p),
            next_id: 1,
            skipped: 0,
            prefix: "",
        }
    }

    pub fn send(&mut self, line: &[u8]) -> Result<(), String> {
        self.w
            .write_all(line)
            .map_err(|e| format!("write a request: {e}"))
    }

    /// Reads one line into `buf` (cleared first).
    pub fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Reply, String> {
        buf.clear();
        match self.r.read_until(b'\n', buf) {
            Ok(0) => Err("the connection closed".into()),
            Ok(_) => Ok(classify(buf)),
            Err(e) => Err(format!("read failed: {e}")),
        }
    }

    /// Reads until a response (skips notifications and requests).
    pub fn response(&mut self, buf: &mut Vec<u8>) -> Result<Reply, String> {
        loop {
            match self.recv(buf)? {
                Reply::Other => self.skipped += 1,
                r => return Ok(r),
            }
        }
    }

    /// `initialize`, its answer, `notifications/initialized`.
    pub fn handshake(&mut self) -> Result<(), String> {
        self.send(INITIALIZE)?;
        let mut buf = Vec::new();
        match self.response(&mut buf)? {
            Reply::Result => self.send(INITIALIZED),
            _ => Err(format!("initialize failed: {}", head(&buf))),
        }
    }

    pub fn echo_line(&mut self) -> Vec<u8> {
        let id = self.next_id;
        self.next_id += 1;
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{}echo\",\"arguments\":{{\"text\":\"hello\"}}}}}}\n",
            self.prefix
        )
        .into_bytes()
    }

    /// One sequential round trip.
    pub fn echo(&mut self, buf: &mut Vec<u8>) -> Result<Duration, String> {
        let line = self.echo_line();
        let t = Instant::now();
        self.send(&line)?;
        let r = self.response(buf)?;
        let d = t.elapsed();
        match r {
            Reply::Result => Ok(d),
            _ => Err(format!("echo failed: {}", head(buf))),
        }
    }

    /// Asks for a `bytes`-byte `big` result; returns the seconds from request to the last byte.
    pub fn big(&mut self, bytes: usize, buf: &mut Vec<u8>) -> Result<f64, String> {
        let id = self.next_id;
        self.next_id += 1;
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"big\",\"arguments\":{{\"bytes\":{bytes}}}}}}}\n"
        );
        let t = Instant::now();
        self.send(line.as_bytes())?;
        let r = self.response(buf)?;
        let secs = t.elapsed().as_secs_f64();
        if r == Reply::Result && buf.len() > bytes {
            Ok(secs)
        } else {
            Err(format!(
                "big {bytes} failed: {} bytes: {}",
                buf.len(),
                head(buf)
            ))
        }
    }
}

/// The first 300 bytes of a line, for messages.
pub fn head(buf: &[u8]) -> String {
    String::from_utf8_lossy(&buf[..buf.len().min(300)])
        .trim_end()
        .to_string()
}

/// Response or not, judged from the head of the line (a 64 MiB line is never scanned whole).
/// The fake server (sorted keys), the supervisor and rmcp-mux (serde_json, sorted keys) all
/// put `result`/`error` in the first bytes.
pub fn classify(line: &[u8]) -> Reply {
    let head = &line[..line.len().min(96)];
    if contains(head, b"\"result\"") {
        Reply::Result
    } else if contains(head, b"\"error\"") {
        Reply::Error
    } else {
        Reply::Other
    }
}

/// Outstanding requests per client: the total stays under the supervisor's default
/// `max_inflight` (256), beyond which it would answer -32003 instead of forwarding.
pub fn window(clients: usize) -> usize {
    (200 / clients).clamp(2, 32)
}

fn thread_builder() -> std::thread::Builder {
    std::thread::Builder::new().stack_size(256 * 1024)
}

/// Runs every connection pipelined with `window` calls outstanding for `dur`; returns
/// (messages/s, answers, error responses).
pub fn pipelined(
    conns: &mut [Conn],
    window: usize,
    dur: Duration,
) -> Result<(f64, u64, u64), String> {
    let barrier = Barrier::new(conns.len() + 1);
    let start_ns = AtomicU64::new(u64::MAX);
    let base = Instant::now();
    type Outcome = Result<(u64, u64, Duration), String>;
    let outcome: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .map(|c| {
                let barrier = &barrier;
                let start_ns = &start_ns;
                thread_builder()
                    .spawn_scoped(s, move || -> Outcome {
                        let lines: Vec<Vec<u8>> = (0..window).map(|_| c.echo_line()).collect();
                        let mut buf = Vec::with_capacity(256);
                        barrier.wait();
                        let t0 = Instant::now();
                        start_ns.fetch_min(
                            t0.duration_since(base).as_nanos() as u64,
                            Ordering::Relaxed,
                        );
                        let deadline = t0 + dur;
                        for l in &lines {
                            c.send(l)?;
                        }
                        let (mut out, mut ok, mut err) = (window, 0u64, 0u64);
                        let mut last = t0;
                        while out > 0 {
                            match c.recv(&mut buf)? {
                                Reply::Result => ok += 1,
                                Reply::Error => err += 1,
                                Reply::Other => continue,
                            }
                            out -= 1;
                            last = Instant::now();
                            if last < deadline {
                                let l = c.echo_line();
                                c.send(&l)?;
                                out += 1;
                            }
                        }
                        Ok((ok, err, last.duration_since(base)))
                    })
                    .expect("spawn a client thread")
            })
            .collect();
        barrier.wait();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let outcome: Vec<(u64, u64, Duration)> = outcome.into_iter().collect::<Result<_, _>>()?;
    let ok: u64 = outcome.iter().map(|o| o.0).sum();
    let err: u64 = outcome.iter().map(|o| o.1).sum();
    let end = outcome.iter().map(|o| o.2).max().unwrap_or_default();
    let start = Duration::from_nanos(start_ns.load(Ordering::Relaxed));
    Ok((ok as f64 / (end - start).as_secs_f64(), ok, err))
}

/// What [`paced`] measured.
#[derive(Default)]
pub struct Paced {
    /// Round-trip times of the answered calls.
    pub lat: Vec<Duration>,
    pub ok: u64,
    pub err: u64,
}

/// Paced round trips: `conns` together send `rate` calls per second for `dur`, each client
/// one call every `conns.len() / rate` seconds (staggered evenly), waiting for its answer
/// before the next; a client whose answer comes after its next slot sends at once (no
/// catch-up burst), so a relay that cannot keep up shows as fewer answers.
pub fn paced(conns: &mut [Conn], rate: f64, dur: Duration) -> Result<Paced, String> {
    let n = conns.len();
    let period = Duration::from_secs_f64(n as f64 / rate);
    let barrier = Barrier::new(n + 1);
    let start: OnceLock<Instant> = OnceLock::new();
    let outcome: Vec<Result<Paced, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let barrier = &barrier;
                let start = &start;
                thread_builder()
                    .spawn_scoped(s, move || -> Result<Paced, String> {
                        let mut buf = Vec::with_capacity(256);
                        let mut out = Paced::default();
                        barrier.wait();
                        let t0 = *start.get().expect("start time set before the barrier");
                        let end = t0 + dur;
                        let mut next = t0 + Duration::from_secs_f64(i as f64 / rate);
                        while next < end {
                            let now = Instant::now();
                            if next > now {
                                // Pacing the load, not waiting for an event.
                                std::thread::sleep(next - now);
                            }
                            let line = c.echo_line();
                            let t = Instant::now();
                            c.send(&line)?;
                            match c.response(&mut buf)? {
                                Reply::Result => out.ok += 1,
                                _ => out.err += 1,
                            }
                            out.lat.push(t.elapsed());
                            next = (next + period).max(Instant::now());
                        }
                        Ok(out)
                    })
                    .expect("spawn a client thread")
            })
            .collect();
        start
            .set(Instant::now() + Duration::from_millis(2))
            .expect("set once");
        barrier.wait();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let mut total = Paced::default();
    for o in outcome {
        let o = o?;
        total.lat.extend(o.lat);
        total.ok += o.ok;
        total.err += o.err;
    }
    Ok(total)
}
