//! Results shaped for the client's era (issue 13 §2, K27): what the supervisor writes itself
//! (outage results, cached lists, local answers, `server/discover` from the last known result)
//! carries what a 2026-07-28 SDK's result schema requires, and what a handshake client
//! receives from a 2026 child carries nothing of 2026 (protocol.md §4.1, §4.6).

use super::{Era, CACHEABLE, META_SERVER_INFO};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use vocab::jsonrpc::message;

/// Top-level result members that exist only in 2026-07-28.
pub const MODERN_RESULT_FIELDS: &[&str] = &["resultType", "ttlMs", "cacheScope"];

/// A result the supervisor wrote itself for `method`, shaped for a client of `era`.
///
/// - 2026-07-28: `"resultType":"complete"` when absent and, for the cacheable methods
///   ([`CACHEABLE`]), `"ttlMs":0` and `"cacheScope":"private"` when absent: an answer from
///   the supervisor is never a caching promise (Python raises `ValidationError`, TypeScript
///   `INVALID_RESULT` without them).
/// - handshake era: the 2026-only members removed (see [`legacy_value`]).
///
/// A value that is not an object is returned as it is (nothing to add to).
pub fn for_client(mut v: Value, method: &str, era: Era) -> Value {
    match era {
        Era::Modern => {
            if let Some(o) = v.as_object_mut() {
                o.entry("resultType").or_insert_with(|| json!("complete"));
                if CACHEABLE.contains(&method) {
                    o.entry("ttlMs").or_insert_with(|| json!(0));
                    o.entry("cacheScope").or_insert_with(|| json!("private"));
                }
            }
            v
        }
        Era::Handshake => {
            legacy_value(&mut v);
            v
        }
    }
}

/// Removes from a result object what only 2026-07-28 has: [`MODERN_RESULT_FIELDS`] and
/// `_meta["io.modelcontextprotocol/serverInfo"]` (an empty `_meta` left behind goes too).
/// Returns whether anything was removed.
pub fn legacy_value(v: &mut Value) -> bool {
    let Some(o) = v.as_object_mut() else {
        return false;
    };
    let mut removed = false;
    for k in MODERN_RESULT_FIELDS {
        removed |= o.remove(*k).is_some();
    }
    if let Some(meta) = o.get_mut("_meta").and_then(Value::as_object_mut) {
        removed |= meta.remove(META_SERVER_INFO).is_some();
        if meta.is_empty() {
            o.remove("_meta");
        }
    }
    removed
}

/// A 2026 child's result made fit for a handshake client (issue 13 Why 4): the 2026-only
/// members removed. Borrowed (not re-encoded) when there is nothing to remove; a text that is
/// not a JSON object is returned unchanged.
pub fn legacy_result(result: &RawValue) -> Cow<'_, RawValue> {
    let text = result.get();
    // The keys as they appear quoted in the text: no allocation per message.
    const QUOTED: [&str; 4] = [
        "\"resultType\"",
        "\"ttlMs\"",
        "\"cacheScope\"",
        "\"io.modelcontextprotocol/serverInfo\"",
    ];
    let has_any = QUOTED.iter().any(|k| message::mentions(text, k));
    if !has_any {
        return Cow::Borrowed(result);
    }
    let Ok(mut v) = serde_json::from_str::<Value>(text) else {
        return Cow::Borrowed(result);
    };
    if !legacy_value(&mut v) {
        return Cow::Borrowed(result);
    }
    serde_json::value::to_raw_value(&v).map_or(Cow::Borrowed(result), Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modern_client_gets_result_type_and_cache_hints_where_required() {
        let v = for_client(json!({"tools": []}), "tools/list", Era::Modern);
        assert_eq!(
            v,
            json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
        );
        let v = for_client(json!({"content": []}), "tools/call", Era::Modern);
        assert_eq!(v, json!({"content": [], "resultType": "complete"}));
        let v = for_client(
            json!({"resultType": "x", "ttlMs": 5}),
            "tools/list",
            Era::Modern,
        );
        assert_eq!(v["resultType"], "x");
        assert_eq!(v["ttlMs"], 5);
    }

    #[test]
    fn a_handshake_client_gets_nothing_of_2026() {
        let raw = serde_json::value::to_raw_value(&json!({"tools": [], "resultType": "complete",
            "ttlMs": 10, "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}}}))
        .unwrap();
        let out: Value = serde_json::from_str(legacy_result(&raw).get()).unwrap();
        assert_eq!(out, json!({"tools": []}));
        let raw = serde_json::value::to_raw_value(&json!({"content": [],
            "_meta": {"io.modelcontextprotocol/serverInfo": {}, "keep": 1}}))
        .unwrap();
        let out: Value = serde_json::from_str(legacy_result(&raw).get()).unwrap();
        assert_eq!(out, json!({"content": [], "_meta": {"keep": 1}}));
    }

    #[test]
    fn each_modern_field_and_server_info_alone_is_found_and_removed() {
        // Pins the quoted-key list of the fast check to the fields `legacy_value` removes.
        let mut cases: Vec<Value> = MODERN_RESULT_FIELDS
            .iter()
            .map(|k| json!({ *k: 1, "content": [] }))
            .collect();
        cases.push(json!({"content": [], "_meta": {META_SERVER_INFO: {}}}));
        for v in cases {
            let raw = serde_json::value::to_raw_value(&v).unwrap();
            let out: Value = serde_json::from_str(legacy_result(&raw).get()).unwrap();
            assert_eq!(out, json!({"content": []}), "{v}");
        }
    }

    #[test]
    fn untouched_results_are_borrowed_and_non_objects_pass() {
        let raw = serde_json::value::to_raw_value(&json!({"content": []})).unwrap();
        assert!(matches!(legacy_result(&raw), Cow::Borrowed(_)));
        let raw = serde_json::value::to_raw_value(&json!(["resultType"])).unwrap();
        assert!(matches!(legacy_result(&raw), Cow::Borrowed(_)));
        assert_eq!(for_client(json!(5), "tools/list", Era::Modern), json!(5));
    }
}
