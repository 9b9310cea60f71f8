//! One child process instance: spawn it in its own process group, pump its pipes, stop it
//! through the ladder. Reports everything to its owner as [`Event`]s (the upstream seam, this crate's root) tagged with the
//! instance's generation, so events of a previous instance are recognisable and ignored.
//!
//! Owns: the OS process, its three pipes, the stderr tail. Never interprets MCP beyond parsing
//! stdout lines into envelopes, and never decides about restarts.
//!
//! Rules: R12 (one process group per child, tokio owns reaping, no PDEATHSIG, no subreaper),
//! R14 (stop ladder; leader exit → SIGKILL the rest of the group at once), R15 (stdout framing),
//! R16 (stderr always drained, lines capped, rate-limited, logged at info), R17 (one writer,
//! bounded queue, a write blocked 10 s means hung), R18 (environment), field cases K17, K20.

use crate::child::limits::{Exec, Guard, Prepared};
use crate::Usage;
use bytes::Bytes;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::config::{env_matches, ServerConfig, ENV_NEVER};
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};
use vocab::jsonrpc::framing::{Frame, LineBatch, LineDecoder, BATCH_SLICES};
use vocab::jsonrpc::message;

mod identity;
mod leader;
mod watch;
use crate::{Event, Exit, Limit, Lost, Outbound, Queued, StderrTail, Upstream, Was};
use base::reaper;
use identity::run_as;
use leader::Leader;
use watch::{watch, Watched};

/// Longest stderr line logged; the rest is cut with a marker (R16).
pub const STDERR_LINE_MAX: usize = 16 * 1024;
/// A write to the child's stdin blocked this long means the child is hung (R17).
pub const STDIN_STALL: Duration = Duration::from_secs(10);
/// How long an exit waits for stdout and stderr to reach EOF before it is reported: the last
/// response (K05) and the last stderr lines (K18) belong before the exit. Bounded, because a
/// process that left the group may hold the pipes open (F10).
pub const PIPES_SETTLE: Duration = Duration::from_millis(500);
/// Messages queued toward the child's stdin (R17).
pub const STDIN_QUEUE: usize = 1024;
/// Most lines the stdin writer hands to one vectored write.
const STDIN_BATCH_LINES: usize = BATCH_SLICES;
/// The stdin writer stops adding queued lines to a write once it holds this many bytes (the
/// last one added may be large: lines are never copied or split).
const STDIN_BATCH_BYTES: usize = 64 * 1024;
/// A stdout read buffer idle with more capacity than this is replaced by a small one, so the
/// memory of a huge line is returned once the line is gone.
const STDOUT_BUFFER_KEEP: usize = 1024 * 1024;

/// Why a spawn failed.
#[derive(Debug, thiserror::Error)]
pub struct SpawnError {
    /// The command.
    pub command: String,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
    /// When the working directory is what failed: what is wrong with it.
    pub cwd: Option<String>,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cwd {
            Some(why) => write!(
                f,
                "cannot start `{}`: its working directory {why} ({})",
                self.command, self.source
            ),
            None => write!(f, "cannot start `{}`: {}", self.command, self.source),
        }
    }
}

impl SpawnError {
    /// ENOENT and EACCES will not heal by retrying: the server goes to `failed` at once (R8).
    pub fn permanent(&self) -> bool {
        matches!(
            self.source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
        ) || self.source.raw_os_error() == Some(libc::ENOEXEC)
    }
}

impl From<SpawnError> for crate::StartError {
    fn from(e: SpawnError) -> Self {
        crate::StartError {
            message: e.to_string(),
            permanent: e.permanent(),
            failure: crate::StartFailure::Spawn,
        }
    }
}

/// The supervisor's handle on a running instance. Dropping it stops the child (the ladder runs
/// as if [`ChildHandle::stop`] was called), so an instance can never be leaked by its owner.
#[derive(Debug)]
pub struct ChildHandle {
    /// Its entries in systemd's file descriptor store, when kept there (issue 32 §2). First,
    /// so a dropped handle takes them out of the store before its senders drop (the store's
    /// copy of stdin would keep the pipe open past the stop ladder's close).
    kept: Option<crate::child::fdstore::Kept>,
    /// Generation of this instance (events carry it).
    pub generation: u64,
    /// Process id, which is also the process group id.
    pub pid: u32,
    /// When it was spawned.
    pub spawned_at: Instant,
    stdin: Option<mpsc::Sender<Bytes>>,
    urgent: Option<mpsc::Sender<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    limits: Guard,
    /// What a hand-over needs (issue 32 §1): the pipes' descriptors, the marker, and the
    /// requests that pause the stdout reader and flush the stdin writer.
    takeover: Option<Takeover>,
}

