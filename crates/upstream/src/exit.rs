//! How an instance ended, in the words of status, logs and outage records: an exit code, a
//! signal, or a resource limit's kill. Plain values; the process side fills them in.

use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Terminating signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// Whether the supervisor asked for the stop.
    pub requested: bool,
    /// The resource limit that ended it, if one did (issue 18 §3): its reason replaces the
    /// signal's.
    pub limit: Option<LimitKill>,
}

impl Exit {
    /// The exit of a process that ended with status `s`.
    pub fn from_status(s: ExitStatus, requested: bool) -> Self {
        Exit {
            code: s.code(),
            signal: s.signal(),
            requested,
            limit: None,
        }
    }

    /// `exited(1)`, `signal(SIGKILL)`: the form used in logs, errors and status.
    /// A limit's kill is `oom-killed`, `memory-limit` or `tasks-limit`.
    pub fn reason(&self) -> String {
        if let Some(l) = self.limit {
            return l.reason().into();
        }
        match (self.code, self.signal) {
            (Some(c), _) => format!("exited({c})"),
            (_, Some(s)) => format!("signal({})", signal_name(s)),
            // A re-adopted child's (issue 32 §2), or a failed wait.
            _ => "exited(unknown)".into(),
        }
    }

    /// A clean exit: code 0, or a stop signal the supervisor itself sent (R8), or an unknown
    /// status after a stop the supervisor asked for. A limit's kill never is, even during a
    /// stop.
    pub fn clean(&self) -> bool {
        let stop_signal = matches!(self.signal, Some(s) if s == libc::SIGTERM || s == libc::SIGKILL || s == libc::SIGINT || s == libc::SIGPIPE);
        let unknown = self.code.is_none() && self.signal.is_none();
        self.limit.is_none()
            && (self.code == Some(0) || (self.requested && (stop_signal || unknown)))
    }
}

/// `SIGKILL` for 9, or the number when unknown.
pub fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| sig.to_string())
}

/// Why a limit ended a child: the `reason` of status, outage records and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKill {
    /// cgroup v2: the kernel's OOM killer ended the instance (`memory.events` `oom_kill`).
    OomKilled,
    /// No cgroup: the supervisor killed the tree over `memory_max` (sum of RSS).
    MemoryLimit,
    /// The tree reached for more than `tasks_max` tasks: counted over it (no cgroup), or a
    /// fork refused by `pids.max` (cgroup v2); the supervisor killed the tree.
    TasksLimit,
}

impl LimitKill {
    /// `oom-killed`, `memory-limit` or `tasks-limit`.
    pub fn reason(self) -> &'static str {
        match self {
            LimitKill::OomKilled => "oom-killed",
            LimitKill::MemoryLimit => "memory-limit",
            LimitKill::TasksLimit => "tasks-limit",
        }
    }
}
