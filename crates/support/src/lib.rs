//! Layer 2 (docs/ARCHITECTURE.md "Layers"): configuration, logging and telemetry, including the
//! change signal `watch` and `top` wait on (`observe::changed`). Imports `base` and `vocab`.

pub mod config;
pub mod logging;
pub mod observe;
