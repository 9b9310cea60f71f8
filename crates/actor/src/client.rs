//! Who a client is, as every part of the actor names it: its [`ClientId`] (never reused), how
//! it reaches the actor ([`Transport`]), who is on the other end ([`Peer`]), and who may
//! connect at all ([`Access`]). Plain values: the sessions (`session`), the in-flight table
//! (`ids`) and the parked sessions (`park`) share them without importing each other.

use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies a connection for the lifetime of the daemon (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

impl ClientId {
    /// A fresh id.
    pub fn next() -> Self {
        ClientId(NEXT_CLIENT.fetch_add(1, Ordering::Relaxed))
    }
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// How a client reaches the actor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// A connection to `NAME.sock` (directly or through `attach`).
    #[default]
    Socket,
    /// A handshake-era Streamable HTTP session (`Mcp-Session-Id`, issue 16).
    HttpSession,
    /// One 2026-07-28 HTTP request: the client lives for that one request, so a request it
    /// leaves parked in an `input_required` round outlives it, and the retry comes from
    /// another client of this kind (`server/core.rs`, asking).
    HttpRequest,
}

/// Who is on the other end of a connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// Peer user id.
    pub uid: u32,
    /// Peer primary group id (`SO_PEERCRED` reports no supplementary groups).
    pub gid: u32,
    /// Peer process id, when known.
    pub pid: Option<i32>,
    /// The endpoint's named HTTP token the peer used (issue 31 §5), as
    /// [`support::config::label_id`] of its label.
    pub label: Option<u64>,
    /// The endpoint the client came through (issue 31 §7), when a source's actor serves one
    /// of an endpoint's clients: its request log lines, metrics and spans name it.
    pub endpoint: Option<std::sync::Arc<str>>,
    /// How it reached us.
    pub transport: Transport,
}

/// Who may connect (issue 7 §4, R20; issue 14 §2): the supervisor's own uid, root, and the
/// configured uids and primary gids. The same rule for clients (`allowed_*`, per server or from
/// `[supervisor]`) and for operators (`operator_*`, the control socket).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Access {
    /// The supervisor's effective uid.
    pub me: u32,
    /// Allowed uids besides `me` and root.
    pub uids: Vec<u32>,
    /// Allowed primary gids.
    pub gids: Vec<u32>,
}

impl Access {
    /// Whether a peer with these credentials may connect.
    pub fn permits(&self, uid: u32, gid: u32) -> bool {
        uid == self.me || uid == 0 || self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}
