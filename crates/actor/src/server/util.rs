//! Small pure helpers of the server actor: shape checks, id keys, request-log fields.

use super::ledger::Tracked;
use crate::era;
use crate::health::HealthConfig;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::time::{Instant, SystemTime};
use support::config::ServerConfig;
use support::logging::requests::RequestId;
use vocab::jsonrpc::message;
use vocab::jsonrpc::message::{raw, Message};

/// What is wrong with a child's response to `method`, if anything (K21): a result must have
/// the shape MCP gives that method's result (`era::check_result_shape`), an error must be an
/// object with an integer `code` and a string `message` (JSON-RPC 2.0 §5.1).
pub(super) fn malformed(m: &Message, method: &str) -> Option<String> {
    match (&m.result, &m.error) {
        (Some(_), Some(_)) => Some("it has both `result` and `error`".into()),
        // Results that carry payloads (a 13 MB screenshot) are only checked to be an object:
        // the member check would scan the whole payload a second time on the relay path.
        (Some(r), None) if matches!(method, "tools/call" | "resources/read" | "prompts/get") => {
            (r.as_bytes().trim_ascii_start().first() != Some(&b'{'))
                .then(|| "its `result` is not a JSON object".to_string())
        }
        (Some(r), None) => era::check_result_shape(method, &r.raw())
            .err()
            .map(|e| e.to_string()),
        (None, Some(e)) => era::check_error_shape(e).err().map(|e| e.to_string()),
        (None, None) => Some("it has neither `result` nor `error`".into()),
    }
}

/// The `requestState` member of an `input_required` result as the child wrote it, if any.
pub(super) fn request_state(result: &[u8]) -> Option<Box<RawValue>> {
    #[derive(serde::Deserialize)]
    struct State {
        #[serde(rename = "requestState")]
        state: Option<Box<RawValue>>,
    }
    serde_json::from_slice::<State>(result)
        .ok()
        .and_then(|s| s.state)
}

/// The name of log level rank `level` (`era::LOG_LEVELS`), `debug` when out of range.
pub(super) fn level_name(level: usize) -> &'static str {
    era::LOG_LEVELS.get(level).copied().unwrap_or("debug")
}

/// The request-log entry of a client request arriving at `now` (`wall` on the wall clock;
/// issue 8), while child instance `generation` runs. The tool name and argument keys are
/// read only when the request log (`log`) or traces (`traced`) are on: nothing else uses
/// them. The span is opened only when traces are on.
pub(super) fn tracked(
    m: &Message,
    generation: Option<u64>,
    (now, wall): (Instant, SystemTime),
    log: bool,
    traced: bool,
) -> Tracked {
    let method = m.method.clone().unwrap_or_default();
    let (tool, arg_keys) = if (log || traced) && method == "tools/call" {
        tool_shape(m.params.as_deref())
    } else {
        (None, "".into())
    };
    let span = traced.then(|| {
        Box::new(support::observe::trace::SpanStart::new(
            m.params.as_deref(),
            &method,
            wall,
        ))
    });
    Tracked {
        rid: RequestId::random(),
        method,
        tool,
        arg_keys,
        started: now,
        generation,
        span,
    }
}

/// The health rules' settings from a server's configuration.
pub(super) fn health_config(cfg: &ServerConfig) -> HealthConfig {
    HealthConfig {
        probe_interval: cfg.probe_interval,
        probe_timeout: cfg.probe_timeout,
        probe_failures: cfg.probe_failures,
    }
}

