//! Logging setup (`[supervisor] log_format`, [`init`]): journald when our stderr is the
//! journal (`JOURNAL_STREAM` matches stderr's `dev:ino`, R22); JSON lines on stderr when asked
//! or when we run as a container's PID 1 or in a Kubernetes pod (issue 17 §3); otherwise
//! human-readable text on stderr, with ANSI colours only when stderr is a terminal
//! (`NO_COLOR` turns them off there too). Level from `RUST_LOG`, default `info`.
//!
//! Journal fields (issue 7 §6, R22): event and span fields are written under their own names,
//! upper-cased, with no `F_` prefix (`with_field_prefix(None)`), so the actor span's `server`
//! becomes `SERVER=cua` on every line about that server and an event's `message_id`,
//! `child_pid`, `restart_n`, `exit_code`, `signal`, `reason` become `MESSAGE_ID=`, `CHILD_PID=`,
//! `RESTART_N=`, `EXIT_CODE=`, `SIGNAL=`, `REASON=`. Lifecycle events carry one of the fixed
//! `MSG_*` ids below, so `journalctl MESSAGE_ID=<id>` finds every such event.

pub mod requests;

use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

pub use crate::config::LogFormat;

/// `MESSAGE_ID` of "spawned": a child process was started (`CHILD_PID`, `RESTART_N`).
pub const MSG_SPAWNED: &str = "1cde23195b07479bbeaa39bf488f9760";
/// `MESSAGE_ID` of "ready": the child answered `initialize` (`CHILD_PID`, `RESTART_N`).
pub const MSG_READY: &str = "cb9d1f7de4d747b58c4ab0a65b3b5a16";
/// `MESSAGE_ID` of "exited": the child exited or was stopped (`CHILD_PID`, `EXIT_CODE` or
/// `SIGNAL`, `REASON`).
pub const MSG_EXITED: &str = "9d860d0b097142219d35be0657ee8ffd";
/// `MESSAGE_ID` of "backoff": a restart was scheduled (`RESTART_N`, `BACKOFF_MS`, `REASON`).
pub const MSG_BACKOFF: &str = "cced81de0e06417ab30ffa5d61fa0554";
/// `MESSAGE_ID` of "failed": the server gave up (permanent error or too many failed starts).
pub const MSG_FAILED: &str = "612df29be566403f833f2b9b2a3be3e3";
/// `MESSAGE_ID` of "reloaded": a configuration reload was applied (`ADDED`, `REMOVED`,
/// `CHANGED`, `UNCHANGED`).
pub const MSG_RELOADED: &str = "198a274c96074d7988d464413cb175cc";
/// `MESSAGE_ID` of "reload failed": the new configuration was invalid or could not be applied;
/// the old one keeps running (`REASON`).
pub const MSG_RELOAD_FAILED: &str = "4bb2b258ea7f4148a0879468b0984cc9";
/// `MESSAGE_ID` of "refused": a connection was refused by the peer-credential check
/// (`PEER_UID`, `PEER_GID`, `PEER_PID`, `SOCKET`).
pub const MSG_REFUSED: &str = "418f7cfa28484ca2a319770447b1e2db";

/// Whether stderr is connected to the journal.
pub fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse::<u64>().ok() == Some(meta.dev()) && ino.parse::<u64>().ok() == Some(meta.ino())
}

/// ANSI colours on stderr: only on a terminal (a log file or pipe gets plain text, which is
/// also shorter) and never with a non-empty `NO_COLOR` (https://no-color.org/).
fn stderr_wants_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Lines of the daemon's own log (not the request log) waiting for stderr; beyond this they
/// are dropped.
const STDERR_QUEUE_LINES: usize = 16 * 1024;

/// The format [`init`] uses for `format` here: `auto` is the journal when stderr is the
/// journal, JSON when we are PID 1 (a container's entrypoint) or in a Kubernetes pod
/// (`KUBERNETES_SERVICE_HOST`), else text.
pub fn effective(format: LogFormat) -> LogFormat {
    match format {
        LogFormat::Auto if stderr_is_journal() => LogFormat::Journal,
        LogFormat::Auto
            if std::process::id() == 1 || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() =>
        {
            LogFormat::Json
        }
        LogFormat::Auto => LogFormat::Text,
        f => f,
    }
}

