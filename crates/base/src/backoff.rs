//! Restart backoff, sans-IO: given consecutive failures, how long to wait before the next spawn.
//!
//! Rule R9 of `reference/supervision.md` (gRPC-style capped exponential with multiplicative
//! jitter, an s6/runit floor, a Kubernetes-style stability reset):
//! - nominal delay `min(backoff_max, backoff_initial * 2^(n-1))` for the n-th consecutive failure;
//! - jittered by a uniform factor in [0.8, 1.2] (fresh draw each time);
//! - never less than `backoff_initial` between two spawns (the floor);
//! - `n` resets once the child has been ready for `backoff_reset_after` (field case K19).
//!
//! Time is passed in (`Instant`s) and randomness is injected, so the schedule is unit-tested
//! exactly (R23, R26).

use rand::{Rng, RngCore};
use std::time::{Duration, Instant};

/// Lowest and highest jitter factors (gRPC's JITTER = 0.2).
pub const JITTER: (f64, f64) = (0.8, 1.2);

/// Consecutive failed starts after which a child is `failed` (R10).
pub const MAX_FAILED_STARTS: u32 = 5;

/// How often a `failed` child is retried anyway (R10 `fatal_retry_interval`).
pub const FAILED_RETRY: Duration = Duration::from_secs(600);

/// The backoff state of one server.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    /// Consecutive failures since the child last stayed ready for `reset_after`.
    n: u32,
}

impl Backoff {
    /// A schedule with the given base, cap and stability reset.
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Backoff {
            initial,
            max,
            reset_after,
            n: 0,
        }
    }

    /// Consecutive failures counted so far.
    pub fn failures(&self) -> u32 {
        self.n
    }

    /// Forgets every failure (a manual `start` or `restart`).
    pub fn reset(&mut self) {
        self.n = 0;
    }

    /// The nominal (unjittered) delay for the `n`-th consecutive failure, `n >= 1`.
    pub fn nominal(&self, n: u32) -> Duration {
        let factor = 2f64.powi(n.saturating_sub(1).min(62) as i32);
        let d = self.initial.as_secs_f64() * factor;
        // Saturating: a float past `Duration::MAX` (only past the configured bounds) is `max`.
        Duration::try_from_secs_f64(d.min(self.max.as_secs_f64())).unwrap_or(self.max)
    }

    /// Records an exit and returns the delay until the next spawn.
    ///
    /// `ready_since` is when the child became ready (None if it never did): readiness held for
    /// `reset_after` resets the count first. `last_spawn` and `now` enforce the floor.
    pub fn on_exit(
        &mut self,
        now: Instant,
        last_spawn: Instant,
        ready_since: Option<Instant>,
        rng: &mut dyn RngCore,
    ) -> Duration {
        if let Some(r) = ready_since {
            if now.saturating_duration_since(r) >= self.reset_after {
                self.n = 0;
            }
        }
        self.n = self.n.saturating_add(1);
        let jitter = rng.gen_range(JITTER.0..=JITTER.1);
        let nominal = self.nominal(self.n);
        let delay = Duration::try_from_secs_f64(nominal.as_secs_f64() * jitter).unwrap_or(nominal);
        let floor = self
            .initial
            .saturating_sub(now.saturating_duration_since(last_spawn));
        delay.max(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn b() -> Backoff {
        Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn nominal_schedule_is_pinned() {
        let secs: Vec<u64> = (1..=9).map(|n| b().nominal(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut bo = b();
        let t0 = Instant::now();
        let mut seen = Vec::new();
        for n in 1..=30u32 {
            // Long after the last spawn, so the floor does not apply.
            let d = bo.on_exit(t0 + Duration::from_secs(1000), t0, None, &mut rng);
            let nominal = bo.nominal(n).as_secs_f64();
            let s = d.as_secs_f64();
            assert!(
                s >= nominal * 0.8 - 1e-9 && s <= nominal * 1.2 + 1e-9,
                "n={n} d={s}"
            );
            seen.push(d);
        }
        seen.sort();
        seen.dedup();
        assert!(seen.len() > 20, "jitter must vary between draws");
    }

    #[test]
    fn floor_keeps_spawns_at_least_initial_apart() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut bo = b();
        let t0 = Instant::now();
        // Exit 100 ms after spawn: the floor leaves at least 900 ms more.
        for _ in 0..100 {
            let mut fresh = b();
            let d = fresh.on_exit(t0 + Duration::from_millis(100), t0, None, &mut rng);
            assert!(d >= Duration::from_millis(900), "{d:?}");
        }
        let d = bo.on_exit(t0 + Duration::from_millis(100), t0, None, &mut rng);
        assert!(d + Duration::from_millis(100) >= Duration::from_secs(1));
    }

    #[test]
    fn stability_reset_after_sustained_readiness() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut bo = b();
        let t0 = Instant::now();
        for _ in 0..5 {
            bo.on_exit(t0 + Duration::from_secs(100), t0, None, &mut rng);
        }
        assert_eq!(bo.failures(), 5);
        // Ready for 59 s then crash: the count goes on.
        let ready = t0 + Duration::from_secs(200);
        bo.on_exit(ready + Duration::from_secs(59), t0, Some(ready), &mut rng);
        assert_eq!(bo.failures(), 6);
        // Ready for 61 s then crash: back to n = 1 and a ~1 s delay.
        let d = bo.on_exit(ready + Duration::from_secs(61), t0, Some(ready), &mut rng);
        assert_eq!(bo.failures(), 1);
        assert!(d <= Duration::from_millis(1200));
    }

    #[test]
    fn huge_delays_saturate_instead_of_panicking() {
        // Past every configured bound (config::keys): the arithmetic still holds.
        let mut rng = StdRng::seed_from_u64(5);
        let mut bo = Backoff::new(Duration::MAX, Duration::MAX, Duration::MAX);
        let t0 = Instant::now();
        for _ in 0..70 {
            let d = bo.on_exit(t0, t0, None, &mut rng);
            assert!(d >= Duration::from_secs(u64::MAX / 2), "{d:?}");
        }
    }
}
