use super::*;

#[test]
fn method_labels_are_bounded() {
    assert_eq!(method_label("tools/call"), "tools/call");
    assert_eq!(method_label("x/evil-{label}"), "other");
}

#[test]
fn renders_openmetrics_text() {
    let m = Metrics::new();
    m.request("a", "tools/call", Outcome::ToolError, None, 0.01);
    m.request(
        "a",
        "tools/call",
        Outcome::ProtocolError,
        Some(-32601),
        0.02,
    );
    m.set_state("a", "ready");
    let text = m.render();
    assert!(text.contains("mcp_supervisor_requests_total{server=\"a\",method=\"tools/call\",outcome=\"tool_error\"} 1"), "{text}");
    assert!(
        text.contains("mcp_supervisor_jsonrpc_errors_total{server=\"a\",code=\"-32601\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mcp_supervisor_child_state{server=\"a\",state=\"ready\"} 1"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));
}

#[test]
fn outcome_slots_follow_all() {
    for (i, o) in Outcome::ALL.iter().enumerate() {
        assert_eq!(o.index(), i);
    }
    assert_eq!(method_of(method_index("tools/list")), "tools/list");
    assert_eq!(method_of(method_index("x/evil")), "other");
}

/// The series lines of `text` for server `server` (the order of series in a family is not
/// fixed, so they are compared as a sorted set).
fn series(text: &str, server: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| l.contains(&format!("server=\"{server}\"")))
        .map(|l| l.replace(&format!("server=\"{server}\""), "server=\"_\""))
        .collect();
    v.sort();
    v
}

