//! The hand-over record of an upgrade in place (issue 32 §1): what a running daemon gives the
//! image it executes in its own process (same pid), and how it is written, validated, read and
//! executed.
//!
//! Shape (JSON, in a memfd whose number is in [`ENV`]; `fd` values are descriptors open
//! without `FD_CLOEXEC` across the `execve`):
//! `{"version":1,"upgrades":N,"binary":"/usr/bin/mcp-supervisor","argv":[…],
//!   "config":{"path":…,"text":…},"old_image":FD,"lock":FD,
//!   "notify_socket":…|null,"watchdog_usec":…|null,"fd_store":N|null,"refused":null|"why",
//!   "listeners":[{"name":"control"|NAME|"http:NAME"|"http-tcp","fd":FD}],
//!   "servers":[{"name":…,"generation":G,"next_id":N,"handshake":{record.rs's shape},
//!     "log_level":L|null,"subscriptions":[URI…],
//!     "child":{"pid":P,"stdin":FD,"stdout":FD,"stderr":FD,"marker":…,"since":T,
//!              "pending":"base64","tail":"…"}|null,
//!     "remote":{"session_id":…|null,"protocol_version":…|null,"initialize":{…}|null,
//!               "last_event_id":…|null,"listening":B,"age_s":S}|null,"restarts":N,
//!     "last_exit":{"code":…,"signal":…,"reason":"exited(1)","at":RFC3339}|null,
//!     "rest":{"state":"stopped"|"failed"|"backoff"|"auth_required","retry_in_ms":…}|null,
//!     "clients":[{"fd":FD,"uid":U,"gid":G,"pid":P|null,"pending":"base64",
//!                 "replay":["a JSON-RPC line",…],"listens":["a listen request",…]}]}],
//!   "http":[{"fd":FD,"read_ahead":"base64","server":NAME|null}],
//!   "endpoints":[{"name":…,"clients":[as a server's]}]}`
//!
//! The configuration travels as text: the new image runs what the old one ran (a changed file
//! is applied by a later `reload`), and an image run again after a refusal does not depend on
//! the file either. Every descriptor is checked on read for its kind (a socket, a pipe, the
//! lock's regular file); a record of another version, or one naming a descriptor that is not
//! what it says, is refused whole.

use base::fds::{close_on_exec, keep_across_exec};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The environment variable naming the record's descriptor in the new image.
pub const ENV: &str = "MCP_SUPERVISOR_HANDOVER";

/// The record's format version; another is refused.
pub const VERSION: u32 = 1;

/// The largest record read, in bytes (a record names descriptors and small texts).
pub const MAX_RECORD: usize = 64 << 20;

/// Everything the new image adopts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// [`VERSION`].
    pub version: u32,
    /// Upgrades this process has been through (1 after the first).
    pub upgrades: u64,
    /// The path the daemon was started from (re-resolved and checked before each upgrade).
    pub binary: PathBuf,
    /// The daemon's argv as it was started.
    pub argv: Vec<String>,
    /// The configuration the daemon runs.
    pub config: ConfigText,
    /// The image that wrote the record, open read-only (run again on a refusal).
    pub old_image: RawFd,
    /// The `socket_dir` lock (`.lock`, held by `flock` on this open file).
    pub lock: RawFd,
    /// systemd's `NOTIFY_SOCKET`, when the daemon had one.
    pub notify_socket: Option<String>,
    /// systemd's `WATCHDOG_USEC`, when it was meant for the daemon.
    pub watchdog_usec: Option<u64>,
    /// systemd's `FDSTORE` (the unit's file descriptor store size), when above 0.
    #[serde(default)]
    pub fd_store: Option<usize>,
    /// Set when the new image refused the record and this image was run again: why.
    pub refused: Option<String>,
    /// The run token of every instance marker (`reaper::token`), kept so the next run's
    /// cleanup of a crash still finds the inherited children.
    pub run_token: String,
    /// Instances started so far (`reaper::instances`), so markers are never reused.
    pub instances: u64,
    /// Listening sockets by name.
    pub listeners: Vec<Listener>,
    /// The stdio servers.
    pub servers: Vec<ServerRecord>,
    /// HTTP connections between requests.
    #[serde(default)]
    pub http: Vec<HttpConn>,
    /// The endpoints' socket clients (none from an image that predates the field).
    #[serde(default)]
    pub endpoints: Vec<EndpointRecord>,
}

