//! JSON-RPC on byte streams: [`framing`] turns bytes into bounded lines, [`depth`] measures
//! their nesting in the same walk, [`message`] turns lines into envelopes with raw payloads,
//! [`toplevel`] finds the envelope's `id` in a line too large to keep, [`scan`] reads an
//! object's members from its text for the request log. Nothing here knows about processes,
//! sockets or clients.

pub mod depth;
pub mod framing;
pub mod message;
pub mod scan;
pub mod toplevel;
