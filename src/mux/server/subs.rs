//! Resource subscriptions (refcounted toward the child) and `subscriptions/listen` streams:
//! the supervisor's own on a 2026 child, and served ones for 2026 clients of a handshake child.

use super::subtable::Hold;
use super::{Lane, Owner, Server, State};
use crate::jsonrpc::message::{code, raw, Message, Out};
use crate::mux::era;
use crate::mux::era::Era;
use crate::mux::ids::{id_key, id_key_ref};
use crate::mux::session::ClientId;
use crate::mux::session::To;
use crate::observe::Outcome;
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

impl Server {
    /// Opens (or re-opens, with the current resource subscriptions) the supervisor's own listen
    /// stream on a modern child, so handshake clients keep receiving list-changed and
    /// resource-updated notifications (issue 6 §4).
    pub(super) fn open_listen(&mut self) {
        if self.child_era() != Era::Modern || self.life.state() != State::Ready {
            return;
        }
        if let Some(old) = self.opener.replace_listen(None) {
            self.routing.inflight_mut().remove(old);
            let p = raw(&json!({"requestId": old, "reason": "subscriptions changed"}));
            let line = Out::request(None, "notifications/cancelled", Some(&p)).encode();
            self.write_child(
                line,
                Lane::Urgent,
                "notifications/cancelled for the old listen stream",
            );
        }
        let uris: Vec<&String> = self.subs.uris().collect();
        let p = raw(&json!({"notifications": {
            "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true,
            "resourceSubscriptions": uris,
        }}));
        // It lives until it is cancelled: no deadline.
        let id = self.send_to_child(Owner::Listen, "subscriptions/listen", Some(p), None);
        self.opener.replace_listen(id);
    }

    /// A modern client's `subscriptions/listen` on a handshake child: acknowledged at once and
    /// fed from the child's session-wide notifications; resource subscriptions are made toward
    /// the child as needed. The request stays open until the client cancels it.
    pub(super) fn serve_listen(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let filter = m
            .params_object()
            .and_then(|p| p.get("notifications").cloned())
            .unwrap_or(json!({}));
        let flag = |k: &str| filter.get(k).and_then(Value::as_bool).unwrap_or(false);
        let uris: Vec<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let can_subscribe = self
            .opener
            .handshake()
            .is_some_and(|h| h.capabilities.pointer("/resources/subscribe") == Some(&json!(true)));
        // The stream itself counts as one of the client's `max_subscriptions`, each URI as one
        // more: a listen request cannot grow the subscription table beyond the limit.
        let room = self
            .cfg
            .max_subscriptions
            .saturating_sub(self.subscriptions_of(client) + 1);
        let honoured_uris: Vec<String> = if can_subscribe {
            uris.into_iter().take(room).collect()
        } else {
            Vec::new()
        };
        for uri in &honoured_uris {
            let new = self.subs.add(client, uri, Hold::Stream);
            if new && self.life.state() == State::Ready {
                let far = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
                self.send_to_child(
                    Owner::Internal,
                    "resources/subscribe",
                    Some(raw(&json!({"uri": uri}))),
                    far,
                );
            }
        }
        let l = Listener {
            client,
            id,
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris: honoured_uris,
        };
        let mut honoured = Map::new();
        for (k, v) in [
            ("toolsListChanged", l.tools),
            ("promptsListChanged", l.prompts),
            ("resourcesListChanged", l.resources),
        ] {
            if v {
                honoured.insert(k.into(), json!(true));
            }
        }
        if !l.uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(l.uris));
        }
        let ack = l.notification(
            "notifications/subscriptions/acknowledged",
            Some(&raw(&json!({"notifications": honoured}))),
        );
        let id = l.id().to_owned();
        self.subs.serve(l);
        self.reply_to(client, To::Listen(&id), ack);
    }

    /// Ends a client's served listen stream (its cancel or its departure).
    pub(super) fn end_listener(&mut self, client: ClientId, key: &str) -> bool {
        let Some(l) = self.subs.end_listener(client, key) else {
            return false;
        };
        for uri in l.uris {
            self.release_sub(client, &uri, Hold::Stream);
        }
        self.finish(client, key, Outcome::Cancelled, None);
        true
    }

    /// `resources/subscribe`/`unsubscribe` from a handshake client of a modern child: kept here;
    /// updates reach subscribers from the supervisor's listen stream.
    pub(super) fn client_subscription_on_modern(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let Some(uri) = m
            .params_object()
            .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string))
        else {
            return self.respond_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "missing uri",
                None,
                Outcome::Invalid,
            );
        };
        let changed = if m.method() == "resources/subscribe" {
            self.subs.add(client, &uri, Hold::Direct)
        } else {
            self.subs.remove(client, &uri, Hold::Direct)
        };
        self.respond_result(client, &id, m.method(), json!({}), Outcome::Ok);
        if changed {
            self.open_listen();
        }
    }

    /// Drops one of `client`'s holds on `uri`; when it was the last hold of anyone, a
    /// handshake child is told (`resources/unsubscribe`). Returns whether nobody holds it now.
    pub(super) fn release_sub(&mut self, client: ClientId, uri: &str, hold: Hold) -> bool {
        if !self.subs.remove(client, uri, hold) {
            return false;
        }
        self.unsubscribe_child(uri);
        true
    }

    /// Tells a ready handshake child that nobody holds `uri` any more.
    pub(super) fn unsubscribe_child(&mut self, uri: &str) {
        if self.life.state() == State::Ready && self.child_era() == Era::Handshake {
            let far = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
            self.send_to_child(
                Owner::Internal,
                "resources/unsubscribe",
                Some(raw(&json!({"uri": uri}))),
                far,
            );
        }
    }

    /// Refcounted subscriptions: true when answered locally.
    pub(super) fn local_subscription(&mut self, client: ClientId, m: &Message) -> bool {
        let Some(uri) = m
            .params_object()
            .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string))
        else {
            return false;
        };
        let Some(id) = m.id.clone() else { return false };
        // Held by someone else, or by this client through a listen stream: the child is
        // subscribed already, so the table answers.
        let held = self.subs.is_held(&uri);
        if m.method() == "resources/subscribe" {
            if held {
                self.subs.add(client, &uri, Hold::Direct);
                self.respond_result(client, &id, m.method(), json!({}), Outcome::Ok);
                return true;
            }
            false
        } else {
            let last = self.subs.remove(client, &uri, Hold::Direct);
            if !last && held {
                self.respond_result(client, &id, m.method(), json!({}), Outcome::Ok);
                return true;
            }
            false
        }
    }
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
