//! The supervisor as a reaper (issue 17 §1): PID 1 of a container, or a child subreaper
//! outside one, and the cleanup of descendants that escaped a child's process group.
//!
//! **Roles.** As PID 1 ([`Role::Init`]) every orphan of the PID namespace is reparented to
//! us; outside a PID namespace we mark ourselves a child subreaper (`PR_SET_CHILD_SUBREAPER`,
//! prctl(2)), so an orphaned descendant of one of our children (an `npx` grandchild whose
//! launcher died, a helper that called `setsid`) is reparented to us instead of to the
//! host's init ([`Role::Subreaper`]). Either way we must reap those adopted processes, or
//! they stay zombies.
//!
//! **Reaping without stealing tokio's children.** tokio reaps the children it spawned
//! (`Child::wait`, by pid); a `waitpid(-1)` here would take their exit status and tokio
//! would report a spurious `ECHILD` (supervision.md §4.4, djinn #2700). So this module never
//! waits for "any child": it lists our zombie children in `/proc` and reaps, by pid, only
//! those that are **not** in the table of pids tokio owns ([`spawn_guard`], [`disown`]). A
//! spawn holds the table's lock from `fork` until its pid is recorded, so a child that dies
//! at once is never taken for an orphan. The sweep runs on every `SIGCHLD` and every 10 s
//! (a safety net), on a blocking thread.
//!
//! **Escaped descendants.** Every child gets `MCP_SUPERVISOR_INSTANCE=<token>:<n>:<server>`
//! in its environment ([`marker`]; `token` is random per supervisor process, so several
//! supervisors on one host never touch each other's processes). Descendants inherit it,
//! whatever process group or session they move to. When an instance ends (its leader exited
//! or was stopped), [`kill_escaped`] SIGKILLs every process that carries its marker, and
//! their descendants, after the usual `killpg` of its group (R14); the stop ladder's SIGTERM
//! step also reaches them ([`signal_escaped`]). A process that cleared its environment and
//! whose marked ancestors are gone cannot be attributed; as subreaper or PID 1 it is ours
//! anyway and [`finish`] kills it when the supervisor stops. Found escapees are logged (R28).
//!
//! `/proc` is read directly (`stat`, `environ`); a pid read there may exit and, in theory, be
//! reused before the signal is sent: the window is a few microseconds and the marker was
//! read from that pid, so the risk is accepted, as `pkill` accepts it.

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tracing::{debug, info, warn};

/// The environment variable that marks a child instance and its descendants.
pub const MARKER_VAR: &str = "MCP_SUPERVISOR_INSTANCE";

/// How often the orphan sweep runs without a `SIGCHLD`: only a safety net, since the kernel
/// signals the new parent also when it reparents an orphan that is already a zombie.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// What the supervisor is to the processes below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// PID 1 of its PID namespace (a container's entrypoint): every orphan comes to us.
    Init,
    /// A child subreaper: orphaned descendants of our children come to us.
    Subreaper,
    /// Neither (subreaper turned off, or the kernel refused): orphans go to the host's init.
    Plain,
}

impl Role {
    /// Whether orphans are reparented to us (so we must reap them).
    pub fn adopts(self) -> bool {
        !matches!(self, Role::Plain)
    }

    /// `init`, `subreaper` or `plain`, as logs and status show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Init => "init",
            Role::Subreaper => "subreaper",
            Role::Plain => "plain",
        }
    }
}

static ROLE: OnceLock<Role> = OnceLock::new();

/// Takes the role once, at daemon start: PID 1 is [`Role::Init`]; otherwise, with
/// `subreaper` (config `[supervisor] subreaper`, default on), `PR_SET_CHILD_SUBREAPER`. A
/// kernel refusal is logged and leaves [`Role::Plain`]. Later calls return the first role.
pub fn setup(subreaper: bool) -> Role {
    *ROLE.get_or_init(|| {
        if std::process::id() == 1 {
            return Role::Init;
        }
        if !subreaper {
            return Role::Plain;
        }
        match nix::sys::prctl::set_child_subreaper(true) {
            Ok(()) => Role::Subreaper,
            Err(e) => {
                warn!(error = %e, "cannot become a child subreaper; descendants that escape a child's process group will be reparented to init");
                Role::Plain
            }
        }
    })
}