/// Installs the global subscriber for `format` (config `[supervisor] log_format`, see
/// [`effective`]). Text and JSON on stderr go through a writer thread (`tracing-appender`,
/// lossy): a stderr nobody reads (a stuck pipe) drops lines instead of blocking the daemon,
/// whose one thread carries every relay (issue 15 §2). The writer thread's guard is kept
/// here until [`finish`], which writes what is queued.
///
/// JSON (issue 17 §3) is one object per line with the fields the journal gets, flattened
/// (`tracing-flat-json`): `timestamp` (RFC 3339, UTC), `level`, `code.file.path`,
/// `code.line.number`, `message`, the event's fields and those of its spans (`server`,
/// `child_pid`, `message_id`, `request_id`, ...), each key once (the innermost value wins).
/// The request log's records are events too, so they come out in the same shape.
pub fn init(format: LogFormat) {
    if let Some(guard) = subscriber(format) {
        if let Ok(mut kept) = WRITER.lock() {
            *kept = Some(guard);
        }
    }
}

/// The log writer thread's guard, while it runs.
static WRITER: std::sync::Mutex<Option<tracing_appender::non_blocking::WorkerGuard>> =
    std::sync::Mutex::new(None);

/// Writes the queued log lines and ends the writer thread (waiting up to its own bound, 1 s):
/// at exit, and before an upgrade's `execve`, which would lose them. Lines logged after it
/// are dropped.
pub fn finish() {
    let guard = WRITER.lock().ok().and_then(|mut g| g.take());
    drop(guard);
}

/// Installs the subscriber for `format`; the writer thread's guard, when there is one.
fn subscriber(format: LogFormat) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let format = effective(format);
    if format == LogFormat::Journal {
        if let Ok(layer) = tracing_journald::layer() {
            tracing_subscriber::registry()
                .with(filter)
                .with(
                    layer
                        .with_syslog_identifier("mcp-supervisor".into())
                        .with_field_prefix(None),
                )
                .init();
            return None;
        }
    }
    let colour = format == LogFormat::Text && stderr_wants_colour();
    // Plain text into a file or pipe: the request log thread writes its lines itself. JSON
    // and colour text: the records become events of the subscriber below.
    requests::write_plain_stderr(format == LogFormat::Text && !colour);
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(STDERR_QUEUE_LINES)
        .thread_name("log-writer")
        .finish(std::io::stderr());
    if format == LogFormat::Json {
        tracing_subscriber::registry()
            .with(filter)
            .with(tracing_flat_json::FlatJsonLayer::new(writer))
            .init();
        return Some(guard);
    }
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(colour)
                .with_target(false),
        )
        .init();
    Some(guard)
}

/// A log line budget (issue 14 §3: logs are a resource too): at most `burst` lines per
/// `window`; lines beyond it are counted, and the next line allowed says how many were
/// suppressed. Sans-IO: the caller gives the time.
#[derive(Debug)]
pub struct LogBudget {
    burst: u32,
    window: std::time::Duration,
    started: Option<std::time::Instant>,
    used: u32,
    suppressed: u64,
}

impl LogBudget {
    /// `burst` lines per `window`.
    pub const fn new(burst: u32, window: std::time::Duration) -> Self {
        LogBudget {
            burst,
            window,
            started: None,
            used: 0,
            suppressed: 0,
        }
    }

    /// Whether a line may be written at `now`: `Some(n)` with the number of lines suppressed
    /// since the last one written (log it with the line), `None` when over budget (counted).
    pub fn allow(&mut self, now: std::time::Instant) -> Option<u64> {
        let fresh = self
            .started
            .is_none_or(|t| now.saturating_duration_since(t) >= self.window);
        if fresh {
            self.started = Some(now);
            self.used = 0;
        }
        if self.used >= self.burst {
            self.suppressed += 1;
            return None;
        }
        self.used += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn lines_over_the_budget_are_counted_and_reported_with_the_next_one() {
        let mut b = LogBudget::new(2, Duration::from_secs(10));
        let t = Instant::now();
        assert_eq!(b.allow(t), Some(0));
        assert_eq!(b.allow(t), Some(0));
        assert_eq!(b.allow(t), None);
        assert_eq!(b.allow(t + Duration::from_secs(1)), None);
        assert_eq!(b.allow(t + Duration::from_secs(10)), Some(2));
    }
}
