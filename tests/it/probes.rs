//! Issue 17 §2: the probes on the metrics listener. `/healthz` is the supervisor's own
//! liveness and never depends on a child; `/readyz` is 503 until the sockets are bound and
//! every `required = true` server is ready, with a JSON body naming those that are not.

use crate::harness::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `GET path` on `127.0.0.1:port`: the status code and the body (`None` when the connection
/// fails).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let code = r.get(9..12)?.parse().ok()?;
    let body = r.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A server that runs the fake server unless `<dir>/NAME.broken` exists, in which case it
/// exits 1 at once (a crash loop the test turns on and off).
fn breakable(dir: &std::path::Path, name: &str, required: bool) -> String {
    let script = dir.join(format!("{name}.sh"));
    let flag = dir.join(format!("{name}.broken"));
    std::fs::write(
        &script,
        format!("#!/bin/sh\nif [ -e {flag:?} ]; then echo broken >&2; exit 1; fi\nexec {FAKE:?}\n"),
    )
    .unwrap();
    format!(
        "[servers.{name}]\ncommand = \"/bin/sh\"\nargs = [{script:?}]\nrequired = {required}\n\
         backoff_initial = \"50ms\"\nbackoff_max = \"200ms\"\nstop_grace = \"200ms\"\n"
    )
}

/// `mcp-supervisor probe [--ready]`: its exit code and what it printed.
fn probe_cli(sup: &Supervisor, ready: bool) -> (Option<i32>, String) {
    let mut cmd = Command::new(SUPERVISOR);
    cmd.arg("probe");
    if ready {
        cmd.arg("--ready");
    }
    let out = cmd
        .arg("-c")
        .arg(&sup.config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn restart(sup: &Supervisor, name: &str) {
    let _ = Command::new(SUPERVISOR)
        .args(["restart", name, "-c"])
        .arg(&sup.config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[test]
fn healthz_stays_200_while_every_child_crash_loops_and_readyz_turns_503_and_back() {
    let port = free_port();
    let work = tempfile::tempdir().unwrap();
    let sup = Supervisor::spawn_config(
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        &format!(
            "{}
{}",
            breakable(work.path(), "req", true),
            breakable(work.path(), "opt", false)
        ),
        &[],
    );
    let ready = |want: u16| {
        let mut last = None;
        let ok = wait_until(Duration::from_secs(10), || {
            last = get(port, "/readyz");
            last.as_ref().is_some_and(|(c, _)| *c == want)
        });
        assert!(
            ok,
            "/readyz never answered {want}: {last:?}\nlog:\n{}",
            sup.log()
        );
        let body: Value = serde_json::from_str(&last.unwrap().1).unwrap();
        body
    };
    let body = ready(200);
    assert_eq!(body["servers"]["req"]["required"], true, "{body}");
    assert_eq!(body["sockets"], "bound", "{body}");
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));

    // The optional server crash-loops: still ready.
    std::fs::write(work.path().join("opt.broken"), "").unwrap();
    restart(&sup, "opt");
    assert!(wait_until(Duration::from_secs(10), || {
        matches!(
            sup.server_status("opt")["state"].as_str(),
            Some("backoff" | "failed")
        )
    }));
    let body = ready(200);
    assert_ne!(body["servers"]["opt"]["state"], "ready", "{body}");

    // The required one too: not ready, and the body says which; alive all along.
    std::fs::write(work.path().join("req.broken"), "").unwrap();
    restart(&sup, "req");
    let body = ready(503);
    assert_eq!(body["ready"], false, "{body}");
    let (code, out) = probe_cli(&sup, true);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("\"not_ready\":[\"req\"]"), "{out}");
    assert_eq!(probe_cli(&sup, false).0, Some(0));
    assert_eq!(body["not_ready"], serde_json::json!(["req"]), "{body}");
    for _ in 0..20 {
        let h = get(port, "/healthz");
        assert_eq!(h.as_ref().map(|r| r.0), Some(200), "{h:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&h.unwrap().1).unwrap()["status"],
            "ok"
        );
    }
    assert!(
        sup.wait_log_count("broken", 4, Duration::from_secs(10)),
        "both children crash-loop\nlog:\n{}",
        sup.log()
    );
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));

    // Repaired: ready again.
    std::fs::remove_file(work.path().join("req.broken")).unwrap();
    restart(&sup, "req");
    let body = ready(200);
    assert_eq!(body["servers"]["req"]["state"], "ready", "{body}");
    assert_eq!(body["not_ready"], serde_json::json!([]), "{body}");
    assert_eq!(probe_cli(&sup, true).0, Some(0));
    assert_eq!(get(port, "/nope").map(|r| r.0), Some(404));
}

/// Issue 26 §4: idle and half-open connections to the metrics port, far more than it serves at
/// once and held open, never make `/healthz` fail (it is the liveness probe: any pod that can
/// reach the port could otherwise get ours restarted); `/readyz` and `/metrics` answer too.
#[test]
fn healthz_stays_200_while_idle_and_half_open_connections_flood_the_metrics_port() {
    let port = free_port();
    let sup = Supervisor::spawn_config(
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        &fake_server("f", &[], ""),
        &[],
    );
    assert!(
        wait_until(Duration::from_secs(10), || get(port, "/readyz")
            .is_some_and(|r| r.0 == 200)),
        "{}",
        sup.log()
    );
    let mut held = Vec::new();
    for i in 0..400 {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        match i % 3 {
            0 => {}                                                    // idle: not a byte
            1 => c.write_all(b"GET /heal").unwrap(),                   // half a request line
            _ => c.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap(), // half a head
        }
        held.push(c);
    }
    for _ in 0..20 {
        let h = get(port, "/healthz");
        assert_eq!(h.as_ref().map(|r| r.0), Some(200), "{h:?}\n{}", sup.log());
    }
    let r = get(port, "/readyz");
    assert_eq!(r.as_ref().map(|r| r.0), Some(200), "{r:?}");
    let m = get(port, "/metrics");
    assert_eq!(m.as_ref().map(|r| r.0), Some(200), "{m:?}");
    assert!(m.unwrap().1.contains("mcp_supervisor_"));
    // The flood's connections are closed soon, unanswered.
    let last = held.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    let r = last.read_to_end(&mut got);
    assert!(
        r.is_ok() && got.is_empty(),
        "a half-sent head was kept or answered: {r:?} {:?}",
        String::from_utf8_lossy(&got)
    );
}
