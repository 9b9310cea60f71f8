//! Layer 1 (docs/ARCHITECTURE.md "Layers"): the protocol's words: framing, the envelope, ids,
//! eras, error codes. Imports only `base`.

pub mod jsonrpc;
pub mod protocol;
