//! Observability (issue 8): one outcome per request, the request log, the metrics exposition
//! (control socket and HTTP), and no secrets in logs.

use crate::harness::*;
use serde_json::json;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

/// The value of the sample whose line starts with `series` (exact labels), or 0.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

fn requests(text: &str, method: &str, outcome: &str) -> f64 {
    sample(
        text,
        &format!("mcp_supervisor_requests_total{{server=\"fake\",method=\"{method}\",outcome=\"{outcome}\"}}"),
    )
}

#[test]
fn every_outcome_class_is_counted_end_to_end() {
    let sup = Supervisor::start(&fake_server(
        "fake",
        &[],
        "request_timeout = \"1s\"\nbackoff_initial = \"100ms\"",
    ));
    let mut a = sup.client("fake");
    // ok
    assert_eq!(
        Client::text(&a.call(json!(1), "echo", json!({"text": "x"}))),
        "x"
    );
    // tool_error: a result with isError from the child
    assert_eq!(
        a.call(json!(2), "fail", json!({}))["result"]["isError"],
        true
    );
    // protocol_error: the child's own -32601
    assert_eq!(
        a.request(json!(3), "no/such", json!({}))["error"]["code"],
        -32601
    );
    // timeout: the deadline passes
    assert_eq!(
        a.call(json!(4), "slow", json!({"ms": 5000}))["error"]["code"],
        -32001
    );
    // cancelled: the client cancels
    a.send(&json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":5000}}}));
    a.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}));
    // invalid: garbage
    a.send_raw(b"not json\n");
    assert_eq!(a.recv()["error"]["code"], -32700);
    // unreachable: the child is killed mid-call
    let r = a.call(json!(6), "crash", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = sup.metrics();
    assert_eq!(requests(&text, "tools/call", "ok"), 1.0, "{text}");
    assert_eq!(requests(&text, "tools/call", "tool_error"), 1.0, "{text}");
    assert_eq!(requests(&text, "other", "protocol_error"), 1.0, "{text}");
    assert_eq!(requests(&text, "tools/call", "timeout"), 1.0, "{text}");
    assert_eq!(requests(&text, "tools/call", "cancelled"), 1.0, "{text}");
    assert_eq!(requests(&text, "other", "invalid"), 1.0, "{text}");
    assert_eq!(requests(&text, "tools/call", "unreachable"), 1.0, "{text}");
    assert_eq!(requests(&text, "initialize", "ok"), 1.0, "{text}");
    assert_eq!(
        sample(
            &text,
            "mcp_supervisor_jsonrpc_errors_total{server=\"fake\",code=\"-32601\"}"
        ),
        1.0,
        "{text}"
    );
    // The request log has one line per request, with the id the client was given.
    let rid = r["result"]["_meta"]["mcp-supervisor/outage"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sup.wait_log(
            &format!("request finished request_id={rid}"),
            Duration::from_secs(5)
        ),
        "{}",
        sup.log()
    );
    let log = sup.log();
    let line = log
        .lines()
        .find(|l| l.contains(&rid) && l.contains("request finished"))
        .unwrap();
    for field in [
        "method=tools/call",
        "tool=\"crash\"",
        "outcome=\"unreachable\"",
        "peer_uid=",
        "client_name=test-client",
        "restarted=true",
    ] {
        assert!(line.contains(field), "{field} missing from {line}");
    }
    // Counters move as traffic continues (after the restart).
    // Calls made while the child restarts wait for it (queue_wait) or fail fast; retry until
    // one succeeds.
    let mut next = 100;
    let back = wait_until(Duration::from_secs(10), || {
        next += 1;
        Client::text(&a.call(json!(next), "echo", json!({"text": "again"}))) == "again"
    });
    assert!(back, "the child came back");
    let text = sup.metrics();
    assert_eq!(requests(&text, "tools/call", "ok"), 2.0, "{text}");
    assert!(
        sample(
            &text,
            "mcp_supervisor_child_restarts_total{server=\"fake\",reason=\"signal\"}"
        ) >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "mcp_supervisor_child_state{server=\"fake\",state=\"ready\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_supervisor_clients{server=\"fake\"}"),
        1.0,
        "{text}"
    );
}

#[test]
fn metrics_parse_as_prometheus_text_and_are_served_over_http() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sup = Supervisor::spawn_config(
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        &fake_server("fake", &[], "probe_interval = \"100ms\""),
        &[],
    );
    let mut a = Client::connect(&sup.socket("fake"));
    a.initialize("m", json!({}));
    a.call(json!(1), "echo", json!({"text": "x"}));
    assert!(sup.wait_log("probing the silent child", Duration::from_secs(5)));
    // HTTP endpoint.
    let mut body = String::new();
    assert!(wait_until(Duration::from_secs(5), || {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        body.clear();
        s.read_to_string(&mut body).is_ok()
    }));
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("application/openmetrics-text"), "{body}");
    let exposition = body.split("\r\n\r\n").nth(1).unwrap().to_string();
    assert!(
        exposition.contains("mcp_supervisor_probes_total{server=\"fake\",result=\"sent\"}"),
        "{exposition}"
    );
    assert!(exposition.trim_end().ends_with("# EOF"));
    // promtool parses it; the only findings allowed are lints about HELP naming, which differs
    // between OpenMetrics (HELP on the family) and the classic text format (HELP on `_total`).
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) is installed by .ci/install-deps");
    p.stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = p.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "promtool failed: {report}"
    );
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.ends_with("no help text"),
            "unexpected promtool finding: {line}"
        );
    }
    // Anything else is 404.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
}

