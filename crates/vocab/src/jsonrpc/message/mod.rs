//! The JSON-RPC 2.0 envelope: parse only `jsonrpc`, `id`, `method`, and keep `params`,
//! `result` and `error` as raw JSON text (design decision 3: a 13 MB screenshot is scanned once
//! and copied verbatim, never decoded into a tree and re-encoded).
//!
//! Owns: classifying a line as request, notification or response, and writing compact
//! single-line messages. Knows nothing about clients, children or routing.

use super::framing::Line;
use bytes::Bytes;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// JSON-RPC error codes used by the supervisor (JSON-RPC 2.0 §5.1, plus the implementation
/// range -32000..-32099 for outages and timeouts, as the official SDKs use it).
pub mod code {
    /// Invalid JSON was received (a client's garbage line, field case K02).
    pub const PARSE_ERROR: i64 = -32700;
    /// Valid JSON that is not a JSON-RPC message.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method is not served.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid params.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error: the supervisor could not route a child's request (field case K06).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The server is unreachable: exited, starting, backing off, failed or stopped.
    pub const SERVER_UNAVAILABLE: i64 = -32000;
    /// The request passed its deadline (same code as the TypeScript SDK's RequestTimeout).
    pub const REQUEST_TIMEOUT: i64 = -32001;
    /// The supervisor refused the request (limits).
    pub const LIMIT_EXCEEDED: i64 = -32002;
}

/// What a parsed line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Has `method` and `id`.
    Request,
    /// Has `method`, no `id`.
    Notification,
    /// Has `result` or `error` and no `method`.
    Response,
}

/// One JSON-RPC message with its payload kept as raw JSON.
#[derive(Debug)]
pub struct Message {
    /// Request, notification or response.
    pub kind: Kind,
    /// The `id` exactly as written (number, string, or `null`), when present.
    pub id: Option<Box<RawValue>>,
    /// The `method`, for requests and notifications: borrowed for the methods MCP defines
    /// ([`method_name`]), so the common messages allocate nothing for it.
    pub method: Option<Cow<'static, str>>,
    /// Raw `params`, when present.
    pub params: Option<Box<RawValue>>,
    /// Raw `result`, for successful responses: a slice of the line it was read from, never
    /// copied (issue 15 §3: a 64 MiB result is held once, and written out from that buffer).
    pub result: Option<RawText>,
    /// Raw `error`, for error responses.
    pub error: Option<Box<RawValue>>,
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON at all (or invalid UTF-8, or JSON followed by junk on the same line).
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON, but not shaped like a request, notification or response.
    #[error("not a JSON-RPC message: {0}")]
    Shape(String),
}

impl ParseError {
    /// The JSON-RPC code that answers this error: -32700 for bad JSON, -32600 otherwise.
    pub fn code(&self) -> i64 {
        match self {
            ParseError::Json(_) => code::PARSE_ERROR,
            ParseError::Shape(_) => code::INVALID_REQUEST,
        }
    }
}

/// The requests a client sends to a server, in both eras. Also the metrics' `method` label
/// values (`observe::method_label`): their order is the metrics' slot order.
pub const CLIENT_REQUESTS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
];

/// The other method names MCP defines: requests a server sends to a client, and
/// notifications.
const OTHER_METHODS: &[&str] = &[
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/message",
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/roots/list_changed",
];

/// `method` as a `'static` string when it is one MCP defines ([`CLIENT_REQUESTS`] and the
/// others), else a copy.
pub fn method_name(method: &str) -> Cow<'static, str> {
    CLIENT_REQUESTS
        .iter()
        .chain(OTHER_METHODS)
        .find(|m| **m == method)
        .map_or_else(|| Cow::Owned(method.to_string()), |m| Cow::Borrowed(*m))
}

/// Raw JSON text shared with the buffer it was read from (a [`Bytes`] slice: cloning it or
/// keeping it copies nothing). Always valid UTF-8 JSON: it is only made from text serde_json
/// parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct RawText(Bytes);

impl RawText {
    /// The JSON text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The JSON text. Checks UTF-8 again (a fast scan; the text always is UTF-8), so the hot
    /// path uses [`RawText::as_bytes`] or [`RawText::bytes`].
    pub fn get(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("null")
    }

    /// The shared buffer itself (for writing it out as it is).
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// The text as a `RawValue` borrowed from it (parses it again: for the rare paths that
    /// rewrite a result, e.g. between eras).
    pub fn raw(&self) -> Box<RawValue> {
        RawValue::from_string(self.get().to_string()).unwrap_or_else(|_| raw_null())
    }

