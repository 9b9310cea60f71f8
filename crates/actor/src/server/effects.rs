//! The effects the core decides and the shell carries out (issue 27 §1): the core appends
//! them to one reused sink while it handles an input; the shell drains the sink after the
//! input, in order, and feeds back what failed as inputs of their own. Core tests read the
//! sink as data before it is drained.
//!
//! Built: deliveries to clients, writes to the upstream, starts, stop ladders, and a client's
//! hang-up (told why, then closed). A
//! failed delivery (the client is gone or too slow) comes back as
//! [`super::Input::ClientGone`]; a request the child's queue refused, as
//! [`super::Input::Unwritten`]; a spawn's outcome, as `Input::Spawned`. The request records
//! (ledger close, request log, trace, metrics) are not effects: the outbox writes them through
//! the `Telemetry` handle, which buffers the log and hands spans to the exporter's queue;
//! counters are atomics updated where they change, the documented exception (ARCHITECTURE,
//! "The core's shape").

use crate::session::{Address, ClientId, ClientTx};
use std::sync::Arc;
use upstream::{Outbound, StderrTail};
use vocab::jsonrpc::framing::Line;

/// Which of the child's stdin queues a line goes to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Lane {
    /// Behind earlier lines.
    Normal,
    /// Ahead of ordinary traffic (cancels, answers to the child's requests).
    Urgent,
}

/// One effect.
#[derive(Debug)]
pub(super) enum Effect {
    /// Queue `line` for `client` over `tx` (shared with the client's record, so a client
    /// dropped after the decision still gets what was decided before), at `address` (HTTP
    /// queues; `None` for sockets, or session-wide).
    Deliver {
        client: ClientId,
        tx: Arc<ClientTx>,
        address: Option<Address>,
        line: Line,
    },
    /// Send `out` to instance `generation` (a child's stdin queue, a remote session's POSTs)
    /// in `lane`; `what` says what it is.
    ToChild {
        generation: u64,
        out: Outbound,
        lane: Lane,
        what: Written,
    },
    /// Start instance `generation` of the server as configured now (off the actor's thread:
    /// the starter builds what its upstream needs), its stderr going to `tail`.
    Spawn { generation: u64, tail: StderrTail },
    /// Start the stop ladder of instance `generation` (if it is still the one stopping).
    Stop { generation: u64 },
    /// Queue `line` over `tx` session-wide, then close the connection once it is written
    /// (a client no longer permitted after a reload is told why).
    Hangup { tx: Arc<ClientTx>, line: Line },
}

/// What a line written to the child is, for what follows a refusal.
#[derive(Debug, Clone, Copy)]
pub(super) enum Written {
    /// A request under this child-side id (in flight already): a refusal comes back as
    /// `Input::Unwritten`.
    Request(u64),
    /// Anything else, named for the log (a refusal is logged, within a budget).
    Line(&'static str),
}

/// The sink: appended to by the core, drained by the shell after each input. Its buffer is
/// kept between inputs, so a burst allocates it once.
#[derive(Debug, Default)]
pub(super) struct Effects {
    list: Vec<Effect>,
}

impl Effects {
    /// Appends `effect`.
    pub(super) fn push(&mut self, effect: Effect) {
        self.list.push(effect);
    }

    /// The effects decided since the last drain, in order (what core tests assert).
    #[cfg(test)]
    pub(super) fn pending(&self) -> &[Effect] {
        &self.list
    }

    /// Takes the effects decided so far, in order, for the shell to carry out; give the
    /// buffer back with [`Effects::reuse`].
    pub(super) fn take(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.list)
    }

    /// Gives back a drained buffer (its capacity is kept for the next input).
    pub(super) fn reuse(&mut self, mut buffer: Vec<Effect>) {
        buffer.clear();
        if self.list.is_empty() {
            self.list = buffer;
        }
    }
}
