//! A 2026-07-28 client's `subscriptions/listen` streams through an endpoint (issue 31 §2):
//! the endpoint acknowledges each stream itself, opens one stream toward every source under a
//! number minted for it, and puts the sources' stream traffic back on the client's stream,
//! named by the client's own id (`_meta["io.modelcontextprotocol/subscriptionId"]`,
//! reference/protocol.md §6.2-6.3).
//!
//! Owns: the table of a client's open streams and, for each, which source numbers belong to
//! it and which sources' streams ended (to be opened again once the source answers again).
//! Pure: `conn.rs` sends what it decides.

use actor::ids::id_key;
use actor::session::Address;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use vocab::jsonrpc::framing::Line;
use vocab::jsonrpc::message::{self, Out};
use vocab::protocol::META_SUBSCRIPTION_ID;

/// Streams one client may hold open at once through an endpoint; one more is refused
/// (-32002), as a source refuses beyond `max_subscriptions`.
pub const MAX_STREAMS: usize = 16;

/// Resource URIs one stream may name; the rest are not honoured (and the acknowledgement
/// says so by leaving them out).
pub const MAX_URIS: usize = 256;

/// What a stream asked for (`params.notifications`): the protocol's own reading, shared with
/// the actor's served streams (issue 48 §4).
pub use vocab::protocol::ListenFilter as Filter;

/// Whether a source's notification `method` (about `uri`) belongs on the stream of `filter`.
fn wants(filter: &Filter, method: &str, uri: Option<&str>) -> bool {
    match method {
        "notifications/tools/list_changed" => filter.tools,
        "notifications/prompts/list_changed" => filter.prompts,
        "notifications/resources/list_changed" => filter.resources,
        "notifications/resources/updated" => {
            uri.is_some_and(|u| filter.uris.iter().any(|x| x == u))
        }
        // The sources' acknowledgements are theirs; the endpoint sent its own.
        "notifications/subscriptions/acknowledged" => false,
        _ => true,
    }
}

/// One open stream of the client.
#[derive(Debug)]
struct Stream {
    /// The client's request id.
    id: Box<RawValue>,
    filter: Filter,
    /// The number each source's stream was opened under.
    toward: Vec<(usize, u64)>,
    /// Sources whose stream ended (an outage, a restart): opened again when they answer.
    ended: Vec<usize>,
}

/// The client's open streams, by the key of its request id.
#[derive(Debug, Default)]
pub struct Listens {
    streams: HashMap<String, Stream>,
}

impl Listens {
    /// Whether another stream may be opened ([`MAX_STREAMS`]).
    pub fn has_room(&self) -> bool {
        self.streams.len() < MAX_STREAMS
    }

    /// Opens the client's stream `id` with `filter`; its sources' streams are added with
    /// [`Listens::toward`]. Gives the acknowledgement for the client.
    pub fn open(&mut self, id: &RawValue, filter: Filter) -> (Address, Line) {
        let honoured = filter.notifications(&filter.uris);
        let key = id_key(id);
        self.streams.insert(
            key.clone(),
            Stream {
                id: id.to_owned(),
                filter,
                toward: Vec::new(),
                ended: Vec::new(),
            },
        );
        let line = on_stream(
            id,
            "notifications/subscriptions/acknowledged",
            Map::from_iter([("notifications".to_string(), honoured)]),
        );
        (Address::Listen(key), line)
    }

    /// The filter of the client's stream `key`.
    pub fn filter(&self, key: &str) -> Option<&Filter> {
        self.streams.get(key).map(|s| &s.filter)
    }

    /// Source `source`'s stream for the client's stream `key` was opened under `n`.
    pub fn toward(&mut self, key: &str, source: usize, n: u64) {
        if let Some(s) = self.streams.get_mut(key) {
            s.toward.retain(|(src, _)| *src != source);
            s.ended.retain(|src| *src != source);
            s.toward.push((source, n));
        }
    }

