//! mcp-supervisor: runs stdio MCP servers as supervised children and lets many MCP clients
//! share each one over a Unix socket. See `docs/ARCHITECTURE.md` for the map.
//!
//! The application layer (docs/ARCHITECTURE.md "Layers"): the daemon, the control socket, the
//! upgrade's hand-over, `adopt`, `top` and the command line, over the crates under `crates/`.

pub mod adopt;
pub mod cli;
pub mod control;
pub mod daemon;
pub mod handover;
pub mod top;
