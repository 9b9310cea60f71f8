//! The opening of a session with a fresh child (issue 6 §1; issue 29): what the child's
//! answer to the supervisor's `initialize` or `server/discover` means, and what a child that
//! just became ready is asked ([`after_ready`]). Pure decisions: an answer's takes the answer
//! and the configured `protocol`, and returns the era verdict to record (if the answer settles
//! one) and what to do next ([`Next`]); the caller records the verdict, then carries out the
//! next step (ready, another handshake request, or the stop).
//!
//! No state, no clock, no I/O (the refusals are logged here, where the reason is known).

use crate::era::{self, ChildProtocol, Era, Handshake};
use serde_json::value::RawValue;
use serde_json::Value;
use tracing::error;
use vocab::jsonrpc::message::Message;

/// What follows a handshake answer.
#[derive(Debug)]
pub(super) enum Next {
    /// The session is open with `handshake`; `initialized`: a handshake-era session, so
    /// `notifications/initialized` is written first.
    Ready {
        handshake: Box<Handshake>,
        initialized: bool,
    },
    /// Speak 2026-07-28 to it now: `server/discover` (not a probe) on this same child.
    Discover,
    /// The handshake of that era, on this same child: `initialize` with this version.
    Initialize(&'static str),
    /// The child refused the handshake: it is stopped (`handshake-rejected`).
    Reject,
    /// A 2026 server of a version the supervisor does not speak (its -32022 error, if it gave
    /// one): logged after the verdict is recorded, then stopped like [`Next::Reject`].
    Unsupported(Option<String>),
    /// Nothing (an answer that is neither a result nor an error).
    Nothing,
}

/// An era verdict to record, with why (logged once when `protocol = "auto"`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) era: Era,
    pub(super) why: String,
}

fn verdict(era: Era, why: impl Into<String>) -> Option<Verdict> {
    Some(Verdict {
        era,
        why: why.into(),
    })
}

/// The child's answer `m` to the supervisor's `initialize`: ready, an era switch (a refusal
/// in favour of 2026-07-28 while the era is `auto`), or a rejection.
pub(super) fn initialize_answer(m: &Message, protocol: &ChildProtocol) -> (Option<Verdict>, Next) {
    match (&m.result, &m.error) {
        (Some(r), _) => match serde_json::from_str::<Value>(r.get())
            .ok()
            .and_then(Handshake::from_result)
        {
            Some(hs) => (
                None,
                Next::Ready {
                    handshake: Box::new(hs),
                    initialized: true,
                },
            ),
            None => {
                error!("the child's initialize result has no protocolVersion");
                (None, Next::Reject)
            }
        },
        (_, Some(e)) => {
            let modern = m.error_code() == Some(era::UNSUPPORTED_VERSION)
                && e.get().contains(era::MODERN_VERSION);
            if modern && *protocol == ChildProtocol::Auto {
                // The verdict stopped working (a server upgraded to 2026-only, or one a late
                // era probe already pinned): speak 2026-07-28 to it right away.
                let why = "initialize was refused in favour of 2026-07-28";
                (verdict(Era::Modern, why), Next::Discover)
            } else {
                error!(error = %e.get(), "the child rejected initialize");
                (None, Next::Reject)
            }
        }
        _ => (None, Next::Nothing),
    }
}

