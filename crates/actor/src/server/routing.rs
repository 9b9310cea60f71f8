//! Routing: the in-flight table toward the child (child-side ids, owners, deadlines, progress
//! tokens and cancels through [`Inflight`], issue 3) and the requests the supervisor sent to
//! clients and awaits answers to (the child's own requests of the handshake era, and the
//! input requests of an `input_required` round), each under a fresh client-side id.
//!
//! Owns those tables alone. Never decides health or lifecycle, never writes a line.

use super::core::{Asker, Pending};
use crate::ids::Inflight;
use crate::session::ClientId;
use std::collections::BTreeMap;
use std::time::Instant;

/// A request the supervisor sent a client and awaits the answer to.
#[derive(Debug)]
struct Ask {
    asker: Asker,
    deadline: Instant,
}

/// The routing tables.
#[derive(Debug)]
pub(super) struct Routing {
    inflight: Inflight<Pending>,
    /// Requests to clients, by (client, the id the client saw).
    asks: BTreeMap<(ClientId, u64), Ask>,
    /// The next client-side id of a request to a client (never reused).
    next_ask: u64,
}

impl Default for Routing {
    fn default() -> Self {
        Routing {
            inflight: Inflight::default(),
            asks: BTreeMap::new(),
            next_ask: 1,
        }
    }
}

impl Routing {
    /// The in-flight table toward the child.
    pub(super) fn inflight(&self) -> &Inflight<Pending> {
        &self.inflight
    }

    /// The in-flight table toward the child, to change.
    pub(super) fn inflight_mut(&mut self) -> &mut Inflight<Pending> {
        &mut self.inflight
    }

    /// Records a request to `client` for `asker`, answered by `deadline`; returns the id the
    /// client sees.
    pub(super) fn ask(&mut self, client: ClientId, asker: Asker, deadline: Instant) -> u64 {
        let n = self.next_ask;
        self.next_ask = self.next_ask.saturating_add(1);
        self.asks.insert((client, n), Ask { asker, deadline });
        n
    }

    /// The answer of `client` to its request `n` came (or it is given up): who asked.
    pub(super) fn answered(&mut self, client: ClientId, n: u64) -> Option<Asker> {
        self.asks.remove(&(client, n)).map(|a| a.asker)
    }

    /// Requests to clients awaiting an answer.
    pub(super) fn asks(&self) -> usize {
        self.asks.len()
    }

    /// The earliest deadline of a request to a client.
    pub(super) fn next_ask_deadline(&self) -> Option<Instant> {
        self.asks.values().map(|a| a.deadline).min()
    }

    /// Removes and returns the requests whose deadline passed at `now`, with the client and
    /// the id it saw.
    pub(super) fn take_expired_asks(&mut self, now: Instant) -> Vec<((ClientId, u64), Asker)> {
        self.take_asks(|_, a| a.deadline <= now)
    }

    /// Removes the child's request whose child-side id is `rid` (JSON text): the client and
    /// the id it saw, if it was routed to one.
    pub(super) fn take_child_ask(&mut self, rid: &str) -> Option<(ClientId, u64)> {
        let key = self
            .asks
            .iter()
            .find(|(_, a)| matches!(&a.asker, Asker::Child(c) if c.get() == rid))
            .map(|(k, _)| *k)?;
        self.asks.remove(&key);
        Some(key)
    }

    /// Removes and returns the requests to `client` (it left).
    pub(super) fn take_asks_of(&mut self, client: ClientId) -> Vec<Asker> {
        self.take_asks(|(c, _), _| *c == client)
            .into_iter()
            .map(|(_, a)| a)
            .collect()
    }

    /// Removes the requests of the child's own (its instance ended); returns each with the
    /// client and the id it saw, to tell it they are cancelled.
    pub(super) fn take_child_asks(&mut self) -> Vec<(ClientId, u64)> {
        self.take_asks(|_, a| matches!(a.asker, Asker::Child(_)))
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// Forgets the input requests of MRTR round `round` (it ended).
    pub(super) fn forget_round(&mut self, round: u64) {
        self.asks
            .retain(|_, a| !matches!(&a.asker, Asker::Mrtr { round: r, .. } if *r == round));
    }

    /// Removes the requests `pick` selects, in key order.
    fn take_asks(
        &mut self,
        pick: impl Fn(&(ClientId, u64), &Ask) -> bool,
    ) -> Vec<((ClientId, u64), Asker)> {
        let keys: Vec<(ClientId, u64)> = self
            .asks
            .iter()
            .filter(|(k, a)| pick(k, a))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .filter_map(|k| self.asks.remove(&k).map(|a| (k, a.asker)))
            .collect()
    }
}
