//! End-to-end basics: handshake, routing, shutdown, process hygiene.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

#[test]
fn client_handshake_and_tool_call_end_to_end() {
    let sup = Supervisor::start(&fake_server("fake", &[], ""));
    let mut a = sup.connect("fake");
    let init = a.initialize("a", json!({}));
    assert_eq!(init["id"], json!(0));
    assert_eq!(init["result"]["serverInfo"]["name"], "fake");
    let r = a.call(json!("x"), "echo", json!({"text": "hello"}));
    assert_eq!(Client::text(&r), "hello");
    assert_eq!(a.request(json!(5), "ping", json!({}))["result"], json!({}));
}

#[test]
fn sigterm_stops_children_and_removes_sockets() {
    let mut sup = Supervisor::start(&fake_server("fake", &[], ""));
    let mut a = sup.client("fake");
    let pid: i32 = Client::text(&a.call(json!(1), "pid", json!({})))
        .parse()
        .unwrap();
    assert!(alive(pid));
    assert_eq!(sup.stop(), Some(0));
    assert!(!sup.socket("fake").exists(), "socket removed on shutdown");
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
}
