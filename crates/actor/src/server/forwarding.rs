//! A request written toward the upstream (issue 3; issue 6 §3-4): a fresh child-side id from a
//! counter that never repeats, `_meta.progressToken` replaced by that id (the response and the
//! progress map back to the owner), the params translated between the client's era and the
//! child's, the deadline of its method, and the in-flight entry that routes the answer. The
//! client's own limits (`max_inflight`, `client_max_inflight`) are checked first.
//!
//! A section of the core as free functions over one narrow context ([`Forwarding`]): the
//! in-flight table, the opener (the child's era, handshake and log level), the idle clock and
//! the outbox. A request that finds no child running is returned to the caller
//! ([`Unsent`]): the child is gone and its exit not handled yet, so a client's request gets
//! the outage record, which the caller owns.
//!
//! No clock read, no I/O: the request becomes an [`Effect::ToChild`].

use super::core::{Owner, Pending};
use super::demand::Demand;
use super::effects::{Effect, Lane, Written};
use super::opener::Opener;
use super::outbox::{Outbox, Stamp};
use super::routing::Routing;
use super::telemetry::Telemetry;
use super::util::{level_name, list_to_cache, subscribe_uri, with_roots_kept_home};
use crate::era::{self, Era};
use crate::ids::id_key;
use crate::session::ClientId;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::time::Instant;
use support::config::{ClientRoots, ServerConfig};
use support::observe::Outcome;
use tracing::debug;
use upstream::{Outbound, Queued};
use vocab::jsonrpc::message::{self, code, raw, raw_u64, Message, Out};

/// What writing a request toward the upstream touches.
pub(super) struct Forwarding<'a> {
    /// The id counter and the in-flight table.
    routing: &'a mut Routing,
    /// The child's era and handshake; the session-wide log level it was set to.
    opener: &'a mut Opener,
    /// The idle clock (a forwarded request is a use).
    demand: &'a mut Demand,
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    /// The moment and the running instance (none: the request is [`Unsent`]).
    at: Stamp<'a>,
    /// The limits, the method timeouts, `client_roots` and `roots`.
    cfg: &'a ServerConfig,
}

impl<'a> Forwarding<'a> {
    /// The context over the in-flight table, the opener, the idle clock, the outbox and the
    /// telemetry at `at`.
    pub(super) fn new(
        routing: &'a mut Routing,
        opener: &'a mut Opener,
        demand: &'a mut Demand,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        cfg: &'a ServerConfig,
    ) -> Self {
        Forwarding {
            routing,
            opener,
            demand,
            outbox,
            telemetry,
            at,
            cfg,
        }
    }
}

/// A request that found no child running: for a client's request, the client and its id,
/// with the method, for the caller to answer with the outage record.
#[derive(Debug)]
pub(super) struct Unsent {
    /// The client and its id, when a client's request owned it.
    pub(super) client: Option<(ClientId, Box<RawValue>)>,
    pub(super) method: String,
}

