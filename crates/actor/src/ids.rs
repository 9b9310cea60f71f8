//! The in-flight table of one child session, sans-IO: child-side ids, the client that owns
//! each one (with its own id), and deadlines.
//!
//! Owns: id allocation (a counter that never repeats while the table lives, design decision 3)
//! and the three indexes that must agree (by child id, by client and client id, by deadline).
//! Knows nothing about bytes, sockets or processes, so it is tested as a model
//! (`tests` below: random interleavings never route to a non-owner and never leak).

use crate::client::ClientId;
use rustc_hash::FxHashMap;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Instant;

/// The canonical text of a client's request id, as the in-flight table keys it (so a cancel's
/// `requestId` matches however the client spelled the number or string).
pub fn id_key(id: &RawValue) -> String {
    id_key_ref(id).into_owned()
}

/// [`id_key`], borrowed from `id` when its text already is canonical (the usual case: a
/// lookup then allocates nothing).
pub fn id_key_ref(id: &RawValue) -> std::borrow::Cow<'_, str> {
    let text = id.get();
    // Fast path: plain integers and strings without escapes are already canonical.
    let plain_int = !text.is_empty()
        && text
            .bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-'))
        && !(text.len() > 1 && text.trim_start_matches('-').starts_with('0'));
    let plain_str = text.len() >= 2
        && text.starts_with('"')
        && text.ends_with('"')
        && !text[1..text.len() - 1].contains(['\\', '"']);
    if (plain_int && text.len() < 16) || plain_str {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        serde_json::from_str::<Value>(text)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| id.get().to_string()),
    )
}

/// One request in flight toward the child.
#[derive(Debug)]
struct Slot<T> {
    /// The owning client and its id for the request (compact JSON text), if a client owns it.
    client: Option<(ClientId, String)>,
    /// `None`: no deadline (a listen stream lives until it is cancelled).
    deadline: Option<Instant>,
    value: T,
}

/// Requests in flight, keyed by the child-side id.
#[derive(Debug)]
pub struct Inflight<T> {
    next: u64,
    // Fx hashing (issue 15 §1: SipHash was 2.5% of the relay's CPU). Keys are our own
    // numbers, or one client's ids in that client's own map, bounded by
    // `client_max_inflight`: a client choosing colliding ids slows only its own lookups.
    slots: FxHashMap<u64, Slot<T>>,
    by_client: FxHashMap<ClientId, FxHashMap<String, u64>>,
    deadlines: BTreeSet<(Instant, u64)>,
}

impl<T> Default for Inflight<T> {
    fn default() -> Self {
        Inflight {
            next: 1,
            slots: FxHashMap::default(),
            by_client: FxHashMap::default(),
            deadlines: BTreeSet::new(),
        }
    }
}

/// A removed entry: its child-side id, owner and payload.
#[derive(Debug)]
pub struct Removed<T> {
    /// Child-side id.
    pub id: u64,
    /// The owning client and its request id text, if any.
    pub client: Option<(ClientId, String)>,
    /// The payload.
    pub value: T,
}

impl<T> Inflight<T> {
    /// The id [`Inflight::allocate`] gives next.
    pub fn next_id(&self) -> u64 {
        self.next
    }

    /// Goes on from `next` (an upgrade's hand-over: the child saw the ids below it), never
    /// back.
    pub fn resume_at(&mut self, next: u64) {
        self.next = self.next.max(next);
    }

