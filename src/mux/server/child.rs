//! Messages from the child: responses routed to their owner (with the K21 shape check),
//! the handshake and era verdicts, the child's own requests, notifications and listen
//! traffic, malformed and oversized replies.

use super::effects::{Effect, Written};
use super::subtable::Hold;
use super::util::{is_tool_error, listen_close_result, malformed, shareable};
use super::{Asker, Lane, Owner, Server, State};
use crate::config::ClientRoots;
use crate::jsonrpc::message;
use crate::jsonrpc::message::{code, raw, raw_u64, Kind, Message, Out};
use crate::mux::era;
use crate::mux::era::{ChildProtocol, Era, Handshake};
use crate::mux::outage::StopCause;
use crate::mux::session::ClientId;
use crate::mux::session::To;
use crate::observe::Outcome;
use crate::upstream::Queued;
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashSet;
use tracing::{debug, error, info, warn};

impl Server {
    pub(super) fn on_child_message(&mut self, m: Message) {
        match m.kind {
            Kind::Response => self.on_child_response(m),
            Kind::Request => self.on_child_request(m),
            Kind::Notification => self.on_child_notification(m),
        }
    }

    pub(super) fn on_child_response(&mut self, m: Message) {
        let n = m.id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        if let Some(n) = n {
            let served = self.health.status().ping_served;
            if self.health.answered(n) {
                self.telemetry.metrics().probe("answered");
                if served && !self.health.status().ping_served {
                    warn!("the child answers requests but not `ping`; probing with an advertised list from now on");
                }
                return;
            }
        }
        let Some(removed) = n.and_then(|n| self.routing.inflight_mut().remove(n)) else {
            let id = m.id.as_deref().map(RawValue::get).unwrap_or("none");
            debug!(
                id,
                "response for an id not in flight (cancelled, timed out or never issued): dropped"
            );
            return;
        };
        let pending = removed.value;
        let problem = match &pending.owner {
            Owner::Client { .. } => malformed(&m, &pending.method),
            // The supervisor's own requests read what they need with defaults; the handshake
            // has its own checks (a malformed answer there is a rejection or an era verdict).
            _ => None,
        };
        if let (Some(problem), Owner::Client { client, id, .. }) = (problem, &pending.owner) {
            // K21: a reply of the wrong shape fails that request only, naming the server; the
            // child answered, so it is alive, and nothing else is affected.
            warn!(method = %pending.method, %problem, "the child sent a malformed response");
            let (client, id) = (*client, id.clone());
            return self.fail_malformed(client, &id, &pending.method, &problem);
        }
        match pending.owner {
            owner @ Owner::Client { .. } => self.answer_client(&pending.method, owner, &m),
            Owner::Parked { round } => self.on_parked_response(round, removed.id, m),
            Owner::Discover { probe } => self.on_discover_answer(&m, probe),
            Owner::Listen => {
                debug!("the child closed the supervisor's listen stream");
                self.opener.listen_ended(removed.id);
            }
            Owner::Initialize => self.on_initialize_answer(&m),
            Owner::Refresh { method, announce } => self.on_refresh_answer(method, announce, &m),
            Owner::Internal => {}
        }
    }

    /// The child's answer `m` to a client's request (`method`, owned by `owner`): an MRTR
    /// round, a subscription or a list to remember, then the response with the client's id.
    pub(super) fn answer_client(&mut self, method: &str, owner: Owner, m: &Message) {
        let Owner::Client {
            client,
            id,
            subscribe,
            cache,
            add_result_type,
            retry_params,
            progress,
            log_level,
        } = owner
        else {
            return;
        };
        self.used();
        if let (Some(sent), Some(r)) = (&retry_params, &m.result) {
            if self.start_round(client, &id, method, sent, r.as_bytes(), progress, log_level) {
                return;
            }
        }
        if let (Some(uri), Some(_)) = (subscribe, &m.result) {
            if self.clients.contains_key(&client) {
                self.subs.add(client, &uri, Hold::Direct);
            }
        }
        if let (Some(list), Some(r)) = (cache, &m.result) {
            if let Some(v) = serde_json::from_slice::<Value>(r.as_bytes())
                .ok()
                .filter(shareable)
            {
                if self.lists.store(list, v) {
                    self.save_record();
                }
            }
        }
        let (line, outcome, code) = match (&m.result, &m.error) {
            (Some(r), _) => {
                let outcome = if method == "tools/call" && is_tool_error(r.as_bytes()) {
                    Outcome::ToolError
                } else {
                    Outcome::Ok
                };
                let legacy_client = !add_result_type
                    && self.child_era() == Era::Modern
                    && self.client_era(client) == Era::Handshake;
                // Rewritten results are re-encoded; the common case is spliced: a new head
                // and the child's bytes (issue 15 §3).
                let line = if add_result_type {
                    Out::result(&id, &era::modernize_result(&r.raw(), method))
                        .encode()
                        .into()
                } else if legacy_client {
                    // Nothing of 2026 for a handshake client (issue 13 Why 4).
                    Out::result(&id, &era::legacy_result(&r.raw()))
                        .encode()
                        .into()
                } else if method == "subscriptions/listen" {
                    Out::result(&id, &listen_close_result(&r.raw(), &id))
                        .encode()
                        .into()
                } else {
                    message::result_line(&id, r)
                };
                (line, outcome, None)
            }
            (_, Some(e)) => (
                Out::error(&id, e).encode().into(),
                Outcome::ProtocolError,
                m.error_code(),
            ),
            _ => return,
        };
        self.respond(client, &id, line, outcome, code);
    }