    /// The text of `part`, which must be a sub-slice of `line`'s bytes; `None` otherwise.
    fn within(line: &Bytes, part: &str) -> Option<RawText> {
        let start = (part.as_ptr() as usize).checked_sub(line.as_ptr() as usize)?;
        let end = start.checked_add(part.len())?;
        (end <= line.len()).then(|| RawText(line.slice(start..end)))
    }

    /// Raw text made from a `RawValue` (a copy: for tests and messages built in place).
    pub fn from_raw(raw: &RawValue) -> RawText {
        RawText(Bytes::copy_from_slice(raw.get().as_bytes()))
    }
}

impl fmt::Debug for RawText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<&'a RawValue>,
    // `Option<Option<..>>` would lose the difference between absent and null; a raw value keeps it.
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Parses one line into messages. A JSON array (a 2025-03-26 batch) yields one message per
/// element; protocol.md "Implications" 3: accept and split, never emit batches. Results stay
/// slices of `line` ([`RawText`]).
pub fn parse_line(line: &Bytes) -> Result<Vec<Result<Message, ParseError>>, ParseError> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let items: Vec<&RawValue> = serde_json::from_slice(line)?;
        if items.is_empty() {
            return Err(ParseError::Shape("empty batch".into()));
        }
        return Ok(items
            .iter()
            .map(|raw| match RawText::within(line, raw.get()) {
                Some(item) => parse_shared(&item.0),
                None => parse_one(raw.get().as_bytes()),
            })
            .collect());
    }
    Ok(vec![parse_shared(line)])
}

/// Parses one line that must hold a single message (copied into a buffer of its own; the
/// relay uses [`parse_shared`]).
pub fn parse_one(line: &[u8]) -> Result<Message, ParseError> {
    parse_shared(&Bytes::copy_from_slice(line))
}

/// Parses one line that must hold a single message; its `result` stays a slice of `line`.
pub fn parse_shared(line: &Bytes) -> Result<Message, ParseError> {
    let env: Envelope = serde_json::from_slice(line).map_err(|e| match e.classify() {
        // Well-formed JSON of the wrong type (`42`, `"method": 1`): JSON-RPC's -32600.
        serde_json::error::Category::Data => ParseError::Shape(e.to_string()),
        _ => ParseError::Json(e),
    })?;
    if env.jsonrpc.map(RawValue::get) != Some("\"2.0\"") {
        return Err(ParseError::Shape("jsonrpc must be \"2.0\"".into()));
    }
    let kind = match (&env.method, &env.result, &env.error) {
        (Some(_), None, None) if env.id.is_some() => Kind::Request,
        (Some(_), None, None) => Kind::Notification,
        (None, Some(_), None) | (None, None, Some(_)) => Kind::Response,
        _ => return Err(ParseError::Shape("needs method, result or error".into())),
    };
    if kind == Kind::Request {
        let id = env.id.map(RawValue::get).unwrap_or("null");
        let ok = matches!(id.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9'));
        if !ok {
            return Err(ParseError::Shape(
                "request id must be a string or a number".into(),
            ));
        }
    }
    Ok(Message {
        kind,
        id: env.id.map(ToOwned::to_owned),
        method: env.method.map(|m| method_name(&m)),
        params: env.params.map(ToOwned::to_owned),
        result: env
            .result
            .map(|r| RawText::within(line, r.get()).unwrap_or_else(|| RawText::from_raw(r))),
        error: env.error.map(ToOwned::to_owned),
    })
}

impl Message {
    /// The method, or `""` for responses.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// Parses `params` into a JSON object (small payloads only: control messages).
    pub fn params_object(&self) -> Option<Map<String, Value>> {
        let raw = self.params.as_deref()?;
        serde_json::from_str(raw.get()).ok()
    }

    /// The `error.code` of an error response.
    pub fn error_code(&self) -> Option<i64> {
        #[derive(Deserialize)]
        struct E {
            code: i64,
        }
        let raw = self.error.as_deref()?;
        serde_json::from_str::<E>(raw.get()).ok().map(|e| e.code)
    }
}

/// `raw` without whitespace outside strings, borrowing when it already is compact. Peers may
/// put spaces, tabs and even `\r` between tokens (valid JSON whitespace); what we write is one
/// compact line (K03). One pass over the bytes, no parsing; text with no whitespace byte at
/// all (the usual case, e.g. base64 screenshots) is found with a SIMD search and borrowed.
pub fn compact(raw: &RawValue) -> std::borrow::Cow<'_, RawValue> {
    let text = raw.get().as_bytes();
    let Some(start) = ws_outside_strings(text) else {
        return std::borrow::Cow::Borrowed(raw);
    };
    // At `start` we are outside any string.
    let (mut in_str, mut escaped) = (false, false);
    let (done, rest) = text.split_at_checked(start).unwrap_or((&[], text));
    let mut out = Vec::with_capacity(text.len());
    out.extend_from_slice(done);
    for &b in rest {
        if in_str {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
        } else if !matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
            if b == b'"' {
                in_str = true;
            }
            out.push(b);
        }
    }
    // Removing ASCII whitespace outside strings from valid JSON keeps it valid UTF-8 and valid
    // JSON, so the fallback is never taken; it exists so that a bug here cannot panic, and it
    // still yields compact JSON (re-encoded through a tree).
    let compacted = String::from_utf8(out)
        .ok()
        .and_then(|s| RawValue::from_string(s).ok());
    std::borrow::Cow::Owned(compacted.unwrap_or_else(|| {
        tracing::error!("compacting JSON failed; re-encoding it");
        serde_json::from_str::<Value>(raw.get())
            .map(|v| self::raw(&v))
            .unwrap_or_else(|_| RawValue::NULL.to_owned())
    }))
}

