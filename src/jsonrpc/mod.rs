//! JSON-RPC on byte streams: [`framing`] turns bytes into bounded lines, [`message`] turns lines
//! into envelopes with raw payloads. Nothing here knows about processes, sockets or clients.

pub mod framing;
pub mod message;
