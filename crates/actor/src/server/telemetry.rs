//! What a server's actor tells the outside about itself while it works: the metric series
//! (atomics updated in place: the documented exception to "effects as data", issue 27), the
//! request log lines buffered for the log thread (issue 15 §2), whether requests get spans
//! (issue 17 §4), and the log budgets of the warnings a peer can trigger at will.
//!
//! Owns those fields alone; never routes a message, never decides anything about a child or
//! a client. Every setting is read once at actor start: the log filter and the trace settings
//! never change while the daemon runs.

use std::time::{Duration, Instant, SystemTime};
use support::logging::requests::{self, Record};
use support::logging::LogBudget;
use support::observe::history::{self, History, Traffic};
use support::observe::{metrics, trace, Outcome, ServerMetrics};

/// The warnings a peer can cause at will: 20 lines per 10 s each, the rest counted.
const BUDGET_LINES: u32 = 20;
const BUDGET_WINDOW: Duration = Duration::from_secs(10);

/// One server's metrics, request log buffer and warning budgets.
pub(super) struct Telemetry {
    /// This server's metric series, resolved once (no lock or label allocation per message).
    metrics: ServerMetrics,
    /// Whether request log lines are wanted.
    request_log: bool,
    /// Request log lines formatted and not yet handed to the log thread.
    log_lines: requests::LineBuffer,
    /// Whether client requests get spans.
    traced: bool,
    /// Request-log lines for invalid client input.
    invalid_log: LogBudget,
    /// Warnings for lines dropped on a full stdin queue.
    dropped_log: LogBudget,
    /// Warnings for the upstream's messages never relayed, too large or too deep (issue 47
    /// §7): a hostile upstream sends as many as it likes.
    discarded_log: LogBudget,
    /// The recent traffic `status` summarises (issue 33).
    history: History,
}

impl Telemetry {
    /// The telemetry of server `name`, with the settings of this process.
    pub(super) fn new(name: &str, now: Instant) -> Self {
        Telemetry {
            history: History::new(now),
            metrics: metrics().server(name),
            request_log: requests::enabled(),
            log_lines: requests::LineBuffer::default(),
            traced: trace::enabled(),
            invalid_log: LogBudget::new(BUDGET_LINES, BUDGET_WINDOW),
            dropped_log: LogBudget::new(BUDGET_LINES, BUDGET_WINDOW),
            discarded_log: LogBudget::new(BUDGET_LINES, BUDGET_WINDOW),
        }
    }

    /// The metric series (counters and gauges are atomics, updated in place).
    pub(super) fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }

    /// A finished request in the recent history: at `now`, after `elapsed`; `failure` is
    /// asked only for a bad outcome (request id, method label, wall time, code).
    pub(super) fn remember(
        &mut self,
        now: Instant,
        outcome: Outcome,
        elapsed: Duration,
        failure: impl FnOnce() -> (String, &'static str, SystemTime, Option<i64>),
    ) {
        self.history.record(now, outcome, elapsed, failure);
    }

    /// The recent traffic at `now`, against the objective in force.
    pub(super) fn traffic(&self, now: Instant) -> Traffic {
        self.history.summary(now, history::objective())
    }

    /// Hands a finished request's span to the trace exporter (issue 17 §4; it batches and
    /// sends off the actor's task).
    pub(super) fn submit_span(&self, span: trace::SpanStart, finish: trace::Finish<'_>) {
        trace::submit(trace::span_data(span, finish));
    }

    /// Whether request log lines are wanted (the caller skips building a [`Record`] if not).
    pub(super) fn request_log(&self) -> bool {
        self.request_log
    }

    /// Whether client requests get spans.
    pub(super) fn traced(&self) -> bool {
        self.traced
    }

    /// Buffers one request log line (nothing when the log is off).
    pub(super) fn log_request(&mut self, record: Record<'_>) {
        if self.request_log {
            self.log_lines.add(record);
        }
    }

    /// Whether request log lines wait for [`Telemetry::flush`].
    pub(super) fn has_lines(&self) -> bool {
        !self.log_lines.is_empty()
    }

    /// Hands the buffered request log lines to the log thread (a queue push).
    pub(super) fn flush(&mut self) {
        self.log_lines.flush();
    }

    /// Whether an invalid client line may be logged at `now`: `Some(n)` with the `n` lines
    /// suppressed since the last one, `None` while over budget.
    pub(super) fn allow_invalid(&mut self, now: Instant) -> Option<u64> {
        self.invalid_log.allow(now)
    }

    /// The same budget for the warning about a line dropped on a full stdin queue.
    pub(super) fn allow_dropped(&mut self, now: Instant) -> Option<u64> {
        self.dropped_log.allow(now)
    }

    /// The same budget for the warning about an upstream message never relayed (too large
    /// or too deep, issue 47 §7).
    pub(super) fn allow_discarded(&mut self, now: Instant) -> Option<u64> {
        self.discarded_log.allow(now)
    }
}
