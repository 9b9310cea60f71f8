//! Client messages: requests (local answers, duplicate ids, the limits, where a request
//! goes), `initialize` and `logging/setLevel` answered here, notifications, responses to the
//! child's requests, and a client's departure.

use super::util::{level_name, tracked};
use super::{asking, Asker, Lane, Owner, Server, State};
use crate::jsonrpc::message;
use crate::jsonrpc::message::{code, raw, Kind, Message, Out};
use crate::mux::era;
use crate::mux::era::Era;
use crate::mux::ids::id_key;
use crate::mux::outage::{OutageStatus, Reason};
use crate::mux::session::To;
use crate::mux::session::{ClientId, Peer, Transport};
use crate::observe::Outcome;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::{debug, info, warn};

impl Server {
    pub(super) fn on_client_message(&mut self, client: ClientId, m: Message) {
        match m.kind {
            Kind::Request => self.on_client_request(client, m),
            Kind::Notification => self.on_client_notification(client, m),
            Kind::Response => self.on_client_response(client, m),
        }
    }

    pub(super) fn on_client_request(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.as_deref() else { return };
        self.shell.panic_on_request(m.method());
        // One lookup: a duplicate finds the first request's entry, a new id opens its own.
        let generation = self.life.child().map(|c| c.generation());
        let (clock, log, traced) = (
            (self.clock.now(), self.clock.wall()),
            self.telemetry.request_log(),
            self.telemetry.traced(),
        );
        let opened = self.ledger.open(client, id_key(id), || {
            tracked(&m, generation, clock, log, traced)
        });
        if opened.is_err() {
            return self.refuse_duplicate(client, id, m.method());
        }
        if matches!(m.method(), "resources/subscribe" | "subscriptions/listen")
            && self.subscriptions_of(client) >= self.cfg.max_subscriptions
        {
            let msg = format!(
                "client holds {} subscriptions and listen streams on server `{}` (max_subscriptions)",
                self.subscriptions_of(client),
                self.cfg.name
            );
            return self.refuse_limit(client, id, &msg);
        }
        self.dispatch_request(client, m);
    }

    /// Resource subscriptions and listen streams `client` holds (served here or routed to a
    /// modern child), the table `max_subscriptions` bounds.
    pub(super) fn subscriptions_of(&self, client: ClientId) -> usize {
        let subs = self.subs.direct_count(client);
        let served: usize = self
            .subs
            .listeners()
            .iter()
            .filter(|l| l.client() == client)
            .map(|l| l.weight())
            .sum();
        // Requests that may still add one: in flight to the child, or held until it is ready.
        let grows = |m: &str| matches!(m, "subscriptions/listen" | "resources/subscribe");
        let routed = self
            .routing
            .inflight()
            .iter()
            .filter(|(_, c, _, p)| *c == Some(client) && grows(&p.method))
            .count();
        let held = self.held.count(client, grows);
        subs + served + routed + held
    }

    /// Decides what happens to a client request already in the ledger: answered here,
    /// forwarded, held while the child starts, or failed with the outage record.
    pub(super) fn dispatch_request(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let requested = era::envelope_version(m.params.as_deref());
        let Some(client_era) = self.settle_client_era(client, &m, requested.is_some()) else {
            return;
        };
        if client_era == Era::Modern {
            self.learn_modern_client(client, &m);
        }
        if client_era == Era::Modern && self.answer_modern(client, &id, &m, requested.as_deref()) {
            return;
        }
        if client_era == Era::Modern
            && self.child_era() == Era::Handshake
            && asking::MRTR_METHODS.contains(&m.method())
            && self.resume_round(client, &m)
        {
            return;
        }
        let Some(m) = self.answer_locally(client, &id, m, client_era) else {
            return;
        };
        if self.life.state() != State::Ready && self.answer_from_cache(client, &m) {
            return;
        }
        self.route_by_state(client, &id, m);
    }

    /// A client's era, decided by its first request as the SDKs do: an envelope or
    /// `server/discover` means 2026-07-28; `initialize` or anything else, the handshake era.
    /// `None` when the client is gone.
    fn settle_client_era(&mut self, client: ClientId, m: &Message, envelope: bool) -> Option<Era> {
        let c = self.clients.get_mut(&client)?;
        let first = if m.method() != "initialize" && (envelope || m.method() == "server/discover") {
            Era::Modern
        } else {
            Era::Handshake
        };
        Some(c.settle_era(first))
    }

