//! Socket sessions parked for an upgrade's hand-over (issue 32 §1). When the daemon pauses
//! them, each session stops reading its client at a line boundary and leaves here its
//! connection's descriptor, the bytes it read that are not a whole line yet, its peer and its
//! outbound queue's size; its writer goes on delivering what the actor decides until the new
//! image replaces the process. Resuming (a refused upgrade) lets them read on.
//!
//! A session resumed in the next image ([`Resume`]) first replays its client's state to the
//! new actor (lines with ids [`REPLAY_ID_PREFIX`]`N`, whose answers its
//! writer drops), then frames the pending bytes, then reads on.

use crate::client::{ClientId, Peer};
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The ids of replayed requests: `"mcp-supervisor-handover-N"`. Their answers are not
/// shown (the hand-over record carries them, issue 32 §1).
pub const REPLAY_ID_PREFIX: &str = "mcp-supervisor-handover-";

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
    /// Its acknowledged listen streams' requests, replayed after `replay` (their first
    /// acknowledgement is not shown).
    pub listens: Vec<String>,
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
/// request: its id is [`REPLAY_ID_PREFIX`]`N`.
/// The supervisor writes every response as `{"jsonrpc":"2.0","id":…` (`jsonrpc::message`).
pub fn is_replay_answer(head: &[u8]) -> bool {
    head.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":\"mcp-supervisor-handover-")
}

/// What a resumed session's writer drops (issue 32 §1): the answers to the replayed
/// requests (ids [`REPLAY_ID_PREFIX`]`N`), and the first
/// `notifications/subscriptions/acknowledged` of each replayed acknowledged listen stream
/// (replayed under the client's own id: the client had its acknowledgement before the
/// upgrade). An acknowledgement not seen within [`ACK_WAIT`] (the stream was refused or
/// cancelled) is no longer waited for, so a later stream with the same id is acknowledged.
#[derive(Debug, Default)]
pub struct Mute {
    /// Replayed requests whose answers may still come.
    answers: usize,
    /// Id keys of the replayed listen streams not acknowledged yet.
    acks: Vec<String>,
    /// When the acknowledgements stop being waited for.
    until: Option<std::time::Instant>,
}

/// How long a resumed session's writer waits for the acknowledgements of its replayed listen
/// streams (they come within milliseconds of the resume).
pub const ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest line looked at for an acknowledgement (an acknowledgement is small).
const ACK_LINE_MAX: usize = 64 * 1024;

impl Mute {
    /// The mute for `replayed` (a hand-over's replay lines, parsed) and `listens` (its
    /// acknowledged listen streams, parsed), starting now.
    pub fn of(
        replayed: &[vocab::jsonrpc::message::Message],
        listens: &[vocab::jsonrpc::message::Message],
    ) -> Mute {
        let answers = replayed
            .iter()
            .filter(|r| {
                r.id.as_deref()
                    .is_some_and(|id| id.get().contains(REPLAY_ID_PREFIX))
            })
            .count();
        let acks: Vec<String> = listens
            .iter()
            .filter_map(|r| r.id.as_deref().map(crate::ids::id_key))
            .collect();
        Mute {
            answers,
            until: (!acks.is_empty()).then(|| std::time::Instant::now() + ACK_WAIT),
            acks,
        }
    }

    /// Whether `line` (toward the client) is dropped. Costs a comparison once everything
    /// muted has gone by.
    pub fn drops(&mut self, line: &vocab::jsonrpc::framing::Line) -> bool {
        if self.answers > 0 && is_replay_answer(line.parts()[0]) {
            self.answers -= 1;
            return true;
        }
        if self.acks.is_empty() {
            return false;
        }
        if self.until.is_some_and(|t| std::time::Instant::now() >= t) {
            self.acks.clear();
            return false;
        }
        if line.len() > ACK_LINE_MAX {
            return false;
        }
        let whole = line.to_bytes();
        const ACK: &[u8] = b"notifications/subscriptions/acknowledged";
        if memchr::memmem::find(&whole, ACK).is_none() {
            return false;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&whole) else {
            return false;
        };
        if v.get("method").and_then(serde_json::Value::as_str)
            != Some("notifications/subscriptions/acknowledged")
        {
            return false;
        }
        let Some(sub) = v
            .pointer("/params/_meta/io.modelcontextprotocol~1subscriptionId")
            .map(serde_json::Value::to_string)
        else {
            return false;
        };
        match self.acks.iter().position(|k| *k == sub) {
            Some(i) => {
                self.acks.swap_remove(i);
                true
            }
            None => false,
        }
    }
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
        let line = vocab::jsonrpc::message::error_response(
            &vocab::jsonrpc::message::raw(&serde_json::json!("mcp-supervisor-handover-2")),
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

    #[test]
    fn a_replayed_listen_streams_first_acknowledgement_is_dropped_once() {
        use vocab::jsonrpc::framing::Line;
        let parse = |l: &str| vocab::jsonrpc::message::parse_one(l.as_bytes()).unwrap();
        let replay = [parse(
            r#"{"jsonrpc":"2.0","id":"mcp-supervisor-handover-1","method":"logging/setLevel","params":{"level":"info"}}"#,
        )];
        let listens = [parse(
            r#"{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{}}}"#,
        )];
        let mut m = Mute::of(&replay, &listens);
        let line = |t: &str| Line::from(bytes::Bytes::from(t.to_string()));
        let ack = r#"{"method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L"}},"jsonrpc":"2.0"}"#;
        let other = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"M"}}}"#;
        assert!(!m.drops(&line(other)));
        assert!(m.drops(&line(
            r#"{"jsonrpc":"2.0","id":"mcp-supervisor-handover-1","result":{}}"#
        )));
        assert!(m.drops(&line(ack)));
        // Once: a later acknowledgement of the same stream is the client's.
        assert!(!m.drops(&line(ack)));
        assert!(!m.drops(&line(r#"{"jsonrpc":"2.0","id":"L","result":{}}"#)));
    }
}
