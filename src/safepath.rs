//! Whether a path can be trusted not to change under us (issue 14 §1, issue 26 §5, issue
//! 47 §1): every directory above it is owned by root or by us and writable by nobody else
//! unless sticky, so no other user can move a directory on the path away and put theirs in
//! its place; a link on the path counts as its owner's (whoever owns it can point it
//! elsewhere).
//!
//! Owns the ancestor rule, shared by `socket_dir`, `state_dir`, `token_dir` (`daemon::sockets`)
//! and the binary an upgrade runs (`handover`). Reads only metadata; changes nothing.

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
