//! Layer 0 (docs/ARCHITECTURE.md "Layers"): what knows nothing of MCP: deadlines, the reaper,
//! backoff with jitter, safe paths and private directories, descriptor flags, systemd's notify
//! protocol, admission pools, exit codes, loopback peer lookup, state files, the hyper server
//! helper. Imports no crate of the workspace.

pub mod admit;
pub mod backoff;
pub mod deadline;
pub mod exit;
pub mod fds;
pub mod http1;
pub mod loopback;
pub mod reaper;
pub mod safepath;
pub mod statefile;
pub mod systemd;

/// Shared by the tests of the crates above (feature `testing`, off in release builds).
#[cfg(any(test, feature = "testing"))]
pub mod doc_table;
/// Shared by the tests of the crates above (feature `testing`, off in release builds).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