/// The answer `m` to the opening `server/discover` (the era probe of `auto` when `probe`):
/// a result of the 2026 shape, or any result from a child pinned to 2026-07-28, means the
/// 2026-07-28 era; -32022 means a 2026 server of another version (rejected); any other answer
/// means the handshake era (then `initialize`, unless the answer already was an initialize
/// result).
pub(super) fn discover_answer(
    m: &Message,
    probe: bool,
    protocol: &ChildProtocol,
) -> (Option<Verdict>, Next) {
    let code = m.error_code();
    // Only a result of the 2026 shape (`supportedVersions` naming 2026-07-28) is a 2026
    // server: a server of the handshake era that answers any method with an empty result (as
    // the conformance suite's client scenarios do) must get `initialize` (issue 29,
    // decisions: "any other answer to the probe means the handshake era"). A server pinned to
    // 2026-07-28 by the operator is taken at its word.
    let pinned = *protocol == ChildProtocol::Modern;
    let modern = m.result.as_ref().and_then(|r| {
        serde_json::from_slice::<Value>(r.as_bytes())
            .ok()
            .filter(|v| {
                pinned
                    || v.get("supportedVersions")
                        .and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|x| x == era::MODERN_VERSION))
            })
    });
    if let Some(v) = modern {
        let next = Next::Ready {
            handshake: Box::new(Handshake::from_discover(v)),
            initialized: false,
        };
        (
            verdict(Era::Modern, "the child answered server/discover"),
            next,
        )
    } else if code == Some(era::UNSUPPORTED_VERSION) {
        // Modern, but not our version: we cannot speak to it; keep it out of rotation.
        let v = verdict(
            Era::Modern,
            "the child answered server/discover with -32022",
        );
        let error = m.error.as_deref().map(|e| RawValue::get(e).to_string());
        (v, Next::Unsupported(error))
    } else if probe || *protocol == ChildProtocol::Auto {
        // The probe's answer, or a remembered 2026 verdict that stopped working (the server
        // was replaced by a handshake-era one): the handshake, on this same child. A naive
        // server that takes any first message for `initialize` answers the probe with an
        // initialize result: that is its handshake, already done.
        let initialized = m.result.as_ref().is_some_and(|r| {
            serde_json::from_slice::<Value>(r.as_bytes())
                .ok()
                .and_then(|v| v.get("protocolVersion").map(Value::is_string))
                .unwrap_or(false)
        });
        if initialized {
            let why = "server/discover was answered with an initialize result";
            // A result: the answer to `initialize` settles no verdict of its own.
            let (_, next) = initialize_answer(m, protocol);
            return (verdict(Era::Handshake, why), next);
        }
        let why = match code {
            Some(c) => format!("server/discover was answered with error {c}"),
            None => "server/discover was answered without the 2026 shape".to_string(),
        };
        (
            verdict(Era::Handshake, why),
            Next::Initialize(era::HANDSHAKE_VERSION),
        )
    } else {
        error!(error = ?m.error.as_deref().map(RawValue::get), "the child rejected server/discover (protocol = 2026-07-28)");
        (None, Next::Reject)
    }
}

/// A request the supervisor makes of a child that just became ready ([`after_ready`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reread {
    /// `logging/setLevel` with the most verbose level clients asked for (a rank of
    /// `era::log_rank`).
    LogLevel(usize),
    /// `resources/subscribe` for a URI clients hold.
    Subscribe(String),
    /// A list to read; `announce`: a change from the cached copy is announced to clients.
    List {
        method: &'static str,
        announce: bool,
    },
}

/// What the supervisor asks a child that just became ready (issue 5 §3-4), in order. After a
/// restart (`restarted`): a handshake-era child (`handshake_child`) gets the log level
/// (`log_level`) and the subscriptions (`uris`) clients hold replayed, and every cached list
/// (`cached`) is read again and announced if it changed. Then each list the child advertises
/// (in `hs`) that is not cached yet is read, so an outage can be answered with the last real
/// list from the start.
pub(super) fn after_ready<'a>(
    hs: &Handshake,
    restarted: bool,
    handshake_child: bool,
    log_level: Option<usize>,
    uris: impl Iterator<Item = &'a String>,
    cached: &[&'static str],
) -> Vec<Reread> {
    let mut asks = Vec::new();
    if restarted {
        if let Some(level) = log_level.filter(|_| handshake_child) {
            asks.push(Reread::LogLevel(level));
        }
        if handshake_child {
            asks.extend(uris.map(|u| Reread::Subscribe(u.clone())));
        }
        asks.extend(cached.iter().map(|method| Reread::List {
            method,
            announce: true,
        }));
    }
    let missing = era::LISTS
        .iter()
        .filter(|(m, _, cap)| hs.has(cap) && !cached.contains(m))
        .map(|(method, _, _)| Reread::List {
            method,
            announce: false,
        });
    asks.extend(missing);
    asks
}

