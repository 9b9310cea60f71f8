//! The outage vocabulary (issue 27 §4, §7; design.md §6): what a client's outage record
//! (docs/book/src/reference/errors.md) says, as types. [`OutageStatus`] is the record's
//! `status` (the state the source was in); [`Reason`] is why, written as today's `reason` text
//! and, for dashboards and evals, as a stable `class` and `detail` ([`Class`],
//! [`Reason::detail`]). Later upstreams (remote servers, endpoints) add variants here; the wire
//! strings of today's never change.

use serde::Serialize;
use std::time::Duration;
use upstream::Exit;
use upstream::{Refusal, Unreachable};

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
    /// Up, but this request could not be served: a remote server's bare HTTP error status
    /// (issue 29), or an answer too large or too deep to relay (issue 47 §7).
    Ready,
    /// A url server refused the credential at the handshake; waiting for the operator.
    #[serde(rename = "auth_required")]
    AuthRequired,
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
            OutageStatus::Ready => "ready",
            OutageStatus::AuthRequired => "auth_required",
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
    /// A remote server refused the credential (HTTP 401/403) at the handshake (issue 29).
    AuthFailed,
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
            StopCause::AuthFailed => "auth-failed",
        }
    }
}

/// Why an instance ended, as `last_exit.reason` in `status` and the outage record's `reason`
/// show it (docs/book/src/reference/errors.md): its own exit, the supervisor's cause, or
/// both. Serialized as that text.
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
    /// It never ran: the spawn failed (or a remote session could not be set up).
    SpawnError,
    /// A remote server could not be reached (`unreachable(dns)`, `unreachable(tls)`, ...).
    Unreachable(Unreachable),
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
            ExitReason::Timeout(_) | ExitReason::SpawnError | ExitReason::Unreachable(_) => None,
        }
    }
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitReason::Exit(e) => f.write_str(&e.reason()),
            ExitReason::Timeout(c) => f.write_str(c.reason()),
            // A remote session has no exit status: the cause says it all.
            ExitReason::Stopped(c, e)
                if e.code.is_none() && e.signal.is_none() && e.limit.is_none() =>
            {
                f.write_str(c.reason())
            }
            ExitReason::Stopped(c, e) => write!(f, "{} {}", c.reason(), e.reason()),
            ExitReason::Unreachable(u) => write!(f, "unreachable({})", u.as_str()),
            ExitReason::SpawnError => f.write_str("spawn-error"),
        }
    }
}

impl Serialize for ExitReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ExitReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// An exit reason read back from its text (an upgrade's hand-over record carries the last
/// exit, issue 32 §1): `parse(r.to_string()).to_string() == r.to_string()` for every reason;
/// what the text does not say (whether a stop was asked for, stop and shutdown, which both
/// read `stopped`) is not recovered. Errors: text no reason writes.
impl std::str::FromStr for ExitReason {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("not an exit reason: {text:?}");
        let quiet = Exit {
            code: None,
            signal: None,
            requested: true,
            limit: None,
        };
        match text {
            "spawn-error" => return Ok(ExitReason::SpawnError),
            "start-timeout" => return Ok(ExitReason::Timeout(StopCause::StartTimeout)),
            "probe-timeout" => return Ok(ExitReason::Timeout(StopCause::ProbeTimeout)),
            _ => {}
        }
        if let Some(u) = text
            .strip_prefix("unreachable(")
            .and_then(|r| r.strip_suffix(')'))
        {
            return Unreachable::ALL
                .into_iter()
                .find(|x| x.as_str() == u)
                .map(ExitReason::Unreachable)
                .ok_or_else(bad);
        }
        match text.split_once(' ') {
            Some((cause, exit)) => {
                let cause = cause_named(cause).ok_or_else(bad)?;
                let exit = exit_named(exit).ok_or_else(bad)?;
                Ok(ExitReason::Stopped(
                    cause,
                    Exit {
                        requested: true,
                        ..exit
                    },
                ))
            }
            None => match cause_named(text) {
                Some(cause) => Ok(ExitReason::Stopped(cause, quiet)),
                None => exit_named(text).map(ExitReason::Exit).ok_or_else(bad),
            },
        }
    }
}

/// The stop cause whose [`StopCause::reason`] is `text` (`stopped` reads as the operator's
/// stop), never a timeout (those are [`ExitReason::Timeout`]).
fn cause_named(text: &str) -> Option<StopCause> {
    [
        StopCause::StdinFailed,
        StopCause::StdoutClosed,
        StopCause::HandshakeRejected,
        StopCause::Stop,
        StopCause::Restart,
        StopCause::Idle,
        StopCause::AuthFailed,
    ]
    .into_iter()
    .find(|c| c.reason() == text)
}

