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
///
/// Total: any `params` (not an object, no `_meta`, a `_meta` that is not an object, a version
/// that is not a string) gives `None`. With duplicate keys the last one counts, as in
/// JavaScript's `JSON.parse` (what the SDK clients and servers read with) and
/// `serde_json::Value`. A key spelt with JSON escapes is not recognised (the raw text is
/// searched first, to keep the common case free of parsing).
pub fn envelope_version(params: Option<&RawValue>) -> Option<String> {
    let params = params?;
    if !params.get().contains(META_VERSION) {
        return None;
    }
    match envelope_field(Some(params), META_VERSION)? {
        Value::String(v) => Some(v),
        _ => None,
    }
}

/// One member of a request's envelope (`params._meta.<key>`), parsed; `None` when any step of
/// the path is missing or not an object. Total, last duplicate wins (see [`envelope_version`]).
pub fn envelope_field(params: Option<&RawValue>, key: &str) -> Option<Value> {
    let obj = RawObject::parse(params?)?;
    let meta = RawObject::parse(last(&obj, "_meta")?)?;
    serde_json::from_str(last(&meta, key)?.get()).ok()
}

/// The last member named `key` (duplicate keys: the last one counts, as in `JSON.parse`).
fn last<'a>(obj: &'a RawObject, key: &str) -> Option<&'a RawValue> {
    obj.0
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| &**v)
}

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
    if !ENVELOPE_KEYS.iter().any(|k| params.get().contains(k)) {
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

/// JSON's insignificant whitespace (RFC 8259 §2), nothing more.
fn is_json_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// The JSON type of a value, as the shape checks name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number without fraction or exponent that fits an `i64` (what JSON-RPC means by an
    /// integer error code).
    Integer,
    /// Any other number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonKind {
    /// The kind with its article, for messages: `an array`, `null`, ...
    pub fn describe(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Bool => "a boolean",
            JsonKind::Integer => "an integer",
            JsonKind::Number => "a number",
            JsonKind::String => "a string",
            JsonKind::Array => "an array",
            JsonKind::Object => "an object",
        }
    }
}

/// A value's kind (contents skipped, never kept), and whether it is the string `"complete"`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    kind: JsonKind,
    complete: bool,
}

impl<'de> serde::Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Null))
            }
            fn visit_none<E>(self) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Null))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Bool))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Integer))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Shape, E> {
                Ok(Shape::of(if i64::try_from(v).is_ok() {
                    JsonKind::Integer
                } else {
                    JsonKind::Number
                }))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Number))
            }
            fn visit_str<E>(self, v: &str) -> Result<Shape, E> {
                Ok(Shape {
                    kind: JsonKind::String,
                    complete: v == "complete",
                })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Shape::of(JsonKind::Array))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
                while a
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Shape::of(JsonKind::Object))
            }
        }
        d.deserialize_any(V)
    }
}

impl Shape {
    fn of(kind: JsonKind) -> Shape {
        Shape {
            kind,
            complete: false,
        }
    }
}

/// What [`scan_top`] found: an object with the shapes of the wanted members (the last of
/// duplicates), or some other kind of value.
enum Top<const N: usize> {
    Object([Option<Shape>; N]),
    Other(JsonKind),
}