/// Forwards `client`'s request `m` to the ready child, unless a limit refuses it (-32002,
/// outcome `denied`).
pub(super) fn forward(cx: &mut Forwarding<'_>, client: ClientId, m: Message) -> Result<(), Unsent> {
    let Message {
        id, method, params, ..
    } = m;
    let Some(id) = id else { return Ok(()) };
    let inflight = cx.routing.inflight().len();
    if inflight >= cx.cfg.max_inflight {
        let msg = format!(
            "server `{}` has {inflight} requests in flight; try again shortly",
            cx.at.server()
        );
        refuse_limit(cx, client, &id, &msg);
        return Ok(());
    }
    let mine = cx.routing.inflight().count_for(client);
    if mine >= cx.cfg.client_max_inflight {
        // One client may not take all of `max_inflight` (issue 14 §3).
        let msg = format!(
            "this client has {mine} requests in flight to server `{}` (client_max_inflight); try again shortly",
            cx.at.server()
        );
        refuse_limit(cx, client, &id, &msg);
        return Ok(());
    }
    cx.demand.used(cx.at.now());
    let child_id = cx.routing.inflight_mut().allocate();
    let (params, progress) = match params.as_deref() {
        Some(p) => match message::swap_progress_token(p, || raw_u64(child_id)) {
            Some((np, orig)) => (Some(np), Some(orig)),
            None => (params, None),
        },
        None => (None, None),
    };
    let method = method.unwrap_or_default();
    let cache = list_to_cache(&method, params.as_deref());
    let subscribe = subscribe_uri(&method, params.as_deref());
    let (client_era, child_era) = (cx.outbox.era_of(client), cx.opener.child_era());
    let (params, log_level) = translate_params(cx, client, params);
    let key = id_key(&id);
    // Traces on (issue 17 §4): the child gets our span as its parent, and the client's
    // `tracestate`. Off, the params pass as they are, with no lookup.
    let span = if cx.telemetry.traced() && era::can_carry_meta(params.as_deref()) {
        cx.outbox.ledger().span(client, &key)
    } else {
        None
    };
    let params = match span {
        Some(span) => Some(era::add_envelope(params.as_deref(), &span.meta())),
        None => params,
    };
    let add_result_type = client_era == Era::Modern && child_era == Era::Handshake;
    // A listen stream lives until it is cancelled: no deadline.
    let deadline = (method != "subscriptions/listen")
        .then(|| base::deadline::after(cx.at.now(), cx.cfg.timeout_for(&method)));
    let retry_params = (client_era == Era::Handshake
        && child_era == Era::Modern
        && matches!(&*method, "tools/call" | "prompts/get" | "resources/read"))
    .then(|| params.clone())
    .flatten();
    let owner = Owner::Client {
        client,
        id,
        progress,
        subscribe,
        cache,
        add_result_type,
        log_level,
        retry_params,
    };
    send(cx, child_id, Some(key), owner, &method, params, deadline).map(|_| ())
}

/// Refuses `client`'s request `id` for a limit: -32002 with `msg`, outcome `denied`.
fn refuse_limit(cx: &mut Forwarding<'_>, client: ClientId, id: &RawValue, msg: &str) {
    cx.outbox.respond_error(
        cx.telemetry,
        &cx.at,
        client,
        id,
        code::LIMIT_EXCEEDED,
        msg,
        None,
        Outcome::Denied,
    );
}

/// Translates `client`'s request params between the client's era and the child's (issue 6
/// §3, §4). Returns them with the log level the request asks for, if any.
fn translate_params(
    cx: &mut Forwarding<'_>,
    client: ClientId,
    params: Option<Box<RawValue>>,
) -> (Option<Box<RawValue>>, Option<usize>) {
    let envelope_level = |p: Option<&RawValue>| {
        era::envelope_field(p, era::META_LOG_LEVEL).and_then(|l| l.as_str().and_then(era::log_rank))
    };
    match (cx.outbox.era_of(client), cx.opener.child_era()) {
        (Era::Modern, Era::Handshake) => {
            let log_level = envelope_level(params.as_deref());
            if let Some(level) = log_level {
                want_child_log_level(cx, level);
            }
            (
                params.map(|p| era::strip_envelope(&p).into_owned()),
                log_level,
            )
        }
        (Era::Handshake, Era::Modern) => {
            let c = cx.outbox.clients().get(&client);
            let log_level = c.and_then(|c| c.log_level());
            let env = era::envelope(
                &c.map(|c| c.capabilities().clone()).unwrap_or(json!({})),
                &c.map(|c| c.info().clone()).unwrap_or(Value::Null),
                log_level.map(level_name),
            );
            (Some(era::add_envelope(params.as_deref(), &env)), log_level)
        }
        (Era::Modern, Era::Modern) => {
            let log_level = envelope_level(params.as_deref());
            // A 2026 client answers a 2026 server's roots round itself: under
            // `client_roots = "none"` its roots are replaced by the operator's before the
            // retry reaches the server (issue 47 §6, R1).
            let kept_home = (cx.cfg.client_roots == ClientRoots::None)
                .then_some(params.as_deref())
                .flatten()
                .and_then(|p| with_roots_kept_home(p, &json!({"roots": cx.cfg.roots})));
            (kept_home.or(params), log_level)
        }
        (Era::Handshake, Era::Handshake) => (params, None),
    }
}

