//! The input-required rounds of both directions (issue 6 §4, K26): a 2026 child's
//! `input_required` result turned into requests to a handshake client ([`Round`], driven by
//! `core.rs`, forward), and a handshake child's requests asked of a 2026 client while its request
//! is parked ([`Parked`], driven by `core.rs`, asking). Both number their rounds from one counter;
//! a parked round also gets a random 64-bit secret from the injected random source (seeded
//! in the simulation), and each question a key `rN`.
//!
//! Owns the two tables, the counters and the random source; what a round means is decided
//! by the files that drive them. Never writes a line.

use super::asking::Parked;
use super::asking::Round;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeMap;

/// The rounds in progress.
#[derive(Debug)]
pub(super) struct Rounds {
    /// Rounds toward handshake clients, by number.
    rounds: BTreeMap<u64, Round>,
    /// 2026 clients' requests parked while they answer the child's questions, by number.
    parked: BTreeMap<u64, Parked>,
    next_round: u64,
    next_key: u64,
    rng: StdRng,
}

impl Rounds {
    /// No round yet; secrets from `rng`.
    pub(super) fn new(rng: StdRng) -> Self {
        Rounds {
            rounds: BTreeMap::new(),
            parked: BTreeMap::new(),
            next_round: 1,
            next_key: 0,
            rng,
        }
    }

    /// Starts round `round` toward a handshake client; returns its number.
    pub(super) fn open(&mut self, round: Round) -> u64 {
        let n = self.number();
        self.rounds.insert(n, round);
        n
    }

    /// Round `n` toward a handshake client.
    pub(super) fn round(&self, n: u64) -> Option<&Round> {
        self.rounds.get(&n)
    }

    /// Round `n` toward a handshake client, to change.
    pub(super) fn round_mut(&mut self, n: u64) -> Option<&mut Round> {
        self.rounds.get_mut(&n)
    }

    /// Ends round `n` toward a handshake client.
    pub(super) fn close(&mut self, n: u64) -> Option<Round> {
        self.rounds.remove(&n)
    }

    /// The open rounds toward handshake clients, by number.
    pub(super) fn all_rounds(&self) -> impl Iterator<Item = (u64, &Round)> {
        self.rounds.iter().map(|(n, r)| (*n, r))
    }

    /// Rounds toward handshake clients in progress.
    pub(super) fn open_rounds(&self) -> usize {
        self.rounds.len()
    }

    /// The key of a new question to a 2026 client (`r0`, `r1`, ...).
    pub(super) fn next_key(&mut self) -> String {
        let key = format!("r{}", self.next_key);
        self.next_key = self.next_key.saturating_add(1);
        key
    }

    /// The number and the random secret of a new parked round.
    pub(super) fn new_parked(&mut self) -> (u64, u64) {
        (self.number(), self.rng.gen::<u64>())
    }

    /// Parks `p` as round `n` (from [`Rounds::new_parked`]).
    pub(super) fn park(&mut self, n: u64, p: Parked) {
        self.parked.insert(n, p);
    }

    /// Parked round `n`.
    pub(super) fn parked(&self, n: u64) -> Option<&Parked> {
        self.parked.get(&n)
    }

    /// Parked round `n`, to change.
    pub(super) fn parked_mut(&mut self, n: u64) -> Option<&mut Parked> {
        self.parked.get_mut(&n)
    }

    /// Ends parked round `n`.
    pub(super) fn unpark(&mut self, n: u64) -> Option<Parked> {
        self.parked.remove(&n)
    }

    /// Every parked round, by number.
    pub(super) fn all_parked(&self) -> impl Iterator<Item = (u64, &Parked)> {
        self.parked.iter().map(|(n, p)| (*n, p))
    }

    /// Parked rounds in progress.
    pub(super) fn parked_rounds(&self) -> usize {
        self.parked.len()
    }

    /// A fresh round number (never reused).
    fn number(&mut self) -> u64 {
        let n = self.next_round;
        self.next_round = self.next_round.saturating_add(1);
        n
    }
}