    /// The child's answer to the supervisor's `initialize`: ready, an era switch, or a
    /// rejection.
    fn on_initialize_answer(&mut self, m: &Message) {
        match (&m.result, &m.error) {
            (Some(r), _) => match serde_json::from_str::<Value>(r.get())
                .ok()
                .and_then(Handshake::from_result)
            {
                Some(hs) => {
                    let line = Out::request(None, "notifications/initialized", None).encode();
                    self.write_child(line, Lane::Normal, "notifications/initialized");
                    self.on_ready(hs);
                }
                None => {
                    error!("the child's initialize result has no protocolVersion");
                    self.stop_child(StopCause::HandshakeRejected);
                }
            },
            (_, Some(e)) => {
                let modern = m.error_code() == Some(era::UNSUPPORTED_VERSION)
                    && e.get().contains(era::MODERN_VERSION);
                if modern && self.cfg.protocol == ChildProtocol::Auto {
                    // The verdict stopped working (a server upgraded to 2026-only, or one a
                    // late era probe already pinned): speak 2026-07-28 to it right away.
                    self.set_verdict(
                        Era::Modern,
                        "initialize was refused in favour of 2026-07-28",
                    );
                    let deadline = self.life.start_deadline().unwrap_or_else(|| {
                        crate::deadline::after(self.clock.now(), self.cfg.start_timeout)
                    });
                    self.send_discover(false, deadline);
                } else {
                    error!(error = %e.get(), "the child rejected initialize");
                    self.stop_child(StopCause::HandshakeRejected);
                }
            }
            _ => {}
        }
    }

    /// A list the supervisor re-read: kept for outages, announced when it changed across a
    /// restart (issue 5 §4).
    fn on_refresh_answer(&mut self, method: &'static str, announce: bool, m: &Message) {
        let Some(r) = &m.result else { return };
        let Some(v) = serde_json::from_slice::<Value>(r.as_bytes())
            .ok()
            .filter(shareable)
        else {
            return;
        };
        let changed = self.lists.store(method, v);
        if changed {
            self.save_record();
        }
        if changed && announce {
            let note = era::LISTS
                .iter()
                .find(|(l, _, _)| *l == method)
                .map(|(_, n, _)| *n);
            if let Some(note) = note {
                info!(
                    list = method,
                    "the list changed across the restart; notifying clients"
                );
                // On the stream each client's era uses (issue 26 §7): handshake clients get
                // the notification, 2026 clients on their `subscriptions/listen` streams.
                self.broadcast(&Out::request(None, note, None).encode(), |_| true);
                self.feed_listeners(note, None, None);
            }
        }
    }

    /// Whether a `list_changed` the child sent for `list` is a fresh instance's startup
    /// announcement, folded into the supervisor's own check after a restart (issue 26 §7):
    /// the child is still starting, or the re-read of that list after readiness (`announce`)
    /// is in flight. That re-read is answered after the notification on the same stdout, so
    /// it sees whatever the child announced, and clients hear of it exactly when the list
    /// differs from the last instance's. Outside that window the child's word is passed on as
    /// it is (a change past the first page, or in resource templates, cannot be compared).
    fn startup_announcement(&self, list: &str) -> bool {
        self.life.state() == State::Starting
            || self.routing.inflight().iter().any(|(_, _, _, p)| {
                matches!(p.owner, Owner::Refresh { method, announce: true } if method == list)
            })
    }

