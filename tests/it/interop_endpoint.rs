//! Issue 31 with real, unmodified MCP software: the official Python and TypeScript SDK clients
//! of both eras use one endpoint of three sources (two children, server-everything over stdio
//! and mcp-server-time, and one url server, server-everything over Streamable HTTP), through
//! `attach` and over HTTP, several at once.

use crate::harness::*;
use crate::interop::{check, Interop};
use crate::interop_matrix::{py, ts};
use crate::remote::everything_http;
use std::process::Output;

/// Runs every `(what, run)` at once; each must succeed and print its steps.
fn all_at_once(sup: &Supervisor, runs: Vec<(String, Box<dyn FnOnce() -> Output + Send>)>) {
    let outs: Vec<(String, Output)> = std::thread::scope(|sc| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|(what, run)| (what, sc.spawn(run)))
            .collect();
        handles
            .into_iter()
            .map(|(what, h)| (what, h.join().unwrap()))
            .collect()
    });
    for (what, out) in outs {
        let stdout = check(out, &what, sup);
        assert!(
            stdout.contains("\"ok\": true") || stdout.contains("\"ok\":true"),
            "{what}: {stdout}"
        );
    }
}

#[test]
fn interop_sdk_clients_of_both_eras_use_an_endpoint_of_two_children_and_a_url_server() {
    let io = Interop::load();
    let far = everything_http(&io);
    let servers = format!(
        "http_listen = \"127.0.0.1:0\"\n\n{}\n[servers.far]\nurl = \"http://127.0.0.1:{}/mcp\"\nstart_timeout = \"60s\"\n\n[endpoints.desk]\nservers = [\"everything\", \"time\", \"far\"]\nhttp = true\n",
        io.servers(),
        far.port
    );
    let sup = Supervisor::start(&servers);
    let addr_file = sup.dir.path().join("run/http.addr");
    assert!(wait_until(std::time::Duration::from_secs(10), || addr_file.exists()));
    let addr = std::fs::read_to_string(&addr_file)
        .unwrap()
        .trim()
        .to_string();
    let token = std::fs::read_to_string(sup.dir.path().join("run/desk.http.token"))
        .unwrap()
        .trim()
        .to_string();
    let config = sup.config.to_str().unwrap().to_string();
    let attach: Vec<String> = vec![
        SUPERVISOR.into(),
        "attach".into(),
        "desk".into(),
        "-c".into(),
        config,
    ];
    let mut runs: Vec<(String, Box<dyn FnOnce() -> Output + Send>)> = Vec::new();
    // Python, through attach: each era, each kind of source (progress from the url server).
    for (era, prefix, scenario) in [
        ("handshake", "everything__", "everything"),
        ("modern", "everything__", "everything"),
        ("handshake", "far__", "everything"),
        ("modern", "far__", "everything"),
        ("auto", "time__", "time"),
        ("handshake", "everything__", "features"),
        ("modern", "everything__", "features"),
    ] {
        let (io2, attach) = (Interop::load(), attach.clone());
        runs.push((
            format!("python {era} {prefix}{scenario}"),
            Box::new(move || {
                let cmd: Vec<&str> = attach.iter().map(String::as_str).collect();
                py(
                    &io2,
                    &[
                        "--era",
                        era,
                        "--prefix",
                        prefix,
                        "--client-name",
                        &format!("{era}-{prefix}"),
                        scenario,
                    ],
                    &cmd,
                )
            }),
        ));
    }
    // TypeScript, through attach: prompts, resources, sampling, elicitation, progress.
    for mode in ["legacy", "2026-07-28"] {
        let (io2, attach) = (Interop::load(), attach.clone());
        runs.push((
            format!("ts {mode} features"),
            Box::new(move || {
                let cmd: Vec<&str> = attach.iter().map(String::as_str).collect();
                ts(
                    &io2,
                    &["--mode", mode, "--prefix", "everything__", "features"],
                    &cmd,
                )
            }),
        ));
    }
    // Python over the endpoint's Streamable HTTP, both eras.
    for era in ["handshake", "modern"] {
        let io2 = Interop::load();
        let (url, header) = (
            format!("http://{addr}/mcp/desk"),
            format!("Authorization: Bearer {token}"),
        );
        runs.push((
            format!("python http {era} time"),
            Box::new(move || {
                std::process::Command::new(io2.var("MCPSUP_INTEROP_PYTHON"))
                    .arg(io2.var("MCPSUP_INTEROP_CLIENT"))
                    .args(["--timeout", "90", "--era", era, "--prefix", "time__"])
                    .args(["--url", &url, "--header", &header, "time"])
                    .stdin(std::process::Stdio::null())
                    .output()
                    .expect("cannot run the Python client")
            }),
        ));
    }
    all_at_once(&sup, runs);
    // One child per stdio server and one session with the url server, whatever the clients.
    let status = sup.status_json();
    for name in ["everything", "time", "far"] {
        let s = sup.server_status(name);
        assert_eq!(s["state"], "ready", "{name}: {status}");
        assert_eq!(s["restarts"], 0, "{name}: {status}");
    }
}