/// The role taken by [`setup`] ([`Role::Plain`] before it).
pub fn role() -> Role {
    ROLE.get().copied().unwrap_or(Role::Plain)
}

static TOKEN: OnceLock<String> = OnceLock::new();
static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Random per supervisor process: the first part of every [`marker`].
pub fn token() -> &'static str {
    TOKEN.get_or_init(|| format!("{:016x}", rand::random::<u64>()))
}

/// Goes on with the previous image's token and instance count after an upgrade in place
/// (issue 32 §1): inherited children keep their markers, new ones never repeat them. Call it
/// before the first [`token`] or [`marker`].
pub fn resume(token: &str, instances: u64) {
    let _ = TOKEN.set(token.to_string());
    INSTANCES.fetch_max(instances, std::sync::atomic::Ordering::Relaxed);
}

/// Instances started so far (the next [`marker`] counts on from it).
pub fn instances() -> u64 {
    INSTANCES.load(std::sync::atomic::Ordering::Relaxed)
}

/// A fresh [`MARKER_VAR`] value for an instance of `server`: `<token>:<n>:<server>`, `n`
/// counting every instance this supervisor spawns. Never the generation: a server removed
/// by a reload and added back while the old actor still stops its child starts again at
/// generation 1, and the old instance's cleanup would then kill the new one.
pub fn marker(server: &str) -> String {
    let n = INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    format!("{}:{n}:{server}", token())
}

fn owned() -> &'static Mutex<FxHashSet<i32>> {
    static OWNED: OnceLock<Mutex<FxHashSet<i32>>> = OnceLock::new();
    OWNED.get_or_init(Default::default)
}

/// The table of pids tokio owns, locked. Hold it across `spawn` and insert the new pid
/// before dropping it, so the sweep never reaps a child that tokio will wait for.
pub fn spawn_guard() -> MutexGuard<'static, FxHashSet<i32>> {
    // A panic while the lock was held cannot leave the set inconsistent (inserts and
    // removes are single operations), so a poisoned lock is used as it is.
    owned().lock().unwrap_or_else(|p| p.into_inner())
}

/// Forgets `pid` once tokio has reaped it (after `Child::wait` returned).
pub fn disown(pid: u32) {
    spawn_guard().remove(&(pid as i32));
}

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    /// Parent's pid.
    pub ppid: i32,
    /// Process group id.
    pub pgid: i32,
    /// Session id.
    pub sid: i32,
    /// State letter (`R`, `S`, `Z`, ...).
    pub state: u8,
    /// Start time, in clock ticks since boot.
    pub start: u64,
    /// Command name (`comm`, at most 15 bytes).
    pub comm: String,
}

/// Parses one `/proc/PID/stat` line: `pid (comm) state ppid pgrp session ... starttime(22)`.
/// `comm` may hold spaces and parentheses, so the fields are taken after the **last** `)`.
pub fn parse_stat(line: &str) -> Option<Proc> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let pid = line.get(..open)?.trim().parse().ok()?;
    let comm = line.get(open + 1..close)?.to_string();
    let mut rest = line.get(close + 1..)?.split_ascii_whitespace();
    let state = *rest.next()?.as_bytes().first()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgid = rest.next()?.parse().ok()?;
    let sid = rest.next()?.parse().ok()?;
    // Fields 7..=21 (tty_nr .. itrealvalue), then 22: starttime.
    let start = rest.nth(15)?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgid,
        sid,
        state,
        start,
        comm,
    })
}

/// `/proc/PID/stat` of `pid`, if it exists.
pub fn stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// How long ago a process that started `since` clock ticks after boot (`/proc/PID/stat`'s
/// start time) started: `/proc/uptime` less `since` / `_SC_CLK_TCK`. `None` when `since` is
/// 0 (unknown), lies in the future, or `/proc/uptime` cannot be read. Used to give an adopted
/// child its real uptime (issue 32).
pub fn running_for(since: u64) -> Option<std::time::Duration> {
    if since == 0 {
        return None;
    }
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let up: f64 = text.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tck = if tck > 0 { tck as f64 } else { 100.0 };
    let age = up - since as f64 / tck;
    (age.is_finite() && age >= 0.0).then(|| std::time::Duration::from_secs_f64(age.min(1e9)))
}

