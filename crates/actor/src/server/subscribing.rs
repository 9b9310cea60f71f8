//! Resource subscriptions and the listen streams served to 2026 clients of a handshake child
//! (issue 6 §3-4): what a client's `subscriptions/listen`, `resources/subscribe` and
//! `resources/unsubscribe` change in the subscription table, and what is answered. A section
//! of the core as free functions over one narrow context ([`Subscribing`]): the table and the
//! outbox. What must be asked of the upstream (a `resources/subscribe` for a URI nobody held,
//! a `resources/unsubscribe` for one nobody holds any more, a new listen stream of the
//! supervisor's own on a 2026 child) is returned to the caller, which owns the requests toward
//! the upstream.
//!
//! No clock read, no I/O.

use super::core::Pending;
use super::held::HeldQueue;
use super::outbox::{Outbox, Stamp};
use super::routing::Routing;
use super::subtable::{Hold, Subscriptions};
use super::telemetry::Telemetry;
use crate::era;
use crate::ids::{id_key, id_key_ref};
use crate::session::{ClientId, To};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use support::observe::Outcome;
use vocab::jsonrpc::message::{code, raw, Message, Out};
use vocab::protocol::ListenFilter;

/// What a subscription decision touches.
pub(super) struct Subscribing<'a> {
    subs: &'a mut Subscriptions,
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    /// The moment, for the request records.
    at: Stamp<'a>,
}

impl<'a> Subscribing<'a> {
    /// The context over the subscription table, the outbox and the telemetry at `at`.
    pub(super) fn new(
        subs: &'a mut Subscriptions,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
    ) -> Self {
        Subscribing {
            subs,
            outbox,
            telemetry,
            at,
        }
    }
}

/// A modern client's `subscriptions/listen` (request `m`) on a handshake child: acknowledged at
/// once and fed from the child's session-wide notifications. Every URI is read; at most `room`
/// are honoured (the stream counts as one of the client's `max_subscriptions`, each URI as one
/// more), and none when the child cannot subscribe. The request stays open until the client
/// cancels it. Returns the URIs nobody held before: the child is to be subscribed to them.
pub(super) fn serve_listen(
    cx: &mut Subscribing<'_>,
    client: ClientId,
    m: Message,
    can_subscribe: bool,
    room: usize,
) -> Vec<String> {
    let asked = ListenFilter::of(&m.params_object().unwrap_or_default(), usize::MAX);
    let Some(id) = m.id else {
        return Vec::new();
    };
    let honoured_uris: Vec<String> = if can_subscribe {
        asked.uris.iter().take(room).cloned().collect()
    } else {
        Vec::new()
    };
    let fresh: Vec<String> = honoured_uris
        .iter()
        .filter(|uri| cx.subs.add(client, uri, Hold::Stream))
        .cloned()
        .collect();
    let honoured = asked.notifications(&honoured_uris);
    let l = Listener {
        client,
        id,
        tools: asked.tools,
        prompts: asked.prompts,
        resources: asked.resources,
        uris: honoured_uris,
    };
    let ack = l.notification(
        "notifications/subscriptions/acknowledged",
        Some(&raw(&json!({"notifications": honoured}))),
    );
    let id = l.id().to_owned();
    cx.subs.serve(l);
    cx.outbox
        .deliver(cx.telemetry, client, To::Listen(&id), ack);
    fresh
}

/// Ends `client`'s served listen stream opened by the request with id key `key` (its cancel
/// or its departure), and finishes that request as cancelled. `None` when it has none; else
/// the URIs nobody holds any more: the child is to be unsubscribed from them.
pub(super) fn end_listener(
    cx: &mut Subscribing<'_>,
    client: ClientId,
    key: &str,
) -> Option<Vec<String>> {
    let l = cx.subs.end_listener(client, key)?;
    let released: Vec<String> = l
        .uris
        .into_iter()
        .filter(|uri| cx.subs.remove(client, uri, Hold::Stream))
        .collect();
    cx.outbox
        .finish(cx.telemetry, &cx.at, client, key, Outcome::Cancelled, None);
    Some(released)
}

/// `resources/subscribe`/`unsubscribe` (request `m`) from a handshake client of a modern
/// child: kept here; updates reach subscribers from the supervisor's listen stream. Returns
/// whether the set of held URIs changed: the supervisor's listen stream is to be re-opened.
pub(super) fn subscription_on_modern(
    cx: &mut Subscribing<'_>,
    client: ClientId,
    m: Message,
) -> bool {
    let Some(id) = m.id.as_deref() else {
        return false;
    };
    let Some(uri) = subscribed_uri(&m) else {
        let line =
            vocab::jsonrpc::message::error_response(id, code::INVALID_PARAMS, "missing uri", None);
        cx.outbox.respond(
            cx.telemetry,
            &cx.at,
            client,
            id,
            line,
            Outcome::Invalid,
            Some(code::INVALID_PARAMS),
        );
        return false;
    };
    let changed = if m.method() == "resources/subscribe" {
        cx.subs.add(client, &uri, Hold::Direct)
    } else {
        cx.subs.remove(client, &uri, Hold::Direct)
    };
    cx.outbox.respond_result(
        cx.telemetry,
        &cx.at,
        client,
        id,
        m.method(),
        json!({}),
        Outcome::Ok,
    );
    changed
}

