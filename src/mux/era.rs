//! Protocol-era specifics, in one place (issue 3: "keep era logic in one place").
//!
//! The handshake era (2024-11-05 .. 2025-11-25): the supervisor sends the child's single
//! `initialize` and answers every client's `initialize` from the cached result
//! (`reference/protocol.md` §2 and "Implications" 5, 9).
//!
//! The 2026-07-28 era ("modern"): no `initialize`, no `ping`; every request carries its version,
//! client capabilities and client info in `params._meta` (the *envelope*); `server/discover`
//! describes the server (protocol.md §4). Each child is driven in one era (its *verdict*), and
//! each client speaks one era (decided by its first request); the functions here translate
//! between them (issue 6).

use crate::jsonrpc::message::RawObject;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// A protocol era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2024-11-05 .. 2025-11-25: `initialize` handshake, session-wide state.
    Handshake,
    /// 2026-07-28: per-request `_meta` envelope, `server/discover`.
    Modern,
}

/// The modern revision.
pub const MODERN_VERSION: &str = "2026-07-28";
/// `_meta` key: the request's protocol version (required in the modern era).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities (required in the modern era).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's identity.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: the log level for this request's `notifications/message`.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key: the server's identity in results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key: the listen stream a notification belongs to.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The envelope keys (what is removed before a handshake-era child sees a modern request).
pub const ENVELOPE_KEYS: &[&str] = &[
    META_VERSION,
    META_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
];
/// JSON-RPC error: unsupported protocol version (2026-07-28).
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// `protocol = ...` in the configuration: which era to drive the child in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildProtocol {
    /// Probe with `server/discover` first and remember the verdict.
    Auto,
    /// The handshake era, asking for this version.
    Handshake(String),
    /// The 2026-07-28 era.
    Modern,
}

impl ChildProtocol {
    /// Parses the config value; `None` for an unknown version.
    pub fn parse(s: &str) -> Option<ChildProtocol> {
        match s {
            "auto" => Some(ChildProtocol::Auto),
            MODERN_VERSION => Some(ChildProtocol::Modern),
            v if HANDSHAKE_VERSIONS.contains(&v) => Some(ChildProtocol::Handshake(v.to_string())),
            _ => None,
        }
    }
}

/// The version a request's envelope names, if it carries one: the mark of a modern request.
pub fn envelope_version(params: Option<&RawValue>) -> Option<String> {
    let params = params?;
    if !params.get().contains(META_VERSION) {
        return None;
    }
    let meta = RawObject::parse(RawObject::parse(params)?.get("_meta")?)?;
    serde_json::from_str(meta.get(META_VERSION)?.get()).ok()
}

/// One member of a request's envelope, parsed.
pub fn envelope_field(params: Option<&RawValue>, key: &str) -> Option<Value> {
    let meta = RawObject::parse(RawObject::parse(params?)?.get("_meta")?)?;
    serde_json::from_str(meta.get(key)?.get()).ok()
}

/// A modern request made fit for a handshake-era child: the envelope keys are removed from
/// `_meta` (other `_meta` members, such as `progressToken`, stay), and an empty `_meta` is
/// dropped. Params without an envelope are returned as they are.
pub fn strip_envelope(params: &RawValue) -> Cow<'_, RawValue> {
    if !ENVELOPE_KEYS.iter().any(|k| params.get().contains(k)) {
        return Cow::Borrowed(params);
    }
    let Some(mut obj) = RawObject::parse(params) else {
        return Cow::Borrowed(params);
    };
    let Some(mut meta) = obj.get("_meta").and_then(RawObject::parse) else {
        return Cow::Borrowed(params);
    };
    meta.0.retain(|(k, _)| !ENVELOPE_KEYS.contains(&k.as_str()));
    if meta.0.is_empty() {
        obj.0.retain(|(k, _)| k != "_meta");
    } else {
        obj.set("_meta", meta.to_raw());
    }
    Cow::Owned(obj.to_raw())
}

/// Sets the envelope members in `params._meta` (creating `params` and `_meta` as needed),
/// replacing any the request already had; other members stay.
pub fn add_envelope(params: Option<&RawValue>, envelope: &Map<String, Value>) -> Box<RawValue> {
    let mut obj = params.and_then(RawObject::parse).unwrap_or_default();
    let mut meta = obj
        .get("_meta")
        .and_then(RawObject::parse)
        .unwrap_or_default();
    for (k, v) in envelope {
        let raw = RawValue::from_string(v.to_string()).expect("a Value is valid JSON");
        meta.set(k, raw);
    }
    obj.set("_meta", meta.to_raw());
    obj.to_raw()
}

/// The envelope the supervisor uses for its own requests (probes, list refreshes).
pub fn supervisor_envelope() -> Map<String, Value> {
    envelope(
        &json!({}),
        &json!({"name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION")}),
        None,
    )
}

