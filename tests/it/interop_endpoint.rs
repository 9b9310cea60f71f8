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
    type Run = (String, Box<dyn FnOnce() -> Output + Send>);
    let python = |era: &'static str, prefix: &'static str, scenario: &'static str| -> Run {
        let (io2, attach) = (Interop::load(), attach.clone());
        (
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
        )
    };
    // TypeScript, through attach: prompts, resources, sampling, elicitation, progress.
    let typescript = |mode: &'static str, prefix: &'static str| -> Run {
        let (io2, attach) = (Interop::load(), attach.clone());
        (
            format!("ts {mode} {prefix}features"),
            Box::new(move || {
                let cmd: Vec<&str> = attach.iter().map(String::as_str).collect();
                ts(
                    &io2,
                    &["--mode", mode, "--prefix", prefix, "features"],
                    &cmd,
                )
            }),
        )
    };
    // Python over the endpoint's Streamable HTTP.
    let over_http = |era: &'static str| -> Run {
        let io2 = Interop::load();
        let (url, header) = (
            format!("http://{addr}/mcp/desk"),
            format!("Authorization: Bearer {token}"),
        );
        (
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
        )
    };
    // Round 1: each era on each kind of source, through attach and HTTP, all at once.
    all_at_once(
        &sup,
        vec![
            python("handshake", "everything__", "everything"),
            python("modern", "everything__", "everything"),
            python("handshake", "far__", "everything"),
            python("modern", "far__", "everything"),
            python("auto", "time__", "time"),
            over_http("handshake"),
            over_http("modern"),
        ],
    );
    // Rounds 2 and 3: sampling, elicitation and progress reach the client that asked, while
    // other clients' lists and calls are in flight at every source (their fan-outs). A
    // handshake-era server links its request to no client request, so two clients of one
    // source asking at the same instant cannot be told apart (K06): each round has one such
    // client per source (server-everything over stdio, and over Streamable HTTP).
    all_at_once(
        &sup,
        vec![
            python("handshake", "everything__", "features"),
            typescript("legacy", "far__"),
            python("auto", "time__", "time"),
            over_http("handshake"),
        ],
    );
    all_at_once(
        &sup,
        vec![
            typescript("2026-07-28", "everything__"),
            python("modern", "far__", "features"),
            python("auto", "time__", "time"),
            over_http("modern"),
        ],
    );
    // One child per stdio server and one session with the url server, whatever the clients.
    let status = sup.status_json();
    for name in ["everything", "time", "far"] {
        let s = sup.server_status(name);
        assert_eq!(s["state"], "ready", "{name}: {status}");
        assert_eq!(s["restarts"], 0, "{name}: {status}");
    }
}
