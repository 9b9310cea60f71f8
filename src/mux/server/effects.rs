//! The effects the core decides and the shell carries out (issue 27 §1): the core appends
//! them to one reused sink while it handles an input; the shell drains the sink after the
//! input, in order, and feeds back what failed as inputs of their own. Core tests read the
//! sink as data before it is drained.
//!
//! Built so far: deliveries to clients. A failed delivery (the client is gone or too slow)
//! comes back as [`super::Input::ClientGone`]. Writes to the child, spawns, stops and the
//! request records are still performed in place (ARCHITECTURE, "The core's shape").

use crate::jsonrpc::framing::Line;
use crate::mux::session::{Address, ClientId, ClientTx};
use std::sync::Arc;

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

    /// Carries out every effect in order; returns the clients whose delivery failed (each
    /// once), for the shell to report as gone.
    pub(super) fn execute(&mut self) -> Vec<ClientId> {
        let mut gone: Vec<ClientId> = Vec::new();
        for effect in self.list.drain(..) {
            match effect {
                Effect::Deliver {
                    client,
                    tx,
                    address,
                    line,
                } => {
                    if !tx.deliver_at(address, line) && !gone.contains(&client) {
                        gone.push(client);
                    }
                }
            }
        }
        gone
    }
}
