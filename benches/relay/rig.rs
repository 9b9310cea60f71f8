//! The rig: a temporary directory, supervisor configs, socat listeners, rmcp-mux instances,
//! and [`One`], the single-server setup of the latency, throughput and large-result rows.

use std::fmt::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::client::{Conn, Way};
use crate::procs::{children, sh, Proc};

pub const SUPERVISOR: &str = env!("CARGO_BIN_EXE_mcp-supervisor");
pub const FAKE: &str = env!("CARGO_BIN_EXE_mcp-fake-server");
pub const MIB: usize = 1024 * 1024;
/// The supervisor's `max_message_size` and rmcp-mux's `--max-request-bytes`: a 64 MiB result
/// plus its envelope is over the supervisor's 64 MiB default.
pub const MAX_MESSAGE: usize = 128 * MIB;
/// Client limits of the instances that take 1,000 clients: the supervisor's `max_clients` and
/// `max_inflight` (defaults 256), rmcp-mux's `--max-active-clients` (default 5, on every
/// instance: beyond it a connection is accepted but never served).
pub const MANY: usize = 4096;

/// Where the rmcp-mux binary is, and its `--version`; or why there is none.
pub struct RmcpMux {
    pub found: Result<PathBuf, String>,
    pub version: String,
}

impl RmcpMux {
    /// `MCPSUP_RMCP_MUX`, else `<repo>/.interop/rmcp-mux/bin/rmcp-mux` (.ci/install-deps),
    /// else `rmcp-mux` on PATH.
    pub fn find() -> RmcpMux {
        let env = std::env::var_os("MCPSUP_RMCP_MUX").map(PathBuf::from);
        let interop =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".interop/rmcp-mux/bin/rmcp-mux");
        let on_path = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("rmcp-mux"))
                .find(|c| c.is_file())
        });
        let found = match (env, interop.is_file(), on_path) {
            (Some(e), _, _) if e.is_file() => Ok(e),
            (Some(e), _, _) => Err(format!(
                "MCPSUP_RMCP_MUX={} is not a file",
                e.display()
            )),
            (None, true, _) => Ok(interop),
            (None, false, Some(p)) => Ok(p),
            (None, false, None) => Err(format!(
                "rmcp-mux not found (MCPSUP_RMCP_MUX unset, no {}, none on PATH): run .ci/install-deps",
                interop.display()
            )),
        };
        let version = match &found {
            Ok(p) => sh(p.to_str().unwrap_or_default(), &["--version"]),
            Err(_) => String::new(),
        };
        RmcpMux { found, version }
    }
}

pub struct Rig {
    pub dir: PathBuf,
    pub rmcp: RmcpMux,
}

/// The environment variables that route HTTP through a proxy.
const PROXY_VARS: [&str; 8] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

impl Rig {
    pub fn new(dir: &Path) -> Rig {
        for p in [dir.to_str().unwrap_or(" "), FAKE, SUPERVISOR] {
            assert!(
                !p.contains(|c: char| c.is_whitespace() || ",:!\"'\\".contains(c)),
                "path {p:?} would need quoting in a socat address; use a plain TMPDIR/target dir"
            );
        }
        Rig {
            dir: dir.to_path_buf(),
            rmcp: RmcpMux::find(),
        }
    }

    pub fn pidfile(&self) -> PathBuf {
        self.dir.join("pids")
    }

    pub fn fake_cmd(&self) -> Command {
        let mut c = Command::new(FAKE);
        c.arg("--pidfile").arg(self.pidfile()).stderr(Stdio::null());
        c
    }

    fn names(servers: usize) -> Vec<String> {
        if servers == 1 {
            vec!["bench".into()]
        } else {
            (0..servers).map(|i| format!("s{i}")).collect()
        }
    }

    /// Writes `<tag>.toml` with `servers` fake servers (`bench`, or `s0`..); `many`: the client
    /// limits raised for 1,000 clients (see [`MANY`]).
    pub fn config(&self, tag: &str, servers: usize, many: bool) -> (PathBuf, Vec<PathBuf>) {
        self.config_with(tag, servers, many, &[])
    }