/// Whether a `tools/call` result says `isError: true`, without decoding the content (which may
/// be a multi-megabyte screenshot).
pub(super) fn is_tool_error(result: &[u8]) -> bool {
    // Most results never mention it: skip the parse of a (possibly huge) payload.
    static IS_ERROR: message::Needle =
        message::Needle::new(|| memchr::memmem::Finder::new("\"isError\""));
    if !IS_ERROR.in_text(result) {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    serde_json::from_slice::<Probe>(result)
        .ok()
        .and_then(|p| p.is_error)
        .unwrap_or(false)
}

/// The tool name and the argument keys, sorted and joined with `,`, of `tools/call` params
/// (values are skipped, never copied or logged). Read with [`vocab::jsonrpc::scan`]: no
/// parser, and the only allocations are the two strings kept and the list of keys.
pub(super) fn tool_shape(params: Option<&RawValue>) -> (Option<Box<str>>, Box<str>) {
    use vocab::jsonrpc::scan::{key_text, members};
    let Some(p) = params else {
        return (None, "".into());
    };
    let (mut name, mut arguments) = (None, None);
    for (key, value) in members(p.get()) {
        match &*key_text(key) {
            "name" => name = Some(value),
            "arguments" => arguments = Some(value),
            _ => {}
        }
    }
    let tool = name
        .filter(|v| v.starts_with('"'))
        .and_then(|v| v.get(1..v.len() - 1))
        .map(|inner| key_text(inner).into());
    let mut keys: Vec<Cow<str>> = arguments
        .map(|a| members(a).map(|(k, _)| key_text(k)).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    keys.dedup();
    let mut joined = String::with_capacity(keys.iter().map(|k| k.len() + 1).sum());
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            joined.push(',');
        }
        joined.push_str(k);
    }
    (tool, joined.into())
}

/// Whether a list result may be kept and served to every client of the child (issue 6 §2): a
/// 2026 result only with `cacheScope: "public"`; a handshake-era result (no hint) always, since
/// every client shares the child's one session. Entries are only served while the child is
/// down, where the 2026 caching rules allow stale entries ("a re-fetch errors").
pub(super) fn shareable(v: &Value) -> bool {
    if !v.is_object() {
        return false;
    }
    match v.get("cacheScope").and_then(Value::as_str) {
        None => v.get("resultType").is_none(),
        Some(scope) => scope == "public",
    }
}

/// A `subscriptions/listen` close result for the client: its `_meta` names the stream by the
/// client's own id, not the child-side one.
pub(super) fn listen_close_result(r: &RawValue, id: &RawValue) -> Box<RawValue> {
    let mut v: Value = serde_json::from_str(r.get()).unwrap_or(json!({}));
    if let Some(meta) = v.get_mut("_meta").and_then(Value::as_object_mut) {
        let original: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
        meta.insert(era::META_SUBSCRIPTION_ID.into(), original);
    }
    raw(&v)
}

/// The list page whose result a request for `method` refreshes in the cache: the list
/// method, and the request's `cursor` (`None`: the list read from its start). A cursor that
/// is not a string, or longer than [`super::lists::MAX_CURSOR`], is not cached.
pub(super) fn list_to_cache(method: &str, params: Option<&RawValue>) -> Option<ListPage> {
    let list = era::LISTS
        .iter()
        .map(|(l, _, _)| *l)
        .find(|l| *l == method)?;
    let Some(p) = params.filter(|p| message::mentions(p.get(), "\"cursor\"")) else {
        return Some(ListPage { list, cursor: None });
    };
    let cursor = message::RawObject::parse(p)?
        .get("cursor")
        .and_then(|c| serde_json::from_str::<String>(c.get()).ok())
        .filter(|c| c.len() <= super::lists::MAX_CURSOR)?;
    Some(ListPage {
        list,
        cursor: Some(cursor.into()),
    })
}

/// One page of a list: its method, and the cursor it was asked with (`None`: the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ListPage {
    /// The list method.
    pub(super) list: &'static str,
    /// The request's cursor.
    pub(super) cursor: Option<Box<str>>,
}

/// The URI of a `resources/subscribe` request.
pub(super) fn subscribe_uri(method: &str, params: Option<&RawValue>) -> Option<String> {
    if method != "resources/subscribe" {
        return None;
    }
    params
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|v| v.get("uri").and_then(Value::as_str).map(str::to_string))
}

/// The `inputRequests` of an `input_required` result (2026-07-28 MRTR), or `None` when the
/// result is not one.
pub(super) fn input_requests(result: &[u8]) -> Option<Map<String, Value>> {
    // Most results never mention it: skip the parse of a (possibly huge) payload.
    memchr::memmem::find(result, b"input_required")?;
    let r = serde_json::from_slice::<Value>(result).ok()?;
    if r.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return None;
    }
    Some(
        r.get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    )
}

