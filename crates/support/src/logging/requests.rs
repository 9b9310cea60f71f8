//! The request log (issue 8: one line per finished client request) kept off the relay's
//! critical path (issue 15 §2). The log is written by one log thread; an actor never makes a
//! log syscall and never waits for the log:
//!
//! - to plain stderr (a file or a pipe) each actor formats its lines into its own
//!   [`LineBuffer`] (the same text the `fmt` layer writes for other events: timestamp,
//!   level, the `server{server=NAME}` span, the fields) and hands the buffer to the log
//!   thread when it fills (64 KiB) or before the actor waits for input, so a busy relay
//!   sends one buffer per few hundred lines, the thread writes it with one `write(2)`, and
//!   nothing crosses threads per line;
//! - to the journal or a terminal each record goes to the log thread, which emits an
//!   ordinary `tracing` event (target [`TARGET`]) inside the same span, so the journal gets
//!   the same fields (`REQUEST_ID=`, `METHOD=`, `SERVER=`, ...).
//!
//! The queue to the thread is bounded; when it is full (the log cannot keep up, or stderr is
//! blocked) lines are dropped and counted ([`dropped`], the metric
//! `mcp_supervisor_request_log_dropped_total`), and the log says how many once it can write
//! again. A request's line may come up to about 20 ms after lifecycle lines logged after it
//! (those are written by the actor directly). [`flush`] writes what is queued; the daemon
//! calls it before it exits.

use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// The `tracing` target of request log events: `RUST_LOG=info,mcp_supervisor::requests=off`
/// silences the log (checked with [`enabled`] before a record is built).
pub const TARGET: &str = "mcp_supervisor::requests";

/// Messages waiting for the log thread (records, or buffers of lines); beyond this many they
/// are dropped and counted.
pub const QUEUE: usize = 1024;

/// Bytes of lines waiting for the log thread; a buffer that would take the total over this is
/// dropped and its lines counted (about 18,000 lines: a stuck stderr costs at most this much
/// memory, while a disk that stalls for a moment loses nothing).
pub const QUEUE_BYTES: usize = 4 << 20;

/// After writing, the log thread lets the next lines gather this long, so a busy relay pays
/// no wakeup per buffer (senders find nobody waiting): at most 50 writes per second, and a
/// line is at most about this late.
const GATHER: Duration = Duration::from_millis(20);

/// A [`LineBuffer`] goes to the log thread once it holds this many bytes (about 280 lines),
/// and the thread writes at most this much at once.
pub const BATCH_BYTES: usize = 64 * 1024;

/// A request's log id, shown to the client in outage records and timeouts (`r-` and 12 hex
/// digits: `r-5f0c1a2b3c4d`); random so ids from different runs do not collide in a log
/// store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(pub u64);

impl RequestId {
    /// A fresh random id (48 bits).
    pub fn random() -> RequestId {
        RequestId(rand::random::<u64>() & 0xffff_ffff_ffff)
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r-{:012x}", self.0)
    }
}

/// One finished client request, as the request log shows it
/// (docs/book/src/guides/monitoring.md, "Request log"); its text borrowed from the actor's
/// tables until it must outlive them ([`Record::into_owned`]).
#[derive(Debug)]
pub struct Record<'a> {
    /// When it finished (the actor's clock for the input that finished it).
    pub at: SystemTime,
    /// The server's name (the `server{server=NAME}` span).
    pub server: Cow<'a, str>,
    /// `request_id`.
    pub request_id: RequestId,
    /// `client`: the connection's number (`c7`).
    pub client: u64,
    /// `peer_uid`, `peer_pid`: the connection's credentials, when known.
    pub peer_uid: Option<u32>,
    /// See `peer_uid`.
    pub peer_pid: Option<i32>,
    /// `client_name`: from `initialize`, or a 2026 client's first request.
    pub client_name: Cow<'a, str>,
    /// `endpoint`: the endpoint the client came through (issue 31 §7), else absent; `server`
    /// is then the endpoint's source that had the request.
    pub endpoint: Option<Cow<'a, str>>,
    /// `method`.
    pub method: Cow<'a, str>,
    /// `tool`: the `tools/call` tool name, else empty.
    pub tool: Option<Cow<'a, str>>,
    /// `arg_keys`: `tools/call` argument names joined with `,` (never their values).
    pub arg_keys: Cow<'a, str>,
    /// `duration_ms`: arrival to outcome.
    pub duration: Duration,
    /// `outcome` (docs/book/src/reference/metrics.md, "Outcomes").
    pub outcome: &'static str,
    /// `error_code`: the JSON-RPC error code the client got, if any.
    pub error_code: Option<i64>,
    /// `restarted`: the child that had the request exited or was replaced meanwhile.
    pub restarted: bool,
}

