//! Per-server resource limits (issue 18 §3; docs/book/src/reference/configuration.md,
//! "Limits"): `memory_max` and `tasks_max` for a child's whole process tree, `open_files_max`
//! per process.
//!
//! **Mechanisms**, chosen once at start by [`setup`] from `[supervisor] limits`:
//! - `cgroup`: a delegated cgroup v2 subtree ([`cgroup`]). Each instance runs in a cgroup of
//!   its own, created before the spawn; the child writes itself into it in `pre_exec`, so
//!   every descendant is inside from its first instruction. The kernel enforces `memory.max`
//!   (swap 0; `memory.oom.group`: the OOM killer ends the whole instance, reported
//!   `oom-killed`) and `pids.max` (forks beyond it fail; the watchdog then ends the instance,
//!   reported `tasks-limit`).
//! - `rlimit`: no cgroup. The watchdog samples the tree every [`LIMIT_SAMPLE`] from `/proc`
//!   ([`procfs`]): over `memory_max` (sum of RSS) or `tasks_max` (threads) it SIGKILLs the
//!   tree, reported `memory-limit` / `tasks-limit`. Enforcement is after the fact: a tree may
//!   exceed a limit for up to one sampling period.
//!
//! `open_files_max` is `RLIMIT_NOFILE` (soft and hard) set in `pre_exec` under either
//! mechanism. No other rlimit is set: `RLIMIT_NPROC` counts every process of the user id
//! (and root is exempt), so it would refuse forks because of unrelated processes;
//! `RLIMIT_AS` breaks runtimes that reserve large address ranges (V8, Go, the JVM, Wasm);
//! `RLIMIT_DATA` counts committed but untouched mappings and fails one process's
//! allocation with the child's own error (an abort, not `memory-limit`) before the tree
//! limit is reached. See docs/book/src/reference/configuration.md, "Limits".
//!
//! A limit kill is an unrequested exit: a failure for the restart policy and the backoff,
//! its reason ([`LimitKill::reason`]) in status, outage records and logs, and counted in
//! `mcp_supervisor_child_limit_kills_total`.

use crate::{Exit, LimitKill, StderrTail, Usage};
use nix::sys::signal::{self, killpg, Signal};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use support::config::{LimitMode, Limits};
use tracing::{info, warn};

pub mod cgroup;
pub mod procfs;
#[cfg(test)]
mod tests;

use cgroup::InstanceCgroup;

/// How often the watchdog samples an instance's memory and tasks.
pub const LIMIT_SAMPLE: Duration = Duration::from_secs(1);
/// How long the cleanup waits for an instance cgroup to empty before giving up its removal.
pub const CGROUP_REMOVE_WITHIN: Duration = Duration::from_secs(5);

pub use crate::LimitStatus;

/// The status entry for `limits` with the running instance's `usage`; `None` without limits.
pub fn status(limits: &Limits, usage: Option<Usage>) -> Option<LimitStatus> {
    if limits.is_empty() {
        return None;
    }
    Some(LimitStatus {
        mechanism: if limits.tree() { mechanism() } else { "rlimit" },
        memory_max: limits.memory_max,
        tasks_max: limits.tasks_max,
        open_files_max: limits.open_files_max,
        memory_bytes: usage.map(|u| u.memory_bytes),
        tasks: usage.map(|u| u.tasks),
    })
}

/// The mechanism taken at start: our cgroup (the parent of instance cgroups), or none.
static CGROUP_ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();

/// `cgroup` or `rlimit`: the mechanism [`setup`] took (`rlimit` before it).
pub fn mechanism() -> &'static str {
    match CGROUP_ROOT.get() {
        Some(Some(_)) => "cgroup",
        _ => "rlimit",
    }
}

fn cgroup_root() -> Option<&'static PathBuf> {
    CGROUP_ROOT.get().and_then(Option::as_ref)
}

/// `limits = "cgroup"` on a host without a usable cgroup v2 subtree: the supervisor does not
/// start (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("limits = \"cgroup\", but no cgroup v2 subtree can be used: {0}")]
pub struct LimitsUnavailable(pub String);

