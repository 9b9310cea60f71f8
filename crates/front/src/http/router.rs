//! The routing table of one handshake-era HTTP session: which of its response streams gets
//! each line the actor sends the session's client (issue 27 §5).
//!
//! The actor addresses every line ([`Address`]); this table only maps those keys to streams,
//! so no outgoing line is parsed here. It is owned by the session's pump alone (`session.rs`):
//! streams register and leave through the pump's control channel, so nothing here is shared
//! and no line takes a lock.
//!
//! Where a line goes, by its address:
//! - [`Address::Response`]: to the POST stream that sent the request with that id (SSE or
//!   JSON), which ends once all its requests are answered; a response whose stream was
//!   dropped is discarded (never given to another stream); an id-less error (`null`) is
//!   session-wide;
//! - [`Address::Progress`]: to the POST stream whose request carried that progress token,
//!   when it is an SSE stream (a JSON body carries only responses), else discarded;
//! - [`Address::Listen`]: to the SSE POST stream of the listen request with that id, else
//!   session-wide;
//! - [`Address::Session`] (and the rest of the above): the newest SSE POST stream still open,
//!   else the newest GET stream still open, else the backlog ([`BACKLOG`] lines, the oldest
//!   dropped), delivered to the next SSE stream that opens;
//! - [`Address::Request`]: like a session-wide line, but never kept: when no stream takes it
//!   the pump answers it at once ([`Routed::Unanswerable`]).

use actor::session::{Address, ClientId};
use bytes::Bytes;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Lines kept for a session with no open stream.
pub const BACKLOG: usize = 256;
/// GET streams open at once per session; a newer one closes the oldest.
pub const GET_STREAMS: usize = 4;
/// Lines queued toward one HTTP response stream before it is closed as too slow.
pub(super) const STREAM_QUEUE: usize = 1024;

/// The streams of one session and what each awaits.
#[derive(Debug)]
pub(super) struct Router {
    /// The session's actor client (for the log).
    client: ClientId,
    /// Unanswered request id (canonical key) → the POST stream awaiting it.
    by_id: HashMap<String, u64>,
    /// Progress token (canonical key) → the POST stream of the request that carries it.
    by_token: HashMap<String, u64>,
    /// Open POST streams by number (a later POST has a higher number).
    streams: BTreeMap<u64, PostStream>,
    /// The GET streams, oldest first (at most [`GET_STREAMS`]); closed ones are pruned.
    gets: VecDeque<mpsc::Sender<Bytes>>,
    backlog: VecDeque<Bytes>,
    /// Requests whose stream closed before their answer: their late answers are dropped.
    abandoned: HashSet<String>,
}

#[derive(Debug)]
struct PostStream {
    tx: mpsc::Sender<Bytes>,
    /// An SSE stream (it may carry requests and notifications); else a JSON body, which
    /// carries only the responses to its requests.
    sse: bool,
    /// Ids (canonical keys) not answered yet, with the id as the client wrote it.
    pending: Vec<(String, Box<RawValue>)>,
    tokens: Vec<String>,
}

/// What became of a line ([`Router::route`]).
#[derive(Debug)]
pub(super) enum Routed {
    /// Delivered, dropped or kept: nothing more to do.
    Done,
    /// A request toward the client that no stream can carry: the pump answers it with an
    /// error, as the client would.
    Unanswerable {
        /// The id it was sent under.
        id: Box<RawValue>,
        /// Its method.
        method: String,
        /// Why no stream took it.
        why: &'static str,
    },
    /// A POST stream was not read (its queue full) and is closed now: these requests of it
    /// (ids as the client wrote them) are to be cancelled toward the actor.
    Closed(Vec<Box<RawValue>>),
}

impl Router {
    /// An empty table for the session whose actor client is `client`.
    pub(super) fn new(client: ClientId) -> Self {
        Router {
            client,
            by_id: HashMap::new(),
            by_token: HashMap::new(),
            streams: BTreeMap::new(),
            gets: VecDeque::new(),
            backlog: VecDeque::new(),
            abandoned: HashSet::new(),
        }
    }