/// An endpoint's connected socket clients (issue 31): each rebuilt in the next image by its
/// replay lines, as a server's are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// The endpoint's name.
    pub name: String,
    /// Its clients.
    pub clients: Vec<ClientRecord>,
}

/// An HTTP connection between two requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HttpConn {
    /// Its socket.
    pub fd: RawFd,
    /// Bytes of the next request already read, base64.
    pub read_ahead: String,
    /// The server whose `NAME.http.sock` accepted it; `None` for the TCP listener.
    pub server: Option<String>,
}

/// The configuration file's path and the text the daemon parsed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigText {
    /// Where it was read from.
    pub path: PathBuf,
    /// What was read.
    pub text: String,
}

/// One listening socket: `control`, a server's or endpoint's `NAME`, `http:NAME` for
/// `NAME.http.sock`, `http-tcp` for the HTTP endpoint's TCP side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listener {
    /// Its name.
    pub name: String,
    /// Its descriptor.
    pub fd: RawFd,
    /// Whether systemd passed it (never unlinked then).
    pub activated: bool,
}

/// One server and what runs for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerRecord {
    /// Its configured name.
    pub name: String,
    /// The running instance's generation.
    pub generation: u64,
    /// The next child-side request id (ids are never reused with one child).
    pub next_id: u64,
    /// The handshake (or discovery) the child answered, in `actor::record`'s shape.
    pub handshake: Option<serde_json::Value>,
    /// The level the child's logging was set to.
    pub log_level: Option<usize>,
    /// The running child, when one runs.
    pub child: Option<ChildRecord>,
    /// A url server's open session (`remote::SessionState`), when one was handed over. An
    /// image that predates the field ignores it (and opens a session of its own).
    #[serde(default, deserialize_with = "lenient")]
    pub remote: Option<upstream::remote::SessionState>,
    /// Restarts counted so far (`status`'s `restarts` goes on from it; 0 from an image that
    /// predates the field).
    #[serde(default)]
    pub restarts: u64,
    /// The last exit `status` shows (none from an image that predates the field).
    #[serde(default, deserialize_with = "lenient")]
    pub last_exit: Option<actor::server::LastExit>,
    /// How the server rests when no child runs (`actor::server::Rest`: stopped, failed,
    /// backoff, auth_required), so the next image does not start it.
    #[serde(default, deserialize_with = "lenient")]
    pub rest: Option<actor::server::Rest>,
    /// The connected socket clients.
    pub clients: Vec<ClientRecord>,
}

/// A running child's process and pipes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildRecord {
    /// Its pid (= its process group).
    pub pid: u32,
    /// Our ends of its pipes.
    pub stdin: RawFd,
    /// Our end of its stdout.
    pub stdout: RawFd,
    /// Our end of its stderr.
    pub stderr: RawFd,
    /// Its instance marker (`reaper::MARKER_VAR`).
    pub marker: String,
    /// Its start time in clock ticks since boot (0: unknown).
    pub since: u64,
    /// Bytes of stdout read and not yet a whole line, base64.
    pub pending: String,
    /// Its stderr tail.
    pub tail: String,
}

/// A connected socket client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientRecord {
    /// The connection.
    pub fd: RawFd,
    /// Its peer credentials.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Its pid, when known.
    pub pid: Option<i32>,
    /// Bytes read from it and not yet a whole line, base64.
    pub pending: String,
    /// The lines that rebuild its state in the new actor (its handshake, level,
    /// subscriptions), each a request with an id of [`actor::park::REPLAY_ID_PREFIX`] or a notification;
    /// last, its listen streams not acknowledged yet (its own ids).
    pub replay: Vec<String>,
    /// Its acknowledged `subscriptions/listen` requests, under its own ids, replayed after
    /// `replay`; the first acknowledgement of each is not shown. An image that predates the
    /// field ignores it (the streams are then lost, as they were).
    #[serde(default)]
    pub listens: Vec<String>,
}

/// An optional field that is dropped (`None`), not refused, when this build cannot read it:
/// a record written by a newer image (a downgrade) may hold what this one does not know,
/// and losing a last exit or a remote session (opened afresh) beats refusing the record.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    // Read as raw text (not a `Value`): a field that holds raw JSON itself (the remote
    // session's `initialize`) keeps its text, key order included.
    let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
    Ok(serde_json::from_str(raw.get()).ok())
}

/// Base64 of `bytes` (the record's byte fields).
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of a base64 field; an invalid one is an error naming `what`.
pub fn unb64(text: &str, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("{what}: not base64: {e}"))
}