#[test]
fn no_argument_value_result_or_environment_value_reaches_the_log() {
    let sup = Supervisor::start(&fake_server(
        "fake",
        &[],
        "env = { EXAMPLE_API_TOKEN = \"envsecret-7731\" }",
    ));
    let mut a = sup.client("fake");
    let r = a.call(
        json!(1),
        "echo",
        json!({"text": "argsecret-4242", "token": "argsecret-9999"}),
    );
    assert_eq!(Client::text(&r), "argsecret-4242");
    let r = a.call(json!(2), "env", json!({"name": "EXAMPLE_API_TOKEN"}));
    assert_eq!(Client::text(&r), "envsecret-7731");
    a.send(&json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"ms":9000,"password":"argsecret-1111"}}}));
    a.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}));
    assert!(
        sup.wait_log_count("request finished", 4, Duration::from_secs(5)),
        "{}",
        sup.log()
    );
    let log = sup.log();
    assert!(
        log.contains("arg_keys=text,token"),
        "argument keys are logged: {log}"
    );
    for secret in ["argsecret", "envsecret"] {
        assert!(
            !log.contains(secret),
            "{secret} leaked into the log:\n{log}"
        );
    }
}

/// Issue 15 §2: a stderr nobody reads (a stuck log pipe: its 64 KiB buffer holds about 280
/// request log lines) never stalls the relay. Every call is answered; request log lines that
/// cannot be written are dropped and counted in `mcp_supervisor_request_log_dropped_total`,
/// and the daemon's own lines are dropped too instead of blocking its one thread.
#[test]
fn a_stuck_stderr_never_stalls_the_relay_and_dropped_request_log_lines_are_counted() {
    let sup = Supervisor::start_with_unread_stderr(&fake_server("fake", &[], ""));
    let mut c = sup.client("fake");
    // 25,000 calls, 50 in flight at a time: about 6 MB of request log, more than the pipe
    // (64 KiB) and the log thread's queue (4 MiB) hold.
    for round in 0..500 {
        for i in 0..50 {
            c.send(
                &json!({"jsonrpc": "2.0", "id": round * 50 + i, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "x"}}}),
            );
        }
        for _ in 0..50 {
            let r = c.recv();
            assert_eq!(Client::text(&r), "x", "round {round}: {r}");
        }
    }
    // A new connection is served too (its accept and handshake log lines are dropped).
    let mut d = sup.client("fake");
    assert_eq!(
        Client::text(&d.call(json!(1), "echo", json!({"text": "y"}))),
        "y"
    );
    let text = sup.metrics();
    assert!(
        sample(&text, "mcp_supervisor_request_log_dropped_total") > 0.0,
        "{text}"
    );
}

#[test]
fn json_logs_are_one_object_per_line_with_the_fields_the_journal_gets() {
    let sup = Supervisor::spawn_config(
        "log_format = \"json\"",
        &fake_server("fake", &[], ""),
        &[("RUST_LOG", "info")],
    );
    assert!(wait_until(Duration::from_secs(10), || sup
        .socket("fake")
        .exists()));
    let mut a = Client::connect(&sup.socket("fake"));
    a.initialize("json-test", json!({}));
    a.call(json!(1), "echo", json!({"text": "x"}));
    assert!(
        sup.wait_log("\"tool\":\"echo\"", Duration::from_secs(5)),
        "{}",
        sup.log()
    );
    let lines: Vec<serde_json::Value> = sup
        .log()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |msg: &str| {
        lines
            .iter()
            .find(|l| l["message"] == msg)
            .unwrap_or_else(|| panic!("no {msg:?} line in {lines:?}"))
            .clone()
    };
    let spawned = find("spawned");
    assert_eq!(spawned["server"], "fake", "{spawned}");
    assert_eq!(spawned["message_id"], "1cde23195b07479bbeaa39bf488f9760");
    assert!(spawned["child_pid"].as_u64().is_some(), "{spawned}");
    assert_eq!(spawned["level"], "INFO");
    assert!(spawned["timestamp"].as_str().unwrap().ends_with('Z'));
    let call = lines
        .iter()
        .find(|l| l["message"] == "request finished" && l["method"] == "tools/call")
        .unwrap_or_else(|| panic!("no request line: {lines:?}"));
    assert_eq!(call["server"], "fake", "{call}");
    assert_eq!(call["outcome"], "ok", "{call}");
    assert_eq!(call["client_name"], "json-test", "{call}");
    assert!(
        call["request_id"].as_str().unwrap().starts_with("r-"),
        "{call}"
    );
}
