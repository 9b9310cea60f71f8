//! Backups, atomic writes and `--undo`.
//!
//! An adoption is a directory `<state>/mcp-supervisor/adopt/<UTC time>/` (mode 0700: the
//! backups hold the same secrets as the files) with a copy of every file before it was touched
//! and `manifest.json`: for each file its path, whether it existed, its backup, its mode and
//! owner, and the sha256 of what adopt wrote. The manifest is written before the first file is
//! touched, so an interrupted adoption can be undone too.
//!
//! `<state>` is the running user's own (docs/book/src/guides/share-servers.md, "Backups and
//! undo"), never under `--home`: as root, root's. `--undo` trusts an adoption only when the
//! state directory, the adoption directory, the manifest and the backups are the running
//! user's and writable by nobody else (issue 26 §3: a manifest the user forged named a
//! root-only file and "restored" her text into it); anything else is refused
//! ([`AdoptError::Untrusted`]) before the first write.
//!
//! Owns: every write `adopt` makes, through `safe.rs`: atomic (a temporary file created
//! exclusively in the same directory, mode and owner set on its descriptor, fsync, rename),
//! keeping the original file's mode and owner, through links only of root or the running user.

use super::safe::{Dir, Meta, Place, Trust};
use super::AdoptError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Mode of every directory of the state and of each adoption.
const PRIVATE_DIR: u32 = 0o700;
/// Mode of a directory made on the way to a supervisor config that did not exist.
const CONFIG_DIR: u32 = 0o755;

/// One file `adopt` writes.
#[derive(Debug, Clone)]
pub struct Change {
    /// The path as the client knows it (absolute).
    pub path: PathBuf,
    /// Who may own it and the directories on its way.
    pub trust: Trust,
    /// Its content before (`None`: it did not exist).
    pub before: Option<Vec<u8>>,
    /// Its mode and owner just before writing (`None`: it did not exist); kept by the write.
    pub meta: Option<Meta>,
    /// Its content after.
    pub after: Vec<u8>,
}

/// `manifest.json` of one adoption (a stable shape: `--undo` of an older binary's adoption
/// reads it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Shape version, 1.
    pub version: u32,
    /// When adopt ran (RFC 3339, UTC).
    pub created: String,
    /// When it was undone, if it was.
    pub undone: Option<String>,
    /// The files, in the order they were written.
    pub files: Vec<Record>,
}

/// One file of an adoption.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The path written.
    pub path: PathBuf,
    /// Whether it existed before.
    pub existed: bool,
    /// The backup's file name in the adoption directory (when it existed).
    pub backup: Option<String>,
    /// Its permission bits before (when it existed).
    pub mode: Option<u32>,
    /// sha256 (hex) of what adopt wrote.
    pub sha256: String,
    /// sha256 (hex) of what was there before (when it existed).
    pub before_sha256: Option<String>,
    /// Its owner and group before (when it existed; absent in older manifests).
    #[serde(default)]
    pub uid: Option<u32>,
    /// See `uid`.
    #[serde(default)]
    pub gid: Option<u32>,
    /// The uid whose files these are (the home's or project's owner), trusted on the way
    /// back as on the way in (absent in older manifests: the running user).
    #[serde(default)]
    pub owner: Option<u32>,
}

/// Hex sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now() -> (String, String) {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let dir: String = t.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    (t, dir)
}

/// A directory of the state (the state root or an adoption) is the running user's own: the
/// walk allows root's directories on the way, not here.
fn own(d: Dir) -> Result<Dir, AdoptError> {
    let me = super::safe::me();
    if d.meta.uid != me {
        return Err(AdoptError::Untrusted {
            path: d.path.clone(),
            why: format!(
                "is owned by uid {}, not by you (uid {me}); adopt keeps its backups only in a directory of your own",
                d.meta.uid
            ),
        });
    }
    Ok(d)
}

