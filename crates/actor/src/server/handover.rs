//! The actor's part of an upgrade in place (issue 32 §1): whether it is quiet (no client
//! request unfinished), what it hands over (the child's pipes and session, each socket
//! client's state as lines to replay, its open `subscriptions/listen` streams included), and
//! what it adopts in the next image.
//!
//! Decisions only: the shell (`mod.rs`) freezes the actor once it has handed over, and the
//! daemon (`daemon/upgrade.rs`) awaits the child's paused tasks and executes the new image.

use super::util::level_name;
use super::Server;
use crate::era::Era;
use crate::park::REPLAY_ID_PREFIX;
use crate::session::{ClientId, Transport};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use tracing::{info, warn};
use upstream::Carried;
use vocab::jsonrpc::message::Out;

/// Longest listen request kept (a listen request names flags and resource URIs; a larger
/// one is not kept, and its stream is not reopened after an upgrade).
const LISTEN_LINE_MAX: usize = 64 * 1024;

/// Each socket client's `subscriptions/listen` requests as the client sent them (its own id
/// and params), by the request's id key: what the next image replays to reopen the streams
/// still open at a hand-over. At most `cap` per client (`max_subscriptions`, the most open
/// streams a client may have): lines of streams that ended go first.
#[derive(Debug, Default)]
pub(super) struct ListenLines(BTreeMap<ClientId, VecDeque<(String, String)>>);

impl ListenLines {
    /// Keeps `client`'s listen request `line` under id key `key`; `open` says which of its
    /// kept keys still name an open stream.
    pub(super) fn note(
        &mut self,
        client: ClientId,
        key: String,
        line: String,
        cap: usize,
        open: impl Fn(&str) -> bool,
    ) {
        if line.len() > LISTEN_LINE_MAX {
            return;
        }
        let kept = self.0.entry(client).or_default();
        kept.retain(|(k, _)| *k != key);
        if kept.len() >= cap {
            kept.retain(|(k, _)| open(k));
        }
        while kept.len() >= cap {
            kept.pop_front();
        }
        kept.push_back((key, line));
    }

    /// Forgets a client that left.
    pub(super) fn forget(&mut self, client: ClientId) {
        self.0.remove(&client);
    }

    /// `client`'s kept request with id key `key`.
    fn line(&self, client: ClientId, key: &str) -> Option<&str> {
        self.0
            .get(&client)?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, l)| l.as_str())
    }
}

/// A socket client's state for the next image.
#[derive(Debug, Default)]
pub struct ClientState {
    /// Lines that rebuild it (handshake, log level, subscriptions, listen streams not yet
    /// acknowledged), under replay ids or, for listen streams, its own.
    pub replay: Vec<String>,
    /// Its acknowledged listen streams' requests, under its own ids: the next image drops
    /// the first acknowledgement of each (the client has had it).
    pub listens: Vec<String>,
}

/// A server that was not running at the hand-over, as the next image keeps it: stopped by
/// the operator, given up, waiting out its backoff, or waiting for a sign-in (the record's
/// `servers[].rest`). Without it, an upgrade would start what the operator stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Rest {
    /// Stopped (the operator's `stop`).
    Stopped,
    /// Gave up; retried in this many milliseconds (never: `None`).
    Failed { retry_in_ms: Option<u64> },
    /// Waiting to spawn in this many milliseconds.
    Backoff { retry_in_ms: u64 },
    /// A url server waiting for a sign-in or a fixed credential.
    AuthRequired,
}

/// What a server hands over.
#[derive(Debug)]
pub struct HandOver {
    /// The running instance's generation.
    pub generation: u64,
    /// The next child-side request id.
    pub next_id: u64,
    /// The handshake and lists (`actor::record`'s shape).
    pub handshake: Option<Value>,
    /// The level the child's logging was set to.
    pub log_level: Option<usize>,
    /// What the running instance left for the next image ([`upstream::Upstream::hand_over`]):
    /// a child's paused pipe tasks, or a url server's open session (its tasks ended, never
    /// DELETEd). Opaque here: the daemon, which writes the record, reads it.
    pub carried: Option<Carried>,
    /// Its stderr tail.
    pub tail: String,
    /// Restarts counted so far.
    pub restarts: u64,
    /// The last exit, if any.
    pub last_exit: Option<super::LastExit>,
    /// How it rests, when no instance runs.
    pub rest: Option<Rest>,
    /// Each socket client's state, as the lines that rebuild it in the next image's actor.
    pub clients: BTreeMap<ClientId, ClientState>,
}

impl HandOver {
    /// The hand-over of an endpoint (issue 31): its clients' states only; it has no child,
    /// session or ids of its own.
    pub fn of_clients(clients: BTreeMap<ClientId, ClientState>) -> HandOver {
        HandOver {
            generation: 0,
            next_id: 0,
            handshake: None,
            log_level: None,
            carried: None,
            tail: String::new(),
            restarts: 0,
            last_exit: None,
            rest: None,
            clients,
        }
    }
}

