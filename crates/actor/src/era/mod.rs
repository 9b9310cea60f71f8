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

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use vocab::jsonrpc::message::{self, RawObject};

mod results;
mod shape;
pub use results::{for_client, legacy_result, legacy_value};
#[cfg(test)]
use shape::RESULT_SHAPES;
pub use shape::{check_error_shape, check_result_shape, JsonKind, MalformedReply};
use shape::{is_json_ws, scan_top, Top};

use vocab::protocol::last;
pub use vocab::protocol::{
    answered_version, envelope_field, envelope_version, meta_strings, param_string, ChildProtocol,
    Era, ENVELOPE_KEYS, HANDSHAKE_VERSION, HANDSHAKE_VERSIONS, META_CAPABILITIES, META_CLIENT_INFO,
    META_LOG_LEVEL, META_SERVER_INFO, META_SUBSCRIPTION_ID, META_VERSION, MODERN_VERSION,
    UNSUPPORTED_VERSION,
};

/// Sets `key` to `value`: in place of its first occurrence (or appended), and every other
/// occurrence removed, so no reader, first-wins or last-wins, sees an older value.
fn set_unique(obj: &mut RawObject, key: &str, value: Box<RawValue>) {
    let mut value = Some(value);
    obj.0.retain_mut(|(k, v)| {
        if k != key {
            return true;
        }
        match value.take() {
            Some(new) => {
                *v = new;
                true
            }
            None => false,
        }
    });
    if let Some(new) = value {
        obj.0.push((key.to_string(), new));
    }
}

/// `obj` as raw JSON text. `None` never happens in practice (the keys are strings and the values
/// already valid JSON), but this path is fed by peers, so it is not an `expect`
/// (`RawObject::to_raw` is).
fn to_raw(obj: &RawObject) -> Option<Box<RawValue>> {
    serde_json::value::to_raw_value(obj).ok()
}

/// A modern request made fit for a handshake-era child: the envelope keys are removed from
/// `_meta` (other `_meta` members, such as `progressToken`, stay), and an empty `_meta` is
/// dropped. Params without an envelope are returned as they are, and so are params that are
/// not an object or whose `_meta` is not an object. Every `_meta` member of an object with
/// duplicate keys is cleaned. Total: the answer is always valid JSON.
pub fn strip_envelope(params: &RawValue) -> Cow<'_, RawValue> {
    if !ENVELOPE_KEYS
        .iter()
        .any(|k| message::mentions(params.get(), k))
    {
        return Cow::Borrowed(params);
    }
    let Some(obj) = RawObject::parse(params) else {
        return Cow::Borrowed(params);
    };
    let mut changed = false;
    let mut out = Vec::with_capacity(obj.0.len());
    for (k, v) in obj.0 {
        let meta = if k == "_meta" {
            RawObject::parse(&v)
        } else {
            None
        };
        let Some(mut meta) = meta else {
            out.push((k, v));
            continue;
        };
        let before = meta.0.len();
        meta.0.retain(|(k, _)| !ENVELOPE_KEYS.contains(&k.as_str()));
        if meta.0.len() == before {
            out.push((k, v));
            continue;
        }
        changed = true;
        if !meta.0.is_empty() {
            let Some(meta) = to_raw(&meta) else {
                return Cow::Borrowed(params);
            };
            out.push((k, meta));
        }
    }
    if !changed {
        return Cow::Borrowed(params);
    }
    to_raw(&RawObject(out)).map_or(Cow::Borrowed(params), Cow::Owned)
}

/// Whether `params` can carry `_meta`: absent, or a JSON object. By-position params (an
/// array) cannot; trace context is then not added rather than the params replaced.
pub fn can_carry_meta(params: Option<&RawValue>) -> bool {
    params.is_none_or(|p| p.get().trim_start().starts_with('{'))
}