    /// The client cancelled its stream `key`: the source numbers to cancel. `None` when it
    /// is not a stream.
    pub fn cancel(&mut self, key: &str) -> Option<Vec<(usize, u64)>> {
        self.streams.remove(key).map(|s| s.toward)
    }

    /// Source `source`'s stream `n` ended (answered, cancelled by the source): it is opened
    /// again once the source answers anything. Gives whether `n` was one.
    pub fn ended(&mut self, source: usize, n: u64) -> bool {
        for s in self.streams.values_mut() {
            if s.toward.contains(&(source, n)) {
                s.toward.retain(|t| *t != (source, n));
                if !s.ended.contains(&source) {
                    s.ended.push(source);
                }
                return true;
            }
        }
        false
    }

    /// Source `source` refused its part `n` of a stream: the stream goes on without it (it is
    /// not asked again).
    pub fn refused(&mut self, source: usize, n: u64) {
        for s in self.streams.values_mut() {
            s.toward.retain(|t| *t != (source, n));
        }
    }

    /// Source `source`'s actor closed this client: its streams are gone for good.
    pub fn source_closed(&mut self, source: usize) {
        for s in self.streams.values_mut() {
            s.toward.retain(|(src, _)| *src != source);
            s.ended.retain(|src| *src != source);
        }
    }

    /// Each open stream as the `subscriptions/listen` request that opens it again, under the
    /// client's own id, with `envelope` (`{"_meta": {…}}`, the client's protocol keys) and
    /// the stream's filter: what an upgrade replays in the next image (issue 32 §1).
    pub fn requests(&self, envelope: Option<&RawValue>) -> Vec<String> {
        let meta = envelope
            .and_then(|e| serde_json::from_str::<Value>(e.get()).ok())
            .and_then(|mut e| e.get_mut("_meta").map(Value::take));
        self.streams
            .values()
            .map(|s| {
                let mut params = Map::new();
                params.insert(
                    "notifications".into(),
                    s.filter.notifications(&s.filter.uris),
                );
                if let Some(m) = &meta {
                    params.insert("_meta".into(), m.clone());
                }
                let id: Value = serde_json::from_str(s.id.get()).unwrap_or(Value::Null);
                json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                    "params": params})
                .to_string()
            })
            .collect()
    }

    /// The client's streams whose stream toward `source` ended, to open again (each once:
    /// the caller opens them and records them with [`Listens::toward`]).
    pub fn to_reopen(&mut self, source: usize) -> Vec<String> {
        self.streams
            .iter_mut()
            .filter(|(_, s)| s.ended.contains(&source))
            .map(|(k, s)| {
                s.ended.retain(|src| *src != source);
                k.clone()
            })
            .collect()
    }

    /// Whether a stream toward some source ended and waits to be opened again.
    pub fn any_ended(&self) -> bool {
        self.streams.values().any(|s| !s.ended.is_empty())
    }

    /// Whether `n` is one of `source`'s stream numbers.
    pub fn is_stream(&self, source: usize, n: u64) -> bool {
        self.streams
            .values()
            .any(|s| s.toward.contains(&(source, n)))
    }

    /// Source `source`'s notification on its stream `n`, for the client: put on the client's
    /// stream (its id in `_meta`) when the stream asked for it; `None` otherwise.
    pub fn traffic(
        &self,
        source: usize,
        n: u64,
        method: &str,
        mut params: Map<String, Value>,
    ) -> Option<(Address, Line)> {
        let s = self
            .streams
            .values()
            .find(|s| s.toward.contains(&(source, n)))?;
        let uri = params.get("uri").and_then(Value::as_str);
        if !wants(&s.filter, method, uri) {
            return None;
        }
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(META_SUBSCRIPTION_ID);
        }
        Some((
            Address::Listen(id_key(&s.id)),
            on_stream(&s.id, method, params),
        ))
    }

    /// `notifications/{kind}/list_changed` on every stream that asked for it (the endpoint's
    /// own announcement: a source recovered, the policy changed).
    pub fn announce(&self, method: &str) -> Vec<(Address, Line)> {
        self.streams
            .values()
            .filter(|s| wants(&s.filter, method, None))
            .map(|s| {
                (
                    Address::Listen(id_key(&s.id)),
                    on_stream(&s.id, method, Map::new()),
                )
            })
            .collect()
    }
}