/// The exit [`Exit::reason`] writes as `text`.
fn exit_named(text: &str) -> Option<Exit> {
    let mut exit = Exit {
        code: None,
        signal: None,
        requested: false,
        limit: None,
    };
    if let Some(limit) = [
        upstream::LimitKill::OomKilled,
        upstream::LimitKill::MemoryLimit,
        upstream::LimitKill::TasksLimit,
    ]
    .into_iter()
    .find(|l| l.reason() == text)
    {
        exit.limit = Some(limit);
        return Some(exit);
    }
    if text == "exited(unknown)" {
        return Some(exit);
    }
    if let Some(code) = text
        .strip_prefix("exited(")
        .and_then(|r| r.strip_suffix(')'))
    {
        exit.code = Some(code.parse().ok()?);
        return Some(exit);
    }
    let name = text.strip_prefix("signal(")?.strip_suffix(')')?;
    exit.signal = Some(match name.parse::<i32>() {
        Ok(n) => n,
        Err(_) => name.parse::<nix::sys::signal::Signal>().ok()? as i32,
    });
    Some(exit)
}

/// Why a request could not be served: the `reason` of an outage record, and its class and
/// detail. Each variant writes today's `reason` text (docs/book/src/reference/errors.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The instance ended, or could not be started: the last exit's reason.
    Ended(ExitReason),
    /// The supervisor is stopping the instance for this cause (the exit follows).
    Stopping(StopCause),
    /// The supervisor is stopping an instance that did not answer its handshake within this
    /// long (`start-timeout: no answer to the handshake within 30s`).
    StartTimeout(Duration),
    /// The request's own deadline, this long, passed (`no response within 30s`).
    Deadline(Duration),
    /// The queue of requests waiting for the source was full with this many (`queue_limit`).
    QueueFull(usize),
    /// A client's `initialize` waited for a source that never answered its own handshake.
    Unanswered,
    /// Nothing to add to the state (`reason` repeats the status).
    State(OutageStatus),
    /// A remote server answered the request with a bare HTTP status (`HTTP 401`, `HTTP 429`,
    /// `HTTP 503`), or its response stream broke before the answer (status 0).
    Http(Refusal),
    /// The upstream's answer was over `max_message_size`: its length and the limit, in bytes
    /// (issue 47 §7).
    TooLarge {
        /// The answer's length.
        bytes: usize,
        /// `max_message_size`.
        limit: usize,
    },
    /// The upstream's answer nested deeper than `max_message_depth` (`limit`, in levels).
    TooDeep {
        /// `max_message_depth`.
        limit: usize,
    },
}

/// The stable class of an outage (design.md §6), written as `class` in the record: what kind
/// of failure (or non-failure) it is, whatever the upstream. Serialized as its snake_case
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// The instance ended by itself, by a limit's kill, or after a fault the supervisor
    /// stopped it for (a failed write, closed output, a refused handshake).
    Exited,
    /// A deadline passed: the handshake's, the probes', or the request's own.
    Timeout,
    /// The instance could not be started (a child's spawn failed).
    SpawnError,
    /// The operator or the daemon stopped it (stop, restart, reload, idle stop, shutdown).
    Stopped,
    /// The supervisor's bound on waiting requests was reached (`queue_limit`).
    QueueFull,
    /// No failure to name: the source is starting, waiting to retry, failed or idle, as the
    /// status says.
    Unavailable,
    /// A remote server could not be reached: DNS, TCP, TLS, a connect timeout, or a response
    /// stream that broke (the detail says which).
    Unreachable,
    /// A remote server refused the credential: HTTP 401 or 403.
    AuthFailed,
    /// A remote server asked to slow down: HTTP 429 (`retry_after` from `Retry-After`).
    RateLimited,
    /// A remote server answered with another error status and no JSON-RPC message (5xx, 4xx),
    /// or any upstream answered with a message that is never relayed (too large, too deep).
    UpstreamError,
}

