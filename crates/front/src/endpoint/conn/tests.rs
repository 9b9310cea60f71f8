//! The endpoint client's decisions, driven with parsed messages and a virtual clock.

use super::*;
use vocab::jsonrpc::message::parse_one;

fn plan(n: usize) -> Plan {
    Plan {
        name: "ep".into(),
        sources: (0..n)
            .map(|i| (format!("s{i}"), (i == 0).then(|| "first".to_string())))
            .collect(),
        status_tool: None,
    }
}

fn msg(v: Value) -> Message {
    parse_one(serde_json::to_vec(&v).unwrap().as_slice()).unwrap()
}

/// The messages sent to each source and the lines to the client.
/// What a decision sent each source, and what it sent the client.
type Split = (Vec<(usize, Value)>, Vec<(Address, Value)>);

fn split(effects: Vec<Effect>) -> Split {
    let mut to_sources = Vec::new();
    let mut to_client = Vec::new();
    for e in effects {
        match e {
            Effect::Source(i, m) => {
                let line = match m.kind {
                    Kind::Response => match (&m.result, &m.error) {
                        (Some(r), _) => Out::result(m.id.as_deref().unwrap(), &r.raw()).encode(),
                        (_, Some(e)) => Out::error(m.id.as_deref().unwrap(), e).encode(),
                        _ => unreachable!(),
                    },
                    _ => Out::request(m.id.as_deref(), m.method(), m.params.as_deref()).encode(),
                };
                to_sources.push((i, serde_json::from_slice(&line).unwrap()));
            }
            Effect::Client(a, l) => {
                to_client.push((a, serde_json::from_slice(&l.to_bytes()).unwrap()))
            }
            Effect::Close | Effect::Answered(_) => {}
        }
    }
    (to_sources, to_client)
}

/// A source's answer line to the request `sent` (as the actor delivers it).
fn answer(c: &mut Conn, source: usize, sent: &Value, result: Value, now: Instant) -> Vec<Effect> {
    let id = sent["id"].clone();
    let line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap();
    c.on_source(
        source,
        Address::Response(id.to_string()),
        Line::from(bytes::Bytes::from(line)),
        now,
    )
}

/// A source's outage answer (`status`) to the request `sent`.
fn fail(c: &mut Conn, source: usize, sent: &Value, status: &str, now: Instant) -> Vec<Effect> {
    let e = json!({"code": -32000, "message": "down",
        "data": {"server": format!("s{source}"), "status": status}});
    error_answer(c, source, sent, e, now)
}

/// A source's error answer `e` to the request `sent`.
fn error_answer(c: &mut Conn, source: usize, sent: &Value, e: Value, now: Instant) -> Vec<Effect> {
    let id = sent["id"].clone();
    let line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "error": e})).unwrap();
    c.on_source(
        source,
        Address::Response(id.to_string()),
        Line::from(bytes::Bytes::from(line)),
        now,
    )
}

fn initialize(c: &mut Conn, now: Instant) -> Vec<(usize, Value)> {
    let (sent, to_client) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}})),
        now,
    ));
    assert!(to_client.is_empty());
    sent
}

