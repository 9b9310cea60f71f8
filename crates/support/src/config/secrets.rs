//! Files that hold secrets (issue 47 §5, row N14): `http_token_file`, a url server's header
//! read from `{ file = … }`, and the sign-in's `client_secret_file` and `private_key_file`.
//! Whoever can write such a file chooses the secret (an `http_token_file` another user wrote
//! lets that user choose the server's TCP token), and whoever can read it has it.
//!
//! Rules, checked with the host checks (`run`, `reload`, `check-config`, and so `upgrade`'s
//! preflight):
//! - owned by another user than the supervisor's (root excepted), or writable by its group or
//!   others: refused, exit 2 naming the key;
//! - a symbolic link another user owns, at the path or above it, or a directory above it that
//!   another user could change: refused likewise (they could point it elsewhere);
//! - readable by its group or others: a warning naming the key and the mode (Kubernetes
//!   mounts secrets 0644 by default, so this is not refused).
//!
//! A file that does not exist is not this module's concern (each key says whether it must).

use super::{ConfigError, Validator};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

impl Validator<'_> {
    /// Checks secret file `path`, written at `span` as key `key` (see the module). Errors are
    /// the refusal; a readable-by-others file adds a warning.
    pub(super) fn secret_file(
        &self,
        path: &Path,
        span: std::ops::Range<usize>,
        key: &str,
    ) -> Result<(), ConfigError> {
        if !self.host {
            return Ok(());
        }
        let me = nix::unistd::geteuid().as_raw();
        let refuse = |what: String, fix: &str| {
            self.err(
                span.clone(),
                key,
                &format!(
                    "{} {what}; refusing a secret file another user could choose ({fix})",
                    path.display()
                ),
            )
        };
        if let Some(why) = base::safepath::untrusted_ancestor(path, me) {
            return Err(refuse(
                format!("is not safe: {why}"),
                "keep it under directories only root and the supervisor's user can change",
            ));
        }
        if let Ok(l) = std::fs::symlink_metadata(path) {
            if l.file_type().is_symlink() && l.uid() != 0 && l.uid() != me {
                return Err(refuse(
                    format!("is a symbolic link owned by uid {}", l.uid()),
                    "point the key at the real file",
                ));
            }
        }
        let Ok(m) = std::fs::metadata(path) else {
            return Ok(());
        };
        if m.uid() != 0 && m.uid() != me {
            return Err(refuse(
                format!(
                    "is owned by uid {}, not by the supervisor's user (uid {me}) or root",
                    m.uid()
                ),
                "chown it to the supervisor's user",
            ));
        }
        let mode = m.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(refuse(
                format!("may be written by its group or others (mode {mode:04o})"),
                "chmod 600 it",
            ));
        }
        if mode & 0o044 != 0 {
            self.warn(self.err(
                span,
                key,
                &format!(
                    "{} may be read by its group or others (mode {mode:04o}): they have the secret; chmod 600 it",
                    path.display()
                ),
            ));
        }
        Ok(())
    }
}
