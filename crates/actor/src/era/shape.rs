//! Shape checks of child replies (K21): what JSON type a result's members have, read with one
//! pass over the top level and nothing copied. Pure and total: any text in, an answer out.

use serde_json::value::RawValue;
use serde_json::{json, Value};

/// JSON's insignificant whitespace (RFC 8259 §2), nothing more.
pub(super) fn is_json_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// The JSON type of a value, as the shape checks name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number without fraction or exponent that fits an `i64` (what JSON-RPC means by an
    /// integer error code).
    Integer,
    /// Any other number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonKind {
    /// The kind with its article, for messages: `an array`, `null`, ...
    pub fn describe(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Bool => "a boolean",
            JsonKind::Integer => "an integer",
            JsonKind::Number => "a number",
            JsonKind::String => "a string",
            JsonKind::Array => "an array",
            JsonKind::Object => "an object",
        }
    }
}

/// A value's kind (contents skipped, never kept), and whether it is the string `"complete"`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    kind: JsonKind,
    complete: bool,
}

impl<'de> serde::Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Null))
            }
            fn visit_none<E>(self) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Null))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Bool))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Integer))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Shape, E> {
                Ok(Shape::of(if i64::try_from(v).is_ok() {
                    JsonKind::Integer
                } else {
                    JsonKind::Number
                }))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
                Ok(Shape::of(JsonKind::Number))
            }
            fn visit_str<E>(self, v: &str) -> Result<Shape, E> {
                Ok(Shape {
                    kind: JsonKind::String,
                    complete: v == "complete",
                })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Shape::of(JsonKind::Array))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
                while a
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Shape::of(JsonKind::Object))
            }
        }
        d.deserialize_any(V)
    }
}

impl Shape {
    fn of(kind: JsonKind) -> Shape {
        Shape {
            kind,
            complete: false,
        }
    }
}

/// What [`scan_top`] found: an object with the shapes of the wanted members (the last of
/// duplicates), or some other kind of value.
pub(super) enum Top<const N: usize> {
    Object([Option<Shape>; N]),
    Other(JsonKind),
}

/// Looks at the top level of `text` only: its kind and, for an object, the shapes of the
/// members named in `keys`. Nothing is allocated and nested values are skipped, so this is
/// cheap on a large result. `None` when `text` is not one JSON value (or nests deeper than
/// serde_json's recursion limit, which a `RawValue` it parsed cannot).
pub(super) fn scan_top<const N: usize>(text: &str, keys: [&str; N]) -> Option<Top<N>> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
    struct Seed<'k, const N: usize>(&'k [&'k str; N]);
    impl<'de, const N: usize> DeserializeSeed<'de> for Seed<'_, N> {
        type Value = Top<N>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Top<N>, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de, const N: usize> Visitor<'de> for Seed<'_, N> {
        type Value = Top<N>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Top<N>, A::Error> {
            let mut found = [None; N];
            while let Some(i) = a.next_key_seed(KeySeed(self.0))? {
                match i.and_then(|i| found.get_mut(i)) {
                    Some(slot) => *slot = Some(a.next_value::<Shape>()?),
                    None => {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Top::Object(found))
        }
        fn visit_unit<E>(self) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Null))
        }
        fn visit_none<E>(self) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Null))
        }
        fn visit_bool<E>(self, _: bool) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Bool))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Integer))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Top<N>, E> {
            Ok(Top::Other(if i64::try_from(v).is_ok() {
                JsonKind::Integer
            } else {
                JsonKind::Number
            }))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::Number))
        }
        fn visit_str<E>(self, _: &str) -> Result<Top<N>, E> {
            Ok(Top::Other(JsonKind::String))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Top<N>, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Top::Other(JsonKind::Array))
        }
    }
    /// A member name, compared with the wanted keys without being copied.
    struct KeySeed<'k, const N: usize>(&'k [&'k str; N]);
    impl<'de, const N: usize> DeserializeSeed<'de> for KeySeed<'_, N> {
        type Value = Option<usize>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl<const N: usize> Visitor<'_> for KeySeed<'_, N> {
        type Value = Option<usize>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a member name")
        }
        fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
            Ok(self.0.iter().position(|k| *k == v))
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let top = Seed(&keys).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(top)
}

/// How a reply from a child (or a client answering a child's request) breaks the MCP schema.
/// The actor turns it into a JSON-RPC error for that one request ([`MalformedReply::error`])
/// instead of forwarding or translating it (K21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MalformedReply {
    /// The `result` of a known method is not an object (every MCP result is one).
    #[error("the result of {method} is {found}, not an object")]
    ResultNotObject {
        /// The request's method.
        method: &'static str,
        /// What it was instead.
        found: &'static str,
    },
    /// A member the schema requires is missing or of the wrong kind.
    #[error("the result of {method} has {found} as `{member}`, not {expected}")]
    ResultMember {
        /// The request's method.
        method: &'static str,
        /// The member.
        member: &'static str,
        /// The kind the schema asks for (`an array`, ...).
        expected: &'static str,
        /// What it was instead (`nothing` when missing).
        found: &'static str,
    },
    /// The `error` member is not an object.
    #[error("the error is {found}, not an object")]
    ErrorNotObject {
        /// What it was instead.
        found: &'static str,
    },
    /// The error's `code` is missing or not an integer.
    #[error("the error's code is {found}, not an integer")]
    ErrorCode {
        /// What it was instead (`nothing` when missing).
        found: &'static str,
    },
    /// The error's `message` is missing or not a string.
    #[error("the error's message is {found}, not a string")]
    ErrorMessage {
        /// What it was instead (`nothing` when missing).
        found: &'static str,
    },
    /// Not one JSON value (cannot come from a parsed envelope; kept so the checks are total).
    #[error("the reply is not valid JSON")]
    NotJson,
}