/// A compact single-line message to write; `\n` is appended by [`Out::encode`].
#[derive(Serialize, Default)]
pub struct Out<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RawValue>,
}

impl<'a> Out<'a> {
    /// A request or notification (`id` `None`).
    pub fn request(
        id: Option<&'a RawValue>,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Self {
        Out {
            jsonrpc: "2.0",
            id,
            method: Some(method),
            params,
            ..Default::default()
        }
    }

    /// A successful response.
    pub fn result(id: &'a RawValue, result: &'a RawValue) -> Self {
        Out {
            jsonrpc: "2.0",
            id: Some(id),
            result: Some(result),
            ..Default::default()
        }
    }

    /// An error response with a raw error object.
    pub fn error(id: &'a RawValue, error: &'a RawValue) -> Self {
        Out {
            jsonrpc: "2.0",
            id: Some(id),
            error: Some(error),
            ..Default::default()
        }
    }

    /// The message as one line of compact JSON plus `\n`.
    pub fn encode(&self) -> Bytes {
        // Room for every piece and for escapes in the method: not grown for usual messages.
        let mut v = Vec::with_capacity(
            64 + self.payload_len()
                + self.id.map_or(0, |i| i.get().len())
                + self.method.map_or(0, |m| 2 * m.len()),
        );
        let (params, result, error) = (
            self.params.map(compact),
            self.result.map(compact),
            self.error.map(compact),
        );
        let id = self.id.map(compact);
        // Written by hand (same bytes as serde_json would write): every piece is already
        // compact, valid JSON, so nothing here can fail.
        v.extend_from_slice(b"{\"jsonrpc\":");
        push_json_str(&mut v, self.jsonrpc);
        if let Some(id) = id.as_deref() {
            push_member(&mut v, b"id", id.get());
        }
        if let Some(method) = self.method {
            v.extend_from_slice(b",\"method\":");
            push_json_str(&mut v, method);
        }
        for (key, value) in [
            (&b"params"[..], params.as_deref()),
            (b"result", result.as_deref()),
            (b"error", error.as_deref()),
        ] {
            if let Some(value) = value {
                push_member(&mut v, key, value.get());
            }
        }
        v.extend_from_slice(b"}\n");
        Bytes::from(v)
    }

    fn payload_len(&self) -> usize {
        [self.params, self.result, self.error]
            .iter()
            .flatten()
            .map(|r| r.get().len())
            .sum()
    }
}