    /// The answer to the opening `server/discover` (issue 6 §1): a result or -32022 means the
    /// 2026-07-28 era; any other error means the handshake era (then `initialize`).
    pub(super) fn on_discover_answer(&mut self, m: &Message, probe: bool) {
        let code = m.error_code();
        if let Some(r) = &m.result {
            let v = serde_json::from_slice::<Value>(r.as_bytes()).unwrap_or(json!({}));
            self.set_verdict(Era::Modern, "the child answered server/discover");
            self.on_ready(Handshake::from_discover(v));
        } else if code == Some(era::UNSUPPORTED_VERSION) {
            // Modern, but not our version: we cannot speak to it; keep it out of rotation.
            self.set_verdict(
                Era::Modern,
                "the child answered server/discover with -32022",
            );
            error!(error = ?m.error.as_deref().map(RawValue::get), "the child speaks no protocol version this supervisor supports");
            self.stop_child(StopCause::HandshakeRejected);
        } else if probe || self.cfg.protocol == ChildProtocol::Auto {
            // The probe's answer, or a remembered 2026 verdict that stopped working (the
            // server was replaced by a handshake-era one): the handshake, on this same child.
            self.set_verdict(
                Era::Handshake,
                &format!(
                    "server/discover was answered with error {}",
                    code.unwrap_or(0)
                ),
            );
            self.send_initialize(era::HANDSHAKE_VERSION);
        } else {
            error!(error = ?m.error.as_deref().map(RawValue::get), "the child rejected server/discover (protocol = 2026-07-28)");
            self.stop_child(StopCause::HandshakeRejected);
        }
    }

    pub(super) fn on_child_request(&mut self, m: Message) {
        let Some(child_id) = m.id.clone() else { return };
        let method = m.method().to_string();
        if method == "ping" {
            // Answered here, at once, with or without clients (K07).
            let line = message::result_response(&child_id, &json!({}));
            self.write_child(line, Lane::Urgent, "the answer to the child's ping");
            return;
        }
        if self.routing.asks() + self.asks_waiting() >= self.cfg.max_inflight {
            // The child's own requests are bounded like the clients' (issue 12 §6).
            let msg = format!(
                "{} requests to clients are already waiting (max_inflight)",
                self.routing.asks() + self.asks_waiting()
            );
            return self.answer_child_error(&child_id, code::LIMIT_EXCEEDED, &msg);
        }
        let caller = self.cfg.client_roots == ClientRoots::Caller;
        let picked = if method == "roots/list" && !caller {
            None
        } else {
            self.pick_owner(&method)
        };
        if method == "roots/list" && picked.is_none() {
            // The roots policy (K28): no client is asked, so the operator's roots answer;
            // never a refusal.
            debug!(
                roots = self.cfg.roots.len(),
                "roots/list answered with the configured roots"
            );
            let line = message::result_response(&child_id, &self.roots_result());
            self.write_child(line, Lane::Urgent, "the configured roots");
            return;
        }
        let Some((owner, via)) = picked else {
            let msg = format!("no connected client can answer `{method}` for this server");
            warn!(method = %method, "{msg}");
            return self.answer_child_error(&child_id, code::INTERNAL_ERROR, &msg);
        };
        if self.clients.get(&owner).and_then(|c| c.era()) == Some(Era::Modern) {
            // A 2026 client is asked inside an `input_required` result (K26).
            return self.ask_modern(via, child_id, m);
        }
        let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        let n = self.routing.ask(owner, Asker::Child(child_id), deadline);
        let line = Out::request(Some(&raw_u64(n)), &method, m.params.as_deref()).encode();
        self.reply_to(owner, To::Request(&raw_u64(n), &method), line);
    }

    /// The ownership rule for a child's request (issue 3 §5, K06). The handshake era has no
    /// field linking it to the client request that caused it, so: among clients that can be
    /// asked and have a request in flight, the one whose request was forwarded most recently.
    /// A handshake client can be asked when it declared the needed capability; a 2026 client
    /// when it declared it in its envelope and its request may end `input_required` (K26).
    /// Returns the client and the child-side id of that request; `None` → the child gets an
    /// error.
    pub(super) fn pick_owner(&self, method: &str) -> Option<(ClientId, u64)> {
        let cap = era::capability_for_request(method);
        self.routing
            .inflight()
            .iter()
            .filter_map(|(id, client, _, p)| Some((id, client?, p)))
            .filter(|(_, c, p)| {
                self.clients.get(c).is_some_and(|cl| match cl.era() {
                    Some(Era::Modern) => self.can_ask_modern(*c, p, cap),
                    _ => {
                        !cl.closing()
                            && matches!(p.owner, Owner::Client { .. })
                            && cap.is_none_or(|cap| cl.has_capability(cap))
                    }
                })
            })
            .max_by_key(|(id, _, _)| *id)
            .map(|(id, c, _)| (c, id))
    }