#[test]
fn initialize_waits_for_every_source_and_answers_with_the_union_and_names_the_one_down() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let sent = initialize(&mut c, now);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|(_, m)| m["method"] == "initialize"));
    let (_, none) = split(answer(
        &mut c,
        0,
        &sent[0].1,
        json!({"protocolVersion": "2025-06-18", "capabilities": {"prompts": {}, "logging": {}},
            "serverInfo": {"name": "zero"}, "instructions": "Use s0 for files."}),
        now,
    ));
    assert!(none.is_empty(), "answers only when every source did");
    let (_, out) = split(fail(&mut c, 1, &sent[1].1, "backoff", now));
    let r = &out[0].1["result"];
    assert_eq!(r["protocolVersion"], "2025-06-18");
    assert_eq!(r["serverInfo"]["name"], "ep");
    assert_eq!(r["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(r["capabilities"]["prompts"]["listChanged"], true);
    assert!(r["capabilities"]["logging"].is_object());
    let text = r["instructions"].as_str().unwrap();
    assert!(text.contains("## s0: first\nUse s0 for files."), "{text}");
    assert!(text.contains("## s1\nUnavailable (backoff)"), "{text}");
}

#[test]
fn a_silent_source_does_not_hold_the_handshake_past_the_fan_wait() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let sent = initialize(&mut c, now);
    answer(
        &mut c,
        0,
        &sent[0].1,
        json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
        now,
    );
    let at = c.next_deadline().unwrap();
    assert_eq!(at, now + FAN_WAIT);
    let (_, out) = split(c.tick(at));
    assert!(out[0].1["result"]["instructions"]
        .as_str()
        .unwrap()
        .contains("Unavailable (starting)"));
    // The source is asked again later; when it answers, the client hears the lists changed.
    c.on_client(
        msg(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        at,
    );
    let retry = c.next_deadline().unwrap();
    let (again, _) = split(c.tick(retry));
    let reinit = again
        .iter()
        .find(|(i, m)| *i == 1 && m["method"] == "initialize")
        .unwrap();
    let (sent2, out) = split(answer(
        &mut c,
        1,
        &reinit.1,
        json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
        retry,
    ));
    assert!(sent2
        .iter()
        .any(|(i, m)| *i == 1 && m["method"] == "notifications/initialized"));
    assert_eq!(out[0].1["method"], "notifications/tools/list_changed");
}

#[test]
fn lists_follow_each_sources_pages_and_page_the_merged_list_with_their_own_cursor() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})),
        now,
    ));
    let tools = |prefix: &str, n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"name": format!("{prefix}{i}"), "inputSchema": {}}))
            .collect()
    };
    // s0 has two pages.
    let (more, _) = split(answer(
        &mut c,
        0,
        &sent[0].1,
        json!({"tools": tools("a", 300), "nextCursor": "p2"}),
        now,
    ));
    assert_eq!(more[0].1["params"]["cursor"], "p2");
    answer(
        &mut c,
        0,
        &more[0].1,
        json!({"tools": tools("b", 300)}),
        now,
    );
    let (_, out) = split(answer(
        &mut c,
        1,
        &sent[1].1,
        json!({"tools": tools("c", 1)}),
        now,
    ));
    let page1 = &out[0].1["result"];
    assert_eq!(page1["tools"].as_array().unwrap().len(), PAGE);
    let cursor = page1["nextCursor"].as_str().unwrap().to_string();
    let (_, out) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": cursor}})),
        now,
    ));
    let page2 = &out[0].1["result"];
    let names: Vec<&str> = page2["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 601 - PAGE);
    assert_eq!(names.last(), Some(&"s1__c0"));
    assert!(page2.get("nextCursor").is_none());
    // A cursor from nowhere is invalid params.
    let (_, out) = split(c.on_client(
        msg(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "9.0"}}),
        ),
        now,
    ));
    assert_eq!(out[0].1["error"]["code"], -32602);
}

#[test]
fn a_cancel_reaches_the_source_under_the_number_it_was_sent_with() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        now,
    ));
    answer(
        &mut c,
        0,
        &sent[0].1,
        json!({"tools": [{"name": "slow"}]}),
        now,
    );
    answer(
        &mut c,
        1,
        &sent[1].1,
        json!({"tools": [{"name": "slow"}]}),
        now,
    );
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {"name": "s1__slow", "arguments": {}}})),
        now,
    ));
    assert_eq!(sent[0].0, 1);
    assert_eq!(sent[0].1["params"]["name"], "slow");
    let minted = sent[0].1["id"].clone();
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "call-1", "reason": "user"}})),
        now,
    ));
    assert_eq!(
        sent,
        vec![(
            1,
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": minted, "reason": "user"}})
        )]
    );
}

