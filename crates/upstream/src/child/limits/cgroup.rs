//! The cgroup v2 side of the limits (issue 18 §3): finding our cgroup, deciding whether it is
//! ours to divide (delegated), turning it into a parent of one cgroup per child instance, and
//! those instance cgroups (their limits, their events, their removal).
//!
//! Layout, under our own cgroup `<ours>` (kernel docs, cgroup-v2.rst, "No Internal Process
//! Constraint": a cgroup that distributes controllers to children holds no processes itself):
//!
//! ```text
//! <ours>/cgroup.subtree_control       "+memory +pids"
//! <ours>/supervisor/                  the supervisor (and whatever ran in <ours> before us)
//! <ours>/server-<name>-<n>-<token>/   one per child instance: memory.max, memory.swap.max,
//!                                      memory.oom.group, pids.max
//! ```
//!
//! Every function takes the paths it works on, so the tests run it against a fake tree of
//! plain files in a temporary directory (`tests.rs`).

use super::Usage;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::config::Limits;

/// The leaf the supervisor moves itself (and any other process of its cgroup) into.
pub const LEAF: &str = "supervisor";
/// The name prefix of instance cgroups (stale ones are removed at start when empty).
pub const INSTANCE_PREFIX: &str = "server-";
/// The controllers the limits need in our cgroup's `cgroup.controllers`.
pub const CONTROLLERS: [&str; 2] = ["memory", "pids"];

/// What [`detect_in`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detection {
    /// Usable (cgroup v2, memory and pids available, writable) and delegated to us: `limits =
    /// "auto"` uses it. `how` says what shows the delegation.
    Delegated {
        /// Our cgroup's directory.
        dir: PathBuf,
        /// `trusted.delegate` / `user.delegate` (the xattrs systemd ≥ 251 sets with
        /// `Delegate=yes`), or the root of a cgroup tree no systemd manages (a container).
        how: String,
    },
    /// Usable, but nothing says it was delegated: only `limits = "cgroup"` uses it (the
    /// operator vouches for it; a systemd that manages it would fight over it).
    Usable {
        /// Our cgroup's directory.
        dir: PathBuf,
    },
    /// Not usable here, and why.
    Unavailable(String),
}

impl Detection {
    /// Whether `limits = "auto"` uses the cgroup.
    pub fn delegated(&self) -> bool {
        matches!(self, Detection::Delegated { .. })
    }
}

/// Detects our cgroup v2 on this host (`/proc/self/cgroup`, `/proc/self/mountinfo`).
pub fn detect() -> Detection {
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("cannot read {p}: {e}"));
    match (read("/proc/self/cgroup"), read("/proc/self/mountinfo")) {
        (Ok(cg), Ok(mi)) => detect_in(Path::new("/"), &cg, &mi),
        (Err(e), _) | (_, Err(e)) => Detection::Unavailable(e),
    }
}

/// [`detect`] with the files' contents given and every path taken under `prefix` (`/` on a
/// host; a temporary directory in the tests).
pub fn detect_in(prefix: &Path, self_cgroup: &str, mountinfo: &str) -> Detection {
    let Some(path) = unified_path(self_cgroup) else {
        return Detection::Unavailable(
            "no cgroup v2 hierarchy: /proc/self/cgroup has no `0::` line (a cgroup v1 host)".into(),
        );
    };
    let Some((root, mount)) = cgroup2_mount(mountinfo) else {
        return Detection::Unavailable("cgroup2 is not mounted".into());
    };
    let rel = if root == "/" {
        Some(path)
    } else {
        path.strip_prefix(root.as_str())
            .filter(|r| r.is_empty() || r.starts_with('/'))
    };
    let Some(rel) = rel else {
        return Detection::Unavailable(format!(
            "our cgroup {path} is outside the cgroup2 mount's root {root}"
        ));
    };
    let mut rel = rel.trim_matches('/');
    // Already in our leaf (a restart in place, or systemd's `DelegateSubgroup=supervisor`):
    // the cgroup to divide is its parent.
    let parent = match rel.strip_suffix(LEAF) {
        Some("") => Some(""),
        Some(p) => p.strip_suffix('/'),
        None => None,
    };
    if let Some(parent) = parent {
        if usable(&under(prefix, &mount).join(parent)).is_ok() {
            rel = parent;
        }
    }
    let dir = match rel {
        "" => under(prefix, &mount),
        rel => under(prefix, &mount).join(rel),
    };
    if let Err(why) = usable(&dir) {
        return Detection::Unavailable(why);
    }
    match delegation(prefix, &dir, rel.is_empty()) {
        Some(how) => Detection::Delegated { dir, how },
        None => Detection::Usable { dir },
    }
}