/// A running instance's part of an upgrade's hand-over: its pipes (still open, owned by its
/// paused tasks), who it is, and its stdout reader's unframed bytes.
#[derive(Debug)]
pub struct ChildTakeover {
    /// Pid (= process group).
    pub pid: u32,
    /// Our ends of stdin, stdout, stderr.
    pub fds: (std::os::fd::RawFd, std::os::fd::RawFd, std::os::fd::RawFd),
    /// Its instance marker.
    pub marker: String,
    /// Its start time (clock ticks since boot).
    pub since: u64,
    /// The stdout reader's bytes read and not yet a line (the reader stops reading first).
    pub pending: oneshot::Receiver<Vec<u8>>,
    /// Resolves once everything queued for stdin is written (the writer then stops).
    pub flushed: oneshot::Receiver<()>,
}

#[derive(Debug)]
struct Takeover {
    fds: (std::os::fd::RawFd, std::os::fd::RawFd, std::os::fd::RawFd),
    marker: String,
    since: u64,
    pause_reader: oneshot::Sender<oneshot::Sender<Vec<u8>>>,
    flush_writer: oneshot::Sender<oneshot::Sender<()>>,
}

impl ChildHandle {
    /// Stops the instance's pipe tasks at a line boundary for an upgrade's hand-over: the
    /// stdout reader stops reading and gives its unframed bytes, the stdin writer writes what
    /// is queued and stops; the pipes stay open. `None` once stopping or already asked.
    pub fn hand_over(&mut self) -> Option<ChildTakeover> {
        if self.stopping() {
            return None;
        }
        let t = self.takeover.take()?;
        // Out of the store while this process still holds the pipes: a child left out of the
        // record then sees end of input at the exec, and the next image publishes the
        // adopted ones again.
        if let Some(mut k) = self.kept.take() {
            k.remove();
        }
        let (pending_tx, pending) = oneshot::channel();
        let (flushed_tx, flushed) = oneshot::channel();
        let _ = t.pause_reader.send(pending_tx);
        let _ = t.flush_writer.send(flushed_tx);
        Some(ChildTakeover {
            pid: self.pid,
            fds: t.fds,
            marker: t.marker,
            since: t.since,
            pending,
            flushed,
        })
    }

    /// Queues a line for stdin, behind earlier lines. Never blocks.
    pub fn send(&self, line: Bytes) -> Queued {
        match &self.stdin {
            Some(tx) => match tx.try_send(line) {
                Ok(()) => Queued::Ok,
                Err(mpsc::error::TrySendError::Full(_)) => Queued::Full,
                Err(mpsc::error::TrySendError::Closed(_)) => Queued::Closed,
            },
            None => Queued::Closed,
        }
    }

    /// Queues a line ahead of ordinary traffic (cancellations, answers to the child's pings):
    /// field case K09 wants cancels delivered at once, not behind queued requests.
    pub fn send_urgent(&self, line: Bytes) -> Queued {
        match &self.urgent {
            Some(tx) => match tx.try_send(line) {
                Ok(()) => Queued::Ok,
                // A child that leaves this many urgent lines unread is not reading its input;
                // the stdin stall check stops it. Memory stays bounded meanwhile.
                Err(mpsc::error::TrySendError::Full(_)) => Queued::Full,
                Err(mpsc::error::TrySendError::Closed(_)) => Queued::Closed,
            },
            None => Queued::Closed,
        }
    }

