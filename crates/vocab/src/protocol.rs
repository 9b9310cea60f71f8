//! The protocol's vocabulary, on the ground floor (issue 27 §7): the eras, the revisions the
//! supervisor speaks, the `_meta` envelope keys of 2026-07-28 and total readers of them. The
//! configuration (`protocol = ...`), observability (trace context) and the core (`actor::era`,
//! which re-exports these and holds the translations) all import from here, so nothing
//! below the core imports upward from it.

use crate::jsonrpc::message::{self, RawObject};
use serde_json::value::RawValue;
use serde_json::Value;

/// The revision the supervisor asks a handshake-era child for.
pub const HANDSHAKE_VERSION: &str = "2025-11-25";

/// Every handshake-era revision, oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The version an `initialize` answer names for a client that asked for `requested`: its own
/// when it is one of [`HANDSHAKE_VERSIONS`], else the latest, [`HANDSHAKE_VERSION`] (MCP
/// lifecycle, "Version Negotiation"). One rule for every answer the supervisor writes itself:
/// the actor's for a modern child (`actor::era`), an endpoint's (`front::endpoint`).
pub fn answered_version(requested: &str) -> &str {
    if HANDSHAKE_VERSIONS.contains(&requested) {
        requested
    } else {
        HANDSHAKE_VERSION
    }
}

/// What a 2026-07-28 `subscriptions/listen` request asks for (`params.notifications`), and the
/// `notifications` object that acknowledges it (reference/protocol.md §6.2). One reading and
/// one writing for every stream the supervisor serves itself: the actor's on a handshake
/// child (`actor::server`), an endpoint's (`front::endpoint::listen`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenFilter {
    /// `toolsListChanged`.
    pub tools: bool,
    /// `promptsListChanged`.
    pub prompts: bool,
    /// `resourcesListChanged`.
    pub resources: bool,
    /// `resourceSubscriptions` (strings only), at most the `max_uris` it was read with.
    pub uris: Vec<String>,
}

impl ListenFilter {
    /// The filter of a `subscriptions/listen` request's params: absent or non-boolean flags
    /// are false, non-string URIs are skipped, and at most `max_uris` URIs are kept (the
    /// rest are never copied).
    pub fn of(params: &serde_json::Map<String, Value>, max_uris: usize) -> ListenFilter {
        let n = params.get("notifications");
        let flag = |k: &str| {
            n.and_then(|n| n.get(k))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let uris = n
            .and_then(|n| n.get("resourceSubscriptions"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .take(max_uris)
                    .collect()
            })
            .unwrap_or_default();
        ListenFilter {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris,
        }
    }

    /// The `notifications` object of this filter's flags with resource URIs `uris` (those
    /// honoured: all of the filter's, the ones a source serves, the ones the limits let in):
    /// only the flags that are set, and `resourceSubscriptions` only when `uris` is not empty.
    pub fn notifications(&self, uris: &[String]) -> Value {
        let mut o = serde_json::Map::new();
        for (k, v) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if v {
                o.insert(k.into(), Value::Bool(true));
            }
        }
        if !uris.is_empty() {
            o.insert(
                "resourceSubscriptions".into(),
                Value::Array(uris.iter().cloned().map(Value::String).collect()),
            );
        }
        Value::Object(o)
    }
}

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
    static VERSION: message::Needle =
        message::Needle::new(|| memchr::memmem::Finder::new(META_VERSION));
    if !VERSION.in_text(params.get().as_bytes()) {
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

/// String members `keys` of `params._meta`, read with one parse of `params` (the other
/// members stay raw); `None` for a key that is absent or not a string. The raw text is
/// searched first, so params that mention none of the keys are not parsed at all. Total,
/// last duplicate wins (see [`envelope_version`]). Used for the trace context (issue 17 §4).
pub fn meta_strings<const N: usize>(
    params: Option<&RawValue>,
    keys: [&str; N],
) -> [Option<String>; N] {
    let none = || std::array::from_fn(|_| None);
    let Some(params) = params.filter(|p| keys.iter().any(|k| message::mentions(p.get(), k))) else {
        return none();
    };
    let Some(meta) =
        RawObject::parse(params).and_then(|obj| last(&obj, "_meta").and_then(RawObject::parse))
    else {
        return none();
    };
    keys.map(|k| last(&meta, k).and_then(|v| serde_json::from_str::<String>(v.get()).ok()))
}

/// The string member `key` of `params` itself (e.g. `name` of `prompts/get`); `None` when
/// absent or not a string.
pub fn param_string(params: Option<&RawValue>, key: &str) -> Option<String> {
    let obj = RawObject::parse(params?)?;
    serde_json::from_str(last(&obj, key)?.get()).ok()
}

/// The last member named `key` (duplicate keys: the last one counts, as in `JSON.parse`).
pub fn last<'a>(obj: &'a RawObject, key: &str) -> Option<&'a RawValue> {
    obj.0
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| &**v)
}

#[cfg(test)]
mod tests {
    use super::{
        answered_version, ListenFilter, HANDSHAKE_VERSION, HANDSHAKE_VERSIONS, MODERN_VERSION,
    };
    use serde_json::json;

    #[test]
    fn an_initialize_answer_names_the_clients_version_when_spoken_else_the_latest() {
        for v in HANDSHAKE_VERSIONS {
            assert_eq!(answered_version(v), *v);
        }
        for v in [MODERN_VERSION, "2099-01-01", "", "2025-11-25 "] {
            assert_eq!(answered_version(v), HANDSHAKE_VERSION, "{v:?}");
        }
    }

    #[test]
    fn a_listen_filter_reads_what_was_asked_and_acknowledges_only_what_is_honoured() {
        let params = json!({"notifications": {
            "toolsListChanged": true, "promptsListChanged": "yes", "resourcesListChanged": false,
            "resourceSubscriptions": ["file:///a", 7, "file:///b", "file:///c"],
        }});
        let f = ListenFilter::of(params.as_object().unwrap(), 2);
        assert_eq!(
            f,
            ListenFilter {
                tools: true,
                prompts: false,
                resources: false,
                uris: vec!["file:///a".into(), "file:///b".into()],
            }
        );
        assert_eq!(
            f.notifications(&f.uris[..1]),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///a"]})
        );
        assert_eq!(f.notifications(&[]), json!({"toolsListChanged": true}));
        // Nothing asked, or `notifications` not an object: nothing set.
        for p in [json!({}), json!({"notifications": [true]})] {
            let f = ListenFilter::of(p.as_object().unwrap(), usize::MAX);
            assert_eq!(f, ListenFilter::default());
            assert_eq!(f.notifications(&f.uris), json!({}));
        }
    }
}
