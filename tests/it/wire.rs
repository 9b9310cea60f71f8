//! Issue 47 §5 and §7 as an attacker acts: nesting past `max_message_depth` either way, a
//! 200,000-deep answer (N22); the environment's proxy for loopback url servers and the
//! sign-in (N20); a url server whose errors quote the credentials it was sent (N21).

use crate::harness::*;
use crate::http::{request, HttpSup};
use crate::remote::{incidents, non_loopback_address, outage, ready_client, tinyproxy, wait_state};
use serde_json::{json, Value};
use std::time::Duration;

/// The default `max_message_depth`: what serde_json (so a Rust client) reads.
const BOUND: usize = 127;

/// `k` arrays inside one another.
fn arrays(k: usize) -> String {
    format!("{}{}", "[".repeat(k), "]".repeat(k))
}

/// How deeply a received message nests (the message's own object is 1).
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The 2026-07-28 envelope, asking for log messages at `debug` and up.
fn modern_params(params: Value) -> Value {
    let mut p = modern(params);
    p["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
    p
}

/// A `tools/call` of `echo {text}` as one raw line nested exactly `total` deep: the arrays are
/// an extra argument `n` (the line, params, arguments, then `total - 3` arrays).
fn deep_echo(id: u64, total: usize, text: &str, modern: bool) -> String {
    let meta = if modern {
        r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"deep","version":"1"}}"#
    } else {
        ""
    };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{text}","n":{}}}{meta}}}}}"#,
        arrays(total - 3)
    ) + "\n"
}

/// Calls `tool` in the client's era.
fn call(c: &mut Client, modern: bool, id: u64, tool: &str, args: Value) -> Value {
    let params = json!({"name": tool, "arguments": args});
    let params = if modern {
        modern_params(params)
    } else {
        params
    };
    c.request(json!(id), "tools/call", params)
}

/// Asserts `r` is the outage answer to request `id` for an answer nested too deep.
fn assert_too_deep(r: &Value, id: u64, what: &str) {
    assert_eq!(r["id"], id, "{what}: its own id: {r}");
    assert_eq!(
        r["result"]["isError"], true,
        "{what}: an outage, not a result: {r}"
    );
    let o = outage(r);
    assert_eq!(o["class"], "upstream_error", "{what}: {r}");
    assert_eq!(o["detail"], "too_deep", "{what}: {r}");
    assert_eq!(o["status"], "ready", "{what}: {r}");
}

/// Asserts `r` is the -32600 refusal of request `id` nested too deep; the line is short.
fn assert_refused(r: &Value, id: u64, what: &str) {
    assert_eq!(r["id"], id, "{what}: {r}");
    assert_eq!(r["error"]["code"], -32600, "{what}: {r}");
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("max_message_depth"), "{what}: says why: {r}");
}

/// The value of the series of `family` whose labels include every one of `labels`.
fn metric(sup: &Supervisor, family: &str, labels: &[&str]) -> Option<f64> {
    sup.metrics()
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
}

/// Whether the backlog holds a `notifications/message` of logger `nest`, removing them.
fn nest_messages(c: &mut Client) -> Vec<Value> {
    let (hit, rest): (Vec<Value>, Vec<Value>) = c
        .backlog
        .drain(..)
        .partition(|m| m["method"] == "notifications/message" && m["params"]["logger"] == "nest");
    c.backlog = rest;
    hit
}

