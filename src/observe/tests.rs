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