/// Notification `method` with `params` on the stream of the client's request `id`.
fn on_stream(id: &RawValue, method: &str, mut params: Map<String, Value>) -> Line {
    let sub: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(m) = meta.as_object_mut() {
        m.insert(META_SUBSCRIPTION_ID.into(), sub);
    }
    Line::from(Out::request(None, method, Some(&message::raw(&Value::Object(params)))).encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i64) -> Box<RawValue> {
        message::raw(&json!(n))
    }

    fn text(l: &Line) -> Value {
        serde_json::from_slice(&l.to_bytes()).unwrap()
    }

    #[test]
    fn a_stream_is_acknowledged_with_what_it_asked_and_gets_only_that() {
        let mut l = Listens::default();
        let params = json!({"notifications": {"toolsListChanged": true,
            "resourceSubscriptions": ["file:///a"]}});
        let f = Filter::of(params.as_object().unwrap(), MAX_URIS);
        let (to, ack) = l.open(&id(7), f);
        assert!(matches!(to, Address::Listen(ref k) if k == "7"));
        let ack = text(&ack);
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION_ID], 7);
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///a"]})
        );
        l.toward("7", 0, 41);
        l.toward("7", 1, 42);
        let tagged = |n: u64| {
            json!({"_meta": {META_SUBSCRIPTION_ID: n}})
                .as_object()
                .unwrap()
                .clone()
        };
        let (to, line) = l
            .traffic(1, 42, "notifications/tools/list_changed", tagged(42))
            .unwrap();
        assert!(matches!(to, Address::Listen(ref k) if k == "7"));
        assert_eq!(text(&line)["params"]["_meta"][META_SUBSCRIPTION_ID], 7);
        assert!(l
            .traffic(1, 42, "notifications/prompts/list_changed", tagged(42))
            .is_none());
        let mut upd = tagged(41);
        upd.insert("uri".into(), json!("file:///b"));
        assert!(l
            .traffic(0, 41, "notifications/resources/updated", upd.clone())
            .is_none());
        upd.insert("uri".into(), json!("file:///a"));
        assert!(l
            .traffic(0, 41, "notifications/resources/updated", upd)
            .is_some());
        // Not a stream number: nothing.
        assert!(l
            .traffic(0, 99, "notifications/tools/list_changed", tagged(99))
            .is_none());
    }

    #[test]
    fn an_ended_source_stream_is_reopened_once_and_a_cancel_names_every_source_number() {
        let mut l = Listens::default();
        l.open(&id(1), Filter::default());
        l.toward("1", 0, 10);
        l.toward("1", 1, 11);
        assert!(l.ended(1, 11));
        assert!(!l.ended(1, 11));
        assert_eq!(l.to_reopen(1), vec!["1".to_string()]);
        assert!(l.to_reopen(1).is_empty());
        l.toward("1", 1, 12);
        assert!(l.is_stream(1, 12) && !l.is_stream(1, 11));
        let mut cancelled = l.cancel("1").unwrap();
        cancelled.sort_unstable();
        assert_eq!(cancelled, vec![(0, 10), (1, 12)]);
        assert!(l.cancel("1").is_none());
    }

    #[test]
    fn streams_are_bounded() {
        let mut l = Listens::default();
        for n in 0..MAX_STREAMS {
            assert!(l.has_room());
            l.open(&id(n as i64), Filter::default());
        }
        assert!(!l.has_room());
        let many: Vec<String> = (0..MAX_URIS + 10).map(|i| format!("u{i}")).collect();
        let params = json!({"notifications": {"resourceSubscriptions": many}});
        assert_eq!(
            Filter::of(params.as_object().unwrap(), MAX_URIS).uris.len(),
            MAX_URIS
        );
    }
}