    /// The `roots/list` result of the configured roots (`roots`).
    pub(super) fn roots_result(&self) -> Value {
        json!({"roots": self.cfg.roots})
    }

    pub(super) fn answer_child_error(&mut self, child_id: &RawValue, code: i64, msg: &str) {
        let line = message::error_response(child_id, code, msg, None);
        self.write_child(line, Lane::Urgent, "an error answer to the child's request");
    }

    /// Writes `line` to the running child's stdin queue (`lane`), if a child runs; `what`
    /// names it for the log. A full queue (the child has not read [`process::STDIN_QUEUE`]
    /// lines) drops the line and says so, within the log budget: the stdin writer's own
    /// [`process::STDIN_STALL`] ends a child that never reads again. A closed queue means the
    /// child is exiting; its exit decides what follows, so that is only a debug line.
    pub(super) fn write_child(&mut self, line: Bytes, lane: Lane, what: &'static str) {
        let Some(c) = self.life.child() else {
            return;
        };
        let generation = c.generation();
        self.shell.effects().push(Effect::ToChild {
            generation,
            line,
            lane,
            what: Written::Line(what),
        });
    }

    /// The shell's half of [`Effect::ToChild`]: writes `line` to the child's queue if
    /// instance `generation` still runs. A refused line is logged (within the budget); a
    /// refused request is returned, for [`Server::on_unwritten`].
    pub(super) fn write_now(
        &mut self,
        generation: u64,
        line: Bytes,
        lane: Lane,
        what: Written,
    ) -> Option<(u64, Queued)> {
        let queued = match self.life.child() {
            Some(c) if c.generation() == generation => match lane {
                Lane::Normal => c.send(line),
                Lane::Urgent => c.send_urgent(line),
            },
            _ => Queued::Closed,
        };
        match (what, queued) {
            (_, Queued::Ok) => None,
            (Written::Request(child_id), queued) => Some((child_id, queued)),
            (Written::Line(what), Queued::Closed) => {
                debug!("not written to the child (its input is closed): {what}");
                None
            }
            (Written::Line(what), Queued::Full) => {
                if let Some(suppressed) = self.telemetry.allow_dropped(self.clock.now()) {
                    warn!(
                        suppressed,
                        "the child is not reading its input (its queue is full); dropped: {what}"
                    );
                }
                None
            }
        }
    }

    pub(super) fn on_child_notification(&mut self, m: Message) {
        let method = m.method().to_string();
        if self.route_listen_traffic(&method, &m) {
            return;
        }
        match method.as_str() {
            "notifications/progress" => self.route_progress(&m),
            "notifications/cancelled" => self.route_child_cancel(&m),
            "notifications/message" => {
                let level = m
                    .params_object()
                    .and_then(|p| {
                        p.get("level")
                            .and_then(Value::as_str)
                            .and_then(era::log_rank)
                    })
                    .unwrap_or(0);
                self.route_log_message(level, &m);
            }
            "notifications/resources/updated" => self.route_resource_updated(&m),
            _ => {
                let list = era::LISTS
                    .iter()
                    .find(|(_, n, _)| *n == method)
                    .map(|(l, _, _)| *l);
                if list.is_some_and(|l| self.startup_announcement(l)) {
                    debug!(
                        notification = %method,
                        "the fresh child announced a list at startup; the supervisor's check decides"
                    );
                    return;
                }
                if let Some(list) = list.filter(|l| !self.refreshing(l)) {
                    // Keep the cached list current for outage answers; the child announced it.
                    // One refresh per list at a time: a flood of announcements cannot grow the
                    // in-flight table.
                    let far = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
                    self.send_to_child(
                        Owner::Refresh {
                            method: list,
                            announce: false,
                        },
                        list,
                        None,
                        far,
                    );
                }
                let line = Out::request(None, &method, m.params.as_deref()).encode();
                self.broadcast(&line, |_| true);
                self.feed_listeners(&method, None, m.params.as_deref());
            }
        }
    }

