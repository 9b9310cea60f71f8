//! Who holds which resource subscription (issue 6 §4; issue 12 §3). A client may hold a URI
//! directly (`resources/subscribe`) and through any number of its served listen streams at the
//! same time; the URI stays subscribed toward the child while any hold remains, and each kind
//! of hold is released on its own. The table also keeps the listen streams the supervisor
//! serves to 2026 clients of a handshake child ([`Listener`]), which hold URIs the same way.
//! Plain data: no clock, no I/O.

use std::collections::BTreeMap;

use super::subscribing::Listener;
use super::ClientId;

/// How a client holds a URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// A `resources/subscribe` the child (or the table) accepted.
    Direct,
    /// One served `subscriptions/listen` stream that lists the URI.
    Stream,
}

/// One client's holds on one URI.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Holds {
    direct: bool,
    streams: u32,
}

impl Holds {
    fn is_empty(self) -> bool {
        !self.direct && self.streams == 0
    }
}

/// URI → client → holds. Every entry holds something: empty entries are removed at once, so
/// `uris()` is exactly the set the child must be subscribed to.
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    by_uri: BTreeMap<String, BTreeMap<ClientId, Holds>>,
    /// Listen streams served here, in the order they were opened.
    listeners: Vec<Listener>,
}

impl Subscriptions {
    /// The listen streams served here.
    pub(super) fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// Serves listen stream `l` (its URIs are held by the caller with [`Hold::Stream`]).
    pub(super) fn serve(&mut self, l: Listener) {
        self.listeners.push(l);
    }

    /// Ends `client`'s served stream whose listen request had id key `key`; the caller
    /// releases its URIs.
    pub(super) fn end_listener(&mut self, client: ClientId, key: &str) -> Option<Listener> {
        let i = self.listeners.iter().position(|l| l.is(client, key))?;
        Some(self.listeners.remove(i))
    }

    /// Adds one hold; true when the URI had no holder before (subscribe toward the child).
    pub(super) fn add(&mut self, client: ClientId, uri: &str, hold: Hold) -> bool {
        let new = !self.by_uri.contains_key(uri);
        let h = self
            .by_uri
            .entry(uri.to_string())
            .or_default()
            .entry(client)
            .or_default();
        match hold {
            Hold::Direct => h.direct = true,
            Hold::Stream => h.streams = h.streams.saturating_add(1),
        }
        new
    }

    /// Removes one hold; true when the URI has no holder left (unsubscribe toward the child).
    /// Removing a hold that is not there changes nothing and returns false.
    pub(super) fn remove(&mut self, client: ClientId, uri: &str, hold: Hold) -> bool {
        let Some(holders) = self.by_uri.get_mut(uri) else {
            return false;
        };
        let Some(h) = holders.get_mut(&client) else {
            return false;
        };
        match hold {
            Hold::Direct => h.direct = false,
            Hold::Stream => h.streams = h.streams.saturating_sub(1),
        }
        if h.is_empty() {
            holders.remove(&client);
        }
        if holders.is_empty() {
            self.by_uri.remove(uri);
            return true;
        }
        false
    }

    /// Removes every hold of `client`; returns the URIs nobody holds any more.
    pub(super) fn remove_client(&mut self, client: ClientId) -> Vec<String> {
        let mut gone = Vec::new();
        self.by_uri.retain(|uri, holders| {
            holders.remove(&client);
            if holders.is_empty() {
                gone.push(uri.clone());
                return false;
            }
            true
        });
        gone
    }

    /// Whether anyone holds `uri` (in any way): the child is subscribed to it.
    pub(super) fn is_held(&self, uri: &str) -> bool {
        self.by_uri.contains_key(uri)
    }

    /// Whether `client` holds `uri` directly.
    pub(super) fn holds_direct(&self, client: ClientId, uri: &str) -> bool {
        self.by_uri
            .get(uri)
            .and_then(|h| h.get(&client))
            .is_some_and(|h| h.direct)
    }

    /// Clients holding `uri` directly (the ones a `resources/updated` goes to as a plain
    /// notification; stream holders get it on their stream).
    pub(super) fn direct_holders(&self, uri: &str) -> Vec<ClientId> {
        self.by_uri.get(uri).map_or_else(Vec::new, |h| {
            h.iter()
                .filter(|(_, h)| h.direct)
                .map(|(c, _)| *c)
                .collect()
        })
    }

    /// Direct subscriptions `client` holds (counted against `max_subscriptions`; stream URIs
    /// are counted with their stream).
    pub(super) fn direct_count(&self, client: ClientId) -> usize {
        self.by_uri
            .values()
            .filter(|h| h.get(&client).is_some_and(|h| h.direct))
            .count()
    }

    /// Every URI someone holds: what the child must be subscribed to.
    pub(super) fn uris(&self) -> impl Iterator<Item = &String> {
        self.by_uri.keys()
    }

    /// URIs held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_uri.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direct_hold_and_a_stream_hold_are_released_separately() {
        // The overlap bug: a direct unsubscribe used to drop the client entirely, so its
        // listen stream lost the URI's updates and the child was told to unsubscribe.
        let mut t = Subscriptions::default();
        assert!(t.add(ClientId(1), "u", Hold::Direct));
        assert!(!t.add(ClientId(1), "u", Hold::Stream));
        assert!(
            !t.remove(ClientId(1), "u", Hold::Direct),
            "the stream still holds it"
        );
        assert_eq!(t.uris().count(), 1);
        assert!(!t.holds_direct(ClientId(1), "u"));
        assert!(t.remove(ClientId(1), "u", Hold::Stream));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn two_streams_of_one_client_count_twice() {
        let mut t = Subscriptions::default();
        t.add(ClientId(1), "u", Hold::Stream);
        t.add(ClientId(1), "u", Hold::Stream);
        assert!(!t.remove(ClientId(1), "u", Hold::Stream));
        assert!(t.remove(ClientId(1), "u", Hold::Stream));
    }

    #[test]
    fn removing_what_is_not_held_changes_nothing() {
        let mut t = Subscriptions::default();
        t.add(ClientId(2), "u", Hold::Direct);
        assert!(!t.remove(ClientId(1), "u", Hold::Direct));
        assert!(!t.remove(ClientId(2), "u", Hold::Stream));
        assert!(!t.remove(ClientId(2), "v", Hold::Direct));
        assert_eq!(t.direct_holders("u"), vec![ClientId(2)]);
    }

    #[test]
    fn a_departing_client_frees_only_what_nobody_else_holds() {
        let mut t = Subscriptions::default();
        t.add(ClientId(1), "a", Hold::Direct);
        t.add(ClientId(1), "b", Hold::Stream);
        t.add(ClientId(2), "b", Hold::Direct);
        assert_eq!(t.remove_client(ClientId(1)), vec!["a".to_string()]);
        assert!(t.is_held("b"));
        assert!(!t.is_held("a"));
        assert_eq!(t.direct_count(ClientId(2)), 1);
    }
}