/// A modern client asked a handshake child for logs at `level`: the child's session-wide
/// level must be at least that verbose (never lowered by a modern request).
pub(super) fn want_child_log_level(cx: &mut Forwarding<'_>, level: usize) {
    if cx.opener.handshake().is_some_and(|h| h.has("logging")) && cx.opener.raise_log_level(level) {
        send_log_level(cx, level);
    }
}

/// The child gets the most verbose level any client asked for (issue 3 §3). The level is
/// recorded while the child is down too (the restart replays it); it is sent when the child
/// is a `ready` handshake-era one. Returns whether it was sent (the session note changes).
pub(super) fn sync_log_level(cx: &mut Forwarding<'_>, ready: bool) -> bool {
    let Some(want) = cx.outbox.clients().min_log_level() else {
        return false;
    };
    if cx.opener.child_era() != Era::Handshake || !cx.opener.set_log_level(want) || !ready {
        return false;
    }
    send_log_level(cx, want);
    true
}

/// `logging/setLevel` to `level` (a rank of `era::log_rank`), the supervisor's own request,
/// bounded by `request_timeout`.
fn send_log_level(cx: &mut Forwarding<'_>, level: usize) {
    let p = raw(&json!({"level": level_name(level)}));
    let deadline = base::deadline::after(cx.at.now(), cx.cfg.request_timeout);
    let child_id = cx.routing.inflight_mut().allocate();
    // Only a client's request is answered when unsent; this one is the supervisor's own.
    let _ = send(
        cx,
        child_id,
        None,
        Owner::Internal,
        "logging/setLevel",
        Some(p),
        Some(deadline),
    );
}

/// Registers request `method` (`params`) of `owner` under the allocated `child_id` and writes
/// it to the running child; `key` is the owning client's request id text. A 2026 child gets
/// the supervisor's envelope on a request of the supervisor's own. Returns `child_id`, or the
/// request back when no child runs.
pub(super) fn send(
    cx: &mut Forwarding<'_>,
    child_id: u64,
    key: Option<String>,
    owner: Owner,
    method: &str,
    params: Option<Box<RawValue>>,
    deadline: Option<Instant>,
) -> Result<u64, Unsent> {
    let params = if cx.opener.child_era() == Era::Modern
        && !matches!(owner, Owner::Client { .. })
        && era::envelope_version(params.as_deref()).is_none()
    {
        Some(era::add_envelope(
            params.as_deref(),
            &era::supervisor_envelope(),
        ))
    } else {
        params
    };
    let line = message::request_line(child_id, method, params.as_deref());
    // What a remote session needs of it (issue 48 §2), known here rather than parsed again.
    // The name is read only for a 2026-07-28 request, the only one whose POST carries it
    // (`Mcp-Name`): a handshake-era request (a child's every request) is not parsed again.
    let modern = is_modern(params.as_deref());
    let name = match method {
        "tools/call" | "prompts/get" if modern => {
            vocab::protocol::param_string(params.as_deref(), "name")
        }
        "resources/read" if modern => vocab::protocol::param_string(params.as_deref(), "uri"),
        _ => None,
    };
    let Some(generation) = cx.at.generation() else {
        let client = match owner {
            Owner::Client { client, id, .. } => Some((client, id)),
            _ => None,
        };
        return Err(Unsent {
            client,
            method: method.to_string(),
        });
    };
    cx.telemetry.metrics().bytes("to_child", line.len());
    let out = Outbound::request(line, child_id, message::method_name(method), name, modern);
    // In flight from now; a refusal of the child's queue comes back as `Unwritten`.
    cx.outbox.push(Effect::ToChild {
        generation,
        out,
        lane: Lane::Normal,
        what: Written::Request(child_id),
    });
    let client = match (&owner, key) {
        (Owner::Client { client, .. }, Some(key)) => Some((*client, key)),
        _ => None,
    };
    let pending = Pending::new(owner, message::method_name(method), cx.at.now());
    cx.routing
        .inflight_mut()
        .insert(child_id, client, deadline, pending);
    Ok(child_id)
}