    /// [`Rig::config`] with `extra` arguments for every fake server.
    pub fn config_with(
        &self,
        tag: &str,
        servers: usize,
        many: bool,
        extra: &[String],
    ) -> (PathBuf, Vec<PathBuf>) {
        let sockdir = self.dir.join(format!("{tag}-sock"));
        let mut text = format!("[supervisor]\nsocket_dir = \"{}\"\n", sockdir.display());
        if many {
            let _ = writeln!(text, "max_clients = {MANY}");
        }
        let _ = write!(
            text,
            "\n[defaults]\n# a 64 MiB result plus its envelope is over the 64 MiB default\nmax_message_size = {MAX_MESSAGE}\n"
        );
        if many {
            let _ = writeln!(text, "max_inflight = {MANY}");
        }
        let names = Self::names(servers);
        let mut args = format!("\"--pidfile\", \"{}\"", self.pidfile().display());
        for a in extra {
            let _ = write!(args, ", \"{a}\"");
        }
        for n in &names {
            let _ = write!(
                text,
                "\n[servers.{n}]\ncommand = \"{FAKE}\"\nargs = [{args}]\n"
            );
        }
        let path = self.dir.join(format!("{tag}.toml"));
        std::fs::write(&path, text).expect("write the config");
        let socks = names
            .iter()
            .map(|n| sockdir.join(format!("{n}.sock")))
            .collect();
        (path, socks)
    }

    /// Starts `mcp-supervisor run` (log in `<tag>.log`); does not wait. The proxy variables
    /// are removed: every path of the benchmark is on this machine, and a url server's
    /// session would otherwise go through a proxy the environment names (the remote row).
    pub fn supervisor(&self, config: &Path, tag: &str) -> Proc {
        let log = std::fs::File::create(self.dir.join(format!("{tag}.log"))).expect("log file");
        let mut c = Command::new(SUPERVISOR);
        c.arg("run")
            .arg("-c")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for v in PROXY_VARS {
            c.env_remove(v);
        }
        Proc::spawn(&mut c, Some(Signal::SIGTERM))
    }

