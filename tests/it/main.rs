//! Integration tests: the real `mcp-supervisor` binary against fake MCP servers.
//! Tests are named after the field case they pin (`case_kNN_*`, `../shared/cases.md`).

// A test, a fixture or a benchmark may unwrap, expect, panic and index: the workspace's panic
// lints (Cargo.toml [workspace.lints]) are for the daemon's code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod harness;

mod adopt;
mod basics;
mod config;
mod core;
mod demand;
mod endpoint;
mod eras;
mod health;
mod hostile;
mod http;
mod interop;
mod interop_endpoint;
mod interop_http;
mod interop_matrix;
mod lifecycle;
mod limits;
mod mux;
mod observe;
mod ops;
mod otel;
mod probes;
mod readme;
mod reaping;
mod remote;
mod signin;
mod survive;
mod top;
mod upgrade;
mod watch;
mod wire;
