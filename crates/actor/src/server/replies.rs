//! The child's answer to a client's request, as that client gets it (issue 3; issue 13 §2;
//! issue 15 §3): the client's own id, the result shaped for the client's era, and the
//! request's outcome. Pure: the common case is spliced (a new head and the child's bytes);
//! only a result that must change is re-encoded.

use super::util::{is_tool_error, listen_close_result};
use crate::era;
use serde_json::value::RawValue;
use support::observe::Outcome;
use vocab::jsonrpc::framing::Line;
use vocab::jsonrpc::message::{self, Message, Out};

/// How a result must be shaped for the client that gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// As the child wrote it (same era, or nothing to change).
    AsIs,
    /// A 2026 client of a handshake child: `resultType` added (issue 13 §2).
    Modern,
    /// A handshake client of a 2026 child: nothing of 2026 (issue 13 Why 4).
    Legacy,
}

/// The line answering the client's request `id` (`method`) with the child's response `m`,
/// its outcome (`tool_error` for a `tools/call` result with `isError`, `protocol_error` for an
/// error) and the error's code. `None` for a response with neither result nor error.
pub(super) fn client_line(
    id: &RawValue,
    method: &str,
    m: &Message,
    shape: Shape,
) -> Option<(Line, Outcome, Option<i64>)> {
    match (&m.result, &m.error) {
        (Some(r), _) => {
            let outcome = if method == "tools/call" && is_tool_error(r.as_bytes()) {
                Outcome::ToolError
            } else {
                Outcome::Ok
            };
            let line = match shape {
                Shape::Modern => Out::result(id, &era::modernize_result(&r.raw(), method))
                    .encode()
                    .into(),
                Shape::Legacy => Out::result(id, &era::legacy_result(&r.raw()))
                    .encode()
                    .into(),
                Shape::AsIs if method == "subscriptions/listen" => {
                    Out::result(id, &listen_close_result(&r.raw(), id))
                        .encode()
                        .into()
                }
                Shape::AsIs => message::result_line(id, r),
            };
            Some((line, outcome, None))
        }
        (_, Some(e)) => Some((
            Out::error(id, e).encode().into(),
            Outcome::ProtocolError,
            m.error_code(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{client_line, Shape};
    use serde_json::Value;
    use support::observe::Outcome;
    use vocab::jsonrpc::message::{parse_one, raw};

    fn answer(line: &str, id: &str, method: &str, shape: Shape) -> (Value, Outcome, Option<i64>) {
        let m = parse_one(line.as_bytes()).expect("a message");
        let id = raw(&serde_json::from_str::<Value>(id).expect("an id"));
        let (line, outcome, code) = client_line(&id, method, &m, shape).expect("an answer");
        let v = serde_json::from_slice(&line.to_bytes()).expect("JSON");
        (v, outcome, code)
    }

    #[test]
    fn the_client_gets_its_own_id_and_the_childs_result_unchanged() {
        let (v, outcome, code) = answer(
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}],"x":{"y":1}}}"#,
            r#""client-id""#,
            "tools/call",
            Shape::AsIs,
        );
        assert_eq!(v["id"], "client-id");
        assert_eq!(v["result"]["x"]["y"], 1);
        assert_eq!((outcome, code), (Outcome::Ok, None));
    }

    #[test]
    fn a_tool_error_and_an_error_keep_their_outcome_and_code() {
        let (_, outcome, _) = answer(
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":true}}"#,
            "1",
            "tools/call",
            Shape::AsIs,
        );
        assert_eq!(outcome, Outcome::ToolError);
        let (v, outcome, code) = answer(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}"#,
            "1",
            "tools/call",
            Shape::AsIs,
        );
        assert_eq!(v["error"]["code"], -32602);
        assert_eq!((outcome, code), (Outcome::ProtocolError, Some(-32602)));
    }
}
