//! State files the daemon keeps under `state_dir` (issue 18 §1, issue 32 §2): written through
//! a temporary file and a rename (a crash leaves the old text or the new one, never half of
//! one), read back only when they are ours (never through a link, owned by our euid, writable
//! by nobody else, bounded). What each file holds is its owner's concern
//! (`actor::record`, `front::http::saved`).

use std::path::{Path, PathBuf};
use tokio::sync::watch;
use tracing::warn;

/// Writes one state file in the background, the latest text wins (a watch channel: a burst
/// of changes costs one write).
#[derive(Debug)]
pub struct Writer {
    tx: watch::Sender<Option<Vec<u8>>>,
}

impl Writer {
    /// A writer for `path`, on the current tokio runtime; `None` outside one (the
    /// simulation). `lost` says, in the warning of a failed write, what is lost without it.
    pub fn start(path: PathBuf, lost: &'static str) -> Option<Self> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let (tx, mut rx) = watch::channel::<Option<Vec<u8>>>(None);
        rt.spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(bytes) = rx.borrow_and_update().clone() else {
                    continue;
                };
                let path_shown = path.clone();
                let path = path.clone();
                let written = tokio::task::spawn_blocking(move || write_atomic(&path, &bytes))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))
                    .and_then(|r| r);
                if let Err(e) = written {
                    warn!(path = %path_shown.display(), error = %e, "cannot write a state file ({lost})");
                }
            }
        });
        Some(Writer { tx })
    }

    /// Queues `bytes` to be written (replacing any not written yet).
    pub fn save(&self, bytes: Vec<u8>) {
        let _ = self.tx.send(Some(bytes));
    }
}

/// Reads `path` if it is a file we could have written: opened without following a link, a
/// regular file owned by our euid, writable by nobody else, at most `max` bytes (issue 26
/// §5). Errors say which check failed; a missing file is `NotFound`.
pub fn read_own(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::other("it is a symbolic link"),
            _ => e,
        })?;
    let m = f.metadata()?;
    let me = nix::unistd::geteuid().as_raw();
    if !m.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    if m.uid() != me {
        return Err(std::io::Error::other(format!(
            "it is owned by uid {}, not by the supervisor's uid {me}",
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "its group or others may write it (mode {:04o})",
            m.mode() & 0o7777
        )));
    }
    if m.len() > max {
        return Err(std::io::Error::other(format!(
            "it is {} bytes, over {max}",
            m.len()
        )));
    }
    let mut text = Vec::new();
    f.take(max).read_to_end(&mut text)?;
    Ok(text)
}

/// Writes `bytes` to `path` through a temporary file in the same directory, then renames it
/// over `path`. The temporary file has a random name and is created exclusively without
/// following a link (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), so nothing planted at a guessed
/// name can redirect the write (issue 26 §5); the rename replaces a link at `path` itself,
/// never its target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("json.tmp{:016x}", rand::random::<u64>()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = f
        .write_all(bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
