//! Test harness: runs the real `mcp-supervisor` binary against the fake server fixture.
//!
//! Every supervisor started here gets a unique `MCPSUP_TEST_ID` in its environment, which its
//! children inherit; dropping a [`Supervisor`] stops it and then fails the test if any process
//! carrying that marker is still alive (after killing it, so one leak does not cascade).
//! Waiting is always on an event with a deadline ([`wait_until`], [`Client::recv`]), never a
//! bare sleep.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The supervisor binary under test.
pub const SUPERVISOR: &str = env!("CARGO_BIN_EXE_mcp-supervisor");
/// The scriptable fake MCP server.
pub const FAKE: &str = env!("CARGO_BIN_EXE_mcp-fake-server");

/// Whether the tests run as root (some become another uid with `setpriv`).
pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The variable `.ci/run` sets (issue 47 §9): a test that needs root (or one of the tools it
/// names) fails instead of skipping, so a skip in CI, which runs as root, cannot hide a
/// regression of the privilege and planted-link tests.
pub const REQUIRE_ROOT: &str = "MCP_SUPERVISOR_TESTS_REQUIRE_ROOT";

/// Whether `test` can run its part that needs root and the programs `tools` (each must answer
/// `--version`). When it cannot, says so on stderr and returns `false` (the caller skips that
/// part), or panics when [`REQUIRE_ROOT`] is set.
pub fn needs_root(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            Command::new(t)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
        })
        .collect();
    if is_root() && missing.is_empty() {
        return true;
    }
    let why = if is_root() {
        format!("needs {}", missing.join(", "))
    } else {
        format!("needs root (runs as uid {})", unsafe { libc::geteuid() })
    };
    if std::env::var_os(REQUIRE_ROOT).is_some_and(|v| !v.is_empty()) {
        panic!("{test}: {why}, and {REQUIRE_ROOT} is set: a root-only test may not skip");
    }
    eprintln!("{test}: skipped: {why} (CI runs it as root with {REQUIRE_ROOT}=1)");
    false
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
/// Spawns `cmd`, again while its program is "text file busy" (ETXTBSY), for up to 5 s: a
/// test that has just written a binary (a copy of the supervisor to upgrade) can find it still
/// open for writing in a process another test thread forked at that moment, until that
/// process executes its own program and the descriptor closes with it. No event says so.
pub fn spawn_busy_aware(cmd: &mut Command) -> std::process::Child {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match cmd.spawn() {
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return r.unwrap(),
        }
    }
}

pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A unique marker for one test's processes.
pub fn test_id() -> String {
    format!(
        "{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// TOML for a `[servers.NAME]` table running the fake server with `args`, plus `extra` lines.
pub fn fake_server(name: &str, args: &[&str], extra: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[servers.{name}]\ncommand = {FAKE:?}\nargs = [{}]\n{extra}\n",
        args.join(", ")
    )
}

/// A running supervisor with its own temporary directory.
pub struct Supervisor {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub id: String,
    log: Arc<Mutex<String>>,
    /// The read end of the supervisor's stderr when nothing reads it
    /// ([`Supervisor::start_with_unread_stderr`]); dropped after the supervisor stopped.
    _unread_stderr: Option<std::process::ChildStderr>,
    /// Run as PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc`): `child` is
    /// `unshare`, which blocks SIGTERM and passes the exit code on; signals go to the
    /// supervisor itself ([`Supervisor::pid`]).
    namespaced: bool,
}

impl Supervisor {
    /// Writes `servers` (TOML server tables) into a config with a private socket_dir and runs
    /// `mcp-supervisor run` on it. Waits until every server's socket exists.
    pub fn start(servers: &str) -> Self {
        Self::start_reading(servers, true)
    }

    /// Like [`Supervisor::start`], but nothing ever reads the supervisor's stderr: once the
    /// pipe's buffer is full, every write to it would block (a stuck log pipe). `log()` is
    /// empty.
    pub fn start_with_unread_stderr(servers: &str) -> Self {
        Self::start_reading(servers, false)
    }

    fn start_reading(servers: &str, read_stderr: bool) -> Self {
        Self::start_as(servers, read_stderr, false)
    }

    /// Like [`Supervisor::start`], but the supervisor is PID 1 of a new PID namespace, as
    /// in a container (`unshare --pid --fork --mount-proc`; needs root).
    pub fn start_in_pid_namespace(servers: &str) -> Self {
        Self::start_as(servers, true, true)
    }

    fn start_as(servers: &str, read_stderr: bool, namespaced: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("supervisor.toml");
        let text = format!(
            "[supervisor]\nsocket_dir = {:?}\n\n{servers}",
            dir.path().join("run")
        );
        std::fs::write(&config, text).unwrap();
        let mut s = Self::spawn_as(dir, config, &[], read_stderr, namespaced);
        let names = server_names(servers);
        let ok = wait_until(Duration::from_secs(10), || {
            names.iter().all(|n| s.socket(n).exists())
        });
        if !ok {
            s.stop();
            panic!("sockets did not appear; log:\n{}", s.log());
        }
        s
    }

    /// Writes a config with a private socket_dir, the `[supervisor]` lines `keys` and the
    /// server tables `servers`, and runs the binary on it with extra environment variables.
    /// Does not wait for the sockets (as [`Supervisor::spawn_with`]).
    pub fn spawn_config(keys: &str, servers: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("supervisor.toml");
        std::fs::write(
            &config,
            format!(
                "[supervisor]\nsocket_dir = {:?}\n{keys}\n\n{servers}",
                dir.path().join("run")
            ),
        )
        .unwrap();
        Self::spawn_with(dir, config, env)
    }

    /// Runs the daemon from `binary` (not the built one) on an existing config.
    pub fn spawn_binary(binary: &Path, dir: tempfile::TempDir, config: PathBuf) -> Self {
        Self::spawn_binary_with(binary, dir, config, &[])
    }

    /// [`Supervisor::spawn_binary`] with extra environment variables.
    pub fn spawn_binary_with(
        binary: &Path,
        dir: tempfile::TempDir,
        config: PathBuf,
        env: &[(&str, &str)],
    ) -> Self {
        let id = test_id();
        let mut cmd = Command::new(binary);
        cmd.arg("run").arg("-c").arg(&config);
        as_test_daemon(&mut cmd, &id);
        cmd.envs(env.iter().copied());
        let mut child = spawn_busy_aware(&mut cmd);
        let log = Arc::new(Mutex::new(String::new()));
        read_log(child.stderr.take().unwrap(), log.clone());
        Supervisor {
            child: Some(child),
            dir,
            config,
            id,
            log,
            _unread_stderr: None,
            namespaced: false,
        }
    }

    /// Runs the binary on an existing config with extra environment variables.
    pub fn spawn_with(dir: tempfile::TempDir, config: PathBuf, env: &[(&str, &str)]) -> Self {
        Self::spawn(dir, config, env, true)
    }

    fn spawn(
        dir: tempfile::TempDir,
        config: PathBuf,
        env: &[(&str, &str)],
        read_stderr: bool,
    ) -> Self {
        Self::spawn_as(dir, config, env, read_stderr, false)
    }

    fn spawn_as(
        dir: tempfile::TempDir,
        config: PathBuf,
        env: &[(&str, &str)],
        read_stderr: bool,
        namespaced: bool,
    ) -> Self {
        let id = test_id();
        let mut child = launch(&config, &id, env, namespaced);
        let log = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        if !read_stderr {
            return Supervisor {
                child: Some(child),
                dir,
                config,
                id,
                log,
                _unread_stderr: Some(err),
                namespaced,
            };
        }
        read_log(err, log.clone());
        Supervisor {
            child: Some(child),
            dir,
            config,
            id,
            log,
            _unread_stderr: None,
            namespaced,
        }
    }

    /// The status object of server `name` (`Value::Null` when it is not listed).
    pub fn server_status(&self, name: &str) -> Value {
        self.status_json()["servers"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == name).cloned())
            .unwrap_or(Value::Null)
    }

    /// Waits (at most `timeout`) until server `name` has had `n` more probes answered than
    /// now: an event to wait on instead of sleeping "long enough for probes to run".
    pub fn wait_probes_answered(&self, name: &str, n: u64, timeout: Duration) -> bool {
        let answered = |s: &Self| s.server_status(name)["probes_answered"].as_u64();
        let from = answered(self).unwrap_or(0);
        wait_until(timeout, || answered(self).is_some_and(|a| a >= from + n))
    }

    /// `mcp-supervisor status --json` on this supervisor's config, parsed.
    pub fn status_json(&self) -> Value {
        let out = Command::new(SUPERVISOR)
            .args(["status", "--json", "-c"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "status --json printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// `mcp-supervisor metrics -c CONFIG` output (the Prometheus text).
    pub fn metrics(&self) -> String {
        let out = Command::new(SUPERVISOR)
            .args(["metrics", "-c"])
            .arg(&self.config)
            .output()
            .unwrap();
        assert!(out.status.success(), "metrics failed: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Path of server `name`'s socket.
    pub fn socket(&self, name: &str) -> PathBuf {
        self.dir.path().join("run").join(format!("{name}.sock"))
    }

    /// A path inside the test's temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The supervisor's log so far (stderr, plain text).
    pub fn log(&self) -> String {
        strip_ansi(&self.log.lock().unwrap())
    }

    /// Waits until the log contains `needle` `count` times.
    pub fn wait_log_count(&self, needle: &str, count: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.log().matches(needle).count() >= count)
    }

    /// Waits until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        self.wait_log_count(needle, 1, timeout)
    }

    /// Connects a raw client to server `name`.
    pub fn connect(&self, name: &str) -> Client {
        Client::connect(&self.socket(name))
    }

    /// Connects and completes the MCP handshake.
    pub fn client(&self, name: &str) -> Client {
        let mut c = self.connect(name);
        c.initialize("test-client", json!({}));
        c
    }

    /// The supervisor's pid (as this test sees it: in a PID namespace, the host's pid of its
    /// PID 1, which `unshare` forks at once).
    pub fn pid(&self) -> u32 {
        let outer = self.child.as_ref().unwrap().id();
        if !self.namespaced {
            return outer;
        }
        let mut inner = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                inner = children_of(outer as i32).first().copied();
                inner.is_some()
            }),
            "unshare {outer} has no child"
        );
        inner.unwrap() as u32
    }

    /// Sends a signal to the supervisor.
    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.pid() as i32, sig);
        }
    }

    /// SIGTERM, then waits up to 20 s for exit; returns the exit code (SIGKILL on timeout).
    pub fn stop(&mut self) -> Option<i32> {
        if self.namespaced && self.child.is_some() {
            let pid = self.pid();
            return terminate_by(self.child.take()?, pid as i32);
        }
        terminate(self.child.take()?)
    }

    /// Waits for the supervisor to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return Some(st);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Pids of live (non-zombie) processes carrying this test's marker.
    pub fn marked(&self) -> Vec<i32> {
        marked_processes(&self.id)
    }

    /// A crash: SIGKILLs the supervisor and waits for it to be gone.
    pub fn kill(&mut self) {
        assert!(!self.namespaced, "kill: not in a PID namespace");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Runs the supervisor again on the same configuration and directory, for the same test
    /// (after [`Supervisor::kill`]): as systemd or an operator would after a crash. Its log is
    /// appended to the first run's.
    pub fn run_again(&mut self) {
        assert!(
            self.child.is_none(),
            "run_again: the supervisor is still running"
        );
        let mut child = launch(&self.config, &self.id, &[], false);
        read_log(child.stderr.take().unwrap(), self.log.clone());
        self.child = Some(child);
    }
}