/// A request to the child under our numeric id `id` (same bytes as
/// `Out::request(Some(&raw_u64(id)), method, params).encode()`, without the id's allocation).
pub fn request_line(id: u64, method: &str, params: Option<&RawValue>) -> Bytes {
    let params = params.map(compact);
    let mut v =
        // `{"jsonrpc":"2.0","id":` 22, up to 20 digits, `,"method":""` 12, `,"params":` 10,
        // `}\n` 2, and room for escapes in the method: not grown for any usual request.
        Vec::with_capacity(66 + 2 * method.len() + params.as_ref().map_or(0, |p| p.get().len()));
    v.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let _ = std::io::Write::write_fmt(&mut v, format_args!("{id}"));
    v.extend_from_slice(b",\"method\":");
    push_json_str(&mut v, method);
    if let Some(p) = params.as_deref() {
        push_member(&mut v, b"params", p.get());
    }
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

/// A successful response to `id` whose result is `result` as the child wrote it: a new head
/// and the result's own bytes, never copied (issue 15 §3; same bytes as
/// `Out::result(id, result).encode()`). A result with whitespace outside its strings is
/// compacted into a new buffer instead (K03: what we write is compact).
pub fn result_line(id: &RawValue, result: &RawText) -> Line {
    if ws_outside_strings(result.as_bytes()).is_some() {
        return Out::result(id, &compact(&result.raw())).encode().into();
    }
    let id = compact(id);
    let mut head = Vec::with_capacity(32 + id.get().len());
    head.extend_from_slice(b"{\"jsonrpc\":\"2.0\"");
    push_member(&mut head, b"id", id.get());
    head.extend_from_slice(b",\"result\":");
    Line::spliced(Bytes::from(head), result.bytes().clone(), b"}\n")
}

/// Whether `text` contains `needle`: a SIMD substring search (`str::contains` builds a
/// two-way searcher per call, which showed in the relay's profile). For the searches made on
/// every message, a [`Needle`] also keeps the searcher.
pub fn mentions(text: &str, needle: &str) -> bool {
    memchr::memmem::find(text.as_bytes(), needle.as_bytes()).is_some()
}

/// A substring searched for in every message, its searcher built once:
/// `static TOKEN: Needle = Needle::new(|| Finder::new("progressToken"));`.
pub struct Needle(std::sync::LazyLock<memchr::memmem::Finder<'static>>);

impl Needle {
    /// A needle whose searcher `make` builds on first use.
    pub const fn new(make: fn() -> memchr::memmem::Finder<'static>) -> Needle {
        Needle(std::sync::LazyLock::new(make))
    }

    /// Whether `text` contains it.
    pub fn in_text(&self, text: &[u8]) -> bool {
        self.0.find(text).is_some()
    }
}

static PROGRESS_TOKEN: Needle = Needle::new(|| memchr::memmem::Finder::new("progressToken"));

/// Whether `text` has a JSON whitespace byte anywhere (SIMD search; false means it is
/// compact as it is).
fn has_whitespace(text: &[u8]) -> bool {
    memchr::memchr3(b' ', b'\t', b'\r', text).is_some() || memchr::memchr(b'\n', text).is_some()
}

/// The first JSON whitespace byte of valid JSON `text` that is outside its strings (what
/// compacting removes), if any. Text with no whitespace byte at all is answered by a SIMD
/// search; inside strings the scan jumps from quote to backslash with `memchr`, so the text
/// of a result (which has spaces in its strings) is not walked byte by byte.
fn ws_outside_strings(text: &[u8]) -> Option<usize> {
    if !has_whitespace(text) {
        return None;
    }
    let mut i = 0;
    loop {
        // Outside a string (structure, numbers, literals: short runs).
        let j = text
            .get(i..)?
            .iter()
            .position(|b| matches!(b, b'"' | b' ' | b'\t' | b'\r' | b'\n'))?;
        let at = i + j;
        if text.get(at) != Some(&b'"') {
            return Some(at);
        }
        // Inside a string: to its closing quote, skipping escaped characters.
        let mut k = at + 1;
        loop {
            let p = k + memchr::memchr2(b'"', b'\\', text.get(k..)?)?;
            if text.get(p) == Some(&b'\\') {
                k = p + 2;
            } else {
                k = p + 1;
                break;
            }
        }
        i = k;
    }
}

/// `,"key":` then `raw` (a member whose key needs no escaping).
fn push_member(v: &mut Vec<u8>, key: &[u8], raw: &str) {
    v.extend_from_slice(b",\"");
    v.extend_from_slice(key);
    v.extend_from_slice(b"\":");
    v.extend_from_slice(raw.as_bytes());
}

/// `s` as a JSON string, escaped exactly as serde_json escapes it (`\"`, `\\`, the short
/// forms `\b \t \n \f \r`, and `\u00XX` for other control characters).
fn push_json_str(v: &mut Vec<u8>, s: &str) {
    let hex = |n: u8| if n < 10 { b'0' + n } else { b'a' + n - 10 };
    v.push(b'"');
    let mut from = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0..=0x1f => b"",
            _ => continue,
        };
        v.extend_from_slice(s.as_bytes().get(from..i).unwrap_or_default());
        from = i + 1;
        if short.is_empty() {
            v.extend_from_slice(b"\\u00");
            v.push(hex(b >> 4));
            v.push(hex(b & 0xf));
        } else {
            v.extend_from_slice(short);
        }
    }
    v.extend_from_slice(s.as_bytes().get(from..).unwrap_or_default());
    v.push(b'"');
}

