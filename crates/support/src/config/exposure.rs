//! Whether a configuration that holds secrets can be read by others (issue 26 §8): `env`
//! tables carry API keys and tokens, `otel_headers` credentials. Reads the file's mode only;
//! the warning names the file, its mode and the keys, never a value.

use super::Config;
use std::os::unix::fs::PermissionsExt;

/// A warning when the file `cfg` came from sets `env` or `otel_headers` ([`Config::secrets`])
/// and its group or others may read it; `None` otherwise (also when it cannot be stat'ed any
/// more). The mode is the file's, following a symlink (what a reader gets).
pub fn exposure(cfg: &Config) -> Option<String> {
    if cfg.secrets.is_empty() {
        return None;
    }
    let mode = std::fs::metadata(&cfg.path).ok()?.permissions().mode() & 0o7777;
    let who = match (mode & 0o040 != 0, mode & 0o004 != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        (false, true) => "others",
        (false, false) => return None,
    };
    let path = cfg.path.display();
    Some(format!(
        "{path} is mode {mode:04o}, readable by {who}, and sets {}, which may hold secrets: make it readable by its owner only (chmod 600 {path}), or give such values to the supervisor's own environment, which children inherit",
        cfg.secrets.join(", ")
    ))
}