    /// Starts the stop ladder (idempotent). An `Exited` event with `requested` follows.
    pub fn stop(&mut self) {
        // First: the store's copy of stdin would keep the pipe open past the close.
        if let Some(mut k) = self.kept.take() {
            k.remove();
        }
        self.stdin = None;
        self.urgent = None;
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Whether [`ChildHandle::stop`] was called.
    pub fn stopping(&self) -> bool {
        self.stop.is_none()
    }

    /// The tree's memory and tasks at the last sample of its limits' watchdog, if any.
    pub fn usage(&self) -> Option<Usage> {
        self.limits.usage()
    }
}

/// The child process as an upstream (the seam's first implementation).
impl Upstream for ChildHandle {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn describe(&self) -> crate::Description {
        crate::Description {
            pid: Some(self.pid),
            usage: ChildHandle::usage(self),
            remote: None,
        }
    }
    fn started_at(&self) -> Instant {
        self.spawned_at
    }
    /// A child reads only the line: what the core knows of it changes nothing on a pipe.
    fn send(&self, out: Outbound) -> Queued {
        ChildHandle::send(self, out.line)
    }
    fn send_urgent(&self, out: Outbound) -> Queued {
        ChildHandle::send_urgent(self, out.line)
    }
    fn stop(&mut self) {
        ChildHandle::stop(self)
    }
    fn stopping(&self) -> bool {
        ChildHandle::stopping(self)
    }
    fn keeps_sessions(&self) -> bool {
        self.kept.is_some()
    }
    fn note_session(&mut self, handshake: serde_json::Value, log_level: Option<usize>) {
        if let Some(k) = &mut self.kept {
            k.session(handshake, log_level);
        }
    }
    /// A child is handed over whatever its session's state: the next image takes its pipes
    /// (the [`ChildTakeover`] inside).
    fn hand_over(&mut self, _session_ready: bool) -> Option<crate::Carried> {
        ChildHandle::hand_over(self).map(crate::Carried::new)
    }
}

/// Stop ladder timings (R14).
#[derive(Debug, Clone, Copy)]
pub struct Ladder {
    /// After closing stdin, before SIGTERM.
    pub stop_grace: Duration,
    /// After SIGTERM, before SIGKILL.
    pub kill_timeout: Duration,
}

/// The test hook that holds a spawn (`MCP_SUPERVISOR_TEST_SPAWN_DELAY=NAME:MS`): [`launch`] of
/// server NAME sleeps MS milliseconds first, on the blocking thread it runs on, as a slow
/// directory service or a stalled cgroup write would (issue 27 §3). Unset in production.
const SPAWN_DELAY_VAR: &str = "MCP_SUPERVISOR_TEST_SPAWN_DELAY";

/// The delay [`SPAWN_DELAY_VAR`] sets for server `name`, if any.
fn test_spawn_delay(name: &str) -> Option<Duration> {
    let v = std::env::var(SPAWN_DELAY_VAR).ok()?;
    let (server, ms) = v.split_once(':')?;
    (server == name).then(|| Duration::from_millis(ms.parse().unwrap_or(0)))
}

/// What spawning one instance needs of a server's configuration, and nothing else (issue 27
/// §7): built once per spawn by [`SpawnSpec::of`] and moved to the blocking thread that
/// spawns. Units as in [`ServerConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnSpec {
    /// The server's name (instance marker, cgroup and log names).
    pub name: String,
    /// The program and its arguments.
    pub command: String,
    pub args: Vec<String>,
    /// Variables set for the child (after `clean_env`/`env_allow`).
    pub env: std::collections::BTreeMap<String, String>,
    pub clean_env: bool,
    pub env_allow: Vec<String>,
    pub cwd: Option<std::path::PathBuf>,
    /// Who it runs as (root only), names or numbers as configured.
    pub user: Option<String>,
    pub group: Option<String>,
    pub limits: support::config::Limits,
    /// Longest stdout line, in bytes (R15).
    pub max_message_size: usize,
    /// Deepest nesting of a stdout line relayed (issue 47 §7).
    pub max_message_depth: usize,
    /// The stop ladder (R14).
    pub stop_grace: Duration,
    pub kill_timeout: Duration,
}

impl SpawnSpec {
    /// The spec of `cfg`'s child.
    pub fn of(cfg: &ServerConfig) -> SpawnSpec {
        SpawnSpec {
            name: cfg.name.clone(),
            command: cfg.command.clone(),
            args: cfg.args.clone(),
            env: cfg.env.clone(),
            clean_env: cfg.clean_env,
            env_allow: cfg.env_allow.clone(),
            cwd: cfg.cwd.clone(),
            user: cfg.user.clone(),
            group: cfg.group.clone(),
            limits: cfg.limits,
            max_message_size: cfg.max_message_size,
            max_message_depth: cfg.max_message_depth,
            stop_grace: cfg.stop_grace,
            kill_timeout: cfg.kill_timeout,
        }
    }
}

/// A forked and executed instance whose pipe tasks have not started yet: what [`launch`]
/// hands from the blocking thread back to the runtime, where [`Launched::start`] starts them.
#[derive(Debug)]
pub struct Launched {
    instance: Instance,
    leader: Leader,
    pipes: Pipes,
    /// Stdout bytes an inherited instance's previous reader had not framed yet.
    pending: Vec<u8>,
    tail: StderrTail,
    /// What the tasks need of the configuration.
    server: String,
    max_message_size: usize,
    max_message_depth: usize,
    ladder: Ladder,
    spawned_at: Instant,
}

