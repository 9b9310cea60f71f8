//! Layer 4 (docs/ARCHITECTURE.md "Layers"): the per-server actor. Multiplexing many clients onto
//! one upstream: [`session`] (one per client connection),
//! [`server`] (one actor per configured server: child lifecycle, routing, health), and
//! [`era`] (everything that depends on the protocol revision).

pub mod batch;
pub mod client;
pub mod era;
pub mod health;
pub mod ids;
pub mod outage;
pub mod park;
pub mod record;
pub mod registry;
pub mod seats;
pub mod server;
pub mod session;
