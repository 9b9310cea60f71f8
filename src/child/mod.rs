//! Child processes: [`process`] spawns, pumps and stops one instance; [`backoff`] decides when
//! to spawn the next; [`limits`] enforces the per-server resource limits. Nothing here knows
//! about clients.

pub mod backoff;
pub mod limits;
pub mod process;
