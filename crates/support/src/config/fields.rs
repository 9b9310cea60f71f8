//! Keys of a server table that need more than a default: sizes and counts within their bounds, the
//! command path, the restart policy, per-method timeouts, the protocol, roots, the identity,
//! client capabilities. Each error names file, line and key.

use super::keys::{self, Key};
use super::raw::RawServer;
use super::values::parse_duration;
use super::{ConfigError, Table, Validator};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

/// Whose roots a shared child sees (issue 13 §3, K28; docs/book/src/reference/configuration.md,
/// "Roots").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRoots {
    /// A `roots/list` the child sends while a client's request is in flight goes to that
    /// client (the owner rule; SEP-2260 ties `roots/list` to the request that caused it);
    /// any other `roots/list` (at start, after a `list_changed`, no capable client in flight)
    /// is answered with `roots`.
    Caller,
    /// Every `roots/list` is answered with `roots`: no client's roots ever reach the child.
    None,
}

/// What to do when a child exits without being asked to (R8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart after any exit (default: an unrequested clean exit is still lost service).
    Always,
    /// Restart after a non-zero exit, a signal or a timeout.
    OnFailure,
    /// Never restart.
    Never,
}

impl Validator<'_> {
    /// A size or count key (`key`, written under `path`): the own value, else `default`'s,
    /// held to the key's bound ([`Key::check_number`]); `None` when neither sets it.
    pub(super) fn count<T: Copy + TryInto<u64>>(
        &self,
        key: &Key,
        path: &str,
        own: &Option<Spanned<T>>,
        default: &Option<Spanned<T>>,
    ) -> Result<Option<T>, ConfigError> {
        let Some(v) = own.as_ref().or(default.as_ref()) else {
            return Ok(None);
        };
        let n = (*v.get_ref()).try_into().unwrap_or(u64::MAX);
        key.check_number(n)
            .map_err(|m| self.err(v.span(), path, &m))?;
        Ok(Some(*v.get_ref()))
    }

    /// A `[supervisor]` size or count: the value, else the table's default.
    pub(super) fn supervisor_count<T: Copy + TryInto<u64> + TryFrom<u64> + Default>(
        &self,
        key: &Key,
        v: &Option<Spanned<T>>,
    ) -> Result<T, ConfigError> {
        Ok(self
            .count(key, &key.path(None), v, &None)?
            .or_else(|| key.default_number().and_then(|n| T::try_from(n).ok()))
            .unwrap_or_default())
    }

    /// `command`: required and not empty; `dir/prog` is relative to the config file, like
    /// socket_dir; a bare name is looked up in PATH.
    pub(super) fn command(
        &self,
        t: Table,
        s: &RawServer,
        span: std::ops::Range<usize>,
    ) -> Result<String, ConfigError> {
        let k = |field: &str| t.key(field, true);
        Ok(match &s.command {
            Some(c) if !c.get_ref().trim().is_empty() => {
                let c = c.get_ref();
                if c.contains('/') && Path::new(c).is_relative() {
                    self.path
                        .parent()
                        .unwrap_or(Path::new("."))
                        .join(c)
                        .to_string_lossy()
                        .into_owned()
                } else {
                    c.clone()
                }
            }
            Some(c) => return Err(self.err(c.span(), &k("command"), "must not be empty")),
            None => {
                return Err(self.err(span, &k("command"), "missing: every server needs a command"))
            }
        })
    }

    /// `restart`: always (default), on-failure or never.
    pub(super) fn restart(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<RestartPolicy, ConfigError> {
        Ok(match s.restart.as_ref().or(d.restart.as_ref()) {
            None => RestartPolicy::Always,
            Some(r) => match r.get_ref().as_str() {
                "always" => RestartPolicy::Always,
                "on-failure" => RestartPolicy::OnFailure,
                "never" => RestartPolicy::Never,
                other => {
                    return Err(self.err(
                        r.span(),
                        &t.key("restart", s.restart.is_some()),
                        &format!("`{other}` is not one of always, on-failure, never"),
                    ))
                }
            },
        })
    }

    /// `roots`: each entry a URI (`scheme:...`) or an absolute path (made a `file://` URI,
    /// named after its last component).
    pub(super) fn roots(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<Vec<Value>, ConfigError> {
        let Some(list) = s.roots.as_ref().or(d.roots.as_ref()) else {
            return Ok(Vec::new());
        };
        let mut roots = Vec::new();
        for entry in list.get_ref() {
            let root = if entry.starts_with('/') {
                let last = entry.trim_end_matches('/').rsplit('/').next().unwrap_or("");
                let uri = format!("file://{}", entry);
                if last.is_empty() {
                    serde_json::json!({"uri": uri})
                } else {
                    serde_json::json!({"uri": uri, "name": last})
                }
            } else if entry.split_once(':').is_some_and(|(scheme, _)| {
                !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            }) {
                serde_json::json!({"uri": entry})
            } else {
                return Err(self.err(
                    list.span(),
                    &t.key("roots", s.roots.is_some()),
                    &format!("`{entry}` is neither a URI (file:///...) nor an absolute path"),
                ));
            };
            roots.push(root);
        }
        Ok(roots)
    }

    /// `client_roots`: `caller` (default) or `none`.
    pub(super) fn client_roots(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<ClientRoots, ConfigError> {
        Ok(match s.client_roots.as_ref().or(d.client_roots.as_ref()) {
            None => ClientRoots::Caller,
            Some(r) => match r.get_ref().as_str() {
                "caller" => ClientRoots::Caller,
                "none" => ClientRoots::None,
                other => {
                    return Err(self.err(
                        r.span(),
                        &t.key("client_roots", s.client_roots.is_some()),
                        &format!("`{other}` is not one of caller, none"),
                    ))
                }
            },
        })
    }

    /// `method_timeouts`: the defaults' table, then the server's (which wins).
    pub(super) fn method_timeouts(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<BTreeMap<String, Duration>, ConfigError> {
        let mut method_timeouts = BTreeMap::new();
        for (own, table) in [(false, &d.method_timeouts), (true, &s.method_timeouts)] {
            let Some(table) = table else { continue };
            for (method, value) in table {
                let path = format!("{}.{method}", t.key("method_timeouts", own));
                let text = value.get_ref().text();
                let d = parse_duration(&text).map_err(|m| self.err(value.span(), &path, &m))?;
                keys::METHOD_TIMEOUT
                    .check_duration(&text, d)
                    .map_err(|m| self.err(value.span(), &path, &m))?;
                method_timeouts.insert(method.clone(), d);
            }
        }
        Ok(method_timeouts)
    }

    /// `protocol`: auto (default), 2026-07-28 or a handshake revision.
    pub(super) fn protocol(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<vocab::protocol::ChildProtocol, ConfigError> {
        match s.protocol.as_ref().or(d.protocol.as_ref()) {
            None => Ok(vocab::protocol::ChildProtocol::Auto),
            Some(p) => vocab::protocol::ChildProtocol::parse(p.get_ref()).ok_or_else(|| {
                self.err(
                    p.span(),
                    &t.key("protocol", s.protocol.is_some()),
                    &format!(
                        "`{}` is not auto, 2026-07-28 or a handshake revision ({})",
                        p.get_ref(),
                        vocab::protocol::HANDSHAKE_VERSIONS.join(", ")
                    ),
                )
            }),
        }
    }

    /// `user` or `group` (`field`): the own value (`own`), else `default`'s, checked to exist
    /// now with `resolve` (unless the checks are portable), kept as written.
    pub(super) fn identity(
        &self,
        t: Table,
        field: &str,
        own: Option<&Spanned<String>>,
        default: Option<&Spanned<String>>,
        resolve: impl Fn(&str) -> Result<(), String>,
    ) -> Result<Option<String>, ConfigError> {
        let Some(v) = own.or(default) else {
            return Ok(None);
        };
        if self.host {
            resolve(v.get_ref())
                .map_err(|m| self.err(v.span(), &t.key(field, own.is_some()), &m))?;
        }
        Ok(Some(v.get_ref().clone()))
    }
}

/// `client_capabilities` (own, else `[defaults]`): what the supervisor declares to a handshake
/// child; by default roots, sampling and elicitation, which it routes to capable clients.
pub(super) fn client_capabilities(s: &RawServer, d: &RawServer) -> Value {
    s.client_capabilities
        .clone()
        .or(d.client_capabilities.clone())
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .unwrap_or_else(|| serde_json::json!({"roots": {"listChanged": true}, "sampling": {}, "elicitation": {}}))
}
