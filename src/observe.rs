//! Observability at the MCP boundary (issue 8): the outcome of every request, the request log,
//! and the Prometheus metrics.
//!
//! Owns: the outcome vocabulary (a stable contract, see README "Monitoring") and the metric
//! families. Never logs argument values, results, tokens or environment values: the request log
//! carries the method, the tool name and the *keys* of the arguments only.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

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
        }
    }
}

/// MCP methods used as label values; anything else is `other` (label values must not be
/// chosen by clients, or the series count is unbounded).
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
];

/// `method` if it is a known MCP method, else `other`.
pub fn method_label(method: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
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

/// The supervisor's metric families (one registry per process).
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    errors: Family<CodeLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<ServerLabels, Gauge>,
    clients: Family<ServerLabels, Gauge>,
    restarts: Family<ReasonLabels, Counter>,
    probes: Family<ProbeLabels, Counter>,
    state: Family<StateLabels, Gauge>,
    bytes: Family<DirectionLabels, Counter>,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Child states exported as `mcp_child_state{state=...}` (1 for the current one).
pub const STATES: &[&str] = &[
    "starting", "ready", "backoff", "stopping", "stopped", "failed",
];

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("mcp_supervisor");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests finished, by server, method and outcome",
            requests.clone(),
        );
        let errors = Family::<CodeLabels, Counter>::default();
        registry.register(
            "jsonrpc_errors",
            "JSON-RPC errors returned to clients, by code",
            errors.clone(),
        );
        let duration = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
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
        Metrics {
            registry,
            requests,
            errors,
            duration,
            in_flight,
            clients,
            restarts,
            probes,
            state,
            bytes,
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// A finished request.
    pub fn request(
        &self,
        server: &str,
        method: &str,
        outcome: Outcome,
        code: Option<i64>,
        seconds: f64,
    ) {
        let method = method_label(method).to_string();
        self.requests
            .get_or_create(&RequestLabels {
                server: server.into(),
                method: method.clone(),
                outcome: outcome.as_str().into(),
            })
            .inc();
        self.duration
            .get_or_create(&MethodLabels {
                server: server.into(),
                method,
            })
            .observe(seconds);
        if let Some(code) = code {
            self.errors
                .get_or_create(&CodeLabels {
                    server: server.into(),
                    code: code.to_string(),
                })
                .inc();
        }
    }

    /// Requests in flight to the child right now.
    pub fn set_in_flight(&self, server: &str, n: usize) {
        self.in_flight
            .get_or_create(&ServerLabels {
                server: server.into(),
            })
            .set(n as i64);
    }

    /// Attached clients right now.
    pub fn set_clients(&self, server: &str, n: usize) {
        self.clients
            .get_or_create(&ServerLabels {
                server: server.into(),
            })
            .set(n as i64);
    }

    /// A restart scheduled after an exit with this reason (`exited`, `signal`, `timeout`, ...).
    pub fn restart(&self, server: &str, reason: &str) {
        self.restarts
            .get_or_create(&ReasonLabels {
                server: server.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A probe event: `sent`, `answered` or `timeout`.
    pub fn probe(&self, server: &str, result: &str) {
        self.probes
            .get_or_create(&ProbeLabels {
                server: server.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The child's state (one of [`STATES`]).
    pub fn set_state(&self, server: &str, state: &str) {
        for s in STATES {
            self.state
                .get_or_create(&StateLabels {
                    server: server.into(),
                    state: (*s).into(),
                })
                .set(i64::from(*s == state));
        }
    }

    /// Bytes relayed in one direction (`to_child` or `from_child`).
    pub fn bytes(&self, server: &str, direction: &str, n: usize) {
        self.bytes
            .get_or_create(&DirectionLabels {
                server: server.into(),
                direction: direction.into(),
            })
            .inc_by(n as u64);
    }
}

/// Serves `GET /metrics` (OpenMetrics text) on `listener` until `stop` is cancelled. A minimal
/// HTTP/1.x responder: one request per connection, anything else gets 404.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    stop: tokio_util::sync::CancellationToken,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let (mut conn, _) = tokio::select! {
            r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
            _ = stop.cancelled() => return,
        };
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            let read = async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                true
            };
            if !matches!(
                tokio::time::timeout(std::time::Duration::from_secs(10), read).await,
                Ok(true)
            ) {
                return;
            }
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            let wanted = line.starts_with(b"GET /metrics ") || line.starts_with(b"GET /metrics?");
            let (status, ctype, body) = if wanted {
                (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics().render(),
                )
            } else {
                (
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "only GET /metrics is served here\n".to_string(),
                )
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_are_bounded() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x/evil-{label}"), "other");
    }

    #[test]
    fn renders_openmetrics_text() {
        let m = Metrics::new();
        m.request("a", "tools/call", Outcome::ToolError, None, 0.01);
        m.request(
            "a",
            "tools/call",
            Outcome::ProtocolError,
            Some(-32601),
            0.02,
        );
        m.set_state("a", "ready");
        let text = m.render();
        assert!(text.contains("mcp_supervisor_requests_total{server=\"a\",method=\"tools/call\",outcome=\"tool_error\"} 1"), "{text}");
        assert!(
            text.contains("mcp_supervisor_jsonrpc_errors_total{server=\"a\",code=\"-32601\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("mcp_supervisor_child_state{server=\"a\",state=\"ready\"} 1"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
