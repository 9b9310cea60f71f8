//! A server's recent traffic, kept by its actor for `status`, `watch` and `top` (issue 33):
//! [`MINUTES`] one-minute buckets of finished requests (good, bad, other, and their durations),
//! and the last [`FAILURES`] bad outcomes with their request ids.
//!
//! "Good" and "bad" are the availability SLI of `deploy/prometheus/recording.yml` (and
//! docs/book/src/reference/metrics.md, "Outcomes"): good = `ok`, `tool_error`,
//! `protocol_error`; bad = `unreachable`, `timeout`; every other outcome is neither. The
//! history lives in the actor's memory: it starts empty when the supervisor starts (an upgrade
//! or a crash resets it, as `/metrics` is reset) and is bounded (about 30 KiB per server).
//!
//! Owns: the buckets and the summary's arithmetic. Reads no clock: the actor passes its own
//! instant (so the simulation can drive it) and the wall time of each failure.

use super::histogram::BOUNDS;
use super::Outcome;
use crate::config::DEFAULT_OBJECTIVE;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// One-minute buckets kept: six hours, the longest burn-rate window.
pub const MINUTES: usize = 360;
/// Bad outcomes kept for the detail view.
pub const FAILURES: usize = 8;
/// Minutes of requests and errors in [`Traffic::requests_per_min`] (the sparklines).
pub const SPARK_MINUTES: usize = 60;
/// The window of the error rate and the latency quantiles, in minutes (as `rate5m`).
const RECENT_MINUTES: u64 = 5;

/// Duration slots: one per histogram bound, then `+Inf`.
const SLOTS: usize = BOUNDS.len() + 1;

/// The objective in force, as `f64` bits (set at start and by each reload).
static OBJECTIVE: AtomicU64 = AtomicU64::new(0);

/// Sets the availability objective every summary uses from now on; a value outside (0, 1)
/// (which the configuration refuses) leaves the default.
pub fn set_objective(objective: f64) {
    let o = if objective > 0.0 && objective < 1.0 {
        objective
    } else {
        DEFAULT_OBJECTIVE
    };
    OBJECTIVE.store(o.to_bits(), Ordering::Relaxed);
}

/// The availability objective in force (default [`DEFAULT_OBJECTIVE`]).
pub fn objective() -> f64 {
    let o = f64::from_bits(OBJECTIVE.load(Ordering::Relaxed));
    if o > 0.0 && o < 1.0 {
        o
    } else {
        DEFAULT_OBJECTIVE
    }
}

/// What the SLI makes of an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Good,
    Bad,
    Neither,
}

fn class(o: Outcome) -> Class {
    match o {
        Outcome::Ok | Outcome::ToolError | Outcome::ProtocolError => Class::Good,
        Outcome::Unreachable | Outcome::Timeout => Class::Bad,
        Outcome::Cancelled | Outcome::Denied | Outcome::Invalid | Outcome::PolicyDenied => {
            Class::Neither
        }
    }
}

/// One minute of requests.
#[derive(Debug, Clone)]
struct Minute {
    /// Minutes since the history began.
    index: u64,
    good: u32,
    bad: u32,
    other: u32,
    /// Durations of good and bad requests, one count per [`BOUNDS`] slot.
    durations: [u32; SLOTS],
}

impl Minute {
    fn new(index: u64) -> Self {
        Minute {
            index,
            good: 0,
            bad: 0,
            other: 0,
            durations: [0; SLOTS],
        }
    }

    fn all(&self) -> u64 {
        u64::from(self.good) + u64::from(self.bad) + u64::from(self.other)
    }
}

/// A bad outcome, for the detail view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// When it finished, RFC 3339 (seconds).
    pub at: String,
    /// The request id of the request log and the spans (`r-…`).
    pub request_id: String,
    /// The method (a known MCP method or `other`).
    pub method: &'static str,
    /// `unreachable` or `timeout`.
    pub outcome: &'static str,
    /// The JSON-RPC error code the client got, if any.
    pub code: Option<i64>,
}

