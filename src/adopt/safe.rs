//! The file system as `adopt` touches it (issue 26 §3): every path is walked one component at
//! a time from `/`, each opened `O_PATH | O_NOFOLLOW` relative to the directory before it and
//! checked on its descriptor; a symbolic link is followed only when root or the running user
//! owns it; every read, replacement, creation and removal happens relative to the descriptor
//! of the directory reached, never again by path.
//!
//! Owns: the walk, the owner and mode checks ([`Trust`]), and every system call that reads or
//! changes a file for `adopt`. Errors are [`AdoptError::Untrusted`] (exit 2: a link, an owner
//! or a mode adopt will not trust, named with the path and the reason), [`AdoptError::Io`],
//! and [`AdoptError::Swapped`] (a replaced file was swapped while it was written).
//!
//! Why each rule (root adopting the files of user U, who owns her home and can change
//! anything in it at any moment):
//! - U's links are not followed: her `~/.claude.json` → `/root/.claude.json` would have root
//!   read and rewrite its own file. Links of root and of the running user are (`/var/run`,
//!   a user's own dotfile links when she adopts her own files).
//! - Each directory and the file are owned by root, the running user, or U: a file of a third
//!   user in U's home is hers to plant, not U's to give.
//! - A temporary file is created `O_CREAT | O_EXCL | O_NOFOLLOW` under a random name, given its
//!   owner and mode on the descriptor, and renamed within the directory descriptor; after the
//!   rename the name must hold the same inode, or the write is reported as raced. U can
//!   swap the temporary file at any time; she can only make adopt fail, never redirect it.

use super::AdoptError;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, Permissions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Symbolic links followed in one walk before it gives up (Linux's own `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;
/// Largest file `adopt` reads, in bytes (a client file, a backup, a manifest): 64 MiB.
pub const MAX_FILE: u64 = 64 << 20;

/// Who may own what a walk passes through and opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// A user's files (client files, the supervisor config): every directory and the file
    /// owned by root, the running user, or `owner` (the uid whose files they are); no
    /// directory writable by others unless sticky.
    Files {
        /// The owner of the home or project they are in.
        owner: u32,
    },
    /// `adopt`'s own state (the manifests and backups `--undo` trusts): every directory owned
    /// by root or the running user, every file by the running user, and none of them
    /// writable by its group or others (a sticky directory excepted).
    Private,
}

impl Trust {
    fn allows(self, uid: u32, me: u32) -> bool {
        match self {
            Trust::Files { owner } => uid == 0 || uid == me || uid == owner,
            Trust::Private => uid == 0 || uid == me,
        }
    }

    fn whom(self, me: u32) -> String {
        let you = if me == 0 {
            String::new()
        } else {
            format!(", by you (uid {me})")
        };
        match self {
            Trust::Files { owner } if owner != me && owner != 0 => {
                format!("by the owner of these files (uid {owner}){you} or by root")
            }
            _ if me == 0 => "by root".to_string(),
            _ => format!("by you (uid {me}) or by root"),
        }
    }
}

/// Mode and owner of a file as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

impl Meta {
    fn of(m: &Metadata) -> Meta {
        Meta {
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        }
    }
}

/// The running user's uid.
pub fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn untrusted(path: &Path, why: impl Into<String>) -> AdoptError {
    AdoptError::Untrusted {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn io<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(std::io::Error) -> AdoptError + 'a {
    move |source| AdoptError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

fn errno<'a>(
    path: &'a Path,
    action: &'static str,
) -> impl FnOnce(rustix::io::Errno) -> AdoptError + 'a {
    move |e| io(path, action)(e.into())
}

/// `name` in `dir`, not following it: the descriptor and what it is. `None` when absent.
fn peek(dir: &OwnedFd, name: &OsStr) -> Result<Option<(OwnedFd, Metadata)>, rustix::io::Errno> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => {
            let meta = File::from(fd.try_clone().map_err(errno_of)?)
                .metadata()
                .map_err(errno_of)?;
            Ok(Some((fd, meta)))
        }
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn errno_of(e: std::io::Error) -> rustix::io::Errno {
    rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO)
}

