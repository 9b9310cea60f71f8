//! `mcp-supervisor attach NAME`: a framing bridge between stdin/stdout and a server's socket,
//! for MCP clients that can only launch a command (issue 3 §2), that outlives the supervisor's
//! crashes and restarts (issue 32 §2).
//!
//! Owns two plain threads with blocking I/O (no async runtime: tokio's stdin/stdout hand every
//! read and write to its blocking pool). The stdin thread splits the client's input into lines
//! and writes them to the current connection; the main thread reads the supervisor's lines and
//! writes them to stdout, and when the connection is lost, reconnects with jittered backoff
//! ([`base::backoff`], 100 ms doubling to 2 s) for [`Options::reconnect_for`]. What to
//! send, show, hold, replay and answer is decided by [`bridge::Bridge`], sans-IO.
//!
//! Rules:
//! - never connected at all: exit 1 (`run` returns the error), as before issue 32;
//! - stdin EOF shuts down the socket's write side; output drains until the supervisor closes,
//!   then `attach` exits (after answering what was in flight, if the close was a loss);
//! - a lost connection (the supervisor crashed, was killed or restarted) is reconnected; the
//!   client's requests in flight get one outage answer each; its handshake, log level,
//!   subscriptions and listen streams are replayed; a line cut by the loss is dropped whole;
//! - giving up (after `reconnect_for` without a connection) answers what was held and exits 1;
//! - a session the supervisor ends on purpose (its last line marked
//!   [`actor::session::HANGUP_KEY`]: this user is not, or no longer, allowed) is not
//!   reconnected: `attach` exits 1; but a connection refused a seat (reason `busy`:
//!   `max_clients` or the user's share of it, issue 47 §4) is shown to the client once and
//!   retried with the backoff, and one closed for saying nothing (reason `silent`,
//!   `first_message_timeout`) is reconnected without a word to the client;
//! - stdout that cannot be written (the client is gone) ends `attach`;
//! - lock order: `writer`, then `bridge`; no lock is held while writing to stdout, and
//!   `bridge` is never held during I/O.

pub mod bridge;

use base::backoff::Backoff;
use bridge::{Bridge, Out};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::fs::File;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vocab::jsonrpc::framing::{Frame, LineDecoder};

/// Read size of both directions.
const CHUNK: usize = 64 * 1024;

/// Longest line carried: the largest `max_message_size` a server may have (1 GiB). A longer
/// request is answered -32600 by the bridge.
const MAX_LINE: usize = 1 << 30;

/// A connection open this long counts as one that served, even if no request was answered
/// on it.
const SERVED_AFTER: Duration = Duration::from_secs(5);

/// First and longest wait between reconnection attempts.
const RETRY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// How `attach` behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// The server's (or endpoint's) name, for outage records and notes.
    pub server: String,
    /// How long to try to reconnect after a lost connection before giving up; zero: never
    /// (answer what is in flight and exit, as a plain bridge).
    pub reconnect_for: Duration,
}

/// What both threads share.
struct Shared {
    bridge: Mutex<Bridge>,
    /// The current connection's write half; `None` while no connection is up. Taken before
    /// `bridge` whenever both are.
    writer: Mutex<Option<UnixStream>>,
    /// stdout (a duplicate of fd 1; `None` when it is not open: output is discarded).
    out: Mutex<Option<File>>,
}

/// How `attach` ended after it had connected.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The client closed its input and everything owed was answered, or it closed stdout.
    Done,
    /// No connection came back within `reconnect_for`.
    GaveUp,
    /// The supervisor ended the session on purpose (this user is not, or no longer, allowed).
    HungUp,
}

/// Bridges until the client is done (or gone), reconnecting after losses. Errors only when
/// the first connection fails.
pub fn run(socket: &Path, opts: Options) -> Result<Ended, std::io::Error> {
    let stream = UnixStream::connect(socket)?;
    let shared = Arc::new(Shared {
        bridge: Mutex::new(Bridge::new(&opts.server)),
        writer: Mutex::new(Some(stream.try_clone()?)),
        // Unbuffered handles on duplicates of fds 0 and 1: a closed fd 0 reads as EOF and a
        // closed fd 1 discards, as std's own handles do.
        out: Mutex::new(dup(std::io::stdout().as_fd())),
    });
    let stdin = dup(std::io::stdin().as_fd());
    let up = shared.clone();
    std::thread::Builder::new()
        .name("attach-stdin".into())
        .spawn(move || from_client(&up, stdin))?;
    Ok(from_server(&shared, stream, socket, &opts))
}

