//! The connected clients of a server and what the actor knows of each (issue 3, issue 6 §3):
//! its outbound queue, its peer credentials, its era (decided by its first request, as the
//! SDKs do), whether it finished its handshake, its capabilities and `clientInfo`, the log
//! level it asked for, and whether its input closed.
//!
//! Owns the table and every [`Client`]'s fields; the table is kept by the outbox
//! (`outbox.rs`). A delivery is an [`Effect::Deliver`] made by [`Client::delivery`], which only
//! queues (never blocks); what a failed delivery means (the client is dropped) is
//! decided by the caller. Never writes to the child.

use super::effects::Effect;
use crate::era::{self, Era};
use crate::session::{ClientId, ClientTx, Peer, To};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use vocab::jsonrpc::framing::Line;

/// One connected client.
#[derive(Debug)]
pub(super) struct Client {
    /// Shared with the deliveries decided for it and not yet carried out.
    tx: Arc<ClientTx>,
    peer: Peer,
    /// The client's era, decided by its first request.
    era: Option<Era>,
    initialized: bool,
    capabilities: Value,
    /// Its `clientInfo.name` (the request log's records borrow it).
    name: String,
    /// `clientInfo` from its `initialize` or envelope (for envelopes toward a modern child);
    /// `Null` until learned.
    info: Value,
    log_level: Option<usize>,
    /// Input closed: drop the client once its last request is answered.
    closing: bool,
}

impl Client {
    /// Its peer credentials.
    pub(super) fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Its era, once its first request decided it.
    pub(super) fn era(&self) -> Option<Era> {
        self.era
    }

    /// Its era, decided by its first request as the SDKs do: an envelope (`envelope`) or
    /// `server/discover` means 2026-07-28; `initialize` or anything else, the handshake era.
    /// Later requests (`method`) read the era decided.
    pub(super) fn settle_era(&mut self, method: &str, envelope: bool) -> Era {
        *self.era.get_or_insert_with(|| {
            if method != "initialize" && (envelope || method == "server/discover") {
                Era::Modern
            } else {
                Era::Handshake
            }
        })
    }

    /// Whether it finished its handshake (handshake-era clients; 2026 clients need none).
    pub(super) fn initialized(&self) -> bool {
        self.initialized
    }

    /// The capabilities it declared.
    pub(super) fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    /// Whether it declared capability `cap` (present and not `null`).
    pub(super) fn has_capability(&self, cap: &str) -> bool {
        self.capabilities.get(cap).is_some_and(|v| !v.is_null())
    }

    /// Its `clientInfo.name` (empty until known).
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Its `clientInfo` (`Null` until known).
    pub(super) fn info(&self) -> &Value {
        &self.info
    }

    /// The log level it asked for with `logging/setLevel`.
    pub(super) fn log_level(&self) -> Option<usize> {
        self.log_level
    }

    /// Sets the log level it asked for.
    pub(super) fn set_log_level(&mut self, level: usize) {
        self.log_level = Some(level);
    }

    /// Whether its input closed (it is dropped once its last request is answered).
    pub(super) fn closing(&self) -> bool {
        self.closing
    }

    /// Its input closed.
    pub(super) fn close_input(&mut self) {
        self.closing = true;
    }

    /// What a handshake-era client said in its `initialize`: it is initialized from now on.
    pub(super) fn initialize(&mut self, capabilities: Value, info: Value, name: String) {
        self.capabilities = capabilities;
        self.info = info;
        self.name = name;
        self.initialized = true;
    }

    /// A 2026 client names itself and its capabilities in every request's envelope
    /// (`params`). They are read from its first request only (the request log's
    /// `client_name`, issue 13 Why 4; the owner rule for the child's requests, K26), so later
    /// requests cost no second scan of their params: `info` stops being `Null` once learned
    /// (an envelope that said nothing is remembered as `{}`).
    pub(super) fn learn_envelope(&mut self, params: Option<&RawValue>) {
        if !self.info.is_null() {
            return;
        }
        let info = era::envelope_field(params, era::META_CLIENT_INFO);
        let capabilities = era::envelope_field(params, era::META_CAPABILITIES);
        self.name = info
            .as_ref()
            .and_then(|i| i.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .into();
        self.info = info.unwrap_or_else(|| json!({}));
        if let Some(caps) = capabilities {
            self.capabilities = caps;
        }
    }

    /// The effect that queues `line` for it (it is client `id`), addressed `to`; the address
    /// is made only for a queue that carries one (HTTP).
    pub(super) fn delivery(&self, id: ClientId, to: To<'_>, line: Line) -> Effect {
        Effect::Deliver {
            client: id,
            tx: Arc::clone(&self.tx),
            address: self.tx.address(to),
            line,
        }
    }

    /// Queues `line` session-wide, then closes the connection once it is written: the shell's
    /// own hang-up (after an actor panic), which is no decision of the core.
    pub(super) fn say_and_close(&self, line: impl Into<Line>) {
        self.tx.deliver(line);
        self.tx.close_after_drain();
    }

    /// The effect that queues `line` for it session-wide, then closes its connection once
    /// the line is written (saying why before hanging up).
    pub(super) fn hangup(&self, line: Line) -> Effect {
        Effect::Hangup {
            tx: Arc::clone(&self.tx),
            line,
        }
    }

    /// Whether its connection was closed (kicked, or a failed delivery): the simulation's
    /// invariant that a kicked client is not kept.
    #[cfg(test)]
    pub(super) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Closes the connection now.
    pub(super) fn kick(&self) {
        self.tx.kick();
    }
}

/// The connected clients, by id.
#[derive(Debug, Default)]
pub(super) struct Clients {
    by_id: BTreeMap<ClientId, Client>,
}

impl Clients {
    /// A client connected over `tx` as `peer`; it has said nothing yet.
    pub(super) fn connect(&mut self, id: ClientId, tx: ClientTx, peer: Peer) {
        self.by_id.insert(
            id,
            Client {
                tx: Arc::new(tx),
                peer,
                era: None,
                initialized: false,
                capabilities: json!({}),
                name: String::new(),
                info: Value::Null,
                log_level: None,
                closing: false,
            },
        );
    }

    /// Client `id`.
    pub(super) fn get(&self, id: &ClientId) -> Option<&Client> {
        self.by_id.get(id)
    }

    /// Client `id`, to change.
    pub(super) fn get_mut(&mut self, id: &ClientId) -> Option<&mut Client> {
        self.by_id.get_mut(id)
    }

    /// Whether client `id` is connected.
    pub(super) fn contains_key(&self, id: &ClientId) -> bool {
        self.by_id.contains_key(id)
    }

    /// Client `id` left (or is dropped).
    pub(super) fn remove(&mut self, id: &ClientId) -> Option<Client> {
        self.by_id.remove(id)
    }

    /// Every client is gone (the actor failed).
    pub(super) fn clear(&mut self) {
        self.by_id.clear();
    }

    /// Clients connected.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every client, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&ClientId, &Client)> {
        self.by_id.iter()
    }

    /// Every client.
    pub(super) fn values(&self) -> impl Iterator<Item = &Client> {
        self.by_id.values()
    }

    /// The most verbose level any client asked for (lower is more verbose).
    pub(super) fn min_log_level(&self) -> Option<usize> {
        self.by_id.values().filter_map(|c| c.log_level).min()
    }
}