/// An envelope for a client: version 2026-07-28, its capabilities and info, and its log level.
pub fn envelope(
    capabilities: &Value,
    client_info: &Value,
    log_level: Option<&str>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(META_VERSION.into(), json!(MODERN_VERSION));
    m.insert(META_CAPABILITIES.into(), capabilities.clone());
    if !client_info.is_null() {
        m.insert(META_CLIENT_INFO.into(), client_info.clone());
    }
    if let Some(l) = log_level {
        m.insert(META_LOG_LEVEL.into(), json!(l));
    }
    m
}

/// Methods whose 2026 results must carry caching hints (`ttlMs`, `cacheScope`; protocol.md
/// §4.6).
pub const CACHEABLE: &[&str] = &[
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// A handshake-era result of `method` made fit for a modern client: `"resultType":"complete"`
/// when absent, and for cacheable methods `"ttlMs":0` and `"cacheScope":"private"` when absent
/// (a handshake child gives no caching promise; issue 6 §3, protocol.md Implications 18). Only
/// the top-level members are looked at; the payload is never decoded.
pub fn modernize_result<'a>(result: &'a RawValue, method: &str) -> Cow<'a, RawValue> {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "resultType", default)]
        result_type: Option<serde::de::IgnoredAny>,
        #[serde(rename = "ttlMs", default)]
        ttl_ms: Option<serde::de::IgnoredAny>,
        #[serde(rename = "cacheScope", default)]
        cache_scope: Option<serde::de::IgnoredAny>,
    }
    let Ok(p) = serde_json::from_str::<Probe>(result.get()) else {
        return Cow::Borrowed(result);
    };
    let mut add = Vec::new();
    if p.result_type.is_none() {
        add.push("\"resultType\":\"complete\"");
    }
    if CACHEABLE.contains(&method) {
        if p.ttl_ms.is_none() {
            add.push("\"ttlMs\":0");
        }
        if p.cache_scope.is_none() {
            add.push("\"cacheScope\":\"private\"");
        }
    }
    if add.is_empty() {
        return Cow::Borrowed(result);
    }
    let text = result.get().trim_start();
    let rest = text[1..].trim_start();
    let head = add.join(",");
    let joined = if rest.starts_with('}') {
        format!("{{{head}}}")
    } else {
        format!("{{{head},{rest}")
    };
    Cow::Owned(RawValue::from_string(joined).expect("splicing members keeps the object valid"))
}

/// The revision the supervisor asks a handshake-era child for.
pub const HANDSHAKE_VERSION: &str = "2025-11-25";

/// Every handshake-era revision, oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// `initialize` params the supervisor sends on the child's behalf.
pub fn initialize_params(version: &str, client_capabilities: &Value) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": client_capabilities,
        "clientInfo": {"name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What the supervisor keeps from the child's `initialize` result (handshake era) or its
/// `server/discover` result (modern era): enough to answer either kind of client locally.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// The era the child is driven in.
    pub era: Era,
    /// The whole result, answered verbatim to handshake clients of a handshake child.
    pub result: Value,
    /// The version the child negotiated (what handshake clients are told: K12), or 2026-07-28.
    pub protocol_version: String,
    /// The child's capabilities.
    pub capabilities: Value,
    /// `serverInfo`.
    pub server_info: Value,
    /// `instructions`, when given.
    pub instructions: Option<Value>,
}

impl Handshake {
    /// Parses an `initialize` result; `None` when it is not shaped like one.
    pub fn from_result(result: Value) -> Option<Self> {
        let protocol_version = result.get("protocolVersion")?.as_str()?.to_string();
        let capabilities = result.get("capabilities").cloned().unwrap_or(json!({}));
        Some(Handshake {
            era: Era::Handshake,
            server_info: result.get("serverInfo").cloned().unwrap_or(json!({})),
            instructions: result.get("instructions").cloned(),
            result,
            protocol_version,
            capabilities,
        })
    }

    /// Parses a `server/discover` result of a modern child.
    pub fn from_discover(result: Value) -> Self {
        Handshake {
            era: Era::Modern,
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            server_info: result
                .get("_meta")
                .and_then(|m| m.get(META_SERVER_INFO))
                .cloned()
                .unwrap_or(json!({})),
            instructions: result.get("instructions").cloned(),
            protocol_version: MODERN_VERSION.to_string(),
            result,
        }
    }

    /// The `initialize` result for a handshake-era client that asked for `requested`. A
    /// handshake child's cached result is answered as it is (its negotiated version, never the
    /// client's, K12); a modern child is described in the client's own version when the
    /// supervisor supports it, else the latest handshake version (issue 6 §4).
    pub fn initialize_result(&self, requested: &str) -> Value {
        if self.era == Era::Handshake {
            return self.result.clone();
        }
        let version = if HANDSHAKE_VERSIONS.contains(&requested) {
            requested
        } else {
            HANDSHAKE_VERSION
        };
        let mut r = json!({
            "protocolVersion": version,
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
        });
        if let Some(i) = &self.instructions {
            r["instructions"] = i.clone();
        }
        r
    }