#[test]
fn two_sources_asking_with_the_same_id_are_told_apart_and_answered_each() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let ask = |c: &mut Conn, i: usize| {
        let line = Line::from(bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#,
        ));
        let to = Address::Request {
            id: message::raw(&json!(1)),
            method: "sampling/createMessage".into(),
        };
        split(c.on_source(i, to, line, now)).1
    };
    let a = ask(&mut c, 0);
    let b = ask(&mut c, 1);
    assert_ne!(a[0].1["id"], b[0].1["id"]);
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": b[0].1["id"], "result": {"ok": 1}})),
        now,
    ));
    assert_eq!(
        sent,
        vec![(1, json!({"jsonrpc": "2.0", "id": 1, "result": {"ok": 1}}))]
    );
}

#[test]
fn list_changed_from_several_sources_is_sent_once_until_the_client_lists_again() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let sent = initialize(&mut c, now);
    answer(&mut c, 0, &sent[0].1, json!({"capabilities": {}}), now);
    answer(&mut c, 1, &sent[1].1, json!({"capabilities": {}}), now);
    c.on_client(
        msg(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        now,
    );
    let changed = |c: &mut Conn, i: usize| {
        let line = Line::from(bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
        ));
        split(c.on_source(i, Address::Session, line, now)).1.len()
    };
    assert_eq!(changed(&mut c, 0), 1);
    assert_eq!(changed(&mut c, 1), 0);
    c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})),
        now,
    );
    assert_eq!(changed(&mut c, 1), 1);
}

#[test]
fn a_source_log_line_says_which_source_it_is_from() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let line = Line::from(bytes::Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"db","data":"x"}}"#,
    ));
    let (_, out) = split(c.on_source(1, Address::Session, line, now));
    assert_eq!(out[0].1["params"]["logger"], "s1/db");
}

#[test]
fn a_source_the_peer_may_not_use_is_never_asked_and_its_closed_link_answers_as_an_outage() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, false], View::default());
    let sent = initialize(&mut c, now);
    assert_eq!(sent.len(), 1);
    let (_, out) = split(answer(
        &mut c,
        0,
        &sent[0].1,
        json!({"capabilities": {}}),
        now,
    ));
    assert!(out[0].1["result"]["instructions"]
        .as_str()
        .unwrap()
        .contains("## s1\nNot available to this client."));
    // A forwarded call whose source then closes this client is answered as an outage.
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        now,
    ));
    answer(
        &mut c,
        0,
        &sent[0].1,
        json!({"tools": [{"name": "t"}]}),
        now,
    );
    c.on_client(
        msg(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "s0__t"}}),
        ),
        now,
    );
    let (_, out) = split(c.source_closed(0, now));
    assert_eq!(out[0].1["result"]["isError"], true);
    assert!(out[0].1["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("server=s0 status=stopped"));
}

#[test]
fn a_2026_clients_call_before_any_list_fills_the_catalog_in_its_era_and_its_answers_are_complete() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "m"}, "progressToken": 9});
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "s1__t", "arguments": {}, "_meta": meta}})),
        now,
    ));
    // The fill carries the client's envelope (and no progress token) to every source.
    assert_eq!(sent.len(), 2);
    for (_, m) in &sent {
        assert_eq!(m["method"], "tools/list");
        let got = &m["params"]["_meta"];
        assert_eq!(
            got["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{m}"
        );
        assert!(got.get("progressToken").is_none(), "{m}");
    }
    answer(&mut c, 0, &sent[0].1, json!({"tools": []}), now);
    let (fwd, _) = split(answer(
        &mut c,
        1,
        &sent[1].1,
        json!({"tools": [{"name": "t"}]}),
        now,
    ));
    assert_eq!(fwd[0].1["params"]["name"], "t");
    // A list the endpoint answers itself is complete for a 2026 client.
    let (sent, _) = split(c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})),
        now,
    ));
    answer(&mut c, 0, &sent[0].1, json!({"tools": []}), now);
    let (_, out) = split(answer(&mut c, 1, &sent[1].1, json!({"tools": []}), now));
    let r = &out[0].1["result"];
    assert_eq!(
        (
            r["resultType"].as_str(),
            r["ttlMs"].as_i64(),
            r["cacheScope"].as_str()
        ),
        (Some("complete"), Some(0), Some("private")),
        "{r}"
    );
}