#[test]
fn the_handle_and_the_methods_update_the_same_series() {
    let m = Metrics::new();
    let h = m.server("a");
    assert_eq!(h.server(), "a");
    // Resolving a handle creates no series: the output only changes with updates.
    assert!(series(&m.render(), "a").is_empty());
    let by_handle = |h: &ServerMetrics| {
        h.request("tools/call", Outcome::ProtocolError, Some(-32601), 0.5);
        h.request("x/custom", Outcome::Ok, None, 0.002);
        h.request("ping", Outcome::Invalid, Some(-32099), 0.0);
        h.set_in_flight(3);
        h.set_clients(2);
        h.restart("signal");
        h.restart("odd");
        h.probe("sent");
        h.probe("answered");
        h.set_state("ready");
        h.bytes("to_child", 10);
        h.bytes("to_client", 7);
        h.bytes("sideways", 1);
    };
    let by_methods = |m: &Metrics, s: &str| {
        m.request(s, "tools/call", Outcome::ProtocolError, Some(-32601), 0.5);
        m.request(s, "x/custom", Outcome::Ok, None, 0.002);
        m.request(s, "ping", Outcome::Invalid, Some(-32099), 0.0);
        m.set_in_flight(s, 3);
        m.set_clients(s, 2);
        m.restart(s, "signal");
        m.restart(s, "odd");
        m.probe(s, "sent");
        m.probe(s, "answered");
        m.set_state(s, "ready");
        m.bytes(s, "to_child", 10);
        m.bytes(s, "to_client", 7);
        m.bytes(s, "sideways", 1);
    };
    // The same updates through either path render the same series ...
    by_handle(&h);
    by_methods(&m, "b");
    let text = m.render();
    assert_eq!(series(&text, "a"), series(&text, "b"));
    assert!(
        text.contains(
            "mcp_supervisor_requests_total{server=\"a\",method=\"other\",outcome=\"ok\"} 1"
        ),
        "{text}"
    );
    // ... and both paths update one series: the handle's counters are the family's.
    by_methods(&m, "a");
    by_handle(&h.clone());
    by_handle(&m.server("a"));
    let text = m.render();
    for line in [
        "mcp_supervisor_requests_total{server=\"a\",method=\"tools/call\",outcome=\"protocol_error\"} 4",
        "mcp_supervisor_jsonrpc_errors_total{server=\"a\",code=\"-32601\"} 4",
        "mcp_supervisor_jsonrpc_errors_total{server=\"a\",code=\"-32099\"} 4",
        "mcp_supervisor_request_duration_seconds_count{server=\"a\",method=\"tools/call\"} 4",
        "mcp_supervisor_child_restarts_total{server=\"a\",reason=\"signal\"} 4",
        "mcp_supervisor_child_restarts_total{server=\"a\",reason=\"odd\"} 4",
        "mcp_supervisor_probes_total{server=\"a\",result=\"sent\"} 4",
        "mcp_supervisor_relayed_bytes_total{server=\"a\",direction=\"to_child\"} 40",
        "mcp_supervisor_relayed_bytes_total{server=\"a\",direction=\"sideways\"} 4",
        "mcp_supervisor_child_state{server=\"a\",state=\"ready\"} 1",
        "mcp_supervisor_child_state{server=\"a\",state=\"failed\"} 0",
        "mcp_supervisor_requests_in_flight{server=\"a\"} 3",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    m.set_state("a", "failed");
    h.set_in_flight(0);
    let text = m.render();
    assert!(text.contains("mcp_supervisor_child_state{server=\"a\",state=\"ready\"} 0"));
    assert!(text.contains("mcp_supervisor_child_state{server=\"a\",state=\"failed\"} 1"));
    assert!(text.contains("mcp_supervisor_requests_in_flight{server=\"a\"} 0"));
}

mod http {
    use super::super::http::{serve_http_with, Limits};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_util::sync::CancellationToken;

    const LIMITS: Limits = Limits {
        connections: 2,
        head: Duration::from_millis(300),
        lifetime: Duration::from_millis(600),
        metrics_at_once: 1,
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_secs(1),
        log_every: Duration::from_secs(10),
    };

    async fn start(
        limits: Limits,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve_http_with(l, stop.clone(), limits));
        (addr, stop, task)
    }

    async fn read_all(c: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out))
            .await
            .expect("the server closes the connection");
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        read_all(&mut c).await
    }

    #[tokio::test]
    async fn serves_metrics_probes_and_404_one_request_per_connection() {
        let (addr, stop, task) = start(LIMITS).await;
        let m = get(addr, "/metrics?x=1").await;
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(m.contains("application/openmetrics-text"), "{m}");
        let h = get(addr, "/healthz").await;
        assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
        assert!(h.ends_with("{\"status\":\"ok\"}\n"), "{h}");
        assert!(get(addr, "/readyz").await.contains("\"ready\""));
        assert!(get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        assert!(read_all(&mut c).await.starts_with("HTTP/1.1 405"));
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_probe_is_answered_while_idle_connections_fill_the_listener() {
        let (addr, stop, task) = start(LIMITS).await;
        // Silent clients, more than the listener keeps ...
        let mut idle = Vec::new();
        for _ in 0..LIMITS.connections + 3 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // ... and a probe still gets its answer (it closes the oldest to get a place).
        let h = get(addr, "/healthz").await;
        assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
        // Every silent one is closed unanswered (closed for a newcomer, or past its head
        // timeout).
        for mut c in idle {
            assert_eq!(read_all(&mut c).await, "");
        }
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn metrics_beyond_its_share_get_503_and_probes_do_not_wait() {
        let (addr, stop, task) = start(Limits {
            metrics_at_once: 0,
            ..LIMITS
        })
        .await;
        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 503"), "{m}");
        assert!(m.to_ascii_lowercase().contains("retry-after: 1"), "{m}");
        assert!(get(addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200 OK\r\n"));
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_that_never_finishes_its_head_is_closed() {
        let (addr, stop, task) = start(LIMITS).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
        assert_eq!(read_all(&mut c).await, "");
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn stop_ends_open_connections() {
        let (addr, stop, task) = start(Limits {
            head: Duration::from_secs(30),
            lifetime: Duration::from_secs(30),
            ..LIMITS
        })
        .await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /metr").await.unwrap();
        // Let the server accept it and start reading.
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("serve_http returns once its connections ended")
            .unwrap();
        assert_eq!(read_all(&mut c).await, "");
    }
}

// ---------------------------------------------------------------------------------------------
// The metrics reference (docs/book/src/reference/metrics.md) lists exactly the families a
// scrape can show (issue 28 §3).

/// Gives every family of `m` a series: the encoder leaves out a family that has none, so a
/// fresh registry's render would not declare them. Destructures [`Metrics`] and [`Families`]
/// without `..`: a family added to either does not compile here until it gets a series too.
fn with_every_family(m: &Metrics) {
    // Counters outside a family are rendered with or without updates.
    let Metrics {
        registry: _,
        families,
        log_dropped: _,
        spans_dropped: _,
    } = m;
    let Families {
        requests,
        endpoint_requests,
        errors,
        duration,
        in_flight,
        clients,
        restarts,
        limit_kills,
        demand,
        probes,
        state,
        bytes,
        refusals,
        client_refusals,
        discarded,
    } = families;
    let server = || "a".to_string();
    let reason = || ReasonLabels {
        server: server(),
        reason: "x".into(),
    };
    requests
        .get_or_create(&RequestLabels {
            server: server(),
            method: "ping".into(),
            outcome: "ok".into(),
        })
        .inc();
    endpoint_requests
        .get_or_create(&EndpointLabels {
            endpoint: "e".into(),
            server: server(),
            method: "ping".into(),
            outcome: "ok".into(),
        })
        .inc();
    errors
        .get_or_create(&CodeLabels {
            server: server(),
            code: "-32601".into(),
        })
        .inc();
    duration
        .get_or_create(&MethodLabels {
            server: server(),
            method: "ping".into(),
        })
        .observe(0.1);
    in_flight
        .get_or_create(&ServerLabels { server: server() })
        .set(1);
    clients
        .get_or_create(&ServerLabels { server: server() })
        .set(1);
    restarts.get_or_create(&reason()).inc();
    client_refusals.get_or_create(&reason()).inc();
    refusals
        .get_or_create(&ClassLabels {
            server: server(),
            class: "rate_limited".into(),
        })
        .inc();
    discarded
        .get_or_create(&DiscardLabels {
            server: server(),
            reason: "too_deep".into(),
            kind: "response".into(),
        })
        .inc();
    limit_kills.get_or_create(&reason()).inc();
    demand.get_or_create(&reason()).inc();
    probes
        .get_or_create(&ProbeLabels {
            server: server(),
            result: "sent".into(),
        })
        .inc();
    state
        .get_or_create(&StateLabels {
            server: server(),
            state: "ready".into(),
        })
        .set(1);
    bytes
        .get_or_create(&DirectionLabels {
            server: server(),
            direction: "to_child".into(),
        })
        .inc();
}

/// The families of [`Metrics::new`] as a render declares them, each given a series first.
fn every_family() -> std::collections::BTreeMap<String, String> {
    let m = Metrics::new();
    with_every_family(&m);
    let families = exported(&m.render());
    // A second count, from the registry itself (its Debug form lists one `Descriptor` per
    // registered metric): a family registered but not rendered fails here.
    let registered = format!("{:?}", m.registry).matches("Descriptor {").count();
    assert_eq!(families.len(), registered, "{families:?}");
    families
}

/// The families the exposition `text` declares, as a reader of `/metrics` names them (a
/// counter with its `_total` suffix, as its samples are named), with their type: from the
/// `# TYPE` lines (written for every family with at least one series).
fn exported(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| {
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            (name, kind.to_string())
        })
        .collect()
}

/// What the `| metric | type | labels | meaning |` table of the page `page` (named `name`)
/// says wrong about `families` (name → type): a family without a row, a row without a family,
/// a row twice, a type that is not the family's; or that the table is missing.
fn metrics_table_drift(
    name: &str,
    page: &str,
    families: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let rows = match base::doc_table::rows(page, &["metric", "type", "labels", "meaning"]) {
        Ok(rows) => rows,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut named = Vec::new();
    let mut out = Vec::new();
    for row in &rows {
        let Some(metric) = base::doc_table::code(&row.cells[0]) else {
            out.push(format!(
                "{name}:{}: the first cell is not one `metric_name`: {}",
                row.line, row.cells[0]
            ));
            continue;
        };
        if let Some(kind) = families.get(metric) {
            if row.cells.get(1) != Some(kind) {
                out.push(format!(
                    "{name}:{}: `{metric}` is a {kind}, the row says {:?}",
                    row.line,
                    row.cells.get(1)
                ));
            }
        }
        named.push((row.line, metric.to_string()));
    }
    let truth = families.keys().cloned().collect();
    out.extend(base::doc_table::drift(
        name,
        "metric family",
        &truth,
        &named,
    ));
    out
}

#[test]
fn the_metrics_reference_lists_exactly_the_exported_families() {
    const PAGE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/book/src/reference/metrics.md"
    );
    let page = std::fs::read_to_string(PAGE).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    let families = every_family();
    assert!(
        families.get("mcp_supervisor_requests_total") == Some(&"counter".to_string())
            && families.get("mcp_supervisor_request_duration_seconds")
                == Some(&"histogram".to_string())
            && families.get("mcp_supervisor_clients") == Some(&"gauge".to_string()),
        "{families:?}"
    );
    let drift = metrics_table_drift("docs/book/src/reference/metrics.md", &page, &families);
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}

#[test]
fn metrics_table_drift_is_reported() {
    let families = every_family();
    let row = |name: &str, kind: &str| format!("| `{name}` | {kind} | `server` | x |\n");
    let mut page =
        String::from("# Metrics\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for (name, kind) in &families {
        if name == "mcp_supervisor_clients" {
            continue; // a family without a row
        }
        let kind = if name == "mcp_supervisor_probes_total" {
            "gauge" // a row with the wrong type
        } else {
            kind
        };
        page.push_str(&row(name, kind));
    }
    page.push_str(&row("mcp_supervisor_widgets_total", "counter")); // a row without a family
    let last = page.lines().count();
    let probes = 5 + families
        .keys()
        .filter(|n| *n != "mcp_supervisor_clients")
        .position(|n| n == "mcp_supervisor_probes_total")
        .unwrap();
    let drift = metrics_table_drift("m.md", &page, &families);
    assert_eq!(
        drift,
        [
            format!("m.md:{probes}: `mcp_supervisor_probes_total` is a counter, the row says Some(\"gauge\")"),
            format!("m.md:{last}: row `mcp_supervisor_widgets_total` is no metric family of the code"),
            "m.md: no row for metric family `mcp_supervisor_clients`".to_string(),
        ]
    );
    assert_eq!(
        metrics_table_drift("m.md", "# Metrics\n", &families),
        ["m.md: no table | metric | type | labels | meaning |"]
    );
}