impl Launched {
    /// Starts the instance's tasks (stdin writer, stdout reader, stderr drain, watcher), whose
    /// events go to `events`. Must run inside the runtime; never blocks.
    pub fn start(self, events: mpsc::Sender<Event>) -> ChildHandle {
        start_tasks(self, events)
    }
}

/// Spawns one instance of `cfg` as generation `generation`: the blocking half (issue 27 §3),
/// meant for a blocking thread: identity lookups (NSS), the cgroup's directory and files,
/// fork and exec, a `/proc` read. [`Launched::start`] then starts its tasks on the runtime.
/// Needs a tokio runtime context (a `spawn_blocking` thread has one) for the pipes.
pub fn launch(cfg: &SpawnSpec, generation: u64, tail: StderrTail) -> Result<Launched, SpawnError> {
    if let Some(delay) = test_spawn_delay(&cfg.name) {
        std::thread::sleep(delay);
    }
    let marker = reaper::marker(&cfg.name);
    let spawn_error = |source| SpawnError {
        command: cfg.command.clone(),
        source,
        cwd: None,
    };
    // The instance's cgroup (when it has one) exists before the fork (issue 18 §3).
    let mut limits = Prepared::new(cfg.limits, &marker).map_err(spawn_error)?;
    let mut cmd = command(cfg, &marker, limits.take_exec())?;
    // The table of pids tokio owns stays locked from the fork until the pid is in it, so the
    // orphan sweep never reaps this child, even if it dies at once (crates/base/src/reaper.rs).
    let mut owned = reaper::spawn_guard();
    let spawned = cmd.spawn();
    if let Some(pid) = spawned.as_ref().ok().and_then(|c| c.id()) {
        owned.insert(pid as i32);
    }
    drop(owned);
    let mut child = spawned.map_err(|source| SpawnError {
        command: cfg.command.clone(),
        source,
        // Blame the working directory when it is the problem, not the command (issue 14 Why 6).
        cwd: identity::cwd_problem(cfg),
    })?;
    let spawned_at = Instant::now();
    // All three pipes were requested and the child was not waited for yet, so these are
    // always present; if not, the instance is killed and reported as a failed spawn.
    let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) = (
        child.id(),
        child.stdin.take(),
        child.stdout.take(),
        child.stderr.take(),
    ) else {
        if let Some(pid) = child.id() {
            reaper::disown(pid);
        }
        let _ = child.start_kill();
        return Err(SpawnError {
            command: cfg.command.clone(),
            source: std::io::Error::other("the spawned child has no pid or no pipes"),
            cwd: None,
        });
    };
    // The leader's start time bounds the search for its descendants (reaper::marked).
    let since = reaper::stat(pid as i32).map_or(0, |p| p.start);
    let guard = limits.start(&cfg.name, pid as i32, &marker, since, tail.clone());
    let instance = Instance {
        generation,
        marker,
        since,
        guard,
    };
    let started = (Leader::Spawned(child), spawned_at);
    Ok(Launched::of(
        cfg,
        instance,
        started,
        (pid, stdin, stdout, stderr),
        Vec::new(),
        tail,
    ))
}

impl Launched {
    /// A started instance of `cfg` (`started`: its leader and when it was spawned), with the
    /// stdout bytes a previous reader had not framed yet.
    fn of(
        cfg: &SpawnSpec,
        instance: Instance,
        (leader, spawned_at): (Leader, Instant),
        pipes: Pipes,
        pending: Vec<u8>,
        tail: StderrTail,
    ) -> Launched {
        Launched {
            instance,
            leader,
            pipes,
            pending,
            tail,
            server: cfg.name.clone(),
            max_message_size: cfg.max_message_size,
            max_message_depth: cfg.max_message_depth,
            ladder: Ladder {
                stop_grace: cfg.stop_grace,
                kill_timeout: cfg.kill_timeout,
            },
            spawned_at,
        }
    }
}

/// A running instance this process inherited from its previous image across an upgrade in
/// place (issue 32 §1): our child still, with its pipes.
#[derive(Debug)]
pub struct Inherited {
    /// Pid (= process group).
    pub pid: u32,
    /// Our end of its stdin.
    pub stdin: std::os::fd::OwnedFd,
    /// Our end of its stdout.
    pub stdout: std::os::fd::OwnedFd,
    /// Our end of its stderr.
    pub stderr: std::os::fd::OwnedFd,
    /// Its instance marker.
    pub marker: String,
    /// Its start time (clock ticks since boot).
    pub since: u64,
    /// Stdout bytes read by the previous image and not yet a line.
    pub pending: Vec<u8>,
    /// Its stderr tail as the previous image had it.
    pub tail: String,
}

