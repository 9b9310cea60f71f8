//! Process bookkeeping (everything the benchmark starts is killed, whatever happens), the
//! watchdog, and `/proc` readings (CPU time, RSS, PSS, process tree).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;

/// Process groups we started and have not reaped yet.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Every `mcp-fake-server` (ours, socat's, the supervisor's, rmcp-mux's) appends its pid here.
pub static PIDFILE: OnceLock<PathBuf> = OnceLock::new();
/// The temporary directory (configs, sockets, logs), removed by [`abort_run`] too.
pub static TMP: OnceLock<PathBuf> = OnceLock::new();
/// Set by [`abort_run`]: client threads that now see their connections die stay quiet.
static ABORTING: AtomicBool = AtomicBool::new(false);
/// Watchdog: the current phase and its deadline (ms since `EPOCH`).
static PHASE: Mutex<(String, u64)> = Mutex::new((String::new(), u64::MAX));
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// Whole-run limit (the benchmark normally takes about three minutes).
const TOTAL_LIMIT: Duration = Duration::from_secs(480);

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn pid(p: i32) -> Pid {
    Pid::from_raw(p)
}

/// SIGKILLs every group we started and every fake server still listed in the pidfile.
pub fn kill_everything() {
    for g in lock(&GROUPS).iter() {
        let _ = killpg(pid(*g), Signal::SIGKILL);
    }
    sweep_fake_servers();
}

/// Kills the fake servers of the pidfile that are still alive; returns how many there were.
pub fn sweep_fake_servers() -> usize {
    let Some(path) = PIDFILE.get() else { return 0 };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut alive = 0;
    for p in text
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<i32>().ok())
    {
        if is_fake_server(p) {
            alive += 1;
            // The cmdline check guards against pid reuse.
            let _ = kill(pid(p), Signal::SIGKILL);
        }
    }
    alive
}

/// Whether `pid` is a live (not zombie) `mcp-fake-server`.
pub fn is_fake_server(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    contains(&cmdline, b"mcp-fake-server")
}

/// Kills everything, removes the temporary directory and exits (signal, watchdog).
pub fn abort_run(code: i32) -> ! {
    ABORTING.store(true, Ordering::SeqCst);
    kill_everything();
    if let Some(dir) = TMP.get() {
        wait_gone(Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(dir);
    }
    std::process::exit(code);
}

/// Waits (bounded) until no process is left in the groups we started, e.g. after
/// [`kill_everything`]: SIGKILLed processes disappear from `/proc` once reaped.
pub fn wait_gone(limit: Duration) -> Vec<i32> {
    let until = Instant::now() + limit;
    loop {
        let groups: Vec<i32> = lock(&GROUPS).clone();
        let left: Vec<i32> = processes()
            .into_iter()
            .filter(|(_, _, g)| groups.contains(g))
            .map(|(p, _, _)| p)
            .collect();
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts the watchdog and the signal handler, and makes panics kill everything.
pub fn install_guards() {
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
        let (phase, deadline) = lock(&PHASE).clone();
        if now > deadline || now > TOTAL_LIMIT.as_millis() as u64 {
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
pub fn phase(name: &str, limit: Duration) {
    eprintln!("relay bench: {name}");
    *lock(&PHASE) = (
        name.to_string(),
        since_epoch_ms() + limit.as_millis() as u64,
    );
}

/// A process we started, leading its own group. Dropping it stops the group: `stop_signal`
/// first (when set) with `grace` (5 s) to exit, then SIGKILL to the whole group, then reaping.
pub struct Proc {
    pub child: Child,
    stop_signal: Option<Signal>,
    pub grace: Duration,
}

impl Proc {
    pub fn spawn(cmd: &mut Command, stop_signal: Option<Signal>) -> Proc {
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

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let p = self.pid();
        if let Some(sig) = self.stop_signal {
            let _ = kill(pid(p), sig);
            let until = Instant::now() + self.grace;
            while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // Our own group (its leader is not reaped yet, so the id cannot be reused).
        let _ = killpg(pid(p), Signal::SIGKILL);
        let _ = self.child.wait();
        lock(&GROUPS).retain(|g| *g != p);
    }
}

/// Output of a short command, empty on any failure.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// File descriptors
// ---------------------------------------------------------------------------------------------

/// `(soft, hard)` RLIMIT_NOFILE of this process, from `/proc/self/limits`.
pub fn nofile() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or("");
    let f: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| match w {
            "unlimited" => Some(u64::MAX),
            _ => w.parse().ok(),
        })
        .collect();
    (
        f.first().copied().unwrap_or(1024),
        f.get(1).copied().unwrap_or(1024),
    )
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (children started afterwards,
/// the supervisor and rmcp-mux included, inherit it). Done with util-linux `prlimit` on our
/// own pid, which needs no `unsafe`. Returns the soft limit in force afterwards.
pub fn raise_nofile() -> u64 {
    let (soft, hard) = nofile();
    if soft < hard {
        let hard_text = if hard == u64::MAX {
            "unlimited".to_string()
        } else {
            hard.to_string()
        };
        let ok = Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={hard_text}:{hard_text}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("relay bench: could not raise RLIMIT_NOFILE with prlimit (soft {soft}, hard {hard})");
        }
    }
    nofile().0
}

// ---------------------------------------------------------------------------------------------
// /proc readings
// ---------------------------------------------------------------------------------------------

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: i32, key: &str) -> u64 {
    proc_field(&format!("/proc/{pid}/status"), key)
}

/// Proportional set size (shared pages divided among their users), in KiB.
pub fn pss_kib(pid: i32) -> u64 {
    proc_field(&format!("/proc/{pid}/smaps_rollup"), "Pss")
}

pub fn proc_field(path: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == key).then(|| v.split_whitespace().next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// Resets `VmHWM` to the current RSS (`clear_refs` 5, Linux 4.0+).
pub fn reset_peak(pid: i32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// CPU time of `pid` so far (its live threads' `sum_exec_runtime`, ns resolution), in
/// seconds; 0 when it is gone. Threads that already exited are not counted.
pub fn cpu_secs(pid: i32) -> f64 {
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
pub fn cpu_of(pids: &[i32]) -> f64 {
    pids.iter().map(|p| cpu_secs(*p)).sum()
}

/// Sum of `f(pid)` over `pids`.
pub fn sum_kib(pids: &[i32], f: impl Fn(i32) -> u64) -> u64 {
    pids.iter().map(|p| f(*p)).sum()
}

/// `(pid, ppid, pgrp)` of every live process.
pub fn processes() -> Vec<(i32, i32, i32)> {
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
pub fn descendants(pid: i32) -> Vec<i32> {
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

/// The live children of `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, pp, _)| *pp == pid)
        .map(|(p, _, _)| p)
        .collect()
}

pub fn kib_to_mib(k: u64) -> f64 {
    k as f64 / 1024.0
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The process groups we started and have not reaped yet.
pub fn lock_groups_snapshot() -> Vec<i32> {
    lock(&GROUPS).clone()
}