    /// Whether a refresh of `list` is already in flight.
    fn refreshing(&self, list: &str) -> bool {
        self.routing
            .inflight()
            .iter()
            .any(|(_, _, _, p)| matches!(p.owner, Owner::Refresh { method, .. } if method == list))
    }

    /// `notifications/progress`: to the owner of the request whose child-side id is the token,
    /// with the client's own token back.
    fn route_progress(&mut self, m: &Message) {
        let Some(mut p) = m.params_object() else {
            return;
        };
        let token = p.get("progressToken").and_then(Value::as_u64);
        let owner = token
            .and_then(|t| self.routing.inflight().get(t))
            .and_then(|pend| match &pend.owner {
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
        self.reply_to(client, To::Progress(&orig), line);
    }

    /// The child gave up on one of its own requests to a client: that client is told, under
    /// the id it was asked with.
    fn route_child_cancel(&mut self, m: &Message) {
        let Some(mut p) = m.params_object() else {
            return;
        };
        let Some(rid) = p.get("requestId").map(Value::to_string) else {
            return;
        };
        if let Some((client, n)) = self.routing.take_child_ask(&rid) {
            p.insert("requestId".into(), json!(n));
            let line = Out::request(None, m.method(), Some(&raw(&Value::Object(p)))).encode();
            self.reply(client, line);
        }
    }

    /// `notifications/resources/updated`: to the handshake clients subscribed to the URI and
    /// to the served listen streams that asked for it.
    fn route_resource_updated(&mut self, m: &Message) {
        let uri = m
            .params_object()
            .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string));
        let subs = uri
            .as_ref()
            .map_or_else(Vec::new, |u| self.subs.direct_holders(u));
        let line = Out::request(None, m.method(), m.params.as_deref()).encode();
        for c in subs {
            if self.client_era(c) == Era::Handshake {
                self.reply(c, line.clone());
            }
        }
        self.feed_listeners(m.method(), uri.as_deref(), m.params.as_deref());
    }

    /// Served listen streams of modern clients get a handshake child's notification when they
    /// asked for it, tagged with their subscription id.
    pub(super) fn feed_listeners(
        &mut self,
        method: &str,
        uri: Option<&str>,
        params: Option<&RawValue>,
    ) {
        let lines: Vec<(ClientId, Box<RawValue>, Bytes)> = self
            .subs
            .listeners()
            .iter()
            .filter(|l| l.wants(method, uri))
            .map(|l| {
                (
                    l.client(),
                    l.id().to_owned(),
                    l.notification(method, params),
                )
            })
            .collect();
        for (c, id, line) in lines {
            self.reply_to(c, To::Listen(&id), line);
        }
    }