    /// Registers POST stream `n` (numbers grow with each POST), awaiting the answers to
    /// `pending` (canonical key, id) and the progress of `tokens` (canonical keys); an `sse`
    /// one also takes the backlog, and may carry requests and notifications. `Err(id)` when
    /// an id is already awaited by another stream of this session (nothing is registered).
    pub(super) fn open_post(
        &mut self,
        n: u64,
        pending: Vec<(String, Box<RawValue>)>,
        tokens: Vec<String>,
        sse: bool,
        tx: mpsc::Sender<Bytes>,
    ) -> Result<(), Box<RawValue>> {
        if let Some((_, id)) = pending.iter().find(|(k, _)| self.by_id.contains_key(k)) {
            return Err(id.clone());
        }
        for (k, _) in &pending {
            self.abandoned.remove(k);
            self.by_id.insert(k.clone(), n);
        }
        for t in &tokens {
            self.by_token.insert(t.clone(), n);
        }
        if sse {
            self.drain_backlog(&tx);
        }
        self.streams.insert(
            n,
            PostStream {
                tx,
                sse,
                pending,
                tokens,
            },
        );
        Ok(())
    }

    /// POST stream `n` was dropped (the client closed it, or it ended): returns its requests
    /// still unanswered (ids as the client wrote them), whose late answers are dropped from
    /// now on. Nothing for a stream not registered (refused, or already gone).
    pub(super) fn post_gone(&mut self, n: u64) -> Vec<Box<RawValue>> {
        let Some(st) = self.streams.remove(&n) else {
            return Vec::new();
        };
        for t in &st.tokens {
            if self.by_token.get(t) == Some(&n) {
                self.by_token.remove(t);
            }
        }
        let mut cancels = Vec::new();
        for (k, id) in st.pending {
            if self.by_id.get(&k) == Some(&n) {
                self.by_id.remove(&k);
                self.abandoned.insert(k);
                cancels.push(id);
            }
        }
        cancels
    }

    /// Adds a GET stream, which takes the backlog; beyond [`GET_STREAMS`] the oldest is
    /// dropped (its response ends).
    pub(super) fn open_get(&mut self, tx: mpsc::Sender<Bytes>) {
        self.gets.retain(|g| !g.is_closed());
        if self.gets.len() >= GET_STREAMS {
            self.gets.pop_front();
            debug!(client = %self.client, "a newer GET stream of the HTTP session: closing the oldest");
        }
        self.drain_backlog(&tx);
        self.gets.push_back(tx);
    }

    /// Routes one line (without its `\n`) by the address the actor gave it (module
    /// documentation).
    pub(super) fn route(&mut self, to: Address, line: Bytes) -> Routed {
        match &to {
            Address::Response(k) => {
                if self.abandoned.remove(k) {
                    return Routed::Done;
                }
                match self.by_id.remove(k) {
                    Some(n) => return self.respond(n, k, line),
                    // A response nobody awaits (its stream ended): dropped, never given to
                    // another stream. Only id-less errors (`id: null`) go on below.
                    None if k.as_str() != "null" => {
                        debug!(client = %self.client, id = %k, "response for no open stream dropped");
                        return Routed::Done;
                    }
                    None => {}
                }
            }
            Address::Progress(t) => {
                let st = self
                    .by_token
                    .get(t)
                    .and_then(|n| self.streams.get(n))
                    .filter(|st| st.sse);
                match st {
                    Some(st) => {
                        let _ = st.tx.try_send(line);
                    }
                    // A JSON body carries no progress; or its request was answered or its
                    // stream closed: nobody waits for it.
                    None => {
                        debug!(client = %self.client, "progress for no open SSE stream dropped");
                    }
                }
                return Routed::Done;
            }
            Address::Listen(k) => {
                let st = self
                    .by_id
                    .get(k)
                    .and_then(|n| self.streams.get(n))
                    .filter(|st| st.sse);
                if st.is_some_and(|st| st.tx.try_send(line.clone()).is_ok()) {
                    return Routed::Done;
                }
            }
            Address::Request { .. } | Address::Session => {}
        }
        if self.send_session_wide(&line) {
            return Routed::Done;
        }
        if let Address::Request { id, method } = to {
            let json_only = self.streams.values().any(|st| !st.sse);
            let open = !self.gets.is_empty() || self.streams.values().any(|st| st.sse);
            let why = match (open, json_only) {
                (true, _) => "its streams are not being read",
                (false, true) => "its POST accepts only JSON (no text/event-stream) and it has no GET stream open",
                (false, false) => "it has no POST stream or GET stream open",
            };
            return Routed::Unanswerable { id, method, why };
        }
        if self.backlog.len() >= BACKLOG {
            self.backlog.pop_front();
            warn!(client = %self.client, "HTTP session has no open stream and {BACKLOG} lines waiting: dropped the oldest");
        }
        self.backlog.push_back(line);
        Routed::Done
    }

