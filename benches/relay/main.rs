//! `cargo bench --bench relay`: the whole-process relay benchmark (issues 9 and 15).
//!
//! Five ways for a client to reach one stdio MCP server (`mcp-fake-server`), compared side by
//! side in one run, every process on this machine, every byte over pipes and Unix sockets:
//!
//! - **direct**: the benchmark spawns the server and talks over its stdin/stdout pipes;
//! - **socat**: `socat UNIX-LISTEN:S,fork,backlog=128 EXEC:server,pipes`, a plain byte relay
//!   (with `fork`, every connection gets its own socat process and its own server);
//! - **supervisor**: `mcp-supervisor run`, the client on `<socket_dir>/bench.sock`;
//! - **attach**: the client talks to `mcp-supervisor attach bench` over its stdin/stdout;
//! - **rmcp-mux**: `rmcp-mux --socket S --cmd server` (crates.io, 0.4.0), a Rust Unix-socket
//!   MCP multiplexer with id rewriting, found through `MCPSUP_RMCP_MUX`, else
//!   `.interop/rmcp-mux/bin/rmcp-mux` (`.ci/install-deps`), else PATH; without it its column
//!   says why it is empty.
//!
//! Measurements (exact definitions in `docs/PERFORMANCE.md` and in the report itself):
//! sequential `echo` round trip (p50, p99); pipelined `echo` throughput with 1, 10 and 100
//! clients; `big` results of 1, 16 and 64 MiB (MB/s, the relay's peak RSS, its RSS 1 s after);
//! the idle footprint with 10 servers and 100 clients, and with 100 servers and 1,000 clients;
//! the time from start to all 10 sockets accepting and to all 10 servers answering; scaling:
//! paced round trips (fixed total load) over 1 to 1,000 clients on one server and on 100
//! servers; a behaviour check of the two daemons. Paths are measured in interleaved rounds, so
//! machine noise hits them alike; only ratios between paths of one run mean anything.
//!
//! The remote row (issue 29 §6, `remote.rs`): the same sequential `echo` round trips to an
//! HTTP upstream on loopback (a second `mcp-supervisor run` serving the fake server with
//! `http = true`): by the benchmark's own HTTP client directly, and through the socket of a
//! supervisor whose server is a url server pointing at that upstream; p50, p99 and the relay's
//! CPU per message.
//!
//! The results replace the generated part of `docs/PERFORMANCE.md` (between the
//! `relay-bench:begin`/`end` markers). `cargo bench` passes `--bench`; without it (`cargo test
//! --benches`, `--all-targets`) the binary only checks in a few seconds that every path works.
//! Arguments (after `--`):
//!
//! - `--out PATH`: write the report there instead; `--no-write`: print it only;
//! - `--profile`: instead of the benchmark, record `perf` profiles of the supervisor under the
//!   small-message and 64 MiB loads into `target/relay-profile/` and print the top symbols.
//!
//! Every process the benchmark starts leads its own process group and is killed (group-wide)
//! when it is dropped, on panic, on SIGINT/SIGTERM/SIGHUP, and by a watchdog when a phase
//! overruns its time budget. Every server writes its pid to a pidfile, which is swept at the end.
//! The soft RLIMIT_NOFILE is raised to the hard limit first (1,000 clients need descriptors, in
//! the benchmark and in the daemons, which inherit it).

