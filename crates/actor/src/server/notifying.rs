//! The upstream's notifications, routed to clients (issue 3; issue 6 §3, §6): progress to the
//! owner of the request whose child-side id is the token, with the client's own token back;
//! the child's cancels of its own requests to the client it asked; `resources/updated` to
//! subscribers; log messages by level and era; the traffic of 2026 listen streams (a
//! client's stream to that client, the supervisor's own stream fanned out to handshake
//! clients); everything else session-wide, and to the served listen streams that asked for it.
//!
//! A section of the core as free functions over one narrow context ([`Notifying`]): it reads
//! the in-flight table and the subscription table, and sends only through the outbox. A list
//! announcement the cached copy should follow is returned to the caller
//! ([`on_notification`]), which owns the requests toward the upstream.
//!
//! No clock read, no I/O.

use super::core::Owner;
use super::opener::Opener;
use super::outbox::{Outbox, Stamp};
use super::routing::Routing;
use super::subtable::Subscriptions;
use super::telemetry::Telemetry;
use crate::era::{self, Era};
use crate::session::{ClientId, To};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashSet;
use support::observe::Outcome;
use tracing::debug;
use vocab::jsonrpc::message::{raw, Message, Out};

/// What routing a notification touches.
pub(super) struct Notifying<'a> {
    /// Read for owners (progress, log levels, listen streams); the child's asks and a
    /// client's ended stream leave it.
    routing: &'a mut Routing,
    subs: &'a Subscriptions,
    /// The child's era and the supervisor's own listen stream.
    opener: &'a mut Opener,
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    at: Stamp<'a>,
    /// The child is starting: its list announcements are its startup's, and the supervisor's
    /// own check decides.
    starting: bool,
}

impl<'a> Notifying<'a> {
    /// The context over the in-flight table, the subscription table, the opener, the outbox
    /// and the telemetry at `at`; `starting` while the child has not answered its handshake.
    pub(super) fn new(
        routing: &'a mut Routing,
        subs: &'a Subscriptions,
        opener: &'a mut Opener,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        starting: bool,
    ) -> Self {
        Notifying {
            routing,
            subs,
            opener,
            outbox,
            telemetry,
            at,
            starting,
        }
    }
}

