//! Issue 33 §2: `mcp-supervisor watch --json` streams what `status` shows: a snapshot at once,
//! then each change, until the supervisor stops.

use crate::harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// `watch --json` against `sup`, its lines arriving on a channel.
fn watch(sup: &Supervisor) -> (std::process::Child, mpsc::Receiver<Value>) {
    let mut child = Command::new(SUPERVISOR)
        .args(["watch", "--json", "-c"])
        .arg(&sup.config)
        .env("MCPSUP_TEST_ID", &sup.id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let v = serde_json::from_str(&line).unwrap_or_else(|_| json!({"unparsed": line}));
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The first line within `within` for which `pick` holds.
fn line_where(
    rx: &mpsc::Receiver<Value>,
    within: Duration,
    pick: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(v) if pick(&v) => return Some(v),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

#[test]
fn watch_json_streams_a_snapshot_then_each_change_until_the_supervisor_stops() {
    let mut sup = Supervisor::start(
        &(fake_server("steady", &[], "")
            + &fake_server(
                "crashy",
                &[],
                "backoff_initial = \"200ms\"\nbackoff_max = \"200ms\"",
            )),
    );
    assert!(wait_until(Duration::from_secs(20), || {
        sup.server_status("crashy")["state"] == "ready"
            && sup.server_status("steady")["state"] == "ready"
    }));
    let (mut child, rx) = watch(&sup);
    let first = line_where(&rx, Duration::from_secs(10), |_| true).expect("a first line");
    assert_eq!(first["format"], 1, "{first}");
    assert_eq!(first["kind"], "snapshot", "{first}");
    assert_eq!(first["seq"], 1, "{first}");
    let names: Vec<&str> = first["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["crashy", "steady"], "{first}");
    // The crash shows as a change of crashy alone, then its restart.
    let mut c = sup.client("crashy");
    let _ = c.call(json!(1), "crash", json!({}));
    let restarted = line_where(&rx, Duration::from_secs(20), |v| {
        v["kind"] == "change"
            && v["servers"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["name"] == "crashy" && s["restarts"] == 1)
            })
    })
    .expect("a change line with crashy restarted");
    assert!(
        restarted["servers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["name"] == "crashy"),
        "{restarted}"
    );
    assert!(restarted["seq"].as_u64().unwrap() > 1, "{restarted}");
    // The supervisor stops: the stream ends and watch exits 0.
    sup.stop();
    let exited = wait_until(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "watch did not end with the supervisor");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn watch_without_a_supervisor_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("s.toml");
    std::fs::write(
        &config,
        format!("[supervisor]\nsocket_dir = {:?}\n", dir.path().join("run")),
    )
    .unwrap();
    let out = Command::new(SUPERVISOR)
        .args(["watch", "--json", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}
