//! What the actor's shell keeps between inputs, beside the core's decisions: the child inbox
//! it selects on, who waits for a stop or the shutdown, whether the actor ends once stopped,
//! what its supervisor remembered across actor restarts, and the panic test hook.
//!
//! Owns those fields alone; decides nothing about children or clients.

use super::supervise::ActorHistory;
use tokio::sync::{mpsc, oneshot};
use upstream::Event;

/// The test hook's value (`@spawn:NAME`) that panics server NAME's actor right after each
/// spawn (the child exists), where `now + start_timeout` once overflowed.
const SPAWN_PANIC: &str = "@spawn:";

/// The shell's state.
pub(super) struct Shell {
    /// The child inbox (the spawner holds its sender).
    events: mpsc::Receiver<Event>,
    /// Told once the actor ends (daemon shutdown).
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    /// Told once the child has exited (operator `stop`).
    stop_waiters: Vec<oneshot::Sender<()>>,
    /// Shutdown requested: end the actor once stopped.
    exiting: bool,
    /// Handed over to the next image (issue 32 §1): the actor handles nothing more.
    frozen: bool,
    history: ActorHistory,
    /// `MCP_SUPERVISOR_TEST_PANIC`, read at actor start ([`Shell::panic_on_request`]).
    test_panic: Option<String>,
}

impl Shell {
    /// A shell reading `events`, with its supervisor's `history`.
    pub(super) fn new(events: mpsc::Receiver<Event>, history: ActorHistory) -> Self {
        Shell {
            events,
            shutdown_waiters: Vec::new(),
            stop_waiters: Vec::new(),
            exiting: false,
            frozen: false,
            history,
            test_panic: std::env::var("MCP_SUPERVISOR_TEST_PANIC")
                .ok()
                .filter(|m| !m.is_empty()),
        }
    }

    /// The child inbox.
    pub(super) fn events(&mut self) -> &mut mpsc::Receiver<Event> {
        &mut self.events
    }

    /// The effect sink.
    /// The effects decided and not yet carried out (core tests).
    /// What the supervisor remembered across actor restarts.
    pub(super) fn history(&self) -> &ActorHistory {
        &self.history
    }

    /// The actor is to end once its child is stopped; `done` (if any) is told when it has.
    pub(super) fn exit(&mut self, done: Option<oneshot::Sender<()>>) {
        self.exiting = true;
        self.shutdown_waiters.extend(done);
    }

    /// Whether the actor ends once stopped.
    pub(super) fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Whether [`Shell::freeze`] was called.
    pub(super) fn frozen(&self) -> bool {
        self.frozen
    }

    /// Whether the actor is to end once its child is stopped.
    pub(super) fn exiting(&self) -> bool {
        self.exiting
    }

    /// Whether the daemon's shutdown is under way (new clients are refused).
    pub(super) fn shutting_down(&self) -> bool {
        !self.shutdown_waiters.is_empty()
    }

    /// `done` is told once the child has stopped.
    pub(super) fn wait_stop(&mut self, done: oneshot::Sender<()>) {
        self.stop_waiters.push(done);
    }

    /// The child is stopped: tells whoever waited for it.
    pub(super) fn stopped(&mut self) {
        for w in self.stop_waiters.drain(..) {
            let _ = w.send(());
        }
    }

    /// The actor ended: tells whoever waited for the shutdown.
    pub(super) fn ended(&mut self) {
        for w in self.shutdown_waiters.drain(..) {
            let _ = w.send(());
        }
    }

    /// The test hook (`MCP_SUPERVISOR_TEST_PANIC=<method>`): a client request for that method
    /// panics the actor, so tests can prove the actor is supervised. Unset in production.
    pub(super) fn panic_on_request(&self, method: &str) {
        if self.test_panic.as_deref() == Some(method) {
            test_panic(method);
        }
    }

    /// The same hook with the value `@spawn:NAME`: panics server NAME's actor right after
    /// each spawn (the child exists).
    pub(super) fn panic_on_spawn(&self, server: &str) {
        if self
            .test_panic
            .as_deref()
            .and_then(|t| t.strip_prefix(SPAWN_PANIC))
            == Some(server)
        {
            // Where `now + start_timeout` once overflowed (issue 26 §2).
            test_panic(&format!("{SPAWN_PANIC}{server}"));
        }
    }
}

/// Panics: the test hook's whole purpose; never reached unless the environment variable is
/// set.
#[allow(clippy::panic)]
fn test_panic(what: &str) -> ! {
    panic!("test hook: MCP_SUPERVISOR_TEST_PANIC={what}")
}