/// Chooses the mechanism once, before any child runs (later calls return the first choice):
/// `auto` takes a delegated cgroup v2 subtree ([`cgroup::detect`]) and makes it ours
/// ([`cgroup::enable`]), else `rlimit`; `cgroup` takes a usable one or fails; `rlimit` never
/// looks. Logs the choice and, for `auto` without a cgroup, why. Returns the mechanism.
pub fn setup(mode: LimitMode) -> Result<&'static str, LimitsUnavailable> {
    if let Some(root) = CGROUP_ROOT.get() {
        return Ok(if root.is_some() { "cgroup" } else { "rlimit" });
    }
    let chosen = match mode {
        LimitMode::Rlimit => None,
        LimitMode::Auto | LimitMode::Cgroup => match cgroup::detect() {
            cgroup::Detection::Delegated { dir, how } => {
                info!(cgroup = %dir.display(), delegated = %how, "limits: using the delegated cgroup v2 subtree");
                Some(dir)
            }
            cgroup::Detection::Usable { dir } if mode == LimitMode::Cgroup => Some(dir),
            cgroup::Detection::Usable { dir } => {
                info!(cgroup = %dir.display(), "limits: our cgroup is writable but not marked delegated (systemd: Delegate=yes; or limits = \"cgroup\"); memory_max and tasks_max are enforced by sampling /proc");
                None
            }
            cgroup::Detection::Unavailable(why) if mode == LimitMode::Cgroup => {
                return Err(LimitsUnavailable(why))
            }
            cgroup::Detection::Unavailable(why) => {
                info!(why = %why, "limits: no cgroup v2 subtree; memory_max and tasks_max are enforced by sampling /proc");
                None
            }
        },
    };
    let chosen = match chosen.map(|dir| cgroup::enable(&dir).map(|()| dir)) {
        Some(Ok(dir)) => Some(dir),
        Some(Err(why)) if mode == LimitMode::Cgroup => return Err(LimitsUnavailable(why)),
        Some(Err(why)) => {
            warn!(why = %why, "limits: cannot use the cgroup v2 subtree; memory_max and tasks_max are enforced by sampling /proc");
            None
        }
        None => None,
    };
    let root = CGROUP_ROOT.get_or_init(|| chosen);
    Ok(if root.is_some() { "cgroup" } else { "rlimit" })
}

/// What the forked child does before exec (async-signal-safe: two system calls on data
/// prepared before the fork): enter its cgroup, set `RLIMIT_NOFILE`.
#[derive(Debug)]
pub struct Exec {
    procs: Option<OwnedFd>,
    nofile: Option<u64>,
}

