//! Logging setup: journald when our stderr is the journal (`JOURNAL_STREAM` matches stderr's
//! `dev:ino`, R22), otherwise human-readable text on stderr. Level from `RUST_LOG`, default
//! `info`.

use std::os::unix::fs::MetadataExt;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// Whether stderr is connected to the journal.
pub fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse::<u64>().ok() == Some(meta.dev()) && ino.parse::<u64>().ok() == Some(meta.ino())
}

/// Installs the global subscriber.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if stderr_is_journal() {
        if let Ok(layer) = tracing_journald::layer() {
            tracing_subscriber::registry()
                .with(filter)
                .with(layer.with_syslog_identifier("mcp-supervisor".into()))
                .init();
            return;
        }
    }
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .init();
}
