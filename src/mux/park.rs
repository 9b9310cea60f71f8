//! Socket sessions parked for an upgrade's hand-over (issue 32 §1). When the daemon pauses
//! them, each session stops reading its client at a line boundary and leaves here its
//! connection's descriptor, the bytes it read that are not a whole line yet, its peer and its
//! outbound queue's size; its writer goes on delivering what the actor decides until the new
//! image replaces the process. Resuming (a refused upgrade) lets them read on.
//!
//! A session resumed in the next image ([`Resume`]) first replays its client's state to the
//! new actor (lines with ids [`crate::handover::REPLAY_ID_PREFIX`]`N`, whose answers its
//! writer drops), then frames the pending bytes, then reads on.

use crate::mux::session::{ClientId, Peer};
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// One parked session.
#[derive(Debug, Clone)]
pub struct Parked {
    /// Its connection (still open: the session holds it).
    pub fd: RawFd,
    /// Bytes read from the client that are not a whole line yet.
    pub pending: Vec<u8>,
    /// Who it is.
    pub peer: Peer,
    /// Bytes queued toward the client and not written yet.
    pub queued: Arc<AtomicUsize>,
}

/// What a session handed over by the previous image starts with.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// Bytes the previous image read from the client that are not a whole line yet.
    pub pending: Vec<u8>,
    /// Lines that rebuild the client's state in the new actor.
    pub replay: Vec<String>,
}

/// The daemon's parking for its socket sessions.
#[derive(Debug)]
pub struct Parking {
    paused: watch::Sender<bool>,
    live: AtomicUsize,
    parked: Mutex<BTreeMap<ClientId, Parked>>,
}

/// A live session, counted while it exists.
#[derive(Debug)]
pub struct Live(Arc<Parking>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Default for Parking {
    fn default() -> Self {
        Parking {
            paused: watch::channel(false).0,
            live: AtomicUsize::new(0),
            parked: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Parking {
    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<ClientId, Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a session while the returned guard lives.
    pub fn enter(self: &Arc<Self>) -> Live {
        self.live.fetch_add(1, Ordering::AcqRel);
        Live(self.clone())
    }

    /// Whether sessions are asked to park, as a receiver to wait on.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.paused.subscribe()
    }

    /// Asks every session to park.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Lets every session read on (the upgrade was refused).
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// A session parked.
    pub fn park(&self, id: ClientId, parked: Parked) {
        self.table().insert(id, parked);
    }

    /// A session left the parking (resumed, or gone).
    pub fn unpark(&self, id: ClientId) {
        self.table().remove(&id);
    }

    /// Whether every live session has parked.
    pub fn all_parked(&self) -> bool {
        self.table().len() >= self.live.load(Ordering::Acquire)
    }

    /// Whether every parked session's writer has written all that was queued.
    pub fn drained(&self) -> bool {
        self.table()
            .values()
            .all(|p| p.queued.load(Ordering::Acquire) == 0)
    }

    /// The parked sessions.
    pub fn parked(&self) -> BTreeMap<ClientId, Parked> {
        self.table().clone()
    }
}

/// Whether `head` (the first bytes of a line toward a client) is the answer to a replayed
/// request: its id is [`crate::handover::REPLAY_ID_PREFIX`]`N`.
/// The supervisor writes every response as `{"jsonrpc":"2.0","id":…` (`jsonrpc::message`).
pub fn is_replay_answer(head: &[u8]) -> bool {
    head.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":\"mcp-supervisor-handover-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_answers_are_told_from_their_first_bytes() {
        assert!(is_replay_answer(
            br#"{"jsonrpc":"2.0","id":"mcp-supervisor-handover-1","result":{}}"#
        ));
        assert!(!is_replay_answer(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#
        ));
        assert!(!is_replay_answer(
            br#"{"jsonrpc":"2.0","method":"x","params":{"id":"mcp-supervisor-handover-1"}}"#
        ));
        // As the actor writes them.
        let line = crate::jsonrpc::message::error_response(
            &crate::jsonrpc::message::raw(&serde_json::json!("mcp-supervisor-handover-2")),
            -32601,
            "no",
            None,
        );
        assert!(is_replay_answer(&line));
        assert!(!is_replay_answer(b""));
    }

    #[test]
    fn a_session_counts_until_it_parks_or_goes() {
        let p = Arc::new(Parking::default());
        let live = p.enter();
        assert!(!p.all_parked());
        let q = Arc::new(AtomicUsize::new(5));
        p.park(
            ClientId(1),
            Parked {
                fd: 9,
                pending: vec![],
                peer: Peer::default(),
                queued: q.clone(),
            },
        );
        assert!(p.all_parked());
        assert!(!p.drained());
        q.store(0, Ordering::Release);
        assert!(p.drained());
        p.unpark(ClientId(1));
        drop(live);
        assert!(p.all_parked());
    }
}