impl Exec {
    /// In the forked child: write `0` (the caller) to the instance cgroup's `cgroup.procs`,
    /// then `setrlimit(RLIMIT_NOFILE)`.
    pub fn apply(&self) -> std::io::Result<()> {
        if let Some(fd) = &self.procs {
            // SAFETY: write(2) of a static byte to a descriptor we own.
            let n = unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) };
            if n != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(n) = self.nofile {
            let rl = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // SAFETY: setrlimit(2) with an initialised struct.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// An instance's limits from just before its spawn: the cgroup created for it (removed again
/// if it is dropped before [`Prepared::start`], i.e. the spawn failed) and what the forked
/// child applies ([`Exec`]).
#[derive(Debug)]
pub struct Prepared {
    limits: Limits,
    cgroup: Option<InstanceCgroup>,
    exec: Option<Exec>,
}

impl Prepared {
    /// Prepares `limits` for the instance `marker`: checks that `open_files_max` can be
    /// granted, and under cgroup v2 creates the instance cgroup when a tree limit is set. An
    /// error fails the spawn (PermissionDenied: the server goes to `failed`).
    pub fn new(limits: Limits, marker: &str) -> std::io::Result<Prepared> {
        if let Some(n) = limits.open_files_max {
            check_nofile(n)?;
        }
        let (cgroup, procs) = match cgroup_root() {
            Some(root) if limits.tree() => {
                let (cg, fd) =
                    InstanceCgroup::create(root, &cgroup::instance_name(marker), &limits)?;
                (Some(cg), Some(fd))
            }
            _ => (None, None),
        };
        let exec = (procs.is_some() || limits.open_files_max.is_some()).then_some(Exec {
            procs,
            nofile: limits.open_files_max,
        });
        Ok(Prepared {
            limits,
            cgroup,
            exec,
        })
    }

    /// The limits of an instance that already runs (adopted across an upgrade, or re-adopted
    /// after a crash; issue 32): its cgroup, found by the marker's name under the cgroup root
    /// and set to `limits` as they are now, or none (the tree is then sampled through
    /// `/proc`). `open_files_max` is not applied again: the kernel kept the instance's.
    pub fn adopt(limits: Limits, marker: &str) -> Prepared {
        let cgroup = match cgroup_root() {
            Some(root) if limits.tree() => {
                let dir = root.join(cgroup::instance_name(marker));
                dir.is_dir()
                    .then_some(InstanceCgroup { dir })
                    .filter(|cg| match cg.configure(&limits) {
                        Ok(_) => true,
                        Err(e) => {
                            tracing::warn!(error = %e, "the adopted instance's cgroup cannot be set to its limits; they are enforced by sampling /proc");
                            false
                        }
                    })
            }
            _ => None,
        };
        Prepared {
            limits,
            cgroup,
            exec: None,
        }
    }

    /// What the forked child must apply, if anything (taken once).
    pub fn take_exec(&mut self) -> Option<Exec> {
        self.exec.take()
    }

    /// The spawn succeeded: the guard of the running instance (leader `pgid`, its `marker`
    /// and start time `since`); notes of limit kills go to `tail`.
    pub fn start(
        mut self,
        server: &str,
        pgid: i32,
        marker: &str,
        since: u64,
        tail: StderrTail,
    ) -> Guard {
        Guard(Arc::new(Shared {
            server: server.to_string(),
            limits: self.limits,
            cgroup: self.cgroup.take(),
            pgid,
            marker: marker.to_string(),
            since,
            tail,
            state: Mutex::default(),
        }))
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            // The spawn failed: nothing runs in it.
            let _ = std::fs::remove_dir(&cg.dir);
        }
    }
}

/// Whether the child may get `RLIMIT_NOFILE` = `n`: at most our own hard limit unless we are
/// root, and at most `fs.nr_open` (setrlimit(2), EPERM).
fn check_nofile(n: u64) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into an initialised struct.
    let hard = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_max
    } else {
        u64::MAX
    };
    if n > hard && !nix::unistd::geteuid().is_root() {
        return Err(Error::new(ErrorKind::PermissionDenied, format!("open_files_max = {n} is above the supervisor's own hard limit of open files ({hard}); raise it (systemd: LimitNOFILE=) or lower open_files_max")));
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    if let Some(max) = nr_open.filter(|max| n > *max) {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("open_files_max = {n} is above the kernel's fs.nr_open ({max})"),
        ));
    }
    Ok(())
}

/// What the watchdog found, shared with status and the watcher.
#[derive(Debug, Default)]
struct State {
    /// The limit the watchdog killed the tree for.
    kill: Option<LimitKill>,
    /// The last sample.
    usage: Option<Usage>,
}

#[derive(Debug)]
struct Shared {
    server: String,
    limits: Limits,
    cgroup: Option<InstanceCgroup>,
    pgid: i32,
    marker: String,
    since: u64,
    tail: StderrTail,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain data, updated in single assignments: a poisoned lock is used as it is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One sample (blocking: reads `/proc` or the cgroup); over a limit, the kill. Returns
    /// the limit the tree was killed for.
    fn sample(&self) -> Option<LimitKill> {
        let (usage, procs) = match &self.cgroup {
            Some(cg) => (cg.usage(), Vec::new()),
            None => {
                let procs = procfs::tree(self.pgid, &self.marker, self.since);
                (procfs::usage(&procs), procs)
            }
        };
        self.state().usage = Some(usage);
        let over = |max: Option<u64>, used: u64| max.is_some_and(|m| used > m);
        let kill = match &self.cgroup {
            // The kernel enforces memory.max; a refused fork means the tree wanted more tasks.
            Some(cg) if self.limits.tasks_max.is_some() && cg.events().pids_max > 0 => {
                Some(LimitKill::TasksLimit)
            }
            Some(_) => None,
            None if over(self.limits.memory_max, usage.memory_bytes) => {
                Some(LimitKill::MemoryLimit)
            }
            None if over(self.limits.tasks_max, usage.tasks) => Some(LimitKill::TasksLimit),
            None => None,
        }?;
        self.state().kill = Some(kill);
        let note = match kill {
            LimitKill::MemoryLimit => format!(
                "memory {} bytes is over memory_max {}",
                usage.memory_bytes,
                self.limits.memory_max.unwrap_or(0)
            ),
            _ if self.cgroup.is_some() => format!(
                "a fork was refused at tasks_max {}",
                self.limits.tasks_max.unwrap_or(0)
            ),
            _ => format!(
                "{} tasks is over tasks_max {}",
                usage.tasks,
                self.limits.tasks_max.unwrap_or(0)
            ),
        };
        warn!(
            reason = kill.reason(),
            "{note}: killing the child's process tree"
        );
        self.tail
            .note(&format!("mcp-supervisor: {}: {note}", kill.reason()));
        match &self.cgroup {
            Some(cg) => cg.kill(),
            None => {
                let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
                for p in &procs {
                    let _ = signal::kill(Pid::from_raw(p.pid), Signal::SIGKILL);
                }
            }
        }
        Some(kill)
    }
}