/// Adopts `inherited` as instance `generation` of `cfg`: waited for through a pidfd, its
/// pipes pumped by the usual tasks, its limits guarded again (`Prepared::adopt`: its cgroup
/// found by its marker, the watchdog sampling as for a spawned one; the kernel kept its
/// rlimits). Errors: it is gone, or pidfds are not available; the pipes are closed then.
pub fn adopt(
    cfg: &SpawnSpec,
    generation: u64,
    tail: StderrTail,
    inherited: Inherited,
) -> Result<Launched, SpawnError> {
    let err = |source| SpawnError {
        command: cfg.command.clone(),
        source,
        cwd: None,
    };
    let Inherited {
        pid,
        stdin,
        stdout,
        stderr,
        marker,
        since,
        pending,
        tail: text,
    } = inherited;
    for fd in [&stdin, &stdout, &stderr] {
        base::fds::close_on_exec(std::os::fd::AsRawFd::as_raw_fd(fd));
    }
    let mut owned = reaper::spawn_guard();
    let leader = Leader::adopt(pid).map_err(err)?;
    owned.insert(pid as i32);
    drop(owned);
    let pipes = (
        pid,
        ChildStdin::from_std(std::process::ChildStdin::from(stdin)).map_err(err)?,
        ChildStdout::from_std(std::process::ChildStdout::from(stdout)).map_err(err)?,
        ChildStderr::from_std(std::process::ChildStderr::from(stderr)).map_err(err)?,
    );
    tail.clear();
    for line in text.lines() {
        tail.note(line);
    }
    let guard = Prepared::adopt(cfg.limits, &marker).start(
        &cfg.name,
        pid as i32,
        &marker,
        since,
        tail.clone(),
    );
    let instance = Instance {
        generation,
        marker,
        since,
        guard,
    };
    // Its uptime goes on from its real start, not from the adoption.
    let spawned_at = reaper::running_for(since)
        .and_then(|age| Instant::now().checked_sub(age))
        .unwrap_or_else(Instant::now);
    Ok(Launched::of(
        cfg,
        instance,
        (leader, spawned_at),
        pipes,
        pending,
        tail,
    ))
}

/// The command for `cfg`: its own process group, pipes, the environment (`clean_env`,
/// `env_allow`, never the plumbing variables, always the instance `marker` as
/// [`reaper::MARKER_VAR`]), the working directory, the limits' `exec` and the identity.
fn command(cfg: &SpawnSpec, marker: &str, exec: Option<Exec>) -> Result<Command, SpawnError> {
    let mut cmd = Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    if cfg.clean_env {
        cmd.env_clear();
        for (k, v) in std::env::vars_os() {
            let name = k.to_string_lossy();
            if cfg.env_allow.iter().any(|p| env_matches(p, &name)) {
                cmd.env(&k, v);
            }
        }
    }
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if ENV_NEVER.iter().any(|p| env_matches(p, &name)) {
            cmd.env_remove(&k);
        }
    }
    let run_as = run_as(cfg).map_err(|source| SpawnError {
        command: cfg.command.clone(),
        source,
        cwd: None,
    })?;
    if let Some(r) = &run_as {
        for (k, v) in &r.env {
            cmd.env(k, v);
        }
    }
    cmd.envs(&cfg.env);
    cmd.env(reaper::MARKER_VAR, marker);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    if let Some(exec) = exec {
        // SAFETY: as below; first, while still the supervisor's identity (limits::Exec).
        unsafe {
            cmd.pre_exec(move || exec.apply());
        }
    }
    if let Some(r) = run_as {
        let cwd = cfg
            .cwd
            .as_ref()
            .and_then(|c| std::ffi::CString::new(c.as_os_str().as_encoded_bytes()).ok());
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls on data prepared before the fork (no allocation).
        unsafe {
            cmd.pre_exec(move || r.apply(cwd.as_deref()));
        }
    }
    Ok(cmd)
}

/// The pid and the three pipes of a spawned child.
type Pipes = (
    u32,
    tokio::process::ChildStdin,
    tokio::process::ChildStdout,
    tokio::process::ChildStderr,
);

/// Who an instance is, for finding its descendants ([`reaper::marked`]).
#[derive(Debug)]
struct Instance {
    generation: u64,
    /// Its [`reaper::MARKER_VAR`] value.
    marker: String,
    /// The leader's start time (clock ticks since boot; 0 when unknown).
    since: u64,
    /// Its limits (issue 18 §3).
    guard: Guard,
}

