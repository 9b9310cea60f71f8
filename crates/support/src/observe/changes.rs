//! The change signal: a counter that moves whenever something `status` shows may
//! have changed (an actor's state, the set of servers), which `watch` and `top` wait on rather
//! than polling. Here, below the actor and the control socket, so the actor signals without
//! naming the control socket.

use std::sync::OnceLock;
use tokio::sync::watch;

/// The change counter every watcher waits on.
pub fn changes() -> &'static watch::Sender<u64> {
    static CHANGES: OnceLock<watch::Sender<u64>> = OnceLock::new();
    CHANGES.get_or_init(|| watch::channel(0).0)
}

/// Says that something `status` shows may have changed: wakes the watchers, if any.
pub fn changed() {
    changes().send_modify(|n| *n = n.wrapping_add(1));
}
