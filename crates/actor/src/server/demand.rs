//! Servers on demand and idle stops (issue 18 §1-2).
//!
//! - `start = "on-demand"`: the actor begins in `idle` with the record of the last run
//!   ([`crate::record`]) as its handshake and lists. `initialize`, `ping`,
//!   `server/discover`, `logging/setLevel` and the first page of `tools/list`,
//!   `prompts/list`, `resources/list`, `resources/templates/list` are answered from it
//!   (marked `_meta["mcp-supervisor/cache"]`); any other request, a cursor, a list never
//!   seen, or an `initialize` with no record starts the child (`lifecycle::start_on_demand`).
//!   Requests that arrive while it starts wait up to `start_timeout`, then go through.
//! - `idle_stop`: a ready child is stopped through the ladder when no client request has
//!   reached it, and no answer come back from it, for that long, and nothing holds it
//!   (`lifecycle::holds_child`: requests in flight or held, questions asked of clients, resource
//!   subscriptions, listen streams). Its exit leaves the server `idle`: no failure, no
//!   backoff, no restart counted, `last_exit` untouched.

//!
//! This file owns what the actor keeps for that ([`Demand`]); what the rules decide is the
//! `demand` section of `core.rs`.

use base::statefile::Writer;
use std::path::PathBuf;
use std::time::Instant;
use support::config::ServerConfig;

/// What the actor keeps for on-demand starts and idle stops.
#[derive(Debug)]
pub(super) struct Demand {
    /// The last moment the child was used: a client request forwarded to it, or its answer
    /// to one delivered. The idle clock runs from here.
    last_use: Instant,
    /// The running instance was started by a request (its waiters get `start_timeout`).
    started_by_request: bool,
    /// When the handshake and lists now answered from were taken (RFC 3339): read from the
    /// record on disk, or the last time this actor updated them.
    saved_at: Option<String>,
    /// After a failed start of an on-demand child (issue 26 §7): the first request from this
    /// moment starts it again; requests before it get the outage answer with `retry_after`.
    retry_at: Option<Instant>,
    /// Writes the record of this run (on-demand servers only; `None` in the simulation).
    writer: Option<Writer>,
}

impl Demand {
    pub(super) fn new(now: Instant) -> Self {
        Demand {
            last_use: now,
            started_by_request: false,
            saved_at: None,
            retry_at: None,
            writer: None,
        }
    }

    /// Starts the record's writer to `path`, unless one runs (on-demand servers only).
    pub(super) fn open_writer(&mut self, path: PathBuf) {
        if self.writer.is_none() {
            self.writer = Writer::start(
                path,
                "on-demand answers before the next start will be missing",
            );
        }
    }

    /// The record of the last run was loaded; its handshake and lists were taken at `at`.
    pub(super) fn restored(&mut self, at: String) {
        self.saved_at = Some(at);
    }

    /// A request starts the idle child now: it may wait `start_timeout`.
    pub(super) fn start_by_request(&mut self) {
        self.retry_at = None;
        self.started_by_request = true;
    }

    /// Whether the running (or starting) instance was started by a request.
    pub(super) fn by_request(&self) -> bool {
        self.started_by_request
    }

    /// After a failed on-demand start: when the next request may start it again.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// An on-demand start failed: the next request at or after `at` starts it again.
    pub(super) fn start_failed(&mut self, at: Instant) {
        self.retry_at = Some(at);
        self.started_by_request = false;
    }

    /// The instance is ready (or stopped idle): nothing is waiting for a start any more.
    pub(super) fn settled(&mut self, ready: bool) {
        self.started_by_request = false;
        if ready {
            self.retry_at = None;
        }
    }

    /// The child was used at `now`: the idle clock starts again.
    pub(super) fn used(&mut self, now: Instant) {
        self.last_use = now;
    }

    /// When the child was last used.
    pub(super) fn last_use(&self) -> Instant {
        self.last_use
    }

    /// When the handshake and lists answered from were taken (RFC 3339), if known.
    pub(super) fn saved_at(&self) -> Option<&str> {
        self.saved_at.as_deref()
    }

    /// Queues `record`, taken at `at`, for writing (if a writer runs), and remembers `at`.
    pub(super) fn save(&mut self, record: impl FnOnce() -> Vec<u8>, at: String) {
        if let Some(w) = &self.writer {
            w.save(record());
        }
        self.saved_at = Some(at);
    }
}

/// Why `cfg.command` cannot run, if it cannot: a path with `/` must be an executable file; a
/// bare name must be one in a directory of `PATH` (the child's `env` PATH when set, else the
/// supervisor's). A few `stat` calls, at actor start only.
pub(super) fn missing_command(cfg: &ServerConfig) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let runs = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cfg.command.contains('/') {
        let p = std::path::Path::new(&cfg.command);
        let p = match &cfg.cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
        return (!runs(&p)).then(|| format!("`{}` is not an executable file", p.display()));
    }
    let path = cfg
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let found = std::env::split_paths(&path).any(|d| runs(&d.join(&cfg.command)));
    (!found).then(|| format!("`{}` is not found in PATH ({path})", cfg.command))
}