/// Starts the four tasks of a spawned instance (stdin writer, stdout reader, stderr drain,
/// watcher) and returns its handle.
fn start_tasks(launched: Launched, events: mpsc::Sender<Event>) -> ChildHandle {
    let Launched {
        instance,
        leader: mut child,
        pipes: (pid, stdin, stdout, stderr),
        pending,
        tail,
        server,
        max_message_size,
        max_message_depth,
        ladder,
        spawned_at,
    } = launched;
    let generation = instance.generation;
    let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_QUEUE);
    let (urgent_tx, urgent_rx) = mpsc::channel(STDIN_QUEUE);
    let (stop_tx, stop_rx) = oneshot::channel();
    let (close_tx, close_rx) = oneshot::channel();
    let (pause_tx, pause_rx) = oneshot::channel();
    let (flush_tx, flush_rx) = oneshot::channel();
    let span = tracing::info_span!("child", server = %server, child_pid = pid);
    use std::os::fd::{AsFd, AsRawFd};
    let fds = (stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd());
    let kept = crate::child::fdstore::Kept::publish(
        &server,
        generation,
        pid,
        &instance.marker,
        instance.since,
        [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()],
    );
    let takeover = Takeover {
        fds,
        marker: instance.marker.clone(),
        since: instance.since,
        pause_reader: pause_tx,
        flush_writer: flush_tx,
    };

    tokio::spawn(tracing::Instrument::instrument(
        write_stdin(
            stdin,
            stdin_rx,
            urgent_rx,
            (close_rx, flush_rx),
            generation,
            events.clone(),
        ),
        span.clone(),
    ));
    let (stdout_done_tx, stdout_done) = oneshot::channel();
    let out_events = events.clone();
    let max = (max_message_size, max_message_depth);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            read_stdout(stdout, (max, pending), generation, out_events, pause_rx).await;
            let _ = stdout_done_tx.send(());
        },
        span.clone(),
    ));
    let (stderr_done_tx, stderr_done) = oneshot::channel();
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            drain_stderr(stderr, tail).await;
            let _ = stderr_done_tx.send(());
        },
        span.clone(),
    ));
    let mut watched = Watched {
        server: server.clone(),
        pid,
        marker: instance.marker,
        since: instance.since,
        guard: instance.guard.clone(),
        cleanup: None,
    };
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let exit = watch(&mut child, &mut watched, stop_rx, close_tx, ladder).await;
            // The group is gone, so both pipes reach EOF promptly; the reader's events are queued
            // before this one, so the final response is routed before the exit is handled.
            let settle = async {
                let _ = stdout_done.await;
                let _ = stderr_done.await;
            };
            let _ = tokio::time::timeout(PIPES_SETTLE, settle).await;
            let _ = events
                .send(Event::Lost(generation, Lost::Exited(exit)))
                .await;
            if let Some(cleanup) = watched.cleanup.take() {
                let _ = cleanup.await;
            }
        },
        span,
    ));
    ChildHandle {
        generation,
        pid,
        spawned_at,
        stdin: Some(stdin_tx),
        urgent: Some(urgent_tx),
        stop: Some(stop_tx),
        limits: instance.guard,
        takeover: Some(takeover),
        kept,
    }
}

