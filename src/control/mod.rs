//! The control socket `<socket_dir>/control.sock` (issue 7 §1): a small versioned
//! request/response protocol between the daemon and the CLI verbs (`status`, `start`, `stop`,
//! `restart`, `reload`, `logs`, `metrics`).
//!
//! Wire format: newline-delimited JSON, one request line answered by one response line, any
//! number of them per connection, in order. Every message carries `"v"`, the protocol version
//! ([`VERSION`]). The daemon answers a request of a newer version with an error of kind
//! `version` (and its own `v`), so an old daemon and a new CLI fail with a clear message.
//!
//! ```text
//! > {"v":1,"verb":"status","name":"cua"}
//! < {"v":1,"ok":true,"servers":[{"name":"cua","state":"ready","pid":4242,...}]}
//! > {"v":1,"verb":"restart","name":"nope"}
//! < {"v":1,"ok":false,"error":{"kind":"unknown-server","message":"no server named `nope`"}}
//! ```
//!
//! The `servers` entries are the server actor's `Status` snapshots, serialised as they are: the
//! contract keys of `status --json` (`name`, `state`, `pid`, `restarts`, `era`, `clients`,
//! `uptime_s`, `last_exit`, `stderr_tail`) come from there. New fields may be added; none of
//! these is removed or renamed without bumping [`VERSION`].
//!
//! Owns: the message types. `server.rs` answers requests inside the daemon, `client.rs` is the
//! CLI side. Access control is the daemon's accept loop (`SO_PEERCRED`), as for every socket.

pub mod client;
mod login;
pub mod server;
pub mod watch;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;

/// Largest request or response line accepted, in bytes (responses carry stderr tails of up to
/// 64 KiB per server, so this is generous).
pub const MAX_LINE: usize = 16 << 20;

/// The control socket's name under `socket_dir`, also its `LISTEN_FDNAMES` name.
pub const SOCKET_NAME: &str = "control";

/// `<socket_dir>/control.sock`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(format!("{SOCKET_NAME}.sock"))
}

/// One request line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Protocol version of the sender.
    pub v: u32,
    /// What to do.
    #[serde(flatten)]
    pub op: Op,
}

/// The operations, tagged by `"verb"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "kebab-case")]
pub enum Op {
    /// Status of every server, or of `name`.
    Status {
        /// One server only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Start a stopped/failed/backing-off server now, clearing `failed` and the backoff; waits
    /// until it is ready or gave up.
    Start {
        /// The server.
        name: String,
    },
    /// Stop a server and keep it stopped; waits until its child has exited.
    Stop {
        /// The server.
        name: String,
    },
    /// Stop and start again (clients stay connected); waits until the new child is ready or
    /// gave up.
    Restart {
        /// The server.
        name: String,
    },
    /// Re-read the configuration file the daemon was started with and apply the difference.
    Reload,
    /// The stderr tail of a server.
    Logs {
        /// The server.
        name: String,
    },
    /// The Prometheus/OpenMetrics text exposition of every metric (issue 8).
    Metrics,
    /// Begin signing in to url server `name` (issue 30): the daemon discovers, registers and
    /// answers the authorization URL to open (`login`).
    Login {
        /// The server.
        name: String,
        /// `login --no-browser` (issue 47 §2): answer the authorization URL itself, for the
        /// person to copy from their own terminal, rather than the start page on the loopback
        /// listener. Absent from an older CLI: false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_browser: bool,
        /// `SUDO_UID` of a CLI run as root through `sudo`: that user's connections may complete
        /// the login too (issue 47 §2, decisions). Taken only from a root peer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sudo_uid: Option<u32>,
    },
    /// Wait for the login of `name` begun last: the redirect, the code exchange, then the
    /// server started; answers like `start`.
    LoginWait {
        /// The server.
        name: String,
    },
    /// The redirect URL the browser ended on, pasted by the user (`login --no-browser`).
    LoginPaste {
        /// The server.
        name: String,
        /// The whole URL.
        url: String,
    },
    /// Forget the sign-in of `name` and restart its session.
    Logout {
        /// The server.
        name: String,
    },
    /// Upgrade in place (issue 32 §1): the daemon executes its binary again in its own
    /// process, handing over its listeners, children and sessions. Answered only when it is
    /// refused; otherwise the connection ends at the hand-over, and `upgraded` tells the
    /// outcome.
    Upgrade,
    /// How many upgrades this process went through and why the last was refused, if it was.
    Upgraded,
    /// Stream what `status` shows: a snapshot, then each change (issue 33; `watch.rs`). The
    /// connection carries nothing else afterwards.
    Watch,
}

impl Request {
    /// A request of this build's version.
    pub fn new(op: Op) -> Request {
        Request { v: VERSION, op }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The line was not a request this daemon understands.
    BadRequest,
    /// The request's version is newer than the daemon's.
    Version,
    /// No server has that name.
    UnknownServer,
    /// `reload`: the new configuration file is invalid; the old one keeps running.
    InvalidConfig,
    /// The operation ran but did not succeed (a server did not become ready, a reload could
    /// not bind a socket, ...).
    Failed,
    /// The daemon is shutting down.
    ShuttingDown,
    /// `login`/`logout` of a server that does not sign in (not a url server, or a static
    /// `Authorization` header).
    NotApplicable,
    /// `watch`: too many watchers already.
    Busy,
    /// A viewer asked for an operator's verb (issue 33).
    Denied,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable kind.
    pub kind: ErrorKind,
    /// One line for humans (for `invalid-config`: `file:line: key ...: message`).
    pub message: String,
}

/// The answer to `upgraded`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upgraded {
    /// The daemon's pid (an upgrade keeps it).
    pub pid: u32,
    /// Upgrades this process went through (a refused one counts: the old image ran again).
    pub upgrades: u64,
    /// Why the last upgrade was refused by the new image, if it was.
    pub refused: Option<String>,
}

/// What a reload changed, by server name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// Started (socket bound).
    pub added: Vec<String>,
    /// Stopped (socket removed unless socket-activated).
    pub removed: Vec<String>,
    /// Restarted with the new settings (clients stay connected).
    pub changed: Vec<String>,
    /// Untouched: same pid, same clients.
    pub unchanged: Vec<String>,
}