/// Every process `/proc` lists (processes that vanish while listed are skipped). Empty when
/// `/proc` is not mounted.
pub fn all() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// Whether `/proc/PID/environ` holds exactly the entry `entry` (`NAME=value`), or, with
/// `prefix`, an entry starting with it. Unreadable (gone, or another user's) is `false`.
pub fn environ_has(pid: i32, entry: &[u8], prefix: bool) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    env.split(|b| *b == 0).any(|e| {
        if prefix {
            e.starts_with(entry)
        } else {
            e == entry
        }
    })
}

/// The processes among `procs` for which `pick` holds, plus all their descendants (by
/// parent pid), each once.
pub fn with_descendants(procs: &[Proc], pick: impl Fn(&Proc) -> bool) -> Vec<Proc> {
    let mut children: FxHashMap<i32, Vec<usize>> = FxHashMap::default();
    for (i, p) in procs.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    let mut seen = FxHashSet::default();
    let mut out = Vec::new();
    let mut stack: Vec<usize> = (0..procs.len())
        .filter(|&i| procs.get(i).is_some_and(&pick))
        .collect();
    while let Some(i) = stack.pop() {
        let Some(p) = procs.get(i) else { continue };
        if !seen.insert(p.pid) {
            continue;
        }
        out.push(p.clone());
        if let Some(kids) = children.get(&p.pid) {
            stack.extend(kids.iter().copied());
        }
    }
    out
}

/// The live processes of instance `marker` (see [`marker`]) and their descendants,
/// excluding zombies and ourselves. `since` (clock ticks since boot, the leader's start)
/// skips older processes without reading their environment.
pub fn marked(marker: &str, since: u64) -> Vec<Proc> {
    let entry = format!("{MARKER_VAR}={marker}");
    let me = std::process::id() as i32;
    let procs: Vec<Proc> = all()
        .into_iter()
        .filter(|p| p.state != b'Z' && p.pid != me)
        .collect();
    with_descendants(&procs, |p| {
        p.start >= since && environ_has(p.pid, entry.as_bytes(), false)
    })
}

/// Sends `sig` to every process of instance `marker` that is **outside** process group
/// `pgid` (the group itself gets `killpg`). Returns those processes.
pub fn signal_escaped(marker: &str, since: u64, pgid: i32, sig: Signal) -> Vec<Proc> {
    let escaped: Vec<Proc> = marked(marker, since)
        .into_iter()
        .filter(|p| p.pgid != pgid)
        .collect();
    for p in &escaped {
        // ESRCH: it exited meanwhile.
        let _ = kill(Pid::from_raw(p.pid), sig);
    }
    escaped
}

/// After instance `marker` (process group `pgid`) ended: SIGKILLs what is left of it
/// anywhere, looking again while new processes appear (a dying parent may fork), at most 5
/// rounds. Logs the processes that had left the group once each (R28). Returns how many were
/// killed.
pub fn kill_escaped(server: &str, marker: &str, since: u64, pgid: i32) -> usize {
    let mut killed: FxHashSet<i32> = FxHashSet::default();
    for _ in 0..5 {
        // A process just sent SIGKILL may not be a zombie yet: only new ones count.
        let fresh: Vec<Proc> = marked(marker, since)
            .into_iter()
            .filter(|p| !killed.contains(&p.pid))
            .collect();
        if fresh.is_empty() {
            break;
        }
        let escaped: Vec<String> = fresh
            .iter()
            .filter(|p| p.pgid != pgid)
            .map(|p| format!("{}({})", p.pid, p.comm))
            .collect();
        if !escaped.is_empty() {
            warn!(server, processes = %escaped.join(" "), "killing descendants that escaped the child's process group");
        }
        for p in &fresh {
            let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            killed.insert(p.pid);
        }
    }
    if role().adopts() {
        reap_orphans();
    }
    killed.len()
}

