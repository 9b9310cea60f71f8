//! systemd integration (issue 7 §3; reference/supervision.md §1.1, §1.6, R1-R4, R18):
//! `sd_notify` datagrams, the watchdog period, and socket-activated listeners.
//!
//! Owns: the plumbing variables (`NOTIFY_SOCKET`, `LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`,
//! `WATCHDOG_USEC`, `WATCHDOG_PID`), read and removed from our environment by
//! [`Plumbing::take_from_env`] while the process is still single-threaded, and the datagram
//! socket the notifications go out on. Nothing here decides *when* to notify; `daemon.rs` does.
//!
//! The wire format is implemented here (one datagram of `KEY=VALUE` lines to the `AF_UNIX`
//! socket in `NOTIFY_SOCKET`, a leading `@` meaning the abstract namespace) rather than through
//! the `sd-notify` crate, whose sender reads `NOTIFY_SOCKET` from the environment at each call:
//! ours is gone from the environment before the runtime starts, so children never see it.

use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

/// The variables [`Plumbing::take_from_env`] consumes.
pub const VARS: &[&str] = &[
    "NOTIFY_SOCKET",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "FDSTORE",
];

/// First socket-activated descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// What systemd handed us, captured once at startup.
#[derive(Debug, Default)]
pub struct Plumbing {
    /// `NOTIFY_SOCKET`, when set.
    pub notify_socket: Option<OsString>,
    /// `WATCHDOG_USEC` as a duration, when set and meant for us (`WATCHDOG_PID` unset or ours).
    pub watchdog: Option<Duration>,
    /// Socket-activated descriptors with their `LISTEN_FDNAMES` name (`unknown` when unnamed),
    /// when `LISTEN_PID` is ours. Already close-on-exec.
    pub listeners: Vec<(String, OwnedFd)>,
    /// Things worth a warning once logging is up (bad values, fds meant for another pid).
    pub notes: Vec<String>,
    /// `FDSTORE`: how many descriptors the unit's file descriptor store holds
    /// (`FileDescriptorStoreMax=`, passed by systemd 254 and later), when above 0.
    pub fd_store: Option<usize>,
}

impl Plumbing {
    /// Reads the plumbing variables, sets close-on-exec on the passed descriptors, and removes
    /// the variables from our environment.
    ///
    /// Call it before any thread exists (before the tokio runtime): `std::env::remove_var` is
    /// not thread-safe.
    pub fn take_from_env() -> Plumbing {
        let get = |k: &str| std::env::var(k).ok();
        let me = std::process::id();
        let mut p = Plumbing {
            notify_socket: std::env::var_os("NOTIFY_SOCKET").filter(|v| !v.is_empty()),
            ..Plumbing::default()
        };
        let watchdog_pid_ok = match get("WATCHDOG_PID") {
            None => true,
            Some(v) => v.trim().parse::<u32>().ok() == Some(me),
        };
        if let Some(usec) = get("WATCHDOG_USEC") {
            match usec.trim().parse::<u64>() {
                Ok(u) if u > 0 && watchdog_pid_ok => p.watchdog = Some(Duration::from_micros(u)),
                Ok(_) if !watchdog_pid_ok => p
                    .notes
                    .push("WATCHDOG_PID names another process; not sending WATCHDOG=1".into()),
                _ => p.notes.push(format!("ignoring WATCHDOG_USEC={usec:?}")),
            }
        }
        if let Some(n) = get("FDSTORE") {
            match n.trim().parse::<usize>() {
                Ok(0) => {}
                Ok(n) => p.fd_store = Some(n),
                Err(_) => p.notes.push(format!("ignoring FDSTORE={n:?}")),
            }
        }
        let listen_pid_ok =
            get("LISTEN_PID").and_then(|v| v.trim().parse::<u32>().ok()) == Some(me);
        if let Some(n) = get("LISTEN_FDS") {
            match n.trim().parse::<i32>() {
                Ok(n) if n > 0 && listen_pid_ok => {
                    let names: Vec<String> = get("LISTEN_FDNAMES")
                        .map(|v| v.split(':').map(str::to_string).collect())
                        .unwrap_or_default();
                    for i in 0..n {
                        // A count past the descriptor range names no descriptor of ours.
                        let Some(fd) = LISTEN_FDS_START.checked_add(i) else {
                            break;
                        };
                        let name = names
                            .get(i as usize)
                            .filter(|s| !s.is_empty())
                            .cloned()
                            .unwrap_or_else(|| "unknown".into());
                        match adopt_fd(fd) {
                            Ok(owned) => p.listeners.push((name, owned)),
                            Err(e) => p.notes.push(format!(
                                "socket-activated descriptor {fd} ({name}) is unusable: {e}"
                            )),
                        }
                    }
                }
                Ok(n) if n > 0 => p.notes.push(format!(
                    "LISTEN_FDS={n} is meant for another process (LISTEN_PID is not ours); ignoring it"
                )),
                Ok(_) => {}
                Err(_) => p.notes.push(format!("ignoring LISTEN_FDS={n:?}")),
            }
        }
        for k in VARS {
            std::env::remove_var(k);
        }
        cloexec_inherited_fds();
        p
    }

    /// Takes the socket-activated descriptor named `name`, if systemd passed one.
    pub fn take_listener(&mut self, name: &str) -> Option<OwnedFd> {
        let i = self.listeners.iter().position(|(n, _)| n == name)?;
        // `remove` panics only out of bounds, and `position` just found `i` in bounds.
        Some(self.listeners.remove(i).1)
    }
}