    /// Allocates the next child-side id (never reused by this table).
    pub fn allocate(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// Records request `id` (from [`Inflight::allocate`]). `client` is the owner and its own id
    /// text; a client that reuses an id still in flight gets the newer entry for cancels.
    /// `deadline`: when it expires, or `None` for never (a listen stream).
    pub fn insert(
        &mut self,
        id: u64,
        client: Option<(ClientId, String)>,
        deadline: Option<Instant>,
        value: T,
    ) {
        if let Some((c, key)) = &client {
            self.by_client
                .entry(*c)
                .or_default()
                .insert(key.clone(), id);
        }
        if let Some(deadline) = deadline {
            self.deadlines.insert((deadline, id));
        }
        self.slots.insert(
            id,
            Slot {
                client,
                deadline,
                value,
            },
        );
    }

    /// The payload of request `id`.
    pub fn get(&self, id: u64) -> Option<&T> {
        self.slots.get(&id).map(|s| &s.value)
    }

    /// The payload of request `id`, to change it.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.slots.get_mut(&id).map(|s| &mut s.value)
    }

    /// Whether `id` is in flight.
    pub fn contains(&self, id: u64) -> bool {
        self.slots.contains_key(&id)
    }

    /// Removes `id` from every index (a response, a timeout, a cancel).
    pub fn remove(&mut self, id: u64) -> Option<Removed<T>> {
        let slot = self.slots.remove(&id)?;
        if let Some(deadline) = slot.deadline {
            self.deadlines.remove(&(deadline, id));
        }
        if let Some((c, key)) = &slot.client {
            // A client's index stays while it is connected, even when empty, so a client
            // with one request at a time does not allocate a table per request; it goes with
            // `remove_client`.
            if let Some(m) = self.by_client.get_mut(c) {
                if m.get(key) == Some(&id) {
                    m.remove(key);
                }
            }
        }
        Some(Removed {
            id,
            client: slot.client,
            value: slot.value,
        })
    }

    /// The child-side id of `client`'s request with id text `key`.
    pub fn lookup(&self, client: ClientId, key: &str) -> Option<u64> {
        self.by_client.get(&client)?.get(key).copied()
    }