impl MalformedReply {
    /// The JSON-RPC `error` object that replaces the reply for the client:
    /// `{"code":-32603,"message":"server <name> sent a malformed reply: <why>","data":{"server":<name>}}`.
    /// -32603 (internal error) because the request was valid and the server failed it.
    pub fn error(&self, server: &str) -> Value {
        json!({
            "code": vocab::jsonrpc::message::code::INTERNAL_ERROR,
            "message": format!("server {server} sent a malformed reply: {self}"),
            "data": {"server": server},
        })
    }
}

/// A member a result may need: `(name, kind, required)`.
type Member = (&'static str, JsonKind, bool);

/// Members a result must have, by method (MCP schema 2025-11-25 and 2026-07-28, `Result`
/// types): `(method, [(member, kind, required)])`. An optional member, when present, must
/// still be of its kind. Kept to the members a client reads first (a list's array, a call's
/// content), so a sloppy but usable child is not refused.
pub(super) const RESULT_SHAPES: &[(&str, &[Member])] = &[
    ("initialize", &[("protocolVersion", JsonKind::String, true)]),
    (
        "server/discover",
        &[
            ("supportedVersions", JsonKind::Array, true),
            ("capabilities", JsonKind::Object, false),
        ],
    ),
    ("ping", &[]),
    ("tools/list", &[("tools", JsonKind::Array, true)]),
    ("tools/call", &[("content", JsonKind::Array, false)]),
    ("prompts/list", &[("prompts", JsonKind::Array, true)]),
    ("prompts/get", &[("messages", JsonKind::Array, true)]),
    ("resources/list", &[("resources", JsonKind::Array, true)]),
    (
        "resources/templates/list",
        &[("resourceTemplates", JsonKind::Array, true)],
    ),
    ("resources/read", &[("contents", JsonKind::Array, true)]),
    ("resources/subscribe", &[]),
    ("resources/unsubscribe", &[]),
    (
        "completion/complete",
        &[("completion", JsonKind::Object, true)],
    ),
    ("logging/setLevel", &[]),
    ("subscriptions/listen", &[]),
    ("tasks/get", &[]),
    ("tasks/update", &[]),
    ("tasks/cancel", &[]),
    ("tasks/result", &[]),
    ("tasks/list", &[("tasks", JsonKind::Array, true)]),
    // Answers of clients to a child's requests.
    ("roots/list", &[("roots", JsonKind::Array, true)]),
    ("sampling/createMessage", &[]),
    ("elicitation/create", &[]),
];

/// Checks the shape of a `result` for a request of `method`: for the methods of the MCP schema
/// it must be an object, and the members a client needs first (`tools` of `tools/list`, ...)
/// must be there with the right kind. Members are required only in a complete result
/// (`resultType` absent or `"complete"`): a 2026 `input_required` or `task` result carries
/// others. Any result of a method the schema does not define passes (JSON-RPC allows any
/// value). Only the top level is read; the payload is skipped, never copied. Pure and total.
pub fn check_result_shape(method: &str, result: &RawValue) -> Result<(), MalformedReply> {
    let Some((method, members)) = RESULT_SHAPES.iter().find(|(m, _)| *m == method) else {
        return Ok(());
    };
    // Enough slots for the longest member list above, plus `resultType`.
    let mut keys = ["resultType", "", ""];
    for ((member, _, _), key) in members.iter().zip(keys.iter_mut().skip(1)) {
        *key = member;
    }
    let found = match scan_top(result.get(), keys) {
        None => return Err(MalformedReply::NotJson),
        Some(Top::Other(kind)) => {
            return Err(MalformedReply::ResultNotObject {
                method,
                found: kind.describe(),
            })
        }
        Some(Top::Object(found)) => found,
    };
    let [result_type, rest @ ..] = found;
    let complete = result_type.is_none_or(|s| s.complete);
    for ((member, kind, required), shape) in members.iter().zip(rest) {
        let wrong = match shape {
            Some(s) => s.kind != *kind,
            None => *required && complete,
        };
        if wrong {
            return Err(MalformedReply::ResultMember {
                method,
                member,
                expected: kind.describe(),
                found: shape.map_or("nothing", |s| s.kind.describe()),
            });
        }
    }
    Ok(())
}

/// Checks the `error` member of a reply (JSON-RPC 2.0 §5.1): an object with an integer `code`
/// and a string `message` (`data` may be anything). Pure and total.
pub fn check_error_shape(error: &RawValue) -> Result<(), MalformedReply> {
    match scan_top(error.get(), ["code", "message"]) {
        None => Err(MalformedReply::NotJson),
        Some(Top::Other(kind)) => Err(MalformedReply::ErrorNotObject {
            found: kind.describe(),
        }),
        Some(Top::Object([code, message])) => {
            if code.is_none_or(|c| c.kind != JsonKind::Integer) {
                return Err(MalformedReply::ErrorCode {
                    found: code.map_or("nothing", |c| c.kind.describe()),
                });
            }
            if message.is_none_or(|m| m.kind != JsonKind::String) {
                return Err(MalformedReply::ErrorMessage {
                    found: message.map_or("nothing", |m| m.kind.describe()),
                });
            }
            Ok(())
        }
    }
}