    /// The `server/discover` result for a modern client of a handshake child (issue 6 §3):
    /// the versions the supervisor can serve, the child's capabilities, `serverInfo` in
    /// `_meta`, never cached across clients.
    pub fn discover_result(&self) -> Value {
        let mut r = json!({
            "resultType": "complete",
            "supportedVersions": [MODERN_VERSION],
            "capabilities": self.capabilities,
            "_meta": {META_SERVER_INFO: self.server_info},
            "ttlMs": 0,
            "cacheScope": "private",
        });
        if let Some(i) = &self.instructions {
            r["instructions"] = i.clone();
        }
        r
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

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_string()).unwrap()
    }

    #[test]
    fn strip_envelope_keeps_other_meta_and_arguments() {
        let p = raw(
            r#"{"name":"echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/logLevel":"info","progressToken":7}}"#,
        );
        assert_eq!(
            strip_envelope(&p).get(),
            r#"{"name":"echo","arguments":{"text":"x"},"_meta":{"progressToken":7}}"#
        );
        let only = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        );
        assert_eq!(strip_envelope(&only).get(), "{}");
        let plain = raw(r#"{"name":"x"}"#);
        assert!(matches!(strip_envelope(&plain), Cow::Borrowed(_)));
    }

    #[test]
    fn add_envelope_builds_meta_from_a_handshake_client() {
        let env = envelope(
            &json!({"sampling":{}}),
            &json!({"name":"c","version":"1"}),
            Some("debug"),
        );
        let p = raw(r#"{"name":"echo","_meta":{"progressToken":3}}"#);
        assert_eq!(
            add_envelope(Some(&p), &env).get(),
            r#"{"name":"echo","_meta":{"progressToken":3,"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
        );
        assert_eq!(
            add_envelope(None, &supervisor_envelope()).get(),
            format!(
                r#"{{"_meta":{{"io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"mcp-supervisor","version":"{}"}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}}"#,
                env!("CARGO_PKG_VERSION")
            )
        );
    }

    #[test]
    fn envelope_version_marks_modern_requests() {
        let m = raw(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
        assert_eq!(envelope_version(Some(&m)).as_deref(), Some("2026-07-28"));
        assert_eq!(envelope_version(Some(&raw(r#"{"name":"x"}"#))), None);
        assert_eq!(envelope_version(None), None);
    }

    #[test]
    fn result_type_and_cache_hints_are_added_only_when_absent() {
        assert_eq!(
            modernize_result(&raw(r#"{"tools":[]}"#), "tools/list").get(),
            r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":[]}"#
        );
        assert_eq!(
            modernize_result(&raw(r#"{"content":[]}"#), "tools/call").get(),
            r#"{"resultType":"complete","content":[]}"#
        );
        assert_eq!(
            modernize_result(&raw("{}"), "ping").get(),
            r#"{"resultType":"complete"}"#
        );
        assert_eq!(
            modernize_result(&raw(" { } "), "x").get(),
            r#"{"resultType":"complete"}"#
        );
        let has = raw(r#"{"resultType":"input_required","x":{"resultType":1}}"#);
        assert!(matches!(
            modernize_result(&has, "tools/call"),
            Cow::Borrowed(_)
        ));
        let nested = raw(r#"{"content":[{"resultType":"no"}]}"#);
        assert_eq!(
            modernize_result(&nested, "tools/call").get(),
            r#"{"resultType":"complete","content":[{"resultType":"no"}]}"#
        );
        let hinted = raw(r#"{"resultType":"complete","ttlMs":5,"cacheScope":"public","tools":[]}"#);
        assert!(matches!(
            modernize_result(&hinted, "tools/list"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn initialize_from_a_modern_child_uses_the_clients_version() {
        let d = Handshake::from_discover(json!({
            "resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}}, "_meta": {META_SERVER_INFO: {"name": "s", "version": "2"}},
            "instructions": "hi", "ttlMs": 1000, "cacheScope": "public"
        }));
        assert_eq!(
            d.initialize_result("2025-06-18"),
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "2"}, "instructions": "hi"})
        );
        assert_eq!(
            d.initialize_result("2030-01-01")["protocolVersion"],
            "2025-11-25"
        );
    }

    #[test]
    fn discover_from_a_handshake_child_is_private_and_uncached() {
        let h = Handshake::from_result(json!({
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "old", "version": "1"}
        }))
        .unwrap();
        assert_eq!(
            h.discover_result(),
            json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                   "capabilities": {"tools": {"listChanged": true}},
                   "_meta": {META_SERVER_INFO: {"name": "old", "version": "1"}},
                   "ttlMs": 0, "cacheScope": "private"})
        );
        // A handshake client of a handshake child gets the child's own result (K12).
        assert_eq!(
            h.initialize_result("2026-07-28")["protocolVersion"],
            "2025-06-18"
        );
    }

    #[test]
    fn child_protocol_values() {
        assert_eq!(ChildProtocol::parse("auto"), Some(ChildProtocol::Auto));
        assert_eq!(
            ChildProtocol::parse("2026-07-28"),
            Some(ChildProtocol::Modern)
        );
        assert_eq!(
            ChildProtocol::parse("2025-03-26"),
            Some(ChildProtocol::Handshake("2025-03-26".into()))
        );
        assert_eq!(ChildProtocol::parse("2027-01-01"), None);
    }
}
