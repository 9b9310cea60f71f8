use super::access::{host_allowed, origin_allowed};
use super::*;

#[test]
fn loopback_hosts_pass_and_others_only_when_listed() {
    for h in [
        "localhost",
        "localhost:8931",
        "127.0.0.1:1",
        "[::1]:8931",
        "[::1]",
        "a.localhost",
    ] {
        assert!(host_allowed(h, &[]), "{h}");
    }
    for h in [
        "evil.example",
        "evil.example:8931",
        "127.0.0.1.evil.example",
        "",
        "[::2]:80",
        "10.0.0.1",
    ] {
        assert!(!host_allowed(h, &[]), "{h}");
    }
    let listed = vec!["mcp.internal".to_string(), "gw.example:443".to_string()];
    assert!(host_allowed("mcp.internal:8931", &listed));
    assert!(host_allowed("MCP.internal", &listed));
    assert!(host_allowed("gw.example:443", &listed));
    assert!(
        !host_allowed("gw.example:80", &listed),
        "a listed host:port names that port only"
    );
}

#[test]
fn loopback_origins_pass_and_others_only_when_listed_exactly() {
    for o in [
        "http://localhost",
        "http://localhost:6274",
        "https://127.0.0.1:3000",
        "http://[::1]:1",
    ] {
        assert!(origin_allowed(o, &[]), "{o}");
    }
    for o in [
        "null",
        "http://evil.example",
        "http://localhost.evil.example",
        "http://localhost@evil.example",
        "file://",
        "ftp://localhost",
        "http://127.0.0.1.nip.io",
    ] {
        assert!(!origin_allowed(o, &[]), "{o}");
    }
    let listed = vec!["https://app.example.com".to_string()];
    assert!(origin_allowed("https://app.example.com", &listed));
    assert!(!origin_allowed("https://app.example.com.evil", &listed));
}

#[test]
fn accept_header_rules() {
    let h = |v: &str| {
        let mut m = HeaderMap::new();
        m.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        m
    };
    assert!(accepts_json_post(&h("application/json, text/event-stream")));
    assert!(accepts_json_post(&h("*/*")));
    assert!(!accepts_json_post(&HeaderMap::new()));
    assert!(accepts_json_post(&h("application/*, text/*")));
    assert!(accepts_json_post(&h("application/json")));
    assert!(!accepts_json_post(&h("text/event-stream")));
    assert!(!accepts_json_post(&h("text/html")));
    assert!(accepts_sse(&h("text/event-stream;q=0.9, application/json")));
    assert!(!accepts_sse(&h("application/json")));
    assert!(!accepts_sse(&HeaderMap::new()));
}

#[test]
fn era_of_a_sessionless_post() {
    let req = |params: &str| {
        message::parse_one(
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{params}}}"#)
                .as_bytes(),
        )
        .unwrap()
    };
    let plain = req("{}");
    let enveloped = req(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
    let mut modern_header = HeaderMap::new();
    modern_header.insert(VERSION_HEADER, HeaderValue::from_static("2026-07-28"));
    let mut old_header = HeaderMap::new();
    old_header.insert(VERSION_HEADER, HeaderValue::from_static("2025-06-18"));
    assert!(is_modern(&modern_header, std::slice::from_ref(&plain)));
    assert!(is_modern(
        &HeaderMap::new(),
        std::slice::from_ref(&enveloped)
    ));
    assert!(!is_modern(&HeaderMap::new(), std::slice::from_ref(&plain)));
    assert!(!is_modern(&old_header, std::slice::from_ref(&plain)));
}