/// N22, a stdio child of each era and a client of the same era: at the bound every message
/// is relayed whole, one level past it none is, in either direction; the client stays
/// connected; the child never reads a refused request.
#[test]
fn depth_stdio_child_at_the_bound_is_relayed_and_one_past_it_never_is_both_ways_both_eras() {
    for era in ["legacy", "modern"] {
        let is_modern = era == "modern";
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("child.log");
        let sup = Supervisor::start(&fake_server(
            "deep",
            &["--era", era, "--log", log.to_str().unwrap()],
            "",
        ));
        // A 2026-07-28 client sends no `initialize`: its era is its requests' envelope.
        let mut c = sup.connect("deep");
        if !is_modern {
            c.initialize("depth", json!({"sampling": {}}));
        }

        // Server to client: an answer at the bound arrives whole...
        let r = call(&mut c, is_modern, 1, "nest", json!({"depth": BOUND}));
        assert_eq!(Client::text(&r), format!("nested {BOUND}"), "{era}: {r}");
        assert_eq!(depth(&r), BOUND, "{era}: relayed intact");
        // ... one level deeper is the outage answer, under the request's own id.
        let r = call(&mut c, is_modern, 2, "nest", json!({"depth": BOUND + 1}));
        assert_too_deep(&r, 2, era);

        // Client to server: at the bound the child gets it whole...
        c.send_raw(deep_echo(3, BOUND, "at the bound", is_modern).as_bytes());
        let r = c.response(&json!(3));
        assert_eq!(Client::text(&r), "at the bound", "{era}: {r}");
        let nested = format!(r#""n":{}"#, arrays(BOUND - 3));
        assert!(
            child_saw(&log)
                .iter()
                .any(|l| l.contains("at the bound") && l.contains(&nested)),
            "{era}: the child read the request whole"
        );
        // ... one level deeper gets -32600, and the child never reads it.
        c.send_raw(deep_echo(4, BOUND + 1, "one past", is_modern).as_bytes());
        let r = c.response(&json!(4));
        assert_refused(&r, 4, era);
        let r = call(&mut c, is_modern, 5, "echo", json!({"text": "still here"}));
        assert_eq!(
            Client::text(&r),
            "still here",
            "{era}: the client stays connected"
        );
        assert!(
            !child_saw(&log).iter().any(|l| l.contains("one past")),
            "{era}: the child read a refused request"
        );

        // A notification of the server: relayed at the bound, dropped and counted past it.
        let r = call(
            &mut c,
            is_modern,
            6,
            "nest",
            json!({"depth": BOUND, "as": "notification"}),
        );
        assert_eq!(Client::text(&r), "sent");
        let seen = nest_messages(&mut c);
        assert_eq!(
            seen.len(),
            1,
            "{era}: the notification at the bound; backlog {:?}\n{}",
            c.backlog,
            sup.log()
        );
        assert_eq!(depth(&seen[0]), BOUND);
        let r = call(
            &mut c,
            is_modern,
            7,
            "nest",
            json!({"depth": BOUND + 1, "as": "notification"}),
        );
        // The child wrote the notification before the answer: had it been relayed, it would
        // be here by now.
        assert_eq!(Client::text(&r), "sent");
        assert!(
            nest_messages(&mut c).is_empty(),
            "{era}: relayed past the bound"
        );
        let discarded = |kind: &str| {
            metric(
                &sup,
                "mcp_supervisor_upstream_discarded_total",
                &[
                    r#"server="deep""#,
                    r#"reason="too_deep""#,
                    &format!(r#"kind="{kind}""#),
                ],
            )
        };
        assert_eq!(discarded("notification"), Some(1.0), "{era}: counted");
        assert_eq!(discarded("response"), Some(1.0), "{era}: counted");

        // A request of the server (the handshake era has them): past the bound the child gets
        // -32600 at once and no client is asked; at the bound the client is asked.
        if !is_modern {
            let r = call(
                &mut c,
                false,
                8,
                "nest",
                json!({"depth": BOUND + 1, "as": "request"}),
            );
            let text = Client::text(&r);
            assert!(
                text.starts_with("error:") && text.contains("-32600"),
                "the child's request is answered with -32600: {text}"
            );
            assert!(
                !c.backlog
                    .iter()
                    .any(|m| m["method"] == "sampling/createMessage"),
                "relayed past the bound"
            );
            assert_eq!(discarded("request"), Some(1.0));
            c.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "nest", "arguments": {"depth": BOUND, "as": "request"}}}));
            let q = c
                .server_request("sampling/createMessage", Duration::from_secs(10))
                .expect("the request at the bound reaches the client");
            assert_eq!(depth(&q), BOUND);
            c.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}}));
            let r = c.response(&json!(9));
            assert!(Client::text(&r).starts_with("answered:"), "{r}");
        }
        assert!(!sup.log().contains("panicked"), "{era}");
    }
}