/// What a descriptor must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Socket,
    Pipe,
    File,
}

fn check_fd(fd: RawFd, kind: Kind, what: &str) -> Result<(), String> {
    if fd < 3 {
        return Err(format!("{what}: descriptor {fd} is not one we hand over"));
    }
    // SAFETY: only fstat'ed; the descriptor is not closed or owned here.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let st = rustix::fs::fstat(borrowed).map_err(|e| format!("{what}: descriptor {fd}: {e}"))?;
    let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let ok = match kind {
        Kind::Socket => ft == rustix::fs::FileType::Socket,
        Kind::Pipe => ft == rustix::fs::FileType::Fifo,
        Kind::File => ft == rustix::fs::FileType::RegularFile,
    };
    if !ok {
        return Err(format!(
            "{what}: descriptor {fd} is a {ft:?}, not a {kind:?}"
        ));
    }
    Ok(())
}

impl Record {
    /// Every descriptor the record names, with what it must be.
    fn fds(&self) -> Vec<(RawFd, Kind, String)> {
        let mut v = vec![
            (self.old_image, Kind::File, "the old image".to_string()),
            (self.lock, Kind::File, "the lock".to_string()),
        ];
        for l in &self.listeners {
            v.push((l.fd, Kind::Socket, format!("listener `{}`", l.name)));
        }
        for s in &self.servers {
            if let Some(c) = &s.child {
                v.push((c.stdin, Kind::Pipe, format!("`{}` stdin", s.name)));
                v.push((c.stdout, Kind::Pipe, format!("`{}` stdout", s.name)));
                v.push((c.stderr, Kind::Pipe, format!("`{}` stderr", s.name)));
            }
            for c in &s.clients {
                v.push((c.fd, Kind::Socket, format!("a client of `{}`", s.name)));
            }
        }
        for c in &self.http {
            v.push((c.fd, Kind::Socket, "an HTTP connection".to_string()));
        }
        for e in &self.endpoints {
            for c in &e.clients {
                v.push((
                    c.fd,
                    Kind::Socket,
                    format!("a client of endpoint `{}`", e.name),
                ));
            }
        }
        v
    }

    /// The descriptors to keep open across the `execve`.
    pub fn raw_fds(&self) -> Vec<RawFd> {
        self.fds().into_iter().map(|(fd, _, _)| fd).collect()
    }

    /// Checks the version and that every descriptor is open, distinct and of its kind.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != VERSION {
            return Err(format!(
                "a version {} hand-over record (this build reads version {VERSION})",
                self.version
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (fd, kind, what) in self.fds() {
            if !seen.insert(fd) {
                return Err(format!("{what}: descriptor {fd} is named twice"));
            }
            check_fd(fd, kind, &what)?;
        }
        for s in &self.servers {
            if let Some(c) = &s.child {
                unb64(&c.pending, "a child's pending bytes")?;
                if c.pid < 2 {
                    return Err(format!("`{}`: pid {} is not a child", s.name, c.pid));
                }
            }
            for c in &s.clients {
                unb64(&c.pending, "a client's pending bytes")?;
            }
        }
        for c in &self.http {
            unb64(&c.read_ahead, "an HTTP connection's read-ahead")?;
        }
        for c in self.endpoints.iter().flat_map(|e| &e.clients) {
            unb64(&c.pending, "a client's pending bytes")?;
        }
        Ok(())
    }

    /// The record as JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A record from JSON, validated ([`Record::validate`]).
    pub fn decode(bytes: &[u8]) -> Result<Record, String> {
        let r: Record =
            serde_json::from_slice(bytes).map_err(|e| format!("not a hand-over record: {e}"))?;
        r.validate()?;
        if r.run_token.len() != 16 || !r.run_token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("the run token is not 16 hex digits".into());
        }
        Ok(r)
    }