/// `path` (absolute) under `prefix`.
fn under(prefix: &Path, path: &str) -> PathBuf {
    prefix.join(path.trim_start_matches('/'))
}

/// The path of the `0::PATH` line of `/proc/self/cgroup` (the unified hierarchy).
pub fn unified_path(self_cgroup: &str) -> Option<&str> {
    self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
}

/// The `(root, mount point)` of the first cgroup2 mount in `/proc/self/mountinfo` (proc(5):
/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`).
pub fn cgroup2_mount(mountinfo: &str) -> Option<(String, String)> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split_ascii_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = left.split_ascii_whitespace();
        let root = f.nth(3)?;
        let mount = f.next()?;
        Some((unescape(root), unescape(mount)))
    })
}

/// mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let code = b
            .get(i + 1..i + 4)
            .filter(|d| c == b'\\' && d.iter().all(|x| (b'0'..=b'7').contains(x)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match code {
            Some(x) => {
                out.push(x);
                i += 4;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the limits can be enforced in `dir`: the memory and pids controllers available
/// (`cgroup.controllers`) and the directory and its control files writable by us.
pub fn usable(dir: &Path) -> Result<(), String> {
    let listed = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| format!("cannot read {}/cgroup.controllers: {e}", dir.display()))?;
    let have: Vec<&str> = listed.split_ascii_whitespace().collect();
    let missing: Vec<&str> = CONTROLLERS
        .into_iter()
        .filter(|c| !have.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the {} controller(s) are not available in our cgroup {} (cgroup.controllers: {:?}); on a hybrid or cgroup v1 host they belong to v1, and under systemd they need Delegate=yes",
            missing.join(" and "),
            dir.display(),
            listed.trim()
        ));
    }
    for f in [
        dir.to_path_buf(),
        dir.join("cgroup.procs"),
        dir.join("cgroup.subtree_control"),
    ] {
        if nix::unistd::access(&f, nix::unistd::AccessFlags::W_OK).is_err() {
            return Err(format!(
                "{} is not writable by the supervisor: our cgroup is not delegated to us (systemd: Delegate=yes)",
                f.display()
            ));
        }
    }
    Ok(())
}

/// What shows that `dir` is ours to divide: the `trusted.delegate` or `user.delegate` xattr
/// (systemd ≥ 251 sets it on a unit's cgroup with `Delegate=yes`), or being the root of a
/// cgroup tree (`at_root`: `0::/`, a container's own cgroup namespace) when no systemd runs
/// (`/run/systemd/system`, sd_booted(3)).
fn delegation(prefix: &Path, dir: &Path, at_root: bool) -> Option<String> {
    for name in ["trusted.delegate", "user.delegate"] {
        if xattr(dir, name).is_some_and(|v| v.trim_end_matches('\0') == "1") {
            return Some(format!("{name}=1 on {}", dir.display()));
        }
    }
    if at_root && !under(prefix, "/run/systemd/system").exists() {
        return Some("the root of a cgroup tree that no systemd manages".into());
    }
    None
}

/// The value of extended attribute `name` of `path`, when it has one.
pub fn xattr(path: &Path, name: &str) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let n = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 64];
    // SAFETY: both strings are NUL-terminated and the buffer's length is passed.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let len = usize::try_from(len).ok()?;
    Some(String::from_utf8_lossy(buf.get(..len)?).into_owned())
}

/// One write to a cgroup control file (each `write(2)` is one command to the kernel).
pub fn write_file(path: &Path, text: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// Makes our cgroup `dir` a parent of instance cgroups: every process in it (the supervisor,
/// and whatever ran in it with us) moves to `dir/supervisor`, the memory and pids
/// controllers are enabled for the children, and empty instance cgroups a previous run left
/// are removed (populated ones are left alone and logged).
pub fn enable(dir: &Path) -> Result<(), String> {
    let leaf = dir.join(LEAF);
    let ctx = |what: &str, p: &Path, e: io::Error| format!("{what} {}: {e}", p.display());
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(ctx("cannot create", &leaf, e)),
    }
    let procs = dir.join("cgroup.procs");
    let listed = std::fs::read_to_string(&procs).map_err(|e| ctx("cannot read", &procs, e))?;
    for pid in listed.split_ascii_whitespace() {
        match write_file(&leaf.join("cgroup.procs"), pid) {
            Ok(()) => {}
            // It exited meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(ctx(&format!("cannot move process {pid} into"), &leaf, e)),
        }
    }
    let control = dir.join("cgroup.subtree_control");
    write_file(&control, "+memory +pids").map_err(|e| ctx("cannot write", &control, e))?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(INSTANCE_PREFIX) && e.path().is_dir() {
                let cg = InstanceCgroup { dir: e.path() };
                if cg.pids().is_empty() {
                    let _ = std::fs::remove_dir(&cg.dir);
                } else {
                    tracing::warn!(cgroup = %cg.dir.display(), "a child cgroup of a previous run still holds processes; leaving it");
                }
            }
        }
    }
    Ok(())
}

/// The name of the cgroup of the instance whose marker is `marker` (`<token>:<n>:<server>`,
/// [`base::reaper::marker`]): `server-<server>-<n>-<token>`, unique across supervisor runs.
pub fn instance_name(marker: &str) -> String {
    let mut parts = marker.splitn(3, ':');
    let (token, n, server) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    format!("{INSTANCE_PREFIX}{server}-{n}-{token}")
}

/// Counters of an instance cgroup's `memory.events` and `pids.events`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Events {
    /// `memory.events` `oom_kill`: processes the kernel's OOM killer ended in the cgroup.
    pub oom_kill: u64,
    /// `pids.events` `max`: forks refused because `pids.max` was reached.
    pub pids_max: u64,
}

/// The value of `key` in a flat keyed file (`key value` per line: `memory.events`,
/// `pids.events`, `cgroup.events`).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// One child instance's cgroup.
#[derive(Debug)]
pub struct InstanceCgroup {
    /// Its directory.
    pub dir: PathBuf,
}

impl InstanceCgroup {
    /// Creates `parent/name` with `limits` (memory.max, memory.swap.max 0, memory.oom.group
    /// 1, pids.max; unset limits stay `max`) and opens its `cgroup.procs` for the child to
    /// write itself into before exec. On an error nothing is left behind.
    pub fn create(parent: &Path, name: &str, limits: &Limits) -> io::Result<(Self, OwnedFd)> {
        let dir = parent.join(name);
        std::fs::create_dir(&dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create the cgroup {}: {e}", dir.display()),
            )
        })?;
        let cg = InstanceCgroup { dir };
        match cg.configure(limits) {
            Ok(fd) => Ok((cg, fd)),
            Err(e) => {
                let _ = std::fs::remove_dir(&cg.dir);
                Err(e)
            }
        }
    }

    pub(super) fn configure(&self, limits: &Limits) -> io::Result<OwnedFd> {
        let set = |file: &str, value: String, optional: bool| match write_file(
            &self.dir.join(file),
            &value,
        ) {
            Err(e) if optional && e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("cannot set {}/{file}: {e}", self.dir.display()),
            )),
            Ok(()) => Ok(()),
        };
        if let Some(m) = limits.memory_max {
            set("memory.max", m.to_string(), false)?;
            // No swap: over memory.max the tree is killed, not paged out (absent when swap
            // accounting is off).
            set("memory.swap.max", "0".into(), true)?;
            // The OOM killer ends the whole instance, not one random process of it.
            set("memory.oom.group", "1".into(), true)?;
        }
        if let Some(t) = limits.tasks_max {
            set("pids.max", t.to_string(), false)?;
        }
        let procs = self.dir.join("cgroup.procs");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot open {}: {e}", procs.display()))
            })?;
        // Opened with O_CLOEXEC (std's default): the child's exec closes it.
        Ok(OwnedFd::from(f))
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    /// Memory (`memory.current`) and tasks (`pids.current`) now.
    pub fn usage(&self) -> Usage {
        let n = |f: &str| self.read(f).trim().parse().unwrap_or(0);
        Usage {
            memory_bytes: n("memory.current"),
            tasks: n("pids.current"),
        }
    }

    /// The OOM kills and refused forks so far.
    pub fn events(&self) -> Events {
        Events {
            oom_kill: keyed(&self.read("memory.events"), "oom_kill").unwrap_or(0),
            pids_max: keyed(&self.read("pids.events"), "max").unwrap_or(0),
        }
    }

    /// The processes in it (`cgroup.procs`).
    pub fn pids(&self) -> Vec<i32> {
        self.read("cgroup.procs")
            .split_ascii_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// SIGKILLs everything in it: `cgroup.kill` (Linux 5.14), else each listed process.
    pub fn kill(&self) {
        if write_file(&self.dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Kills what is left in it and removes it, waiting at most `within` for it to empty.
    /// Returns whether it is gone.
    pub fn remove(&self, within: Duration) -> bool {
        let deadline = base::deadline::after(Instant::now(), within);
        loop {
            if !self.pids().is_empty() {
                self.kill();
            }
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => {
                    tracing::warn!(cgroup = %self.dir.display(), error = %e, "cannot remove the child's cgroup");
                    return false;
                }
            }
        }
    }
}
