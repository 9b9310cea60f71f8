//! Observability at the MCP boundary (issue 8): the outcome of every request, the request log,
//! and the Prometheus metrics.
//!
//! Owns: the outcome vocabulary (a stable contract, see docs/book/src/reference/metrics.md,
//! "Outcomes") and the metric families. Never logs argument values, results, tokens or
//! environment values: the request log carries the method, the tool name and the *keys* of the
//! arguments only.

use histogram::DurationHistogram;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

mod changes;
pub mod histogram;
pub mod history;
mod http;
pub mod ready;
pub mod trace;
pub use changes::{changed, changes};
pub use http::serve_http;
pub use ready::readiness;

/// How a request ended. Every request that reaches the supervisor ends in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result (including answers the supervisor gave itself: `ping`, cached `initialize`,
    /// lists served from the cache during an outage).
    Ok,
    /// A `tools/call` result with `isError: true` from the child.
    ToolError,
    /// A JSON-RPC error from the child (labelled with its code).
    ProtocolError,
    /// The child was down, starting, backing off, failed or stopped.
    Unreachable,
    /// The request's deadline passed.
    Timeout,
    /// The client cancelled it or disconnected.
    Cancelled,
    /// Refused by the supervisor (limits, access).
    Denied,
    /// Malformed (not JSON, not JSON-RPC, bad params the supervisor checks itself).
    Invalid,
    /// Refused by an endpoint's policy (issue 31): this client may not use this tool; not an
    /// outage, neither good nor bad for the SLI.
    PolicyDenied,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::ProtocolError => "protocol_error",
            Outcome::Unreachable => "unreachable",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Denied => "denied",
            Outcome::Invalid => "invalid",
            Outcome::PolicyDenied => "policy_denied",
        }
    }
}

/// MCP methods used as label values; anything else is `other` (label values must not be
/// chosen by clients, or the series count is unbounded).
const KNOWN_METHODS: &[&str] = vocab::jsonrpc::message::CLIENT_REQUESTS;

/// `method` if it is a known MCP method, else `other`.
pub fn method_label(method: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
    server: String,
    method: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: String,
    method: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    server: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    server: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    server: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    server: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    server: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    server: String,
    direction: String,
}

/// Why a client connection was refused or closed to keep seats for others (issue 47 §4):
/// every seat taken (`max_clients`), the user's share taken (`uid_share`, see
/// `max_clients_per_uid`), or nothing said within `first_message_timeout` (`silent`).
pub const CLIENT_REFUSAL_REASONS: [&str; 3] = ["max_clients", "uid_share", "silent"];