impl Reason {
    /// Its class.
    pub fn class(&self) -> Class {
        match self {
            Reason::Ended(r) => match r {
                ExitReason::Exit(_) => Class::Exited,
                ExitReason::Timeout(_) => Class::Timeout,
                ExitReason::Stopped(c, _) => c.class(),
                ExitReason::SpawnError => Class::SpawnError,
                ExitReason::Unreachable(_) => Class::Unreachable,
            },
            Reason::Stopping(c) => c.class(),
            Reason::StartTimeout(_) | Reason::Deadline(_) => Class::Timeout,
            Reason::QueueFull(_) => Class::QueueFull,
            Reason::Unanswered | Reason::State(_) => Class::Unavailable,
            Reason::Http(r) => match r.status {
                0 => Class::Unreachable,
                401 | 403 => Class::AuthFailed,
                429 => Class::RateLimited,
                _ => Class::UpstreamError,
            },
            Reason::TooLarge { .. } | Reason::TooDeep { .. } => Class::UpstreamError,
        }
    }

    /// Its detail within the class, a short stable token: the exit (`exited(1)`,
    /// `signal(SIGKILL)`, `oom-killed`), the supervisor's cause (`start-timeout`,
    /// `stdin-failed`, `restart-requested`), `request` for a request's own deadline,
    /// `queue_limit`, `too_large` or `too_deep` for an answer never relayed, or the status.
    pub fn detail(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow;
        match self {
            Reason::Ended(ExitReason::Exit(e)) => Cow::Owned(e.reason()),
            Reason::Ended(ExitReason::Timeout(c) | ExitReason::Stopped(c, _))
            | Reason::Stopping(c) => Cow::Borrowed(c.reason()),
            Reason::Ended(ExitReason::SpawnError) => Cow::Borrowed("spawn-error"),
            Reason::Ended(ExitReason::Unreachable(u)) => Cow::Borrowed(u.as_str()),
            Reason::Http(Refusal { status: 0, .. }) => Cow::Borrowed("connection_dropped"),
            Reason::Http(r) => Cow::Owned(format!("http_{}", r.status)),
            Reason::StartTimeout(_) => Cow::Borrowed(StopCause::StartTimeout.reason()),
            Reason::Deadline(_) => Cow::Borrowed("request"),
            Reason::QueueFull(_) => Cow::Borrowed("queue_limit"),
            Reason::Unanswered => Cow::Borrowed("unanswered"),
            Reason::State(s) => Cow::Borrowed(s.as_str()),
            Reason::TooLarge { .. } => Cow::Borrowed("too_large"),
            Reason::TooDeep { .. } => Cow::Borrowed("too_deep"),
        }
    }
}

impl StopCause {
    /// The class of an outage this cause is behind.
    fn class(self) -> Class {
        match self {
            StopCause::StartTimeout | StopCause::ProbeTimeout => Class::Timeout,
            StopCause::StdinFailed | StopCause::StdoutClosed | StopCause::HandshakeRejected => {
                Class::Exited
            }
            StopCause::Shutdown | StopCause::Stop | StopCause::Restart | StopCause::Idle => {
                Class::Stopped
            }
            StopCause::AuthFailed => Class::AuthFailed,
        }
    }
}