    /// Starts a socat listener on `sock`; does not wait.
    pub fn socat(&self, sock: &Path) -> Proc {
        let mut c = Command::new("socat");
        c.arg(format!(
            "UNIX-LISTEN:{},fork,unlink-early,backlog=128",
            sock.display()
        ))
        .arg(format!(
            "EXEC:{FAKE} --pidfile {},pipes",
            self.pidfile().display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        Proc::spawn(&mut c, None)
    }

    /// Starts rmcp-mux for `servers` fake servers (log in `<tag>.log`); does not wait. One
    /// server: `rmcp-mux --socket S --cmd FAKE --max-active-clients 4096 --max-request-bytes
    /// 134217728 -- --pidfile P`. Several: one process in its multi-service mode, `--config
    /// <tag>-rmcp.json` with the same settings per service. HOME points into the temporary
    /// directory, since rmcp-mux binds `$HOME/.rmcp-mux/ipc/control.sock` and watches
    /// `$HOME/.vibecrafted/control_plane` (and would read `~/.codex/mcp.json`).
    pub fn rmcp_mux(&self, tag: &str, servers: usize) -> Result<(Proc, Vec<PathBuf>), String> {
        self.rmcp_mux_with(tag, servers, &[])
    }

    /// [`Rig::rmcp_mux`] with `extra` arguments for every fake server.
    pub fn rmcp_mux_with(
        &self,
        tag: &str,
        servers: usize,
        extra: &[String],
    ) -> Result<(Proc, Vec<PathBuf>), String> {
        let bin = self.rmcp.found.clone()?;
        let home = self.dir.join(format!("{tag}-rmcp-home"));
        std::fs::create_dir_all(&home).map_err(|e| format!("create {}: {e}", home.display()))?;
        let sockdir = self.dir.join(format!("{tag}-rmcp"));
        let names = Self::names(servers);
        let socks: Vec<PathBuf> = names
            .iter()
            .map(|n| sockdir.join(format!("{n}.sock")))
            .collect();
        let log = std::fs::File::create(self.dir.join(format!("{tag}.log")))
            .map_err(|e| format!("log file: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("log file: {e}"))?;
        let mut c = Command::new(bin);
        c.env("HOME", &home)
            .env_remove("VIBECRAFTED_HOME")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let pidfile = self.pidfile().display().to_string();
        if servers == 1 {
            c.arg("--socket")
                .arg(&socks[0])
                .arg("--cmd")
                .arg(FAKE)
                .arg("--max-active-clients")
                .arg(MANY.to_string())
                .arg("--max-request-bytes")
                .arg(MAX_MESSAGE.to_string())
                .arg("--")
                .arg("--pidfile")
                .arg(&pidfile)
                .args(extra);
        } else {
            let mut args = vec!["--pidfile".to_string(), pidfile.clone()];
            args.extend_from_slice(extra);
            let services: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .zip(&socks)
                .map(|(n, s)| {
                    let v = serde_json::json!({
                        "socket": s.display().to_string(),
                        "cmd": FAKE,
                        "args": args,
                        "max_active_clients": MANY,
                        "max_request_bytes": MAX_MESSAGE,
                    });
                    (n.clone(), v)
                })
                .collect();
            let config = self.dir.join(format!("{tag}-rmcp.json"));
            let text = serde_json::json!({ "servers": services }).to_string();
            std::fs::write(&config, text).map_err(|e| format!("write the config: {e}"))?;
            c.arg("--config").arg(config);
        }
        Ok((Proc::spawn(&mut c, Some(Signal::SIGTERM)), socks))
    }

    pub fn direct(&self) -> Conn {
        Conn::pipes(self.fake_cmd())
    }

    pub fn attach(&self, config: &Path, name: &str) -> Conn {
        let mut c = Command::new(SUPERVISOR);
        c.arg("attach")
            .arg(name)
            .arg("-c")
            .arg(config)
            .stderr(Stdio::null());
        Conn::pipes(c)
    }

    pub fn log(&self, tag: &str) -> PathBuf {
        self.dir.join(format!("{tag}.log"))
    }

    /// The last lines of `<tag>.log`, for a failure message.
    pub fn log_tail(&self, tag: &str) -> String {
        log_tail(&self.log(tag))
    }

    /// Adds to an error whether daemon `pid` (logging to `<tag>.log`) had exited and how its
    /// log ends.
    pub fn failure<'a>(&'a self, tag: &'a str, pid: i32) -> impl Fn(String) -> String + 'a {
        move |e: String| {
            let gone = if alive(pid) {
                ""
            } else {
                "; the process had exited"
            };
            format!("{e}{gone}; its log ends: {}", self.log_tail(tag))
        }
    }

    /// Waits until every socket of daemon `pid` (logging to `<tag>.log`) accepts a connection
    /// and answers a handshake (the supervisor once that child is ready; rmcp-mux passes it to
    /// the child). An error says whether the daemon had exited and how its log ends.
    pub fn await_ready(&self, tag: &str, pid: i32, socks: &[PathBuf]) -> Result<(), String> {
        let fail = self.failure(tag, pid);
        for s in socks {
            wait_accepting(s, Duration::from_secs(20), pid).map_err(&fail)?;
        }
        for s in socks {
            Conn::socket(s)
                .and_then(|mut c| c.handshake())
                .map_err(&fail)?;
        }
        Ok(())
    }
}

/// The last two lines of a log, without terminal colour codes, at most 300 characters.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let lines: Vec<&str> = plain.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(2)..].join(" / ");
    tail.chars().take(300).collect()
}

/// Waits until `sock` accepts a connection (bounded; polls, since nothing announces it), or
/// until `owner`, the process that should listen on it, is gone.
pub fn wait_accepting(sock: &Path, limit: Duration, owner: i32) -> Result<(), String> {
    let until = Instant::now() + limit;
    while UnixStream::connect(sock).is_err() {
        if !alive(owner) {
            return Err(format!(
                "the process to listen on {} (pid {owner}) exited",
                sock.display()
            ));
        }
        if Instant::now() > until {
            return Err(format!(
                "{} did not accept within {limit:?}",
                sock.display()
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// Whether `pid` is still running (not a zombie).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}

/// The single-server setup used by the latency, throughput and large-result measurements.
pub struct One<'a> {
    pub rig: &'a Rig,
    pub config: PathBuf,
    pub sup_sock: PathBuf,
    pub socat_sock: PathBuf,
    pub sup: Proc,
    pub socat: Proc,
    /// rmcp-mux and its socket, or why it is not running.
    pub rmcp: Result<(Proc, PathBuf), String>,
}

impl<'a> One<'a> {
    pub fn start(rig: &'a Rig) -> One<'a> {
        let (config, socks) = rig.config("one", 1, false);
        let sup = rig.supervisor(&config, "one");
        let socat_sock = rig.dir.join("socat.sock");
        let socat = rig.socat(&socat_sock);
        let rmcp = rig.rmcp_mux("one-rmcp", 1).and_then(|(p, s)| {
            wait_accepting(&s[0], Duration::from_secs(10), p.pid())
                .map_err(|e| format!("{e}; its log ends: {}", rig.log_tail("one-rmcp")))?;
            Ok((p, s[0].clone()))
        });
        wait_accepting(&socks[0], Duration::from_secs(10), sup.pid())
            .expect("the supervisor's socket");
        wait_accepting(&socat_sock, Duration::from_secs(10), socat.pid()).expect("socat's socket");
        let mut one = One {
            rig,
            config,
            sup_sock: socks[0].clone(),
            socat_sock,
            sup,
            socat,
            rmcp,
        };
        // The supervisor answers initialize once the child is ready; rmcp-mux passes the first
        // initialize to its child and answers every later one from its cache.
        one.connect(Way::Supervisor)
            .expect("the supervisor answers");
        if one.rmcp.is_ok() {
            if let Err(e) = one.connect(Way::RmcpMux) {
                one.rmcp = Err(format!("rmcp-mux did not answer initialize: {e}"));
            }
        }
        one
    }

    /// A connected client that has done the handshake.
    pub fn connect(&self, way: Way) -> Result<Conn, String> {
        let mut c = match way {
            Way::Direct => self.rig.direct(),
            Way::Socat => Conn::socket(&self.socat_sock)?,
            Way::Supervisor => Conn::socket(&self.sup_sock)?,
            Way::Attach => self.rig.attach(&self.config, "bench"),
            Way::RmcpMux => match &self.rmcp {
                Ok((_, s)) => Conn::socket(s).map_err(|e| self.rmcp_state(e))?,
                Err(e) => return Err(e.clone()),
            },
        };
        c.handshake().map_err(|e| match way {
            Way::RmcpMux => self.rmcp_state(e),
            _ => e,
        })?;
        Ok(c)
    }

    pub fn rmcp_pid(&self) -> Option<i32> {
        self.rmcp.as_ref().ok().map(|(p, _)| p.pid())
    }

    /// `e`, plus whether the rmcp-mux process is gone and the end of its log.
    pub fn rmcp_state(&self, e: String) -> String {
        match self.rmcp_pid() {
            Some(p) if !alive(p) => format!(
                "{e}; the rmcp-mux process had exited, its log ends: {}",
                self.rig.log_tail("one-rmcp")
            ),
            _ => e,
        }
    }

    /// The socat processes forked by the listener (one per open connection).
    pub fn socat_forks(&self) -> Vec<i32> {
        children(self.socat.pid())
    }

    /// Waits (bounded) until the socat forks of closed connections are gone.
    pub fn socat_idle(&self) {
        socat_idle(&self.socat);
    }
}

/// Waits (bounded) until the forks of `listener` are gone (they exit with their connection).
pub fn socat_idle(listener: &Proc) {
    let until = Instant::now() + Duration::from_secs(10);
    while !children(listener.pid()).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}
