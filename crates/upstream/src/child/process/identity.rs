//! The identity a child runs as (`user`, `group`; issue 7 §5): resolved before the fork,
//! applied in `pre_exec` with async-signal-safe calls only.

use super::SpawnSpec;

/// The identity a child runs as when `user` or `group` is set (issue 7 §5): applied in the
/// forked child (supplementary groups of the user, then gid, then uid), so nothing of root's
/// groups survives. std's own `uid()`/`gid()` would drop every supplementary group.
pub(super) struct RunAs {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    /// HOME, USER, LOGNAME of the user (the server's `env` still overrides them).
    pub(super) env: Vec<(&'static str, std::ffi::OsString)>,
}

impl RunAs {
    /// In the forked child: setgroups, setgid, setuid, then enter `cwd` again as the user so a
    /// directory the user may not enter fails the spawn instead of running there as root.
    pub(super) fn apply(&self, cwd: Option<&std::ffi::CStr>) -> std::io::Result<()> {
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls on owned, initialised buffers.
        unsafe {
            check(libc::setgroups(
                self.groups.len() as _,
                self.groups.as_ptr(),
            ))?;
            check(libc::setgid(self.gid))?;
            check(libc::setuid(self.uid))?;
            if let Some(dir) = cwd {
                check(libc::chdir(dir.as_ptr()))?;
            }
        }
        Ok(())
    }
}

/// Resolves `user`/`group`. `None` when neither is set, or when they name who we already are.
/// A different identity needs root: otherwise the spawn fails with a permission error.
pub(super) fn run_as(cfg: &SpawnSpec) -> std::io::Result<Option<RunAs>> {
    use std::io::{Error, ErrorKind};
    use support::config::{resolve_group, resolve_user};
    if cfg.user.is_none() && cfg.group.is_none() {
        return Ok(None);
    }
    let user = match &cfg.user {
        Some(u) => Some(resolve_user(u).map_err(|m| Error::new(ErrorKind::NotFound, m))?),
        None => None,
    };
    let (my_uid, my_gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    let gid = match &cfg.group {
        Some(g) => resolve_group(g).map_err(|m| Error::new(ErrorKind::NotFound, m))?,
        None => user.as_ref().map_or(my_gid.as_raw(), |u| u.gid),
    };
    let uid = user.as_ref().map_or(my_uid.as_raw(), |u| u.uid);
    if !my_uid.is_root() {
        if uid == my_uid.as_raw() && gid == my_gid.as_raw() {
            return Ok(None);
        }
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            "`user`/`group` need the supervisor to run as root",
        ));
    }
    let groups = match user.as_ref().and_then(|u| u.name.as_deref()) {
        Some(name) if cfg.user.is_some() => {
            let cname =
                std::ffi::CString::new(name).map_err(|e| Error::new(ErrorKind::InvalidInput, e))?;
            let mut list: Vec<libc::gid_t> =
                nix::unistd::getgrouplist(&cname, nix::unistd::Gid::from_raw(gid))
                    .map_err(Error::from)?
                    .into_iter()
                    .map(|g| g.as_raw())
                    .collect();
            if !list.contains(&gid) {
                list.push(gid);
            }
            list
        }
        _ => vec![gid],
    };
    let mut env = Vec::new();
    if let Some(u) = &user {
        if let Some(home) = &u.home {
            env.push(("HOME", home.clone().into_os_string()));
        }
        if let Some(name) = &u.name {
            env.push(("USER", name.into()));
            env.push(("LOGNAME", name.into()));
        }
    }
    Ok(Some(RunAs {
        uid,
        gid,
        groups,
        env,
    }))
}

/// Why the child cannot enter `cwd`, when it cannot: missing, not a directory, or a directory
/// (or an ancestor) the server's `user`/`group` may not search. Checked from the permission
/// bits (owner, group, other; ACLs are not read) after a spawn failed, so the error names the
/// directory rather than the command. `None` when `cwd` is unset or looks enterable.
pub(super) fn cwd_problem(cfg: &SpawnSpec) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let cwd = cfg.cwd.as_ref()?;
    let shown = cwd.display().to_string();
    let meta = match std::fs::metadata(cwd) {
        Ok(m) => m,
        Err(e) => return Some(format!("{shown} cannot be entered: {e}")),
    };
    if !meta.is_dir() {
        return Some(format!("{shown} is not a directory"));
    }
    let who = run_as(cfg).ok().flatten();
    let (uid, groups): (u32, Vec<u32>) = match &who {
        Some(r) => (
            r.uid,
            std::iter::once(r.gid)
                .chain(r.groups.iter().copied())
                .collect(),
        ),
        None => (
            nix::unistd::geteuid().as_raw(),
            vec![nix::unistd::getegid().as_raw()],
        ),
    };
    if uid == 0 {
        return None;
    }
    for dir in cwd.ancestors() {
        let Ok(m) = std::fs::metadata(dir) else {
            continue;
        };
        let mode = m.mode();
        let bit = if m.uid() == uid {
            0o100
        } else if groups.contains(&m.gid()) {
            0o010
        } else {
            0o001
        };
        if mode & bit == 0 {
            let name = cfg.user.as_deref().unwrap_or("the supervisor's user");
            return Some(format!(
                "{shown} cannot be entered: {} is not searchable by {name} (uid {uid})",
                dir.display()
            ));
        }
    }
    None
}