/// N22 as found: a child answers with a 200,000-deep array, and sends one as a notification.
/// No client receives either (a client's parser would fail on them), the caller gets the
/// outage answer at once, nothing panics, and both clients are served on.
#[test]
fn depth_two_hundred_thousand_levels_from_a_child_never_reach_a_client_and_nothing_stalls() {
    let sup = Supervisor::start(&fake_server("abyss", &[], ""));
    let mut a = sup.client("abyss");
    let mut b = sup.client("abyss");
    let pid = Client::text(&a.call(json!(0), "pid", json!({})));
    let r = a.call(json!(1), "nest", json!({"depth": 200_000}));
    assert_too_deep(&r, 1, "200,000 levels");
    let r = a.call(
        json!(2),
        "nest",
        json!({"depth": 200_000, "as": "notification"}),
    );
    assert_eq!(Client::text(&r), "sent");
    assert_eq!(
        Client::text(&b.call(json!(1), "echo", json!({"text": "b"}))),
        "b"
    );
    assert_eq!(
        Client::text(&a.call(json!(3), "echo", json!({"text": "a"}))),
        "a"
    );
    // Each answer above came within its call's 10 s deadline: nothing was held up.
    assert!(nest_messages(&mut a).is_empty() && nest_messages(&mut b).is_empty());
    let now = Client::text(&a.call(json!(4), "pid", json!({})));
    assert_eq!(now, pid, "the child was not restarted");
    assert!(!sup.log().contains("panicked"), "{}", sup.log());
}

/// N22 with a url server, a handshake-era one answering over SSE and a 2026-07-28 one
/// answering with JSON bodies, each with a client of its era: the same bound both ways, and
/// 200,000 levels are refused at once.
#[test]
fn depth_url_server_at_the_bound_is_relayed_and_past_it_never_is_both_ways_both_eras() {
    for (args, is_modern) in [(&["--sse"][..], false), (&["--modern"][..], true)] {
        let era = if is_modern {
            "2026-07-28 JSON"
        } else {
            "handshake SSE"
        };
        let remote = incidents(args);
        let sup = Supervisor::start(&format!("[servers.far]\nurl = {:?}\n", remote.url()));
        let mut c = if is_modern {
            assert!(wait_state(&sup, "far", "ready"), "{}", sup.log());
            sup.connect("far")
        } else {
            ready_client(&sup, "far")
        };
        let r = call(&mut c, is_modern, 1, "nest", json!({"depth": BOUND}));
        assert_eq!(Client::text(&r), format!("nested {BOUND}"), "{era}: {r}");
        assert_eq!(depth(&r), BOUND, "{era}: relayed intact");
        let r = call(&mut c, is_modern, 2, "nest", json!({"depth": BOUND + 1}));
        assert_too_deep(&r, 2, era);
        // Answered within the call's own deadline (10 s), as an error naming the depth.
        let r = call(&mut c, is_modern, 3, "nest", json!({"depth": 200_000}));
        assert_too_deep(&r, 3, era);

        let calls = || remote.count("POST", "tools/call");
        c.send_raw(deep_echo(4, BOUND, "at the bound", is_modern).as_bytes());
        assert_eq!(
            Client::text(&c.response(&json!(4))),
            "at the bound",
            "{era}"
        );
        let before = calls();
        c.send_raw(deep_echo(5, BOUND + 1, "one past", is_modern).as_bytes());
        assert_refused(&c.response(&json!(5)), 5, era);
        let r = call(&mut c, is_modern, 6, "echo", json!({"text": "still here"}));
        assert_eq!(Client::text(&r), "still here", "{era}");
        assert_eq!(
            calls(),
            before + 1,
            "{era}: only the echo reached the server"
        );
        assert!(!sup.log().contains("panicked"), "{era}");
    }
}

