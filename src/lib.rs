//! mcp-supervisor: runs stdio MCP servers as supervised children and lets many MCP clients
//! share each one over a Unix socket. See `docs/ARCHITECTURE.md` for the map.

// Nothing a child, a client, a config file or the OS sends may panic the daemon (issue 12 §1):
// library code outside tests may not unwrap, expect, panic or index unchecked. Where an
// invariant holds, a type or a non-panicking form says so instead.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod admit;
pub mod adopt;
pub mod attach;
pub mod auth;
pub mod backoff;
pub mod child;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod deadline;
pub mod endpoint;
pub mod exit;
pub mod fds;
pub mod handover;
pub mod http;
pub mod http1;
pub mod jsonrpc;
pub mod logging;
pub mod loopback;
pub mod mux;
pub mod observe;
pub mod protocol;
pub mod reaper;
pub mod remote;
pub mod safepath;
pub mod starter;
pub mod statefile;
pub mod systemd;
pub mod top;
pub mod upstream;

#[cfg(test)]
mod doc_table;
#[cfg(test)]
pub(crate) mod testing;