/// The single writer to the child's stdin: urgent lines first, then queued ones. After taking
/// one line it also takes what else is already waiting (urgent first, up to [`STDIN_BATCH_LINES`]
/// lines or [`STDIN_BATCH_BYTES`]) and writes them with one vectored write; each batch must be
/// written within [`STDIN_STALL`]. Returning drops stdin, which the child sees as EOF.
async fn write_stdin(
    mut stdin: ChildStdin,
    mut normal: mpsc::Receiver<Bytes>,
    mut urgent: mpsc::Receiver<Bytes>,
    (mut close, mut flush): (
        oneshot::Receiver<()>,
        oneshot::Receiver<oneshot::Sender<()>>,
    ),
    generation: u64,
    events: mpsc::Sender<Event>,
) {
    let mut batch = LineBatch::new();
    let mut flushed: Option<oneshot::Sender<()>> = None;
    loop {
        if flushed.is_some() && urgent.is_empty() && normal.is_empty() {
            // A hand-over: everything queued is written; the pipe stays open, untouched.
            if let Some(done) = flushed.take() {
                let _ = done.send(());
            }
            std::future::pending::<()>().await;
        }
        let line = tokio::select! {
            biased;
            _ = &mut close => return,
            Ok(done) = &mut flush, if flushed.is_none() => { flushed = Some(done); continue }
            Some(l) = urgent.recv() => l,
            l = normal.recv() => match l { Some(l) => l, None => return },
        };
        batch.push(line);
        // Lines that arrived meanwhile: urgent ones (cancels, ping answers) ahead of the rest.
        while batch.len() < STDIN_BATCH_LINES && batch.bytes() < STDIN_BATCH_BYTES {
            match urgent.try_recv() {
                Ok(l) => batch.push(l),
                Err(_) => break,
            }
        }
        while batch.len() < STDIN_BATCH_LINES && batch.bytes() < STDIN_BATCH_BYTES {
            match normal.try_recv() {
                Ok(l) => batch.push(l),
                Err(_) => break,
            }
        }
        let written = tokio::time::timeout(STDIN_STALL, batch.write_all(&mut stdin)).await;
        // Drop the lines now, not when the next one arrives (one may be a huge argument).
        batch.clear();
        let failure = match written {
            Ok(Ok(())) => continue,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                "stdin closed by the child (EPIPE)".to_string()
            }
            Ok(Err(e)) => format!("stdin write failed: {e}"),
            Err(_) => format!(
                "stdin write blocked for {}s: the child is not reading",
                STDIN_STALL.as_secs()
            ),
        };
        let _ = events
            .send(Event::Lost(generation, Lost::WriteFailed(failure)))
            .await;
        return;
    }
}

/// Frames stdout, parses each line's envelope and sends it on. Noise is logged (rate-limited)
/// and skipped; a line over `max_message_size` or nested past `max_message_depth` (measured
/// while framing it, issue 47 §7) is reported as discarded with what it was; one bad line
/// never ends the stream (R15, K01, K04).
async fn read_stdout(
    mut stdout: ChildStdout,
    ((max, max_depth), pending): ((usize, usize), Vec<u8>),
    generation: u64,
    events: mpsc::Sender<Event>,
    mut pause: oneshot::Receiver<oneshot::Sender<Vec<u8>>>,
) {
    let mut dec = LineDecoder::with_depth(max, max_depth);
    let mut noise = RateLimit::new(10, 100);
    // An inherited instance: what the previous image's reader had not framed yet comes first.
    dec.extend(&pending);
    let mut first = !pending.is_empty();
    loop {
        let buf = dec.buffer_mut();
        // A new buffer only when this one is nearly full: lines still on their way to clients
        // share it (zero-copy results), so reserving 64 KiB on every read would allocate a
        // fresh buffer per line.
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        let read = tokio::select! {
            r = stdout.read_buf(buf), if !first => Some(r),
            Ok(give) = &mut pause => {
                // A hand-over: the next image reads on from here; this task stops reading.
                let _ = give.send(dec.pending().map(<[u8]>::to_vec).unwrap_or_else(|| {
                    warn!("hand-over in the middle of an oversized stdout line; its end will be skipped as noise");
                    Vec::new()
                }));
                std::future::pending::<()>().await;
                None
            }
            _ = std::future::ready(()), if first => None,
        };
        first = false;
        let eof = match read {
            None => false,
            Some(Ok(0)) => true,
            Some(Ok(_)) => false,
            Some(Err(e)) => {
                warn!(error = %e, "reading stdout failed");
                true
            }
        };
        loop {
            let frame = if eof { dec.finish() } else { dec.next_frame() };
            let Some(frame) = frame else { break };
            let event = match frame {
                Frame::Line(line) => {
                    if !send_line(&line, generation, &events, &mut noise).await {
                        return;
                    }
                    continue;
                }
                Frame::TooDeep(line) => {
                    if !send_too_deep(&line, generation, &events, &mut noise).await {
                        return;
                    }
                    continue;
                }
                Frame::Oversized {
                    len,
                    id,
                    has_method,
                } => oversized_event(generation, len, id.as_deref(), has_method),
            };
            if events.send(event).await.is_err() {
                return;
            }
        }
        if eof {
            let _ = events.send(Event::Closed(generation)).await;
            return;
        }
        dec.shrink_if_idle(STDOUT_BUFFER_KEEP);
    }
}