#[test]
fn requests_of_the_sources_beyond_the_bound_are_answered_with_an_error_at_once() {
    let now = Instant::now();
    let mut c = Conn::new(plan(1), &[true], View::default());
    let ask = |c: &mut Conn, n: usize| {
        let line = Line::from(bytes::Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"roots/list"}}"#
        )));
        let to = Address::Request {
            id: message::raw(&json!(n)),
            method: "roots/list".into(),
        };
        split(c.on_source(0, to, line, now))
    };
    for n in 0..MAX_ASKED {
        let (to_sources, to_client) = ask(&mut c, n);
        assert!(to_sources.is_empty() && to_client.len() == 1);
    }
    let (to_sources, to_client) = ask(&mut c, MAX_ASKED);
    assert!(to_client.is_empty());
    assert_eq!(to_sources[0].1["error"]["code"], -32002);
    assert_eq!(to_sources[0].1["id"], MAX_ASKED);
}

#[test]
fn a_connection_seeded_with_anothers_catalog_calls_by_name_at_once_and_lists_on_a_miss() {
    let now = Instant::now();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "m"}});
    let call = |id: i64, name: &str| {
        msg(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": {}, "_meta": meta}}))
    };
    // The first connection fills its catalog to call, and offers it once.
    let mut a = Conn::new(plan(2), &[true, true], View::default());
    assert!(a.take_catalog().is_none());
    let (sent, _) = split(a.on_client(call(1, "s1__t"), now));
    answer(&mut a, 0, &sent[0].1, json!({"tools": []}), now);
    answer(
        &mut a,
        1,
        &sent[1].1,
        json!({"tools": [{"name": "t"}]}),
        now,
    );
    let shared = a.take_catalog().expect("offered after the merge");
    assert!(a.take_catalog().is_none());
    // The next connection routes the same name without listing.
    let mut b = Conn::new(plan(2), &[true, true], View::default());
    b.seed(shared.clone());
    let (sent, _) = split(b.on_client(call(1, "s1__t"), now));
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, 1);
    assert_eq!(sent[0].1["method"], "tools/call");
    assert_eq!(sent[0].1["params"]["name"], "t");
    // A name the seed does not know is looked up by listing every source.
    let (sent, _) = split(b.on_client(call(2, "s0__new"), now));
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|(_, m)| m["method"] == "tools/list"));
    // A seed built for other sources is ignored.
    let mut c = Conn::new(plan(3), &[true, true, true], View::default());
    c.seed(shared);
    let (sent, _) = split(c.on_client(call(1, "s1__t"), now));
    assert!(sent.iter().all(|(_, m)| m["method"] == "tools/list"));
}

#[test]
fn a_listen_part_a_source_refuses_is_not_asked_again_and_a_repeated_id_is_refused() {
    let now = Instant::now();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "m"}});
    let listen = |id: i64| {
        msg(
            json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": meta}}),
        )
    };
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let (sent, acked) = split(c.on_client(listen(7), now));
    assert_eq!(sent.len(), 2);
    assert_eq!(
        acked[0].1["method"], "notifications/subscriptions/acknowledged",
        "{acked:?}"
    );
    // s0 refuses (a limit): left out for good. s1 is down (an outage): asked again later.
    let limit = json!({"code": -32002, "message": "no"});
    error_answer(&mut c, 0, &sent[0].1, limit, now);
    fail(&mut c, 1, &sent[1].1, "backoff", now);
    let at = c.next_deadline().expect("a reopen is due");
    let (again, _) = split(c.tick(at));
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].0, 1);
    assert_eq!(again[0].1["method"], "subscriptions/listen");
    // The same id again while the stream is open: refused, nothing opened.
    let (sent, out) = split(c.on_client(listen(7), now));
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(out[0].1["error"]["code"], -32600, "{out:?}");
}