/// The metric families, each a cheap handle on shared series (prometheus-client's `Family` is
/// an `Arc`), so a [`ServerMetrics`] can hold its own clone.
#[derive(Clone)]
struct Families {
    requests: Family<RequestLabels, Counter>,
    endpoint_requests: Family<EndpointLabels, Counter>,
    errors: Family<CodeLabels, Counter>,
    duration: Family<MethodLabels, DurationHistogram>,
    in_flight: Family<ServerLabels, Gauge>,
    clients: Family<ServerLabels, Gauge>,
    restarts: Family<ReasonLabels, Counter>,
    limit_kills: Family<ReasonLabels, Counter>,
    demand: Family<ReasonLabels, Counter>,
    probes: Family<ProbeLabels, Counter>,
    state: Family<StateLabels, Gauge>,
    bytes: Family<DirectionLabels, Counter>,
    refusals: Family<ClassLabels, Counter>,
    client_refusals: Family<ReasonLabels, Counter>,
    discarded: Family<DiscardLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    server: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DiscardLabels {
    server: String,
    reason: String,
    kind: String,
}

/// The supervisor's metric families (one registry per process).
pub struct Metrics {
    registry: Registry,
    families: Families,
    /// `request_log_dropped_total`, brought up to [`crate::logging::requests::dropped`] at
    /// each render.
    log_dropped: Counter,
    /// `trace_spans_dropped_total`, brought up to [`trace::dropped`] at each render.
    spans_dropped: Counter,
}

/// Child states exported as `mcp_child_state{state=...}` (1 for the current one).
pub const STATES: &[&str] = &[
    "starting",
    "ready",
    "backoff",
    "stopping",
    "stopped",
    "failed",
    "idle",
    "auth_required",
];

/// Probe events, the `result` label of `mcp_supervisor_probes_total`.
pub const PROBE_RESULTS: &[&str] = &["sent", "answered", "timeout"];

/// Relay directions, the `direction` label of `mcp_supervisor_relayed_bytes_total`.
pub const DIRECTIONS: &[&str] = &["to_child", "to_client"];

/// Restart reasons the server actor reports (its exit status class), the `reason` label of
/// `mcp_supervisor_child_restarts_total`. Others are counted too, through the family.
pub const RESTART_REASONS: &[&str] = &["exited", "signal", "timeout", "stopped"];

/// JSON-RPC error codes a [`ServerMetrics`] keeps a resolved counter for: JSON-RPC 2.0 §5.1,
/// the supervisor's own (`jsonrpc::message::code`), and the 2026-07-28 additions. Others are
/// counted too, through the family (a lock and a label string each time).
const CACHED_CODES: &[i64] = &[
    -32700, -32600, -32601, -32602, -32603, -32000, -32001, -32002, -32020, -32021, -32022, -32042,
];

impl Outcome {
    /// Every outcome, in the order of [`Outcome::index`].
    const ALL: [Outcome; 9] = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::ProtocolError,
        Outcome::Unreachable,
        Outcome::Timeout,
        Outcome::Cancelled,
        Outcome::Denied,
        Outcome::Invalid,
        Outcome::PolicyDenied,
    ];

    /// Position in [`Outcome::ALL`].
    fn index(self) -> usize {
        self as usize
    }
}

/// Method label slots: each known method, then `other`.
const METHOD_SLOTS: usize = KNOWN_METHODS.len() + 1;

/// The slot of `method`'s label (`other` last).
fn method_index(method: &str) -> usize {
    KNOWN_METHODS
        .iter()
        .position(|m| *m == method)
        .unwrap_or(KNOWN_METHODS.len())
}