/// `d` as the record's text says it: `250ms`, `30s`, `1.5s`.
pub fn format_secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Ended(r) => write!(f, "{r}"),
            Reason::Stopping(c) => f.write_str(c.reason()),
            Reason::StartTimeout(d) => write!(
                f,
                "start-timeout: no answer to the handshake within {}",
                format_secs(*d)
            ),
            Reason::Deadline(d) => write!(f, "no response within {}", format_secs(*d)),
            Reason::QueueFull(n) => write!(f, "{n} requests already waiting (queue_limit)"),
            Reason::Unanswered => f.write_str("no answer to initialize yet"),
            Reason::State(s) => f.write_str(s.as_str()),
            Reason::Http(Refusal { status: 0, .. }) => {
                f.write_str("the response stream broke before the answer")
            }
            Reason::Http(r) if (200..300).contains(&r.status) => {
                write!(f, "HTTP {} without an answer", r.status)
            }
            Reason::Http(r) => write!(f, "HTTP {}", r.status),
            Reason::TooLarge { bytes, limit } => write!(
                f,
                "an answer of {bytes} bytes, over max_message_size ({limit} bytes)"
            ),
            Reason::TooDeep { limit } => write!(
                f,
                "an answer nested deeper than max_message_depth ({limit} levels)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Class, Exit, ExitReason, OutageStatus, Reason, StopCause};
    use std::time::Duration;

    #[test]
    fn every_exit_reason_reads_back_from_its_text() {
        use upstream::LimitKill;
        use upstream::Unreachable;
        let mut exits = vec![];
        for code in [None, Some(0), Some(1), Some(-3), Some(255)] {
            for signal in [None, Some(9), Some(15), Some(64)] {
                for limit in [
                    None,
                    Some(LimitKill::OomKilled),
                    Some(LimitKill::TasksLimit),
                ] {
                    for requested in [false, true] {
                        exits.push(Exit {
                            code,
                            signal,
                            requested,
                            limit,
                        });
                    }
                }
            }
        }
        let mut reasons = vec![ExitReason::SpawnError];
        reasons.extend(Unreachable::ALL.into_iter().map(ExitReason::Unreachable));
        for c in [StopCause::StartTimeout, StopCause::ProbeTimeout] {
            reasons.push(ExitReason::Timeout(c));
        }
        for e in &exits {
            reasons.push(ExitReason::Exit(*e));
            for c in [
                StopCause::StdinFailed,
                StopCause::StdoutClosed,
                StopCause::HandshakeRejected,
                StopCause::Shutdown,
                StopCause::Stop,
                StopCause::Restart,
                StopCause::Idle,
                StopCause::AuthFailed,
            ] {
                reasons.push(ExitReason::Stopped(c, *e));
            }
        }
        for r in reasons {
            let text = r.to_string();
            let back: ExitReason = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.to_string(), text);
        }
        for bad in [
            "",
            "exited(x)",
            "signal(SIGNOPE)",
            "unreachable(moon)",
            "stopped exited",
            "x y z",
        ] {
            assert!(bad.parse::<ExitReason>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_reason_has_todays_text_a_class_and_a_detail() {
        let exit = |code, signal, requested| Exit {
            code,
            signal,
            requested,
            limit: None,
        };
        let s = Duration::from_secs;
        let cases = [
            (
                Reason::Ended(ExitReason::Exit(exit(Some(1), None, false))),
                "exited(1)",
                Class::Exited,
                "exited(1)",
            ),
            (
                Reason::Ended(ExitReason::Exit(exit(None, Some(9), false))),
                "signal(SIGKILL)",
                Class::Exited,
                "signal(SIGKILL)",
            ),
            (
                Reason::Ended(ExitReason::Timeout(StopCause::ProbeTimeout)),
                "probe-timeout",
                Class::Timeout,
                "probe-timeout",
            ),
            (
                Reason::Ended(ExitReason::Stopped(
                    StopCause::StdinFailed,
                    exit(Some(1), None, true),
                )),
                "stdin-failed exited(1)",
                Class::Exited,
                "stdin-failed",
            ),
            (
                Reason::Ended(ExitReason::Stopped(
                    StopCause::Restart,
                    exit(Some(0), None, true),
                )),
                "restart-requested exited(0)",
                Class::Stopped,
                "restart-requested",
            ),
            (
                Reason::Ended(ExitReason::SpawnError),
                "spawn-error",
                Class::SpawnError,
                "spawn-error",
            ),
            (
                Reason::Stopping(StopCause::HandshakeRejected),
                "handshake-rejected",
                Class::Exited,
                "handshake-rejected",
            ),
            (
                Reason::StartTimeout(s(30)),
                "start-timeout: no answer to the handshake within 30s",
                Class::Timeout,
                "start-timeout",
            ),
            (
                Reason::Deadline(Duration::from_millis(1500)),
                "no response within 1.5s",
                Class::Timeout,
                "request",
            ),
            (
                Reason::QueueFull(64),
                "64 requests already waiting (queue_limit)",
                Class::QueueFull,
                "queue_limit",
            ),
            (
                Reason::Unanswered,
                "no answer to initialize yet",
                Class::Unavailable,
                "unanswered",
            ),
            (
                Reason::State(OutageStatus::Backoff),
                "backoff",
                Class::Unavailable,
                "backoff",
            ),
            (
                Reason::TooLarge {
                    bytes: 9_000_000,
                    limit: 8_388_608,
                },
                "an answer of 9000000 bytes, over max_message_size (8388608 bytes)",
                Class::UpstreamError,
                "too_large",
            ),
            (
                Reason::TooDeep { limit: 127 },
                "an answer nested deeper than max_message_depth (127 levels)",
                Class::UpstreamError,
                "too_deep",
            ),
        ];
        for (reason, text, class, detail) in cases {
            assert_eq!(reason.to_string(), text);
            assert_eq!(reason.class(), class, "{text}");
            assert_eq!(reason.detail(), detail, "{text}");
        }
        assert_eq!(
            serde_json::to_value(Class::SpawnError).ok(),
            Some(serde_json::json!("spawn_error"))
        );
    }

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