/// The name of the file in `socket_dir` that holds the running supervisor's [`token`] (issue
/// 32 §3).
pub const RUN_FILE: &str = "supervisor.run.json";

/// How long the processes a crashed run left get after SIGTERM before SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// Ends what a supervisor that died without stopping its children left running (issue 32 §3:
/// a child is never run twice at once): every process carrying a marker of run `token`, or
/// exactly one of the markers in `extra` (instances found in systemd's file descriptor store
/// when the token is unknown), and its descendants, gets SIGTERM, then SIGKILL after
/// [`LEFTOVER_GRACE`]. Call it with the socket directory's lock held (so that run is gone)
/// and before any child is spawned. Processes carrying exactly a marker in `keep` are
/// spared: the instances this run re-adopts (`child::fdstore`), with their descendants,
/// inside their process group or not. Returns the processes found (`pid(comm)`), for the
/// log.
pub fn end_previous_run(token: Option<&str>, extra: &[String], keep: &[String]) -> Vec<String> {
    let prefix = token.map(|t| format!("{MARKER_VAR}={t}:"));
    let exact: Vec<String> = extra.iter().map(|m| format!("{MARKER_VAR}={m}")).collect();
    let kept: Vec<String> = keep.iter().map(|m| format!("{MARKER_VAR}={m}")).collect();
    let me = std::process::id() as i32;
    let find = || -> Vec<Proc> {
        let procs: Vec<Proc> = all()
            .into_iter()
            .filter(|p| p.state != b'Z' && p.pid != me)
            .collect();
        with_descendants(&procs, |p| {
            prefix
                .as_ref()
                .is_some_and(|pre| environ_has(p.pid, pre.as_bytes(), true))
                || exact
                    .iter()
                    .any(|e| environ_has(p.pid, e.as_bytes(), false))
        })
        .into_iter()
        .filter(|p| !kept.iter().any(|k| environ_has(p.pid, k.as_bytes(), false)))
        .collect()
    };
    let found = find();
    if found.is_empty() {
        return Vec::new();
    }
    for p in &found {
        let _ = kill(Pid::from_raw(p.pid), Signal::SIGTERM);
    }
    let deadline = std::time::Instant::now() + LEFTOVER_GRACE;
    loop {
        let left = find();
        if left.is_empty() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            for p in &left {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if role().adopts() {
        reap_orphans();
    }
    found
        .iter()
        .map(|p| format!("{}({})", p.pid, p.comm))
        .collect()
}

/// Our children: from `/proc/self/task/*/children` (one small file per thread of ours), or,
/// when the kernel lacks those files (`CONFIG_PROC_CHILDREN`), from a scan of all of `/proc`.
pub fn children() -> Vec<Proc> {
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    let mut listed = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.filter_map(|t| t.ok()) {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                listed = true;
                pids.extend(
                    text.split_ascii_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    }
    if !listed {
        return all().into_iter().filter(|p| p.ppid == me).collect();
    }
    pids.into_iter()
        .filter_map(stat)
        .filter(|p| p.ppid == me)
        .collect()
}

/// Reaps our zombie children that tokio does not own (adopted orphans). Returns how many.
pub fn reap_orphans() -> usize {
    let zombies: Vec<Proc> = children().into_iter().filter(|p| p.state == b'Z').collect();
    if zombies.is_empty() {
        return 0;
    }
    let owned = spawn_guard();
    let mut reaped = 0;
    for p in zombies.iter().filter(|p| !owned.contains(&p.pid)) {
        match waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(status) => {
                reaped += 1;
                debug!(pid = p.pid, comm = %p.comm, ?status, "reaped an adopted process");
            }
            Err(e) => debug!(pid = p.pid, error = %e, "cannot reap an adopted process"),
        }
    }
    reaped
}

/// The orphan sweep: on every `SIGCHLD` and every [`SWEEP_EVERY`] until `stop`. A sweep
/// reads only our children's `stat` files ([`children`]). Only
/// useful when [`role`] adopts; returns at once otherwise.
pub async fn run(stop: tokio_util::sync::CancellationToken) {
    if !role().adopts() {
        return;
    }
    let mut chld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGCHLD; adopted processes are reaped every 10 s");
            None
        }
    };
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
            Some(()) = async { match chld.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {}
        }
        // Off the event loop: without `/proc/self/task/*/children` a sweep reads all of `/proc`.
        let _ = tokio::task::spawn_blocking(reap_orphans).await;
    }
}

