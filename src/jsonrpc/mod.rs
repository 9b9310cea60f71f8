//! JSON-RPC on byte streams: [`framing`] turns bytes into bounded lines, [`message`] turns lines
//! into envelopes with raw payloads, [`toplevel`] finds the envelope's `id` in a line too large
//! to keep, [`scan`] reads an object's members from its text for the request log. Nothing here
//! knows about processes, sockets or clients.

pub mod framing;
pub mod message;
pub mod scan;
pub mod toplevel;
