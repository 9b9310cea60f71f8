//! `mcp-supervisor top` (issue 33 §1): a full-screen live view of the servers and endpoints,
//! fed by the control socket's `watch` stream (no polling: the daemon sends what changed).
//!
//! The shell: it connects, reads the first line before touching the terminal (a refusal is a
//! plain error on stderr, exit 1; no supervisor, exit 3), then takes the terminal (raw mode,
//! alternate screen), draws the [`board::Board`] and runs the verbs the board asks for, each
//! on its own thread (a `restart` waits until the server is ready). The terminal is given back
//! on `q`, Esc, Ctrl-C, SIGTERM, a panic (ratatui's hook) and when drawing fails; on SIGHUP
//! (the terminal is gone) it exits at once.
//!
//! Owns: the terminal and the watch connection. `board.rs` decides, `view.rs` draws.

pub mod board;
pub mod view;

use crate::control::client::{request, Next, WatchStream};
use crate::control::{Op, Request};
use board::{Action, Board, Verb};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Exit code when the terminal cannot be used.
const EXIT_FAILED: i32 = base::exit::EXIT_FAILED;
/// How long the first line may take.
const FIRST_LINE: Duration = Duration::from_secs(10);
/// How often the loop looks at the keyboard, the stream and the signals.
const TICK: Duration = Duration::from_millis(100);

/// The test hook that panics after the first frame (`MCP_SUPERVISOR_TEST_TOP_PANIC=1`), so a
/// test can see the terminal given back after a panic (ratatui's hook). Unset, nothing.
const PANIC_VAR: &str = "MCP_SUPERVISOR_TEST_TOP_PANIC";

/// Set by SIGTERM, SIGHUP and SIGINT: leave and restore the terminal.
static LEAVE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    LEAVE.store(true, Ordering::Relaxed);
}

/// SIGHUP: the terminal is gone (a closed SSH session, a killed terminal emulator), so there
/// is nothing to give back, and crossterm's reader would spin on its end of input: exit at
/// once, 128 + SIGHUP.
extern "C" fn on_hangup(_: nix::libc::c_int) {
    // SAFETY: `_exit` is async-signal-safe.
    unsafe { nix::libc::_exit(129) }
}

/// What the reader thread and the verb threads tell the loop.
enum Feed {
    /// One `watch` line.
    Line(Value),
    /// The stream ended, and why.
    Ended(String),
    /// A verb's outcome, for the message line.
    Told(String),
}

/// Runs `top` against the supervisor at `socket`; the process's exit code.
pub fn run(socket: &Path) -> i32 {
    // The first line before the terminal is taken: a refusal is a plain error.
    let (mut stream, snapshot) = match WatchStream::open(socket, "top", FIRST_LINE) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut board = Board::default();
    board.apply(&snapshot);
    let (tx, rx) = mpsc::channel();
    let feed = tx.clone();
    std::thread::spawn(move || loop {
        let said = match stream.next_line() {
            Next::Line(w) => Feed::Line(w),
            Next::Ended => Feed::Ended("the supervisor stopped".into()),
            Next::Failed(why) => Feed::Ended(why),
        };
        let last = !matches!(said, Feed::Line(_));
        if feed.send(said).is_err() || last {
            return;
        }
    });
    for (sig, handler) in [
        (
            nix::sys::signal::Signal::SIGTERM,
            on_signal as extern "C" fn(_),
        ),
        (nix::sys::signal::Signal::SIGINT, on_signal),
        (nix::sys::signal::Signal::SIGHUP, on_hangup),
    ] {
        let action = nix::sys::signal::SigAction::new(
            nix::sys::signal::SigHandler::Handler(handler),
            nix::sys::signal::SaFlags::empty(),
            nix::sys::signal::SigSet::empty(),
        );
        // SAFETY: the handlers store to an atomic or call `_exit`, both async-signal-safe.
        let _ = unsafe { nix::sys::signal::sigaction(sig, &action) };
    }
    let look = view::Look {
        color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    // Raw mode and the alternate screen; ratatui's panic hook restores both first.
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            eprintln!("mcp-supervisor top: needs a terminal ({e}); for scripts use `watch --json`");
            return EXIT_FAILED;
        }
    };
    let code = event_loop(&mut terminal, &mut board, look, &rx, &tx, socket);
    ratatui::restore();
    code
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    board: &mut Board,
    look: view::Look,
    rx: &mpsc::Receiver<Feed>,
    tx: &mpsc::Sender<Feed>,
    socket: &Path,
) -> i32 {
    let panic_for_test = std::env::var_os(PANIC_VAR).is_some_and(|v| v == "1");
    loop {
        while let Ok(f) = rx.try_recv() {
            match f {
                Feed::Line(w) => board.apply(&w),
                Feed::Ended(why) => board.end(why),
                Feed::Told(m) => board.tell(m),
            }
        }
        if let Err(e) = terminal.draw(|f| view::draw(f, board, look)) {
            ratatui::restore();
            eprintln!("mcp-supervisor top: cannot draw: {e}");
            return EXIT_FAILED;
        }
        if LEAVE.load(Ordering::Relaxed) {
            return 0;
        }
        if panic_for_test {
            // The one deliberate panic, behind the test hook.
            #[allow(clippy::panic)]
            {
                panic!("{PANIC_VAR} is set: a panic after the first frame");
            }
        }
        match event::poll(TICK) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return EXIT_FAILED,
        }
        let Ok(ev) = event::read() else {
            return EXIT_FAILED;
        };
        let Event::Key(k) = ev else { continue };
        if k.kind != KeyEventKind::Press {
            continue;
        }
        match board.on_key(k) {
            Action::None => {}
            Action::Quit => return 0,
            Action::Verb(verb, name) => run_verb(socket.to_path_buf(), verb, name, tx.clone()),
        }
    }
}

/// Sends `verb` for `name` on its own connection and thread; its outcome comes back as
/// [`Feed::Told`].
fn run_verb(socket: PathBuf, verb: Verb, name: String, tx: mpsc::Sender<Feed>) {
    std::thread::spawn(move || {
        let op = match verb {
            Verb::Start => Op::Start { name: name.clone() },
            Verb::Stop => Op::Stop { name: name.clone() },
            Verb::Restart => Op::Restart { name: name.clone() },
        };
        let said = match request(&socket, &Request::new(op)) {
            Ok(r) if r.ok => format!("{} {name}: done", verb.name()),
            Ok(r) => format!(
                "{} {name}: refused: {}",
                verb.name(),
                r.error.map(|e| e.message).unwrap_or_default()
            ),
            Err(e) => format!("{} {name}: {e}", verb.name()),
        };
        let _ = tx.send(Feed::Told(said));
    });
}