/// Routes the child's notification `m`. Returns the list (`tools/list`, ...) whose cached
/// copy is to be refreshed: the child announced a change and no refresh of it is in flight
/// (one at a time, so a flood of announcements cannot grow the in-flight table).
pub(super) fn on_notification(cx: &mut Notifying<'_>, m: &Message) -> Option<&'static str> {
    let method = m.method();
    if route_listen_traffic(cx, method, m) {
        return None;
    }
    match method {
        "notifications/progress" => route_progress(cx, m),
        "notifications/cancelled" => route_child_cancel(cx, m),
        "notifications/message" => {
            let level = m
                .params_object()
                .and_then(|p| {
                    p.get("level")
                        .and_then(Value::as_str)
                        .and_then(era::log_rank)
                })
                .unwrap_or(0);
            route_log_message(cx, level, m);
        }
        "notifications/resources/updated" => route_resource_updated(cx, m),
        _ => {
            let list = era::LISTS
                .iter()
                .find(|(_, n, _)| *n == method)
                .map(|(l, _, _)| *l);
            if list.is_some_and(|l| startup_announcement(cx, l)) {
                debug!(
                    notification = %method,
                    "the fresh child announced a list at startup; the supervisor's check decides"
                );
                return None;
            }
            let line = Out::request(None, method, m.params.as_deref()).encode();
            broadcast(cx, &line, |_| true);
            feed_listeners(cx, method, None, m.params.as_deref());
            return list.filter(|l| !refreshing(cx.routing, l));
        }
    }
    None
}

/// Delivers a session-wide `line` to every client that finished its handshake and passes
/// `filter`.
pub(super) fn broadcast(
    cx: &mut Notifying<'_>,
    line: &Bytes,
    filter: impl Fn(&super::roster::Client) -> bool,
) {
    cx.outbox.broadcast(cx.telemetry, line, filter);
}

/// Whether a `list_changed` the child sent for `list` is a fresh instance's startup
/// announcement, folded into the supervisor's own check after a restart (issue 26 §7):
/// the child is still starting, or the re-read of that list after readiness (`announce`)
/// is in flight. That re-read is answered after the notification on the same stdout, so
/// it sees whatever the child announced, and clients hear of it exactly when the list
/// differs from the last instance's. Outside that window the child's word is passed on as
/// it is (a change past the first page, or in resource templates, cannot be compared).
fn startup_announcement(cx: &Notifying<'_>, list: &str) -> bool {
    cx.starting
        || cx.routing.inflight().iter().any(|(_, _, _, p)| {
            matches!(p.owner(), Owner::Refresh { method, announce: true } if *method == list)
        })
}

/// Whether a refresh of `list` is already in flight.
fn refreshing(routing: &Routing, list: &str) -> bool {
    routing
        .inflight()
        .iter()
        .any(|(_, _, _, p)| matches!(p.owner(), Owner::Refresh { method, .. } if *method == list))
}

/// `notifications/progress`: to the owner of the request whose child-side id is the token,
/// with the client's own token back.
fn route_progress(cx: &mut Notifying<'_>, m: &Message) {
    let Some(mut p) = m.params_object() else {
        return;
    };
    let token = p.get("progressToken").and_then(Value::as_u64);
    let owner = token
        .and_then(|t| cx.routing.inflight().get(t))
        .and_then(|pend| match pend.owner() {
            Owner::Client {
                client,
                progress: Some(orig),
                ..
            } => Some((*client, orig.clone())),
            _ => None,
        });
    let Some((client, orig)) = owner else { return };
    p.insert(
        "progressToken".into(),
        serde_json::from_str(orig.get()).unwrap_or(Value::Null),
    );
    let line = Out::request(None, m.method(), Some(&raw(&Value::Object(p)))).encode();
    cx.outbox
        .deliver(cx.telemetry, client, To::Progress(&orig), line);
}

/// The child gave up on one of its own requests to a client: that client is told, under the
/// id it was asked with.
fn route_child_cancel(cx: &mut Notifying<'_>, m: &Message) {
    let Some(mut p) = m.params_object() else {
        return;
    };
    let Some(rid) = p.get("requestId").map(Value::to_string) else {
        return;
    };
    if let Some((client, n)) = cx.routing.take_child_ask(&rid) {
        p.insert("requestId".into(), json!(n));
        let line = Out::request(None, m.method(), Some(&raw(&Value::Object(p)))).encode();
        cx.outbox.deliver(cx.telemetry, client, To::Session, line);
    }
}

/// `notifications/resources/updated`: to the handshake clients subscribed to the URI and to
/// the served listen streams that asked for it.
fn route_resource_updated(cx: &mut Notifying<'_>, m: &Message) {
    let uri = m
        .params_object()
        .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string));
    let holders = uri
        .as_ref()
        .map_or_else(Vec::new, |u| cx.subs.direct_holders(u));
    let line = Out::request(None, m.method(), m.params.as_deref()).encode();
    for c in holders {
        if cx.outbox.era_of(c) == Era::Handshake {
            cx.outbox
                .deliver(cx.telemetry, c, To::Session, line.clone());
        }
    }
    feed_listeners(cx, m.method(), uri.as_deref(), m.params.as_deref());
}

/// Served listen streams of modern clients get a handshake child's notification `method`
/// (about `uri`) when they asked for it, tagged with their subscription id.
pub(super) fn feed_listeners(
    cx: &mut Notifying<'_>,
    method: &str,
    uri: Option<&str>,
    params: Option<&RawValue>,
) {
    for l in cx.subs.listeners().iter().filter(|l| l.wants(method, uri)) {
        let line = l.notification(method, params);
        cx.outbox
            .deliver(cx.telemetry, l.client(), To::Listen(l.id()), line);
    }
}