impl Record<'_> {
    /// The record with its text copied, to send to the log thread.
    pub fn into_owned(self) -> Record<'static> {
        let own = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
        Record {
            at: self.at,
            server: own(self.server),
            request_id: self.request_id,
            client: self.client,
            peer_uid: self.peer_uid,
            peer_pid: self.peer_pid,
            client_name: own(self.client_name),
            endpoint: self.endpoint.map(own),
            method: own(self.method),
            tool: self.tool.map(own),
            arg_keys: own(self.arg_keys),
            duration: self.duration,
            outcome: self.outcome,
            error_code: self.error_code,
            restarted: self.restarted,
        }
    }
}

/// One actor's request log lines not yet handed to the log thread (plain stderr), or the
/// path of its records to the thread (journal, terminal). See the module documentation.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: Vec<u8>,
    lines: u64,
    /// The formatted whole second of the last line (`2026-12-01T14:53:42.`), by epoch second.
    stamp: Option<(u64, String)>,
}

impl LineBuffer {
    /// Logs `record`: formatted here for plain stderr, else sent to the log thread.
    pub fn add(&mut self, record: Record<'_>) {
        if !PLAIN.load(Ordering::Relaxed) {
            return submit(record.into_owned());
        }
        let secs = record
            .at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let stamp = match &self.stamp {
            Some((s, text)) if *s == secs => text,
            _ => &self.stamp.insert((secs, second_stamp(record.at))).1,
        };
        format_line(&record, stamp, &mut self.buf);
        self.lines += 1;
        if self.buf.len() >= BATCH_BYTES {
            self.flush();
        }
    }

    /// Hands the buffered lines to the log thread (the actor calls it before it waits for
    /// input); they are dropped and counted when the thread's queue is full.
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.lines);
        // A busy actor (its buffer filled up) gets a whole batch's room at once, so the next
        // batch is not grown by doubling (a copy at each step); a quiet one, room for a line.
        let room = if self.buf.len() >= BATCH_BYTES {
            BATCH_BYTES + 4096
        } else {
            512
        };
        let buf = std::mem::replace(&mut self.buf, Vec::with_capacity(room));
        let len = buf.len();
        let room_left = QUEUED_BYTES.fetch_add(len, Ordering::Relaxed) + len <= QUEUE_BYTES;
        let sent = room_left && sink().is_some_and(|tx| tx.try_send(Msg::Lines(buf)).is_ok());
        if !sent {
            QUEUED_BYTES.fetch_sub(len, Ordering::Relaxed);
            DROPPED.fetch_add(lines, Ordering::Relaxed);
        }
    }

    /// Whether lines wait to be handed over.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Logs one record made outside an actor (an endpoint's own answers, issue 31 §7): formatted
/// and handed over at once, as [`LineBuffer::add`] then [`LineBuffer::flush`] would.
pub fn log_one(record: Record<'_>) {
    let mut buf = LineBuffer::default();
    buf.add(record);
    buf.flush();
}

