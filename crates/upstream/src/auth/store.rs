//! The sign-in store (issue 30 §3): one file per url server, `<token_dir>/NAME.json`, mode
//! 0600, owned by the supervisor's user, in a directory that passes `token_dir`'s checks
//! (owner, no group or other write, no planted link; `base::safepath::prepare_token_dir`).
//!
//! A file is read with `O_NOFOLLOW` and used only when its owner is the supervisor's user and
//! nobody else may read it; it is written whole to a temporary file (`O_EXCL`, 0600) and
//! renamed over, so a crash leaves the old sign-in or the new one. Nothing here logs a
//! token: [`Record`]'s `Debug` shows only which fields are present.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest store file read, in bytes.
const MAX_FILE: u64 = 1 << 20;

/// What one url server's sign-in keeps.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    /// The MCP endpoint this sign-in is for: a record for another URL is never used (tokens go
    /// only to the resource they were issued for).
    pub url: String,
    /// The `resource` parameter the tokens were asked for (RFC 8707).
    pub resource: String,
    /// The authorization server's issuer.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// The client's id there.
    pub client_id: String,
    /// The client's secret, when dynamic registration gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How the client authenticates at the token endpoint: `none`, `client_secret_basic`,
    /// `client_secret_post`, `private_key_jwt`.
    pub auth_method: String,
    /// The access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// The refresh token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The access token's lifetime as issued, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_s: Option<u64>,
    /// The scopes granted (or asked for, when the server did not say), space-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// When the sign-in was made, Unix seconds.
    #[serde(default)]
    pub signed_in_at: u64,
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("url", &support::config::shown_url(&self.url))
            .field("issuer", &self.issuer)
            .field("auth_method", &self.auth_method)
            .field("access_token", &self.access_token.as_ref().map(|_| "<set>"))
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<set>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish()
    }
}

/// Where one server's record lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    dir: PathBuf,
    name: String,
}

impl Store {
    /// The store of server `name` under `dir` (`token_dir`).
    pub fn new(dir: &Path, name: &str) -> Store {
        Store {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }
    }

    /// `<token_dir>/NAME.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.name))
    }

    /// The record, `Ok(None)` when there is none. Errors: the directory or the file fails
    /// its checks (named with the fix), or the file is not a record.
    pub fn load(&self) -> Result<Option<Record>, String> {
        // No directory yet: nobody signed in (and nothing is created until someone does).
        if std::fs::symlink_metadata(&self.dir)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            return Ok(None);
        }
        base::safepath::prepare_token_dir(&self.dir).map_err(|e| format!("{e:#}"))?;
        let path = self.path();
        let mut file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
        };
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
        let me = nix::unistd::geteuid().as_raw();
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        if meta.uid() != me {
            return Err(format!(
                "{} is owned by uid {}, not by the supervisor's uid {me}; not used (remove it and sign in again)",
                path.display(),
                meta.uid()
            ));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{} can be read by its group or others (mode {:04o}); not used (remove it and sign in again)",
                path.display(),
                meta.mode() & 0o7777
            ));
        }
        let mut text = String::new();
        (&mut file)
            .take(MAX_FILE)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is not a sign-in record: {e}", path.display()))
    }

    /// Writes the record (0600, whole, renamed over the old one).
    pub fn save(&self, record: &Record) -> Result<(), String> {
        base::safepath::prepare_token_dir(&self.dir).map_err(|e| format!("{e:#}"))?;
        let path = self.path();
        let tmp = self.dir.join(format!(
            ".{}.json.{}.{}",
            self.name,
            std::process::id(),
            rand::random::<u32>()
        ));
        let text = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let written = f.write_all(&text).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("cannot write {}: {e}", tmp.display()));
        }
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot replace {}: {e}", path.display())
        })
    }

    /// Forgets the sign-in. Not an error when there was none.
    pub fn remove(&self) -> Result<(), String> {
        match std::fs::remove_file(self.path()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("cannot remove {}: {e}", self.path().display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Record, Store};
    use std::os::unix::fs::PermissionsExt;

    fn record() -> Record {
        Record {
            url: "https://h.example/mcp?k=v".into(),
            access_token: Some("at-SECRET".into()),
            refresh_token: Some("rt-SECRET".into()),
            client_secret: Some("cs-SECRET".into()),
            ..Record::default()
        }
    }

    #[test]
    fn a_record_is_written_0600_read_back_and_never_shown() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("tokens");
        let s = Store::new(&dir, "hosted");
        assert_eq!(s.load().unwrap(), None);
        s.save(&record()).unwrap();
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(s.load().unwrap(), Some(record()));
        let shown = format!("{:?}", record());
        assert!(
            !shown.contains("SECRET") && !shown.contains("k=v"),
            "{shown}"
        );
        s.remove().unwrap();
        assert_eq!(s.load().unwrap(), None);
        s.remove().unwrap();
    }

    #[test]
    fn a_record_others_can_read_or_a_planted_link_is_not_used() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path(), "hosted");
        s.save(&record()).unwrap();
        std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(s
            .load()
            .unwrap_err()
            .contains("can be read by its group or others"));
        std::fs::remove_file(s.path()).unwrap();
        let elsewhere = d.path().join("elsewhere.json");
        std::fs::write(&elsewhere, "{}").unwrap();
        std::os::unix::fs::symlink(&elsewhere, s.path()).unwrap();
        assert!(s.load().is_err());
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(s.load().unwrap_err().contains("token_dir"));
    }
}