/// Saves the backups and the manifest of `changes` under `root` (the adoption directory's
/// parent, created 0700 with what is missing above it); returns the new adoption directory.
pub fn save(root: &Path, changes: &[Change]) -> Result<PathBuf, AdoptError> {
    let store = Dir::open(root, Trust::Private, Some(PRIVATE_DIR))?.ok_or_else(|| {
        AdoptError::Internal {
            path: root.to_path_buf(),
            message: "the state directory was not created".to_string(),
        }
    })?;
    let store = own(store)?;
    let (created, stamp) = now();
    let mut name = stamp.clone();
    let mut n = 2;
    let dir = loop {
        match store.subdir(&name, Some(PRIVATE_DIR)) {
            Ok(Some(d)) => break own(d)?,
            Err(AdoptError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists && n < 100 =>
            {
                name = format!("{stamp}-{n}");
                n += 1;
            }
            Err(e) => return Err(e),
            Ok(None) => {
                return Err(AdoptError::Internal {
                    path: store.path.join(&name),
                    message: "the adoption directory was not created".to_string(),
                })
            }
        }
    };
    let mut files = Vec::new();
    for (i, c) in changes.iter().enumerate() {
        let backup = match &c.before {
            Some(bytes) => {
                let name = format!(
                    "{i}-{}",
                    c.path
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default()
                );
                dir.entry(&name)?.create(bytes, 0o600)?;
                Some(name)
            }
            None => None,
        };
        files.push(Record {
            path: c.path.clone(),
            existed: c.before.is_some(),
            backup,
            mode: c.meta.map(|m| m.mode),
            sha256: sha256(&c.after),
            before_sha256: c.before.as_deref().map(sha256),
            uid: c.meta.map(|m| m.uid),
            gid: c.meta.map(|m| m.gid),
            owner: match c.trust {
                Trust::Files { owner } => Some(owner),
                Trust::Private => None,
            },
        });
    }
    let manifest = Manifest {
        version: 1,
        created,
        undone: None,
        files,
    };
    write_manifest(&dir, &manifest)?;
    Ok(dir.path)
}

fn write_manifest(dir: &Dir, m: &Manifest) -> Result<(), AdoptError> {
    let path = dir.path.join("manifest.json");
    let mut text = serde_json::to_string_pretty(m).map_err(|e| AdoptError::Io {
        path,
        action: "write",
        source: std::io::Error::other(e),
    })?;
    text.push('\n');
    dir.entry("manifest.json")?
        .replace(text.as_bytes(), 0o600, None)
}

/// Writes `bytes` to `path` under `trust` atomically (see `safe::Place::replace`), creating
/// missing directories on the way (0755). The file keeps `meta`'s mode and owner; a new one
/// is 0600 and the running user's.
pub fn write_atomic(
    path: &Path,
    bytes: &[u8],
    trust: Trust,
    meta: Option<Meta>,
) -> Result<(), AdoptError> {
    let place =
        Place::find(path, trust, Some(CONFIG_DIR))?.ok_or_else(|| AdoptError::Internal {
            path: path.to_path_buf(),
            message: "its directory was not created".to_string(),
        })?;
    place.replace(
        bytes,
        meta.map_or(0o600, |m| m.mode),
        meta.map(|m| (m.uid, m.gid)),
    )
}

/// Writes every change (after `save`): an existing file keeps its mode and owner, a new one is
/// 0600.
pub fn apply(changes: &[Change]) -> Result<(), AdoptError> {
    for c in changes {
        write_atomic(&c.path, &c.after, c.trust, c.meta)?;
    }
    Ok(())
}

/// What `--undo` did (or would do) to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undone {
    /// Put back as it was.
    Restored(PathBuf),
    /// Removed: adopt had created it.
    Removed(PathBuf),
    /// Already as it was before adopt (an interrupted adoption, or undone by hand).
    Unchanged(PathBuf),
}

/// `why` of a refusal by `--undo`, with what it trusts.
fn for_undo(e: AdoptError) -> AdoptError {
    match e {
        AdoptError::Untrusted { path, why } => AdoptError::Untrusted {
            path,
            why: format!(
                "{why} (`--undo` trusts only the manifests and backups adopt wrote itself: yours, in your own state directory, writable by nobody else)"
            ),
        },
        other => other,
    }
}

/// The newest adoption under `root` not undone yet, with its manifest. Every directory and
/// manifest looked at is checked (see the module doc); the first one not trusted stops it.
fn latest(root: &Path) -> Result<Option<(Dir, Manifest)>, AdoptError> {
    let Some(store) = Dir::open(root, Trust::Private, None)? else {
        return Ok(None);
    };
    let store = own(store)?;
    let mut names = store.names()?;
    // Names are UTC timestamps (`20260101T120000Z`, then `-2`...): newest last in this order.
    names.sort_by_key(|name| {
        let (stamp, n) = match name.split_once('-') {
            Some((s, n)) => (s.to_string(), n.parse::<u32>().unwrap_or(0)),
            None => (name.clone(), 0),
        };
        (stamp, n)
    });
    for name in names.into_iter().rev() {
        let Some(dir) = store.subdir(&name, None)? else {
            continue;
        };
        let dir = own(dir)?;
        let manifest = dir.entry("manifest.json")?;
        let Some(read) = manifest.read()? else {
            continue;
        };
        let m: Manifest = serde_json::from_slice(&read.bytes).map_err(|e| AdoptError::BadFile {
            path: manifest.path.clone(),
            line: Some(e.line()),
            message: format!("not an adopt manifest: {e}"),
        })?;
        if m.undone.is_none() {
            return Ok(Some((dir, m)));
        }
    }
    Ok(None)
}