    /// Removes and returns every request `client` owns (it disconnected).
    pub fn remove_client(&mut self, client: ClientId) -> Vec<Removed<T>> {
        let ids: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, s)| s.client.as_ref().is_some_and(|(c, _)| *c == client))
            .map(|(id, _)| *id)
            .collect();
        let removed = ids.into_iter().filter_map(|id| self.remove(id)).collect();
        self.by_client.remove(&client);
        removed
    }

    /// Requests `client` has in flight.
    pub fn count_for(&self, client: ClientId) -> usize {
        // The owner index holds exactly the requests a client owns (one per id key; a
        // duplicate id never reaches the table, K23).
        self.by_client.get(&client).map_or(0, FxHashMap::len)
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// Removes and returns one request whose deadline is at or before `now`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<Removed<T>> {
        let &(t, id) = self.deadlines.first()?;
        if t > now {
            return None;
        }
        self.remove(id)
    }

    /// Every entry: child-side id, owner, deadline, payload.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Option<ClientId>, Option<Instant>, &T)> {
        self.slots.iter().map(|(id, s)| {
            (
                *id,
                s.client.as_ref().map(|(c, _)| *c),
                s.deadline,
                &s.value,
            )
        })
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        assert_eq!(
            self.deadlines.len(),
            self.slots.values().filter(|s| s.deadline.is_some()).count(),
            "deadline index out of step"
        );
        for (d, id) in &self.deadlines {
            assert_eq!(self.slots.get(id).and_then(|s| s.deadline), Some(*d));
        }
        for (c, m) in &self.by_client {
            for (key, id) in m {
                let s = self
                    .slots
                    .get(id)
                    .expect("client index points at a live slot");
                assert_eq!(s.client.as_ref(), Some(&(*c, key.clone())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::time::Duration;

    #[derive(Debug, Clone)]
    enum Op {
        Request { client: u64, id: u8 },
        Respond { pick: usize },
        Cancel { client: u64, id: u8 },
        Disconnect { client: u64 },
        Expire { at_ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..3u64, 0..4u8).prop_map(|(client, id)| Op::Request { client, id }),
            3 => any::<usize>().prop_map(|pick| Op::Respond { pick }),
            1 => (0..3u64, 0..4u8).prop_map(|(client, id)| Op::Cancel { client, id }),
            1 => (0..3u64).prop_map(|client| Op::Disconnect { client }),
            1 => (0..2000u64).prop_map(|at_ms| Op::Expire { at_ms }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Random interleavings of requests (with colliding client ids), responses, cancels,
        /// disconnects and deadlines from three clients: a response is only ever routed to the
        /// client that issued that child-side id, every id is fresh, and nothing leaks.
        #[test]
        fn id_map_routes_only_to_owners_and_never_leaks(ops in proptest::collection::vec(op(), 1..200)) {
            let t0 = Instant::now();
            let mut table: Inflight<u64> = Inflight::default();
            // Model: child-side id -> (client, client id).
            let mut model: HashMap<u64, (u64, u8)> = HashMap::new();
            let mut issued = std::collections::HashSet::new();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Request { client, id } => {
                        let cid = table.allocate();
                        prop_assert!(issued.insert(cid), "child-side id reused");
                        // Every seventh has no deadline (a listen stream): never expired.
                        let deadline = (step % 7 != 3)
                            .then(|| t0 + Duration::from_millis(100 + (step as u64 * 37) % 1500));
                        table.insert(cid, Some((ClientId(client), id.to_string())), deadline, client);
                        model.insert(cid, (client, id));
                    }
                    Op::Respond { pick } => {
                        // The child answers some in-flight id, or an id never issued.
                        let mut live: Vec<u64> = model.keys().copied().collect();
                        live.sort();
                        let target = if live.is_empty() || pick % 5 == 0 { 1_000_000 + pick as u64 % 7 } else { live[pick % live.len()] };
                        match table.remove(target) {
                            Some(r) => {
                                let (owner, id) = model.remove(&target).expect("table had an id the model did not");
                                prop_assert_eq!(r.client, Some((ClientId(owner), id.to_string())));
                                prop_assert_eq!(r.value, owner);
                            }
                            None => prop_assert!(!model.contains_key(&target)),
                        }
                    }
                    Op::Cancel { client, id } => {
                        if let Some(cid) = table.lookup(ClientId(client), &id.to_string()) {
                            prop_assert_eq!(model.get(&cid).map(|m| m.0), Some(client));
                            table.remove(cid);
                            model.remove(&cid);
                        }
                    }
                    Op::Disconnect { client } => {
                        for r in table.remove_client(ClientId(client)) {
                            prop_assert_eq!(model.remove(&r.id).map(|m| m.0), Some(client));
                        }
                        prop_assert_eq!(table.count_for(ClientId(client)), 0);
                        prop_assert!(model.values().all(|(c, _)| *c != client));
                    }
                    Op::Expire { at_ms } => {
                        let now = t0 + Duration::from_millis(at_ms);
                        while let Some(r) = table.pop_expired(now) {
                            prop_assert!(model.remove(&r.id).is_some());
                        }
                        prop_assert!(table.next_deadline().is_none_or(|d| d > now));
                    }
                }
                table.check_invariants();
                prop_assert_eq!(table.len(), model.len());
            }
            // The child died: every entry is removed one at a time, as `fail_inflight` does.
            let ids: Vec<u64> = table.iter().map(|(id, _, _, _)| id).collect();
            for id in ids {
                let removed = table.remove(id);
                prop_assert!(
                    removed.is_some_and(|r| model.remove(&r.id).is_some()),
                    "entry {} listed, removed and in the model",
                    id
                );
            }
            prop_assert!(model.is_empty());
            table.check_invariants();
            // A client's (empty) id map stays allocated until the client leaves
            // (`remove_client`), so a reconnecting burst reuses it; no id is left in it.
            prop_assert!(table.by_client.values().all(|m| m.is_empty()));
            prop_assert!(table.deadlines.is_empty());
        }
    }
}