    /// Delivers the response whose key `k` stream `n` awaited; the stream ends once all its
    /// requests are answered, and is closed (its other requests to be cancelled) when it is
    /// not read.
    fn respond(&mut self, n: u64, k: &str, line: Bytes) -> Routed {
        let Some(st) = self.streams.get_mut(&n) else {
            return Routed::Done;
        };
        st.pending.retain(|(p, _)| p != k);
        let done = st.pending.is_empty();
        if let Err(mpsc::error::TrySendError::Full(_)) = st.tx.try_send(line) {
            // A client that does not read its stream is closed, as a slow socket client is
            // (R17); its other requests are cancelled.
            warn!(client = %self.client, "HTTP response stream not read ({STREAM_QUEUE} lines queued): closing it");
            return Routed::Closed(self.post_gone(n));
        }
        if done {
            // Every answer is in: the stream ends after it.
            if let Some(st) = self.streams.remove(&n) {
                for t in st.tokens {
                    if self.by_token.get(&t) == Some(&n) {
                        self.by_token.remove(&t);
                    }
                }
            }
        }
        Routed::Done
    }

    /// Puts a line on the newest SSE POST stream still open, else the newest GET stream
    /// still open; `false` when neither takes it.
    fn send_session_wide(&mut self, line: &Bytes) -> bool {
        let post = self
            .streams
            .values()
            .rev()
            .find(|st| st.sse && !st.tx.is_closed());
        if post.is_some_and(|st| st.tx.try_send(line.clone()).is_ok()) {
            return true;
        }
        self.gets.retain(|g| !g.is_closed());
        self.gets
            .back()
            .is_some_and(|g| g.try_send(line.clone()).is_ok())
    }

    /// Moves the backlog onto a new stream, as far as its queue takes it.
    fn drain_backlog(&mut self, tx: &mpsc::Sender<Bytes>) {
        while let Some(b) = self.backlog.pop_front() {
            if let Err(e) = tx.try_send(b) {
                if let mpsc::error::TrySendError::Full(b) = e {
                    self.backlog.push_front(b);
                }
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actor::ids::id_key;
    use proptest::prelude::*;
    use vocab::jsonrpc::message::raw_u64;

    fn router() -> Router {
        Router::new(ClientId(1))
    }

    /// `(key, id)` pairs for a POST of requests with these numeric ids.
    fn pending(ids: &[u64]) -> Vec<(String, Box<RawValue>)> {
        ids.iter()
            .map(|i| {
                let raw = raw_u64(*i);
                (id_key(&raw), raw)
            })
            .collect()
    }

    fn response(id: u64) -> Address {
        Address::Response(id.to_string())
    }

    fn line(text: &str) -> Bytes {
        Bytes::from(text.to_string())
    }

    fn drain(rx: &mut mpsc::Receiver<Bytes>) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok(b) = rx.try_recv() {
            got.push(String::from_utf8_lossy(&b).into_owned());
        }
        got
    }

    /// Opens POST stream `n` awaiting `ids` (progress tokens `t<id>`); its receiver.
    fn post(r: &mut Router, n: u64, ids: &[u64], sse: bool) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let tokens = ids.iter().map(|i| format!("t{i}")).collect();
        assert!(r.open_post(n, pending(ids), tokens, sse, tx).is_ok());
        rx
    }

    fn get(r: &mut Router) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        r.open_get(tx);
        rx
    }