    /// A 2026 client names itself and its capabilities in every request's envelope. They are
    /// read from its first request only (the request log's `client_name`, issue 13 Why 4; the
    /// owner rule for the child's requests, K26), so later requests cost no second scan of
    /// their params: `info` stops being `Null` once learned.
    fn learn_modern_client(&mut self, client: ClientId, m: &Message) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        if !c.info().is_null() {
            return;
        }
        c.learn(
            era::envelope_field(m.params.as_deref(), era::META_CLIENT_INFO),
            era::envelope_field(m.params.as_deref(), era::META_CAPABILITIES),
        );
    }

    /// What a 2026 client is answered here: an unsupported version, or `server/discover` on a
    /// handshake child. Returns whether the request was answered.
    fn answer_modern(
        &mut self,
        client: ClientId,
        id: &RawValue,
        m: &Message,
        requested: Option<&str>,
    ) -> bool {
        if let Some(v) = requested.filter(|v| *v != era::MODERN_VERSION) {
            // A modern version this supervisor cannot serve.
            let data = json!({"supported": [era::MODERN_VERSION], "requested": v});
            info!(client = %client, requested = v, "unsupported protocol version requested");
            self.respond_error(
                client,
                id,
                era::UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                Some(data),
                Outcome::Invalid,
            );
            return true;
        }
        if m.method() != "server/discover" {
            return false;
        }
        let ready = self.life.state() == State::Ready;
        let Some(hs) = self.opener.handshake() else {
            return false;
        };
        // A handshake child is described here always; a 2026 child answers for itself while
        // it is ready, and from its last discovery result, marked, while it is not (K27).
        let mut result = match hs.era {
            Era::Handshake => hs.discover_result(),
            Era::Modern if !ready => hs.result.clone(),
            Era::Modern => return false,
        };
        if self.life.state() == State::Idle {
            self.mark_cached(&mut result);
        } else if !ready {
            self.mark_unavailable(&mut result);
        }
        self.respond_result(client, id, "server/discover", result, Outcome::Ok);
        true
    }

    /// Marks a description served while the child is down (a cached `server/discover`):
    /// `instructions` end with the same note cached tool descriptions get, and
    /// `_meta["mcp-supervisor/unavailable"]` gives the status (issue 13 §2).
    pub(super) fn mark_unavailable(&self, result: &mut Value) {
        let status = self.outage_status();
        let note = self.unavailable_note();
        let Some(o) = result.as_object_mut() else {
            return;
        };
        let text = o
            .get("instructions")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim_start()
            .to_string();
        let joined = if text.is_empty() {
            note.trim_start().to_string()
        } else {
            text + &note
        };
        o.insert("instructions".into(), Value::String(joined));
        let meta = o.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(
                "mcp-supervisor/unavailable".into(),
                json!({"server": self.cfg.name, "status": status}),
            );
        }
    }

    /// Requests the supervisor answers itself (`initialize`, `ping`, `logging/setLevel`, served
    /// listen streams, subscriptions it keeps). Gives the request back when it is not one.
    fn answer_locally(
        &mut self,
        client: ClientId,
        id: &RawValue,
        m: Message,
        client_era: Era,
    ) -> Option<Message> {
        match m.method() {
            "initialize" => self.client_initialize(client, m),
            "ping" => {
                self.respond_result(client, id, m.method(), json!({}), Outcome::Ok);
            }
            "logging/setLevel"
                if self
                    .opener
                    .handshake()
                    .is_some_and(|h| h.has("logging") || h.era == Era::Modern) =>
            {
                self.client_set_level(client, m)
            }
            "subscriptions/listen"
                if client_era == Era::Modern
                    && self.child_era() == Era::Handshake
                    && self.opener.handshake().is_some() =>
            {
                self.serve_listen(client, m)
            }
            // 2026-07-28 has no subscribe: a handshake client's subscriptions to a modern child
            // are kept here (and served from the supervisor's own listen stream).
            "resources/subscribe" | "resources/unsubscribe" if self.child_era() == Era::Modern => {
                self.client_subscription_on_modern(client, m)
            }
            "resources/subscribe" | "resources/unsubscribe"
                if self.local_subscription(client, &m) => {}
            _ => return Some(m),
        }
        None
    }

    /// Where a request for the child goes in the current state: forwarded when ready, held
    /// while a start or restart is under way (bounded by `queue_limit`), failed at once with
    /// the outage record otherwise.
    fn route_by_state(&mut self, client: ClientId, id: &RawValue, m: Message) {
        let held_room = self.held.has_room();
        match self.life.state() {
            State::Ready => self.forward(client, m),
            // The last start failed and its backoff delay has not passed (issue 26 §7).
            State::Idle if self.lazy_retry_pending() => {
                self.outage_reply(client, id, m.method(), OutageStatus::Failed);
            }
            State::Idle => {
                // A request the record cannot answer: the child starts (issue 18 §1).
                self.start_on_demand(m.method());
                if self.life.state() != State::Idle {
                    self.route_by_state(client, id, m);
                } else {
                    // The spawn itself failed: the start is over, and said so.
                    self.outage_reply(client, id, m.method(), OutageStatus::Failed);
                }
            }
            // A server that was never ready and is backing off gets a fast, explicit error
            // (K19); one that was ready is likely back soon, so its requests wait, as do those
            // of a first start that only waits for the daemon's spawn budget (nothing failed).
            State::Backoff
                if self.opener.handshake().is_none()
                    && !self.life.probe_respawn()
                    && !self.life.awaiting_budget() =>
            {
                self.outage_reply(client, id, m.method(), OutageStatus::Backoff);
            }
            State::Stopping if self.restarting() && held_room => self.hold(client, m),
            State::Starting | State::Backoff if held_room => self.hold(client, m),
            State::Starting | State::Backoff => {
                let status = self.outage_status();
                let reason = Reason::QueueFull(self.held.len());
                let retry = self
                    .life
                    .next_spawn()
                    .map(|t| t.saturating_duration_since(self.clock.now()));
                let method = m.method().to_string();
                self.outage_respond(
                    client,
                    id,
                    &method,
                    status,
                    reason,
                    retry,
                    code::LIMIT_EXCEEDED,
                    Outcome::Denied,
                );
            }
            _ => {
                let status = self.outage_status();
                self.outage_reply(client, id, m.method(), status);
            }
        }
    }

    /// Holds a request until the child is ready, for at most `queue_wait`.
    fn hold(&mut self, client: ClientId, m: Message) {
        let deadline = self.hold_deadline();
        // Only called with room (`route_by_state`); a full queue would refuse it, never grow.
        let _ = self.held.push(client, m, deadline);
    }

    /// A request whose id equals one of the same client's unfinished requests (K23): JSON-RPC
    /// ids must be unique among a sender's requests in flight, and two responses under one id
    /// would cross-wire the client (go-sdk#1004). Answered -32600 at once; the first request
    /// and its ledger entry are untouched.
    pub(super) fn refuse_duplicate(&mut self, client: ClientId, id: &RawValue, method: &str) {
        info!(target: "mcp_supervisor::requests", client = %client, method,
            outcome = Outcome::Invalid.as_str(), error_code = code::INVALID_REQUEST,
            "request finished: duplicate request id");
        self.telemetry.metrics().request(
            method,
            Outcome::Invalid,
            Some(code::INVALID_REQUEST),
            0.0,
        );
        let msg = format!(
            "duplicate request id {}: a request with this id is still in flight",
            id.get()
        );
        let line = message::error_response(id, code::INVALID_REQUEST, &msg, None);
        self.reply_to(client, To::Response(id), line);
    }

    pub(super) fn client_initialize(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let Some(hs) = self.opener.handshake().cloned() else {
            // No record of an earlier run: the handshake needs the child (issue 18 §1).
            self.start_on_demand("initialize");
            // A first instance the supervisor is stopping to restart (its stdin failed, its
            // stdout closed, ...) is still trying: its exit decides, and says why (K18).
            let trying = match self.life.state() {
                State::Starting => true,
                State::Stopping => self.restarting(),
                // A respawn after the era probe, or a first start waiting for the spawn
                // budget (R11): nothing failed.
                _ => self.life.probe_respawn() || self.life.awaiting_budget(),
            };
            if !trying {
                // Never ready, and not even trying right now: say why at once (K18, K19).
                let status = self.outage_status();
                return self.outage_reply(client, &id, "initialize", status);
            }
            if !self.held.has_room() {
                // The held queue is bounded for handshakes too (issue 12 §6).
                let status = self.outage_status();
                let reason = Reason::QueueFull(self.held.len());
                return self.outage_respond(
                    client,
                    &id,
                    "initialize",
                    status,
                    reason,
                    None,
                    code::LIMIT_EXCEEDED,
                    Outcome::Denied,
                );
            }
            // Never ready yet: wait for the child (bounded by start_timeout, issue 5 §5).
            let deadline = crate::deadline::after(self.clock.now(), self.cfg.start_timeout);
            let _ = self.held.push(client, m, deadline);
            return;
        };
        let params = m.params_object().unwrap_or_default();
        let asked = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = params
            .get("clientInfo")
            .and_then(|i| i.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut result = hs.initialize_result(asked);
        if self.life.state() == State::Idle {
            self.mark_cached(&mut result);
        }
        if hs.era == Era::Handshake && asked != hs.protocol_version {
            info!(client = %client, client_name = %name, requested = asked, negotiated = %hs.protocol_version,
                "client asked for another protocol version; answering with the one the child speaks");
        }
        if let Some(c) = self.clients.get_mut(&client) {
            debug!(client = %client, uid = c.peer().uid, pid = c.peer().pid, client_name = %name, "client handshake answered from the cache");
            c.initialize(
                params.get("capabilities").cloned().unwrap_or(json!({})),
                params.get("clientInfo").cloned().unwrap_or(Value::Null),
                name,
            );
        }
        let line = message::result_response(&id, &result);
        self.respond(client, &id, line, Outcome::Ok, None);
    }

    pub(super) fn client_set_level(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let level = m.params_object().and_then(|p| {
            p.get("level")
                .and_then(Value::as_str)
                .and_then(era::log_rank)
        });
        let Some(level) = level else {
            return self.respond_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "unknown logging level",
                None,
                Outcome::Invalid,
            );
        };
        if let Some(c) = self.clients.get_mut(&client) {
            c.set_log_level(level);
        }
        self.respond_result(client, &id, m.method(), json!({}), Outcome::Ok);
        self.sync_log_level();
    }

    /// The child gets the most verbose level any client asked for (issue 3 §3).
    pub(super) fn sync_log_level(&mut self) {
        let want = self.clients.min_log_level();
        let Some(want) = want else { return };
        // The level is recorded while the child is down too: the restart replays it.
        if self.child_era() == Era::Handshake
            && self.opener.set_log_level(want)
            && self.life.state() == State::Ready
        {
            let p = raw(&json!({"level": level_name(want)}));
            let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
            self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), deadline);
        }
    }

    pub(super) fn on_client_notification(&mut self, client: ClientId, m: Message) {
        match m.method() {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let Some(p) = m.params_object() else { return };
                let Some(rid) = p.get("requestId") else {
                    return;
                };
                let key = rid.to_string();
                if self.end_listener(client, &key) {
                    return;
                }
                // A stream still waiting for the child is never opened: it ends here, like a
                // served one (sim seed 274). Other held requests are answered as usual.
                let stream = |m: &str| m == "subscriptions/listen";
                if self.held.take(client, &key, stream).is_some() {
                    return self.finish(client, &key, Outcome::Cancelled, None);
                }
                let Some(child_id) = self.routing.inflight().lookup(client, &key) else {
                    debug!(client = %client, request_id = %key, "cancel for an unknown request: not forwarded");
                    return;
                };
                self.routing.inflight_mut().remove(child_id);
                self.finish(client, &key, Outcome::Cancelled, None);
                let mut p = p;
                p.insert("requestId".into(), json!(child_id));
                let line = Out::request(
                    None,
                    "notifications/cancelled",
                    Some(&raw(&Value::Object(p))),
                )
                .encode();
                self.write_child(line, Lane::Urgent, "a client's notifications/cancelled");
            }
            _ => {
                if self.life.state() == State::Ready {
                    let line = Out::request(None, m.method(), m.params.as_deref()).encode();
                    self.write_child(line, Lane::Normal, "a client's notification");
                }
            }
        }
    }

    pub(super) fn on_client_response(&mut self, client: ClientId, m: Message) {
        let n = m.id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        let Some(asker) = n.and_then(|n| self.routing.answered(client, n)) else {
            debug!(client = %client, "response to no request of ours: dropped");
            return;
        };
        let child_id = match asker {
            Asker::Child(id) => id,
            Asker::Mrtr { round, key } => {
                match (&m.result, &m.error) {
                    (Some(r), _) => {
                        let done = self.rounds.round_mut(round).map(|rd| {
                            rd.answers.insert(
                                key,
                                serde_json::from_slice(r.as_bytes()).unwrap_or(Value::Null),
                            );
                            rd.waiting = rd.waiting.saturating_sub(1);
                            rd.waiting == 0
                        });
                        if done == Some(true) {
                            self.retry_round(round);
                        }
                    }
                    (_, Some(e)) => {
                        let msg =
                            format!("the client refused an input the server needs: {}", e.get());
                        self.abandon_round(
                            round,
                            Outcome::ProtocolError,
                            code::INTERNAL_ERROR,
                            &msg,
                        );
                    }
                    _ => {}
                }
                return;
            }
        };
        let line = match (&m.result, &m.error) {
            (Some(r), _) => Out::result(&child_id, &r.raw()).encode(),
            (_, Some(e)) => Out::error(&child_id, e).encode(),
            _ => return,
        };
        self.write_child(
            line,
            Lane::Normal,
            "a client's answer to the child's request",
        );
    }

    pub(super) fn drop_client(&mut self, client: ClientId) {
        let stateless = self
            .clients
            .get(&client)
            .is_some_and(|c| c.peer().transport == Transport::HttpRequest);
        if stateless {
            self.detach_rounds_of(client);
        }
        if self.clients.remove(&client).is_none() {
            return;
        }
        // Cancel its requests toward the child; their late responses are dropped (K09).
        let mine: Vec<String> = self
            .subs
            .listeners()
            .iter()
            .filter(|l| l.client() == client)
            .map(|l| l.key())
            .collect();
        for key in mine {
            self.end_listener(client, &key);
        }
        for key in self.ledger.keys_of(client) {
            self.finish(client, &key, Outcome::Cancelled, None);
        }
        self.ledger.forget(client);
        self.telemetry.metrics().set_clients(self.clients.len());
        for r in self.routing.inflight_mut().remove_client(client) {
            let p = raw(&json!({"requestId": r.id, "reason": "client disconnected"}));
            let line = Out::request(None, "notifications/cancelled", Some(&p)).encode();
            self.write_child(
                line,
                Lane::Urgent,
                "notifications/cancelled for a departed client",
            );
        }
        // Release its subscriptions.
        let freed = self.subs.remove_client(client);
        let released = !freed.is_empty();
        for uri in &freed {
            self.unsubscribe_child(uri);
        }
        if released && self.child_era() == Era::Modern {
            self.open_listen();
        }
        // The child's requests routed to it get an error (K06).
        self.fail_upstream_of(client, "the client that was asked disconnected");
        self.drop_rounds_of(client);
        self.held.drop_client(client);
        self.sync_log_level();
    }

    /// Ends the sessions of clients `access` no longer permits (a reload removed their uid or
    /// gid): an error line saying so, then the connection closes; their requests are
    /// cancelled like any departure.
    pub(super) fn revoke_unpermitted(&mut self, access: &crate::mux::session::Access) {
        let gone: Vec<(ClientId, Peer)> = self
            .clients
            .iter()
            .filter(|(_, c)| !access.permits(c.peer().uid, c.peer().gid))
            .map(|(id, c)| (*id, *c.peer()))
            .collect();
        for (id, peer) in gone {
            warn!(client = %id, peer_uid = peer.uid, peer_gid = peer.gid, peer_pid = peer.pid,
                "ending the session of uid {}: no longer allowed after a reload", peer.uid);
            if let Some(c) = self.clients.get(&id) {
                let msg = format!(
                    "server `{}`: access revoked by a configuration reload",
                    self.cfg.name
                );
                c.say_and_close(message::error_response(
                    &message::raw_null(),
                    code::SERVER_UNAVAILABLE,
                    &msg,
                    None,
                ));
            }
            self.drop_client(id);
        }
    }

    /// Answers the child's requests routed to `client` with an error.
    pub(super) fn fail_upstream_of(&mut self, client: ClientId, why: &str) {
        for asker in self.routing.take_asks_of(client) {
            match asker {
                Asker::Child(id) => self.answer_child_error(&id, code::INTERNAL_ERROR, why),
                Asker::Mrtr { round, .. } => {
                    self.abandon_round(round, Outcome::Cancelled, code::INTERNAL_ERROR, why)
                }
            }
        }
    }

    /// A client whose input closed is dropped once nothing it asked for is pending.
    pub(super) fn close_if_done(&mut self, client: ClientId) {
        let done = self
            .clients
            .get(&client)
            .is_some_and(|c| c.closing() && self.routing.inflight().count_for(client) == 0)
            && !self.held.has_client(client);
        if done {
            self.drop_client(client);
        }
    }
}