    /// `notifications/message` routing (issue 6 §6). A handshake child's messages are
    /// session-wide: handshake clients get those at or above their `logging/setLevel` (all, if
    /// they never set one). A 2026 message carries no correlation key on a shared stdio
    /// channel, so it goes to every client with a request in flight that asked for logging
    /// (`_meta` logLevel, or a handshake client's level toward a modern child) at or below the
    /// message's level; never to a client that did not ask for logging.
    pub(super) fn route_log_message(&mut self, level: usize, m: &Message) {
        let asking: HashSet<ClientId> = self
            .routing
            .inflight()
            .iter()
            .filter_map(|(_, _, _, p)| match &p.owner {
                Owner::Client {
                    client,
                    log_level: Some(l),
                    ..
                } if level >= *l => Some(*client),
                _ => None,
            })
            .collect();
        let child_era = self.child_era();
        let line = Out::request(None, "notifications/message", m.params.as_deref()).encode();
        let targets: Vec<ClientId> = self
            .clients
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
            self.reply(c, line.clone());
        }
    }

    /// Traffic of 2026 listen streams on a modern child (`_meta.subscriptionId` = the listen
    /// request's child-side id): a client's stream goes to that client with its own id; the
    /// supervisor's stream is fanned out to handshake clients as session-wide notifications.
    /// Returns whether the notification was listen traffic.
    pub(super) fn route_listen_traffic(&mut self, method: &str, m: &Message) -> bool {
        let Some(raw_params) = m.params.as_deref() else {
            return false;
        };
        if !raw_params.get().contains(era::META_SUBSCRIPTION_ID)
            && method != "notifications/cancelled"
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
        if Some(sub) == self.opener.listen() {
            if method == "notifications/cancelled" {
                self.opener.listen_ended(sub);
                return true;
            }
            if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove(era::META_SUBSCRIPTION_ID);
                if meta.is_empty() {
                    params.remove("_meta");
                }
            }
            let line =
                Out::request(None, method, Some(&raw(&Value::Object(params.clone())))).encode();
            match method {
                "notifications/resources/updated" => {
                    let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                    for c in self.subs.direct_holders(uri) {
                        self.reply(c, line.clone());
                    }
                }
                "notifications/subscriptions/acknowledged" => {}
                _ if era::LISTS
                    .iter()
                    .any(|(l, n, _)| *n == method && self.startup_announcement(l)) => {}
                _ => self.broadcast(&line, |c| c.era() != Some(Era::Modern)),
            }
            return true;
        }
        let owner = self
            .routing
            .inflight()
            .get(sub)
            .and_then(|p| match &p.owner {
                Owner::Client { client, id, .. } if p.method == "subscriptions/listen" => {
                    Some((*client, id.clone()))
                }
                _ => None,
            });
        let Some((client, id)) = owner else {
            // A cancel of another request: routed as usual. Traffic tagged with a stream that
            // is no longer open (its cancel crossed the child's notifications, or its client
            // left) belongs to nobody: never fanned out as session-wide (sim seed 124).
            if method != "notifications/cancelled" {
                debug!(notification = %method, subscription = sub, "traffic of a listen stream no longer open: dropped");
            }
            return method != "notifications/cancelled";
        };
        let original: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
        if method == "notifications/cancelled" {
            // The child ended the client's stream.
            params.insert("requestId".into(), original);
            if let Some(r) = self.routing.inflight_mut().remove(sub) {
                if let Some((c, key)) = r.client {
                    self.finish(c, &key, Outcome::Cancelled, None);
                }
            }
        } else if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.insert(era::META_SUBSCRIPTION_ID.into(), original);
        }
        let line = Out::request(None, method, Some(&raw(&Value::Object(params)))).encode();
        self.reply_to(client, To::Listen(&id), line);
        true
    }

    /// A reply the envelope parser refused (K21): fails its request only, naming the server.
    pub(super) fn on_malformed(&mut self, id: &RawValue, why: &str) {
        let Some(n) = id.get().parse::<u64>().ok() else {
            return;
        };
        if self.health.answered(n) {
            return;
        }
        let Some(removed) = self.routing.inflight_mut().remove(n) else {
            return;
        };
        match removed.value.owner {
            Owner::Client { client, id, .. } => {
                self.fail_malformed(client, &id, &removed.value.method, why)
            }
            Owner::Parked { round } => self.on_parked_failure(round, n, why),
            _ => {}
        }
    }

    /// Fails a client request whose reply from the child was malformed (K21): -32603 naming
    /// the server, the method and what is wrong.
    pub(super) fn fail_malformed(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        problem: &str,
    ) {
        let msg = format!(
            "server `{}` sent a malformed response to `{method}`: {problem}",
            self.cfg.name
        );
        let data = json!({"server": self.cfg.name, "problem": problem});
        self.respond_error(
            client,
            id,
            code::INTERNAL_ERROR,
            &msg,
            Some(data),
            Outcome::ProtocolError,
        );
    }

    pub(super) fn on_oversized(&mut self, len: usize, id: Option<Box<RawValue>>) {
        let n = id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        let Some(child_id) = n.filter(|n| self.routing.inflight().contains(*n)) else {
            warn!(
                bytes = len,
                "an oversized line with no recoverable request id was dropped"
            );
            return;
        };
        let Some(removed) = self.routing.inflight_mut().remove(child_id) else {
            return;
        };
        let p = removed.value;
        if let Owner::Parked { round } = p.owner {
            let why = format!("a message of {len} bytes, over max_message_size");
            return self.on_parked_failure(round, child_id, &why);
        }
        if let Owner::Client { client, id, .. } = p.owner {
            let msg = format!(
                "server `{}` answered with a message of {len} bytes, over max_message_size ({} bytes); it was discarded",
                self.cfg.name, self.cfg.max_message_size
            );
            let data = json!({"server": self.cfg.name, "bytes": len});
            self.respond_error(
                client,
                &id,
                code::INTERNAL_ERROR,
                &msg,
                Some(data),
                Outcome::ProtocolError,
            );
        }
    }
}
