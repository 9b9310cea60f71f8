//! The tree limits without a cgroup (issue 18 §3): an instance's processes found in `/proc`
//! and their memory and tasks summed. Blocking (it reads `/proc`): called on a blocking
//! thread by the watchdog ([`super::Guard::enforce`]).

use super::Usage;
use base::reaper::{self, Proc, MARKER_VAR};

/// The live processes of an instance: its process group `pgid` (the leader's), the processes
/// carrying its `marker` that were reparented to the supervisor (a subreaper) or to init (they
/// left the group and lost their parent), and all their descendants. `since` (the leader's
/// start, clock ticks since boot) skips older processes without reading their environment.
/// Zombies and the supervisor itself are left out.
pub fn tree(pgid: i32, marker: &str, since: u64) -> Vec<Proc> {
    let me = std::process::id() as i32;
    let entry = format!("{MARKER_VAR}={marker}");
    let procs: Vec<Proc> = reaper::all()
        .into_iter()
        .filter(|p| p.state != b'Z' && p.pid != me)
        .collect();
    reaper::with_descendants(&procs, |p| {
        p.pgid == pgid
            || (p.start >= since
                && (p.ppid == me || p.ppid == 1)
                && reaper::environ_has(p.pid, entry.as_bytes(), false))
    })
}

/// The resident set size, in pages, and the number of threads of one `/proc/PID/stat` line
/// (proc(5): field 20 `num_threads`, field 24 `rss`; counted after the last `)`, since `comm`
/// may hold spaces and parentheses).
pub fn parse_stat_usage(line: &str) -> Option<(u64, u64)> {
    let rest = line.get(line.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After `)`: field 3 (state) is index 0.
    let threads = fields.get(20 - 3)?.parse().ok()?;
    let rss = fields.get(24 - 3)?.parse().ok()?;
    Some((rss, threads))
}

/// The bytes of a page (`sysconf(_SC_PAGESIZE)`; 4096 if it cannot say).
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|n| *n > 0).unwrap_or(4096)
}

/// The memory (sum of resident set sizes: pages shared between processes count once per
/// process, so this errs high) and tasks (threads, each process counting at least one) of
/// `procs`. A process that exited meanwhile counts nothing.
pub fn usage(procs: &[Proc]) -> Usage {
    let page = page_size();
    let mut u = Usage::default();
    for p in procs {
        let Ok(line) = std::fs::read_to_string(format!("/proc/{}/stat", p.pid)) else {
            continue;
        };
        if let Some((rss, threads)) = parse_stat_usage(&line) {
            u.memory_bytes = u.memory_bytes.saturating_add(rss.saturating_mul(page));
            u.tasks = u.tasks.saturating_add(threads.max(1));
        }
    }
    u
}