/// Marks every descriptor above 2 close-on-exec: whatever started us may have leaked some
/// (a shell's saved descriptors, a parent's pipes), and a child gets exactly 0, 1 and 2 (R18,
/// reference/supervision.md §4.9). Runs before anything of ours is opened.
fn cloexec_inherited_fds() {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFD) {
            let flags = FdFlag::from_bits_truncate(flags);
            let _ = fcntl(fd, FcntlArg::F_SETFD(flags | FdFlag::FD_CLOEXEC));
        }
    }
}

/// Checks that `fd` is open, sets close-on-exec (systemd passes it without, on purpose, and a
/// child must never inherit a listener) and takes ownership of it.
fn adopt_fd(fd: RawFd) -> nix::Result<OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD)?);
    fcntl(fd, FcntlArg::F_SETFD(flags | FdFlag::FD_CLOEXEC))?;
    // SAFETY: systemd passed this descriptor to us (LISTEN_PID is ours) and nothing else in
    // the process owns it; F_GETFD just proved it is open.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `sd_notify` datagrams. Cheap to clone; a no-op when `NOTIFY_SOCKET` was not set.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    target: Option<Arc<(UnixDatagram, SocketAddr)>>,
    /// The same address for `sendmsg` (descriptors travel only that way).
    with_fds: Option<Arc<nix::sys::socket::UnixAddr>>,
}

impl Notifier {
    /// A notifier for `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
    pub fn new(socket: Option<&OsString>) -> std::io::Result<Notifier> {
        let Some(path) = socket else {
            return Ok(Notifier::default());
        };
        let bytes = path.as_encoded_bytes();
        let (addr, with_fds) = match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                (
                    SocketAddr::from_abstract_name(name)?,
                    nix::sys::socket::UnixAddr::new_abstract(name)?,
                )
            }
            None => (
                SocketAddr::from_pathname(path)?,
                nix::sys::socket::UnixAddr::new(std::path::Path::new(path))?,
            ),
        };
        let sock = UnixDatagram::unbound()?;
        // A full manager queue must never stall the event loop; a lost STATUS= is harmless.
        sock.set_nonblocking(true)?;
        Ok(Notifier {
            target: Some(Arc::new((sock, addr))),
            with_fds: Some(Arc::new(with_fds)),
        })
    }

    /// Whether notifications go anywhere.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one datagram made of `lines` (each `KEY=VALUE`).
    pub fn send(&self, lines: &[&str]) {
        let Some(t) = &self.target else { return };
        let mut msg = String::new();
        for l in lines {
            msg.push_str(l);
            msg.push('\n');
        }
        if let Err(e) = t.0.send_to_addr(msg.as_bytes(), &t.1) {
            debug!(error = %e, "sd_notify failed");
        }
    }

    /// Sends one datagram made of `lines` with `fds` attached (`SCM_RIGHTS`): how descriptors
    /// go into the file descriptor store (`FDSTORE=1`, `FDNAME=`). Errors: no notify socket,
    /// or the send failed (a full queue: the socket never blocks).
    pub fn send_with_fds(
        &self,
        lines: &[&str],
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> std::io::Result<()> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        use std::os::fd::AsRawFd;
        let (Some(t), Some(addr)) = (&self.target, &self.with_fds) else {
            return Err(std::io::Error::other("NOTIFY_SOCKET is not set"));
        };
        let mut msg = String::new();
        for l in lines {
            msg.push_str(l);
            msg.push('\n');
        }
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let iov = [std::io::IoSlice::new(msg.as_bytes())];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
        sendmsg(
            t.0.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            Some(addr.as_ref()),
        )
        .map(|_| ())
        .map_err(std::io::Error::from)
    }

    /// `READY=1` (startup finished, or a reload finished).
    pub fn ready(&self) {
        self.send(&["READY=1"]);
    }

    /// `READY=1` with a status line in the same datagram.
    pub fn ready_with_status(&self, status: &str) {
        self.send(&["READY=1", &format!("STATUS={}", one_line(status))]);
    }

    /// `RELOADING=1` with `MONOTONIC_USEC=` in one datagram (required since systemd v253).
    pub fn reloading(&self) {
        self.send(&[
            "RELOADING=1",
            &format!("MONOTONIC_USEC={}", monotonic_usec()),
        ]);
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        self.send(&["STOPPING=1"]);
    }

    /// `STATUS=<line>`.
    pub fn status(&self, line: &str) {
        self.send(&[&format!("STATUS={}", one_line(line))]);
    }

    /// `WATCHDOG=1`.
    pub fn watchdog(&self) {
        self.send(&["WATCHDOG=1"]);
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// `CLOCK_MONOTONIC` in microseconds (the clock systemd compares `MONOTONIC_USEC` with).
pub fn monotonic_usec() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn notifier_sends_datagrams_to_a_path_and_an_abstract_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::new(Some(&path.clone().into_os_string())).unwrap();
        n.reloading();
        let mut buf = [0u8; 256];
        let len = rx.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..len]).unwrap();
        assert!(text.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{text}");
        assert!(text.ends_with('\n'));

        use std::os::linux::net::SocketAddrExt;
        let name = format!("mcpsup-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        let n = Notifier::new(Some(&OsString::from(format!("@{name}")))).unwrap();
        n.status("a\nb");
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STATUS=a b\n");
    }

    #[test]
    fn no_socket_means_no_op() {
        let n = Notifier::new(None).unwrap();
        assert!(!n.enabled());
        n.ready();
    }
}
