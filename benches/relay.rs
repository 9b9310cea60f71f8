//! `cargo bench --bench relay`: the whole-process relay benchmark (issue 9).
//!
//! Four ways for a client to reach one stdio MCP server (`mcp-fake-server`), compared side by
//! side in one run, every process on this machine, every byte over pipes and Unix sockets:
//!
//! - **direct**: the benchmark spawns the server and talks over its stdin/stdout pipes;
//! - **socat**: `socat UNIX-LISTEN:S,fork,backlog=128 EXEC:server,pipes`, a plain byte relay
//!   (with `fork`, every connection gets its own socat process and its own server);
//! - **supervisor**: `mcp-supervisor run`, the client on `<socket_dir>/bench.sock`;
//! - **attach**: the client talks to `mcp-supervisor attach bench` over its stdin/stdout.
//!
//! Measurements (exact definitions in `docs/PERFORMANCE.md`): sequential `echo` round trip
//! (p50, p99); pipelined `echo` throughput with 1, 10 and 100 clients; `big` results of 1, 16
//! and 64 MiB (MB/s and the relay's peak RSS); the idle footprint with 10 servers and 100
//! clients; the time from start to all 10 sockets accepting and to all 10 servers answering.
//! Paths are measured in interleaved rounds, so machine noise hits them alike; only ratios
//! between paths of one run mean anything.
//!
//! The results replace the generated part of `docs/PERFORMANCE.md` (between the
//! `relay-bench:begin`/`end` markers). `cargo bench` passes `--bench`; without it (`cargo test
//! --benches`, `--all-targets`) the binary only checks in a few seconds that every path works.
//! Arguments (after `--`):
//!
//! - `--out PATH`: write the report there instead; `--no-write`: print it only;
//! - `--profile`: instead of the benchmark, record `perf` profiles of the supervisor under the
//!   small-message and 64 MiB loads into `target/relay-profile/` and print the top symbols.
//!
//! Every process the benchmark starts leads its own process group and is killed (group-wide)
//! when it is dropped, on panic, on SIGINT/SIGTERM/SIGHUP, and by a watchdog when a phase
//! overruns its time budget. Every server writes its pid to a pidfile, which is swept at the end.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

const SUPERVISOR: &str = env!("CARGO_BIN_EXE_mcp-supervisor");
const FAKE: &str = env!("CARGO_BIN_EXE_mcp-fake-server");
const MIB: usize = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Process bookkeeping: everything we start is killed, whatever happens
// ---------------------------------------------------------------------------------------------

/// Process groups we started and have not reaped yet.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Every `mcp-fake-server` (ours, socat's, the supervisor's) appends its pid here.
static PIDFILE: OnceLock<PathBuf> = OnceLock::new();
/// The temporary directory (configs, sockets, logs), removed by [`abort_run`] too.
static TMP: OnceLock<PathBuf> = OnceLock::new();
/// Set by [`abort_run`]: client threads that now see their connections die stay quiet.
static ABORTING: AtomicBool = AtomicBool::new(false);
/// Watchdog: the current phase and its deadline (ms since `EPOCH`).
static PHASE: Mutex<(&str, u64)> = Mutex::new(("start", u64::MAX));
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// Whole-run limit (the benchmark normally takes about a minute and a half).
const TOTAL_LIMIT: Duration = Duration::from_secs(420);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// SIGKILLs every group we started and every fake server still listed in the pidfile.
fn kill_everything() {
    for g in lock(&GROUPS).iter() {
        // SAFETY: plain syscall on a process group we created.
        unsafe { libc::killpg(*g, libc::SIGKILL) };
    }
    sweep_fake_servers();
}

/// Kills the fake servers of the pidfile that are still alive; returns how many there were.
fn sweep_fake_servers() -> usize {
    let Some(path) = PIDFILE.get() else { return 0 };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut alive = 0;
    for pid in text
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<i32>().ok())
    {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if contains(&cmdline, b"mcp-fake-server") {
            alive += 1;
            // SAFETY: plain syscall; the cmdline check guards against pid reuse.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    alive
}

/// Kills everything, removes the temporary directory and exits (signal, watchdog).
fn abort_run(code: i32) -> ! {
    ABORTING.store(true, Ordering::SeqCst);
    kill_everything();
    if let Some(dir) = TMP.get() {
        std::thread::sleep(Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(dir);
    }
    std::process::exit(code);
}

/// Starts the watchdog and the signal handler, and makes panics kill everything.
fn install_guards() {
    EPOCH.get_or_init(Instant::now);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        kill_everything();
        if ABORTING.load(Ordering::SeqCst) {
            // abort_run is exiting with its own code: let it, quietly.
            loop {
                std::thread::park();
            }
        }
        default(info);
    }));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .expect("signal handler");
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("relay bench: signal {sig}: killing every process it started");
            abort_run(130);
        }
    });
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = since_epoch_ms();
        let (phase, deadline) = *lock(&PHASE);
        let overran = now > deadline;
        if overran || now > TOTAL_LIMIT.as_millis() as u64 {
            eprintln!(
                "relay bench: phase `{phase}` overran its time budget (or the run exceeded {}s); killing everything",
                TOTAL_LIMIT.as_secs()
            );
            abort_run(3);
        }
    });
}

fn since_epoch_ms() -> u64 {
    EPOCH.get().map_or(0, |e| e.elapsed().as_millis() as u64)
}

/// Enters a phase that must end within `limit` (enforced by the watchdog).
fn phase(name: &'static str, limit: Duration) {
    eprintln!("relay bench: {name}");
    *lock(&PHASE) = (name, since_epoch_ms() + limit.as_millis() as u64);
}

/// A process we started, leading its own group. Dropping it stops the group: `stop_signal`
/// first (when set) with `grace` (5 s) to exit, then SIGKILL to the whole group, then reaping.
struct Proc {
    child: Child,
    stop_signal: Option<i32>,
    grace: Duration,
}