/// What the next image's actor adopts from the previous one's [`HandOver`].
#[derive(Debug)]
pub struct Adoption {
    /// The running instance (a child's pipes, or a url server's session), when one ran:
    /// opaque here, taken by the actor's starter.
    pub carried: Option<Carried>,
    /// Whether an instance was handed over (stays true once `carried` is taken).
    pub running: bool,
    /// Its generation.
    pub generation: u64,
    /// The next child-side id.
    pub next_id: u64,
    /// The handshake and lists (`actor::record`'s shape), when the session was open.
    pub handshake: Option<Value>,
    /// The child's log level.
    pub log_level: Option<usize>,
    /// Restarts the previous image counted.
    pub restarts: u64,
    /// The last exit the previous image saw.
    pub last_exit: Option<super::LastExit>,
    /// How it rested, when no instance ran.
    pub rest: Option<Rest>,
}

impl Server {
    /// Client requests not finished yet (held ones and questions to clients included): an
    /// upgrade waits for 0 before it hands over.
    pub(super) fn unfinished(&self) -> usize {
        self.forwarded_requests()
            .saturating_add(self.held.len())
            .saturating_add(self.routing.asks())
            .saturating_add(self.rounds.open_rounds())
    }

    /// Hands over: the supervisor's own listen stream on a 2026 child is cancelled (the next
    /// image opens its own), the child's pipe tasks are paused, and each socket client's
    /// state is written as replay lines. The caller freezes the actor after this.
    pub(super) fn hand_over(&mut self) -> HandOver {
        // Which client listen streams are open (forwarded to the child, or served here) and
        // whether the client has had their acknowledgement.
        let mut open: Vec<(ClientId, String, bool)> = self
            .routing
            .inflight()
            .iter()
            .filter(|(_, _, _, p)| p.is_listen())
            .filter_map(|(_, _, _, p)| p.client_request().map(|(c, k)| (c, k, p.acked())))
            .collect();
        open.extend(
            self.subs
                .listeners()
                .iter()
                .map(|l| (l.client(), l.key(), true)),
        );
        // Clients' listen streams forwarded to the child end here; the socket clients' are
        // opened again by the next image from their replay lines.
        let forwarded: Vec<u64> = self
            .routing
            .inflight()
            .iter()
            .filter(|(_, c, _, p)| c.is_some() && p.is_listen())
            .map(|(id, _, _, _)| id)
            .collect();
        // So is the supervisor's own on a 2026 child: the next image opens its own.
        let own = self.opener.replace_listen(None);
        let cancels: Vec<u64> = forwarded.into_iter().chain(own).collect();
        for old in &cancels {
            self.routing.inflight_mut().remove(*old);
            let p = vocab::jsonrpc::message::raw(
                &json!({"requestId": old, "reason": "supervisor upgrade"}),
            );
            let line = Out::request(None, "notifications/cancelled", Some(&p)).encode();
            let out = upstream::Outbound::cancel(line, *old);
            self.write_child(
                out,
                super::effects::Lane::Urgent,
                "cancel of a listen stream",
            );
        }
        if !cancels.is_empty() {
            // Queued toward the child before its pipe tasks are paused.
            self.carry_out();
        }
        let handshake = self.opener.handshake().map(|hs| {
            let text = crate::record::encode(&self.cfg, hs, self.lists.all(), "");
            serde_json::from_slice(&text).unwrap_or(Value::Null)
        });
        // A url server's session goes on in the next image only when it is ready (else the
        // next image opens its own; the old one is left to expire, never DELETEd); a child
        // is handed over whatever its state.
        let ready = handshake.is_some() && self.life.state() == super::State::Ready;
        // What the log says of it: a child has a process id, a remote session has none.
        let pid = self.life.child().and_then(|c| c.describe().pid);
        let carried = self.life.child_mut().and_then(|c| c.hand_over(ready));
        let (child, remote_session) = match (&carried, pid) {
            (None, _) => (None, false),
            (Some(_), Some(pid)) => (Some(pid), false),
            (Some(_), None) => (None, true),
        };
        let mut clients = BTreeMap::new();
        for (id, c) in self.outbox.clients().iter() {
            if c.peer().transport != Transport::Socket || c.closing() {
                continue;
            }
            let mut n = 0u64;
            let mut next = || {
                n += 1;
                json!(format!("{REPLAY_ID_PREFIX}{n}"))
            };
            let mut lines = Vec::new();
            if c.era() == Some(Era::Handshake) {
                let version = self
                    .opener
                    .handshake()
                    .map_or("2025-06-18".to_string(), |h| h.protocol_version.clone());
                lines.push(
                    json!({"jsonrpc": "2.0", "id": next(), "method": "initialize",
                    "params": {"protocolVersion": version, "capabilities": c.capabilities(),
                        "clientInfo": c.info()}}),
                );
                if c.initialized() {
                    lines.push(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
                }
                if let Some(level) = c.log_level() {
                    lines.push(
                        json!({"jsonrpc": "2.0", "id": next(), "method": "logging/setLevel",
                        "params": {"level": level_name(level)}}),
                    );
                }
            }
            for uri in self.subs.uris() {
                if self.subs.holds_direct(*id, uri) {
                    lines.push(json!({"jsonrpc": "2.0", "id": next(),
                        "method": "resources/subscribe", "params": {"uri": uri}}));
                }
            }
            let mut state = ClientState {
                replay: lines.iter().map(Value::to_string).collect(),
                listens: Vec::new(),
            };
            // Its open listen streams, under its own ids.
            for (_, key, acked) in open.iter().filter(|(c, _, _)| c == id) {
                match self.listen_lines.line(*id, key) {
                    Some(line) if *acked => state.listens.push(line.to_string()),
                    Some(line) => state.replay.push(line.to_string()),
                    None => {
                        warn!(client = %id, stream = %key, "a listen stream of this client cannot be reopened after the upgrade (its request was not kept)")
                    }
                }
            }
            clients.insert(*id, state);
        }
        info!(
            clients = clients.len(),
            child, remote_session, "handing over to the next image"
        );
        HandOver {
            generation: self.instances.generation(),
            next_id: self.routing.inflight().next_id(),
            handshake,
            log_level: self.opener.log_level(),
            carried,
            tail: self.instances.tail().text(),
            restarts: self.instances.restarts(),
            last_exit: self.instances.last_exit().cloned(),
            rest: self.rest(),
            clients,
        }
    }

    /// Takes what the previous image handed over: the session's handshake, lists and log
    /// level, the ids the child has seen, and the generation the inherited instance runs as.
    /// How the server rests now, if no instance runs (or is about to).
    fn rest(&self) -> Option<Rest> {
        let now = self.clock.now();
        let due = |t: std::time::Instant| {
            u64::try_from(t.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
        };
        match self.life.state() {
            super::State::Stopped => Some(Rest::Stopped),
            super::State::Failed => Some(Rest::Failed {
                retry_in_ms: self.life.next_spawn().map(due),
            }),
            super::State::Backoff => Some(Rest::Backoff {
                retry_in_ms: self.life.next_spawn().map_or(0, due),
            }),
            super::State::AuthRequired => Some(Rest::AuthRequired),
            _ => None,
        }
    }

    pub(super) fn adopt(&mut self, a: &Adoption) {
        let rest = a.rest.filter(|_| !a.running);
        self.instances
            .resume(a.restarts, a.last_exit.clone(), rest.is_some());
        if let Some(rest) = rest {
            let at = |ms: u64| {
                base::deadline::after(self.clock.now(), std::time::Duration::from_millis(ms))
            };
            self.life = match rest {
                Rest::Stopped => super::life::Life::Stopped,
                Rest::Failed { retry_in_ms } => super::life::Life::Failed {
                    retry_at: retry_in_ms.map(at),
                },
                Rest::Backoff { retry_in_ms } => super::life::Life::Backoff {
                    until: at(retry_in_ms),
                    probe_respawn: false,
                    restart: true,
                },
                Rest::AuthRequired => super::life::Life::AuthRequired,
            };
            info!(state = %self.life.state().name(), "handed over at rest: it stays so");
        }
        let Some(record) = a
            .handshake
            .as_ref()
            .and_then(|v| serde_json::to_vec(v).ok())
            .and_then(|t| crate::record::decode(&self.cfg, &t).ok())
        else {
            return;
        };
        self.lists.restore(record.lists);
        if a.running {
            self.opener.adopt(
                record.handshake,
                self.cfg.protocol == vocab::protocol::ChildProtocol::Auto,
                a.log_level,
            );
            self.instances.resume_at(a.generation);
        } else {
            self.opener.restore(
                record.handshake,
                self.cfg.protocol == vocab::protocol::ChildProtocol::Auto,
            );
        }
        self.routing.inflight_mut().resume_at(a.next_id);
    }
}

#[cfg(test)]
mod tests {
    use super::ListenLines;
    use crate::session::ClientId;

    #[test]
    fn listen_lines_keep_open_streams_over_ended_ones_and_stay_bounded() {
        let mut l = ListenLines::default();
        let c = ClientId(1);
        let open = ["\"A\"".to_string()];
        let is_open = |k: &str| open.iter().any(|o| o == k);
        l.note(c, "\"A\"".into(), "listen A".into(), 3, is_open);
        for n in 0..10 {
            l.note(c, format!("\"{n}\""), format!("listen {n}"), 3, is_open);
        }
        // The open stream's line stays; the ended ones went first.
        assert_eq!(l.line(c, "\"A\""), Some("listen A"));
        assert_eq!(l.line(c, "\"9\""), Some("listen 9"));
        assert_eq!(l.0.get(&c).map(|v| v.len()), Some(3));
        // A line too large to be a listen request is not kept.
        l.note(c, "\"B\"".into(), "x".repeat(70_000), 3, is_open);
        assert_eq!(l.line(c, "\"B\""), None);
        l.forget(c);
        assert_eq!(l.line(c, "\"A\""), None);
    }
}