/// `resources/subscribe`/`unsubscribe` (request `m`) of `client` toward a handshake child,
/// refcounted: answered here (returns `true`) when the child's subscription does not change,
/// that is, the URI is held by someone else or by this client through a listen stream. A
/// subscribe of a URI nobody holds, or the unsubscribe of its last hold, goes to the child
/// (`false`; the table records the subscribe when the child says yes).
pub(super) fn local_subscription(cx: &mut Subscribing<'_>, client: ClientId, m: &Message) -> bool {
    let Some(uri) = subscribed_uri(m) else {
        return false;
    };
    let Some(id) = m.id.as_deref() else {
        return false;
    };
    let held = cx.subs.is_held(&uri);
    let local = if m.method() == "resources/subscribe" {
        if held {
            cx.subs.add(client, &uri, Hold::Direct);
        }
        held
    } else {
        let last = cx.subs.remove(client, &uri, Hold::Direct);
        !last && held
    };
    if local {
        cx.outbox.respond_result(
            cx.telemetry,
            &cx.at,
            client,
            id,
            m.method(),
            json!({}),
            Outcome::Ok,
        );
    }
    local
}

/// The `uri` param of a subscribe or unsubscribe request.
fn subscribed_uri(m: &Message) -> Option<String> {
    m.params_object()
        .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string))
}

/// A modern client's `subscriptions/listen` stream, served by the supervisor from a handshake
/// child's session-wide notifications (issue 6 §3).
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) client: ClientId,
    /// The listen request's id: the stream's subscription id.
    pub(super) id: Box<RawValue>,
    pub(super) tools: bool,
    pub(super) prompts: bool,
    pub(super) resources: bool,
    pub(super) uris: Vec<String>,
}

impl Listener {
    /// The client it is served to.
    pub(super) fn client(&self) -> ClientId {
        self.client
    }

    /// Whether it is `client`'s stream opened by the listen request with id key `key`.
    pub(super) fn is(&self, client: ClientId, key: &str) -> bool {
        self.client == client && id_key_ref(&self.id) == key
    }

    /// The id of its listen request (its subscription id).
    pub(super) fn id(&self) -> &RawValue {
        &self.id
    }

    /// The id key of its listen request.
    pub(super) fn key(&self) -> String {
        id_key(&self.id)
    }

    /// What it counts against its client's `max_subscriptions`: the stream and each URI.
    pub(super) fn weight(&self) -> usize {
        1 + self.uris.len()
    }

    /// Whether this stream asked for the notification `method` (about `uri`).
    pub(super) fn wants(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => {
                uri.is_some_and(|u| self.uris.iter().any(|x| x == u))
            }
            _ => false,
        }
    }

    /// `method` on this stream: its params with `_meta.subscriptionId` set to the stream's id.
    pub(super) fn notification(&self, method: &str, params: Option<&RawValue>) -> Bytes {
        let mut p = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .unwrap_or(json!({}));
        if !p.is_object() {
            p = json!({});
        }
        let id: Value = serde_json::from_str(self.id.get()).unwrap_or(Value::Null);
        if let Some(o) = p.as_object_mut() {
            o.insert("_meta".into(), json!({ era::META_SUBSCRIPTION_ID: id }));
        }
        Out::request(None, method, Some(&raw(&p))).encode()
    }
}

/// Resource subscriptions and listen streams `client` holds, the table `max_subscriptions`
/// bounds: subscribed directly, listen streams served here (by weight), and requests that may
/// still add one (in flight to the child in `routing`, or `held` until it is ready).
pub(super) fn held_by(
    routing: &Routing,
    subs: &Subscriptions,
    held: &HeldQueue,
    client: ClientId,
) -> usize {
    let direct = subs.direct_count(client);
    let served: usize = subs
        .listeners()
        .iter()
        .filter(|l| l.client() == client)
        .map(|l| l.weight())
        .sum();
    let grows = |m: &str| matches!(m, "subscriptions/listen" | "resources/subscribe");
    let routed = routing
        .inflight()
        .iter()
        .filter(|(_, c, _, p)| *c == Some(client) && grows(p.method()))
        .count();
    direct + served + routed + held.count(client, grows)
}

/// Whether `client`'s listen stream with id key `key` is open: forwarded to the child (in
/// `routing`) or served here.
pub(super) fn listen_open(
    routing: &Routing,
    subs: &Subscriptions,
    client: ClientId,
    key: &str,
) -> bool {
    let forwarded = routing
        .inflight()
        .lookup(client, key)
        .and_then(|n| routing.inflight().get(n))
        .is_some_and(Pending::is_listen);
    forwarded || subs.listeners().iter().any(|l| l.is(client, key))
}

/// The id keys of `client`'s open listen streams, forwarded or served here.
pub(super) fn open_listens_of(
    routing: &Routing,
    subs: &Subscriptions,
    client: ClientId,
) -> Vec<String> {
    let mut open: Vec<String> = routing
        .inflight()
        .iter()
        .filter(|(_, c, _, p)| *c == Some(client) && p.is_listen())
        .filter_map(|(_, _, _, p)| p.client_request().map(|(_, k)| k))
        .collect();
    open.extend(
        subs.listeners()
            .iter()
            .filter(|l| l.client() == client)
            .map(|l| l.key()),
    );
    open
}