/// Whether request log lines are wanted at all (the filter of [`super::init`]; false when no
/// subscriber is installed, as in unit tests and the simulation). Cheap: `tracing` caches the
/// answer per call site.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// Hands `record` to the log thread without waiting; drops and counts it when the queue is
/// full or the thread could not be started.
fn submit(record: Record<'static>) {
    let Some(tx) = sink() else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    match tx.try_send(Msg::Record(Box::new(record))) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Records dropped since the start because the queue was full (the metric
/// `mcp_supervisor_request_log_dropped_total`).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Writes every record queued so far, waiting at most `timeout` (the daemon calls it before
/// it exits, so the last requests' lines are not lost).
pub fn flush(timeout: Duration) {
    let Some(tx) = SINK.get().and_then(Option::as_ref) else {
        return;
    };
    let (done_tx, done_rx) = mpsc::channel();
    let deadline = base::deadline::after(std::time::Instant::now(), timeout);
    // The queue may be full: retry until the thread makes room, within the timeout.
    let mut msg = Msg::Flush(done_tx);
    loop {
        match tx.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                msg = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return,
        }
    }
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    let _ = done_rx.recv_timeout(left);
}

/// Plain stderr (not the journal, not a terminal): the log thread formats lines itself.
/// Set once by [`super::init`].
pub(super) fn write_plain_stderr(yes: bool) {
    PLAIN.store(yes, Ordering::Relaxed);
}

static PLAIN: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Bytes of lines sent to the log thread and not yet taken by it ([`QUEUE_BYTES`]).
static QUEUED_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static SINK: OnceLock<Option<SyncSender<Msg>>> = OnceLock::new();

enum Msg {
    Record(Box<Record<'static>>),
    Lines(Vec<u8>),
    Flush(mpsc::Sender<()>),
}

/// The log thread's queue, starting the thread on first use; `None` when no thread could be
/// started (records are then counted as dropped).
fn sink() -> Option<&'static SyncSender<Msg>> {
    SINK.get_or_init(|| {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("request-log".into())
            .spawn(move || run(rx))
            .map_err(|e| tracing::error!(error = %e, "cannot start the request log thread; request lines are dropped"))
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}

/// The log thread: waits for a record, takes every record queued behind it, writes them as
/// one batch, reports drops, then lets the next batch gather.
fn run(rx: Receiver<Msg>) {
    let mut buf = Vec::with_capacity(BATCH_BYTES + 4096);
    let mut reported = 0;
    while let Ok(first) = rx.recv() {
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Record(r) => event(&r),
                Msg::Lines(lines) => {
                    QUEUED_BYTES.fetch_sub(lines.len(), Ordering::Relaxed);
                    if buf.is_empty() {
                        buf = lines;
                    } else {
                        buf.extend_from_slice(&lines);
                    }
                }
                Msg::Flush(ack) => acks.push(ack),
            }
            if buf.len() >= BATCH_BYTES {
                write_out(&mut buf);
            }
            next = rx.try_recv().ok();
        }
        write_out(&mut buf);
        let dropped = dropped();
        if dropped > reported {
            tracing::warn!(
                dropped = dropped - reported,
                "request log lines dropped: the log could not keep up"
            );
            reported = dropped;
        }
        for ack in acks {
            let _ = ack.send(());
        }
        std::thread::sleep(GATHER);
    }
}

fn write_out(buf: &mut Vec<u8>) {
    if buf.is_empty() {
        return;
    }
    // One locked write: other threads' log lines land before or after the batch, not inside.
    let _ = std::io::stderr().lock().write_all(buf);
    buf.clear();
}

/// The record as a `tracing` event in its server's span (journal, terminal).
fn event(r: &Record<'_>) {
    let span = tracing::info_span!("server", server = %r.server);
    let _entered = span.enter();
    tracing::info!(
        target: TARGET,
        request_id = %r.request_id,
        client = %format_args!("c{}", r.client),
        peer_uid = r.peer_uid,
        peer_pid = r.peer_pid,
        client_name = %r.client_name,
        endpoint = r.endpoint.as_deref(),
        method = %r.method,
        tool = r.tool.as_deref().unwrap_or(""),
        arg_keys = %r.arg_keys,
        duration_ms = duration_ms(r.duration),
        outcome = r.outcome,
        error_code = r.error_code,
        restarted = r.restarted,
        "request finished"
    );
}

/// Milliseconds with microsecond precision (`0.121`).
fn duration_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// The line the `fmt` layer would write for the event of [`emit`] (without ANSI):
/// `2026-12-01T14:53:42.053260Z  INFO server{server=fake}: request finished request_id=r-… …`.
/// Fields given as text are written as they are (`%`), `tool` and `outcome` quoted (`?`), as
/// the event declares them; absent options are left out.
pub(crate) fn format_line(r: &Record<'_>, stamp: &str, buf: &mut Vec<u8>) {
    let micros =
        r.at.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_micros());
    buf.extend_from_slice(stamp.as_bytes());
    push_padded(buf, u64::from(micros), 6);
    buf.extend_from_slice(b"Z  INFO server{server=");
    buf.extend_from_slice(r.server.as_bytes());
    buf.extend_from_slice(b"}: request finished request_id=r-");
    // 12 hex digits, as `RequestId`'s Display writes them.
    for shift in (0..12).rev() {
        let digit = ((r.request_id.0 >> (shift * 4)) & 0xf) as u8;
        buf.push(if digit < 10 {
            b'0' + digit
        } else {
            b'a' + digit - 10
        });
    }
    buf.extend_from_slice(b" client=c");
    push_u64(buf, r.client);
    if let Some(uid) = r.peer_uid {
        buf.extend_from_slice(b" peer_uid=");
        push_u64(buf, u64::from(uid));
    }
    if let Some(pid) = r.peer_pid {
        buf.extend_from_slice(b" peer_pid=");
        push_i64(buf, i64::from(pid));
    }
    buf.extend_from_slice(b" client_name=");
    buf.extend_from_slice(r.client_name.as_bytes());
    if let Some(e) = &r.endpoint {
        buf.extend_from_slice(b" endpoint=");
        push_quoted(buf, e);
    }
    buf.extend_from_slice(b" method=");
    buf.extend_from_slice(r.method.as_bytes());
    buf.extend_from_slice(b" tool=");
    push_quoted(buf, r.tool.as_deref().unwrap_or(""));
    buf.extend_from_slice(b" arg_keys=");
    buf.extend_from_slice(r.arg_keys.as_bytes());
    buf.extend_from_slice(b" duration_ms=");
    push_millis(buf, r.duration);
    buf.extend_from_slice(b" outcome=");
    push_quoted(buf, r.outcome);
    if let Some(code) = r.error_code {
        buf.extend_from_slice(b" error_code=");
        push_i64(buf, code);
    }
    buf.extend_from_slice(if r.restarted {
        b" restarted=true\n"
    } else {
        b" restarted=false\n"
    });
}