/// N22 on the HTTP front: a POST body one level past the bound is 400 with -32600 under its
/// request's id and never reaches the child; one at the bound is served. Both eras.
#[test]
fn depth_http_front_relays_a_body_at_the_bound_and_refuses_one_past_it_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let s = HttpSup::start(&fake_server(
        "h",
        &["--log", log.to_str().unwrap()],
        "http = true",
    ));
    let token = format!("Bearer {}", s.token("h"));
    let sid = s.session("h");
    let handshake = [
        ("Authorization", token.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let modern_h = [
        ("Authorization", token.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
    ];
    for (era, headers, is_modern) in [
        ("handshake", &handshake[..], false),
        ("2026-07-28", &modern_h[..], true),
    ] {
        let at = format!("{era} at the bound");
        let r = request(
            &s.tcp(),
            "POST",
            "/mcp/h",
            headers,
            &deep_echo(1, BOUND, &at, is_modern),
        );
        assert_eq!(r.status, 200, "{era}");
        let v = r.json();
        assert_eq!(v["result"]["content"][0]["text"], at.as_str(), "{era}: {v}");
        let past = format!("{era} one past");
        let r = request(
            &s.tcp(),
            "POST",
            "/mcp/h",
            headers,
            &deep_echo(2, BOUND + 1, &past, is_modern),
        );
        assert_eq!(r.status, 400, "{era}");
        assert_refused(&r.json(), 2, era);
        assert!(
            !child_saw(&log).iter().any(|l| l.contains(&past)),
            "{era}: the child read a refused body"
        );
    }
}

/// N20: with a forward proxy in the daemon's environment (every spelling), a loopback url
/// server is called directly, bearer token and all, and so is the sign-in of another; the
/// proxy carries only what goes elsewhere (a server at this machine's non-loopback address,
/// the control), and the children's environment is the daemon's, untouched.
#[test]
fn proxy_in_the_environment_never_carries_loopback_url_servers_nor_the_sign_in() {
    let proxy = tinyproxy();
    let via = format!("http://127.0.0.1:{}", proxy.port);
    let bearer = "Bearer sidecar-token-0123456789";
    let near = incidents(&["--require-header", &format!("Authorization={bearer}")]);
    let signing = incidents(&["--require-header", "Authorization=Bearer never-issued"]);
    let host = non_loopback_address();
    let far = incidents(&["--bind", "0.0.0.0"]);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, "client-secret-abcdef").unwrap();
    let fake = fake_server("child", &[], "");
    let mut sup = Supervisor::spawn_config(
        "",
        &format!(
            "[servers.near]\nurl = {:?}\nheaders = {{ Authorization = {bearer:?} }}\n\n\
             [servers.localhost]\nurl = {:?}\nheaders = {{ Authorization = {bearer:?} }}\n\n\
             [servers.signing]\nurl = {:?}\n[servers.signing.oauth]\ngrant = \"client_credentials\"\nclient_id = \"cid\"\nclient_secret_file = {:?}\n\n\
             [servers.far]\nurl = {:?}\nallow_plain_http = true\n\n{fake}",
            near.url(),
            format!("http://localhost:{}/mcp", near.port),
            signing.url(),
            secret,
            far.url_at(&host),
        ),
        &[
            ("HTTP_PROXY", via.as_str()),
            ("http_proxy", via.as_str()),
            ("HTTPS_PROXY", via.as_str()),
            ("ALL_PROXY", via.as_str()),
            ("all_proxy", via.as_str()),
            ("NO_PROXY", "corp.example"),
        ],
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("near").exists()),
        "{}",
        sup.log()
    );
    for name in ["near", "localhost"] {
        let mut c = ready_client(&sup, name);
        let r = c.call(json!(1), "echo", json!({"text": name}));
        assert_eq!(Client::text(&r), name, "{name}: {r}");
    }
    // The sign-in's discovery and token requests went to the loopback server itself.
    assert!(
        wait_until(Duration::from_secs(20), || signing
            .requests()
            .iter()
            .any(|r| r["path"].as_str().is_some_and(|p| p != "/mcp"))),
        "the sign-in asked nothing: {:?}\n{}",
        signing.requests(),
        sup.log()
    );
    // What is not loopback still goes through the proxy: the proxy works.
    let mut c = ready_client(&sup, "far");
    assert_eq!(
        Client::text(&c.call(json!(1), "echo", json!({"text": "far"}))),
        "far"
    );
    let seen = proxy.log_text();
    assert!(
        seen.contains(&format!("{host}:{}", far.port)),
        "the proxy did not carry the non-loopback server:\n{seen}"
    );
    for (what, port) in [("near", near.port), ("signing", signing.port)] {
        for form in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
            assert!(
                !seen.contains(&form),
                "{what} went through the proxy ({form}):\n{seen}"
            );
        }
    }
    assert!(!seen.contains("sidecar-token"), "{seen}");
    // The child's environment is the daemon's.
    let mut c = sup.client("child");
    c.initialize("env", json!({}));
    for (name, want) in [("NO_PROXY", "corp.example"), ("HTTP_PROXY", via.as_str())] {
        let r = c.call(json!(name), "env", json!({"name": name}));
        assert_eq!(Client::text(&r), want, "{name}");
    }
    sup.stop();
}