/// A 2026-07-28 retry's params with every answer to a `roots/list` input request (an
/// `inputResponses` value that is an object with a `roots` member: a `ListRootsResult`)
/// replaced by `roots` (the server's configured roots), or `None` when it holds none
/// (issue 47 §6: `client_roots = "none"` holds when a 2026 client answers a 2026 server's
/// round itself). Stateless, so it holds whichever request (a new HTTP POST, another
/// connection) carries the retry. Parses only params that mention `inputResponses`.
pub(super) fn with_roots_kept_home(params: &RawValue, roots: &Value) -> Option<Box<RawValue>> {
    memchr::memmem::find(params.get().as_bytes(), b"inputResponses")?;
    let mut p = serde_json::from_str::<Value>(params.get()).ok()?;
    let answers = p.get_mut("inputResponses")?.as_object_mut()?;
    let mut replaced = false;
    for v in answers.values_mut() {
        if v.as_object().is_some_and(|o| o.contains_key("roots")) {
            *v = roots.clone();
            replaced = true;
        }
    }
    if !replaced {
        return None;
    }
    serde_json::value::to_raw_value(&p).ok()
}

/// The method of the first input request that needs a capability the client (`caps`) did not
/// declare.
pub(super) fn missing_capability(requests: &Map<String, Value>, caps: &Value) -> Option<String> {
    requests.values().find_map(|q| {
        let m = q.get("method").and_then(Value::as_str).unwrap_or("");
        let cap = era::capability_for_request(m)?;
        caps.get(cap).is_none().then(|| m.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(params: &str) -> (Option<String>, String) {
        let raw = RawValue::from_string(params.to_string()).unwrap();
        let (name, keys) = tool_shape(Some(&raw));
        (name.map(String::from), keys.into())
    }

    #[test]
    fn a_retrys_roots_answers_are_replaced_and_nothing_else() {
        let roots = json!({"roots": [{"uri": "file:///srv"}]});
        let p = RawValue::from_string(
            r#"{"name":"t","requestState":"s","inputResponses":{"a":{"roots":[{"uri":"file:///home/alice"}]},"b":{"action":"accept","content":{}}}}"#.into(),
        )
        .unwrap();
        let out: Value =
            serde_json::from_str(with_roots_kept_home(&p, &roots).unwrap().get()).unwrap();
        assert_eq!(out["inputResponses"]["a"], roots);
        assert_eq!(out["inputResponses"]["b"]["action"], "accept");
        assert_eq!(out["requestState"], "s");
        assert!(!out.to_string().contains("alice"));
        let none =
            RawValue::from_string(r#"{"name":"t","inputResponses":{"b":{}}}"#.into()).unwrap();
        assert!(with_roots_kept_home(&none, &roots).is_none());
        let plain = RawValue::from_string(r#"{"name":"t"}"#.into()).unwrap();
        assert!(with_roots_kept_home(&plain, &roots).is_none());
    }

    #[test]
    fn tool_shape_names_the_tool_and_its_sorted_argument_keys_never_values() {
        assert_eq!(
            shape(r#"{"name":"echo","arguments":{"token":"s3cret","text":{"a":[1,2]}}}"#),
            (Some("echo".into()), "text,token".into())
        );
        // Duplicate keys once; escaped keys decoded; a tool name with an escape.
        assert_eq!(
            shape(r#"{"arguments":{"b":1,"a\u0062":2,"b":3},"name":"t\"q"}"#),
            (Some("t\"q".into()), "ab,b".into())
        );
        // `arguments` that is not an object: the name alone.
        assert_eq!(
            shape(r#"{"name":"x","arguments":"oops"}"#),
            (Some("x".into()), String::new())
        );
        assert_eq!(shape(r#"{"name":"x"}"#), (Some("x".into()), String::new()));
        assert_eq!(tool_shape(None), (None, "".into()));
    }
}
