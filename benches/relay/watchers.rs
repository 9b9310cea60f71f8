//! The live view's cost (issue 33): the daemon's CPU with no watcher and with ten, and how
//! long a change takes to reach a watcher.
//!
//! One `mcp-supervisor run` with ten fake servers and a paced load of about 100 `echo` calls
//! per second on `s0` (so each server's traffic summary moves). *CPU*: the daemon's CPU time
//! over windows of [`WINDOW`], alternating no watcher and ten watchers (each a connection to
//! `control.sock` that sent `watch` and reads every line as fast as it comes, as `top` does),
//! as a percentage of one core. *Update latency*: one watcher; the child of `s1` is killed
//! with SIGKILL and the time until a line shows the crash is taken; five
//! times (the first line that shows the crash: `s1` not ready, another pid, or one more
//! restart; the restart itself waits for the backoff, which grows with each kill).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use crate::client::Conn;
use crate::procs::{cpu_of, phase, Proc};
use crate::results::Results;
use crate::rig::Rig;

/// One measurement window.
const WINDOW: Duration = Duration::from_secs(5);
/// Windows per case (alternating).
const ROUNDS: usize = 3;
/// Watchers in the loaded case.
pub const WATCHERS: usize = 10;
/// Kills timed for the update latency.
const KILLS: usize = 5;

/// What the live view's row measured.
pub struct WatchResult {
    /// The daemon's CPU, % of one core: no watcher, ten watchers.
    pub cpu_percent: (f64, f64),
    /// Requests per second of the load during the windows.
    pub load_rps: f64,
    /// Update latency after a crash, ms: median, max, samples.
    pub update_ms: (f64, f64, usize),
}

/// A watcher: the connection, reading its lines.
struct Watcher(BufReader<UnixStream>);

impl Watcher {
    fn open(control: &Path) -> Result<Watcher, String> {
        let mut s = UnixStream::connect(control).map_err(|e| format!("watch: {e}"))?;
        s.write_all(b"{\"v\":1,\"verb\":\"watch\"}\n")
            .map_err(|e| format!("watch: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .map_err(|e| format!("watch: {e}"))?;
        Ok(Watcher(BufReader::new(s)))
    }

    /// The next line's `watch` member.
    fn next(&mut self) -> Result<serde_json::Value, String> {
        let mut line = String::new();
        match self.0.read_line(&mut line) {
            Ok(0) => Err("watch: the stream ended".into()),
            Ok(_) => {
                let v: serde_json::Value =
                    serde_json::from_str(&line).map_err(|e| format!("watch: {e}: {line}"))?;
                v.get("watch")
                    .cloned()
                    .ok_or_else(|| format!("watch: refused: {line}"))
            }
            Err(e) => Err(format!("watch: {e}")),
        }
    }

    /// Reads every line on a thread of its own until the stream ends (a fast viewer); the
    /// returned handle ends it ([`UnixStream::shutdown`]).
    fn drain(mut self) -> Option<UnixStream> {
        let handle = self.0.get_ref().try_clone().ok();
        let _ = self.0.get_ref().set_read_timeout(None);
        std::thread::spawn(move || while self.next().is_ok() {});
        handle
    }
}

/// `s1` in a watch line, if it is there.
fn server<'a>(w: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    w.get("servers")?
        .as_array()?
        .iter()
        .find(|s| s.get("name").and_then(|n| n.as_str()) == Some(name))
}

fn open(rig: &Rig, servers: usize) -> (Proc, PathBuf, Vec<PathBuf>) {
    let (config, socks) = rig.config("watch", servers, false);
    let sup = rig.supervisor(&config, "watch");
    rig.await_ready("watch", sup.pid(), &socks)
        .unwrap_or_else(|e| panic!("watchers: {e}"));
    let control = socks
        .first()
        .and_then(|s| s.parent())
        .map(|d| d.join("control.sock"))
        .expect("a socket dir");
    (sup, control, socks)
}

/// `cargo test --benches`: ten watchers each get a snapshot of both servers.
pub fn smoke(rig: &Rig) {
    let (_sup, control, _) = open(rig, 2);
    for _ in 0..WATCHERS {
        let mut w = Watcher::open(&control).unwrap_or_else(|e| panic!("{e}"));
        let first = w.next().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first["kind"], "snapshot", "{first}");
        assert!(server(&first, "s1").is_some(), "{first}");
    }
}

