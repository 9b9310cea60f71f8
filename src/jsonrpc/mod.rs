//! JSON-RPC on byte streams: [`framing`] turns bytes into bounded lines, [`message`] turns lines
//! into envelopes with raw payloads, [`toplevel`] finds the envelope's `id` in a line too large
//! to keep. Nothing here knows about processes, sockets or clients.

pub mod framing;
pub mod message;
pub mod toplevel;