    fn done(r: Routed) {
        assert!(matches!(r, Routed::Done), "{r:?}");
    }

    #[test]
    fn a_response_goes_to_the_stream_that_sent_its_request_whatever_its_bytes() {
        let mut r = router();
        let mut json = post(&mut r, 0, &[1], false);
        let mut sse = post(&mut r, 1, &[2], true);
        // The address says which request: the bytes are never read (these say nothing).
        done(r.route(response(2), line("for-2")));
        done(r.route(response(1), line("for-1")));
        assert_eq!(drain(&mut json), ["for-1"]);
        assert_eq!(drain(&mut sse), ["for-2"]);
        // Both streams are answered and ended: a second answer to 1 goes nowhere.
        done(r.route(response(1), line("again")));
        assert!(json.try_recv().is_err() && sse.try_recv().is_err());
    }

    #[test]
    fn a_line_shaped_like_a_response_but_addressed_session_wide_goes_session_wide() {
        let mut r = router();
        let mut json = post(&mut r, 0, &[1], false);
        let mut sse = post(&mut r, 1, &[2], true);
        let mut g = get(&mut r);
        let looks_like_1 = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let looks_like_progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":1}}"#;
        done(r.route(Address::Session, line(looks_like_1)));
        done(r.route(Address::Session, line(looks_like_progress)));
        // The newest SSE POST stream carries session-wide lines; the JSON stream none.
        assert_eq!(drain(&mut sse), [looks_like_1, looks_like_progress]);
        assert!(drain(&mut json).is_empty());
        assert!(drain(&mut g).is_empty());
        // Request 1 is still awaited by its own stream: a line addressed to it, whatever it
        // looks like, answers it there.
        let looks_like_a_notification = r#"{"jsonrpc":"2.0","method":"notifications/message"}"#;
        done(r.route(response(1), line(looks_like_a_notification)));
        assert_eq!(drain(&mut json), [looks_like_a_notification]);
    }

    #[test]
    fn session_wide_lines_go_to_the_newest_sse_post_then_the_newest_get_then_the_backlog() {
        let mut r = router();
        done(r.route(Address::Session, line("early")));
        let mut old_get = get(&mut r);
        assert_eq!(
            drain(&mut old_get),
            ["early"],
            "a GET stream takes the backlog"
        );
        let mut new_get = get(&mut r);
        let mut json = post(&mut r, 0, &[1], false);
        done(r.route(Address::Session, line("a")));
        assert_eq!(drain(&mut new_get), ["a"]);
        assert!(drain(&mut old_get).is_empty() && drain(&mut json).is_empty());
        let mut sse_old = post(&mut r, 1, &[2], true);
        let mut sse_new = post(&mut r, 2, &[3], true);
        done(r.route(Address::Session, line("b")));
        assert_eq!(drain(&mut sse_new), ["b"]);
        assert!(drain(&mut sse_old).is_empty() && drain(&mut new_get).is_empty());
        // The newest SSE stream closed by its client: the next newest still open.
        drop(sse_new);
        done(r.route(Address::Session, line("c")));
        assert_eq!(drain(&mut sse_old), ["c"]);
        // No stream that can carry it: kept, at most BACKLOG lines, the oldest dropped.
        drop((sse_old, old_get, new_get));
        assert!(r.post_gone(1).len() == 1 && r.post_gone(2).len() == 1);
        for i in 0..BACKLOG + 3 {
            done(r.route(Address::Session, line(&format!("n{i}"))));
        }
        assert!(
            drain(&mut json).is_empty(),
            "a JSON body carries only responses"
        );
        let mut sse = post(&mut r, 3, &[4], true);
        let kept = drain(&mut sse);
        assert_eq!(kept.len(), BACKLOG);
        assert_eq!(kept.first().map(String::as_str), Some("n3"));
    }

