//! The held queue (issue 5 §5; issue 12 §6): client requests waiting for a child that is
//! starting or being replaced, each until its own deadline, never more than `queue_limit`.
//! Plain data: no clock (deadlines are given), no I/O.

use crate::session::ClientId;
use std::collections::VecDeque;
use std::time::Instant;
use vocab::jsonrpc::message::Message;

/// A client request held while the child is not ready.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) client: ClientId,
    pub(super) msg: Message,
    pub(super) deadline: Instant,
}

/// Held requests in order of arrival, bounded.
#[derive(Debug)]
pub(super) struct HeldQueue {
    items: VecDeque<Held>,
    limit: usize,
}

impl HeldQueue {
    /// An empty queue of at most `limit` requests (`queue_limit`).
    pub(super) fn new(limit: usize) -> Self {
        HeldQueue {
            items: VecDeque::new(),
            limit,
        }
    }

    /// A new limit (a reload); requests already held stay.
    pub(super) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Whether one more request fits.
    pub(super) fn has_room(&self) -> bool {
        self.items.len() < self.limit
    }

    /// Requests held.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Holds `msg` of `client` until `deadline`; gives it back when the queue is full.
    pub(super) fn push(
        &mut self,
        client: ClientId,
        msg: Message,
        deadline: Instant,
    ) -> Result<(), Message> {
        if !self.has_room() {
            return Err(msg);
        }
        self.items.push_back(Held {
            client,
            msg,
            deadline,
        });
        Ok(())
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.items.iter().map(|h| h.deadline).min()
    }

    /// Removes and returns one request whose deadline is at or before `now`.
    pub(super) fn pop_expired(&mut self, now: Instant) -> Option<Held> {
        let i = self.items.iter().position(|h| h.deadline <= now)?;
        self.items.remove(i)
    }

    /// Removes and returns the oldest request. The queue is released one request at a time
    /// (never drained into a list first), so the requests still waiting keep their client:
    /// a client whose input closed is dropped only once nothing of it is held or in flight,
    /// and answering its first held request must not drop it before the next one is served.
    pub(super) fn pop_oldest(&mut self) -> Option<Held> {
        self.items.pop_front()
    }

    /// Forgets `client`'s requests (it left; their outcomes are recorded by the caller).
    pub(super) fn drop_client(&mut self, client: ClientId) {
        self.items.retain(|h| h.client != client);
    }

    /// How many of `client`'s held requests have a method `pick` chooses.
    pub(super) fn count(&self, client: ClientId, pick: impl Fn(&str) -> bool) -> usize {
        self.items
            .iter()
            .filter(|h| h.client == client && pick(h.msg.method()))
            .count()
    }

    /// Removes `client`'s held request whose id key is `key`, if `pick` accepts its method.
    pub(super) fn take(
        &mut self,
        client: ClientId,
        key: &str,
        pick: impl Fn(&str) -> bool,
    ) -> Option<Held> {
        let i = self.items.iter().position(|h| {
            h.client == client
                && pick(h.msg.method())
                && h.msg
                    .id
                    .as_deref()
                    .is_some_and(|id| crate::ids::id_key_ref(id) == key)
        })?;
        self.items.remove(i)
    }

    /// Whether `client` has a request held.
    pub(super) fn has_client(&self, client: ClientId) -> bool {
        self.items.iter().any(|h| h.client == client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;
    use std::time::Duration;
    use vocab::jsonrpc::message;

    fn msg(id: u64) -> Message {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
        message::parse_one(line.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn bounded_by_queue_limit_and_the_refused_request_comes_back() {
        let t = Instant::now();
        let mut q = HeldQueue::new(2);
        assert!(q.push(ClientId(1), msg(1), t).is_ok());
        assert!(q.push(ClientId(1), msg(2), t).is_ok());
        let back = q.push(ClientId(1), msg(3), t);
        assert!(back.is_err_and(|m| m.id.as_deref().map(RawValue::get) == Some("3")));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn each_request_expires_at_its_own_deadline() {
        let t = Instant::now();
        let s = |ms| t + Duration::from_millis(ms);
        let mut q = HeldQueue::new(8);
        q.push(ClientId(1), msg(1), s(300)).ok();
        q.push(ClientId(2), msg(2), s(100)).ok();
        assert_eq!(q.next_deadline(), Some(s(100)));
        assert!(q.pop_expired(s(99)).is_none());
        assert_eq!(q.pop_expired(s(100)).map(|h| h.client), Some(ClientId(2)));
        assert!(q.pop_expired(s(100)).is_none());
        assert_eq!(q.next_deadline(), Some(s(300)));
    }

    #[test]
    fn a_departing_client_leaves_nothing_held() {
        let t = Instant::now();
        let mut q = HeldQueue::new(8);
        q.push(ClientId(1), msg(1), t).ok();
        q.push(ClientId(2), msg(2), t).ok();
        q.drop_client(ClientId(1));
        assert!(!q.has_client(ClientId(1)));
        assert!(q.has_client(ClientId(2)));
        assert_eq!(q.pop_oldest().map(|h| h.client), Some(ClientId(2)));
        assert_eq!(q.len(), 0);
    }
}
