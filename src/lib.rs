//! mcp-supervisor: runs stdio MCP servers as supervised children and lets many MCP clients
//! share each one over a Unix socket. See `docs/ARCHITECTURE.md` for the map.

pub mod attach;
pub mod child;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod jsonrpc;
pub mod logging;
pub mod mux;
pub mod observe;
pub mod systemd;