fn open_root() -> Result<OwnedFd, AdoptError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::openat(rustix::fs::CWD, "/", flags, Mode::empty())
        .map_err(errno(Path::new("/"), "read"))
}

/// The components of `p` to walk, `..` kept (it is resolved on the descriptor).
fn parts(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// What a walk is for.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// The last component is a file (or absent).
    Entry,
    /// The last component is a directory. `learn`: whose it is, is what is asked (a home, a
    /// project): the first directory on the way owned by neither root nor the running user
    /// makes its owner the one [`Trust::Files`] allows from there on.
    Dir { learn: bool },
}

/// With `learn`, a directory owned by neither root nor `me`, met while no other owner is
/// trusted yet, makes its owner the trusted one.
fn learned(trust: Trust, m: &Metadata, me: u32, learn: bool) -> Trust {
    match trust {
        Trust::Files { owner } if learn && owner == me && m.uid() != 0 && m.uid() != me => {
            Trust::Files { owner: m.uid() }
        }
        t => t,
    }
}

struct Walk {
    dir: OwnedFd,
    /// The real path of `dir`.
    real: PathBuf,
    /// The last component (for [`Want::Entry`]); `None` for a directory.
    name: Option<OsString>,
    /// The directory's metadata (for [`Want::Dir`]).
    meta: Option<Metadata>,
    /// The trust the walk ended with (learned, for `Want::Dir { learn: true }`).
    trust: Trust,
}

fn check_dir(path: &Path, m: &Metadata, trust: Trust, me: u32) -> Result<(), AdoptError> {
    if !m.is_dir() {
        return Err(untrusted(path, "is not a directory"));
    }
    if !trust.allows(m.uid(), me) {
        return Err(untrusted(
            path,
            format!("is owned by uid {}, not {}", m.uid(), trust.whom(me)),
        ));
    }
    let mode = m.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    let writable = match trust {
        Trust::Files { .. } => mode & 0o002 != 0,
        Trust::Private => mode & 0o022 != 0,
    };
    if writable && !sticky {
        return Err(untrusted(
            path,
            format!(
                "is a directory writable by others (mode {mode:04o}), who could swap what is in it"
            ),
        ));
    }
    Ok(())
}

/// Walks `path` (absolute) under `trust`. `create`: missing directories are made with this
/// mode (then checked like the others). `None` when a directory on the way is missing and
/// `create` is `None` (or, for [`Want::Dir`], the directory itself is missing).
fn walk(
    path: &Path,
    trust: Trust,
    want: Want,
    create: Option<u32>,
) -> Result<Option<Walk>, AdoptError> {
    if !path.is_absolute() {
        return Err(AdoptError::Usage(format!(
            "{}: not an absolute path",
            path.display()
        )));
    }
    let me = me();
    let learn = matches!(want, Want::Dir { learn: true });
    let mut trust = trust;
    let mut todo = parts(path);
    let mut dir = open_root()?;
    let mut real = PathBuf::from("/");
    let root_meta = File::from(dir.try_clone().map_err(io(path, "read"))?)
        .metadata()
        .map_err(io(path, "read"))?;
    let mut meta = root_meta;
    check_dir(&real, &meta, trust, me)?;
    let mut links = 0;
    loop {
        let Some(name) = todo.pop_front() else {
            return match want {
                Want::Dir { .. } => Ok(Some(Walk {
                    dir,
                    real,
                    name: None,
                    meta: Some(meta),
                    trust,
                })),
                Want::Entry => Err(untrusted(path, "is a directory, not a file")),
            };
        };
        let last = todo.is_empty();
        let here = real.join(&name);
        if name == ".." {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            dir = rustix::fs::openat(&dir, "..", flags, Mode::empty())
                .map_err(errno(path, "read"))?;
            real.pop();
            meta = File::from(dir.try_clone().map_err(io(path, "read"))?)
                .metadata()
                .map_err(io(path, "read"))?;
            check_dir(&real, &meta, trust, me)?;
            continue;
        }
        let found = peek(&dir, &name).map_err(errno(&here, "read"))?;
        let Some((fd, m)) = found else {
            if last && matches!(want, Want::Entry) {
                return Ok(Some(Walk {
                    dir,
                    real,
                    name: Some(name),
                    meta: None,
                    trust,
                }));
            }
            let Some(mode) = create else {
                return Ok(None);
            };
            match rustix::fs::mkdirat(&dir, &name, Mode::from_raw_mode(mode)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(errno(&here, "create")(e)),
            }
            todo.push_front(name);
            continue;
        };
        if m.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(untrusted(path, "has too many symbolic links"));
            }
            if m.uid() != 0 && m.uid() != me {
                return Err(untrusted(
                    &here,
                    format!(
                        "is a symbolic link owned by uid {uid}: adopt follows only links of root{} (put the file itself there, or run adopt as uid {uid})",
                        if me == 0 {
                            String::new()
                        } else {
                            format!(" or of its own user (uid {me})")
                        },
                        uid = m.uid(),
                    ),
                ));
            }
            let target =
                rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(errno(&here, "read"))?;
            let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
            let mut next = parts(&target);
            next.extend(todo);
            todo = next;
            if target.is_absolute() {
                dir = open_root()?;
                real = PathBuf::from("/");
            }
            continue;
        }
        if last && matches!(want, Want::Entry) {
            return Ok(Some(Walk {
                dir,
                real,
                name: Some(name),
                meta: None,
                trust,
            }));
        }
        trust = learned(trust, &m, me, learn);
        check_dir(&here, &m, trust, me)?;
        dir = fd;
        real = here;
        meta = m;
    }
}

