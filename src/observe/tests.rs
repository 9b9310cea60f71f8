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
    use super::super::http::*;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_util::sync::CancellationToken;

    const LIMITS: HttpLimits = HttpLimits {
        max_connections: 2,
        timeout: Duration::from_millis(300),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_secs(1),
        log_every: Duration::from_secs(10),
    };

    async fn start() -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve_http_with(l, stop.clone(), LIMITS));
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
    async fn serves_metrics_and_404() {
        let (addr, stop, task) = start().await;
        assert!(get(addr, "/metrics")
            .await
            .starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_refused_and_slow_ones_time_out() {
        let (addr, stop, task) = start().await;
        // Two silent clients take both slots (accepted in connection order) ...
        let mut idle = Vec::new();
        for _ in 0..LIMITS.max_connections {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let t = Instant::now();
        // ... so a third is answered 503 at once.
        let mut third = TcpStream::connect(addr).await.unwrap();
        let busy = read_all(&mut third).await;
        assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
        assert!(t.elapsed() < LIMITS.timeout, "{:?}", t.elapsed());
        // The silent ones are closed after the read timeout, unanswered.
        for mut c in idle {
            assert_eq!(read_all(&mut c).await, "");
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // Their slots are free again.
        assert!(get(addr, "/metrics")
            .await
            .starts_with("HTTP/1.1 200 OK\r\n"));
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn stop_ends_open_connections() {
        let (addr, stop, task) = start().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /metr").await.unwrap();
        // Let the server accept it and start reading.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("serve_http returns once its connections ended")
            .unwrap();
        assert!(t.elapsed() < LIMITS.timeout, "{:?}", t.elapsed());
        assert_eq!(read_all(&mut c).await, "");
    }
}
