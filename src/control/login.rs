//! The daemon's side of `login`, `logout` and the pasted redirect (issue 30, decisions): the
//! sign-in itself runs here, in the daemon (its user, its token store); the CLI only shows or
//! opens the URL and waits.
//!
//! A sign-in belongs to the user who started it (issue 47 §2): the uid the control socket saw
//! for `login` (`SO_PEERCRED`), and, when that is root, the `SUDO_UID` the CLI passed
//! ([`owners`]). Only they may complete it (the redirect listener checks each connection's
//! owner), wait for it or paste its redirect.

use super::{ErrorKind, LoginInfo, Response};
use actor::registry::Entry;
use actor::server::Command;
use std::sync::Arc;
use upstream::auth::login::LoginError;
use upstream::auth::SignIn;

/// The sign-in of the server, or the answer saying it has none.
fn sign_in(name: &str, e: &Entry) -> Result<Arc<SignIn>, Box<Response>> {
    let Some(remote) = &e.cfg.remote else {
        return Err(Box::new(Response::error(
            ErrorKind::NotApplicable,
            format!("server `{name}` is a child process (`command`), not a url server; it has nothing to sign in to"),
        )));
    };
    match upstream::remote::sign_in_of(name, remote) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Box::new(Response::error(
            ErrorKind::NotApplicable,
            format!("server `{name}` sends a static `Authorization` header (`headers`); remove it to sign in with OAuth"),
        ))),
        Err(m) => Err(Box::new(Response::error(ErrorKind::NotApplicable, m))),
    }
}

fn refused(e: LoginError) -> Box<Response> {
    Box::new(match e {
        LoginError::NotApplicable(m) => Response::error(ErrorKind::NotApplicable, m),
        LoginError::Failed(m) => Response::error(ErrorKind::Failed, m),
        LoginError::Denied(m) => Response::error(ErrorKind::Denied, m),
    })
}

/// The uids a login asked for by control peer `uid` belongs to (issue 47 §2, decisions): that
/// uid; when it is root, also the `SUDO_UID` its CLI passed (`sudo mcp-supervisor login`: the
/// person's own browser). Nobody else's.
pub fn owners(uid: u32, sudo_uid: Option<u32>) -> Vec<u32> {
    match sudo_uid {
        Some(u) if uid == 0 && u != 0 => vec![0, u],
        _ => vec![uid],
    }
}

/// `login NAME` for `owners`: discovery, registration, the URL to open: the start page on the
/// redirect listener, or with `no_browser` the authorization URL itself (the person copies it
/// from their own terminal to a browser elsewhere).
pub async fn begin(name: &str, e: &Entry, owners: &[u32], no_browser: bool) -> Response {
    let s = match sign_in(name, e) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match s.begin_login(owners).await {
        Ok(start) => Response {
            login: Some(LoginInfo {
                url: if no_browser {
                    start.url
                } else {
                    start.start.or(start.url)
                },
                timeout_s: start.timeout_s,
            }),
            ..Response::ok()
        },
        Err(e) => *refused(e),
    }
}

/// Waits, for control peer `uid`, for the login of `name` begun last.
pub async fn wait(name: &str, e: &Entry, uid: u32) -> Result<(), Box<Response>> {
    let s = sign_in(name, e)?;
    s.wait_login(uid).await.map_err(refused)
}

/// The redirect URL pasted by control peer `uid`.
pub fn paste(name: &str, e: &Entry, url: &str, uid: u32) -> Response {
    match sign_in(name, e).and_then(|s| s.paste(url, uid).map_err(refused)) {
        Ok(()) => Response::ok(),
        Err(r) => *r,
    }
}

/// `logout NAME`: forgets the sign-in, then restarts the session without waiting (a server
/// that needs a sign-in goes `auth_required`, which is the point); answers the server's state.
pub async fn logout(name: &str, e: &Entry) -> Response {
    let s = match sign_in(name, e) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Err(m) = s.logout().await {
        return Response::error(ErrorKind::Failed, m);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    if e.handle.commands.send(Command::Restart(tx)).await.is_ok() {
        let _ = rx.await;
    }
    match super::server::query(&e.handle).await {
        Some(st) => Response {
            servers: Some(super::server::to_values(&[st])),
            ..Response::ok()
        },
        None => Response::ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::owners;

    #[test]
    fn a_login_belongs_to_its_peer_and_to_sudos_user_only_under_root() {
        assert_eq!(owners(1000, None), vec![1000]);
        assert_eq!(owners(1000, Some(1001)), vec![1000]);
        assert_eq!(owners(0, None), vec![0]);
        assert_eq!(owners(0, Some(0)), vec![0]);
        assert_eq!(owners(0, Some(1000)), vec![0, 1000]);
    }
}