/// Looks at the top level of `text` only: its kind and, for an object, the shapes of the
/// members named in `keys`. Nothing is allocated and nested values are skipped, so this is
/// cheap on a large result. `None` when `text` is not one JSON value (or nests deeper than
/// serde_json's recursion limit, which a `RawValue` it parsed cannot).
fn scan_top<const N: usize>(text: &str, keys: [&str; N]) -> Option<Top<N>> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
    struct Seed<'k, const N: usize>(&'k [&'k str; N]);
    impl<'de, const N: usize> DeserializeSeed<'de> for Seed<'_, N> {
        type Value = Top<N>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Top<N>, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de, const N: usize> Visitor<'de> for Seed<'_, N> {
        type Value = Top<N>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Top<N>, A::Error> {
            let mut found = [None; N];
            while let Some(i) = a.next_key_seed(KeySeed(self.0))? {
                match i.and_then(|i| found.get_mut(i)) {
                    Some(slot) => *slot = Some(a.next_value::<Shape>()?),
                    None => {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Top::Object(found))
        }
        fn visit_unit<E>(self) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Null))
        }
        fn visit_none<E>(self) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Null))
        }
        fn visit_bool<E>(self, _: bool) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Bool))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Integer))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Top<N>, E> {
            Ok(Top::Other(if i64::try_from(v).is_ok() {
                JsonKind::Integer
            } else {
                JsonKind::Number
            }))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Number))
        }
        fn visit_str<E>(self, _: &str) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::String))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Top<N>, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Top::Other(JsonKind::Array))
        }
    }
    /// A member name, compared with the wanted keys without being copied.
    struct KeySeed<'k, const N: usize>(&'k [&'k str; N]);
    impl<'de, const N: usize> DeserializeSeed<'de> for KeySeed<'_, N> {
        type Value = Option<usize>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl<const N: usize> Visitor<'_> for KeySeed<'_, N> {
        type Value = Option<usize>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a member name")
        }
        fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
            Ok(self.0.iter().position(|k| *k == v))
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let top = Seed(&keys).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(top)
}

/// How a reply from a child (or a client answering a child's request) breaks the MCP schema.
/// The actor turns it into a JSON-RPC error for that one request ([`MalformedReply::error`])
/// instead of forwarding or translating it (K21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MalformedReply {
    /// The `result` of a known method is not an object (every MCP result is one).
    #[error("the result of {method} is {found}, not an object")]
    ResultNotObject {
        /// The request's method.
        method: &'static str,
        /// What it was instead.
        found: &'static str,
    },
    /// A member the schema requires is missing or of the wrong kind.
    #[error("the result of {method} has {found} as `{member}`, not {expected}")]
    ResultMember {
        /// The request's method.
        method: &'static str,
        /// The member.
        member: &'static str,
        /// The kind the schema asks for (`an array`, ...).
        expected: &'static str,
        /// What it was instead (`nothing` when missing).
        found: &'static str,
    },
    /// The `error` member is not an object.
    #[error("the error is {found}, not an object")]
    ErrorNotObject {
        /// What it was instead.
        found: &'static str,
    },
    /// The error's `code` is missing or not an integer.
    #[error("the error's code is {found}, not an integer")]
    ErrorCode {
        /// What it was instead (`nothing` when missing).
        found: &'static str,
    },
    /// The error's `message` is missing or not a string.
    #[error("the error's message is {found}, not a string")]
    ErrorMessage {
        /// What it was instead (`nothing` when missing).
        found: &'static str,
    },
    /// Not one JSON value (cannot come from a parsed envelope; kept so the checks are total).
    #[error("the reply is not valid JSON")]
    NotJson,
}

impl MalformedReply {
    /// The JSON-RPC `error` object that replaces the reply for the client:
    /// `{"code":-32603,"message":"server <name> sent a malformed reply: <why>","data":{"server":<name>}}`.
    /// -32603 (internal error) because the request was valid and the server failed it.
    pub fn error(&self, server: &str) -> Value {
        json!({
            "code": crate::jsonrpc::message::code::INTERNAL_ERROR,
            "message": format!("server {server} sent a malformed reply: {self}"),
            "data": {"server": server},
        })
    }
}