/// Raw JSON text from text known to be valid JSON. The fallback (`null`, logged as an error)
/// is never taken; it exists so that a bug cannot panic the daemon.
fn known_valid(text: String) -> Box<RawValue> {
    RawValue::from_string(text).unwrap_or_else(|e| {
        tracing::error!(error = %e, "produced invalid JSON; sending null instead");
        RawValue::NULL.to_owned()
    })
}

/// Raw JSON text for a value (a `Value` always serializes to valid JSON).
pub fn raw(value: &Value) -> Box<RawValue> {
    known_valid(value.to_string())
}

/// Raw JSON text given as bytes (e.g. an id recovered by [`super::toplevel::TopLevelId`]);
/// `None` when it is not UTF-8 or not one JSON value.
pub fn raw_from_slice(text: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(text).ok()?;
    RawValue::from_string(text.to_owned()).ok()
}

/// Raw JSON for an unsigned integer id.
pub fn raw_u64(n: u64) -> Box<RawValue> {
    known_valid(n.to_string())
}

/// The JSON `null` (used as the id of a -32700 answer).
pub fn raw_null() -> Box<RawValue> {
    RawValue::NULL.to_owned()
}

/// Encodes an error response `{code, message, data?}` to `id`.
pub fn error_response(id: &RawValue, code: i64, message: &str, data: Option<Value>) -> Bytes {
    let mut err = Map::new();
    err.insert("code".into(), code.into());
    err.insert("message".into(), message.into());
    if let Some(data) = data {
        err.insert("data".into(), data);
    }
    Out::error(id, &raw(&Value::Object(err))).encode()
}

/// Encodes a successful response with a `Value` result.
pub fn result_response(id: &RawValue, result: &Value) -> Bytes {
    Out::result(id, &raw(result)).encode()
}

/// A JSON object whose member values stay raw: lets the supervisor rewrite `_meta` in `params`
/// without decoding the (possibly large) `arguments`. Member order is kept.
#[derive(Debug, Default)]
pub struct RawObject(pub Vec<(String, Box<RawValue>)>);

impl RawObject {
    /// Parses raw JSON text that must be an object.
    pub fn parse(raw: &RawValue) -> Option<RawObject> {
        serde_json::from_str(raw.get()).ok()
    }

    /// The member `key`, if present.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// Sets member `key` (replacing it in place, or appending).
    pub fn set(&mut self, key: &str, value: Box<RawValue>) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    /// Back to raw JSON text.
    pub fn to_raw(&self) -> Box<RawValue> {
        // Written by hand: keys are escaped here and values are valid raw JSON, so the text is
        // valid (serde_json's serializer returns a `Result` for the same work).
        let mut v = Vec::with_capacity(
            2 + self
                .0
                .iter()
                .map(|(k, r)| k.len() + r.get().len() + 4)
                .sum::<usize>(),
        );
        v.push(b'{');
        for (i, (k, r)) in self.0.iter().enumerate() {
            if i > 0 {
                v.push(b',');
            }
            push_json_str(&mut v, k);
            v.push(b':');
            v.extend_from_slice(r.get().as_bytes());
        }
        v.push(b'}');
        // Only `&str` pieces were written: always UTF-8.
        let text = String::from_utf8(v)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        known_valid(text)
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<RawObject, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, v));
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Reads `params._meta.progressToken` and replaces it with `new_token()` (called only when
/// there is one). Returns the new params and the original token, or `None` when the params
/// carry no progress token. Only `_meta` is decoded; `arguments` and the rest stay raw.
pub fn swap_progress_token(
    params: &RawValue,
    new_token: impl FnOnce() -> Box<RawValue>,
) -> Option<(Box<RawValue>, Box<RawValue>)> {
    if !PROGRESS_TOKEN.in_text(params.get().as_bytes()) {
        return None;
    }
    let mut obj = RawObject::parse(params)?;
    let mut meta = RawObject::parse(obj.get("_meta")?)?;
    let original = meta.get("progressToken")?.to_owned();
    meta.set("progressToken", new_token());
    obj.set("_meta", meta.to_raw());
    Some((obj.to_raw(), original))
}

/// The top-level `id` of a line that is a JSON object with an `id` and no `method`: a reply
/// the envelope parser refused, which must fail its request rather than leave it to time out.
pub fn malformed_reply_id(line: &[u8]) -> Option<Box<serde_json::value::RawValue>> {
    #[derive(serde::Deserialize)]
    struct Reply {
        id: Option<Box<serde_json::value::RawValue>>,
        method: Option<serde::de::IgnoredAny>,
    }
    let r: Reply = serde_json::from_slice(line).ok()?;
    if r.method.is_some() {
        return None;
    }
    r.id
}

#[cfg(test)]
mod tests;
