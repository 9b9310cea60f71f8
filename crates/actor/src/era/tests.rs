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
