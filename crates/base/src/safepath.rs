//! Whether a path can be trusted not to change under us (issue 14 §1, issue 26 §5, issue
//! 47 §1): every directory above it is owned by root or by us and writable by nobody else
//! unless sticky, so no other user can move a directory on the path away and put theirs in
//! its place; a link on the path counts as its owner's (whoever owns it can point it
//! elsewhere).
//!
//! Owns the ancestor rule, shared by `socket_dir` (`daemon::sockets`), `state_dir` and
//! `token_dir` (the private directories, checked and created here) and the binary an
//! upgrade runs (`handover`). Reads only metadata, except that a missing private directory is
//! created 0700.

use anyhow::{Context, Result};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a directory above a path cannot be trusted, for the caller's error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// `path` is a symbolic link owned by uid `owner`, neither root nor us.
    Link {
        /// The link.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// Directory `path` (owner `owner`, mode `mode`) can be changed by another user.
    Dir {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its mode bits (`0o7777`).
        mode: u32,
    },
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Untrusted::Link { path, owner } => write!(
                f,
                "its parent {} is a symbolic link owned by uid {owner}, not by root or by us",
                path.display()
            ),
            Untrusted::Dir { path, owner, mode } => write!(
                f,
                "its parent {} (owner uid {owner}, mode {mode:04o}) can be changed by another user, who could swap what is below it",
                path.display()
            ),
        }
    }
}

/// The first directory above `path` (made absolute against the working directory) that
/// another user than root and `me` could change, or `None` when there is none. A component
/// that does not exist is skipped (it is created later by us, or the caller fails on it).
/// Links on the path are checked as links (owner), then as what they point to.
pub fn untrusted_ancestor(path: &Path, me: u32) -> Option<Untrusted> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    for a in abs.ancestors().skip(1) {
        if let Ok(l) = std::fs::symlink_metadata(a) {
            if l.file_type().is_symlink() && l.uid() != 0 && l.uid() != me {
                return Some(Untrusted::Link {
                    path: a.to_path_buf(),
                    owner: l.uid(),
                });
            }
        }
        let Ok(m) = std::fs::metadata(a) else {
            continue;
        };
        let mode = m.permissions().mode();
        let sticky = mode & 0o1000 != 0;
        let others_write = mode & 0o022 != 0;
        let owner_ok = m.uid() == 0 || m.uid() == me;
        if !owner_ok || (others_write && !sticky) {
            return Some(Untrusted::Dir {
                path: a.to_path_buf(),
                owner: m.uid(),
                mode: mode & 0o7777,
            });
        }
    }
    None
}

/// A `socket_dir` or `state_dir` the supervisor will not use (issue 14 §1, issue 26 §5): exit
/// 2, with what is wrong and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DirRefused(pub String);

/// The error of a directory refused as config key `key` (used for `purpose`): [`DirRefused`].
pub fn refuse_key(key: &str, purpose: &str, dir: &Path, what: &str, fix: &str) -> anyhow::Error {
    DirRefused(format!(
        "{key} {}: {what}; refusing to {purpose} ({fix})",
        dir.display()
    ))
    .into()
}

/// Makes sure `state_dir`, where on-demand servers keep the record of their last run (read
/// back and served to clients), is ours as `socket_dir` is (issue 26 §5): created 0700 when
/// missing; never a symbolic link; owned by the supervisor's euid or root; writable by nobody
/// else; every ancestor safe ([`check_ancestors`]). Errors are [`DirRefused`] (exit 2).
pub fn prepare_state_dir(dir: &Path) -> Result<()> {
    prepare_private_dir(dir, "state_dir", "keep records there")
}

/// Makes sure `token_dir`, where sign-ins to url servers are kept (issue 30), passes the
/// checks of [`prepare_state_dir`]: a planted directory could hand the supervisor someone
/// else's tokens or collect its own.
pub fn prepare_token_dir(dir: &Path) -> Result<()> {
    prepare_private_dir(dir, "token_dir", "keep sign-ins there")
}

/// The checks of [`prepare_state_dir`], for the directory of config key `key`.
fn prepare_private_dir(dir: &Path, key: &str, purpose: &str) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let me = nix::unistd::geteuid().as_raw();
    let refuse = |what: &str, fix: &str| refuse_key(key, purpose, dir, what, fix);
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(refuse(
                "is a symbolic link",
                &format!("set {key} to the real directory, owned by the supervisor's user"),
            ))
        }
        Ok(m) if !m.is_dir() => {
            return Err(refuse(
                "exists and is not a directory",
                "remove it or choose another path",
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create {key} {}", dir.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", dir.display())),
    }
    check_ancestors(dir, me, key, purpose)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .with_context(|| format!("cannot open {key} {}", dir.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot inspect {}", dir.display()))?;
    let mode = meta.mode() & 0o7777;
    if meta.uid() != me && meta.uid() != 0 {
        return Err(refuse(
            &format!(
                "is owned by uid {}, not by the supervisor's uid {me} or root",
                meta.uid()
            ),
            "use a directory the supervisor's user owns (systemd's StateDirectory=), or chown it",
        ));
    }
    if mode & 0o022 != 0 {
        return Err(refuse(
            &format!("can be written by its group or others (mode {mode:04o})"),
            "chmod go-w it: they could plant or replace the records clients are served from",
        ));
    }
    Ok(())
}

/// Every ancestor of `dir` is owned by root or `me` and not writable by anyone else unless it
/// is sticky (`/tmp`), and no ancestor is a symbolic link owned by someone else: nobody can
/// rename `dir` away and put another in its place. `key` and `purpose` name it in errors.
pub fn check_ancestors(dir: &Path, me: u32, key: &str, purpose: &str) -> Result<()> {
    match untrusted_ancestor(dir, me) {
        None => Ok(()),
        Some(Untrusted::Link { path, owner }) => Err(refuse_key(
            key,
            purpose,
            dir,
            &format!(
                "its parent {} is a symbolic link owned by uid {owner}, not by root or the supervisor's uid {me}",
                path.display()
            ),
            "use the real path, under directories only root and the supervisor's user own",
        )),
        Some(Untrusted::Dir { path, owner, mode }) => Err(refuse_key(
            key,
            purpose,
            dir,
            &format!(
                "its parent {} (owner uid {owner}, mode {mode:04o}) can be changed by another user, who could swap the directory",
                path.display()
            ),
            "use a directory under a path only root and the supervisor's user can write, e.g. /run",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{untrusted_ancestor, Untrusted};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_group_writable_parent_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("p");
        std::fs::create_dir(&parent).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o775)).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        match untrusted_ancestor(&parent.join("x"), me) {
            Some(Untrusted::Dir { path, mode, .. }) => {
                assert_eq!(path, parent);
                assert_eq!(mode, 0o775);
            }
            other => panic!("{other:?}"),
        }
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(untrusted_ancestor(&parent.join("x"), me), None);
        // The sticky /tmp-like case is allowed.
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(untrusted_ancestor(&parent.join("x"), me), None);
    }
}