impl Supervisor {
    /// [`Supervisor::run_again`] as systemd does it with a file descriptor store: `passed`
    /// (names and descriptors) become fds 3, 4, ... with `LISTEN_FDS`, `LISTEN_FDNAMES` and
    /// `LISTEN_PID` (set by `sh` to its own pid, which `exec` keeps), plus `env`.
    pub fn run_again_passing(
        &mut self,
        env: &[(&str, &str)],
        passed: Vec<(String, std::os::fd::OwnedFd)>,
    ) {
        use std::os::fd::AsRawFd;
        assert!(self.child.is_none(), "run_again: still running");
        let names: Vec<&str> = passed.iter().map(|(n, _)| n.as_str()).collect();
        let fds: Vec<i32> = passed.iter().map(|(_, f)| f.as_raw_fd()).collect();
        let mut cmd = activated(&self.config, &self.id, fds, &names.join(":"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        drop(passed);
        read_log(child.stderr.take().unwrap(), self.log.clone());
        self.child = Some(child);
    }
}

/// `mcp-supervisor run -c config` for test `id`, started as systemd starts a socket-activated
/// service: `fds` as 3, 4, ... named `names` (`LISTEN_FDNAMES`), and `LISTEN_PID` set by
/// `sh` to its own pid, which its `exec` keeps.
pub fn activated(config: &Path, id: &str, fds: Vec<std::os::fd::RawFd>, names: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("export LISTEN_PID=$$; exec \"$0\" \"$@\"")
        .arg(SUPERVISOR)
        .arg("run")
        .arg("-c")
        .arg(config)
        .env("LISTEN_FDS", fds.len().to_string())
        .env("LISTEN_FDNAMES", names);
    as_test_daemon(&mut cmd, id);
    pass_fds(&mut cmd, fds);
    cmd
}

/// Makes `fds` the spawned program's descriptors 3, 4, ... (without close-on-exec), as
/// systemd passes listening sockets and stored descriptors.
pub fn pass_fds(cmd: &mut Command, fds: Vec<std::os::fd::RawFd>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (fcntl, dup2, close) on descriptors the caller
    // holds open until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            // Out of the way first, then to 3, 4, ...
            let mut high = Vec::with_capacity(fds.len());
            for fd in &fds {
                let h = libc::fcntl(*fd, libc::F_DUPFD, 100);
                if h < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                high.push(h);
            }
            for (i, h) in high.iter().enumerate() {
                if libc::dup2(*h, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(*h);
            }
            Ok(())
        });
    }
}

