//! The outage vocabulary (issue 27 §7): what a client's outage record (README "Errors") says
//! in its `status` field, as a type. Later upstreams (remote servers, endpoints) add variants
//! here; the wire strings of today's variants never change.

use crate::child::process::Exit;
use serde::Serialize;

/// The `status` of an outage record: the state the source was in when the request could not
/// be served, or what ended it. Serialized as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutageStatus {
    /// The child exited while the request was in flight (or its input had closed).
    Exited,
    /// A deadline passed: the request's own, or the start or probe timeout the supervisor
    /// is stopping the child for.
    Timeout,
    /// The child is being spawned or has not answered its handshake yet.
    Starting,
    /// Waiting to spawn again after an exit.
    Backoff,
    /// Given up (permanent error, too many failed starts, a panicking actor).
    Failed,
    /// Stopped by the operator or the daemon (or being stopped).
    Stopped,
    /// Not running, by design (on demand, after an idle stop).
    Idle,
}

impl OutageStatus {
    /// The wire string (`status` in records, the log and tool-result text).
    pub fn as_str(self) -> &'static str {
        match self {
            OutageStatus::Exited => "exited",
            OutageStatus::Timeout => "timeout",
            OutageStatus::Starting => "starting",
            OutageStatus::Backoff => "backoff",
            OutageStatus::Failed => "failed",
            OutageStatus::Stopped => "stopped",
            OutageStatus::Idle => "idle",
        }
    }
}

impl std::fmt::Display for OutageStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the supervisor itself stopped the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// No answer to the handshake within `start_timeout`.
    StartTimeout,
    /// Probes unanswered past the health rules.
    ProbeTimeout,
    /// A write to its stdin failed or stalled.
    StdinFailed,
    /// It closed stdout and did not exit.
    StdoutClosed,
    /// It refused the handshake (or speaks no version we support).
    HandshakeRejected,
    /// The daemon is shutting down.
    Shutdown,
    /// The operator's `stop`.
    Stop,
    /// The operator's `restart`, a reload or a changed configuration.
    Restart,
    /// `idle_stop` passed with nobody using the child (issue 18 §2): not a failure.
    Idle,
}

impl StopCause {
    /// Its name in `reason` fields and logs.
    pub fn reason(self) -> &'static str {
        match self {
            StopCause::StartTimeout => "start-timeout",
            StopCause::ProbeTimeout => "probe-timeout",
            StopCause::StdinFailed => "stdin-failed",
            StopCause::StdoutClosed => "stdout-closed",
            StopCause::HandshakeRejected => "handshake-rejected",
            StopCause::Shutdown | StopCause::Stop => "stopped",
            StopCause::Restart => "restart-requested",
            StopCause::Idle => "idle-stop",
        }
    }
}

/// Why an instance ended, as `last_exit.reason` in `status` and the outage record's `reason`
/// show it (README "Errors"): its own exit, the supervisor's cause, or both. Serialized as
/// that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// It ended by itself (or by a limit's kill): `exited(N)`, `signal(NAME)`, `oom-killed`,
    /// `memory-limit`, `tasks-limit`.
    Exit(Exit),
    /// The supervisor stopped it for a deadline, which says it all: `start-timeout`,
    /// `probe-timeout`.
    Timeout(StopCause),
    /// The supervisor stopped it for a cause, then it exited: `stdin-failed exited(1)`,
    /// `restart-requested signal(SIGTERM)`.
    Stopped(StopCause, Exit),
    /// It never ran: the spawn failed.
    SpawnError,
}

impl ExitReason {
    /// The reason of `exit`, which the supervisor caused with `cause`, if it did. An exit the
    /// supervisor did not ask for is the child's own, whatever stop was under way.
    pub fn of(cause: Option<StopCause>, exit: Exit) -> ExitReason {
        match cause {
            _ if !exit.requested => ExitReason::Exit(exit),
            Some(c @ (StopCause::StartTimeout | StopCause::ProbeTimeout)) => ExitReason::Timeout(c),
            Some(c) => ExitReason::Stopped(c, exit),
            None => ExitReason::Exit(exit),
        }
    }

    /// The exit itself, if there was one.
    pub fn exit(&self) -> Option<Exit> {
        match self {
            ExitReason::Exit(e) | ExitReason::Stopped(_, e) => Some(*e),
            ExitReason::Timeout(_) | ExitReason::SpawnError => None,
        }
    }
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitReason::Exit(e) => f.write_str(&e.reason()),
            ExitReason::Timeout(c) => f.write_str(c.reason()),
            ExitReason::Stopped(c, e) => write!(f, "{} {}", c.reason(), e.reason()),
            ExitReason::SpawnError => f.write_str("spawn-error"),
        }
    }
}

impl Serialize for ExitReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::{Exit, ExitReason, OutageStatus, StopCause};

    #[test]
    fn exit_reasons_read_as_documented() {
        let exit = |code, signal, requested| Exit {
            code,
            signal,
            requested,
            limit: None,
        };
        let cases = [
            (None, exit(Some(1), None, false), "exited(1)"),
            (None, exit(None, Some(9), false), "signal(SIGKILL)"),
            (
                Some(StopCause::StartTimeout),
                exit(None, Some(15), true),
                "start-timeout",
            ),
            (
                Some(StopCause::ProbeTimeout),
                exit(None, Some(9), true),
                "probe-timeout",
            ),
            (
                Some(StopCause::StdinFailed),
                exit(Some(1), None, true),
                "stdin-failed exited(1)",
            ),
            (
                Some(StopCause::Restart),
                exit(Some(0), None, true),
                "restart-requested exited(0)",
            ),
            // Not asked for: the child's own exit, whatever stop was under way.
            (
                Some(StopCause::Stop),
                exit(Some(3), None, false),
                "exited(3)",
            ),
        ];
        for (cause, exit, want) in cases {
            let r = ExitReason::of(cause, exit);
            assert_eq!(r.to_string(), want);
            assert_eq!(serde_json::to_value(r).ok(), Some(serde_json::json!(want)));
        }
        assert_eq!(ExitReason::SpawnError.to_string(), "spawn-error");
    }

    #[test]
    fn the_wire_names_are_the_documented_ones() {
        use OutageStatus::*;
        for s in [Exited, Timeout, Starting, Backoff, Failed, Stopped, Idle] {
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(serde_json::Value::String(s.as_str().into()))
            );
        }
    }
}