/// The label value of a method slot.
fn method_of(slot: usize) -> &'static str {
    KNOWN_METHODS.get(slot).copied().unwrap_or("other")
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("mcp_supervisor");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests finished, by server, method and outcome",
            requests.clone(),
        );
        let endpoint_requests = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "endpoint_requests",
            "Requests of an endpoint's clients finished, by endpoint, source server, method and outcome (issue 31)",
            endpoint_requests.clone(),
        );
        let errors = Family::<CodeLabels, Counter>::default();
        registry.register(
            "jsonrpc_errors",
            "JSON-RPC errors returned to clients, by code",
            errors.clone(),
        );
        let duration = Family::<MethodLabels, DurationHistogram>::default();
        registry.register(
            "request_duration_seconds",
            "Request duration, by server and method",
            duration.clone(),
        );
        let in_flight = Family::<ServerLabels, Gauge>::default();
        registry.register(
            "requests_in_flight",
            "Requests forwarded to the child and not yet answered",
            in_flight.clone(),
        );
        let clients = Family::<ServerLabels, Gauge>::default();
        registry.register("clients", "Attached clients", clients.clone());
        let restarts = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "child_restarts",
            "Child exits followed by a restart, by reason",
            restarts.clone(),
        );
        let limit_kills = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "child_limit_kills",
            "Children ended by a resource limit, by reason (oom-killed, memory-limit, tasks-limit)",
            limit_kills.clone(),
        );
        let demand = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "child_demand_events",
            "On-demand starts and idle stops (issue 18), by reason (on-demand-start, idle-stop)",
            demand.clone(),
        );
        let probes = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "probes",
            "Liveness probes, by result (sent, answered, timeout)",
            probes.clone(),
        );
        let state = Family::<StateLabels, Gauge>::default();
        registry.register(
            "child_state",
            "1 for the child's current state",
            state.clone(),
        );
        let bytes = Family::<DirectionLabels, Counter>::default();
        registry.register(
            "relayed_bytes",
            "Bytes written, by direction (to_child, to_client)",
            bytes.clone(),
        );
        let refusals = Family::<ClassLabels, Counter>::default();
        registry.register(
            "upstream_refusals",
            "Requests a url server answered with a bare HTTP status, by class (auth_failed, rate_limited, upstream_error, unreachable)",
            refusals.clone(),
        );
        let client_refusals = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "client_refusals",
            "Client connections refused or closed to keep seats for others (issue 47 §4), by reason (max_clients, uid_share, silent)",
            client_refusals.clone(),
        );
        let discarded = Family::<DiscardLabels, Counter>::default();
        registry.register(
            "upstream_discarded",
            "Messages of a server never relayed (issue 47 §7), by reason (too_large, too_deep) and kind (response, request, notification)",
            discarded.clone(),
        );
        let log_dropped = Counter::default();
        registry.register(
            "request_log_dropped",
            "Request log lines dropped because the log could not keep up (issue 15 §2)",
            log_dropped.clone(),
        );
        let spans_dropped = Counter::default();
        registry.register(
            "trace_spans_dropped",
            "Spans lost because the export queue was full or their export failed (issue 17)",
            spans_dropped.clone(),
        );
        Metrics {
            registry,
            log_dropped,
            spans_dropped,
            families: Families {
                requests,
                endpoint_requests,
                errors,
                duration,
                in_flight,
                clients,
                restarts,
                limit_kills,
                demand,
                probes,
                state,
                bytes,
                refusals,
                client_refusals,
                discarded,
            },
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        // The request log counts its drops itself (an atomic, off the relay path).
        let dropped = crate::logging::requests::dropped();
        let shown = self.log_dropped.get();
        if dropped > shown {
            self.log_dropped.inc_by(dropped - shown);
        }
        let (lost, shown) = (trace::dropped(), self.spans_dropped.get());
        if lost > shown {
            self.spans_dropped.inc_by(lost - shown);
        }
        let mut out = String::new();
        // Writing to a `String` cannot fail; if the encoder ever did, a scrape gets what was
        // written (Prometheus rejects it without `# EOF`) rather than the daemon a panic.
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }

    /// A handle on the series of server `server`, resolved once and updated without the
    /// families' lock (see [`ServerMetrics`]).
    pub fn server(&self, server: &str) -> ServerMetrics {
        ServerMetrics::with(self.families.clone(), server)
    }

    /// A finished request. `seconds` is its duration; `code` the JSON-RPC error code it was
    /// answered with, if any. Takes the families' lock; [`ServerMetrics::request`] does not.
    pub fn request(
        &self,
        server: &str,
        method: &str,
        outcome: Outcome,
        code: Option<i64>,
        seconds: f64,
    ) {
        let f = &self.families;
        let method = method_label(method).to_string();
        f.requests
            .get_or_create(&RequestLabels {
                server: server.into(),
                method: method.clone(),
                outcome: outcome.as_str().into(),
            })
            .inc();
        f.duration
            .get_or_create(&MethodLabels {
                server: server.into(),
                method,
            })
            .observe(seconds);
        if let Some(code) = code {
            f.errors
                .get_or_create(&CodeLabels {
                    server: server.into(),
                    code: code.to_string(),
                })
                .inc();
        }
    }

    /// A finished request of one of endpoint `endpoint`'s clients, for its source `server`
    /// (issue 31 §7), beside what [`Metrics::request`] counts. Takes the families' lock.
    pub fn endpoint_request(&self, endpoint: &str, server: &str, method: &str, outcome: Outcome) {
        self.families
            .endpoint_requests
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
                server: server.into(),
                method: method_label(method).into(),
                outcome: outcome.as_str().into(),
            })
            .inc();
    }

    /// Requests in flight to the child right now.
    pub fn set_in_flight(&self, server: &str, n: usize) {
        self.families
            .in_flight
            .get_or_create(&ServerLabels {
                server: server.into(),
            })
            .set(gauge_value(n));
    }

    /// Attached clients right now.
    pub fn set_clients(&self, server: &str, n: usize) {
        self.families
            .clients
            .get_or_create(&ServerLabels {
                server: server.into(),
            })
            .set(gauge_value(n));
    }

    /// A client connection of `server` refused or closed to keep its seats for others
    /// (issue 47 §4): `reason` is one of [`CLIENT_REFUSAL_REASONS`]. Rare: resolved through
    /// the family each time.
    pub fn client_refused(&self, server: &str, reason: &str) {
        self.families
            .client_refusals
            .get_or_create(&ReasonLabels {
                server: server.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A restart scheduled after an exit with this reason (`exited`, `signal`, `timeout`, ...).
    pub fn restart(&self, server: &str, reason: &str) {
        self.families
            .restarts
            .get_or_create(&ReasonLabels {
                server: server.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A child ended by a resource limit: `reason` is `oom-killed`, `memory-limit` or
    /// `tasks-limit` (issue 18 §3, `child::limits::LimitKill`).
    pub fn limit_kill(&self, server: &str, reason: &str) {
        self.families
            .limit_kills
            .get_or_create(&ReasonLabels {
                server: server.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A probe event: `sent`, `answered` or `timeout`.
    pub fn probe(&self, server: &str, result: &str) {
        self.families
            .probes
            .get_or_create(&ProbeLabels {
                server: server.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The child's state (one of [`STATES`]).
    pub fn set_state(&self, server: &str, state: &str) {
        for s in STATES {
            self.families
                .state
                .get_or_create(&StateLabels {
                    server: server.into(),
                    state: (*s).into(),
                })
                .set(i64::from(*s == state));
        }
    }

    /// Bytes relayed in one direction (`to_child` or `to_client`).
    pub fn bytes(&self, server: &str, direction: &str, n: usize) {
        self.families
            .bytes
            .get_or_create(&DirectionLabels {
                server: server.into(),
                direction: direction.into(),
            })
            .inc_by(n as u64);
    }
}

/// A count as a gauge value (saturating: a count never exceeds `i64::MAX` in practice).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One server's series, resolved once: what the server actor keeps so that a reply costs a
/// few atomic operations instead of the families' lock and a label `String` per label.
///
/// Every series is resolved on its first use (a `OnceLock` per label combination, so the
/// output of [`Metrics::render`] is the same as with the [`Metrics`] methods: a series
/// appears once it was first updated) and then updated with no lock and no allocation. The
/// bounded label values have a slot each: methods ([`method_label`]) × outcomes, [`STATES`],
/// [`PROBE_RESULTS`], [`DIRECTIONS`], [`RESTART_REASONS`] and the common error codes; any other
/// value goes through the family, exactly as [`Metrics`] does. The duration histogram is
/// atomics too ([`histogram::DurationHistogram`]).
///
/// Cheap to clone (an `Arc`); clones share the slots. The series stay registered after the
/// handle is dropped, as with [`Metrics`].
#[derive(Clone)]
pub struct ServerMetrics(std::sync::Arc<Slots>);

struct Slots {
    server: String,
    families: Families,
    requests: [[OnceLock<Counter>; Outcome::ALL.len()]; METHOD_SLOTS],
    duration: [OnceLock<DurationHistogram>; METHOD_SLOTS],
    errors: [OnceLock<Counter>; CACHED_CODES.len()],
    in_flight: OnceLock<Gauge>,
    clients: OnceLock<Gauge>,
    restarts: [OnceLock<Counter>; RESTART_REASONS.len()],
    probes: [OnceLock<Counter>; PROBE_RESULTS.len()],
    bytes: [OnceLock<Counter>; DIRECTIONS.len()],
    state: OnceLock<[Gauge; STATES.len()]>,
}

impl std::fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerMetrics")
            .field("server", &self.0.server)
            .finish_non_exhaustive()
    }
}

impl ServerMetrics {
    /// The handle of server `server` in the process-wide metrics ([`metrics`]).
    pub fn new(server: &str) -> ServerMetrics {
        metrics().server(server)
    }

    fn with(families: Families, server: &str) -> ServerMetrics {
        ServerMetrics(std::sync::Arc::new(Slots {
            server: server.to_string(),
            families,
            requests: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            duration: std::array::from_fn(|_| OnceLock::new()),
            errors: std::array::from_fn(|_| OnceLock::new()),
            in_flight: OnceLock::new(),
            clients: OnceLock::new(),
            restarts: std::array::from_fn(|_| OnceLock::new()),
            probes: std::array::from_fn(|_| OnceLock::new()),
            bytes: std::array::from_fn(|_| OnceLock::new()),
            state: OnceLock::new(),
        }))
    }

    /// The server's name (the `server` label).
    pub fn server(&self) -> &str {
        &self.0.server
    }

    /// A finished request of a client of endpoint `endpoint`: as
    /// [`Metrics::endpoint_request`] for this server (through the family's lock: endpoint
    /// names are not known when the slots are made).
    pub fn endpoint_request(&self, endpoint: &str, method: &str, outcome: Outcome) {
        let s = &*self.0;
        s.families
            .endpoint_requests
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
                server: s.server.clone(),
                method: method_label(method).into(),
                outcome: outcome.as_str().into(),
            })
            .inc();
    }

    /// A finished request: as [`Metrics::request`].
    pub fn request(&self, method: &str, outcome: Outcome, code: Option<i64>, seconds: f64) {
        let s = &*self.0;
        let m = method_index(method);
        let counter = s
            .requests
            .get(m)
            .and_then(|row| row.get(outcome.index()))
            .map(|slot| {
                slot.get_or_init(|| {
                    s.families.requests.get_or_create_owned(&RequestLabels {
                        server: s.server.clone(),
                        method: method_of(m).into(),
                        outcome: outcome.as_str().into(),
                    })
                })
            });
        let histogram = s.duration.get(m).map(|slot| {
            slot.get_or_init(|| {
                s.families.duration.get_or_create_owned(&MethodLabels {
                    server: s.server.clone(),
                    method: method_of(m).into(),
                })
            })
        });
        match (counter, histogram) {
            (Some(c), Some(h)) => {
                c.inc();
                h.observe(seconds);
            }
            // Every method has a slot (`other` included); never taken.
            _ => metrics_fallback(s, method, outcome, seconds),
        }
        if let Some(code) = code {
            match CACHED_CODES.iter().position(|c| *c == code) {
                Some(i) => {
                    if let Some(slot) = s.errors.get(i) {
                        slot.get_or_init(|| self.error_counter(code)).inc();
                    }
                }
                None => {
                    self.error_counter(code).inc();
                }
            }
        }
    }

    fn error_counter(&self, code: i64) -> Counter {
        self.0.families.errors.get_or_create_owned(&CodeLabels {
            server: self.0.server.clone(),
            code: code.to_string(),
        })
    }

    /// Requests in flight to the child right now.
    pub fn set_in_flight(&self, n: usize) {
        let s = &*self.0;
        s.in_flight
            .get_or_init(|| {
                s.families.in_flight.get_or_create_owned(&ServerLabels {
                    server: s.server.clone(),
                })
            })
            .set(gauge_value(n));
    }

    /// Attached clients right now.
    pub fn set_clients(&self, n: usize) {
        let s = &*self.0;
        s.clients
            .get_or_init(|| {
                s.families.clients.get_or_create_owned(&ServerLabels {
                    server: s.server.clone(),
                })
            })
            .set(gauge_value(n));
    }

    /// A url server answered a request with a bare HTTP status (issue 29): `class` is the
    /// outage class (`auth_failed`, `rate_limited`, `upstream_error`, `unreachable`). Rare:
    /// resolved through the family each time.
    pub fn refusal(&self, class: &str) {
        let s = &*self.0;
        s.families
            .refusals
            .get_or_create(&ClassLabels {
                server: s.server.clone(),
                class: class.into(),
            })
            .inc();
    }

    /// A message of the server never relayed (issue 47 §7): `reason` `too_large` or
    /// `too_deep`, `kind` `response`, `request` or `notification`. Rare: resolved through the
    /// family each time.
    pub fn discarded(&self, reason: &str, kind: &str) {
        let s = &*self.0;
        s.families
            .discarded
            .get_or_create(&DiscardLabels {
                server: s.server.clone(),
                reason: reason.into(),
                kind: kind.into(),
            })
            .inc();
    }

    /// An on-demand start or an idle stop (`reason`: `on-demand-start`, `idle-stop`; issue
    /// 18). Rare: resolved through the family each time.
    pub fn demand(&self, reason: &str) {
        let s = &*self.0;
        s.families
            .demand
            .get_or_create(&ReasonLabels {
                server: s.server.clone(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A restart scheduled after an exit with this reason (one of [`RESTART_REASONS`], or any
    /// other, counted through the family).
    pub fn restart(&self, reason: &str) {
        let s = &*self.0;
        let resolve = || {
            s.families.restarts.get_or_create_owned(&ReasonLabels {
                server: s.server.clone(),
                reason: reason.into(),
            })
        };
        match slot_of(RESTART_REASONS, &s.restarts, reason) {
            Some(slot) => slot.get_or_init(resolve).inc(),
            None => resolve().inc(),
        };
    }

    /// A probe event (one of [`PROBE_RESULTS`]).
    pub fn probe(&self, result: &str) {
        let s = &*self.0;
        let resolve = || {
            s.families.probes.get_or_create_owned(&ProbeLabels {
                server: s.server.clone(),
                result: result.into(),
            })
        };
        match slot_of(PROBE_RESULTS, &s.probes, result) {
            Some(slot) => slot.get_or_init(resolve).inc(),
            None => resolve().inc(),
        };
    }

    /// Bytes relayed in one direction (one of [`DIRECTIONS`]).
    pub fn bytes(&self, direction: &str, n: usize) {
        let s = &*self.0;
        let resolve = || {
            s.families.bytes.get_or_create_owned(&DirectionLabels {
                server: s.server.clone(),
                direction: direction.into(),
            })
        };
        match slot_of(DIRECTIONS, &s.bytes, direction) {
            Some(slot) => slot.get_or_init(resolve).inc_by(n as u64),
            None => resolve().inc_by(n as u64),
        };
    }

    /// The child's state (one of [`STATES`]; anything else sets every state to 0).
    pub fn set_state(&self, state: &str) {
        let s = &*self.0;
        let gauges = s.state.get_or_init(|| {
            std::array::from_fn(|i| {
                s.families.state.get_or_create_owned(&StateLabels {
                    server: s.server.clone(),
                    state: STATES.get(i).copied().unwrap_or_default().into(),
                })
            })
        });
        for (g, name) in gauges.iter().zip(STATES) {
            g.set(i64::from(*name == state));
        }
        readiness().set_state(&s.server, state);
    }
}

/// The slot of `value` among `names` (same order as `slots`).
fn slot_of<'a, T>(
    names: &[&str],
    slots: &'a [OnceLock<T>],
    value: &str,
) -> Option<&'a OnceLock<T>> {
    names
        .iter()
        .position(|n| *n == value)
        .and_then(|i| slots.get(i))
}

/// A request counted through the families (the path [`ServerMetrics`] avoids).
fn metrics_fallback(s: &Slots, method: &str, outcome: Outcome, seconds: f64) {
    let method = method_label(method);
    s.families
        .requests
        .get_or_create(&RequestLabels {
            server: s.server.clone(),
            method: method.into(),
            outcome: outcome.as_str().into(),
        })
        .inc();
    s.families
        .duration
        .get_or_create(&MethodLabels {
            server: s.server.clone(),
            method: method.into(),
        })
        .observe(seconds);
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

#[cfg(test)]
mod tests;