// A test, a fixture or a benchmark may unwrap, expect, panic and index: the workspace's panic
// lints (Cargo.toml [workspace.lints]) are for the daemon's code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod behaviour;
mod client;
mod endpoint;
mod footprint;
mod measure;
mod modes;
mod procs;
mod remote;
mod report;
mod results;
mod rig;
mod scaling;
mod targets;
mod watchers;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use client::Way;
use procs::{lock_groups_snapshot, phase, processes, sh};
use results::{key, Results};
use rig::{One, Rig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/PERFORMANCE.md"));
    let mut profiling = false;
    let mut benching = false;
    let mut endpoint_only = false;
    let mut watch_only = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => benching = true, // cargo bench passes it; cargo test does not
            "--no-write" => out = None,
            "--out" => out = it.next().map(PathBuf::from),
            "--profile" => profiling = true,
            // Only the endpoint row, printed (issue 31): `cargo bench --bench relay -- --endpoint`.
            "--endpoint" => endpoint_only = true,
            // Only the live view's row, printed (issue 33): `cargo bench --bench relay -- --watch`.
            "--watch" => watch_only = true,
            other => eprintln!("relay bench: ignoring argument {other:?}"),
        }
    }
    procs::install_guards();
    let nofile = procs::raise_nofile();
    let tmp = tempfile::Builder::new()
        .prefix("relay-bench.")
        .tempdir()
        .expect("temporary directory");
    let rig = Rig::new(tmp.path());
    procs::PIDFILE.set(rig.pidfile()).ok();
    procs::TMP.set(tmp.path().to_path_buf()).ok();
    let wall = Instant::now();

    if profiling {
        modes::profile(&rig);
    } else if benching && endpoint_only {
        let mut res = results::Results::default();
        endpoint::measure_endpoint(&rig, &mut res);
        let mut w = String::new();
        report::endpoint_section(&mut w, &res);
        println!("{w}");
    } else if benching && watch_only {
        let mut res = results::Results::default();
        watchers::measure_watchers(&rig, &mut res);
        let mut w = String::new();
        report::watch_section(&mut w, &res);
        println!("{w}");
    } else if !benching {
        modes::smoke(&rig);
    } else {
        bench(&rig, &args, nofile, wall, out);
    }

    phase("cleanup", Duration::from_secs(30));
    let leftover_groups: HashSet<i32> = lock_groups_snapshot().into_iter().collect();
    let stray: Vec<i32> = processes()
        .into_iter()
        .filter(|(_, _, g)| leftover_groups.contains(g))
        .map(|(p, _, _)| p)
        .collect();
    procs::kill_everything();
    procs::wait_gone(Duration::from_secs(5));
    let fakes = procs::sweep_fake_servers();
    if !stray.is_empty() || fakes > 0 {
        eprintln!(
            "relay bench: killed leftovers: {} processes in our groups, {fakes} fake servers",
            stray.len()
        );
    }
    drop(tmp);
}

fn bench(rig: &Rig, args: &[String], nofile: u64, wall: Instant, out: Option<PathBuf>) {
    let socat = Command::new("socat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        socat.is_ok_and(|s| s.success()),
        "socat is needed: run .ci/install-deps (or apt-get install socat)"
    );
    let started = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let load_start = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut res = Results {
        ways: vec![Way::Direct, Way::Socat, Way::Supervisor, Way::Attach],
        ..Results::default()
    };
    match &rig.rmcp.found {
        Ok(_) => res.ways.push(Way::RmcpMux),
        Err(e) => {
            eprintln!("relay bench: no rmcp-mux column: {e}");
            res.why.insert(key("run", Way::RmcpMux), e.clone());
        }
    }
    {
        phase(
            "starting the supervisor, socat and rmcp-mux",
            Duration::from_secs(30),
        );
        let one = One::start(rig);
        measure::measure_latency(&one, &mut res);
        measure::measure_throughput(&one, &mut res);
        measure::measure_large(&one, &mut res);
    }
    remote::measure_remote(rig, &mut res);
    endpoint::measure_endpoint(rig, &mut res);
    watchers::measure_watchers(rig, &mut res);
    footprint::measure_idle(rig, &mut res);
    let idle_clients = 1000;
    let need = (idle_clients * 2 + 512) as u64;
    if nofile >= need {
        footprint::measure_idle_many(rig, idle_clients, &mut res);
    } else {
        for way in [Way::Supervisor, Way::RmcpMux] {
            res.say_why(
                "idle-many",
                way,
                format!("not run: RLIMIT_NOFILE is {nofile} after raising the soft limit to the hard one; 1,000 clients need about {need}"),
            );
        }
    }
    footprint::measure_startup(rig, &mut res);
    behaviour::check_behaviour(rig, &mut res);
    scaling::measure_scaling(rig, nofile, &mut res);
    res.notes.push(format!(
        "RLIMIT_NOFILE (soft) of the benchmark and the processes it started: {nofile}."
    ));

    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let three = |s: &str| s.split_whitespace().take(3).collect::<Vec<_>>().join(", ");
    let mut command = "cargo bench --bench relay".to_string();
    let extra: Vec<&String> = args.iter().filter(|a| *a != "--bench").collect();
    if !extra.is_empty() {
        command.push_str(" --");
        for a in extra {
            command.push(' ');
            command.push_str(a);
        }
    }
    res.wall = wall.elapsed().as_secs_f64();
    let text = report::report(
        &res,
        rig,
        &report::RunInfo {
            command: &command,
            started: &started,
            load_start: &three(&load_start),
            load_end: &three(&load_end),
        },
    );
    println!("{text}");
    if let Some(path) = out {
        report::write_report(&path, &text);
    }
}
