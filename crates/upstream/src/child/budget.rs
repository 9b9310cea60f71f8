//! The daemon's spawn budget (R11 of `reference/supervision.md`): a token bucket shared by every
//! server of the daemon, [`RATE`] spawns per second with a burst of [`BURST`]. It protects boot
//! and restart storms (a daemon of 30 `npx` servers restarting together, or an actor that dies
//! at every spawn) from fork stampedes, as systemd's `ActivatingConcurrencyMax=` does for slices.
//!
//! Sans-IO: [`Bucket`] takes the moment from its caller. [`admit`] is the process-wide bucket
//! the real spawner asks before each fork (the simulation's fakes never ask it).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Spawns per second, sustained (R11: 4).
pub const RATE: u32 = 4;
/// Spawns allowed at once after a quiet period (R11: 8).
pub const BURST: u32 = 8;

/// A token bucket: `tokens` (in units of 1/[`RATE`] s, so refilling is integer arithmetic) and
/// the moment they were counted.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Time credit, at most `BURST` spawns' worth.
    credit: Duration,
    at: Option<Instant>,
}

/// The time one spawn costs.
const COST: Duration = Duration::from_millis(1000 / RATE as u64);
/// The most credit the bucket holds.
const FULL: Duration = Duration::from_millis(BURST as u64 * 1000 / RATE as u64);

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            credit: FULL,
            at: None,
        }
    }
}

impl Bucket {
    /// Takes one spawn at `now`, or says when the next one is allowed.
    pub fn take(&mut self, now: Instant) -> Result<(), Instant> {
        if let Some(at) = self.at {
            self.credit = self
                .credit
                .saturating_add(now.saturating_duration_since(at))
                .min(FULL);
        }
        self.at = Some(now);
        match self.credit.checked_sub(COST) {
            Some(left) => {
                self.credit = left;
                Ok(())
            }
            None => Err(base::deadline::after(now, COST.saturating_sub(self.credit))),
        }
    }
}

static DAEMON: Mutex<Option<Bucket>> = Mutex::new(None);

/// Takes one spawn from the daemon-wide bucket at `now`, or says when the next is allowed.
pub fn admit(now: Instant) -> Result<(), Instant> {
    let mut b = DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    b.get_or_insert_with(Bucket::default).take(now)
}

#[cfg(test)]
mod tests {
    use super::{Bucket, BURST, RATE};
    use std::time::{Duration, Instant};

    #[test]
    fn a_burst_of_eight_then_four_per_second() {
        let mut b = Bucket::default();
        let t0 = Instant::now();
        for i in 0..BURST {
            assert!(b.take(t0).is_ok(), "spawn {i} of the burst");
        }
        let next = b.take(t0).expect_err("the ninth waits");
        assert_eq!(next - t0, Duration::from_millis(250));
        // Over the next 10 s at full demand (the burst spent): RATE per second, one every
        // 250 ms, the one due at exactly 10 s excluded.
        let mut taken = 0;
        let mut now = t0;
        while now < t0 + Duration::from_secs(10) {
            match b.take(now) {
                Ok(()) => taken += 1,
                Err(at) => now = at,
            }
        }
        assert_eq!(taken, 10 * RATE as usize - 1);
    }

    #[test]
    fn credit_refills_to_the_burst_and_no_further() {
        let mut b = Bucket::default();
        let t0 = Instant::now();
        for _ in 0..BURST {
            b.take(t0).unwrap();
        }
        let later = t0 + Duration::from_secs(3600);
        for i in 0..BURST {
            assert!(b.take(later).is_ok(), "{i}");
        }
        assert!(b.take(later).is_err());
    }

    #[test]
    fn time_going_backwards_is_harmless() {
        let mut b = Bucket::default();
        let t0 = Instant::now() + Duration::from_secs(10);
        b.take(t0).unwrap();
        assert!(b.take(t0 - Duration::from_secs(5)).is_ok());
    }
}