impl Proc {
    fn spawn(cmd: &mut Command, stop_signal: Option<i32>) -> Proc {
        cmd.process_group(0);
        let spawned = {
            // Held across spawn and registration, so a concurrent kill_everything sees it.
            let mut groups = lock(&GROUPS);
            cmd.spawn().inspect(|c| groups.push(c.id() as i32))
        };
        let child = spawned.unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Proc {
            child,
            stop_signal,
            grace: Duration::from_secs(5),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = self.pid();
        if let Some(sig) = self.stop_signal {
            // SAFETY: plain syscall on our own child.
            unsafe { libc::kill(pid, sig) };
            let until = Instant::now() + self.grace;
            while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // SAFETY: our own group (its leader is not reaped yet, so the id cannot be reused).
        unsafe { libc::killpg(pid, libc::SIGKILL) };
        let _ = self.child.wait();
        lock(&GROUPS).retain(|g| *g != pid);
    }
}

// ---------------------------------------------------------------------------------------------
// /proc helpers
// ---------------------------------------------------------------------------------------------

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
fn status_kib(pid: i32, key: &str) -> u64 {
    proc_field(&format!("/proc/{pid}/status"), key)
}

/// Proportional set size (shared pages divided among their users), in KiB.
fn pss_kib(pid: i32) -> u64 {
    proc_field(&format!("/proc/{pid}/smaps_rollup"), "Pss")
}

fn proc_field(path: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == key).then(|| v.split_whitespace().next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// Resets `VmHWM` to the current RSS (`clear_refs` 5, Linux 4.0+).
fn reset_peak(pid: i32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// CPU time of `pid` so far (its live threads' `sum_exec_runtime`, ns resolution), in
/// seconds; 0 when it is gone. Threads that already exited are not counted.
fn cpu_secs(pid: i32) -> f64 {
    let mut ns = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        ns += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    ns as f64 / 1e9
}

/// Total CPU seconds of `pids`.
fn cpu_of(pids: &[i32]) -> f64 {
    pids.iter().map(|p| cpu_secs(*p)).sum()
}

/// `(pid, ppid, pgrp)` of every process.
fn processes() -> Vec<(i32, i32, i32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold anything, so split after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 3 && f[0] != "Z" {
            if let (Ok(ppid), Ok(pgrp)) = (f[1].parse(), f[2].parse()) {
                out.push((pid, ppid, pgrp));
            }
        }
    }
    out
}

/// Every live descendant of `pid`.
fn descendants(pid: i32) -> Vec<i32> {
    let all = processes();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|(_, pp, _)| *pp == p).map(|(c, _, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn kib_to_mib(k: u64) -> f64 {
    k as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    Direct,
    Socat,
    Supervisor,
    Attach,
}

const WAYS: [Way; 4] = [Way::Direct, Way::Socat, Way::Supervisor, Way::Attach];

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Socat => "socat",
            Way::Supervisor => "supervisor",
            Way::Attach => "attach",
        }
    }
}

/// One MCP client connection over a socket or a child's pipes.
struct Conn {
    r: BufReader<Box<dyn Read + Send>>,
    w: Box<dyn Write + Send>,
    /// The process behind the pipes (direct server, attach bridge), stopped on drop.
    proc: Option<Proc>,
    next_id: u64,
}

#[derive(PartialEq, Eq, Debug)]
enum Reply {
    Result,
    Error,
    Other,
}

impl Conn {
    fn socket(path: &Path) -> Conn {
        let s = UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", path.display()));
        s.set_read_timeout(Some(Duration::from_secs(60))).ok();
        let r = s.try_clone().expect("clone a socket");
        Conn {
            r: BufReader::with_capacity(64 * 1024, Box::new(r)),
            w: Box::new(s),
            proc: None,
            next_id: 1,
        }
    }

    fn pipes(mut cmd: Command) -> Conn {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut p = Proc::spawn(&mut cmd, None);
        let w = p.child.stdin.take().expect("piped stdin");
        let r = p.child.stdout.take().expect("piped stdout");
        Conn {
            r: BufReader::with_capacity(64 * 1024, Box::new(r)),
            w: Box::new(w),
            proc: Some(p),
            next_id: 1,
        }
    }

    fn send(&mut self, line: &[u8]) {
        self.w.write_all(line).expect("write a request");
    }

    /// Reads one line into `buf` (cleared first).
    fn recv(&mut self, buf: &mut Vec<u8>) -> Reply {
        buf.clear();
        match self.r.read_until(b'\n', buf) {
            Ok(0) => panic!("the connection closed"),
            Ok(_) => classify(buf),
            Err(e) => panic!("read failed: {e}"),
        }
    }

    /// Reads until a response (skips notifications).
    fn response(&mut self, buf: &mut Vec<u8>) -> Reply {
        loop {
            match self.recv(buf) {
                Reply::Other => continue,
                r => return r,
            }
        }
    }

    fn handshake(&mut self) {
        self.send(INITIALIZE);
        let mut buf = Vec::new();
        let r = self.response(&mut buf);
        assert_eq!(
            r,
            Reply::Result,
            "initialize failed: {}",
            String::from_utf8_lossy(&buf)
        );
        self.send(INITIALIZED);
    }

    fn echo_line(&mut self) -> Vec<u8> {
        let id = self.next_id;
        self.next_id += 1;
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"hello\"}}}}}}\n"
        )
        .into_bytes()
    }

    /// One sequential round trip.
    fn echo(&mut self, buf: &mut Vec<u8>) -> Duration {
        let line = self.echo_line();
        let t = Instant::now();
        self.send(&line);
        let r = self.response(buf);
        let d = t.elapsed();
        assert_eq!(
            r,
            Reply::Result,
            "echo failed: {}",
            String::from_utf8_lossy(buf)
        );
        d
    }
}

const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":\"init\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"relay-bench\",\"version\":\"1\"}}}\n";
const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// Response or not, judged from the head of the line (a 64 MiB line is never scanned whole).
/// Both the fake server (sorted keys) and the supervisor put `result`/`error` in the first bytes.
fn classify(line: &[u8]) -> Reply {
    let head = &line[..line.len().min(96)];
    if contains(head, b"\"result\"") {
        Reply::Result
    } else if contains(head, b"\"error\"") {
        Reply::Error
    } else {
        Reply::Other
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// The rig: a temporary directory, one supervisor, socat listeners
// ---------------------------------------------------------------------------------------------

struct Rig {
    dir: PathBuf,
}

impl Rig {
    fn new(dir: &Path) -> Rig {
        for p in [dir.to_str().unwrap_or(" "), FAKE, SUPERVISOR] {
            assert!(
                !p.contains(|c: char| c.is_whitespace() || ",:!\"'\\".contains(c)),
                "path {p:?} would need quoting in a socat address; use a plain TMPDIR/target dir"
            );
        }
        Rig {
            dir: dir.to_path_buf(),
        }
    }

    fn pidfile(&self) -> PathBuf {
        self.dir.join("pids")
    }

    fn fake_cmd(&self) -> Command {
        let mut c = Command::new(FAKE);
        c.arg("--pidfile").arg(self.pidfile()).stderr(Stdio::null());
        c
    }

    /// Writes `<tag>.toml` with `servers` fake servers (`bench`, or `s0`..`s9`).
    fn config(&self, tag: &str, servers: usize) -> (PathBuf, Vec<PathBuf>) {
        let sockdir = self.dir.join(format!("{tag}-sock"));
        let mut text = format!(
            "[supervisor]\nsocket_dir = \"{}\"\n\n[defaults]\n# a 64 MiB result plus its envelope is over the 64 MiB default\nmax_message_size = {}\n\n",
            sockdir.display(),
            128 * MIB
        );
        let names: Vec<String> = if servers == 1 {
            vec!["bench".into()]
        } else {
            (0..servers).map(|i| format!("s{i}")).collect()
        };
        for n in &names {
            let _ = write!(
                text,
                "[servers.{n}]\ncommand = \"{FAKE}\"\nargs = [\"--pidfile\", \"{}\"]\n\n",
                self.pidfile().display()
            );
        }
        let path = self.dir.join(format!("{tag}.toml"));
        std::fs::write(&path, text).expect("write the config");
        let socks = names
            .iter()
            .map(|n| sockdir.join(format!("{n}.sock")))
            .collect();
        (path, socks)
    }

    /// Starts `mcp-supervisor run` (log in `<tag>.log`); does not wait.
    fn supervisor(&self, config: &Path, tag: &str) -> Proc {
        let log = std::fs::File::create(self.dir.join(format!("{tag}.log"))).expect("log file");
        let mut c = Command::new(SUPERVISOR);
        c.arg("run")
            .arg("-c")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        Proc::spawn(&mut c, Some(libc::SIGTERM))
    }

    /// Starts a socat listener on `sock`; does not wait.
    fn socat(&self, sock: &Path) -> Proc {
        let mut c = Command::new("socat");
        c.arg(format!(
            "UNIX-LISTEN:{},fork,unlink-early,backlog=128",
            sock.display()
        ))
        .arg(format!(
            "EXEC:{FAKE} --pidfile {},pipes",
            self.pidfile().display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        Proc::spawn(&mut c, None)
    }

    fn direct(&self) -> Conn {
        Conn::pipes(self.fake_cmd())
    }

    fn attach(&self, config: &Path, name: &str) -> Conn {
        let mut c = Command::new(SUPERVISOR);
        c.arg("attach")
            .arg(name)
            .arg("-c")
            .arg(config)
            .stderr(Stdio::null());
        Conn::pipes(c)
    }
}

/// Waits until `sock` accepts a connection (bounded).
fn wait_accepting(sock: &Path, limit: Duration) {
    let until = Instant::now() + limit;
    while UnixStream::connect(sock).is_err() {
        assert!(
            Instant::now() < until,
            "{} did not accept within {limit:?}",
            sock.display()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The single-server setup used by the latency, throughput and large-result measurements.
struct One<'a> {
    rig: &'a Rig,
    config: PathBuf,
    sup_sock: PathBuf,
    socat_sock: PathBuf,
    sup: Proc,
    socat: Proc,
}

impl<'a> One<'a> {
    fn start(rig: &'a Rig) -> One<'a> {
        let (config, socks) = rig.config("one", 1);
        let sup = rig.supervisor(&config, "one");
        let socat_sock = rig.dir.join("socat.sock");
        let socat = rig.socat(&socat_sock);
        wait_accepting(&socks[0], Duration::from_secs(10));
        wait_accepting(&socat_sock, Duration::from_secs(10));
        let one = One {
            rig,
            config,
            sup_sock: socks[0].clone(),
            socat_sock,
            sup,
            socat,
        };
        // The supervisor answers initialize once the child is ready.
        one.connect(Way::Supervisor);
        one
    }

    /// A connected client that has done the handshake.
    fn connect(&self, way: Way) -> Conn {
        let mut c = match way {
            Way::Direct => self.rig.direct(),
            Way::Socat => Conn::socket(&self.socat_sock),
            Way::Supervisor => Conn::socket(&self.sup_sock),
            Way::Attach => self.rig.attach(&self.config, "bench"),
        };
        c.handshake();
        c
    }

    /// The socat processes forked by the listener (one per open connection).
    fn socat_forks(&self) -> Vec<i32> {
        let socat = self.socat.pid();
        processes()
            .into_iter()
            .filter(|(_, pp, _)| *pp == socat)
            .map(|(p, _, _)| p)
            .collect()
    }

    /// Waits (bounded) until the socat forks of closed connections are gone.
    fn socat_idle(&self) {
        let until = Instant::now() + Duration::from_secs(10);
        while !self.socat_forks().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------------------------

/// One throughput measurement.
struct Throughput {
    clients: usize,
    way: Way,
    /// Median messages per second over the rounds.
    rate: f64,
    /// Error responses over all rounds (should be none).
    errors: u64,
    /// CPU time of the relay processes per message, in microseconds (none for direct).
    cpu_us: Option<f64>,
}

/// The idle footprint of one way.
struct Idle {
    way: Way,
    /// PSS of the relay processes (socat, supervisor, attach), MiB.
    relay_pss: Option<f64>,
    /// PSS of every process serving the clients (servers included), MiB.
    total_pss: f64,
    /// RSS of the supervisor process, MiB.
    sup_rss: Option<f64>,
    processes: usize,
}

/// One large-result measurement.
struct Large {
    mib: usize,
    way: Way,
    /// Median MB/s.
    rate: f64,
    /// The relay's peak RSS in MiB (none for direct).
    peak: Option<f64>,
    /// The attach process's own peak RSS in MiB (attach only).
    attach_peak: Option<f64>,
    /// Mean CPU time of the relay processes per transfer, in ms (none for direct).
    cpu_ms: Option<f64>,
}

#[derive(Default)]
struct Results {
    /// Per way: p50, p99 in microseconds.
    latency: Vec<(Way, f64, f64, usize)>,
    throughput: Vec<Throughput>,
    large: Vec<Large>,
    idle: Vec<Idle>,
    /// supervisor RSS with its 10 children ready and no client
    idle_no_clients: f64,
    /// (way, accepting ms, ready ms)
    startup: Vec<(Way, Option<f64>, f64)>,
    notes: Vec<String>,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1e6
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The order of the ways in round `r` (rotated, so no way is always first).
fn rotation(r: usize) -> impl Iterator<Item = Way> {
    (0..WAYS.len()).map(move |i| WAYS[(i + r) % WAYS.len()])
}

const LAT_ROUNDS: usize = 5;
const LAT_PER_ROUND: usize = 1000;

fn measure_latency(one: &One, res: &mut Results) {
    phase(
        "latency: sequential echo round trips",
        Duration::from_secs(60),
    );
    let mut conns: Vec<Conn> = WAYS.iter().map(|w| one.connect(*w)).collect();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); WAYS.len()];
    let mut buf = Vec::new();
    for c in conns.iter_mut() {
        for _ in 0..200 {
            c.echo(&mut buf);
        }
    }
    for r in 0..LAT_ROUNDS {
        for way in rotation(r) {
            let i = way as usize;
            let until = Instant::now() + Duration::from_secs(2);
            for _ in 0..LAT_PER_ROUND {
                if Instant::now() > until {
                    break;
                }
                samples[i].push(conns[i].echo(&mut buf));
            }
        }
    }
    for way in WAYS {
        let s = &mut samples[way as usize];
        s.sort();
        res.latency
            .push((way, percentile(s, 0.50), percentile(s, 0.99), s.len()));
    }
}

/// Outstanding requests per client: the total stays under the supervisor's default
/// `max_inflight` (256), beyond which it would answer -32003 instead of forwarding.
fn window(clients: usize) -> usize {
    (200 / clients).clamp(2, 32)
}

/// Runs every connection pipelined for `dur`; returns (messages/s, messages, error responses).
fn pipelined(conns: &mut [Conn], window: usize, dur: Duration) -> (f64, u64, u64) {
    let barrier = Barrier::new(conns.len() + 1);
    let start_ns = AtomicU64::new(u64::MAX);
    let base = Instant::now();
    let outcome: Vec<(u64, u64, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .map(|c| {
                let barrier = &barrier;
                let start_ns = &start_ns;
                s.spawn(move || {
                    let lines: Vec<Vec<u8>> = (0..window).map(|_| c.echo_line()).collect();
                    let mut buf = Vec::with_capacity(256);
                    barrier.wait();
                    let t0 = Instant::now();
                    start_ns
                        .fetch_min(t0.duration_since(base).as_nanos() as u64, Ordering::Relaxed);
                    let deadline = t0 + dur;
                    for l in &lines {
                        c.send(l);
                    }
                    let (mut out, mut ok, mut err) = (window, 0u64, 0u64);
                    let mut last = t0;
                    while out > 0 {
                        match c.recv(&mut buf) {
                            Reply::Result => ok += 1,
                            Reply::Error => err += 1,
                            Reply::Other => continue,
                        }
                        out -= 1;
                        last = Instant::now();
                        if last < deadline {
                            let l = c.echo_line();
                            c.send(&l);
                            out += 1;
                        }
                    }
                    (ok, err, last.duration_since(base))
                })
            })
            .collect();
        barrier.wait();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let ok: u64 = outcome.iter().map(|o| o.0).sum();
    let err: u64 = outcome.iter().map(|o| o.1).sum();
    let end = outcome.iter().map(|o| o.2).max().unwrap_or_default();
    let start = Duration::from_nanos(start_ns.load(Ordering::Relaxed));
    (ok as f64 / (end - start).as_secs_f64(), ok, err)
}

const TP_ROUNDS: usize = 5;
const TP_ROUND: Duration = Duration::from_millis(600);

fn measure_throughput(one: &One, res: &mut Results) {
    for clients in [1usize, 10, 100] {
        phase(
            match clients {
                1 => "throughput: 1 client",
                10 => "throughput: 10 clients",
                _ => "throughput: 100 clients",
            },
            Duration::from_secs(90),
        );
        let w = window(clients);
        // direct: one pipe pair carrying the same total window (there is one child to share).
        let mut sets: Vec<(Vec<Conn>, usize)> = WAYS
            .iter()
            .map(|way| match way {
                Way::Direct => (vec![one.connect(Way::Direct)], w * clients),
                _ => ((0..clients).map(|_| one.connect(*way)).collect(), w),
            })
            .collect();
        for (conns, win) in sets.iter_mut() {
            pipelined(conns, *win, Duration::from_millis(200)); // warm-up
        }
        // The relay processes whose CPU time is charged to each way.
        let relays: Vec<Vec<i32>> = WAYS
            .iter()
            .map(|way| match way {
                Way::Direct => vec![],
                Way::Socat => one.socat_forks(),
                Way::Supervisor => vec![one.sup.pid()],
                Way::Attach => {
                    let mut v = vec![one.sup.pid()];
                    v.extend(
                        sets[Way::Attach as usize]
                            .0
                            .iter()
                            .filter_map(|c| c.proc.as_ref().map(Proc::pid)),
                    );
                    v
                }
            })
            .collect();
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
        let mut errors = vec![0u64; WAYS.len()];
        let mut msgs = vec![0u64; WAYS.len()];
        let mut cpu = vec![0f64; WAYS.len()];
        for r in 0..TP_ROUNDS {
            for way in rotation(r) {
                let i = way as usize;
                let (conns, win) = &mut sets[i];
                let before = cpu_of(&relays[i]);
                let (rate, ok, err) = pipelined(conns, *win, TP_ROUND);
                cpu[i] += cpu_of(&relays[i]) - before;
                rates[i].push(rate);
                msgs[i] += ok;
                errors[i] += err;
            }
        }
        for way in WAYS {
            let i = way as usize;
            res.throughput.push(Throughput {
                clients,
                way,
                rate: median(&mut rates[i]),
                errors: errors[i],
                cpu_us: (way != Way::Direct).then(|| cpu[i] / msgs[i].max(1) as f64 * 1e6),
            });
        }
    }
}

/// Asks for a `bytes`-byte `big` result; returns the seconds from request to the last byte.
fn big(conn: &mut Conn, bytes: usize, buf: &mut Vec<u8>) -> f64 {
    let id = conn.next_id;
    conn.next_id += 1;
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"big\",\"arguments\":{{\"bytes\":{bytes}}}}}}}\n"
    );
    let t = Instant::now();
    conn.send(line.as_bytes());
    let r = conn.response(buf);
    let secs = t.elapsed().as_secs_f64();
    assert!(
        r == Reply::Result && buf.len() > bytes,
        "big {bytes} failed: {} bytes: {}",
        buf.len(),
        String::from_utf8_lossy(&buf[..buf.len().min(300)])
    );
    secs
}

fn measure_large(one: &One, res: &mut Results) {
    phase("large results: 1, 16, 64 MiB", Duration::from_secs(120));
    one.socat_idle();
    let mut conns: Vec<Conn> = WAYS.iter().map(|w| one.connect(*w)).collect();
    // Whose memory counts as the relay: nothing for direct, the socat process forked for this
    // connection, the supervisor (and for attach, also the attach process, reported apart).
    let forks = one.socat_forks();
    assert_eq!(forks.len(), 1, "expected one socat fork, found {forks:?}");
    let attach_pid = conns[Way::Attach as usize]
        .proc
        .as_ref()
        .map_or(0, Proc::pid);
    let relays: [Vec<i32>; 4] = [
        vec![],
        forks,
        vec![one.sup.pid()],
        vec![one.sup.pid(), attach_pid],
    ];
    let mut buf = Vec::with_capacity(65 * MIB);
    let rss_before = status_kib(one.sup.pid(), "VmRSS");
    for mib in [1usize, 16, 64] {
        let reps = if mib == 64 { 4 } else { 6 };
        let mut cpu = vec![0f64; WAYS.len()];
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
        let mut peaks = vec![0u64; WAYS.len()];
        let mut attach_peak = 0u64;
        for r in 0..reps {
            for way in rotation(r) {
                let i = way as usize;
                let relay = &relays[i];
                relay.iter().for_each(|p| reset_peak(*p));
                let before = cpu_of(relay);
                let secs = big(&mut conns[i], mib * MIB, &mut buf);
                cpu[i] += cpu_of(relay) - before;
                rates[i].push((mib * MIB) as f64 / secs / 1e6);
                if let Some(p) = relay.first() {
                    peaks[i] = peaks[i].max(status_kib(*p, "VmHWM"));
                }
                if way == Way::Attach {
                    attach_peak = attach_peak.max(status_kib(relay[1], "VmHWM"));
                }
            }
        }
        for way in WAYS {
            let i = way as usize;
            let peak = (way != Way::Direct).then(|| kib_to_mib(peaks[i]));
            let own = (way == Way::Attach).then(|| kib_to_mib(attach_peak));
            res.large.push(Large {
                mib,
                way,
                rate: median(&mut rates[i]),
                peak,
                attach_peak: own,
                cpu_ms: (way != Way::Direct).then(|| cpu[i] / reps as f64 * 1e3),
            });
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    res.notes.push(format!(
        "Supervisor RSS before the large results: {:.1} MiB; 300 ms after the last one: {:.1} MiB.",
        kib_to_mib(rss_before),
        kib_to_mib(status_kib(one.sup.pid(), "VmRSS"))
    ));
}

/// Sum of `f(pid)` over `pids`.
fn sum_kib(pids: &[i32], f: impl Fn(i32) -> u64) -> u64 {
    pids.iter().map(|p| f(*p)).sum()
}

fn settle() {
    std::thread::sleep(Duration::from_millis(500));
}

const IDLE_SERVERS: usize = 10;
const IDLE_CLIENTS: usize = 100;

fn measure_idle(rig: &Rig, res: &mut Results) {
    phase(
        "idle footprint: 10 servers, 100 clients",
        Duration::from_secs(120),
    );
    // direct: every client runs its own server.
    {
        let conns: Vec<Conn> = (0..IDLE_CLIENTS)
            .map(|_| {
                let mut c = rig.direct();
                c.handshake();
                c
            })
            .collect();
        settle();
        let pids: Vec<i32> = conns
            .iter()
            .filter_map(|c| c.proc.as_ref())
            .map(Proc::pid)
            .collect();
        res.idle.push(Idle {
            way: Way::Direct,
            relay_pss: None,
            total_pss: kib_to_mib(sum_kib(&pids, pss_kib)),
            sup_rss: None,
            processes: pids.len(),
        });
    }
    // socat: 10 listeners, 10 clients each (a socat process and a server per client).
    {
        let socks: Vec<PathBuf> = (0..IDLE_SERVERS)
            .map(|i| rig.dir.join(format!("idle-socat-{i}.sock")))
            .collect();
        let listeners: Vec<Proc> = socks.iter().map(|s| rig.socat(s)).collect();
        socks
            .iter()
            .for_each(|s| wait_accepting(s, Duration::from_secs(10)));
        let _conns: Vec<Conn> = (0..IDLE_CLIENTS)
            .map(|i| {
                let mut c = Conn::socket(&socks[i % IDLE_SERVERS]);
                c.handshake();
                c
            })
            .collect();
        settle();
        let mut relay = Vec::new();
        let mut all = Vec::new();
        for l in &listeners {
            relay.push(l.pid());
            all.push(l.pid());
            for d in descendants(l.pid()) {
                let cmd = std::fs::read(format!("/proc/{d}/cmdline")).unwrap_or_default();
                if !contains(&cmd, b"mcp-fake-server") {
                    relay.push(d);
                }
                all.push(d);
            }
        }
        res.idle.push(Idle {
            way: Way::Socat,
            relay_pss: Some(kib_to_mib(sum_kib(&relay, pss_kib))),
            total_pss: kib_to_mib(sum_kib(&all, pss_kib)),
            sup_rss: None,
            processes: all.len(),
        });
    }
    // supervisor and attach: a fresh supervisor each, with 10 servers.
    for way in [Way::Supervisor, Way::Attach] {
        let tag = format!("idle-{}", way.name());
        let (config, socks) = rig.config(&tag, IDLE_SERVERS);
        let sup = rig.supervisor(&config, &tag);
        socks
            .iter()
            .for_each(|s| wait_accepting(s, Duration::from_secs(10)));
        for s in &socks {
            Conn::socket(s).handshake(); // waits until that child is ready
        }
        settle();
        if way == Way::Supervisor {
            res.idle_no_clients = kib_to_mib(status_kib(sup.pid(), "VmRSS"));
        }
        let conns: Vec<Conn> = (0..IDLE_CLIENTS)
            .map(|i| {
                let mut c = match way {
                    Way::Attach => rig.attach(&config, &format!("s{}", i % IDLE_SERVERS)),
                    _ => Conn::socket(&socks[i % IDLE_SERVERS]),
                };
                c.handshake();
                c
            })
            .collect();
        settle();
        let mut relay = vec![sup.pid()];
        relay.extend(conns.iter().filter_map(|c| c.proc.as_ref()).map(Proc::pid));
        let mut all = relay.clone();
        all.extend(descendants(sup.pid()));
        res.idle.push(Idle {
            way,
            relay_pss: Some(kib_to_mib(sum_kib(&relay, pss_kib))),
            total_pss: kib_to_mib(sum_kib(&all, pss_kib)),
            sup_rss: Some(kib_to_mib(status_kib(sup.pid(), "VmRSS"))),
            processes: all.len(),
        });
        drop(conns);
        drop(sup);
    }
}

const STARTUP_REPS: usize = 5;

fn measure_startup(rig: &Rig, res: &mut Results) {
    phase("startup: 10 servers", Duration::from_secs(90));
    let mut acc: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    let mut ready: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    for r in 0..STARTUP_REPS {
        for way in rotation(r) {
            let i = way as usize;
            match way {
                Way::Direct => {
                    let t = Instant::now();
                    let mut conns: Vec<Conn> = (0..IDLE_SERVERS).map(|_| rig.direct()).collect();
                    conns.iter_mut().for_each(|c| c.send(INITIALIZE));
                    let mut buf = Vec::new();
                    for c in conns.iter_mut() {
                        assert_eq!(c.response(&mut buf), Reply::Result);
                    }
                    ready[i].push(ms(t));
                }
                Way::Socat => {
                    let socks: Vec<PathBuf> = (0..IDLE_SERVERS)
                        .map(|k| rig.dir.join(format!("start-{r}-{k}.sock")))
                        .collect();
                    let t = Instant::now();
                    let _listeners: Vec<Proc> = socks.iter().map(|s| rig.socat(s)).collect();
                    socks
                        .iter()
                        .for_each(|s| wait_accepting(s, Duration::from_secs(10)));
                    acc[i].push(ms(t));
                    let mut conns: Vec<Conn> = socks.iter().map(|s| Conn::socket(s)).collect();
                    conns.iter_mut().for_each(|c| c.send(INITIALIZE));
                    let mut buf = Vec::new();
                    for c in conns.iter_mut() {
                        assert_eq!(c.response(&mut buf), Reply::Result);
                    }
                    ready[i].push(ms(t));
                }
                Way::Supervisor | Way::Attach => {
                    let tag = format!("start-{r}-{}", way.name());
                    let (config, socks) = rig.config(&tag, IDLE_SERVERS);
                    let t = Instant::now();
                    let _sup = rig.supervisor(&config, &tag);
                    socks
                        .iter()
                        .for_each(|s| wait_accepting(s, Duration::from_secs(10)));
                    if way == Way::Supervisor {
                        acc[i].push(ms(t));
                    }
                    let mut conns: Vec<Conn> = (0..IDLE_SERVERS)
                        .map(|k| match way {
                            Way::Attach => rig.attach(&config, &format!("s{k}")),
                            _ => Conn::socket(&socks[k]),
                        })
                        .collect();
                    conns.iter_mut().for_each(|c| c.send(INITIALIZE));
                    let mut buf = Vec::new();
                    for c in conns.iter_mut() {
                        assert_eq!(c.response(&mut buf), Reply::Result);
                    }
                    ready[i].push(ms(t));
                }
            }
        }
    }
    for way in WAYS {
        let i = way as usize;
        let a = (!acc[i].is_empty()).then(|| median(&mut acc[i]));
        res.startup.push((way, a, median(&mut ready[i])));
    }
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

const BEGIN: &str =
    "<!-- relay-bench:begin: generated by `cargo bench --bench relay`; edit outside the markers -->";
const END: &str = "<!-- relay-bench:end -->";

fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = sh("nproc", &[]);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mem = kib_to_mib(proc_field("/proc/meminfo", "MemTotal")) / 1024.0;
    format!("{nproc} CPUs ({model}), {mem:.0} GiB RAM, Linux {kernel}")
}

struct Row {
    name: String,
    /// direct, socat, supervisor, attach
    v: [Option<f64>; 4],
    unit_digits: usize,
}

fn fmt_v(v: Option<f64>, digits: usize) -> String {
    match v {
        None => "—".into(),
        Some(x) => format!("{x:.digits$}"),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "—".into(),
    }
}

fn by_way<T: Copy>(items: &[(Way, T)], way: Way) -> Option<T> {
    items.iter().find(|(w, _)| *w == way).map(|(_, t)| *t)
}

struct Target {
    what: &'static str,
    measured: f64,
    limit: f64,
    /// true: the measured value must be at most `limit`; false: at least.
    at_most: bool,
    unit: &'static str,
}

fn report(
    res: &Results,
    command: &str,
    started: &str,
    load: (&str, &str),
    wall: Duration,
) -> String {
    let mut rows: Vec<Row> = Vec::new();
    let lat: Vec<(Way, (f64, f64))> = res.latency.iter().map(|l| (l.0, (l.1, l.2))).collect();
    rows.push(Row {
        name: "echo round trip p50, µs (lower is better)".into(),
        v: WAYS.map(|w| by_way(&lat, w).map(|l| l.0)),
        unit_digits: 1,
    });
    rows.push(Row {
        name: "echo round trip p99, µs (lower is better)".into(),
        v: WAYS.map(|w| by_way(&lat, w).map(|l| l.1)),
        unit_digits: 1,
    });
    for clients in [1usize, 10, 100] {
        let t: Vec<(Way, (f64, Option<f64>))> = res
            .throughput
            .iter()
            .filter(|t| t.clients == clients)
            .map(|t| (t.way, (t.rate, t.cpu_us)))
            .collect();
        let plural = if clients == 1 { "" } else { "s" };
        rows.push(Row {
            name: format!("pipelined echo, {clients} client{plural}, msg/s (higher is better)"),
            v: WAYS.map(|w| by_way(&t, w).map(|x| x.0)),
            unit_digits: 0,
        });
        rows.push(Row {
            name: format!(
                "pipelined echo, {clients} client{plural}, relay CPU per message, µs (lower is better)"
            ),
            v: WAYS.map(|w| by_way(&t, w).and_then(|x| x.1)),
            unit_digits: 1,
        });
    }
    for mib in [1usize, 16, 64] {
        let large = |f: &dyn Fn(&Large) -> Option<f64>| {
            WAYS.map(|w| {
                res.large
                    .iter()
                    .find(|l| l.way == w && l.mib == mib)
                    .and_then(f)
            })
        };
        rows.push(Row {
            name: format!("{mib} MiB result, MB/s (higher is better)"),
            v: large(&|l| Some(l.rate)),
            unit_digits: 0,
        });
        rows.push(Row {
            name: format!("{mib} MiB result, relay CPU per result, ms (lower is better)"),
            v: large(&|l| l.cpu_ms),
            unit_digits: 1,
        });
        rows.push(Row {
            name: format!("{mib} MiB result, relay peak RSS, MiB (lower is better)"),
            v: large(&|l| l.peak),
            unit_digits: 1,
        });
    }
    let idle = |f: &dyn Fn(&Idle) -> Option<f64>| {
        WAYS.map(|w| res.idle.iter().find(|i| i.way == w).and_then(f))
    };
    rows.push(Row {
        name: "idle, 10 servers + 100 clients: supervisor RSS, MiB (lower is better)".into(),
        v: idle(&|i| i.sup_rss),
        unit_digits: 1,
    });
    rows.push(Row {
        name: "idle, 10 servers + 100 clients: relay processes' PSS, MiB (lower is better)".into(),
        v: idle(&|i| i.relay_pss),
        unit_digits: 1,
    });
    rows.push(Row {
        name: "idle, 10 servers + 100 clients: PSS of every process, MiB (lower is better)".into(),
        v: idle(&|i| Some(i.total_pss)),
        unit_digits: 1,
    });
    let st: Vec<(Way, (Option<f64>, f64))> =
        res.startup.iter().map(|s| (s.0, (s.1, s.2))).collect();
    rows.push(Row {
        name: "start → 10 sockets accepting, ms (lower is better)".into(),
        v: WAYS.map(|w| by_way(&st, w).and_then(|x| x.0)),
        unit_digits: 1,
    });
    rows.push(Row {
        name: "start → 10 servers answered initialize, ms (lower is better)".into(),
        v: WAYS.map(|w| by_way(&st, w).map(|x| x.1)),
        unit_digits: 1,
    });

    let mut out = String::new();
    let _ = writeln!(out, "{BEGIN}\n");
    let _ = writeln!(out, "## Results\n");
    let _ = writeln!(out, "- Machine: {}", machine());
    let _ = writeln!(out, "- Date: {started}");
    let commit = sh("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = if sh("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        ""
    } else {
        " (with uncommitted changes)"
    };
    let _ = writeln!(
        out,
        "- Commit: `{commit}`{dirty}; {}",
        sh("socat", &["-V"])
            .lines()
            .nth(1)
            .unwrap_or("socat version unknown")
    );
    let _ = writeln!(
        out,
        "- Command: `{command}` (whole run {:.0} s)",
        wall.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "- Load average (1, 5, 15 min) at start: {}; at end: {} (the machine is shared: compare ratios, not absolute figures)\n",
        load.0, load.1
    );
    let _ = writeln!(
        out,
        "| measurement | direct | socat | supervisor | attach | supervisor ÷ direct | supervisor ÷ socat | attach ÷ direct | attach ÷ socat |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let [d, s, sup, a] = r.v;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            fmt_v(d, r.unit_digits),
            fmt_v(s, r.unit_digits),
            fmt_v(sup, r.unit_digits),
            fmt_v(a, r.unit_digits),
            ratio(sup, d),
            ratio(sup, s),
            ratio(a, d),
            ratio(a, s),
        );
    }
    let _ = writeln!(out);
    let samples: Vec<String> = res
        .latency
        .iter()
        .map(|l| format!("{} {}", l.0.name(), l.3))
        .collect();
    let _ = writeln!(out, "Round-trip samples: {}.", samples.join(", "));
    let errors: Vec<String> = res
        .throughput
        .iter()
        .filter(|t| t.errors > 0)
        .map(|t| format!("{} with {} clients: {}", t.way.name(), t.clients, t.errors))
        .collect();
    let _ = writeln!(
        out,
        "Error responses during the throughput rounds: {}.",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join("; ")
        }
    );
    let attach_own: Vec<String> = res
        .large
        .iter()
        .filter_map(|l| {
            l.attach_peak
                .map(|own| format!("{} MiB: {own:.1} MiB", l.mib))
        })
        .collect();
    let _ = writeln!(
        out,
        "The attach column's relay peak RSS is the supervisor's; the attach process's own peak RSS: {}.",
        attach_own.join(", ")
    );
    let procs: Vec<String> = res
        .idle
        .iter()
        .map(|i| format!("{} {}", i.way.name(), i.processes))
        .collect();
    let _ = writeln!(
        out,
        "Idle: processes counted in the PSS row: {}; the supervisor with its 10 children ready and no client: {:.1} MiB RSS.",
        procs.join(", "),
        res.idle_no_clients
    );
    for n in &res.notes {
        let _ = writeln!(out, "{n}");
    }

    // Targets.
    let get = |i: usize, w: usize| rows[i].v[w].unwrap_or(f64::NAN);
    let (s, sup) = (1, 2);
    let row_of = |prefix: &str| {
        rows.iter()
            .position(|r| r.name.starts_with(prefix))
            .expect("row")
    };
    let p50 = row_of("echo round trip p50");
    let p99 = row_of("echo round trip p99");
    let tp10 = row_of("pipelined echo, 10 clients");
    let mb64 = row_of("64 MiB result, MB/s");
    let rss64 = row_of("64 MiB result, relay peak RSS");
    let idle_rss = row_of("idle, 10 servers + 100 clients: supervisor RSS");
    let targets = [
        Target {
            what: "echo p50: supervisor ÷ socat",
            measured: get(p50, sup) / get(p50, s),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "echo p99: supervisor ÷ socat",
            measured: get(p99, sup) / get(p99, s),
            limit: 2.0,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "pipelined, 10 clients: supervisor ÷ socat",
            measured: get(tp10, sup) / get(tp10, s),
            limit: 0.8,
            at_most: false,
            unit: "×",
        },
        Target {
            what: "64 MiB result MB/s: supervisor ÷ socat",
            measured: get(mb64, sup) / get(mb64, s),
            limit: 0.5,
            at_most: false,
            unit: "×",
        },
        Target {
            what: "64 MiB result: supervisor peak RSS ÷ payload",
            measured: get(rss64, sup) / 64.0,
            limit: 3.0,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "idle 10 servers + 100 clients: supervisor RSS",
            measured: get(idle_rss, sup),
            limit: 20.0,
            at_most: true,
            unit: " MiB",
        },
    ];
    let _ = writeln!(out, "\n### Targets\n");
    let _ = writeln!(out, "| target | required | measured | verdict |");
    let _ = writeln!(out, "|---|---:|---:|---|");
    for t in &targets {
        let ok = if t.at_most {
            t.measured <= t.limit
        } else {
            t.measured >= t.limit
        };
        let verdict = if ok {
            "met".to_string()
        } else if t.at_most {
            format!(
                "**missed** by {:.0}% ({:.2}{} over)",
                (t.measured / t.limit - 1.0) * 100.0,
                t.measured - t.limit,
                t.unit
            )
        } else {
            format!(
                "**missed** by {:.0}% ({:.2}{} under)",
                (1.0 - t.measured / t.limit) * 100.0,
                t.limit - t.measured,
                t.unit
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} {:.2}{} | {:.2}{} | {} |",
            t.what,
            if t.at_most { "≤" } else { "≥" },
            t.limit,
            t.unit,
            t.measured,
            t.unit,
            verdict
        );
    }
    let _ = writeln!(out, "\n{END}");
    out
}

/// Replaces the generated section of `path` (or creates the file with it).
fn write_report(path: &Path, section: &str) {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => format!(
            "{}{}{}",
            &old[..b],
            section.trim_end(),
            &old[e + END.len()..]
        ),
        _ if old.is_empty() => format!("# Performance\n\n{section}"),
        _ => format!("{}\n\n{section}", old.trim_end()),
    };
    std::fs::write(path, new).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    eprintln!("relay bench: wrote {}", path.display());
}

// ---------------------------------------------------------------------------------------------
// Test mode
// ---------------------------------------------------------------------------------------------

/// `cargo test --benches`: every path answers an echo and a 1 MiB result; nothing is written.
fn smoke(rig: &Rig) {
    phase(
        "smoke test (cargo bench runs the benchmark)",
        Duration::from_secs(60),
    );
    let one = One::start(rig);
    let mut buf = Vec::new();
    for way in WAYS {
        let mut c = one.connect(way);
        c.echo(&mut buf);
        big(&mut c, MIB, &mut buf);
    }
    eprintln!("relay bench: every path works; run `cargo bench --bench relay` for the benchmark");
}

// ---------------------------------------------------------------------------------------------
// Profiling mode
// ---------------------------------------------------------------------------------------------

fn profile(rig: &Rig) {
    phase("profile: checking perf", Duration::from_secs(30));
    let ok = Command::new("perf")
        .args(["stat", "-e", "cpu-clock", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`perf stat -e cpu-clock true` failed: install perf (linux-perf) or use valgrind --tool=callgrind by hand"
    );
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/relay-profile");
    std::fs::create_dir_all(&out).expect("profile dir");
    let one = One::start(rig);
    // `perf record` attached to `pid` while `work` runs; then the top of the report.
    let record = |name: &str, pid: i32, work: &mut dyn FnMut()| {
        let data = out.join(format!("{name}.data"));
        let mut c = Command::new("perf");
        c.args(["record", "-e", "cpu-clock", "-F", "1999"])
            .args(["--call-graph", "dwarf,16384", "-o"])
            .arg(&data)
            .arg("-p")
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut perf = Proc::spawn(&mut c, Some(libc::SIGINT));
        perf.grace = Duration::from_secs(60);
        std::thread::sleep(Duration::from_millis(500));
        work();
        drop(perf);
        let input = data.to_str().unwrap_or_default();
        let report = |extra: &[&str]| {
            let mut a = vec!["report", "-i", input, "--stdio", "-g", "none"];
            a.extend_from_slice(extra);
            sh("perf", &a)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(|l| l.trim_end().trim_end_matches(['-', ' ']).to_string())
                .collect::<Vec<_>>()
        };
        let flat = report(&[
            "--no-children",
            "--sort",
            "dso,symbol",
            "--percent-limit",
            "1",
        ]);
        let ours: Vec<String> = report(&["--children", "--sort", "symbol", "--percent-limit", "1"])
            .into_iter()
            .filter(|l| l.contains("mcp_supervisor::"))
            .take(25)
            .collect();
        println!(
            "## {name} ({})\n\nself time:\n{}\n\ninclusive, project frames:\n{}\n",
            data.display(),
            flat.iter().take(25).cloned().collect::<Vec<_>>().join("\n"),
            ours.join("\n")
        );
    };
    let sup = one.sup.pid();

    phase(
        "profile: supervisor, 10 clients pipelined",
        Duration::from_secs(150),
    );
    let mut conns: Vec<Conn> = (0..10).map(|_| one.connect(Way::Supervisor)).collect();
    record("supervisor-small-pipelined", sup, &mut || {
        pipelined(&mut conns, window(10), Duration::from_secs(4));
    });
    drop(conns);

    phase(
        "profile: supervisor, sequential echo",
        Duration::from_secs(150),
    );
    let mut c = one.connect(Way::Supervisor);
    let mut buf = Vec::with_capacity(65 * MIB);
    record("supervisor-small-sequential", sup, &mut || {
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            c.echo(&mut buf);
        }
    });

    phase(
        "profile: supervisor, 64 MiB results",
        Duration::from_secs(150),
    );
    record("supervisor-big-64mib", sup, &mut || {
        for _ in 0..5 {
            big(&mut c, 64 * MIB, &mut buf);
        }
    });
    drop(c);

    phase(
        "profile: attach, 1 client pipelined",
        Duration::from_secs(150),
    );
    let mut a = vec![one.connect(Way::Attach)];
    let attach = a[0].proc.as_ref().map_or(0, Proc::pid);
    record("attach-small-pipelined", attach, &mut || {
        pipelined(&mut a, window(1), Duration::from_secs(4));
    });

    phase("profile: attach, 64 MiB results", Duration::from_secs(150));
    record("attach-big-64mib", attach, &mut || {
        for _ in 0..3 {
            big(&mut a[0], 64 * MIB, &mut buf);
        }
    });
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/PERFORMANCE.md"));
    let mut profiling = false;
    let mut benching = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => benching = true, // cargo bench passes it; cargo test does not
            "--no-write" => out = None,
            "--out" => out = it.next().map(PathBuf::from),
            "--profile" => profiling = true,
            other => eprintln!("relay bench: ignoring argument {other:?}"),
        }
    }
    install_guards();
    let tmp = tempfile::Builder::new()
        .prefix("relay-bench.")
        .tempdir()
        .expect("temporary directory");
    let rig = Rig::new(tmp.path());
    PIDFILE.set(rig.pidfile()).ok();
    TMP.set(tmp.path().to_path_buf()).ok();
    let wall = Instant::now();

    if profiling {
        profile(&rig);
    } else if !benching {
        smoke(&rig);
    } else {
        let socat = Command::new("socat")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            socat.is_ok_and(|s| s.success()),
            "socat is needed: run .ci/install-deps (or apt-get install socat)"
        );
        let started = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
        let load_start = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut res = Results::default();
        {
            phase("starting the supervisor and socat", Duration::from_secs(30));
            let one = One::start(&rig);
            measure_latency(&one, &mut res);
            measure_throughput(&one, &mut res);
            measure_large(&one, &mut res);
        }
        measure_idle(&rig, &mut res);
        measure_startup(&rig, &mut res);
        let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let three = |s: &str| s.split_whitespace().take(3).collect::<Vec<_>>().join(", ");
        let mut command = "cargo bench --bench relay".to_string();
        let extra: Vec<&String> = args.iter().filter(|a| *a != "--bench").collect();
        if !extra.is_empty() {
            command.push_str(" --");
            for a in extra {
                command.push(' ');
                command.push_str(a);
            }
        }
        let text = report(
            &res,
            &command,
            &started,
            (&three(&load_start), &three(&load_end)),
            wall.elapsed(),
        );
        println!("{text}");
        if let Some(path) = out {
            write_report(&path, &text);
        }
    }

    phase("cleanup", Duration::from_secs(30));
    let leftover_groups: HashSet<i32> = lock(&GROUPS).iter().copied().collect();
    let stray: Vec<i32> = processes()
        .into_iter()
        .filter(|(_, _, g)| leftover_groups.contains(g))
        .map(|(p, _, _)| p)
        .collect();
    kill_everything();
    std::thread::sleep(Duration::from_millis(200));
    let fakes = sweep_fake_servers();
    if !stray.is_empty() || fakes > 0 {
        eprintln!(
            "relay bench: killed leftovers: {} processes in our groups, {fakes} fake servers",
            stray.len()
        );
    }
    drop(tmp);
}
