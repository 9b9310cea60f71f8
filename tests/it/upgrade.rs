//! Issue 32 §1: `mcp-supervisor upgrade` executes the binary again in the daemon's own process
//! (same pid), keeping its listeners, its children (same pids, never initialized again) and
//! their sessions; a new binary that fails its check is refused and the daemon serves on.

use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

/// Runs `mcp-supervisor upgrade` against `sup` (optionally with `extra` arguments): its exit
/// code and what it printed.
pub(crate) fn upgrade(sup: &Supervisor) -> (Option<i32>, String) {
    let out = Command::new(SUPERVISOR)
        .args(["upgrade", "-c"])
        .arg(&sup.config)
        .env("MCPSUP_TEST_ID", &sup.id)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn pid_of(sup: &Supervisor, name: &str) -> u64 {
    sup.server_status(name)["pid"].as_u64().unwrap_or(0)
}

#[test]
fn an_upgrade_keeps_the_daemon_pid_the_child_and_its_session() {
    let saw = tempfile::tempdir().unwrap();
    let log = saw.path().join("saw.jsonl");
    let mut sup = Supervisor::start(&fake_server("fake", &["--log", log.to_str().unwrap()], ""));
    let mut c = sup.client("fake");
    c.request(json!(0), "logging/setLevel", json!({"level": "debug"}));
    let r = c.call(json!(1), "echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");
    let daemon = sup.pid();
    let child = pid_of(&sup, "fake");
    assert!(child > 0);

    for n in 1..=3 {
        let (code, said) = upgrade(&sup);
        assert_eq!(code, Some(0), "upgrade {n}: {said}\n{}", sup.log());
        assert!(said.contains(&format!("upgrade {n}")), "{said}");
        assert!(
            sup.wait_exit(Duration::from_millis(10)).is_none(),
            "the daemon exited"
        );
        assert_eq!(sup.pid(), daemon);
        assert_eq!(
            pid_of(&sup, "fake"),
            child,
            "the child was replaced\n{}",
            sup.log()
        );
        // The same connection goes on, its handshake kept, answers never doubled.
        let r = c.call(json!(10 + n), "echo", json!({"text": format!("after {n}")}));
        assert_eq!(Client::text(&r), format!("after {n}"), "{r}\n{}", sup.log());
        // A new one is served too.
        let mut d = sup.client("fake");
        let r = d.call(json!(2), "echo", json!({"text": "new"}));
        assert_eq!(Client::text(&r), "new", "{r}");
    }
    assert!(
        c.recv_timeout(Duration::from_millis(300))
            .is_none_or(|v| v["id"].is_null() && v["method"].is_string()),
        "an extra line"
    );
    // The child was never sent a second handshake.
    assert_eq!(
        child_saw_method(&log, "initialize"),
        1,
        "{:?}",
        child_saw(&log)
    );
    assert_eq!(
        sup.server_status("fake")["restarts"],
        Value::from(0),
        "{}",
        sup.log()
    );
    sup.stop();
}