/// Paced `echo` calls on `conn` for `window`: (calls made).
fn load(conn: &mut Conn, window: Duration) -> usize {
    let mut buf = Vec::new();
    let until = Instant::now() + window;
    let mut n = 0;
    while Instant::now() < until {
        conn.echo(&mut buf)
            .unwrap_or_else(|e| panic!("watchers load: {e}"));
        n += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    n
}

pub fn measure_watchers(rig: &Rig, res: &mut Results) {
    phase(
        "live view: the daemon's CPU with 0 and 10 watchers, update latency",
        Duration::from_secs(120),
    );
    let (sup, control, socks) = open(rig, 10);
    let pids = [sup.pid()];
    let mut conn = Conn::socket(&socks[0]).unwrap_or_else(|e| panic!("watchers: {e}"));
    conn.handshake().unwrap_or_else(|e| panic!("watchers: {e}"));
    let mut cpu = [0f64; 2];
    let mut wall = [0f64; 2];
    let mut calls = 0usize;
    for _ in 0..ROUNDS {
        for watching in [false, true] {
            let mut watchers = Vec::new();
            if watching {
                for _ in 0..WATCHERS {
                    let mut w = Watcher::open(&control).unwrap_or_else(|e| panic!("{e}"));
                    w.next().unwrap_or_else(|e| panic!("{e}"));
                    watchers.extend(w.drain());
                }
            }
            let i = usize::from(watching);
            let (c0, t0) = (cpu_of(&pids), Instant::now());
            calls += load(&mut conn, WINDOW);
            cpu[i] += cpu_of(&pids) - c0;
            wall[i] += t0.elapsed().as_secs_f64();
            for w in watchers {
                let _ = w.shutdown(std::net::Shutdown::Both);
            }
        }
    }
    // Update latency: one watcher, s1's child killed.
    let mut w = Watcher::open(&control).unwrap_or_else(|e| panic!("{e}"));
    let mut last = w.next().unwrap_or_else(|e| panic!("{e}"));
    let mut samples = Vec::new();
    for _ in 0..KILLS {
        let s1 = server(&last, "s1").cloned().unwrap_or_default();
        let restarts = s1["restarts"].as_u64().unwrap_or(0);
        let Some(pid) = s1["pid"].as_i64().filter(|p| *p > 0) else {
            break;
        };
        // A rest past the coalescing window (100 ms) that followed the last line, so what is
        // timed is the detection and the line, not the coalescing (which adds up to 100 ms).
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        loop {
            let l = w.next().unwrap_or_else(|e| panic!("{e}"));
            // The crash shows: not ready, another pid, or one more restart.
            if let Some(s) = server(&l, "s1") {
                if s["state"] != "ready"
                    || s["pid"].as_i64() != Some(pid)
                    || s["restarts"].as_u64().unwrap_or(0) > restarts
                {
                    samples.push(t0.elapsed().as_secs_f64() * 1e3);
                    break;
                }
            }
        }
        // Until s1 runs again, with a pid.
        loop {
            let l = w.next().unwrap_or_else(|e| panic!("{e}"));
            if server(&l, "s1").is_some_and(|s| s["state"] == "ready" && s["pid"].is_number()) {
                last = serde_json::json!({"servers": [server(&l, "s1")]});
                break;
            }
        }
    }
    samples.sort_by(f64::total_cmp);
    let median = samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN);
    let max = samples.last().copied().unwrap_or(f64::NAN);
    let pct = |i: usize| cpu[i] / wall[i].max(1e-9) * 100.0;
    res.watch = Some(WatchResult {
        cpu_percent: (pct(0), pct(1)),
        load_rps: calls as f64 / (wall[0] + wall[1]).max(1e-9),
        update_ms: (median, max, samples.len()),
    });
}
