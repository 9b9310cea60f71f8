//! What the core sends an upstream: the encoded line and what the core already knows of it
//! (issue 48 §2), so no upstream parses a line the core built. A child writes the line as it
//! is; a remote session takes its id, method, era and name for the POST's headers and its
//! bookkeeping from here and sends the line as the body, never reading it.

use bytes::Bytes;
use std::borrow::Cow;

/// One message toward an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// The message, one JSON text without its newline.
    pub line: Bytes,
    /// What the message is.
    pub kind: Outgoing,
    /// Whether its envelope names 2026-07-28 (`params._meta`'s protocol version): a remote
    /// session sends it without a session and with the standard headers.
    pub modern: bool,
}

/// What an outbound message is, as the core built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// A request with the upstream-side id the core allocated for it.
    Request {
        id: u64,
        method: Cow<'static, str>,
        /// What it names, for `Mcp-Name`: `params.name` of `tools/call` and `prompts/get`,
        /// `params.uri` of `resources/read` of a 2026-07-28 request; `None` for other methods
        /// and for every handshake-era request (its POST has no `Mcp-Name`, so the core does
        /// not read it).
        name: Option<String>,
    },
    /// A notification; for `notifications/cancelled`, the upstream-side id it cancels.
    Notification {
        method: Cow<'static, str>,
        cancels: Option<u64>,
    },
    /// A response to the upstream's own request.
    Response,
}

impl Outbound {
    /// A request `id` for `method`; `name` as [`Outgoing::Request`] says.
    pub fn request(
        line: Bytes,
        id: u64,
        method: Cow<'static, str>,
        name: Option<String>,
        modern: bool,
    ) -> Outbound {
        Outbound {
            line,
            kind: Outgoing::Request { id, method, name },
            modern,
        }
    }

    /// A notification for `method`.
    pub fn notification(line: Bytes, method: Cow<'static, str>, modern: bool) -> Outbound {
        Outbound {
            line,
            kind: Outgoing::Notification {
                method,
                cancels: None,
            },
            modern,
        }
    }

    /// `notifications/cancelled` of the upstream-side request `id`.
    pub fn cancel(line: Bytes, id: u64) -> Outbound {
        Outbound {
            line,
            kind: Outgoing::Notification {
                method: Cow::Borrowed("notifications/cancelled"),
                cancels: Some(id),
            },
            modern: false,
        }
    }

    /// A response (result or error) to the upstream's own request.
    pub fn response(line: Bytes) -> Outbound {
        Outbound {
            line,
            kind: Outgoing::Response,
            modern: false,
        }
    }
}
