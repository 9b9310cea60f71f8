//! The daemon's side of `login`, `logout` and the pasted redirect (issue 30, decisions): the
//! sign-in itself runs here, in the daemon (its user, its token store); the CLI only shows or
//! opens the URL and waits.

use super::server::Entry;
use super::{ErrorKind, LoginInfo, Response};
use crate::auth::login::LoginError;
use crate::auth::SignIn;
use crate::mux::server::Command;
use std::sync::Arc;

/// The sign-in of the server, or the answer saying it has none.
fn sign_in(name: &str, e: &Entry) -> Result<Arc<SignIn>, Box<Response>> {
    let Some(remote) = &e.cfg.remote else {
        return Err(Box::new(Response::error(
            ErrorKind::NotApplicable,
            format!("server `{name}` is a child process (`command`), not a url server; it has nothing to sign in to"),
        )));
    };
    match crate::remote::sign_in_of(name, remote) {
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
    })
}

/// `login NAME`: discovery, registration, the URL to open.
pub async fn begin(name: &str, e: &Entry) -> Response {
    let s = match sign_in(name, e) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match s.begin_login().await {
        Ok(start) => Response {
            login: Some(LoginInfo {
                url: start.url,
                timeout_s: start.timeout_s,
            }),
            ..Response::ok()
        },
        Err(e) => *refused(e),
    }
}

/// Waits for the login of `name` begun last.
pub async fn wait(name: &str, e: &Entry) -> Result<(), Box<Response>> {
    let s = sign_in(name, e)?;
    s.wait_login().await.map_err(refused)
}

/// The redirect URL pasted by the user.
pub fn paste(name: &str, e: &Entry, url: &str) -> Response {
    match sign_in(name, e).and_then(|s| s.paste(url).map_err(refused)) {
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