#[cfg(test)]
mod tests {
    use super::{after_ready, discover_answer, initialize_answer, Next, Reread, Verdict};
    use crate::era::{ChildProtocol, Era};
    use vocab::jsonrpc::message::parse_one;

    fn msg(line: &str) -> vocab::jsonrpc::message::Message {
        parse_one(line.as_bytes()).expect("a message")
    }

    #[test]
    fn a_discover_result_of_the_2026_shape_is_the_modern_era_and_ready_without_initialized() {
        let m = msg(
            r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{},"serverInfo":{"name":"s","version":"1"}}}"#,
        );
        let (v, next) = discover_answer(&m, true, &ChildProtocol::Auto);
        assert_eq!(v.map(|v| v.era), Some(Era::Modern));
        assert!(matches!(
            next,
            Next::Ready {
                initialized: false,
                ..
            }
        ));
    }

    #[test]
    fn any_other_answer_to_the_probe_is_the_handshake_era_then_initialize() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            let (v, next) = discover_answer(&msg(line), true, &ChildProtocol::Auto);
            assert_eq!(v.map(|v| v.era), Some(Era::Handshake), "{line}");
            assert!(matches!(next, Next::Initialize(_)), "{line}: {next:?}");
        }
    }

    #[test]
    fn an_initialize_result_to_the_probe_is_the_handshake_already_done() {
        let m = msg(
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}"#,
        );
        let (v, next) = discover_answer(&m, true, &ChildProtocol::Auto);
        assert_eq!(
            v,
            Some(Verdict {
                era: Era::Handshake,
                why: "server/discover was answered with an initialize result".into()
            })
        );
        assert!(matches!(
            next,
            Next::Ready {
                initialized: true,
                ..
            }
        ));
    }

    #[test]
    fn a_refusal_of_initialize_for_2026_switches_era_only_under_auto() {
        let m = msg(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"unsupported","data":{"supported":["2026-07-28"]}}}"#,
        );
        let (v, next) = initialize_answer(&m, &ChildProtocol::Auto);
        assert_eq!(v.map(|v| v.era), Some(Era::Modern));
        assert!(matches!(next, Next::Discover));
        let pinned = ChildProtocol::Handshake("2025-06-18".into());
        let (v, next) = initialize_answer(&m, &pinned);
        assert!(v.is_none());
        assert!(matches!(next, Next::Reject));
    }

    #[test]
    fn a_2026_server_of_another_version_is_rejected_with_the_modern_verdict() {
        let m = msg(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"unsupported"}}"#);
        let (v, next) = discover_answer(&m, true, &ChildProtocol::Auto);
        assert_eq!(v.map(|v| v.era), Some(Era::Modern));
        assert!(matches!(next, Next::Unsupported(Some(_))));
    }

    #[test]
    fn a_ready_child_is_asked_for_its_lists_and_after_a_restart_for_the_replay_first() {
        let m = msg(
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"prompts":{},"logging":{}},"serverInfo":{"name":"s","version":"1"}}}"#,
        );
        let (_, next) = initialize_answer(&m, &ChildProtocol::Auto);
        let Next::Ready { handshake, .. } = next else {
            panic!("{next:?}")
        };
        let uris = ["file:///a".to_string()];
        // The first start: only the advertised lists, nothing announced.
        let first = after_ready(&handshake, false, true, Some(2), uris.iter(), &[]);
        let list = |method, announce| Reread::List { method, announce };
        assert_eq!(
            first,
            [list("tools/list", false), list("prompts/list", false)]
        );
        // A restart: level, subscriptions, the cached lists announced, then the others.
        let again = after_ready(
            &handshake,
            true,
            true,
            Some(2),
            uris.iter(),
            &["tools/list"],
        );
        assert_eq!(
            again,
            [
                Reread::LogLevel(2),
                Reread::Subscribe("file:///a".into()),
                list("tools/list", true),
                list("prompts/list", false),
            ]
        );
        // A 2026 child has no level or subscriptions to replay.
        let modern = after_ready(
            &handshake,
            true,
            false,
            Some(2),
            uris.iter(),
            &["tools/list"],
        );
        assert_eq!(
            modern,
            [list("tools/list", true), list("prompts/list", false)]
        );
    }
}