/// The summary `status` shows as `traffic` (issue 33). Rates are `null` when nothing counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Traffic {
    /// Requests finished per second over the last minute (every outcome).
    pub requests_per_s: f64,
    /// Bad / (good + bad) over the last five minutes.
    pub error_rate: Option<f64>,
    /// Median duration of good and bad requests over the last five minutes, in ms (linear
    /// within a histogram bucket, as Prometheus' `histogram_quantile`).
    pub p50_ms: Option<f64>,
    /// 99th percentile, likewise.
    pub p99_ms: Option<f64>,
    /// Good / (good + bad) over the whole history (up to six hours).
    pub availability: Option<f64>,
    /// The objective it is held to (`availability_objective`).
    pub objective: f64,
    /// Error ratio over the last hour divided by the error budget (1 - objective): 1 spends
    /// the budget exactly, 14.4 is the fast-burn page of `deploy/prometheus/alerts.yml`.
    pub burn_1h: Option<f64>,
    /// The same over six hours.
    pub burn_6h: Option<f64>,
    /// Requests finished in each of the last [`SPARK_MINUTES`] minutes, oldest first (the
    /// current minute last, so far).
    pub requests_per_min: Vec<u32>,
    /// Bad outcomes in each of those minutes.
    pub errors_per_min: Vec<u32>,
    /// The last bad outcomes, newest last.
    pub recent_failures: Vec<Failure>,
}

/// One server's recent traffic.
#[derive(Debug, Clone)]
pub struct History {
    began: Instant,
    /// At most [`MINUTES`], oldest first; minutes without requests have no bucket.
    minutes: VecDeque<Minute>,
    failures: VecDeque<Failure>,
}

impl History {
    /// An empty history beginning at `now`.
    pub fn new(now: Instant) -> Self {
        History {
            began: now,
            minutes: VecDeque::new(),
            failures: VecDeque::new(),
        }
    }

    fn index(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.began).as_secs() / 60
    }

    /// A request finished at `now` with `outcome` after `elapsed`; `failure` names it (its
    /// request id, method, wall time and code), kept when the outcome is bad.
    pub fn record(
        &mut self,
        now: Instant,
        outcome: Outcome,
        elapsed: Duration,
        failure: impl FnOnce() -> (String, &'static str, SystemTime, Option<i64>),
    ) {
        let index = self.index(now);
        if self.minutes.back().is_none_or(|m| m.index != index) {
            self.minutes.push_back(Minute::new(index));
        }
        while self
            .minutes
            .front()
            .is_some_and(|m| m.index.saturating_add(MINUTES as u64) <= index)
            || self.minutes.len() > MINUTES
        {
            self.minutes.pop_front();
        }
        let Some(m) = self.minutes.back_mut() else {
            return;
        };
        let c = class(outcome);
        match c {
            Class::Good => m.good = m.good.saturating_add(1),
            Class::Bad => m.bad = m.bad.saturating_add(1),
            Class::Neither => m.other = m.other.saturating_add(1),
        }
        if c != Class::Neither {
            let s = elapsed.as_secs_f64();
            let slot = BOUNDS.iter().position(|b| s <= *b).unwrap_or(BOUNDS.len());
            if let Some(d) = m.durations.get_mut(slot) {
                *d = d.saturating_add(1);
            }
        }
        if c == Class::Bad {
            let (request_id, method, wall, code) = failure();
            if self.failures.len() >= FAILURES {
                self.failures.pop_front();
            }
            self.failures.push_back(Failure {
                at: humantime::format_rfc3339_seconds(wall).to_string(),
                request_id,
                method,
                outcome: outcome.as_str(),
                code,
            });
        }
    }

    /// The minutes within the last `n` (the current one included); `m.index <= now` for each.
    fn within(&self, now: u64, n: u64) -> impl Iterator<Item = &Minute> {
        self.minutes
            .iter()
            .filter(move |m| m.index <= now && m.index.saturating_add(n) > now)
    }

    /// The summary at `now`, against `objective`.
    pub fn summary(&self, now: Instant, objective: f64) -> Traffic {
        let index = self.index(now);
        let since = now.saturating_duration_since(self.began).as_secs_f64();
        // The last 60 s: this minute so far, and the part of the previous one still inside.
        let into = since - (index as f64) * 60.0;
        let current = self.within(index, 1).map(Minute::all).sum::<u64>() as f64;
        let previous = self
            .minutes
            .iter()
            .find(|m| m.index.saturating_add(1) == index)
            .map_or(0.0, |m| m.all() as f64);
        let span = since.clamp(1.0, 60.0);
        let requests_per_s = (current + previous * ((60.0 - into) / 60.0).max(0.0)) / span;
        let ratio = |n: u64| {
            let (good, bad) = self.within(index, n).fold((0u64, 0u64), |(g, b), m| {
                (g + u64::from(m.good), b + u64::from(m.bad))
            });
            (good + bad > 0).then(|| bad as f64 / (good + bad) as f64)
        };
        let budget = (1.0 - objective).max(f64::EPSILON);
        let mut durations = [0u64; SLOTS];
        for m in self.within(index, RECENT_MINUTES) {
            for (d, n) in durations.iter_mut().zip(m.durations) {
                *d += u64::from(n);
            }
        }
        // Always SPARK_MINUTES entries, oldest first: minutes before the history began, or
        // without a request, count 0 (one pass over the buckets, which are in order).
        let spark = |f: fn(&Minute) -> u32| -> Vec<u32> {
            let mut out = vec![0; SPARK_MINUTES];
            for m in self.within(index, SPARK_MINUTES as u64) {
                let back = usize::try_from(index.saturating_sub(m.index)).unwrap_or(usize::MAX);
                if let Some(slot) = (SPARK_MINUTES - 1)
                    .checked_sub(back)
                    .and_then(|i| out.get_mut(i))
                {
                    *slot = f(m);
                }
            }
            out
        };
        Traffic {
            requests_per_s,
            error_rate: ratio(RECENT_MINUTES),
            p50_ms: quantile(&durations, 0.5).map(|s| s * 1e3),
            p99_ms: quantile(&durations, 0.99).map(|s| s * 1e3),
            availability: ratio(MINUTES as u64).map(|r| 1.0 - r),
            objective,
            burn_1h: ratio(60).map(|r| r / budget),
            burn_6h: ratio(MINUTES as u64).map(|r| r / budget),
            requests_per_min: spark(|m| u32::try_from(m.all()).unwrap_or(u32::MAX)),
            errors_per_min: spark(|m| m.bad),
            recent_failures: self.failures.iter().cloned().collect(),
        }
    }
}