/// The limits of a running instance: the watchdog ([`Guard::enforce`]), the verdict on its
/// exit ([`Guard::verdict`]) and the cleanup of its cgroup ([`Guard::cleanup`]). Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct Guard(Arc<Shared>);

impl Guard {
    /// The last sample, for status.
    pub fn usage(&self) -> Option<Usage> {
        self.0.state().usage
    }

    /// Samples the tree every [`LIMIT_SAMPLE`] (on a blocking thread) until a limit is
    /// exceeded, kills the tree and returns that limit. Never returns without a tree limit.
    pub async fn enforce(&self) -> LimitKill {
        if !self.0.limits.tree() {
            return std::future::pending().await;
        }
        let start = base::deadline::after_tokio(tokio::time::Instant::now(), LIMIT_SAMPLE);
        let mut tick = tokio::time::interval_at(start, LIMIT_SAMPLE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (shared, span) = (self.0.clone(), tracing::Span::current());
            let sampled = tokio::task::spawn_blocking(move || span.in_scope(|| shared.sample()));
            if let Ok(Some(kill)) = sampled.await {
                return kill;
            }
        }
    }

    /// After the leader was reaped with `exit`: the limit that ended the instance, if one
    /// did: the watchdog's kill, or under cgroup v2 an OOM kill by the kernel
    /// (`oom-killed`) or a fork refused by `pids.max` before a failed exit (`tasks-limit`).
    /// Counted in the metrics and logged.
    pub async fn verdict(&self, exit: &Exit) -> Option<LimitKill> {
        let flagged = self.0.state().kill;
        let kill = match flagged {
            Some(k) => Some(k),
            None if self.0.cgroup.is_some() && !exit.clean() => {
                let shared = self.0.clone();
                let events = tokio::task::spawn_blocking(move || {
                    shared.cgroup.as_ref().map(InstanceCgroup::events)
                })
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
                if events.oom_kill > 0 {
                    Some(LimitKill::OomKilled)
                } else if events.pids_max > 0 && self.0.limits.tasks_max.is_some() {
                    Some(LimitKill::TasksLimit)
                } else {
                    None
                }
            }
            None => None,
        }?;
        if flagged.is_none() {
            let note = match kill {
                LimitKill::OomKilled => format!(
                    "the kernel's OOM killer ended the child's cgroup at memory_max {}",
                    self.0.limits.memory_max.unwrap_or(0)
                ),
                _ => format!(
                    "forks were refused at tasks_max {}",
                    self.0.limits.tasks_max.unwrap_or(0)
                ),
            };
            warn!(reason = kill.reason(), "{note}");
            self.0
                .tail
                .note(&format!("mcp-supervisor: {}: {note}", kill.reason()));
        }
        support::observe::metrics().limit_kill(&self.0.server, kill.reason());
        Some(kill)
    }

    /// After the instance ended (blocking): kills what is left in its cgroup and removes it.
    pub fn cleanup(&self) {
        if let Some(cg) = &self.0.cgroup {
            cg.remove(CGROUP_REMOVE_WITHIN);
        }
    }
}