/// At supervisor exit, after every child was stopped: SIGKILLs every process still
/// carrying one of our markers and, when we adopt, every child of ours tokio does not own
/// (with their descendants), then reaps for at most `within`. Returns how many were killed.
pub fn finish(within: Duration) -> usize {
    let me = std::process::id() as i32;
    let prefix = format!("{MARKER_VAR}={}:", token());
    let adopts = role().adopts();
    let owned: FxHashSet<i32> = spawn_guard().clone();
    let procs: Vec<Proc> = all()
        .into_iter()
        .filter(|p| p.state != b'Z' && p.pid != me)
        .collect();
    let left = with_descendants(&procs, |p| {
        (adopts && p.ppid == me && !owned.contains(&p.pid))
            || environ_has(p.pid, prefix.as_bytes(), true)
    });
    if !left.is_empty() {
        let list: Vec<String> = left
            .iter()
            .map(|p| format!("{}({})", p.pid, p.comm))
            .collect();
        info!(processes = %list.join(" "), "stopping: killing processes left by children");
    }
    for p in &left {
        let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
    }
    if adopts {
        let deadline = crate::deadline::after(std::time::Instant::now(), within);
        loop {
            reap_orphans();
            let waiting = children().iter().any(|p| !owned.contains(&p.pid));
            if !waiting || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    left.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_processs_running_time_comes_from_its_start_ticks() {
        let me = stat(std::process::id() as i32).expect("our own stat");
        let age = running_for(me.start).expect("an age");
        assert!(age < std::time::Duration::from_secs(24 * 3600), "{age:?}");
        assert_eq!(running_for(0), None);
        assert_eq!(running_for(u64::MAX), None);
    }

    #[test]
    fn stat_lines_parse_even_with_parentheses_and_spaces_in_the_name() {
        let line = "4242 (we(ird) name)) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let p = parse_stat(line).expect("parses");
        assert_eq!(p.pid, 4242);
        assert_eq!(p.comm, "we(ird) name)");
        assert_eq!(p.state, b'S');
        assert_eq!((p.ppid, p.pgid, p.sid), (17, 4242, 4242));
        assert_eq!(p.start, 987654);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("12 (x) S 1 2"), None);
    }

    #[test]
    fn our_own_stat_is_read() {
        let me = stat(std::process::id() as i32).expect("/proc/self");
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(all().iter().any(|p| p.pid == me.pid));
    }

    #[test]
    fn children_lists_a_child_and_its_zombie_until_it_is_reaped() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let zombie = children().iter().any(|p| p.pid == pid && p.state == b'Z');
            if zombie {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no zombie child {pid}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().expect("reaped");
        assert!(!children().iter().any(|p| p.pid == pid));
    }

    #[test]
    fn descendants_are_collected_once_through_every_generation() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            pgid: pid,
            sid: pid,
            state: b'S',
            start: 0,
            comm: String::new(),
        };
        let procs = vec![
            p(10, 1),
            p(11, 10),
            p(12, 11),
            p(13, 1),
            p(14, 12),
            p(15, 13),
        ];
        let mut got: Vec<i32> = with_descendants(&procs, |x| x.pid == 10 || x.pid == 11)
            .iter()
            .map(|x| x.pid)
            .collect();
        got.sort();
        assert_eq!(got, vec![10, 11, 12, 14]);
    }

    #[test]
    fn markers_differ_by_instance_and_share_the_supervisor_token() {
        let a = marker("cua");
        let b = marker("cua");
        assert_ne!(a, b);
        assert!(a.starts_with(token()) && b.starts_with(token()));
        assert!(a.ends_with(":cua"));
    }
}