/// Sends the events of one stdout line: its messages, or for a refused reply with a top-level
/// `id` a `Malformed` event that fails its request (K21); noise is logged, rate-limited.
/// Returns false when the actor is gone.
async fn send_line(
    line: &bytes::Bytes,
    generation: u64,
    events: &mpsc::Sender<Event>,
    noise: &mut RateLimit,
) -> bool {
    let msgs = match message::parse_line(line) {
        Ok(msgs) => msgs,
        Err(e) => vec![Err(e)],
    };
    for m in msgs {
        let ev = match m {
            Ok(m) => Event::Message(generation, m),
            Err(e) => {
                log_noise(noise, line, &e.to_string());
                match message::malformed_reply_id(line) {
                    Some(id) => Event::Malformed(generation, id, e.to_string()),
                    None => continue,
                }
            }
        };
        if events.send(ev).await.is_err() {
            return false;
        }
    }
    true
}

/// The event of a stdout line over `max` bytes, discarded (the actor counts it and logs it
/// within a budget). Only a response answers one of our requests: an oversized request or
/// notification from the child carries an id from the child's own namespace, which must not
/// fail our request that happens to share it (K22).
fn oversized_event(generation: u64, len: usize, id: Option<&[u8]>, has_method: bool) -> Event {
    let id = id.and_then(message::raw_from_slice);
    let kind = if has_method {
        message::Kind::Request
    } else {
        message::Kind::Response
    };
    Event::Discarded(generation, Limit::Size(len), Was::of(kind, id))
}

/// Sends the events of a stdout line nested past `max_message_depth` (issue 47 §7): read only
/// to learn what each message was (serde_json's raw values do not recurse, so the envelope
/// parses at any depth), never relayed. A line that is no JSON-RPC at all is noise, as any.
/// Returns false when the actor is gone.
async fn send_too_deep(
    line: &bytes::Bytes,
    generation: u64,
    events: &mpsc::Sender<Event>,
    noise: &mut RateLimit,
) -> bool {
    let msgs = match message::parse_line(line) {
        Ok(msgs) => msgs,
        Err(_) => return send_line(line, generation, events, noise).await,
    };
    for m in msgs {
        let was = match m {
            Ok(m) => Was::of(m.kind, m.id),
            // A member that is no message: what a reply's top-level id says, as for any
            // malformed line (K21).
            Err(_) => Was::Response(message::malformed_reply_id(line)),
        };
        if events
            .send(Event::Discarded(generation, Limit::Depth, was))
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

fn log_noise(limit: &mut RateLimit, line: &[u8], why: &str) {
    if let Some(suppressed) = limit.allow() {
        let preview = String::from_utf8_lossy(line.get(..256).unwrap_or(line));
        warn!(
            suppressed,
            reason = why,
            "skipped a stdout line that is not a JSON-RPC message: {preview:?}"
        );
    }
}

/// Reads stderr forever (never applying backpressure), logs it line by line at info with the
/// server and pid from the span, and keeps the tail (R16, K20).
async fn drain_stderr(mut stderr: ChildStderr, tail: StderrTail) {
    // Not zero-filled: memory is touched only as far as stderr ever writes (a zeroed 64 KiB
    // buffer was 64 KiB of resident memory per server, issue 15 §5).
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = 0usize;
    let mut limit = RateLimit::new(100, 1000);
    loop {
        buf.clear();
        match stderr.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let chunk = &buf[..];
        tail.push(chunk);
        for &b in chunk {
            if b == b'\n' {
                emit_stderr(&mut limit, &line, cut);
                line.clear();
                cut = 0;
            } else if line.len() < STDERR_LINE_MAX {
                line.push(b);
            } else {
                cut += 1;
            }
        }
    }
    if !line.is_empty() {
        emit_stderr(&mut limit, &line, cut);
    }
}

fn emit_stderr(limit: &mut RateLimit, line: &[u8], cut: usize) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    if let Some(suppressed) = limit.allow() {
        if cut > 0 {
            info!(target: "mcp_supervisor::stderr", suppressed, "{text}…[truncated {cut} bytes]");
        } else {
            info!(target: "mcp_supervisor::stderr", suppressed, "{text}");
        }
    }
}

/// A token bucket for log lines: `rate` per second, `burst` at once. [`RateLimit::allow`]
/// returns `Some(n)` (n = lines suppressed since the last allowed one) or `None`.
#[derive(Debug)]
pub struct RateLimit {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    suppressed: u64,
}

impl RateLimit {
    /// `rate` lines per second with bursts of `burst`.
    pub fn new(rate: u32, burst: u32) -> Self {
        RateLimit {
            rate: rate as f64,
            burst: burst as f64,
            tokens: burst as f64,
            last: Instant::now(),
            suppressed: 0,
        }
    }

    /// Whether one more line may be logged now.
    pub fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests;
