//! Child processes: [`process`] spawns, pumps and stops one instance; [`backoff`] decides when
//! to spawn the next, [`budget`] how many spawns the whole daemon may make; [`limits`] enforces the per-server resource limits; [`fdstore`] keeps running instances in systemd's file descriptor store for the next run after a crash. Nothing here knows
//! about clients.

pub mod budget;
pub mod fdstore;
pub mod limits;
pub mod process;
