//! Child processes: [`process`] spawns, pumps and stops one instance; [`backoff`] decides when
//! to spawn the next. Nothing here knows about clients.

pub mod backoff;
pub mod process;
