//! The ledger: exactly one outcome per client request (issue 8; issue 12 §3). Every request a
//! client sends opens an entry on arrival (or is refused as a duplicate of one still open,
//! K23); every path that answers it (a response, an outage, a timeout, a cancel, the client
//! leaving) closes the entry once, which is when the request log line and the metrics are
//! written. Plain data: no clock, no I/O.

use crate::session::ClientId;
use std::time::Instant;
use support::logging::requests::RequestId;
use support::observe::trace;

/// What the request log needs about a client request, from arrival to its one outcome.
#[derive(Debug)]
pub(super) struct Tracked {
    /// The id shown to the client in errors and in the log (`r-...`).
    pub(super) rid: RequestId,
    /// The method (borrowed for the methods MCP defines: no allocation).
    pub(super) method: std::borrow::Cow<'static, str>,
    pub(super) tool: Option<Box<str>>,
    /// Keys of `tools/call` arguments joined with `,` (never their values).
    pub(super) arg_keys: Box<str>,
    pub(super) started: Instant,
    /// The child instance running when the request arrived, if any.
    pub(super) generation: Option<u64>,
    /// The request's span when traces are on (issue 17 §4); `None`, and nothing allocated,
    /// when they are off.
    pub(super) span: Option<Box<trace::SpanStart>>,
}

/// Unfinished client requests, by client and canonical id text (`id_key`).
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Fx-hashed, as the in-flight table (`actor::ids`): one client's map holds only its own
    /// ids, bounded by `client_max_inflight` and `queue_limit`.
    open: rustc_hash::FxHashMap<ClientId, rustc_hash::FxHashMap<String, Tracked>>,
    len: usize,
}

/// The id is already open for that client (K23).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Duplicate;

impl Ledger {
    /// Opens `client`'s request `key`, unless one with that key is still open.
    pub(super) fn open(
        &mut self,
        client: ClientId,
        key: String,
        t: impl FnOnce() -> Tracked,
    ) -> Result<(), Duplicate> {
        match self.open.entry(client).or_default().entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => Err(Duplicate),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(t());
                self.len += 1;
                Ok(())
            }
        }
    }

    /// Closes `client`'s request `key`: its entry, once; `None` when it was closed already.
    pub(super) fn close(&mut self, client: ClientId, key: &str) -> Option<Tracked> {
        // A client's map stays while it is connected, even when empty (no table allocated
        // per request of a client with one at a time); [`Ledger::forget`] drops it.
        let t = self.open.get_mut(&client)?.remove(key)?;
        self.len -= 1;
        Some(t)
    }

    /// Drops `client`'s map (it left; its open requests were closed first).
    pub(super) fn forget(&mut self, client: ClientId) {
        if let Some(left) = self.open.remove(&client) {
            self.len -= left.len();
        }
    }

    /// The log id of `client`'s open request `key`.
    pub(super) fn rid(&self, client: ClientId, key: &str) -> Option<RequestId> {
        self.open.get(&client)?.get(key).map(|t| t.rid)
    }

    /// The keys of `client`'s open requests.
    pub(super) fn keys_of(&self, client: ClientId) -> Vec<String> {
        self.open
            .get(&client)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The span of `client`'s open request `key`, when it is traced.
    pub(super) fn span(&self, client: ClientId, key: &str) -> Option<&trace::SpanStart> {
        self.open.get(&client)?.get(key)?.span.as_deref()
    }

    /// Open requests, all clients (the simulation checks its bound).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(method: &str) -> Tracked {
        Tracked {
            rid: RequestId(method.len() as u64),
            method: method.to_string().into(),
            tool: None,
            arg_keys: "".into(),
            started: Instant::now(),
            generation: None,
            span: None,
        }
    }

    #[test]
    fn case_k23_an_open_id_is_a_duplicate_for_its_client_only() {
        let mut l = Ledger::default();
        let (a, b) = (ClientId(1), ClientId(2));
        assert_eq!(l.open(a, "1".into(), || t("first!")), Ok(()));
        assert_eq!(l.open(a, "1".into(), || t("second")), Err(Duplicate));
        assert_eq!(
            l.rid(a, "1"),
            Some(RequestId(6)),
            "the first entry is untouched"
        );
        assert_eq!(
            l.open(b, "1".into(), || t("other")),
            Ok(()),
            "ids are per client"
        );
        assert_eq!(
            l.open(a, "\"1\"".into(), || t("string")),
            Ok(()),
            "1 and \"1\" differ"
        );
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn an_entry_closes_exactly_once_and_its_id_is_free_again() {
        let mut l = Ledger::default();
        let a = ClientId(1);
        l.open(a, "7".into(), || t("x")).ok();
        assert_eq!(l.close(a, "7").map(|t| t.method), Some("x".into()));
        assert!(l.close(a, "7").is_none(), "one outcome per request");
        assert_eq!(l.len(), 0);
        assert_eq!(l.open(a, "7".into(), || t("again")), Ok(()));
    }

    #[test]
    fn a_departing_client_finds_all_its_open_keys() {
        let mut l = Ledger::default();
        let (a, b) = (ClientId(1), ClientId(2));
        for k in ["1", "2", "3"] {
            l.open(a, k.into(), || t(k)).ok();
        }
        l.open(b, "1".into(), || t("b")).ok();
        let mut keys = l.keys_of(a);
        keys.sort();
        assert_eq!(keys, ["1", "2", "3"]);
        for k in keys {
            l.close(a, &k);
        }
        assert!(l.keys_of(a).is_empty());
        assert_eq!(l.len(), 1);
    }
}