#[test]
fn a_hand_over_replays_the_handshake_level_and_live_subscriptions_and_counts_what_is_unfinished() {
    let now = Instant::now();
    let mut c = Conn::new(plan(2), &[true, true], View::default());
    let sent = initialize(&mut c, now);
    // The initialize fan-out is unfinished until every source answered.
    assert_eq!(c.unfinished(), 1);
    for (i, m) in &sent {
        answer(
            &mut c,
            *i,
            m,
            json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
            now,
        );
    }
    assert_eq!(c.unfinished(), 0);
    c.on_client(
        msg(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        now,
    );
    c.on_client(
        msg(json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}})),
        now,
    );
    for (id, method, uri) in [
        (2, "resources/subscribe", "file:///a"),
        (3, "resources/subscribe", "file:///b"),
        (4, "resources/unsubscribe", "file:///a"),
    ] {
        c.on_client(
            msg(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"uri": uri}})),
            now,
        );
    }
    let state = c.hand_over();
    let lines: Vec<Value> = state
        .replay
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = lines
        .iter()
        .map(|l| l["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "logging/setLevel",
            "resources/subscribe"
        ]
    );
    assert_eq!(lines[0]["params"]["clientInfo"]["name"], "t");
    assert_eq!(lines[2]["params"]["level"], "debug");
    assert_eq!(lines[3]["params"]["uri"], "file:///b");
    for l in lines.iter().filter(|l| l.get("id").is_some()) {
        assert!(
            l["id"]
                .as_str()
                .unwrap()
                .starts_with(actor::park::REPLAY_ID_PREFIX),
            "{l}"
        );
    }
    assert!(state.listens.is_empty());
}

#[test]
fn a_hand_over_reopens_a_2026_clients_listen_streams_under_its_own_ids() {
    let now = Instant::now();
    let mut c = Conn::new(plan(1), &[true], View::default());
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "m", "version": "1"}});
    c.on_client(
        msg(
            json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": meta}}),
        ),
        now,
    );
    // An open stream is not unfinished: it is replayed.
    assert_eq!(c.unfinished(), 0);
    let state = c.hand_over();
    assert!(state.replay.is_empty(), "{:?}", state.replay);
    let l: Value = serde_json::from_str(&state.listens[0]).unwrap();
    assert_eq!(l["id"], "L");
    assert_eq!(l["method"], "subscriptions/listen");
    assert_eq!(
        l["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    assert_eq!(
        l["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
}

/// The era of a connection is decided from the envelope as the actor and the HTTP front read
/// it (issue 48 §4), never from a substring of the raw params: each case here is one where the
/// old substring search and the parser disagreed (the first three), or one they agree on.
#[test]
fn the_era_is_read_from_the_envelope_as_the_actor_reads_it_not_from_a_substring() {
    let first = |v: Value| modern_first(&msg(v));
    // The key mentioned in an argument, not in `_meta`: a handshake-era client.
    assert!(!first(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "search", "arguments": {"q": "io.modelcontextprotocol/protocolVersion"}}})
    ));
    // A version that is not a string.
    assert!(!first(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": 20260728}}})
    ));
    // A `_meta` that is not an object.
    assert!(!first(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": "io.modelcontextprotocol/protocolVersion"}})
    ));
    // The envelope itself: a 2026-07-28 client; `server/discover` is one without it; an
    // `initialize` never is.
    assert!(first(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
    ));
    assert!(first(
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover"})
    ));
    assert!(!first(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
    ));
}