    #[test]
    fn progress_goes_only_to_the_sse_stream_of_its_token() {
        let mut r = router();
        let mut json = post(&mut r, 0, &[1], false);
        let mut a = post(&mut r, 1, &[2], true);
        let mut b = post(&mut r, 2, &[3], true);
        done(r.route(Address::Progress("t2".into()), line("p2")));
        done(r.route(Address::Progress("t1".into()), line("p1")));
        done(r.route(Address::Progress("t9".into()), line("p9")));
        assert_eq!(drain(&mut a), ["p2"]);
        assert!(drain(&mut b).is_empty(), "progress is never session-wide");
        assert!(
            drain(&mut json).is_empty(),
            "a JSON body carries no progress"
        );
        // Answered: its progress has nowhere to go.
        done(r.route(response(2), line("r2")));
        done(r.route(Address::Progress("t2".into()), line("late")));
        assert_eq!(drain(&mut a), ["r2"]);
        assert!(drain(&mut b).is_empty());
    }

    #[test]
    fn a_request_is_delivered_on_one_stream_or_handed_back_never_kept() {
        let mut r = router();
        let _json = post(&mut r, 0, &[1], false);
        let ask = |n: u64| Address::Request {
            id: raw_u64(n),
            method: "elicitation/create".into(),
        };
        match r.route(ask(7), line("q7")) {
            Routed::Unanswerable { id, method, why } => {
                assert_eq!(id.get(), "7");
                assert_eq!(method, "elicitation/create");
                assert!(why.contains("only JSON"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        let mut g = get(&mut r);
        assert!(
            drain(&mut g).is_empty(),
            "a request never waits in the backlog"
        );
        done(r.route(ask(8), line("q8")));
        assert_eq!(drain(&mut g), ["q8"]);
        // A stream that is not read: handed back too.
        let (tx, _unread) = mpsc::channel(1);
        r.open_get(tx);
        done(r.route(Address::Session, line("fills it")));
        assert!(matches!(
            r.route(ask(9), line("q9")),
            Routed::Unanswerable { why, .. } if why.contains("not being read")
        ));
    }

    #[test]
    fn a_dropped_stream_cancels_its_unanswered_requests_and_their_answers_are_dropped() {
        let mut r = router();
        let mut a = post(&mut r, 0, &[1, 2], true);
        done(r.route(response(1), line("r1")));
        assert_eq!(drain(&mut a), ["r1"]);
        let cancels: Vec<String> = r.post_gone(0).iter().map(|i| i.get().to_string()).collect();
        assert_eq!(cancels, ["2"]);
        assert!(r.post_gone(0).is_empty(), "once");
        let mut b = post(&mut r, 1, &[3], true);
        done(r.route(response(2), line("late r2")));
        assert!(
            drain(&mut b).is_empty(),
            "an abandoned answer goes to no other stream"
        );
        // An id-less error answers no request: session-wide.
        done(r.route(Address::Response("null".into()), line("null error")));
        assert_eq!(drain(&mut b), ["null error"]);
        // The id may be used again once its stream is gone.
        let mut c = post(&mut r, 2, &[2], false);
        done(r.route(response(2), line("new r2")));
        assert_eq!(drain(&mut c), ["new r2"]);
    }

    #[test]
    fn an_id_awaited_by_another_stream_is_refused_and_nothing_is_registered() {
        let mut r = router();
        let mut a = post(&mut r, 0, &[1], true);
        let (tx, mut rx) = mpsc::channel(4);
        let refused = r.open_post(1, pending(&[5, 1]), vec!["t5".into()], true, tx);
        assert_eq!(refused.map_err(|id| id.get().to_string()), Err("1".into()));
        done(r.route(response(5), line("r5")));
        done(r.route(Address::Progress("t5".into()), line("p5")));
        assert!(rx.try_recv().is_err() && drain(&mut a).is_empty());
        assert!(r.post_gone(1).is_empty());
    }

    #[test]
    fn a_stream_not_read_is_closed_and_its_other_requests_cancelled() {
        let mut r = router();
        let (tx, mut rx) = mpsc::channel(1);
        assert!(r
            .open_post(0, pending(&[1, 2, 3]), Vec::new(), true, tx)
            .is_ok());
        done(r.route(response(1), line("r1")));
        match r.route(response(2), line("r2")) {
            Routed::Closed(ids) => {
                let ids: Vec<&str> = ids.iter().map(|i| i.get()).collect();
                assert_eq!(ids, ["3"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(drain(&mut rx), ["r1"]);
        assert!(rx.try_recv().is_err(), "closed: its sender is gone");
    }

    #[test]
    fn listen_traffic_goes_to_its_own_sse_stream_else_session_wide() {
        let mut r = router();
        let mut listen = post(&mut r, 0, &[7], true);
        let mut newer = post(&mut r, 1, &[8], true);
        done(r.route(Address::Listen("7".into()), line("ack")));
        assert_eq!(drain(&mut listen), ["ack"]);
        assert!(drain(&mut newer).is_empty());
        // Its stream ended: the traffic is session-wide.
        done(r.route(response(7), line("end")));
        done(r.route(Address::Listen("7".into()), line("stray")));
        assert_eq!(drain(&mut listen), ["end"]);
        assert_eq!(drain(&mut newer), ["stray"]);
    }

    #[test]
    fn beyond_get_streams_the_oldest_get_stream_is_closed() {
        let mut r = router();
        let mut gets: Vec<_> = (0..=GET_STREAMS).map(|_| get(&mut r)).collect();
        done(r.route(Address::Session, line("x")));
        let first = gets.remove(0);
        assert!(first.is_closed() || first.is_empty());
        let mut first = first;
        assert!(matches!(
            first.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        let last = gets.len() - 1;
        assert_eq!(drain(&mut gets[last]), ["x"]);
    }

    /// An opened stream: its receiver (None once closed), the ids it awaits, its number,
    /// whether it is SSE.
    type OpenedStream = (Option<mpsc::Receiver<Bytes>>, Vec<String>, u64, bool);

    #[derive(Debug, Clone)]
    enum Op {
        /// A POST with requests of these ids (small, so they collide across streams), whose
        /// answer is an SSE stream (else one JSON body).
        Open(Vec<u8>, bool),
        /// The actor answers id.
        Respond(u8),
        /// The actor sends a notification (progress for a token, or anything else).
        Notify(Option<u8>),
        /// The child asks the client something (a request of its own).
        Ask,
        /// The client closes the n-th stream it opened.
        Close(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (proptest::collection::vec(0u8..12, 1..4), any::<bool>())
                .prop_map(|(ids, sse)| Op::Open(ids, sse)),
            (0u8..12).prop_map(Op::Respond),
            proptest::option::of(0u8..12).prop_map(Op::Notify),
            Just(Op::Ask),
            (0usize..8).prop_map(Op::Close),
        ]
    }

    proptest! {
        /// Whatever the order of POSTs, answers, notifications, the child's questions and
        /// closed streams: a response reaches only the stream that sent a request with its
        /// id, at most once; a JSON stream gets nothing but responses; each question of the
        /// child goes on exactly one SSE stream, or is handed back to be answered with an
        /// error; progress only to the stream of its token.
        #[test]
        fn responses_reach_only_their_own_stream(ops in proptest::collection::vec(op(), 1..60)) {
            let mut r = router();
            let mut streams: Vec<OpenedStream> = Vec::new();
            let mut got: Vec<Vec<serde_json::Value>> = Vec::new();
            let mut asked = 0u64;
            let mut unanswerable = 0usize;
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Ask => {
                        asked += 1;
                        let text = format!(r#"{{"jsonrpc":"2.0","id":"s{asked}","method":"elicitation/create","params":{{}}}}"#);
                        let id = vocab::jsonrpc::message::raw(&serde_json::json!(format!("s{asked}")));
                        let to = Address::Request { id, method: "elicitation/create".into() };
                        if let Routed::Unanswerable { id, .. } = r.route(to, Bytes::from(text)) {
                            prop_assert_eq!(id.get(), format!("\"s{asked}\""));
                            unanswerable += 1;
                        }
                    }
                    Op::Open(ids, sse) => {
                        let mut p: Vec<(String, Box<RawValue>)> = Vec::new();
                        for i in ids {
                            let raw = raw_u64(u64::from(i));
                            let k = id_key(&raw);
                            if !p.iter().any(|(q, _)| *q == k) {
                                p.push((k, raw));
                            }
                        }
                        let keys: Vec<String> = p.iter().map(|(k, _)| k.clone()).collect();
                        let tokens = keys.iter().map(|k| format!("t{k}")).collect();
                        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                        let n = next;
                        next += 1;
                        if r.open_post(n, p, tokens, sse, tx).is_ok() {
                            streams.push((Some(rx), keys, n, sse));
                            got.push(Vec::new());
                        }
                    }
                    Op::Respond(i) => {
                        let text = format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}}"#);
                        let _ = r.route(response(u64::from(i)), Bytes::from(text));
                    }
                    Op::Notify(Some(t)) => {
                        let text = format!(
                            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t{t}","progress":1}}}}"#
                        );
                        let _ = r.route(Address::Progress(format!("t{t}")), Bytes::from(text));
                    }
                    Op::Notify(None) => {
                        let _ = r.route(Address::Session, Bytes::from_static(
                            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}"#,
                        ));
                    }
                    Op::Close(i) => {
                        if let Some((rx, _, n, _)) = streams.get_mut(i) {
                            if let Some(mut rx) = rx.take() {
                                while let Ok(b) = rx.try_recv() {
                                    got[i].push(serde_json::from_slice(&b).unwrap());
                                }
                                drop(rx);
                                let _ = r.post_gone(*n);
                            }
                        }
                    }
                }
            }
            for (i, (rx, _, _, _)) in streams.iter_mut().enumerate() {
                if let Some(rx) = rx.as_mut() {
                    while let Ok(b) = rx.try_recv() {
                        got[i].push(serde_json::from_slice(&b).unwrap());
                    }
                }
            }
            let mut questions = HashSet::new();
            for (i, lines) in got.iter().enumerate() {
                let mine = &streams[i].1;
                if !streams[i].3 {
                    prop_assert!(
                        lines.iter().all(|v| v.get("method").is_none()),
                        "JSON stream {} got {:?}", i, lines
                    );
                }
                for v in lines.iter().filter(|v| v["method"] == "elicitation/create") {
                    prop_assert!(questions.insert(v["id"].to_string()), "question {} on two streams", v["id"]);
                }
                let mut seen = HashSet::new();
                for v in lines.iter().filter(|v| v.get("method").is_none() && !v["id"].is_null()) {
                    let k = v["id"].to_string();
                    prop_assert!(mine.contains(&k), "stream {} got a response to {} (awaits {:?})", i, k, mine);
                    prop_assert!(seen.insert(k.clone()), "stream {} got {} twice", i, k);
                }
                for v in lines.iter().filter(|v| v["method"] == "notifications/progress") {
                    let t = v["params"]["progressToken"].as_str().unwrap_or("").trim_start_matches('t').to_string();
                    prop_assert!(mine.contains(&t), "stream {} got progress for token {}", i, t);
                }
            }
            // With no GET stream in play, every question the streams could not carry was
            // handed back: none waits in the backlog.
            prop_assert_eq!(questions.len() + unanswerable, usize::try_from(asked).unwrap_or(usize::MAX));
        }
    }
}
