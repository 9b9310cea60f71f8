//! What unit tests share (compiled only for tests).

/// The variable `.ci/run` sets (issue 47 §9): a test part that needs root fails instead of
/// skipping, so a skip in CI (which runs as root) cannot hide a regression.
pub const REQUIRE_ROOT: &str = "MCP_SUPERVISOR_TESTS_REQUIRE_ROOT";

/// Whether the part of a test named `what` can run (it needs root). When it cannot, says so
/// and returns `false`, or panics when [`REQUIRE_ROOT`] is set.
pub fn needs_root(what: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os(REQUIRE_ROOT).is_none_or(|v| v.is_empty()),
        "{what}: needs root, and {REQUIRE_ROOT} is set: a root-only test may not skip"
    );
    eprintln!("{what}: skipped: needs root (CI runs it as root with {REQUIRE_ROOT}=1)");
    false
}