/// `client`'s `notifications/cancelled` of its request with id key `key` (its `params`): the
/// request leaves the in-flight table with outcome `cancelled`, and the child is told, under
/// the child-side id, urgently. A cancel of a request not in flight is not forwarded.
pub(super) fn cancel(
    cx: &mut Forwarding<'_>,
    client: ClientId,
    key: &str,
    mut params: serde_json::Map<String, Value>,
) {
    let Some(child_id) = cx.routing.inflight().lookup(client, key) else {
        debug!(client = %client, request_id = %key, "cancel for an unknown request: not forwarded");
        return;
    };
    cx.routing.inflight_mut().remove(child_id);
    cx.outbox
        .finish(cx.telemetry, &cx.at, client, key, Outcome::Cancelled, None);
    params.insert("requestId".into(), json!(child_id));
    let params = raw(&Value::Object(params));
    let line = Out::request(None, "notifications/cancelled", Some(&params)).encode();
    let mut out = Outbound::cancel(line, child_id);
    out.modern = is_modern(Some(&params));
    let what = "a client's notifications/cancelled";
    cx.outbox.write_upstream(&cx.at, out, Lane::Urgent, what);
}

/// A client's other notification `m`, passed to the child when it is `ready`.
pub(super) fn notify(cx: &mut Forwarding<'_>, m: &Message, ready: bool) {
    if !ready {
        return;
    }
    let line = Out::request(None, m.method(), m.params.as_deref()).encode();
    let modern = is_modern(m.params.as_deref());
    let out = Outbound::notification(line, message::method_name(m.method()), modern);
    cx.outbox
        .write_upstream(&cx.at, out, Lane::Normal, "a client's notification");
}

/// Whether `params` carry a 2026-07-28 envelope (`_meta`'s protocol version names it): what a
/// remote session sends without a session and with the standard headers ([`Outbound::modern`]).
fn is_modern(params: Option<&RawValue>) -> bool {
    era::envelope_version(params).as_deref() == Some(era::MODERN_VERSION)
}

/// The upstream's queue refused request `child_id` (the shell's report of an
/// [`Effect::ToChild`]): it leaves the in-flight table. A client's request whose queue is
/// full is answered here: the child is not reading (-32002, outcome `denied`); one whose
/// queue is closed is returned, as the child is exiting (the caller gives the outage record,
/// as for any request that cannot reach it). A refused listen stream is over.
pub(super) fn on_unwritten(
    cx: &mut Forwarding<'_>,
    child_id: u64,
    queued: Queued,
) -> Result<(), Unsent> {
    let Some(removed) = cx.routing.inflight_mut().remove(child_id) else {
        return Ok(());
    };
    let (owner, method, _) = removed.value.into_parts();
    match owner {
        Owner::Client { client, id, .. } if queued == Queued::Closed => {
            let method = method.into_owned();
            return Err(Unsent {
                client: Some((client, id)),
                method,
            });
        }
        Owner::Client { client, id, .. } => {
            let msg = format!(
                "server `{}` cannot take requests now: the child is not reading its input",
                cx.at.server()
            );
            let code = code::LIMIT_EXCEEDED;
            let line = message::error_response(&id, code, &msg, None);
            let outcome = Outcome::Denied;
            cx.outbox
                .respond(cx.telemetry, &cx.at, client, &id, line, outcome, Some(code));
        }
        Owner::Listen => {
            cx.opener.listen_ended(child_id);
        }
        _ => {
            debug!(method = %method, "a request of the supervisor's own was not written to the child")
        }
    }
    Ok(())
}
