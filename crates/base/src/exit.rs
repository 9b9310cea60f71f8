//! Exit codes (a contract, docs/book/src/reference/cli.md): 0 success; 1 runtime failure (the
//! operation did not succeed); 2 bad configuration or usage (also `reload` of an invalid
//! file); 3 the supervisor is not running (control socket unreachable); 4 no server by that
//! name; 100 `run` found another supervisor on the same `socket_dir`. A leaf, so every verb's
//! module (`control`, `daemon`, `top`) uses them without importing the command line.

/// Exit code for a runtime failure: the operation ran and did not succeed.
pub const EXIT_FAILED: i32 = 1;
/// Exit code for a bad configuration file or bad usage.
pub const EXIT_CONFIG: i32 = 2;
/// Exit code of the operator verbs when the supervisor is not running.
pub const EXIT_NOT_RUNNING: i32 = 3;
/// Exit code of the operator verbs for a server name the supervisor does not know.
pub const EXIT_UNKNOWN_SERVER: i32 = 4;
/// Exit code of `run` when another supervisor already runs on the same `socket_dir` (the s6
/// convention for "already running").
pub const EXIT_ALREADY_RUNNING: i32 = 100;