/// N21: url servers that quote the credentials they were sent in their JSON-RPC errors, in
/// `message` and anywhere in `data` (nested, as keys, spelled with `\u` escapes, Basic's
/// decoded form), over JSON and SSE, with a 200 or a 500: every client of the socket reads
/// `<redacted>` instead, a short header value is left alone, and neither the log nor `status`
/// holds a secret.
#[test]
fn redaction_a_url_server_that_echoes_credentials_in_errors_never_reaches_a_client_with_them() {
    use base64::Engine;
    let bearer_token = "sk-live-SECRET-0123456789";
    let api_key = "key-ABCDEFGHIJ-42";
    let basic_pair = "alice:correct-horse-battery";
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(basic_pair)
    );
    let secrets = [
        bearer_token.to_string(),
        api_key.to_string(),
        basic.clone(),
        basic_pair.to_string(),
        "correct-horse-battery".to_string(),
    ];
    let json_srv = incidents(&[
        "--require-header",
        &format!("Authorization=Bearer {bearer_token}"),
    ]);
    let sse_srv = incidents(&["--sse"]);
    let basic_srv = incidents(&["--require-header", &format!("Authorization={basic}")]);
    let sup = Supervisor::start(&format!(
        "[servers.leaky]\nurl = {:?}\nheaders = {{ Authorization = \"Bearer {bearer_token}\", X-Api-Key = {api_key:?}, X-Tenant = \"acme\" }}\n\n\
         [servers.leaky_sse]\nurl = {:?}\nheaders = {{ Authorization = \"Bearer {bearer_token}\", X-Api-Key = {api_key:?} }}\n\n\
         [servers.leaky_basic]\nurl = {:?}\nheaders = {{ Authorization = {basic:?} }}\n",
        json_srv.url(),
        sse_srv.url(),
        basic_srv.url(),
    ));
    for name in ["leaky", "leaky_sse", "leaky_basic"] {
        let mut a = ready_client(&sup, name);
        let mut b = ready_client(&sup, name);
        for (c, id, status) in [(&mut a, 1, 200), (&mut b, 2, 500)] {
            let r = c.call(json!(id), "leak", json!({"status": status}));
            let text = r.to_string();
            assert!(r["error"].is_object(), "{name}: an error: {text}");
            assert!(
                r["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("<redacted>")),
                "{name}: {text}"
            );
            for s in &secrets {
                assert!(
                    !text.contains(s.as_str()),
                    "{name} ({status}): {s} in {text}"
                );
            }
            assert_eq!(
                r["error"]["data"]["escaped"], "<redacted>",
                "{name}: {text}"
            );
            if name == "leaky" {
                // Only secrets are rewritten: a short value is no secret.
                let tenant = r["error"]["data"]["headers"]
                    .as_object()
                    .and_then(|h| h.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-tenant")))
                    .map(|(_, v)| v.clone());
                assert_eq!(tenant, Some(json!("acme")), "{text}");
                assert_eq!(r["error"]["code"], -32603);
            }
        }
    }
    let log = sup.log();
    let status = sup.status_json().to_string();
    for s in &secrets {
        assert!(!log.contains(s.as_str()), "the log holds {s}");
        assert!(!status.contains(s.as_str()), "status holds {s}: {status}");
    }
}