/// `notifications/message` routing (issue 6 §6). A handshake child's messages are
/// session-wide: handshake clients get those at or above their `logging/setLevel` (all, if
/// they never set one). A 2026 message carries no correlation key on a shared stdio channel,
/// so it goes to every client with a request in flight that asked for logging (`_meta`
/// logLevel, or a handshake client's level toward a modern child) at or below the message's
/// `level`; never to a client that did not ask for logging.
fn route_log_message(cx: &mut Notifying<'_>, level: usize, m: &Message) {
    let asking: HashSet<ClientId> = cx
        .routing
        .inflight()
        .iter()
        .filter_map(|(_, _, _, p)| match p.owner() {
            Owner::Client {
                client,
                log_level: Some(l),
                ..
            } if level >= *l => Some(*client),
            _ => None,
        })
        .collect();
    let child_era = cx.opener.child_era();
    let line = Out::request(None, "notifications/message", m.params.as_deref()).encode();
    let targets: Vec<ClientId> = cx
        .outbox
        .clients()
        .iter()
        .filter(
            |(id, c)| match (child_era, c.era().unwrap_or(Era::Handshake)) {
                (Era::Handshake, Era::Handshake) => {
                    c.initialized() && c.log_level().is_none_or(|min| level >= min)
                }
                _ => asking.contains(id),
            },
        )
        .map(|(id, _)| *id)
        .collect();
    for c in targets {
        cx.outbox
            .deliver(cx.telemetry, c, To::Session, line.clone());
    }
}

/// Traffic of 2026 listen streams on a modern child (`_meta.subscriptionId` = the listen
/// request's child-side id): a client's stream goes to that client with its own id; the
/// supervisor's stream is fanned out to handshake clients as session-wide notifications.
/// Returns whether the notification `m` (`method`) was listen traffic.
fn route_listen_traffic(cx: &mut Notifying<'_>, method: &str, m: &Message) -> bool {
    let Some(raw_params) = m.params.as_deref() else {
        return false;
    };
    if !raw_params.get().contains(era::META_SUBSCRIPTION_ID) && method != "notifications/cancelled"
    {
        return false;
    }
    let Some(mut params) = m.params_object() else {
        return false;
    };
    let sub = if method == "notifications/cancelled" {
        params.get("requestId").and_then(Value::as_u64)
    } else {
        params
            .get("_meta")
            .and_then(|x| x.get(era::META_SUBSCRIPTION_ID))
            .and_then(Value::as_u64)
    };
    let Some(sub) = sub else { return false };
    if Some(sub) == cx.opener.listen() {
        if method == "notifications/cancelled" {
            cx.opener.listen_ended(sub);
            return true;
        }
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(era::META_SUBSCRIPTION_ID);
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
        let line = Out::request(None, method, Some(&raw(&Value::Object(params.clone())))).encode();
        match method {
            "notifications/resources/updated" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                for c in cx.subs.direct_holders(uri) {
                    cx.outbox
                        .deliver(cx.telemetry, c, To::Session, line.clone());
                }
            }
            "notifications/subscriptions/acknowledged" => {}
            _ if era::LISTS
                .iter()
                .any(|(l, n, _)| *n == method && startup_announcement(cx, l)) => {}
            _ => broadcast(cx, &line, |c| c.era() != Some(Era::Modern)),
        }
        return true;
    }
    let owner = cx
        .routing
        .inflight()
        .get(sub)
        .and_then(|p| match p.owner() {
            Owner::Client { client, id, .. } if p.method() == "subscriptions/listen" => {
                Some((*client, id.clone()))
            }
            _ => None,
        });
    let Some((client, id)) = owner else {
        // A cancel of another request: routed as usual. Traffic tagged with a stream that is
        // no longer open (its cancel crossed the child's notifications, or its client left)
        // belongs to nobody: never fanned out as session-wide (sim seed 124).
        if method != "notifications/cancelled" {
            debug!(notification = %method, subscription = sub, "traffic of a listen stream no longer open: dropped");
        }
        return method != "notifications/cancelled";
    };
    let original: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
    if method == "notifications/cancelled" {
        // The child ended the client's stream.
        params.insert("requestId".into(), original);
        if let Some(r) = cx.routing.inflight_mut().remove(sub) {
            if let Some((c, key)) = r.client {
                cx.outbox
                    .finish(cx.telemetry, &cx.at, c, &key, Outcome::Cancelled, None);
            }
        }
    } else if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.insert(era::META_SUBSCRIPTION_ID.into(), original);
    }
    if method == "notifications/subscriptions/acknowledged" {
        if let Some(p) = cx.routing.inflight_mut().get_mut(sub) {
            p.ack();
        }
    }
    let line = Out::request(None, method, Some(&raw(&Value::Object(params)))).encode();
    cx.outbox
        .deliver(cx.telemetry, client, To::Listen(&id), line);
    true
}
