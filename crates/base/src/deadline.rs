//! Deadline arithmetic that cannot overflow (issue 26 §1).
//!
//! `Instant + Duration` panics on overflow, and a configured duration is input: a value such as
//! `start_timeout = "400000000000y"` once panicked the actor on every spawn. The configuration
//! bounds every duration (`config::keys`), and every deadline is still computed here, so no
//! value that slips past a bound (or a sum of several) can panic the daemon.
//!
//! Never reads a clock: callers pass the moment they computed from.

use std::time::{Duration, Instant};

/// How far a deadline is put when the exact one cannot be represented: far enough that it
/// never fires in a process's life, near enough that `Instant` can always hold it.
pub const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `at + d`, or, when that overflows `Instant`, the farthest of `at + FAR` and `at` that can be
/// represented (an overflowing deadline means "never" in practice).
pub fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(FAR.min(d)))
        .unwrap_or(at)
}

/// The same for tokio's `Instant` (timers, `sleep_until`).
pub fn after_tokio(at: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(after(at.into_std(), d))
}

/// The sum of several durations, saturating at `Duration::MAX` instead of panicking (stop
/// budgets such as `stop_grace + kill_timeout + 5 s`).
pub fn sum(parts: &[Duration]) -> Duration {
    parts
        .iter()
        .fold(Duration::ZERO, |acc, d| acc.saturating_add(*d))
}

#[cfg(test)]
mod tests {
    use super::{after, after_tokio, sum, FAR};
    use std::time::{Duration, Instant};

    #[test]
    fn an_ordinary_deadline_is_exact() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }

    #[test]
    fn an_overflowing_deadline_is_far_and_never_panics() {
        let now = Instant::now();
        let d = after(now, Duration::MAX);
        assert!(d >= now + FAR.min(Duration::from_secs(3600)));
        let t = tokio::time::Instant::now();
        assert!(after_tokio(t, Duration::MAX) > t);
    }

    #[test]
    fn sums_saturate() {
        assert_eq!(sum(&[Duration::MAX, Duration::from_secs(5)]), Duration::MAX);
        assert_eq!(
            sum(&[Duration::from_secs(2), Duration::from_secs(5)]),
            Duration::from_secs(7)
        );
    }
}
