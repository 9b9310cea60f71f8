//! Protocol-era specifics, in one place (issue 3: "keep era logic in one place").
//!
//! The handshake era (2024-11-05 .. 2025-11-25): the supervisor sends the child's single
//! `initialize` and answers every client's `initialize` from the cached result
//! (`reference/protocol.md` §2 and "Implications" 5, 9). The 2026-07-28 era comes later and
//! belongs here too.

use serde_json::{json, Value};

/// The revision the supervisor asks a handshake-era child for.
pub const HANDSHAKE_VERSION: &str = "2025-11-25";

/// Every handshake-era revision, oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// `initialize` params the supervisor sends on the child's behalf.
pub fn initialize_params(client_capabilities: &Value) -> Value {
    json!({
        "protocolVersion": HANDSHAKE_VERSION,
        "capabilities": client_capabilities,
        "clientInfo": {"name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What the supervisor keeps from the child's `initialize` result.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// The whole result, answered verbatim to clients.
    pub result: Value,
    /// The version the child negotiated (what clients are told: K12).
    pub protocol_version: String,
    /// The child's capabilities.
    pub capabilities: Value,
}

impl Handshake {
    /// Parses an `initialize` result; `None` when it is not shaped like one.
    pub fn from_result(result: Value) -> Option<Self> {
        let protocol_version = result.get("protocolVersion")?.as_str()?.to_string();
        let capabilities = result.get("capabilities").cloned().unwrap_or(json!({}));
        Some(Handshake {
            result,
            protocol_version,
            capabilities,
        })
    }

    /// Whether the child advertised a top-level capability (`tools`, `logging`, ...).
    pub fn has(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|v| !v.is_null())
    }

    /// The cheapest request the child advertised, used to confirm liveness when `ping` goes
    /// unanswered (issue 4 §3; never a method the child did not advertise, K15).
    pub fn confirm_method(&self) -> Option<&'static str> {
        [
            ("tools", "tools/list"),
            ("prompts", "prompts/list"),
            ("resources", "resources/list"),
        ]
        .into_iter()
        .find(|(cap, _)| self.has(cap))
        .map(|(_, m)| m)
    }
}

/// The list methods whose last result is kept for stable discovery (issue 5 §3), with the
/// notification that announces a change and the capability that advertises them.
pub const LISTS: &[(&str, &str, &str)] = &[
    ("tools/list", "notifications/tools/list_changed", "tools"),
    (
        "prompts/list",
        "notifications/prompts/list_changed",
        "prompts",
    ),
    (
        "resources/list",
        "notifications/resources/list_changed",
        "resources",
    ),
    (
        "resources/templates/list",
        "notifications/resources/list_changed",
        "resources",
    ),
];

/// The capability a client must have declared to be sent a child's request of this method
/// (issue 3 §5); `None` for methods no capability governs.
pub fn capability_for_request(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// MCP logging levels (RFC 5424 severities), least severe first.
pub const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Rank of a level name (higher is more severe).
pub fn log_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}
