//! Backups, atomic writes and `--undo`.
//!
//! An adoption is a directory `<state>/mcp-supervisor/adopt/<UTC time>/` (mode 0700: the
//! backups hold the same secrets as the files) with a copy of every file before it was touched
//! and `manifest.json`: for each file its path, whether it existed, its backup, its mode, and
//! the sha256 of what adopt wrote. The manifest is written before the first file is touched,
//! so an interrupted adoption can be undone too.
//!
//! Owns: every write `adopt` makes. Writes are atomic (a temporary file in the same directory,
//! fsync, rename), keep the original file's mode, and go through a symlink to its target.

use super::AdoptError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One file `adopt` writes.
#[derive(Debug, Clone)]
pub struct Change {
    /// The path as the client knows it (absolute).
    pub path: PathBuf,
    /// Its content before (`None`: it did not exist).
    pub before: Option<Vec<u8>>,
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
}

/// Hex sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> AdoptError {
    let path = path.to_path_buf();
    move |source| AdoptError::Io {
        path,
        action,
        source,
    }
}

fn now() -> (String, String) {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let dir: String = t.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    (t, dir)
}

/// Saves the backups and the manifest of `changes` under `root` (the adoption directory's
/// parent); returns the new adoption directory.
pub fn save(root: &Path, changes: &[Change]) -> Result<PathBuf, AdoptError> {
    // The backups hold the clients' env values (secrets): the directories are the user's only.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(io(root, "create"))?;
    let (created, stamp) = now();
    let mut dir = root.join(&stamp);
    let mut n = 2;
    loop {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => {
                dir = root.join(format!("{stamp}-{n}"));
                n += 1;
            }
            Err(e) => return Err(io(&dir, "create")(e)),
        }
    }
    let mut files = Vec::new();
    for (i, c) in changes.iter().enumerate() {
        let (backup, mode) = match &c.before {
            Some(bytes) => {
                let name = format!(
                    "{i}-{}",
                    c.path
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default()
                );
                let mode = fs::metadata(&c.path)
                    .map_err(io(&c.path, "read"))?
                    .permissions()
                    .mode()
                    & 0o7777;
                write_new(&dir.join(&name), bytes, 0o600)?;
                (Some(name), Some(mode))
            }
            None => (None, None),
        };
        files.push(Record {
            path: c.path.clone(),
            existed: c.before.is_some(),
            backup,
            mode,
            sha256: sha256(&c.after),
            before_sha256: c.before.as_deref().map(sha256),
        });
    }
    let manifest = Manifest {
        version: 1,
        created,
        undone: None,
        files,
    };
    write_manifest(&dir, &manifest)?;
    Ok(dir)
}

fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), AdoptError> {
    let path = dir.join("manifest.json");
    let mut text = serde_json::to_string_pretty(m).map_err(|e| AdoptError::Io {
        path: path.clone(),
        action: "write",
        source: std::io::Error::other(e),
    })?;
    text.push('\n');
    write_atomic(&path, text.as_bytes(), Some(0o600))
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AdoptError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path, "write"))?;
    f.write_all(bytes).map_err(io(path, "write"))?;
    f.sync_all().map_err(io(path, "write"))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename. The file
/// keeps its mode (`mode` for a new file, 0600 if `None`); a symlink is written through.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<(), AdoptError> {
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path).map_err(io(path, "write"))?,
        _ => path.to_path_buf(),
    };
    let old = fs::metadata(&target).ok();
    let mode = match (mode, &old) {
        (Some(m), _) => m,
        (None, Some(m)) => m.permissions().mode() & 0o7777,
        (None, None) => 0o600,
    };
    let dir = target.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir).map_err(io(dir, "create"))?;
    let name = target
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.adopt-{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        write_new(&tmp, bytes, mode)?;
        // The umask may have narrowed the mode at creation.
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(io(&tmp, "write"))?;
        // Keep the owner (adopt run as root on a user's file); a no-op for the owner.
        if let Some(m) = &old {
            use std::os::unix::fs::MetadataExt;
            let _ = std::os::unix::fs::chown(&tmp, Some(m.uid()), Some(m.gid()));
        }
        fs::rename(&tmp, &target).map_err(io(&target, "write"))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Writes every change (after `save`): an existing file keeps its mode, a new one is 0600.
pub fn apply(changes: &[Change]) -> Result<(), AdoptError> {
    for c in changes {
        write_atomic(&c.path, &c.after, None)?;
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

/// The newest adoption under `root` not undone yet, with its manifest.
fn latest(root: &Path) -> Result<Option<(PathBuf, Manifest)>, AdoptError> {
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(root, "read")(e)),
    };
    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    // Names are UTC timestamps (`20260101T120000Z`, then `-2`...): newest last in this order.
    dirs.sort_by_key(|d| {
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let (stamp, n) = match name.split_once('-') {
            Some((s, n)) => (s.to_string(), n.parse::<u32>().unwrap_or(0)),
            None => (name.clone(), 0),
        };
        (stamp, n)
    });
    for dir in dirs.into_iter().rev() {
        let path = dir.join("manifest.json");
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let m: Manifest = serde_json::from_str(&text).map_err(|e| AdoptError::BadFile {
            path: path.clone(),
            line: Some(e.line()),
            message: format!("not an adopt manifest: {e}"),
        })?;
        if m.undone.is_none() {
            return Ok(Some((dir, m)));
        }
    }
    Ok(None)
}

/// Restores the newest adoption under `root`: each file byte for byte (with its mode), a file
/// adopt created removed. A file whose content is neither what adopt wrote nor what was there
/// before was changed since; then nothing is restored unless `force`. With `dry_run` only the
/// checks run. Marks the adoption undone.
pub fn undo(root: &Path, force: bool, dry_run: bool) -> Result<(PathBuf, Vec<Undone>), AdoptError> {
    let Some((dir, mut manifest)) = latest(root)? else {
        return Err(AdoptError::NothingToUndo(root.to_path_buf()));
    };
    // Every check (changed files, backups matching the manifest) before the first write.
    let mut plan = Vec::new();
    let mut changed = Vec::new();
    for r in &manifest.files {
        let now = match fs::read(&r.path) {
            Ok(b) => Some(sha256(&b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&r.path, "read")(e)),
        };
        if now == r.before_sha256 {
            plan.push((r, None, Undone::Unchanged(r.path.clone())));
        } else if now.as_deref() == Some(r.sha256.as_str()) || force {
            match (&r.backup, r.existed) {
                (Some(name), true) => {
                    let from = dir.join(name);
                    let bytes = fs::read(&from).map_err(io(&from, "read"))?;
                    if Some(sha256(&bytes)) != r.before_sha256 {
                        return Err(AdoptError::BadFile {
                            path: from,
                            line: None,
                            message: "the backup does not match its manifest".to_string(),
                        });
                    }
                    plan.push((r, Some(bytes), Undone::Restored(r.path.clone())));
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
                (Undone::Restored(_), Some(bytes)) => write_atomic(&r.path, &bytes, r.mode)?,
                (Undone::Removed(_), _) => match fs::remove_file(&r.path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&r.path, "remove")(e)),
                },
                _ => {}
            }
        }
        done.push(what);
    }
    if !dry_run {
        manifest.undone = Some(now().0);
        write_manifest(&dir, &manifest)?;
    }
    Ok((dir, done))
}