/// The stdin thread: the client's lines to the current connection (or held).
fn from_client(shared: &Shared, stdin: Option<File>) {
    let mut decoder = LineDecoder::new(MAX_LINE);
    let mut buf = vec![0u8; CHUNK];
    if let Some(mut stdin) = stdin {
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            decoder.extend(buf.get(..n).unwrap_or_default());
            let frames = std::iter::from_fn(|| decoder.next_frame()).collect();
            if !client_frames(shared, frames) {
                return;
            }
            decoder.shrink_if_idle(CHUNK * 16);
        }
        if let Some(f) = decoder.finish() {
            client_frames(shared, vec![f]);
        }
    }
    let writer = lock(&shared.writer);
    lock(&shared.bridge).client_done();
    if let Some(s) = writer.as_ref() {
        let _ = s.shutdown(Shutdown::Write);
    }
}

/// Decides and sends one read's frames; `false` once stdout is gone.
fn client_frames(shared: &Shared, frames: Vec<Frame>) -> bool {
    let now = Instant::now();
    let mut all = Out::default();
    let mut writer = lock(&shared.writer);
    {
        let mut bridge = lock(&shared.bridge);
        for f in frames {
            let out = bridge.from_client(f, now);
            all.to_server.extend(out.to_server);
            all.to_client.extend(out.to_client);
            all.notes.extend(out.notes);
        }
    }
    if let Some(s) = writer.as_mut() {
        // A failed write is a lost connection: the main thread sees it end and answers what
        // was in flight.
        let _ = write_lines(s, &all.to_server);
    }
    drop(writer);
    emit(
        shared,
        Out {
            to_server: Vec::new(),
            ..all
        },
    )
}

/// The main thread: the supervisor's lines to stdout, and reconnection.
fn from_server(shared: &Shared, mut stream: UnixStream, socket: &Path, opts: &Options) -> Ended {
    let mut rng = StdRng::from_entropy();
    let mut backoff = Backoff::new(RETRY.0, RETRY.1, Duration::MAX);
    // Since when no connection has served: what `reconnect_for` is counted from.
    let mut down_since: Option<Instant> = None;
    loop {
        let opened = Instant::now();
        let stdout_ok = pump(shared, &mut stream);
        if !stdout_ok {
            return Ended::Done;
        }
        // A connection that served (answered a request, or lasted) resets the backoff and the
        // give-up clock; one that was only accepted and closed (a failed server, a full
        // `max_clients`) does neither, so such a loop backs off and ends.
        let served = lock(&shared.bridge).was_served() || opened.elapsed() >= SERVED_AFTER;
        if served {
            backoff.reset();
            down_since = None;
        }
        let hangup = lock(&shared.bridge).hangup().map(str::to_string);
        if let Some(said) = hangup {
            say(&format!("the supervisor ended the session: {said}"));
            return Ended::HungUp;
        }
        // Refused a seat (issue 47 §4): said, then retried with the backoff (the connection
        // did not serve, so the backoff grows and `reconnect_for` runs on).
        if let Some(said) = lock(&shared.bridge).busy().map(str::to_string) {
            say(&format!(
                "the supervisor refused the connection: {said}; retrying with backoff"
            ));
        }
        let out = {
            let mut writer = lock(&shared.writer);
            *writer = None;
            lock(&shared.bridge).lost()
        };
        let done = {
            let b = lock(&shared.bridge);
            b.is_client_done() && b.idle()
        };
        // After the client's EOF, the supervisor closing is the normal end.
        if !done {
            say(&format!(
                "the connection to {} was lost; reconnecting for up to {}",
                socket.display(),
                humantime::format_duration(opts.reconnect_for)
            ));
        }
        if !emit(shared, out) || done {
            return Ended::Done;
        }
        let since = Instant::now();
        let clock = *down_since.get_or_insert(since);
        match reconnect(shared, socket, opts, clock, &mut backoff, &mut rng) {
            Reconnect::Up(s) => {
                stream = s;
                say(&format!(
                    "reconnected to {} after {:.1}s",
                    socket.display(),
                    since.elapsed().as_secs_f64()
                ));
            }
            Reconnect::Done => return Ended::Done,
            Reconnect::GaveUp(why) => {
                let out = lock(&shared.bridge).give_up();
                emit(shared, out);
                say(&format!(
                    "gave up reconnecting to {} after {}: {why}",
                    socket.display(),
                    humantime::format_duration(opts.reconnect_for)
                ));
                return Ended::GaveUp;
            }
        }
    }
}

/// Copies the supervisor's lines to stdout until the connection ends; `false` when stdout
/// can no longer be written.
fn pump(shared: &Shared, stream: &mut UnixStream) -> bool {
    let mut decoder = LineDecoder::new(MAX_LINE);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return true,
        };
        decoder.extend(buf.get(..n).unwrap_or_default());
        let mut all = Out::default();
        {
            let mut bridge = lock(&shared.bridge);
            while let Some(frame) = decoder.next_frame() {
                match frame {
                    // Its decoder measures no depth: every line is `Line`.
                    Frame::Line(line) | Frame::TooDeep(line) => {
                        let out = bridge.from_server(line);
                        all.to_client.extend(out.to_client);
                        all.notes.extend(out.notes);
                    }
                    Frame::Oversized { len, .. } => all
                        .notes
                        .push(format!("dropped a line of {len} bytes from the supervisor")),
                }
            }
        }
        decoder.shrink_if_idle(CHUNK * 16);
        if !emit(shared, all) {
            return false;
        }
    }
}

