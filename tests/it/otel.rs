//! OpenTelemetry traces (issue 17 §4) against a small OTLP/HTTP receiver run by the test: a
//! span per client request, parented by `_meta.traceparent` (both eras) or the HTTP
//! `traceparent` header, and the span's own context passed on to the child in `_meta`
//! (read back with the fake server's `meta` tool).

use crate::harness::*;
use crate::http::{modern, HttpSup};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One span as the receiver decoded it (ids in lowercase hex).
#[derive(Debug, Clone)]
struct Got {
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    kind: i32,
    status: i32,
    attrs: HashMap<String, String>,
    service: String,
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`,
/// answered 200 with an empty `ExportTraceServiceResponse`; keeps every span and the paths
/// posted to.
struct Receiver {
    addr: String,
    spans: Arc<Mutex<Vec<Got>>>,
    paths: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, p, st) = (spans.clone(), paths.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, p) = (s.clone(), p.clone());
                std::thread::spawn(move || serve(conn, &s, &p));
            }
        });
        Receiver {
            addr,
            spans,
            paths,
            stop,
        }
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (10 s) until a span satisfies `pick`; every span that does.
    fn wait_for(&self, what: &str, pick: impl Fn(&Got) -> bool) -> Vec<Got> {
        let ok = wait_until(Duration::from_secs(10), || self.spans().iter().any(&pick));
        assert!(ok, "no span for {what}; got {:#?}", self.spans());
        self.spans().into_iter().filter(|s| pick(s)).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag and ends.
        let _ = TcpStream::connect(&self.addr);
    }
}

/// One keep-alive connection: requests with a `Content-Length` body until EOF.
fn serve(conn: TcpStream, spans: &Mutex<Vec<Got>>, paths: &Mutex<Vec<String>>) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut start = String::new();
        if r.read_line(&mut start).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        paths
            .lock()
            .unwrap()
            .push(start.split(' ').nth(1).unwrap_or("").to_string());
        let req = ExportTraceServiceRequest::decode(&body[..]).unwrap();
        for rs in req.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .map(|r| attrs(&r.attributes))
                .and_then(|a| a.get("service.name").cloned())
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    spans.lock().unwrap().push(Got {
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        name: s.name,
                        kind: s.kind,
                        status: s.status.map_or(0, |st| st.code),
                        attrs: attrs(&s.attributes),
                        service: service.clone(),
                    });
                }
            }
        }
        out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap();
    }
}

fn attrs(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The trace and parent ids of a `traceparent` text.
fn ids(tp: &str) -> (String, String) {
    let p: Vec<&str> = tp.split('-').collect();
    assert_eq!(p.len(), 4, "{tp}");
    (p[1].to_string(), p[2].to_string())
}

/// What the child received in `_meta.<key>` (the `meta` tool's answer), as JSON.
fn child_meta(resp: &Value) -> Value {
    let t = Client::text(resp);
    serde_json::from_str(&t).unwrap_or(Value::String(t))
}

/// The span of the request with JSON-RPC id `id` (string ids keep requests apart), checked
/// to be the only one.
fn one(r: &Receiver, id: &str) -> Got {
    let got = r.wait_for(id, |s| {
        s.attrs.get("jsonrpc.request.id").map(String::as_str) == Some(id)
    });
    assert_eq!(got.len(), 1, "one span per request: {got:#?}");
    got.into_iter().next().unwrap()
}

/// The child got our span as its parent: same trace, parent = the exported span.
fn child_joined(got: &Got, child: &Value) {
    let tp = child
        .as_str()
        .unwrap_or_else(|| panic!("child saw no traceparent: {child}"));
    assert_eq!(tp, format!("00-{}-{}-01", got.trace_id, got.span_id));
}

/// `tools/call meta {key: traceparent}` params (the `_meta` is added by the caller).
fn meta_call() -> Value {
    json!({"name": "meta", "arguments": {"key": "traceparent"}})
}

/// [`HttpSup::start`], but waiting until `http.addr` holds a whole address: the daemon writes
/// it with `std::fs::write`, so a reader can find the file still empty.
fn http_sup(supervisor_and_servers: &str) -> HttpSup {
    let sup = Supervisor::start(&format!(
        "http_listen = \"127.0.0.1:0\"\n{supervisor_and_servers}"
    ));
    let file = sup.dir.path().join("run/http.addr");
    let mut addr = String::new();
    let ok = wait_until(Duration::from_secs(10), || {
        addr = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .trim()
            .to_string();
        addr.parse::<std::net::SocketAddr>().is_ok()
    });
    assert!(ok, "no address in http.addr; log:\n{}", sup.log());
    HttpSup { sup, addr }
}

const T1: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const T2: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const T3: &str = "00-11112222333344445555666677778888-1234567890abcdef-01";

#[test]
fn otel_a_local_receiver_gets_one_span_per_request_parented_from_meta_or_headers() {
    let rx = Receiver::start();
    let s = http_sup(&format!(
        "otel_endpoint = \"http://{}\"\notel_service_name = \"it-otel\"\n\n{}",
        rx.addr,
        fake_server("f", &[], "http = true")
    ));
    // (a) A 2026-07-28 request on the socket with `_meta.traceparent` and `tracestate`.
    let mut m = s.sup.connect("f");
    let mut p = modern(meta_call());
    p["_meta"]["traceparent"] = json!(T1);
    p["_meta"]["tracestate"] = json!("vendor=abc");
    let resp = m.request(json!("m-1"), "tools/call", p);
    let got = one(&rx, "m-1");
    let (trace, parent) = ids(T1);
    assert_eq!(
        (got.trace_id.as_str(), got.parent.as_str()),
        (trace.as_str(), parent.as_str())
    );
    assert_ne!(got.span_id, parent, "a span of its own");
    child_joined(&got, &child_meta(&resp));
    assert_eq!(got.name, "tools/call meta");
    assert_eq!(got.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(got.status, 0, "unset: ok");
    assert_eq!(got.service, "it-otel");
    for (k, v) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "meta"),
        ("mcp_supervisor.server", "f"),
        ("mcp_supervisor.outcome", "ok"),
        ("mcp.protocol.version", "2026-07-28"),
    ] {
        assert_eq!(
            got.attrs.get(k).map(String::as_str),
            Some(v),
            "{k}: {got:#?}"
        );
    }
    // The request id is the supervisor's, the one in its request log.
    let rid = got.attrs["mcp_supervisor.request_id"].clone();
    assert!(rid.starts_with("r-") && rid.len() == 14, "{rid}");
    assert!(
        s.sup.wait_log(&rid, Duration::from_secs(10)),
        "{rid} is not in the request log:\n{}",
        s.sup.log()
    );
    // `tracestate` is passed on unchanged.
    let st = m.request(json!("m-2"), "tools/call", {
        let mut p = modern(json!({"name": "meta", "arguments": {"key": "tracestate"}}));
        p["_meta"]["traceparent"] = json!(T1);
        p["_meta"]["tracestate"] = json!("vendor=abc");
        p
    });
    assert_eq!(child_meta(&st), json!("vendor=abc"));

    // (b) A handshake-era client on the socket, with `_meta.traceparent`; then without one
    // (a new trace), and with an invalid one (a new trace, never an error).
    let mut h = s.sup.connect("f");
    h.initialize("it-handshake", json!({}));
    let resp = h.call_with_meta("h-1", json!({"traceparent": T2}));
    let got = one(&rx, "h-1");
    let (trace, parent) = ids(T2);
    assert_eq!(
        (got.trace_id.as_str(), got.parent.as_str()),
        (trace.as_str(), parent.as_str())
    );
    child_joined(&got, &child_meta(&resp));
    assert!(!got.attrs.contains_key("mcp.protocol.version"), "{got:#?}");
    let resp = h.call_with_meta("h-2", Value::Null);
    let root = one(&rx, "h-2");
    assert_eq!(root.parent, "", "no parent: a root span");
    assert_eq!(root.trace_id.len(), 32);
    assert_ne!(root.trace_id, "0".repeat(32));
    child_joined(&root, &child_meta(&resp));
    let resp = h.call_with_meta("h-3", json!({"traceparent": "00-nonsense"}));
    assert!(resp.get("result").is_some(), "{resp}");
    let bad = one(&rx, "h-3");
    assert_eq!(bad.parent, "");
    child_joined(&bad, &child_meta(&resp));
    // An error outcome: status Error, error.type the JSON-RPC code.
    let err = h.request(
        json!("h-4"),
        "tools/call",
        json!({"name": "no-such-tool", "arguments": {}}),
    );
    assert!(err.get("error").is_some(), "{err}");
    let got = one(&rx, "h-4");
    assert_eq!(got.status, 2, "STATUS_CODE_ERROR: {got:#?}");
    assert_eq!(got.attrs["mcp_supervisor.outcome"], "protocol_error");
    assert_eq!(got.attrs["error.type"], "-32602");

    // (c) HTTP: a 2026-07-28 POST whose body has no traceparent takes the header's.
    const META_CALL_WITH_T3: [(&str, &str); 4] = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "meta"),
        ("traceparent", T3),
    ];
    let body = json!({"jsonrpc": "2.0", "id": "x-1", "method": "tools/call",
        "params": modern(json!({"name": "meta", "arguments": {"key": "traceparent"}}))});
    let r = s.post("f", &META_CALL_WITH_T3, &body);
    assert_eq!(r.status, 200);
    let resp = r.json();
    let got = one(&rx, "x-1");
    let (trace, parent) = ids(T3);
    assert_eq!(
        (got.trace_id.as_str(), got.parent.as_str()),
        (trace.as_str(), parent.as_str())
    );
    child_joined(&got, &child_meta(&resp));
    // A body's own traceparent wins over the header.
    let mut body = body.clone();
    body["id"] = json!("x-2");
    body["params"]["_meta"]["traceparent"] = json!(T1);
    let r = s.post("f", &META_CALL_WITH_T3, &body);
    let resp = r.json();
    let got = one(&rx, "x-2");
    assert_eq!(got.parent, ids(T1).1);
    child_joined(&got, &child_meta(&resp));
    // Handshake-era HTTP session: the header parents its requests too.
    let sid = s.session("f");
    let r = s.post(
        "f",
        &[
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-06-18"),
            ("traceparent", T2),
        ],
        &json!({"jsonrpc": "2.0", "id": "s-1", "method": "tools/call",
            "params": {"name": "meta", "arguments": {"key": "traceparent"}}}),
    );
    let resp = r.json();
    let got = one(&rx, "s-1");
    assert_eq!(got.parent, ids(T2).1);
    child_joined(&got, &child_meta(&resp));

    // The last span before SIGTERM is not lost to the batch delay: the exit flushes it.
    let resp = h.call_with_meta("z-1", Value::Null);
    assert!(resp.get("result").is_some(), "{resp}");
    let mut s = s;
    s.sup.signal(libc::SIGTERM);
    assert!(
        s.sup.wait_exit(Duration::from_secs(10)).is_some(),
        "{}",
        s.sup.log()
    );
    one(&rx, "z-1");
    assert!(
        rx.paths.lock().unwrap().iter().all(|p| p == "/v1/traces"),
        "{:?}",
        rx.paths.lock().unwrap()
    );
}

#[test]
fn otel_off_leaves_the_clients_meta_untouched() {
    let sup = Supervisor::start(&fake_server("f", &[], ""));
    let mut h = sup.connect("f");
    h.initialize("it", json!({}));
    let resp = h.call_with_meta("1", json!({"traceparent": T2}));
    assert_eq!(child_meta(&resp), json!(T2), "passed through as sent");
    let resp = h.call_with_meta("2", Value::Null);
    assert_eq!(Client::text(&resp), "<unset>", "nothing added");
}

#[test]
fn otel_spans_the_supervisor_cannot_export_are_counted_and_never_block_requests() {
    // Nothing listens on the endpoint: every export fails, requests are served as usual.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let metrics = TcpListener::bind("127.0.0.1:0").unwrap();
    let maddr = metrics.local_addr().unwrap().to_string();
    drop(metrics);
    let sup = Supervisor::start(&format!(
        "otel_endpoint = \"http://{addr}/prefix/\"\nmetrics_listen = \"{maddr}\"\n\n{}",
        fake_server("f", &[], "")
    ));
    let mut h = sup.connect("f");
    h.initialize("it", json!({}));
    for i in 0..5 {
        let r = h.call(json!(i), "echo", json!({"text": "hi"}));
        assert_eq!(Client::text(&r), "hi");
    }
    let ok = wait_until(Duration::from_secs(15), || {
        scrape(&maddr)
            .lines()
            .find(|l| l.starts_with("mcp_supervisor_trace_spans_dropped_total "))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .is_some_and(|n| n >= 6)
    });
    assert!(ok, "{}\n{}", scrape(&maddr), sup.log());
    assert!(
        sup.log()
            .contains(&format!("http://{addr}/prefix/v1/traces")),
        "{}",
        sup.log()
    );
}

/// `GET /metrics` body (empty when the listener is not up yet).
fn scrape(addr: &str) -> String {
    let Ok(mut c) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut s = String::new();
    let _ = c.read_to_string(&mut s);
    s
}

#[test]
fn otel_bad_settings_exit_2_naming_the_key() {
    for (text, key) in [
        (
            "otel_endpoint = \"https://collector:4318\"",
            "supervisor.otel_endpoint",
        ),
        (
            "otel_endpoint = \"127.0.0.1:4318\"",
            "supervisor.otel_endpoint",
        ),
        ("otel_service_name = \"x\"", "supervisor.otel_service_name"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("s.toml");
        std::fs::write(
            &config,
            format!("[supervisor]\n{text}\n\n{}", fake_server("f", &[], "")),
        )
        .unwrap();
        let out = std::process::Command::new(SUPERVISOR)
            .args(["check-config", "-c"])
            .arg(&config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(key) && err.contains(":2"), "{text}: {err}");
    }
}

trait MetaCall {
    fn call_with_meta(&mut self, id: &str, meta: Value) -> Value;
}

impl MetaCall for Client {
    /// `tools/call meta {key: traceparent}` with `params._meta = meta` (none when null).
    fn call_with_meta(&mut self, id: &str, meta: Value) -> Value {
        let mut p = json!({"name": "meta", "arguments": {"key": "traceparent"}});
        if !meta.is_null() {
            p["_meta"] = meta;
        }
        self.request(json!(id), "tools/call", p)
    }
}