/// A member a result may need: `(name, kind, required)`.
type Member = (&'static str, JsonKind, bool);

/// Members a result must have, by method (MCP schema 2025-11-25 and 2026-07-28, `Result`
/// types): `(method, [(member, kind, required)])`. An optional member, when present, must
/// still be of its kind. Kept to the members a client reads first (a list's array, a call's
/// content), so a sloppy but usable child is not refused.
const RESULT_SHAPES: &[(&str, &[Member])] = &[
    ("initialize", &[("protocolVersion", JsonKind::String, true)]),
    (
        "server/discover",
        &[
            ("supportedVersions", JsonKind::Array, true),
            ("capabilities", JsonKind::Object, false),
        ],
    ),
    ("ping", &[]),
    ("tools/list", &[("tools", JsonKind::Array, true)]),
    ("tools/call", &[("content", JsonKind::Array, false)]),
    ("prompts/list", &[("prompts", JsonKind::Array, true)]),
    ("prompts/get", &[("messages", JsonKind::Array, true)]),
    ("resources/list", &[("resources", JsonKind::Array, true)]),
    (
        "resources/templates/list",
        &[("resourceTemplates", JsonKind::Array, true)],
    ),
    ("resources/read", &[("contents", JsonKind::Array, true)]),
    ("resources/subscribe", &[]),
    ("resources/unsubscribe", &[]),
    (
        "completion/complete",
        &[("completion", JsonKind::Object, true)],
    ),
    ("logging/setLevel", &[]),
    ("subscriptions/listen", &[]),
    ("tasks/get", &[]),
    ("tasks/update", &[]),
    ("tasks/cancel", &[]),
    ("tasks/result", &[]),
    ("tasks/list", &[("tasks", JsonKind::Array, true)]),
    // Answers of clients to a child's requests.
    ("roots/list", &[("roots", JsonKind::Array, true)]),
    ("sampling/createMessage", &[]),
    ("elicitation/create", &[]),
];

/// Checks the shape of a `result` for a request of `method`: for the methods of the MCP schema
/// it must be an object, and the members a client needs first (`tools` of `tools/list`, ...)
/// must be there with the right kind. Members are required only in a complete result
/// (`resultType` absent or `"complete"`): a 2026 `input_required` or `task` result carries
/// others. Any result of a method the schema does not define passes (JSON-RPC allows any
/// value). Only the top level is read; the payload is skipped, never copied. Pure and total.
pub fn check_result_shape(method: &str, result: &RawValue) -> Result<(), MalformedReply> {
    let Some((method, members)) = RESULT_SHAPES.iter().find(|(m, _)| *m == method) else {
        return Ok(());
    };
    // Enough slots for the longest member list above, plus `resultType`.
    let mut keys = ["resultType", "", ""];
    for ((member, _, _), key) in members.iter().zip(keys.iter_mut().skip(1)) {
        *key = member;
    }
    let found = match scan_top(result.get(), keys) {
        None => return Err(MalformedReply::NotJson),
        Some(Top::Other(kind)) => {
            return Err(MalformedReply::ResultNotObject {
                method,
                found: kind.describe(),
            })
        }
        Some(Top::Object(found)) => found,
    };
    let [result_type, rest @ ..] = found;
    let complete = result_type.is_none_or(|s| s.complete);
    for ((member, kind, required), shape) in members.iter().zip(rest) {
        let wrong = match shape {
            Some(s) => s.kind != *kind,
            None => *required && complete,
        };
        if wrong {
            return Err(MalformedReply::ResultMember {
                method,
                member,
                expected: kind.describe(),
                found: shape.map_or("nothing", |s| s.kind.describe()),
            });
        }
    }
    Ok(())
}

/// Checks the `error` member of a reply (JSON-RPC 2.0 §5.1): an object with an integer `code`
/// and a string `message` (`data` may be anything). Pure and total.
pub fn check_error_shape(error: &RawValue) -> Result<(), MalformedReply> {
    match scan_top(error.get(), ["code", "message"]) {
        None => Err(MalformedReply::NotJson),
        Some(Top::Other(kind)) => Err(MalformedReply::ErrorNotObject {
            found: kind.describe(),
        }),
        Some(Top::Object([code, message])) => {
            if code.is_none_or(|c| c.kind != JsonKind::Integer) {
                return Err(MalformedReply::ErrorCode {
                    found: code.map_or("nothing", |c| c.kind.describe()),
                });
            }
            if message.is_none_or(|m| m.kind != JsonKind::String) {
                return Err(MalformedReply::ErrorMessage {
                    found: message.map_or("nothing", |m| m.kind.describe()),
                });
            }
            Ok(())
        }
    }
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
    #[test]
    fn non_object_results_pass_through_unchanged_case_k21() {
        for bad in [
            "[]",
            "[1,{\"a\":2}]",
            "5",
            "-1.5e3",
            "\"x\"",
            "null",
            "true",
            " [ ] ",
        ] {
            for m in ["tools/list", "tools/call", "initialize", "x"] {
                let r = raw(bad);
                assert!(
                    matches!(modernize_result(&r, m), Cow::Borrowed(_)),
                    "{bad} {m}"
                );
            }
        }
    }

    #[test]
    fn odd_whitespace_and_duplicates_in_results() {
        assert_eq!(
            modernize_result(&raw("\n\t{ \r\n\"tools\" : [ ] }\n "), "tools/list").get(),
            "{\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"private\",\"tools\" : [ ] }"
        );
        // The child's own members come after the added ones, so a last-wins reader keeps them.
        let dup = raw(r#"{"x":1,"x":2}"#);
        let dup = modernize_result(&dup, "tools/call");
        assert_eq!(dup.get(), r#"{"resultType":"complete","x":1,"x":2}"#);
        // Present once is present: nothing is added twice.
        let dup = raw(r#"{"resultType":"complete","resultType":"input_required"}"#);
        assert!(matches!(
            modernize_result(&dup, "tools/call"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn envelope_with_duplicate_and_odd_members() {
        // Every `_meta` is cleaned; a non-object `_meta` or params are left alone.
        let p = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"a"},"x":1,"_meta":{"io.modelcontextprotocol/logLevel":"info","k":2}}"#,
        );
        assert_eq!(strip_envelope(&p).get(), r#"{"x":1,"_meta":{"k":2}}"#);
        for odd in [
            r#"{"_meta":"io.modelcontextprotocol/protocolVersion"}"#,
            r#"["io.modelcontextprotocol/protocolVersion"]"#,
            r#""io.modelcontextprotocol/protocolVersion""#,
        ] {
            assert_eq!(strip_envelope(&raw(odd)).get(), odd);
        }
        // The last `_meta` is what a last-wins reader saw; it keeps its members, once.
        let env = envelope(&json!({}), &Value::Null, None);
        let p = raw(
            r#"{"_meta":{"a":1},"n":1,"_meta":{"b":2,"io.modelcontextprotocol/protocolVersion":"x","io.modelcontextprotocol/protocolVersion":"y"}}"#,
        );
        assert_eq!(
            add_envelope(Some(&p), &env).get(),
            r#"{"_meta":{"b":2,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"n":1}"#
        );
        // Params that are not an object become one.
        assert_eq!(
            add_envelope(Some(&raw("[1,2]")), &env).get(),
            r#"{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
        );
        let p = raw(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":5}}"#);
        assert_eq!(envelope_version(Some(&p)), None);
        let p = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}}"#,
        );
        assert_eq!(envelope_version(Some(&p)).as_deref(), Some("b"));
        assert_eq!(envelope_version(Some(&raw("[]"))), None);
    }

    #[test]
    fn result_shapes_of_known_methods_case_k21() {
        let bad = |m: &str, r: &str| check_result_shape(m, &raw(r)).unwrap_err().to_string();
        assert_eq!(
            bad("tools/list", "[]"),
            "the result of tools/list is an array, not an object"
        );
        assert_eq!(
            bad("tools/list", "5"),
            "the result of tools/list is an integer, not an object"
        );
        assert_eq!(
            bad("tools/call", "\"x\""),
            "the result of tools/call is a string, not an object"
        );
        assert_eq!(
            bad("prompts/list", "null"),
            "the result of prompts/list is null, not an object"
        );
        assert_eq!(
            bad("tools/list", "{}"),
            "the result of tools/list has nothing as `tools`, not an array"
        );
        assert_eq!(
            bad("tools/list", r#"{"tools":{"a":1},"tools":7}"#),
            "the result of tools/list has an integer as `tools`, not an array"
        );
        assert_eq!(
            bad("tools/call", r#"{"content":"hi"}"#),
            "the result of tools/call has a string as `content`, not an array"
        );
        assert_eq!(
            bad(
                "server/discover",
                r#"{"supportedVersions":[],"capabilities":[]}"#
            ),
            "the result of server/discover has an array as `capabilities`, not an object"
        );
        assert_eq!(
            bad("initialize", r#"{"protocolVersion":2025}"#),
            "the result of initialize has an integer as `protocolVersion`, not a string"
        );
        let ok = |m: &str, r: &str| check_result_shape(m, &raw(r));
        assert_eq!(ok("tools/list", r#"{"tools":[],"nextCursor":"c"}"#), Ok(()));
        assert_eq!(ok("tools/call", r#"{"content":[],"isError":true}"#), Ok(()));
        // A task or an MRTR round carries other members.
        assert_eq!(ok("tools/call", r#"{"task":{"taskId":"t"}}"#), Ok(()));
        assert_eq!(
            ok(
                "tools/list",
                r#"{"resultType":"input_required","inputRequests":{}}"#
            ),
            Ok(())
        );
        assert_eq!(ok("ping", "{}"), Ok(()));
        // Methods the schema does not define may answer anything.
        assert_eq!(ok("vendor/thing", "[]"), Ok(()));
        assert_eq!(ok("vendor/thing", "5"), Ok(()));
        let e = check_result_shape("tools/list", &raw("[]"))
            .unwrap_err()
            .error("fs");
        assert_eq!(
            e,
            json!({"code": -32603, "message": "server fs sent a malformed reply: the result of tools/list is an array, not an object", "data": {"server": "fs"}})
        );
    }

    #[test]
    fn result_shapes_fit_the_scan() {
        // `check_result_shape` scans `resultType` plus at most two members.
        assert!(RESULT_SHAPES.iter().all(|(_, m)| m.len() <= 2));
    }

    #[test]
    fn error_shapes_case_k21() {
        let bad = |e: &str| check_error_shape(&raw(e)).unwrap_err().to_string();
        assert_eq!(bad("\"oops\""), "the error is a string, not an object");
        assert_eq!(
            bad(r#"{"code":"-32000","message":"x"}"#),
            "the error's code is a string, not an integer"
        );
        assert_eq!(
            bad(r#"{"code":1.5,"message":"x"}"#),
            "the error's code is a number, not an integer"
        );
        assert_eq!(
            bad(r#"{"code":18446744073709551615,"message":"x"}"#),
            "the error's code is a number, not an integer"
        );
        assert_eq!(
            bad(r#"{"message":"x"}"#),
            "the error's code is nothing, not an integer"
        );
        assert_eq!(
            bad(r#"{"code":1,"message":null}"#),
            "the error's message is null, not a string"
        );
        assert_eq!(
            check_error_shape(&raw(r#"{"code":-32601,"message":"no","data":[1]}"#)),
            Ok(())
        );
    }

    #[test]
    fn deep_and_huge_inputs() {
        // serde_json's recursion limit is 128; a RawValue cannot nest deeper.
        let deep = format!("{{\"tools\":{}1{}}}", "[".repeat(120), "]".repeat(120));
        let r = raw(&deep);
        assert!(modernize_result(&r, "tools/list")
            .get()
            .starts_with("{\"resultType\""));
        assert_eq!(check_result_shape("tools/list", &r), Ok(()));
        let p = raw(&format!(
            "{{\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"v\",\"x\":{}0{}}}}}",
            "[".repeat(120),
            "]".repeat(120)
        ));
        assert!(serde_json::from_str::<Value>(strip_envelope(&p).get()).is_ok());
        let huge = format!(
            "{{\"tools\":[{}]}}",
            vec![r#"{"name":"t","inputSchema":{"type":"object"}}"#; 20_000].join(",")
        );
        let r = raw(&huge);
        assert_eq!(
            modernize_result(&r, "tools/list").get().len(),
            huge.len() + r#""resultType":"complete","ttlMs":0,"cacheScope":"private","#.len()
        );
        assert_eq!(check_result_shape("tools/list", &r), Ok(()));
    }
}

/// Property tests: every translation is total (any JSON in, valid JSON out, no panic).
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// A JSON document as written, so duplicate keys, escapes and odd whitespace can be made.
    #[derive(Debug, Clone)]
    enum J {
        Null,
        Bool(bool),
        Int(i64),
        Big(u64),
        Float(f64),
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    /// Member names the translations look at, mixed with arbitrary ones.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(vec![
                "_meta",
                META_VERSION,
                META_CAPABILITIES,
                META_CLIENT_INFO,
                META_LOG_LEVEL,
                META_SERVER_INFO,
                "resultType",
                "ttlMs",
                "cacheScope",
                "tools",
                "content",
                "protocolVersion",
                "capabilities",
                "serverInfo",
                "instructions",
                "supportedVersions",
                "code",
                "message",
                "progressToken",
            ])
            .prop_map(str::to_string),
            1 => "\\PC{0,6}",
        ]
    }

    fn json() -> impl Strategy<Value = J> {
        let leaf = prop_oneof![
            Just(J::Null),
            any::<bool>().prop_map(J::Bool),
            any::<i64>().prop_map(J::Int),
            any::<u64>().prop_map(J::Big),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(J::Float),
            prop_oneof![
                Just("complete".to_string()),
                Just(MODERN_VERSION.to_string()),
                ".{0,8}"
            ]
            .prop_map(J::Str),
        ];
        leaf.prop_recursive(6, 96, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(J::Arr),
                prop::collection::vec((key(), inner), 0..6).prop_map(J::Obj),
            ]
        })
    }

    /// Renders `j`; `ws` picks the whitespace between tokens, `esc` whether keys are written
    /// with `\u` escapes.
    fn render(j: &J, ws: &[&str], esc: bool, out: &mut String, n: &mut usize) {
        fn pad(out: &mut String, ws: &[&str], n: &mut usize) {
            if !ws.is_empty() {
                out.push_str(ws[*n % ws.len()]);
                *n += 1;
            }
        }
        pad(out, ws, n);
        match j {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(&b.to_string()),
            J::Int(i) => out.push_str(&i.to_string()),
            J::Big(u) => out.push_str(&u.to_string()),
            J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
            J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
            J::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    render(v, ws, esc, out, n);
                }
                pad(out, ws, n);
                out.push(']');
            }
            J::Obj(o) => {
                out.push('{');
                for (i, (k, v)) in o.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, ws, n);
                    if esc {
                        out.push('"');
                        for u in k.encode_utf16() {
                            out.push_str(&format!("\\u{u:04x}"));
                        }
                        out.push('"');
                    } else {
                        out.push_str(&serde_json::to_string(k).unwrap());
                    }
                    pad(out, ws, n);
                    out.push(':');
                    render(v, ws, esc, out, n);
                }
                pad(out, ws, n);
                out.push('}');
            }
        }
        pad(out, ws, n);
    }

    /// Arbitrary JSON text: any shape, duplicates, escaped keys, any JSON whitespace.
    fn text() -> impl Strategy<Value = String> {
        let ws = prop::collection::vec(
            prop::sample::select(vec!["", "", " ", "\n", "\t", "\r\n", "  \t "]),
            0..4,
        );
        (json(), ws, prop::bool::weighted(0.1)).prop_map(|(j, ws, esc)| {
            let mut out = String::new();
            render(&j, &ws, esc, &mut out, &mut 0);
            out
        })
    }

    /// Params shaped like a modern request, with extra members anywhere.
    fn modern_params() -> impl Strategy<Value = String> {
        (
            prop::collection::vec((key(), json()), 0..4),
            prop::collection::vec((key(), json()), 0..4),
            prop::collection::vec(prop::sample::select(ENVELOPE_KEYS.to_vec()), 0..5),
        )
            .prop_map(|(outer, meta, env)| {
                let mut m: Vec<(String, J)> = meta;
                for k in env {
                    m.push((k.to_string(), J::Str(MODERN_VERSION.into())));
                }
                let mut o = outer;
                o.push(("_meta".into(), J::Obj(m)));
                let mut out = String::new();
                render(&J::Obj(o), &[], false, &mut out, &mut 0);
                out
            })
    }

    fn parses(s: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok()
    }

    fn methods() -> Vec<&'static str> {
        let mut m: Vec<&str> = LISTS.iter().map(|(l, _, _)| *l).collect();
        m.extend(CACHEABLE);
        m.extend(RESULT_SHAPES.iter().map(|(m, _)| *m));
        m.extend(["tools/call", "vendor/x", ""]);
        m
    }

    fn check_all(text: &str) {
        let Ok(r) = RawValue::from_string(text.to_string()) else {
            return;
        };
        let before: Value = serde_json::from_str(text).unwrap();
        for m in methods() {
            let out = modernize_result(&r, m);
            assert!(parses(out.get()), "{m}: {}", out.get());
            let after: Value = serde_json::from_str(out.get()).unwrap();
            match (&before, &after) {
                (Value::Object(b), Value::Object(a)) => {
                    // Every member of the child's survives (last-wins), and the marks are there.
                    for (k, v) in b {
                        assert_eq!(a.get(k), Some(v), "{m}: {k}");
                    }
                    assert!(a.contains_key("resultType"));
                    if CACHEABLE.contains(&m) {
                        assert!(a.contains_key("ttlMs") && a.contains_key("cacheScope"));
                    }
                }
                _ => assert_eq!(out.get(), r.get(), "{m}: non-objects pass unchanged"),
            }
            let verdict = check_result_shape(m, &r);
            if RESULT_SHAPES.iter().any(|(k, _)| *k == m) && !before.is_object() {
                assert!(verdict.is_err(), "{m}: {text}");
            }
        }
        let e = check_error_shape(&r);
        let oracle = before.get("code").is_some_and(Value::is_i64)
            && before.get("message").is_some_and(Value::is_string);
        assert_eq!(e.is_ok(), oracle, "{text}: {e:?}");

        let stripped = strip_envelope(&r);
        assert!(parses(stripped.get()));
        let added = add_envelope(Some(&r), &supervisor_envelope());
        let v: Value = serde_json::from_str(added.get()).unwrap();
        for (k, want) in supervisor_envelope() {
            assert_eq!(v["_meta"].get(&k), Some(&want), "{}", added.get());
        }
        let _ = envelope_version(Some(&r));
        for k in ENVELOPE_KEYS {
            let _ = envelope_field(Some(&r), k);
        }

        if let Some(h) = Handshake::from_result(before.clone()) {
            for v in ["2025-06-18", MODERN_VERSION, "", "junk"] {
                assert!(parses(&h.initialize_result(v).to_string()));
            }
            assert!(parses(&h.discover_result().to_string()));
            let _ = (h.confirm_method(), h.has("tools"));
        }
        let d = Handshake::from_discover(before);
        assert!(parses(&d.initialize_result("2025-03-26").to_string()));
        assert!(parses(&d.discover_result().to_string()));
        let _ = (d.confirm_method(), d.has("tools"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_json_in_valid_json_out(text in text()) {
            check_all(&text);
        }

        #[test]
        fn modern_params_lose_exactly_their_envelope(text in modern_params()) {
            check_all(&text);
            let r = RawValue::from_string(text.clone()).unwrap();
            let v: Value = serde_json::from_str(strip_envelope(&r).get()).unwrap();
            let before: Value = serde_json::from_str(&text).unwrap();
            if let Some(meta) = v.get("_meta") {
                for k in ENVELOPE_KEYS {
                    prop_assert!(meta.get(k).is_none(), "{}", text);
                }
            }
            for (k, val) in before.as_object().unwrap() {
                if k != "_meta" {
                    prop_assert_eq!(v.get(k), Some(val));
                }
            }
        }
    }
}