/// The 2026-07-28 `_meta` envelope on `params`.
pub fn modern(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "listener", "version": "1"},
    });
    params
}

/// Runs `mcp-supervisor run -c config` for test `id` (its children carry the marker), its
/// stderr piped.
fn launch(config: &Path, id: &str, env: &[(&str, &str)], namespaced: bool) -> Child {
    let mut cmd = if namespaced {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc", SUPERVISOR]);
        c
    } else {
        Command::new(SUPERVISOR)
    };
    cmd.arg("run").arg("-c").arg(config);
    as_test_daemon(&mut cmd, id);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// How the tests run a supervisor for test `id`: its processes marked, debug logs without
/// colour on a piped stderr, not the journal, no stdin or stdout.
pub fn as_test_daemon(cmd: &mut Command, id: &str) {
    cmd.env("MCPSUP_TEST_ID", id)
        .env("RUST_LOG", "debug")
        .env("NO_COLOR", "1")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
}

/// Appends everything `err` says to `sink`, on a thread of its own.
pub fn read_log(mut err: impl Read + Send + 'static, sink: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&buf[..n]);
            if std::env::var_os("MCPSUP_TEST_ECHO").is_some() {
                eprint!("{text}");
            }
            sink.lock().unwrap().push_str(&text);
        }
    });
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
        // Children are killed by the ladder within its budget; allow for it, then check.
        let clean = wait_until(Duration::from_secs(10), || {
            marked_processes(&self.id).is_empty()
        });
        let left = marked_processes(&self.id);
        for pid in &left {
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        if !clean && !std::thread::panicking() {
            panic!(
                "processes left behind by the supervisor: {left:?}\nlog:\n{}",
                self.log()
            );
        }
    }
}