    /// Takes ownership of a descriptor the record names (once: the caller forgets it after).
    ///
    /// # Safety
    /// `fd` must be one of [`Record::raw_fds`], validated, and not owned elsewhere.
    pub unsafe fn own(fd: RawFd) -> OwnedFd {
        // SAFETY: the caller's promise.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }
}

/// Reads the record named by [`ENV`], if any, and removes the variable. Call it before any
/// thread exists (`std::env::remove_var`). `Some(Err)` says why a record given is unusable.
pub fn take_from_env() -> Option<Result<Record, String>> {
    let value = std::env::var_os(ENV)?;
    // SAFETY: called from `main` before the runtime or any other thread starts.
    unsafe { std::env::remove_var(ENV) };
    Some(read_record(&value))
}

fn read_record(value: &std::ffi::OsStr) -> Result<Record, String> {
    let fd: RawFd = value
        .to_str()
        .and_then(|v| v.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| format!("{ENV} is not a descriptor number"))?;
    check_fd(fd, Kind::File, "the record")?;
    // SAFETY: the variable names a descriptor our previous image left open for us; it is
    // owned (and closed) here.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = std::fs::File::from(owned);
    let meta = file.metadata().map_err(|e| format!("the record: {e}"))?;
    if meta.len() > MAX_RECORD as u64 {
        return Err(format!("the record is over {MAX_RECORD} bytes"));
    }
    let mut bytes = Vec::new();
    use std::io::{Read, Seek};
    let mut file = file;
    file.seek(std::io::SeekFrom::Start(0))
        .and_then(|_| (&mut file).take(MAX_RECORD as u64).read_to_end(&mut bytes))
        .map_err(|e| format!("reading the record: {e}"))?;
    Record::decode(&bytes)
}

/// The binary an upgrade runs (issue 32 §1, issue 47 §1), opened once and checked on that
/// descriptor; the preflight and the hand-over both execute the descriptor
/// (`execveat(fd, "", AT_EMPTY_PATH)`), never the path again, so nothing swapped on disk after
/// the checks can run in its place.
#[derive(Debug)]
pub struct Binary {
    fd: OwnedFd,
    /// The real path it was opened at (for messages).
    path: PathBuf,
    /// Whether it begins with `#!` (a script: its interpreter opens `/dev/fd/N`, so the
    /// descriptor must stay open across the `execveat`).
    script: bool,
}

impl Binary {
    /// The real path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Whether it is a `#!` script rather than an executable image.
    pub fn script(&self) -> bool {
        self.script
    }
}

/// Opens and checks the binary an upgrade runs, started as `path`:
///
/// - every directory above `path` as given, and above the real path it resolves to (links
///   followed), is owned by root or by us and writable by nobody else unless sticky, and no
///   link on the way belongs to another user ([`base::safepath`], the rule of `socket_dir`);
///   a link at `path` itself belongs to root or to us;
/// - the real path is opened `O_RDONLY | O_NOFOLLOW | O_CLOEXEC`, and what was opened is a
///   regular file, executable, owned by root or by us and writable by nobody else (`fstat`
///   on the descriptor, not the path).
///
/// Errors say which rule failed, naming the path and the owner.
pub fn resolve_binary(path: &Path) -> Result<Binary, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let me = rustix::process::geteuid().as_raw();
    let ancestors = |p: &Path| {
        match base::safepath::untrusted_ancestor(p, me) {
        None => Ok(()),
        Some(why) => Err(format!(
            "the binary {}: {why}; install it under directories only root and the supervisor's user can change",
            p.display()
        )),
    }
    };
    ancestors(path)?;
    if let Ok(l) = std::fs::symlink_metadata(path) {
        if l.file_type().is_symlink() && l.uid() != 0 && l.uid() != me {
            return Err(format!(
                "the binary {} is a symbolic link owned by uid {}, not by root or by us (uid {me})",
                path.display(),
                l.uid()
            ));
        }
    }
    let real = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
    ancestors(&real)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&real)
        .map_err(|e| format!("cannot open the binary {}: {e}", real.display()))?;
    let m = file
        .metadata()
        .map_err(|e| format!("the binary {}: {e}", real.display()))?;
    if m.uid() != 0 && m.uid() != me {
        return Err(format!(
            "the binary {} belongs to uid {}, not to root or to us (uid {me})",
            real.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "the binary {} may be written by others (mode {:o})",
            real.display(),
            m.mode() & 0o7777
        ));
    }
    if !m.is_file() || m.mode() & 0o111 == 0 {
        return Err(format!(
            "the binary {} is not an executable file",
            real.display()
        ));
    }
    let mut head = [0u8; 2];
    let script =
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0).is_ok() && head == *b"#!";
    Ok(Binary {
        fd: OwnedFd::from(file),
        path: real,
        script,
    })
}

