//! What the actor keeps of a run beyond it (issue 18 §1, issue 32 §2): the record of an
//! on-demand server's last run (its handshake and lists, `cache_file`), which answers what it
//! can while the server is idle, and the note of the open session that a child kept in
//! systemd's file descriptor store carries to the next image after a crash of the supervisor.
//! The bytes are `crate::record`'s; this file decides when they are made and where they go.
//!
//! A section of the core as free functions over one narrow context ([`Recording`]): it reads
//! the handshake and the lists and writes only to the demand's record writer and the running
//! child's session note.
//!
//! No clock read (the moment is the stamp's), no I/O (the writer is the demand's).

use super::demand::Demand;
use super::life::Life;
use super::lists::ListCache;
use super::opener::Opener;
use super::outbox::Stamp;
use crate::record;
use serde_json::Value;
use support::config::{ServerConfig, StartMode};

/// What keeping the record touches.
pub(super) struct Recording<'a> {
    /// The record's writer, and when the last copy was taken.
    demand: &'a mut Demand,
    /// The running child, which keeps the session note.
    life: &'a mut Life,
    /// The handshake and the log level.
    opener: &'a Opener,
    lists: &'a ListCache,
    /// The moment.
    at: Stamp<'a>,
    /// `start`, `cache_file`, and what the record names.
    cfg: &'a ServerConfig,
}

impl<'a> Recording<'a> {
    /// The context over the demand's writer and the running child, reading `opener` and
    /// `lists` at `at`.
    pub(super) fn new(
        demand: &'a mut Demand,
        life: &'a mut Life,
        opener: &'a Opener,
        lists: &'a ListCache,
        at: Stamp<'a>,
        cfg: &'a ServerConfig,
    ) -> Self {
        Recording {
            demand,
            life,
            opener,
            lists,
            at,
            cfg,
        }
    }
}

/// Queues the record of this run for writing (on-demand servers, after the handshake and
/// whenever a list changes), and notes the session with the running child. Nothing before the
/// first handshake.
pub(super) fn save(cx: &mut Recording<'_>) {
    if cx.cfg.start == StartMode::OnDemand {
        // A reload may have made this server on-demand.
        cx.demand.open_writer(cx.cfg.cache_file.clone());
    }
    if cx.opener.handshake().is_none() {
        return;
    }
    note_session(cx);
    let Some(hs) = cx.opener.handshake() else {
        return;
    };
    // Kept whether or not a record is written: an eager server that went idle after an idle
    // stop answers from memory, and says when that copy was taken.
    let at = humantime::format_rfc3339_seconds(cx.at.wall()).to_string();
    let (cfg, lists) = (cx.cfg, cx.lists.all());
    cx.demand
        .save(|| record::encode(cfg, hs, lists, &at), at.clone());
}

/// Records the open session with the running child where the next run finds it after a crash
/// of the supervisor (`child::fdstore`, issue 32 §2): the handshake and lists, the log level.
/// Nothing when the child keeps no sessions (the store is off).
pub(super) fn note_session(cx: &mut Recording<'_>) {
    if !cx.life.child().is_some_and(|c| c.keeps_sessions()) {
        return;
    }
    let Some(hs) = cx.opener.handshake() else {
        return;
    };
    let text = record::encode(cx.cfg, hs, cx.lists.all(), "");
    let Ok(value) = serde_json::from_slice::<Value>(&text) else {
        return;
    };
    let level = cx.opener.log_level();
    if let Some(child) = cx.life.child_mut() {
        child.note_session(value, level);
    }
}

/// The child answered its handshake: the idle clock starts now at the latest (a start whose
/// only request was answered here, such as `initialize`, forwarded nothing), later holds wait
/// `queue_wait` again, and the record is written.
pub(super) fn ready(cx: &mut Recording<'_>) {
    cx.demand.settled(true);
    cx.demand.used(cx.at.now());
    save(cx);
}