/// SIGTERM to `child`, then waits up to 20 s for it; returns its exit code (SIGKILL and `None`
/// on timeout).
pub fn terminate(child: Child) -> Option<i32> {
    let pid = child.id() as i32;
    terminate_by(child, pid)
}

/// SIGTERM to `pid` (the process that handles it: `child` itself, or the supervisor that
/// `unshare` forked), then like [`terminate`].
pub fn terminate_by(mut child: Child, pid: i32) -> Option<i32> {
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The children of `pid` (`/proc/PID/task/*/children`).
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in rd.flatten() {
        let path = t.path().join("children");
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// Live processes whose environment holds `MCPSUP_TEST_ID=<id>` (zombies have no readable
/// environment and are reported by [`zombies_of`]).
pub fn marked_processes(id: &str) -> Vec<i32> {
    let needle = format!("MCPSUP_TEST_ID={id}");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) && !is_zombie(pid) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` is a zombie.
pub fn is_zombie(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|(state, _)| state == 'Z')
}

/// Zombie children of `parent`.
pub fn zombies_of(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Some((state, ppid)) = proc_stat(pid) {
            if state == 'Z' && ppid == parent {
                out.push(pid);
            }
        }
    }
    out
}

fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|(s, _)| s != 'Z')
}

fn server_names(servers: &str) -> Vec<String> {
    servers
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("[servers.")
                .or_else(|| l.trim().strip_prefix("[endpoints."))?
                .strip_suffix(']')
                .filter(|n| !n.contains('.'))
                .map(str::to_string)
        })
        .collect()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads the pids the fake server wrote with `--pidfile` (one `<pid> <unix ms>` per start).
pub fn pidfile(path: &Path) -> Vec<(i32, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// Lines the fake server logged with `--log` (what the child saw), parsed where JSON.
pub fn child_saw(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Counts lines the child saw whose JSON `method` equals `method`.
pub fn child_saw_method(path: &Path, method: &str) -> usize {
    child_saw(path)
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["method"] == method)
        .count()
}

/// One client connection speaking newline-delimited JSON.
pub struct Client {
    pub stream: UnixStream,
    reader: BufReader<UnixStream>,
    /// Messages received while waiting for something else (notifications, other responses).
    pub backlog: Vec<Value>,
}

/// `n` connections to the Unix socket `path` made as uid `uid` (and gid `uid`): a thread of
/// its own changes only its own credentials (the raw `setresgid`/`setresuid` system calls,
/// not glibc's, which would change every thread), connects, and ends; the kernel records
/// those credentials for `SO_PEERCRED`. Needs root. A connection that fails is left out.
pub fn connect_as(uid: u32, path: &Path, n: usize) -> Vec<UnixStream> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        // SAFETY: raw system calls that change this thread's credentials only.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                0
            );
            assert_eq!(libc::syscall(libc::SYS_setresgid, uid, uid, uid), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
        }
        (0..n)
            .filter_map(|_| UnixStream::connect(&path).ok())
            .collect()
    })
    .join()
    .unwrap()
}

impl Client {
    /// A client on a connection made elsewhere (e.g. [`connect_as`]).
    pub fn of(stream: UnixStream) -> Client {
        let reader = BufReader::new(stream.try_clone().unwrap());
        Client {
            stream,
            reader,
            backlog: Vec::new(),
        }
    }

    /// Connects, retrying until the socket accepts (10 s).
    pub fn connect(path: &Path) -> Client {
        let mut stream = None;
        wait_until(Duration::from_secs(10), || {
            stream = UnixStream::connect(path).ok();
            stream.is_some()
        });
        let stream = stream.unwrap_or_else(|| panic!("cannot connect to {}", path.display()));
        let reader = BufReader::new(stream.try_clone().unwrap());
        Client {
            stream,
            reader,
            backlog: Vec::new(),
        }
    }

    /// Writes one JSON value as a line.
    pub fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.stream.write_all(&line).unwrap();
    }

    /// Writes raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads the next message, waiting at most `timeout`. `None` on timeout or EOF.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Value> {
        if !self.backlog.is_empty() {
            return Some(self.backlog.remove(0));
        }
        self.read_line(timeout)
    }

    fn read_line(&mut self, timeout: Duration) -> Option<Value> {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout))
            .unwrap();
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("client got a non-JSON line {line:?}: {e}")),
            ),
            Err(_) => None,
        }
    }

    /// The next message (10 s), panicking on timeout.
    pub fn recv(&mut self) -> Value {
        self.recv_timeout(Duration::from_secs(10))
            .expect("no message within 10 s")
    }

    /// Waits for the response with this exact `id` (value and type), keeping other messages in
    /// the backlog. `None` when nothing matching arrives within `timeout`.
    pub fn response_timeout(&mut self, id: &Value, timeout: Duration) -> Option<Value> {
        if let Some(i) = self.backlog.iter().position(|m| is_response(m, id)) {
            return Some(self.backlog.remove(i));
        }
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let m = self.read_line(left)?;
            if is_response(&m, id) {
                return Some(m);
            }
            self.backlog.push(m);
        }
    }

    /// Waits (10 s) for the response with this id.
    pub fn response(&mut self, id: &Value) -> Value {
        self.response_timeout(id, Duration::from_secs(10))
            .unwrap_or_else(|| {
                panic!(
                    "no response to id {id} within 10 s; backlog {:?}",
                    self.backlog
                )
            })
    }

    /// Sends a request and waits for its response.
    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(&id)
    }

    /// Calls a tool and returns the whole response.
    pub fn call(&mut self, id: Value, tool: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": tool, "arguments": args}))
    }

    /// Text of the first content block of a tool result response.
    pub fn text(resp: &Value) -> String {
        resp["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Handshake: `initialize` then `notifications/initialized`.
    pub fn initialize(&mut self, name: &str, capabilities: Value) -> Value {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": name, "version": "1"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    /// Waits for a notification with this method (from the backlog or the wire).
    pub fn notification(&mut self, method: &str, timeout: Duration) -> Option<Value> {
        if let Some(i) = self
            .backlog
            .iter()
            .position(|m| m["method"] == method && m.get("id").is_none())
        {
            return Some(self.backlog.remove(i));
        }
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let m = self.read_line(left)?;
            if m["method"] == method && m.get("id").is_none() {
                return Some(m);
            }
            self.backlog.push(m);
        }
    }

    /// Waits for a request from the server (child) with this method.
    pub fn server_request(&mut self, method: &str, timeout: Duration) -> Option<Value> {
        if let Some(i) = self
            .backlog
            .iter()
            .position(|m| m["method"] == method && m.get("id").is_some())
        {
            return Some(self.backlog.remove(i));
        }
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let m = self.read_line(left)?;
            if m["method"] == method && m.get("id").is_some() {
                return Some(m);
            }
            self.backlog.push(m);
        }
    }

    /// Reads until EOF or `timeout`; returns whether the connection closed.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream.set_read_timeout(Some(left)).unwrap();
            self.reader.get_ref().set_read_timeout(Some(left)).unwrap();
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }
}

fn is_response(m: &Value, id: &Value) -> bool {
    m.get("method").is_none() && m.get("id") == Some(id)
}