/// The place of a file of an adoption, trusted as when adopt wrote it.
fn place_of(r: &Record, create: bool) -> Result<Option<Place>, AdoptError> {
    let owner = r.owner.unwrap_or_else(super::safe::me);
    Place::find(
        &r.path,
        Trust::Files { owner },
        create.then_some(CONFIG_DIR),
    )
}

/// Restores the newest adoption under `root`: each file byte for byte (with its mode and
/// owner), a file adopt created removed. A file whose content is neither what adopt wrote nor
/// what was there before was changed since; then nothing is restored unless `force`. With
/// `dry_run` only the checks run. Marks the adoption undone.
pub fn undo(root: &Path, force: bool, dry_run: bool) -> Result<(PathBuf, Vec<Undone>), AdoptError> {
    undo_checked(root, force, dry_run).map_err(for_undo)
}

fn undo_checked(
    root: &Path,
    force: bool,
    dry_run: bool,
) -> Result<(PathBuf, Vec<Undone>), AdoptError> {
    let Some((dir, mut manifest)) = latest(root)? else {
        return Err(AdoptError::NothingToUndo(root.to_path_buf()));
    };
    // Every check (changed files, backups matching the manifest) before the first write.
    let mut plan = Vec::new();
    let mut changed = Vec::new();
    for r in &manifest.files {
        let found = match place_of(r, false)? {
            Some(p) => p.read()?,
            None => None,
        };
        let now = found.as_ref().map(|c| sha256(&c.bytes));
        // Mode and owner to restore: the recorded ones; an older manifest has no owner, and
        // then the file keeps the one it has.
        let current = found.map(|c| c.meta);
        let meta = Meta {
            mode: r.mode.or(current.map(|m| m.mode)).unwrap_or(0o600),
            uid: r
                .uid
                .or(current.map(|m| m.uid))
                .unwrap_or_else(super::safe::me),
            gid: r
                .gid
                .or(current.map(|m| m.gid))
                .unwrap_or_else(|| nix::unistd::getegid().as_raw()),
        };
        if now == r.before_sha256 {
            plan.push((r, None, Undone::Unchanged(r.path.clone())));
        } else if now.as_deref() == Some(r.sha256.as_str()) || force {
            match (&r.backup, r.existed) {
                (Some(name), true) => {
                    let from = dir.entry(name)?;
                    let bytes = from.read()?.map(|c| c.bytes);
                    if bytes.as_deref().map(sha256) != r.before_sha256 {
                        return Err(AdoptError::BadFile {
                            path: from.path.clone(),
                            line: None,
                            message: "the backup does not match its manifest".to_string(),
                        });
                    }
                    plan.push((
                        r,
                        bytes.map(|b| (b, meta)),
                        Undone::Restored(r.path.clone()),
                    ));
                }
                _ => plan.push((r, None, Undone::Removed(r.path.clone()))),
            }
        } else {
            changed.push(r.path.clone());
        }
    }
    if !changed.is_empty() {
        return Err(AdoptError::Changed(changed));
    }
    let mut done = Vec::new();
    for (r, bytes, what) in plan {
        if !dry_run {
            match (&what, bytes) {
                (Undone::Restored(_), Some((bytes, meta))) => {
                    let owner = r.owner.unwrap_or_else(super::safe::me);
                    write_atomic(&r.path, &bytes, Trust::Files { owner }, Some(meta))?;
                }
                (Undone::Removed(_), _) => {
                    if let Some(p) = place_of(r, false)? {
                        p.remove()?;
                    }
                }
                _ => {}
            }
        }
        done.push(what);
    }
    if !dry_run {
        manifest.undone = Some(now().0);
        write_manifest(&dir, &manifest)?;
    }
    Ok((dir.path, done))
}