/// How a reconnection ended.
enum Reconnect {
    Up(UnixStream),
    /// The client is done and nothing is owed: no need for a connection.
    Done,
    /// `reconnect_for` passed; the last error.
    GaveUp(String),
}

/// Tries to connect until `reconnect_for` has passed since `since` (the last connection that
/// served), answering held messages as they expire; replays the client's state on the new
/// connection.
fn reconnect(
    shared: &Shared,
    socket: &Path,
    opts: &Options,
    since: Instant,
    backoff: &mut Backoff,
    rng: &mut StdRng,
) -> Reconnect {
    let mut last = "no connection served since".to_string();
    loop {
        let now = Instant::now();
        if now.saturating_duration_since(since) >= opts.reconnect_for {
            return Reconnect::GaveUp(last);
        }
        let attempt = now + backoff.on_exit(now, now, None, rng);
        // Wait, answering held messages whose time is up meanwhile.
        loop {
            let now = Instant::now();
            let expiry = lock(&shared.bridge).next_expiry();
            let wake = expiry.map_or(attempt, |e| e.min(attempt));
            std::thread::sleep(wake.saturating_duration_since(now));
            let out = lock(&shared.bridge).expire(Instant::now());
            if !emit(shared, out) {
                return Reconnect::Done;
            }
            if Instant::now() >= attempt {
                break;
            }
        }
        {
            let b = lock(&shared.bridge);
            if b.is_client_done() && b.idle() {
                return Reconnect::Done;
            }
        }
        let stream = match UnixStream::connect(socket).and_then(|s| Ok((s.try_clone()?, s))) {
            Ok(s) => s,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let (mut write, read) = stream;
        let mut writer = lock(&shared.writer);
        let out = lock(&shared.bridge).connected();
        let _ = write_lines(&mut write, &out.to_server);
        if lock(&shared.bridge).is_client_done() {
            let _ = write.shutdown(Shutdown::Write);
        }
        *writer = Some(write);
        drop(writer);
        emit(
            shared,
            Out {
                to_server: Vec::new(),
                ..out
            },
        );
        return Reconnect::Up(read);
    }
}

/// One note on stderr (the client's log of this server).
fn say(note: &str) {
    eprintln!("mcp-supervisor attach: {note}");
}

/// Writes lines to stdout and notes to stderr; `false` when stdout cannot be written.
fn emit(shared: &Shared, out: Out) -> bool {
    for note in &out.notes {
        say(note);
    }
    if out.to_client.is_empty() {
        return true;
    }
    let mut stdout = lock(&shared.out);
    match stdout.as_mut() {
        Some(f) => {
            let ok = write_lines(f, &out.to_client).is_ok();
            if !ok {
                *stdout = None;
            }
            ok
        }
        None => true,
    }
}

/// Writes `lines`, each followed by `\n`, with vectored writes: a large result is written from
/// the buffer it was read into, never copied.
fn write_lines(w: &mut impl Write, lines: &[bytes::Bytes]) -> std::io::Result<()> {
    // At most this many slices per call (the kernel's IOV_MAX is 1024).
    const BATCH: usize = 512;
    for group in lines.chunks(BATCH / 2) {
        let mut slices: Vec<std::io::IoSlice<'_>> = Vec::with_capacity(group.len() * 2);
        for l in group {
            slices.push(std::io::IoSlice::new(l));
            slices.push(std::io::IoSlice::new(b"\n"));
        }
        let mut rest: &mut [std::io::IoSlice<'_>] = &mut slices;
        while !rest.is_empty() {
            match w.write_vectored(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => std::io::IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// A lock that a panicked holder does not poison for the other thread (the state stays
/// usable: every change to it is one method call).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A `File` on a duplicate of `fd` (closing it leaves the original open), `None` when `fd` is
/// not open.
fn dup(fd: std::os::fd::BorrowedFd<'_>) -> Option<File> {
    fd.try_clone_to_owned().ok().map(File::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most 3 bytes per call, vectored or not.
    struct Trickle(Vec<u8>);

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(3);
            self.0.extend_from_slice(buf.get(..n).unwrap_or_default());
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_whole_and_in_order_whatever_the_writer_takes_per_call() {
        let lines: Vec<bytes::Bytes> = (0..600)
            .map(|i| bytes::Bytes::from(format!("{{\"n\":{i}}}")))
            .collect();
        let mut w = Trickle(Vec::new());
        write_lines(&mut w, &lines).unwrap_or_else(|e| unreachable!("{e}"));
        let expected: String = lines
            .iter()
            .map(|l| format!("{}\n", String::from_utf8_lossy(l)))
            .collect();
        assert_eq!(String::from_utf8_lossy(&w.0), expected);
    }
}