/// A directory reached by a walk, held open: what is in it is read and changed relative to it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// Its real path (links of root or the running user resolved).
    pub path: PathBuf,
    /// Its mode and owner.
    pub meta: Meta,
    trust: Trust,
}

/// The real path of the directory `path` (a home or a project) and whose files it holds: the
/// one user other than root and the running user who owns a directory on the way (from
/// there on every directory must be theirs or root's: a third user's is refused), else the
/// owner of `path` itself. Links are followed only when root's or the running user's. `None`
/// when it does not exist.
pub fn directory_owner(path: &Path) -> Result<Option<(PathBuf, u32)>, AdoptError> {
    let me = me();
    let Some(w) = walk(
        path,
        Trust::Files { owner: me },
        Want::Dir { learn: true },
        None,
    )?
    else {
        return Ok(None);
    };
    let owner = match (w.trust, &w.meta) {
        (Trust::Files { owner }, _) if owner != me => owner,
        (_, Some(m)) => m.uid(),
        _ => me,
    };
    Ok(Some((w.real, owner)))
}

impl Dir {
    /// Opens the directory `path` under `trust`, creating what is missing with `create`.
    pub fn open(path: &Path, trust: Trust, create: Option<u32>) -> Result<Option<Dir>, AdoptError> {
        let Some(w) = walk(path, trust, Want::Dir { learn: false }, create)? else {
            return Ok(None);
        };
        let meta = w
            .meta
            .as_ref()
            .map(Meta::of)
            .ok_or_else(|| AdoptError::Internal {
                path: path.to_path_buf(),
                message: "a directory walk ended without the directory".to_string(),
            })?;
        Ok(Some(Dir {
            fd: w.dir,
            path: w.real,
            meta,
            trust,
        }))
    }

    /// The subdirectory `name`, checked like the walk checks; `None` when it is missing or not
    /// a directory. `create`: made with this mode first, exclusively (`AlreadyExists` is an
    /// error).
    pub fn subdir(&self, name: &str, create: Option<u32>) -> Result<Option<Dir>, AdoptError> {
        let path = self.path.join(name);
        if let Some(mode) = create {
            rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)).map_err(|e| {
                AdoptError::Io {
                    path: path.clone(),
                    action: "create",
                    source: e.into(),
                }
            })?;
        }
        let Some((fd, m)) = peek(&self.fd, OsStr::new(name)).map_err(errno(&path, "read"))? else {
            return Ok(None);
        };
        if m.file_type().is_symlink() {
            return Err(untrusted(&path, "is a symbolic link"));
        }
        if !m.is_dir() {
            return Ok(None);
        }
        check_dir(&path, &m, self.trust, me())?;
        Ok(Some(Dir {
            fd,
            path,
            meta: Meta::of(&m),
            trust: self.trust,
        }))
    }

    /// The names in it (not `.` and `..`).
    pub fn names(&self) -> Result<Vec<String>, AdoptError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, ".", flags, Mode::empty())
            .map_err(errno(&self.path, "read"))?;
        let mut out = Vec::new();
        for e in rustix::fs::Dir::read_from(&fd).map_err(errno(&self.path, "read"))? {
            let e = e.map_err(errno(&self.path, "read"))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                out.push(name);
            }
        }
        Ok(out)
    }

    /// The entry `name` of this directory (one plain component).
    pub fn entry(&self, name: &str) -> Result<Place, AdoptError> {
        let path = self.path.join(name);
        if parts(Path::new(name)).len() != 1 || name == ".." || name.contains('/') {
            return Err(untrusted(&path, "is not a plain file name"));
        }
        Ok(Place {
            dir: self.fd.try_clone().map_err(io(&path, "read"))?,
            name: OsString::from(name),
            path,
            trust: self.trust,
        })
    }
}

