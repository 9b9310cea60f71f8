//! Layer 5 (docs/ARCHITECTURE.md "Layers"): everything that speaks MCP to an actor for a client:
//! endpoints, the HTTP front, `attach`. Imports the layers below it; never the application.

pub mod attach;
pub mod endpoint;
pub mod http;