/// One response line. Fields not relevant to the operation are absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Protocol version of the daemon.
    pub v: u32,
    /// Whether the operation succeeded.
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Status snapshots (`status`; `start`/`stop`/`restart`: the server afterwards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<Value>>,
    /// `logs`: the stderr tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// `metrics`: the OpenMetrics text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// `reload`: what changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload: Option<ReloadReport>,
    /// `upgraded`: the daemon's pid, its upgrades, and why the last hand-over was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgraded: Option<Upgraded>,
    /// `login`: what to open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<LoginInfo>,
    /// `status`: the endpoints (issue 31), each `{"name", "servers": [{"name", "state"}]}`
    /// in its `servers` order; absent when none is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<Value>>,
    /// `watch`: one line of the stream (`watch.rs` gives its shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<Value>,
}

/// `login`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoginInfo {
    /// The URL to open: the start page on the redirect listener
    /// (`http://127.0.0.1:PORT/start/<nonce>`, which sends the login's owners on to the
    /// authorization URL), or with `no_browser` the authorization URL itself; absent when no
    /// person is needed (client credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// How long the daemon waits for the redirect, in seconds.
    pub timeout_s: u64,
}

impl Response {
    /// A success with nothing attached.
    pub fn ok() -> Response {
        Response {
            v: VERSION,
            ok: true,
            ..Response::default()
        }
    }

    /// A failure.
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
        Response {
            v: VERSION,
            ok: false,
            error: Some(ErrorBody {
                kind,
                message: message.into(),
            }),
            ..Response::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_have_a_stable_wire_form() {
        let r = Request::new(Op::Status { name: None });
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"v": 1, "verb": "status"})
        );
        let r = Request::new(Op::Restart { name: "cua".into() });
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"v": 1, "verb": "restart", "name": "cua"})
        );
        let back: Request =
            serde_json::from_str(r#"{"v":1,"verb":"logs","name":"x","extra":true}"#).unwrap();
        assert_eq!(back.op, Op::Logs { name: "x".into() });
        let back: Request = serde_json::from_str(r#"{"v":1,"verb":"reload"}"#).unwrap();
        assert_eq!(back.op, Op::Reload);
        // `login` from an older CLI, and as a newer one sends it by default.
        let old = Op::Login {
            name: "x".into(),
            no_browser: false,
            sudo_uid: None,
        };
        let back: Request = serde_json::from_str(r#"{"v":1,"verb":"login","name":"x"}"#).unwrap();
        assert_eq!(back.op, old);
        assert_eq!(
            serde_json::to_value(Request::new(old)).unwrap(),
            json!({"v": 1, "verb": "login", "name": "x"})
        );
        assert!(serde_json::from_str::<Request>(r#"{"v":1,"verb":"explode"}"#).is_err());
    }

    #[test]
    fn responses_omit_what_does_not_apply() {
        assert_eq!(
            serde_json::to_value(Response::ok()).unwrap(),
            json!({"v": 1, "ok": true})
        );
        assert_eq!(
            serde_json::to_value(Response::error(ErrorKind::UnknownServer, "no")).unwrap(),
            json!({"v": 1, "ok": false, "error": {"kind": "unknown-server", "message": "no"}})
        );
    }
}