/// A file's place: the directory that holds it (open, reached by a checked walk) and its name
/// there. The file may not exist.
#[derive(Debug)]
pub struct Place {
    dir: OwnedFd,
    name: OsString,
    /// The path asked for (named in messages).
    pub path: PathBuf,
    trust: Trust,
}

/// A file as read.
#[derive(Debug, Clone)]
pub struct Contents {
    /// Its content.
    pub bytes: Vec<u8>,
    /// Its mode and owner.
    pub meta: Meta,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Place {
    /// Finds the place of `path` under `trust`; `create`: missing directories on the way are
    /// made with this mode. `None` when a directory on the way is missing.
    pub fn find(
        path: &Path,
        trust: Trust,
        create: Option<u32>,
    ) -> Result<Option<Place>, AdoptError> {
        let Some(w) = walk(path, trust, Want::Entry, create)? else {
            return Ok(None);
        };
        let Some(name) = w.name else {
            return Err(untrusted(path, "is a directory, not a file"));
        };
        Ok(Some(Place {
            dir: w.dir,
            name,
            path: path.to_path_buf(),
            trust,
        }))
    }

    /// Reads the file, `None` when it does not exist. Refused: a link (planted after the
    /// walk), anything but a regular file, an owner `trust` does not allow, a file of another
    /// owner with more than one name (a hard link), and for [`Trust::Private`] a file not the
    /// running user's or writable by its group or others. At most [`MAX_FILE`] bytes.
    pub fn read(&self) -> Result<Option<Contents>, AdoptError> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => {
                return Err(untrusted(
                    &self.path,
                    "became a symbolic link while adopt ran",
                ))
            }
            Err(e) => return Err(errno(&self.path, "read")(e)),
        };
        let file = File::from(fd);
        let m = file.metadata().map_err(io(&self.path, "read"))?;
        self.check_file(&m)?;
        let mut bytes = Vec::new();
        (&file)
            .take(MAX_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(io(&self.path, "read"))?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(untrusted(
                &self.path,
                format!("is larger than {} MiB", MAX_FILE >> 20),
            ));
        }
        Ok(Some(Contents {
            bytes,
            meta: Meta::of(&m),
        }))
    }

    fn check_file(&self, m: &Metadata) -> Result<(), AdoptError> {
        let me = me();
        if !m.file_type().is_file() {
            return Err(untrusted(&self.path, "is not a regular file"));
        }
        let uid = m.uid();
        match self.trust {
            Trust::Private if uid != me => {
                return Err(untrusted(
                    &self.path,
                    format!("is owned by uid {uid}, not by you (uid {me})"),
                ))
            }
            Trust::Private if m.mode() & 0o022 != 0 => {
                return Err(untrusted(
                    &self.path,
                    format!("is writable by others (mode {:04o})", m.mode() & 0o7777),
                ))
            }
            Trust::Private => {}
            Trust::Files { owner } => {
                if !self.trust.allows(uid, me) {
                    return Err(untrusted(
                        &self.path,
                        format!("is owned by uid {uid}, not {}", self.trust.whom(me)),
                    ));
                }
                if uid != owner && m.nlink() > 1 {
                    return Err(untrusted(
                        &self.path,
                        format!("is uid {uid}'s and has {} hard links", m.nlink()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Replaces the file with `bytes`, atomically: a new temporary file beside it (created
    /// exclusively, never through a link), given `owner` (when the running user is root and
    /// it differs) and `mode` on its descriptor, synced, renamed over the name within the
    /// directory. [`AdoptError::Swapped`] when the name does not hold the written file after
    /// the rename (the temporary file was swapped).
    pub fn replace(
        &self,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(), AdoptError> {
        let name = self.name.to_string_lossy();
        let tmp = format!(
            ".{name}.adopt-{}-{}-{:016x}.tmp",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            rand::random::<u64>()
        );
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, tmp.as_str(), flags, Mode::from_raw_mode(0o600))
            .map_err(errno(&self.path, "write"))?;
        let mut file = File::from(fd);
        let written = (|| -> Result<Metadata, AdoptError> {
            file.write_all(bytes).map_err(io(&self.path, "write"))?;
            let m = file.metadata().map_err(io(&self.path, "write"))?;
            if let Some((uid, gid)) = owner {
                if m.uid() != uid && me() != 0 {
                    // Replacing it would hand another user's file to us.
                    return Err(untrusted(
                        &self.path,
                        format!("is uid {uid}'s, and only root can replace it keeping its owner"),
                    ));
                }
                if (m.uid(), m.gid()) != (uid, gid) {
                    match std::os::unix::fs::fchown(&file, Some(uid), Some(gid)) {
                        Ok(()) => {}
                        // Not root: a group we are not in stays ours (as a new file would).
                        Err(_) if me() != 0 => {}
                        Err(e) => return Err(io(&self.path, "write")(e)),
                    }
                }
            }
            // After the owner: chown clears set-id bits. The umask narrowed the creation mode.
            file.set_permissions(Permissions::from_mode(mode))
                .map_err(io(&self.path, "write"))?;
            file.sync_all().map_err(io(&self.path, "write"))?;
            Ok(m)
        })();
        let m = match written {
            Ok(m) => m,
            Err(e) => {
                self.remove_if_ours(tmp.as_str(), &file);
                return Err(e);
            }
        };
        if let Err(e) = rustix::fs::renameat(&self.dir, tmp.as_str(), &self.dir, &self.name) {
            self.remove_if_ours(tmp.as_str(), &file);
            return Err(errno(&self.path, "write")(e));
        }
        let now = peek(&self.dir, &self.name).map_err(errno(&self.path, "write"))?;
        if now.is_none_or(|(_, n)| (n.dev(), n.ino()) != (m.dev(), m.ino())) {
            return Err(AdoptError::Swapped(self.path.clone()));
        }
        self.sync_dir();
        Ok(())
    }

    /// Creates the file with `bytes` and `mode`; it must not exist (backups).
    pub fn create(&self, bytes: &[u8], mode: u32) -> Result<(), AdoptError> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &self.name, flags, Mode::from_raw_mode(0o600))
            .map_err(errno(&self.path, "create"))?;
        let mut file = File::from(fd);
        file.write_all(bytes).map_err(io(&self.path, "write"))?;
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(io(&self.path, "write"))?;
        file.sync_all().map_err(io(&self.path, "write"))
    }

    /// Removes the name (never what a link points to); absent is fine.
    pub fn remove(&self) -> Result<(), AdoptError> {
        match rustix::fs::unlinkat(&self.dir, &self.name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {
                self.sync_dir();
                Ok(())
            }
            Err(e) => Err(errno(&self.path, "remove")(e)),
        }
    }

    /// Unlinks the temporary file `tmp` only if it is still the one written through `file`.
    fn remove_if_ours(&self, tmp: &str, file: &File) {
        let Ok(ours) = file.metadata() else {
            return;
        };
        if let Ok(Some((_, m))) = peek(&self.dir, OsStr::new(tmp)) {
            if (m.dev(), m.ino()) == (ours.dev(), ours.ino()) {
                let _ = rustix::fs::unlinkat(&self.dir, tmp, AtFlags::empty());
            }
        }
    }

    fn sync_dir(&self) {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if let Ok(d) = rustix::fs::openat(&self.dir, ".", flags, Mode::empty()) {
            let _ = rustix::fs::fsync(d.as_fd());
        }
    }
}