/// Sets the envelope members in `params._meta` (creating `params` and `_meta` as needed),
/// replacing any the request already had; other members stay. MCP params are always an
/// object: params that are not (an array, a scalar) are replaced by a new object, and so is a
/// `_meta` that is not an object. With duplicate `_meta` keys the last object is kept (what a
/// last-wins reader saw) and the others are removed. Total: always a JSON object.
pub fn add_envelope(params: Option<&RawValue>, envelope: &Map<String, Value>) -> Box<RawValue> {
    let mut obj = params.and_then(RawObject::parse).unwrap_or_default();
    let mut meta = last(&obj, "_meta")
        .and_then(RawObject::parse)
        .unwrap_or_default();
    for (k, v) in envelope {
        // Serialising a `Value` cannot fail (its map keys are strings); skip rather than panic.
        if let Ok(raw) = serde_json::value::to_raw_value(v) {
            set_unique(&mut meta, k, raw);
        }
    }
    if let Some(meta) = to_raw(&meta) {
        set_unique(&mut obj, "_meta", meta);
    }
    to_raw(&obj)
        .or_else(|| params.map(ToOwned::to_owned))
        .unwrap_or_else(|| RawValue::NULL.to_owned())
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
/// the top-level members are looked at; the payload is never decoded. The added members come
/// first, so with duplicate keys a last-wins reader still sees the child's own.
///
/// Total: a result that is not an object (`[]`, `5`, `"x"`, `null`, K21) is returned unchanged,
/// since there is nothing to add members to; it breaks the MCP schema whatever the era, and
/// [`check_result_shape`] is what tells the actor to answer it as an error naming the server.
pub fn modernize_result<'a>(result: &'a RawValue, method: &str) -> Cow<'a, RawValue> {
    let Some(Top::Object([result_type, ttl_ms, cache_scope])) =
        scan_top(result.get(), ["resultType", "ttlMs", "cacheScope"])
    else {
        return Cow::Borrowed(result);
    };
    let mut add = Vec::new();
    if result_type.is_none() {
        add.push("\"resultType\":\"complete\"");
    }
    if CACHEABLE.contains(&method) {
        if ttl_ms.is_none() {
            add.push("\"ttlMs\":0");
        }
        if cache_scope.is_none() {
            add.push("\"cacheScope\":\"private\"");
        }
    }
    if add.is_empty() {
        return Cow::Borrowed(result);
    }
    // The scan proved the text is one JSON object, so after JSON whitespace it starts with `{`;
    // if that ever failed, the result goes out unchanged instead of a panic.
    let Some(rest) = result.get().trim_matches(is_json_ws).strip_prefix('{') else {
        return Cow::Borrowed(result);
    };
    let rest = rest.trim_start_matches(is_json_ws);
    let head = add.join(",");
    let joined = if rest.starts_with('}') {
        format!("{{{head}}}")
    } else {
        format!("{{{head},{rest}")
    };
    RawValue::from_string(joined).map_or(Cow::Borrowed(result), Cow::Owned)
}

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
        let version = answered_version(requested);
        let mut r = Map::new();
        r.insert("protocolVersion".into(), json!(version));
        r.insert("capabilities".into(), self.capabilities.clone());
        r.insert("serverInfo".into(), self.server_info.clone());
        if let Some(i) = &self.instructions {
            r.insert("instructions".into(), i.clone());
        }
        Value::Object(r)
    }

    /// The `server/discover` result for a modern client of a handshake child (issue 6 §3):
    /// the versions the supervisor can serve, the child's capabilities, `serverInfo` in
    /// `_meta`, never cached across clients.
    pub fn discover_result(&self) -> Value {
        let mut r = Map::new();
        r.insert("resultType".into(), json!("complete"));
        r.insert("supportedVersions".into(), json!([MODERN_VERSION]));
        r.insert("capabilities".into(), self.capabilities.clone());
        r.insert(
            "_meta".into(),
            json!({ META_SERVER_INFO: self.server_info }),
        );
        r.insert("ttlMs".into(), json!(0));
        r.insert("cacheScope".into(), json!("private"));
        if let Some(i) = &self.instructions {
            r.insert("instructions".into(), i.clone());
        }
        Value::Object(r)
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
mod tests;

/// Property tests: every translation is total (any JSON in, valid JSON out, no panic).
#[cfg(test)]
mod props;