/// The `q` quantile (0..=1) of the durations counted per [`BOUNDS`] slot, in seconds: linear
/// within the bucket it falls in (its lower bound 0 for the first), the last finite bound for
/// `+Inf`; `None` when nothing was counted.
fn quantile(counts: &[u64; SLOTS], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut seen = 0u64;
    for (i, n) in counts.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        if (seen + n) as f64 >= rank {
            let Some(upper) = BOUNDS.get(i) else {
                return BOUNDS.last().copied();
            };
            let lower = if i == 0 {
                0.0
            } else {
                BOUNDS.get(i - 1).copied().unwrap_or(0.0)
            };
            let within = ((rank - seen as f64) / *n as f64).clamp(0.0, 1.0);
            return Some(lower + (upper - lower) * within);
        }
        seen += n;
    }
    BOUNDS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::{quantile, History, Outcome, FAILURES, MINUTES, SLOTS, SPARK_MINUTES};
    use proptest::prelude::*;
    use std::time::{Duration, Instant, SystemTime};

    fn rec(h: &mut History, at: Instant, o: Outcome, ms: u64) {
        h.record(at, o, Duration::from_millis(ms), || {
            (
                "r-1".into(),
                "tools/call",
                SystemTime::UNIX_EPOCH,
                Some(-32001),
            )
        });
    }

    #[test]
    fn the_sli_counts_only_good_and_bad_and_burn_is_against_the_budget() {
        let t0 = Instant::now();
        let mut h = History::new(t0);
        for _ in 0..98 {
            rec(&mut h, t0, Outcome::Ok, 10);
        }
        rec(&mut h, t0, Outcome::Timeout, 10);
        rec(&mut h, t0, Outcome::Unreachable, 10);
        // Neither good nor bad: not in the error rate.
        rec(&mut h, t0, Outcome::Cancelled, 10);
        rec(&mut h, t0, Outcome::PolicyDenied, 10);
        let s = h.summary(t0 + Duration::from_secs(30), 0.999);
        assert_eq!(s.error_rate, Some(0.02));
        assert_eq!(s.availability, Some(0.98));
        let burn = s.burn_1h.unwrap();
        assert!((burn - 20.0).abs() < 1e-6, "{burn}");
        // 102 requests in the first 30 s.
        assert!(
            (s.requests_per_s - 102.0 / 30.0).abs() < 1e-9,
            "{}",
            s.requests_per_s
        );
        assert_eq!(s.recent_failures.len(), 2);
        assert_eq!(s.recent_failures[0].outcome, "timeout");
        assert_eq!(s.recent_failures[0].request_id, "r-1");
        assert_eq!(s.requests_per_min.len(), SPARK_MINUTES);
        assert_eq!(s.requests_per_min.last(), Some(&102));
        assert_eq!(s.errors_per_min.last(), Some(&2));
    }

    #[test]
    fn old_minutes_leave_the_windows_and_the_history_is_bounded() {
        let t0 = Instant::now();
        let mut h = History::new(t0);
        rec(&mut h, t0, Outcome::Timeout, 10);
        // Ten minutes later: the five-minute error rate forgets it, the hour does not.
        let later = t0 + Duration::from_secs(600);
        rec(&mut h, later, Outcome::Ok, 10);
        let s = h.summary(later, 0.999);
        assert_eq!(s.error_rate, Some(0.0));
        assert_eq!(s.burn_1h.map(|b| b > 0.0), Some(true));
        // Seven hours of one request a minute: at most MINUTES buckets.
        for m in 0..420u64 {
            rec(&mut h, t0 + Duration::from_secs(m * 60), Outcome::Ok, 1);
        }
        assert!(h.minutes.len() <= MINUTES);
        let s = h.summary(t0 + Duration::from_secs(420 * 60), 0.999);
        assert_eq!(s.availability, Some(1.0), "the timeout left the six hours");
        // Nothing for a minute and more: no rate.
        let idle = h.summary(t0 + Duration::from_secs(430 * 60), 0.999);
        assert_eq!(idle.requests_per_s, 0.0);
        assert_eq!(idle.p99_ms, None);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let mut c = [0u64; SLOTS];
        // 100 requests between 1 ms and 2 ms.
        c[1] = 100;
        let p50 = quantile(&c, 0.5).unwrap();
        assert!((p50 - 0.0015).abs() < 1e-9, "{p50}");
        assert_eq!(quantile(&[0; SLOTS], 0.5), None);
        let mut inf = [0u64; SLOTS];
        inf[SLOTS - 1] = 1;
        assert!(quantile(&inf, 0.99).unwrap() > 60.0);
    }

    proptest! {
        /// Whatever arrives, whenever: no panic, bounded memory, ratios within [0, 1].
        #[test]
        fn any_sequence_stays_bounded_and_sane(
            steps in proptest::collection::vec((0u64..100_000, 0usize..9, 0u64..200_000), 0..300),
        ) {
            let t0 = Instant::now();
            let mut h = History::new(t0);
            let mut at = 0u64;
            for (dt, o, ms) in steps {
                at = at.saturating_add(dt);
                let outcome = [
                    Outcome::Ok, Outcome::ToolError, Outcome::ProtocolError, Outcome::Unreachable,
                    Outcome::Timeout, Outcome::Cancelled, Outcome::Denied, Outcome::Invalid,
                    Outcome::PolicyDenied,
                ][o];
                rec(&mut h, t0 + Duration::from_millis(at), outcome, ms);
                prop_assert!(h.minutes.len() <= MINUTES);
                prop_assert!(h.failures.len() <= FAILURES);
            }
            let s = h.summary(t0 + Duration::from_millis(at), 0.999);
            for r in [s.error_rate, s.availability].into_iter().flatten() {
                prop_assert!((0.0..=1.0).contains(&r));
            }
            prop_assert!(s.requests_per_s >= 0.0 && s.requests_per_s.is_finite());
            if let (Some(a), Some(b)) = (s.p50_ms, s.p99_ms) {
                prop_assert!(a <= b);
            }
        }
    }
}