/// The whole second of `at` as a line starts with it: `2026-12-01T14:53:42.`.
fn second_stamp(at: SystemTime) -> String {
    let whole = humantime::format_rfc3339_seconds(at).to_string();
    whole.trim_end_matches('Z').to_string() + "."
}

/// `n` in decimal.
fn push_u64(buf: &mut Vec<u8>, n: u64) {
    push_padded(buf, n, 1);
}

/// `n` in decimal, with a `-` when negative.
fn push_i64(buf: &mut Vec<u8>, n: i64) {
    if n < 0 {
        buf.push(b'-');
    }
    push_u64(buf, n.unsigned_abs());
}

/// `n` in decimal with at least `width` digits (zeros in front).
fn push_padded(buf: &mut Vec<u8>, mut n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n > 0 || digits.len() - at < width {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if at == 0 {
            break;
        }
    }
    buf.extend_from_slice(digits.get(at..).unwrap_or_default());
}

/// `s` as `{:?}` writes it, without the formatter's per-character work when nothing needs
/// escaping (the usual tool name).
fn push_quoted(buf: &mut Vec<u8>, s: &str) {
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    } else {
        let _ = write!(buf, "{s:?}");
    }
}

/// [`duration_ms`] as `{:?}` writes it (`0.121`, `1.5`, `12.0`), from whole microseconds: an
/// integer number of microseconds over 1000 prints as its exact decimal, trailing zeros
/// removed, at least one fractional digit.
fn push_millis(buf: &mut Vec<u8>, d: Duration) {
    let micros = duration_ms(d) * 1e3;
    if !(0.0..9e15).contains(&micros) {
        let _ = write!(buf, "{:?}", duration_ms(d));
        return;
    }
    let micros = micros as u64;
    let (whole, frac) = (micros / 1000, micros % 1000);
    push_u64(buf, whole);
    buf.push(b'.');
    match frac {
        0 => buf.push(b'0'),
        f if f % 100 == 0 => push_u64(buf, f / 100),
        f if f % 10 == 0 => push_padded(buf, f / 10, 2),
        f => push_padded(buf, f, 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record<'static> {
        Record {
            at: SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_000_000_123_456),
            server: "fake".into(),
            request_id: RequestId(0x863e3e86de7b),
            client: 1,
            peer_uid: Some(0),
            peer_pid: Some(9187),
            client_name: "t".into(),
            endpoint: None,
            method: Cow::Borrowed("tools/call"),
            tool: Some("echo".into()),
            arg_keys: "text".into(),
            duration: Duration::from_micros(121),
            outcome: "ok",
            error_code: None,
            restarted: false,
        }
    }

    /// What the daemon's `fmt` layer (as `super::init` builds it for a file) writes for the
    /// record's `tracing` event.
    fn fmt_layer_line(r: &Record) -> String {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::prelude::*;
        #[derive(Clone, Default)]
        struct Capture(Arc<Mutex<Vec<u8>>>);
        impl Write for Capture {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Capture::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || sink.clone())
                .with_ansi(false)
                .with_target(false),
        );
        tracing::subscriber::with_default(subscriber, || event(r));
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[test]
    fn the_line_is_what_the_fmt_layer_writes_for_the_event() {
        let mut full = record();
        full.error_code = Some(-32601);
        let mut sparse = record();
        (sparse.peer_pid, sparse.tool, sparse.duration) = (None, None, Duration::ZERO);
        sparse.arg_keys = "".into();
        sparse.client_name = "name with spaces".into();
        let mut quoted = record();
        quoted.tool = Some("a \"tool\"\n\u{e9}".into());
        let mut rounds = Vec::new();
        for micros in [
            1,
            10,
            100,
            999,
            1000,
            1010,
            1500,
            12_000,
            123_456_789,
            3_600_000_001,
        ] {
            let mut r = record();
            r.duration = Duration::from_nanos(micros * 1000 + 499);
            rounds.push(r);
        }
        let mut early = record();
        early.at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_000_000_000_005);
        early.peer_pid = Some(-1);
        let mut via = record();
        via.endpoint = Some("desk".into());
        for r in [record(), full, sparse, quoted, early, via]
            .into_iter()
            .chain(rounds)
        {
            let mut buf = Vec::new();
            format_line(&r, &second_stamp(r.at), &mut buf);
            let ours = String::from_utf8(buf).unwrap();
            let theirs = fmt_layer_line(&r);
            // Everything after the timestamp (the fmt layer stamps the time it writes).
            let tail = |s: &str| s.split_once(' ').map(|(_, t)| t.to_string());
            assert_eq!(tail(&ours), tail(&theirs), "{ours}{theirs}");
            let at = humantime::format_rfc3339_micros(r.at).to_string();
            assert!(ours.starts_with(&format!("{at}  INFO")), "{ours}");
        }
    }
    #[test]
    fn request_ids_look_like_the_ones_clients_are_shown() {
        assert_eq!(RequestId(0x5f0c1a2b).to_string(), "r-00005f0c1a2b");
        assert!(RequestId::random().0 < 1 << 48);
    }
}
