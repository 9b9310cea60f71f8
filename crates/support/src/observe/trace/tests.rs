use super::*;
use opentelemetry::Value;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn raw(v: serde_json::Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&v).unwrap()
}

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

fn attr<'a>(s: &'a SpanData, key: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn finish(outcome: Outcome, code: Option<i64>) -> Finish<'static> {
    Finish {
        server: "git",
        endpoint: None,
        rid: RequestId(0xabc),
        method: "tools/call",
        id: "\"a-1\"",
        tool: Some("get_time"),
        outcome,
        code,
        end: at(12),
    }
}

#[test]
fn a_request_with_a_meta_traceparent_is_its_child_and_keeps_its_tracestate() {
    let p = raw(serde_json::json!({"name": "get_time", "_meta": {
        "traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE",
        "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}));
    let s = SpanStart::new(Some(&p), "tools/call", at(10));
    let parent = TraceParent::parse(PARENT).unwrap();
    assert_eq!(s.own.trace_id, parent.trace_id);
    assert_ne!(s.own.span_id, parent.span_id);
    assert_eq!(s.parent, Some(parent.span_id));
    assert_eq!(s.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    assert_eq!(s.version.as_deref(), Some("2026-07-28"));
    let meta = s.meta();
    assert_eq!(meta["traceparent"], s.own.format());
    assert_eq!(meta["tracestate"], "congo=t61rcWkgMzE");
}

#[test]
fn no_or_an_invalid_traceparent_starts_a_new_sampled_trace_and_drops_the_tracestate() {
    for p in [
        None,
        Some(raw(serde_json::json!({"name": "x"}))),
        Some(raw(
            serde_json::json!({"_meta": {"traceparent": "00-zz", "tracestate": "a=b"}}),
        )),
        Some(raw(serde_json::json!({"_meta": {"traceparent": 7}}))),
        Some(raw(serde_json::json!([1, 2]))),
    ] {
        let s = SpanStart::new(p.as_deref(), "tools/list", at(1));
        assert_eq!(s.parent, None, "{p:?}");
        assert_eq!(s.tracestate, None);
        assert!(s.own.sampled());
        assert_ne!(s.own.trace_id, [0; 16]);
        assert_eq!(s.meta().len(), 1);
    }
}

#[test]
fn an_unsampled_parent_is_followed_and_its_span_not_submitted() {
    let parent = TraceParent::parse(&PARENT.replace("-01", "-00")).unwrap();
    let s = SpanStart::with_ids(Some(parent), None, [9; 8], [7; 16], at(1));
    assert!(!s.own.sampled());
    assert!(s.meta()["traceparent"].as_str().unwrap().ends_with("-00"));
    let data = span_data(s, finish(Outcome::Ok, None));
    assert!(!data.span_context.is_sampled());
    submit(data); // traces are off in unit tests: a no-op either way, and never a drop
    assert_eq!(dropped(), 0);
}

#[test]
fn span_data_follows_the_mcp_conventions() {
    let parent = TraceParent::parse(PARENT).unwrap();
    let s = SpanStart::with_ids(Some(parent), Some("a=b"), [1; 8], [2; 16], at(10));
    let d = span_data(s, finish(Outcome::Ok, None));
    assert_eq!(d.name, "tools/call get_time");
    assert_eq!(d.span_kind, SpanKind::Server);
    assert_eq!(
        d.span_context.trace_id(),
        TraceId::from_bytes(parent.trace_id)
    );
    assert_eq!(d.span_context.span_id(), SpanId::from_bytes([1; 8]));
    assert_eq!(d.parent_span_id, SpanId::from_bytes(parent.span_id));
    assert!(d.parent_span_is_remote);
    assert_eq!(d.span_context.trace_state().header(), "a=b");
    assert_eq!((d.start_time, d.end_time), (at(10), at(12)));
    assert_eq!(d.status, Status::Unset);
    for (k, v) in [
        ("mcp.method.name", "tools/call"),
        ("jsonrpc.request.id", "a-1"),
        ("gen_ai.tool.name", "get_time"),
        ("gen_ai.operation.name", "execute_tool"),
        ("mcp_supervisor.server", "git"),
        ("mcp_supervisor.request_id", "r-000000000abc"),
        ("mcp_supervisor.outcome", "ok"),
    ] {
        assert_eq!(attr(&d, k).map(|v| v.as_str()), Some(v.into()), "{k}");
    }
    assert!(attr(&d, "error.type").is_none());
    assert!(attr(&d, "mcp_supervisor.endpoint").is_none());
}

#[test]
fn a_request_through_an_endpoint_names_it_beside_its_source() {
    let s = SpanStart::with_ids(None, None, [1; 8], [2; 16], at(10));
    let mut f = finish(Outcome::Ok, None);
    f.endpoint = Some("desk");
    let d = span_data(s, f);
    assert_eq!(
        attr(&d, "mcp_supervisor.endpoint").map(Value::as_str),
        Some("desk".into())
    );
    assert_eq!(
        attr(&d, "mcp_supervisor.server").map(Value::as_str),
        Some("git".into())
    );
}

#[test]
fn error_outcomes_set_status_and_error_type_but_a_cancel_does_not() {
    let s = || SpanStart::with_ids(None, None, [1; 8], [2; 16], at(10));
    let d = span_data(s(), finish(Outcome::ProtocolError, Some(-32602)));
    assert!(matches!(d.status, Status::Error { .. }));
    assert_eq!(
        attr(&d, "error.type").map(Value::as_str),
        Some("-32602".into())
    );
    assert_eq!(
        attr(&d, "rpc.response.status_code").map(Value::as_str),
        Some("-32602".into())
    );
    assert_eq!(d.parent_span_id, SpanId::INVALID);
    let d = span_data(s(), finish(Outcome::ToolError, None));
    assert_eq!(
        attr(&d, "error.type").map(Value::as_str),
        Some("tool_error".into())
    );
    let d = span_data(s(), finish(Outcome::Cancelled, None));
    assert_eq!(d.status, Status::Unset);
    // A clock that went back between arrival and answer never makes a negative span.
    let mut f = finish(Outcome::Ok, None);
    f.end = at(1);
    assert_eq!(span_data(s(), f).end_time, at(10));
}

#[test]
fn a_prompt_names_its_span() {
    let p = raw(serde_json::json!({"name": "summarize", "arguments": {}}));
    let s = SpanStart::new(Some(&p), "prompts/get", at(1));
    let mut f = finish(Outcome::Ok, None);
    f.method = "prompts/get";
    f.tool = None;
    let d = span_data(s, f);
    assert_eq!(d.name, "prompts/get summarize");
    assert_eq!(
        attr(&d, "gen_ai.prompt.name").map(Value::as_str),
        Some("summarize".into())
    );
}