/// `argv` and `envp` for `execveat`, made before a fork so the child allocates nothing.
pub struct ExecArgs {
    _argv: Vec<CString>,
    _env: Vec<CString>,
    argv_p: Vec<*const libc::c_char>,
    env_p: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into the `CString`s this value owns, which never move or change
// while it lives; they are only read (by `execveat`).
unsafe impl Send for ExecArgs {}
// SAFETY: as above: nothing is ever written through the pointers.
unsafe impl Sync for ExecArgs {}

impl ExecArgs {
    /// The arguments `argv` and the environment `env` (`NAME=VALUE`); entries holding a NUL
    /// byte are left out.
    pub fn new(argv: &[impl AsRef<[u8]>], env: &[impl AsRef<[u8]>]) -> ExecArgs {
        let argv: Vec<CString> = argv
            .iter()
            .filter_map(|a| CString::new(a.as_ref()).ok())
            .collect();
        let env: Vec<CString> = env
            .iter()
            .filter_map(|a| CString::new(a.as_ref()).ok())
            .collect();
        let argv_p = argv
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let env_p = env
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        ExecArgs {
            _argv: argv,
            _env: env,
            argv_p,
            env_p,
        }
    }

    /// Executes the file open at `fd` with these arguments: `execveat(fd, "", argv, envp,
    /// AT_EMPTY_PATH)`. Allocates nothing (safe between `fork` and `exec`). Returns only on
    /// failure, with the errno (`ENOSYS` where the call is missing or filtered: never
    /// retried by path).
    pub fn execveat(&self, fd: RawFd) -> std::io::Error {
        // SAFETY: the path is a static empty C string; argv and envp are NULL-terminated
        // arrays of pointers to C strings this value owns.
        unsafe {
            libc::syscall(
                libc::SYS_execveat,
                fd,
                c"".as_ptr(),
                self.argv_p.as_ptr(),
                self.env_p.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        std::io::Error::last_os_error()
    }
}

/// This process's environment as `NAME=VALUE` byte strings, but the names `except`.
pub fn environment_but(except: &[&str]) -> Vec<Vec<u8>> {
    std::env::vars_os()
        .filter(|(k, _)| !except.iter().any(|e| k == e))
        .map(|(k, v)| {
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            kv.as_bytes().to_vec()
        })
        .collect()
}

/// Opens the running image (`/proc/self/exe`) read-only and kept across `execve`: what a
/// refusal runs again.
pub fn open_old_image() -> std::io::Result<OwnedFd> {
    let f = std::fs::File::open("/proc/self/exe")?;
    let fd = OwnedFd::from(f);
    keep_across_exec(fd.as_raw_fd())?;
    Ok(fd)
}

/// Writes `record` to a memfd kept across `execve` and executes the file open at `image` in
/// this process (`execveat`, never a path; issue 47 §1) with the record's descriptors and
/// [`ENV`]. `script`: the file is a `#!` script, whose interpreter opens `/dev/fd/N`, so the
/// descriptor is kept open across the exec. Returns only on failure, with why.
pub fn exec(record: &Record, image: BorrowedFd<'_>, script: bool) -> std::io::Error {
    let run = || -> std::io::Result<std::convert::Infallible> {
        let memfd =
            rustix::fs::memfd_create("mcp-supervisor-handover", rustix::fs::MemfdFlags::empty())?;
        let bytes = record.encode();
        let mut f = std::fs::File::from(memfd);
        std::io::Write::write_all(&mut f, &bytes)?;
        let memfd = OwnedFd::from(f);
        for fd in record.raw_fds() {
            keep_across_exec(fd)?;
        }
        keep_across_exec(memfd.as_raw_fd())?;
        if script {
            keep_across_exec(image.as_raw_fd())?;
        }
        let mut env = environment_but(&[ENV, "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"]);
        env.push(format!("{ENV}={}", memfd.as_raw_fd()).into_bytes());
        let args = ExecArgs::new(&record.argv, &env);
        let e = args.execveat(image.as_raw_fd());
        // Still here: the memfd closes with `memfd`; the others stay as they were.
        drop(memfd);
        if script {
            close_on_exec(image.as_raw_fd());
        }
        Err(e)
    };
    match run() {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// Runs the image that wrote `record` again (its descriptor `old_image`, kept across the
/// exec): after a refused hand-over. Returns only on failure, with why.
pub fn exec_old(record: &Record) -> std::io::Error {
    // SAFETY: `old_image` is a descriptor the record's writer left open for us (validated
    // as a regular file when the record was read); it is only borrowed here.
    let fd = unsafe { BorrowedFd::borrow_raw(record.old_image) };
    exec(record, fd, false)
}

#[cfg(test)]
mod tests;
