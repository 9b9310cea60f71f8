//! Streaming, sans-IO recovery of the top-level `id` of a JSON object that is too large to
//! keep (field cases K04 and K22).
//!
//! Owns: [`TopLevelId`], a scanner fed every byte of a discarded line, in chunks split
//! anywhere, that finds the member named `id` of the *top-level* object only. An `id` inside
//! `result.content[0]` (K22: the TypeScript SDK writes the envelope's `id` last, after the
//! payload) is never taken for it.
//!
//! Rules:
//! - memory is O(1): a 128-level bracket stack in one `u128`, at most [`ID_MAX`] bytes of the
//!   id and [`KEY_MAX`] bytes of the top-level key being read, whatever the line's length;
//! - keys are compared *decoded*, as serde_json (and so [`super::message::parse_one`]) compares
//!   them: `"i\u0064"` is the member `id`. A raw key longer than [`KEY_MAX`] bytes cannot
//!   decode to `id` or `method` and is not decoded;
//! - the id is reported only when it is a JSON string, number or `null` of at most [`ID_MAX`]
//!   bytes as written (quotes and escapes included), and only when the whole input is one
//!   complete JSON object (nothing but whitespace after it), with `id` at most once;
//! - structure (brackets, strings, escapes, `:` and `,`) is checked on every byte; scalars
//!   other than the id (numbers, `true`, ...) and UTF-8 outside the id and top-level keys are
//!   not validated (a line serde_json accepts is always scanned to the same id; a line it
//!   rejects may still yield one, which only decides which request fails);
//! - nesting deeper than 128 levels ends the scan with no result.

use bytes::Bytes;

/// Longest id kept, in bytes as written (quotes and escapes included). Longer ids are
/// reported as absent: the ids the supervisor hands out are short numbers, and clients' ids
/// are short strings or numbers in practice.
pub const ID_MAX: usize = 256;

/// Longest raw top-level key (without its quotes) that is decoded and compared: `method`
/// written entirely as `\uXXXX` escapes is 6 × 6 = 36 bytes.
pub const KEY_MAX: usize = 36;

/// Deepest nesting tracked (serde_json's own recursion limit is 128 as well).
const MAX_DEPTH: u32 = 128;

/// What a complete scan found at the top level of the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopLevel {
    /// The raw JSON text of the top-level `id` member's value (a string with its quotes and
    /// escapes as written, a number as written, or `null`); `None` when the member is absent,
    /// is not a string, number or null, or is longer than [`ID_MAX`] bytes.
    pub id: Option<Bytes>,
    /// Whether the object has a top-level `method` member: a request or notification, not a
    /// response.
    pub has_method: bool,
}

/// Which top-level member a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Id,
    Method,
    Other,
}

/// What the next structural byte must be (outside strings and bare scalars).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (the top-level one, after `:`, or after `,` in an array).
    Value,
    /// After `[`: a value or `]`.
    ValueOrClose,
    /// After `{`: a key or `}`.
    KeyOrClose,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value inside a container: `,` or the closing bracket.
    CommaOrClose,
    /// The top-level object is closed: only whitespace may follow.
    Done,
}

/// What a string or bare scalar being read is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A value that does not matter: skipped.
    Value,
    /// A key below the top level: skipped.
    Key,
    /// A key of the top-level object: kept (up to [`KEY_MAX`]) to compare.
    TopKey,
    /// The value of the top-level `id`: kept (up to [`ID_MAX`]).
    Id,
}

/// Where the lexer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Between tokens.
    Between,
    /// Inside a string; `escape` after a backslash.
    Str { role: Role, escape: bool },
    /// Inside a number or literal (anything up to whitespace or a structural byte).
    Bare { role: Role },
}

/// The state of the top-level `id` member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Absent,
    /// Its value is being read into `TopLevelId::id`.
    Reading,
    /// A string, number or null, valid and short enough: `TopLevelId::id` holds it.
    Found,
    /// Present but not reportable (object, array, boolean, or too long).
    Unusable,
}

/// Streaming finder of the top-level `id` (and whether there is a top-level `method`).
/// Feed the line with [`TopLevelId::feed`] in any number of chunks, then ask
/// [`TopLevelId::finish`]. The answer does not depend on how the input was split.
#[derive(Debug, Clone)]
pub struct TopLevelId {
    expect: Expect,
    lex: Lex,
    /// Containers open: 0 before the top-level `{`, 1 inside it.
    depth: u32,
    /// Bit `d` is set when the container at depth `d + 1` is an object.
    objects: u128,
    /// The name of the top-level key just read, until its value starts.
    pending: Name,
    slot: Slot,
    has_method: bool,
    /// The top-level key being read, quotes included (at most [`KEY_MAX`] + 2 bytes).
    key: Vec<u8>,
    /// The key being read is longer than [`KEY_MAX`]: it names neither `id` nor `method`.
    key_overflow: bool,
    /// The raw text of the top-level id's value (at most [`ID_MAX`] bytes).
    id: Vec<u8>,
    /// The input cannot be one JSON object: nothing is reported and the rest is ignored.
    failed: bool,
}

impl Default for TopLevelId {
    fn default() -> Self {
        Self::new()
    }
}

impl TopLevelId {
    /// A scanner at the start of a line.
    pub fn new() -> Self {
        TopLevelId {
            expect: Expect::Value,
            lex: Lex::Between,
            depth: 0,
            objects: 0,
            pending: Name::Other,
            slot: Slot::Absent,
            has_method: false,
            key: Vec::new(),
            key_overflow: false,
            id: Vec::new(),
            failed: false,
        }
    }

    /// Feeds the next bytes of the line (any split; `\r` and `\n` count as JSON whitespace).
    pub fn feed(&mut self, mut data: &[u8]) {
        while !self.failed {
            let Some((&b, rest)) = data.split_first() else {
                return;
            };
            match self.lex {
                Lex::Str { role, escape: true } => {
                    self.capture(role, b);
                    self.lex = Lex::Str {
                        role,
                        escape: false,
                    };
                    data = rest;
                }
                Lex::Str {
                    role: role @ (Role::Value | Role::Key),
                    escape: false,
                } => {
                    // Skipped strings (base64 payloads, mostly) are searched, not walked.
                    let Some(i) = memchr::memchr2(b'"', b'\\', data) else {
                        return;
                    };
                    let hit = data.get(i).copied();
                    data = data.get(i + 1..).unwrap_or_default();
                    if hit == Some(b'\\') {
                        self.lex = Lex::Str { role, escape: true };
                    } else {
                        self.end_string(role);
                    }
                }
                Lex::Str {
                    role,
                    escape: false,
                } => {
                    self.capture(role, b);
                    data = rest;
                    match b {
                        b'\\' => self.lex = Lex::Str { role, escape: true },
                        b'"' => self.end_string(role),
                        _ => {}
                    }
                }
                Lex::Bare { role } => {
                    if is_delimiter(b) {
                        // Not consumed: the delimiter is read as structure next.
                        self.end_bare(role);
                    } else {
                        self.capture(role, b);
                        data = rest;
                    }
                }
                Lex::Between => {
                    data = rest;
                    self.structural(b);
                }
            }
        }
    }

    /// The result once the whole line was fed: `None` when the input is not one complete JSON
    /// object (truncated, malformed, nested deeper than 128, or with two top-level `id`s).
    pub fn finish(&self) -> Option<TopLevel> {
        if self.failed || self.lex != Lex::Between || self.expect != Expect::Done {
            return None;
        }
        let id = (self.slot == Slot::Found).then(|| Bytes::copy_from_slice(&self.id));
        Some(TopLevel {
            id,
            has_method: self.has_method,
        })
    }

    /// Whether the scan already knows the input is not one JSON object.
    pub fn failed(&self) -> bool {
        self.failed
    }

    fn fail(&mut self) {
        self.failed = true;
        // Give back what was kept; nothing will be reported.
        self.key = Vec::new();
        self.id = Vec::new();
    }

    fn capture(&mut self, role: Role, b: u8) {
        match role {
            Role::TopKey => {
                // +1 for the opening quote kept in front; the closing one is pushed too.
                if self.key.len() < KEY_MAX + 2 {
                    self.key.push(b);
                } else {
                    self.key_overflow = true;
                }
            }
            Role::Id if self.slot == Slot::Reading => {
                if self.id.len() < ID_MAX {
                    self.id.push(b);
                } else {
                    // Too long to report; stop keeping it.
                    self.slot = Slot::Unusable;
                    self.id = Vec::new();
                }
            }
            Role::Id | Role::Value | Role::Key => {}
        }
    }

    fn structural(&mut self, b: u8) {
        if is_whitespace(b) {
            return;
        }
        match self.expect {
            Expect::Done => self.fail(),
            Expect::Colon if b == b':' => self.expect = Expect::Value,
            Expect::Colon => self.fail(),
            Expect::CommaOrClose => match b {
                b',' => {
                    self.expect = if self.in_object() {
                        Expect::Key
                    } else {
                        Expect::Value
                    }
                }
                b'}' | b']' => self.close(b),
                _ => self.fail(),
            },
            Expect::KeyOrClose if b == b'}' => self.close(b),
            Expect::KeyOrClose | Expect::Key if b == b'"' => {
                if self.depth == 1 {
                    self.key.clear();
                    self.key.push(b'"');
                    self.key_overflow = false;
                    self.lex = Lex::Str {
                        role: Role::TopKey,
                        escape: false,
                    };
                } else {
                    self.lex = Lex::Str {
                        role: Role::Key,
                        escape: false,
                    };
                }
            }
            Expect::KeyOrClose | Expect::Key => self.fail(),
            Expect::ValueOrClose if b == b']' => self.close(b),
            Expect::ValueOrClose | Expect::Value => self.value(b),
        }
    }

    /// `b` starts a value.
    fn value(&mut self, b: u8) {
        if self.depth == 0 && b != b'{' {
            // The line is not an object (a batch, a scalar, garbage).
            self.fail();
            return;
        }
        let is_id = self.depth == 1 && self.pending == Name::Id;
        if self.depth == 1 {
            self.pending = Name::Other;
        }
        let role = if is_id {
            self.slot = Slot::Reading;
            self.id.clear();
            Role::Id
        } else {
            Role::Value
        };
        match b {
            b'{' | b'[' => {
                if is_id {
                    self.slot = Slot::Unusable;
                }
                self.open(b == b'{');
            }
            b'"' => {
                self.capture(role, b);
                self.lex = Lex::Str {
                    role,
                    escape: false,
                };
            }
            b'}' | b']' | b',' | b':' => self.fail(),
            _ => {
                self.capture(role, b);
                self.lex = Lex::Bare { role };
            }
        }
    }

    fn open(&mut self, object: bool) {
        if self.depth >= MAX_DEPTH {
            self.fail();
            return;
        }
        if object {
            self.objects |= 1u128 << self.depth;
        } else {
            self.objects &= !(1u128 << self.depth);
        }
        self.depth += 1;
        self.expect = if object {
            Expect::KeyOrClose
        } else {
            Expect::ValueOrClose
        };
    }

    fn close(&mut self, b: u8) {
        if self.depth == 0 || (b == b'}') != self.in_object() {
            self.fail();
            return;
        }
        self.depth -= 1;
        self.after_value();
    }

    /// Whether the innermost open container is an object (`false` when none is open).
    fn in_object(&self) -> bool {
        self.depth > 0 && self.objects & (1u128 << (self.depth - 1)) != 0
    }

    fn after_value(&mut self) {
        self.expect = if self.depth == 0 {
            Expect::Done
        } else {
            Expect::CommaOrClose
        };
    }

    fn end_string(&mut self, role: Role) {
        self.lex = Lex::Between;
        match role {
            Role::Key => self.expect = Expect::Colon,
            Role::TopKey => {
                self.expect = Expect::Colon;
                let name = if self.key_overflow {
                    Name::Other
                } else {
                    match decode_name(&self.key) {
                        Some(n) => n,
                        None => return self.fail(),
                    }
                };
                match name {
                    // Two `id` members: serde_json rejects such an envelope, so do we.
                    Name::Id if self.slot != Slot::Absent => return self.fail(),
                    Name::Method => self.has_method = true,
                    Name::Id | Name::Other => {}
                }
                self.pending = name;
            }
            Role::Id => {
                self.settle_id();
                self.after_value();
            }
            Role::Value => self.after_value(),
        }
    }

    fn end_bare(&mut self, role: Role) {
        self.lex = Lex::Between;
        if role == Role::Id {
            self.settle_id();
        }
        self.after_value();
    }

    /// The id's value ended: keep it if it is a valid string, number or null.
    fn settle_id(&mut self) {
        if self.slot != Slot::Reading {
            return;
        }
        let valid = std::str::from_utf8(&self.id)
            .ok()
            .and_then(|s| serde_json::from_str::<&serde_json::value::RawValue>(s).ok())
            .is_some();
        if !valid {
            // Not JSON: the line cannot be a message at all.
            self.fail();
            return;
        }
        let reportable = matches!(self.id.first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n'));
        if reportable {
            self.slot = Slot::Found;
        } else {
            self.slot = Slot::Unusable;
            self.id = Vec::new();
        }
    }
}

/// JSON whitespace (RFC 8259 §2).
fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Bytes that end a bare scalar.
fn is_delimiter(b: u8) -> bool {
    is_whitespace(b) || matches!(b, b',' | b'}' | b']' | b':' | b'"' | b'{' | b'[')
}

/// Which member a quoted raw key (both quotes included) names; `None` if its escapes are
/// invalid (serde_json would reject the line).
fn decode_name(quoted: &[u8]) -> Option<Name> {
    let name = match quoted {
        b"\"id\"" => Name::Id,
        b"\"method\"" => Name::Method,
        _ if !quoted.contains(&b'\\') => Name::Other,
        _ => match serde_json::from_slice::<String>(quoted).ok()?.as_str() {
            "id" => Name::Id,
            "method" => Name::Method,
            _ => Name::Other,
        },
    };
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(input: &[u8]) -> Option<TopLevel> {
        let mut s = TopLevelId::new();
        s.feed(input);
        s.finish()
    }

    fn id(input: &str) -> Option<String> {
        scan(input.as_bytes())
            .and_then(|t| t.id)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn split_every_way(input: &[u8]) {
        let whole = scan(input);
        for at in 0..=input.len() {
            let (a, b) = input.split_at(at);
            let mut s = TopLevelId::new();
            s.feed(a);
            s.feed(b);
            assert_eq!(s.finish(), whole, "split at {at}");
        }
        let mut s = TopLevelId::new();
        for b in input {
            s.feed(std::slice::from_ref(b));
        }
        assert_eq!(s.finish(), whole, "byte by byte");
    }

    #[test]
    fn nested_id_before_the_top_level_one_is_ignored_case_k22() {
        let line = r#"{"jsonrpc":"2.0","result":{"content":[{"id":3,"type":"text","text":"xxxx"}],"structuredContent":{"id":"nested"}},"id":7}"#;
        assert_eq!(id(line).as_deref(), Some("7"));
        split_every_way(line.as_bytes());
    }

    #[test]
    fn id_first_and_id_last() {
        assert_eq!(
            id(r#"{"id":"a-1","jsonrpc":"2.0","result":{"id":9}}"#).as_deref(),
            Some("\"a-1\"")
        );
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","result":{"id":9},"id":-12}"#).as_deref(),
            Some("-12")
        );
        assert_eq!(
            id(" \t{ \"id\" :\r\n 5 , \"result\" : [ ] } \r").as_deref(),
            Some("5")
        );
    }

    #[test]
    fn ids_only_in_nested_values_or_strings_give_none() {
        for line in [
            r#"{"result":{"id":3}}"#,
            r#"{"result":[{"id":3},["id",4]]}"#,
            r#"{"result":"\"id\":5","x":"id"}"#,
            r#"{"a":{"b":{"c":[[{"id":1}]]}}}"#,
            r#"{"note":"{\"id\":6}"}"#,
        ] {
            let t = scan(line.as_bytes()).expect(line);
            assert_eq!(t.id, None, "{line}");
        }
    }

    #[test]
    fn escaped_quotes_and_backslashes_in_strings_do_not_confuse_it() {
        let line = r#"{"result":"a\"},\"id\":1,\"x\":\\","id":2}"#;
        assert_eq!(id(line).as_deref(), Some("2"));
        let line = r#"{"result":"ends in a backslash\\","id":"q\"\\\u0041"}"#;
        assert_eq!(id(line).as_deref(), Some(r#""q\"\\\u0041""#));
        split_every_way(line.as_bytes());
    }

    #[test]
    fn keys_are_compared_decoded() {
        assert_eq!(id(r#"{"i\u0064":4,"result":{}}"#).as_deref(), Some("4"));
        assert_eq!(
            id(r#"{"\u0069\u0064":"x","result":{}}"#).as_deref(),
            Some("\"x\"")
        );
        let m = r#"{"\u006d\u0065\u0074\u0068\u006f\u0064":"ping","id":1}"#;
        assert_eq!(
            scan(m.as_bytes()),
            Some(TopLevel {
                id: Some(Bytes::from_static(b"1")),
                has_method: true
            })
        );
        // A key that only looks like `id` before decoding is another member.
        assert_eq!(id(r#"{"id ":1,"idx":2,"Id":3}"#), None);
        // Invalid escapes in a top-level key: not JSON.
        assert_eq!(scan(br#"{"i\q":1}"#), None);
    }

    #[test]
    fn number_null_and_unusable_ids() {
        for (line, want) in [
            (r#"{"id":0}"#, Some("0")),
            (r#"{"id":1.5e3}"#, Some("1.5e3")),
            (
                r#"{"id":18446744073709551616}"#,
                Some("18446744073709551616"),
            ),
            (r#"{"id":null}"#, Some("null")),
            (r#"{"id":true}"#, None),
            (r#"{"id":{"id":1}}"#, None),
            (r#"{"id":[1]}"#, None),
        ] {
            assert_eq!(id(line).as_deref(), want, "{line}");
        }
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(ID_MAX));
        assert_eq!(scan(long.as_bytes()).map(|t| t.id), Some(None));
        let fits = format!(r#"{{"id":"{}"}}"#, "x".repeat(ID_MAX - 2));
        assert_eq!(id(&fits).map(|s| s.len()), Some(ID_MAX));
    }

    #[test]
    fn incomplete_or_malformed_input_gives_nothing() {
        for line in [
            &br#"{"id":1,"result":{"#[..],
            br#"{"id":1}{"id":2}"#,
            br#"{"id":1} x"#,
            br#"{"id":1,"id":2}"#,
            br#"{"id":01x}"#,
            br#"{"id":1,}"#,
            br#"[{"id":1}]"#,
            br#"{"id":1]"#,
            br#"{"id" 1}"#,
            br#""id""#,
            b"",
        ] {
            assert_eq!(scan(line), None, "{}", String::from_utf8_lossy(line));
        }
        let deep = format!(r#"{{"id":1,"a":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(scan(deep.as_bytes()), None);
        let ok = format!(r#"{{"id":1,"a":{}{}}}"#, "[".repeat(100), "]".repeat(100));
        assert_eq!(id(&ok).as_deref(), Some("1"));
    }

    #[test]
    fn memory_stays_bounded_on_a_huge_line() {
        let mut s = TopLevelId::new();
        s.feed(br#"{"result":{"content":[{"type":"text","text":""#);
        let chunk = vec![b'A'; 64 * 1024];
        for _ in 0..64 {
            s.feed(&chunk);
        }
        s.feed(br#""}]},"id":42}"#);
        assert!(s.key.capacity() <= 64 && s.id.capacity() <= ID_MAX * 2);
        assert_eq!(
            s.finish().and_then(|t| t.id),
            Some(Bytes::from_static(b"42"))
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use serde_json::Value;

        /// Nested values full of `id` keys (and strings that look like members).
        fn nested() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                "[a-z\"\\\\{}:,\\[\\]]{0,12}".prop_map(Value::String),
                Just(Value::String(r#"","id":99,"x":""#.into())),
            ];
            leaf.prop_recursive(5, 48, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    proptest::collection::vec(
                        (
                            prop_oneof![
                                Just("id".to_string()),
                                Just("method".to_string()),
                                "[a-z]{1,4}"
                            ],
                            inner
                        ),
                        0..6
                    )
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn top_id() -> impl Strategy<Value = Value> {
            prop_oneof![
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                "\\PC{0,20}".prop_map(Value::String),
                Just(Value::Null),
            ]
        }

        proptest! {
            #[test]
            fn finds_exactly_the_top_level_id_in_any_order_and_split(
                id in top_id(),
                others in proptest::collection::vec(("[a-z]{1,6}", nested()), 0..6),
                position in any::<proptest::sample::Index>(),
                spaced in any::<bool>(),
                cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
            ) {
                let mut members: Vec<(String, Value)> = others
                    .into_iter()
                    .filter(|(k, _)| k != "id" && k != "method")
                    .collect();
                members.sort_by(|a, b| a.0.cmp(&b.0));
                members.dedup_by(|a, b| a.0 == b.0);
                members.insert(position.index(members.len() + 1), ("id".into(), id.clone()));
                let sep = if spaced { " , " } else { "," };
                let body: Vec<String> = members
                    .iter()
                    .map(|(k, v)| {
                        let v = if spaced {
                            serde_json::to_string_pretty(v).unwrap()
                        } else {
                            v.to_string()
                        };
                        format!("{}:{v}", Value::String(k.clone()))
                    })
                    .collect();
                let text = format!("{{{}}}", body.join(sep));
                let input = text.as_bytes();
                let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
                at.sort_unstable();
                let mut scan = TopLevelId::new();
                let mut from = 0;
                for to in at.into_iter().chain([input.len()]) {
                    scan.feed(&input[from..to]);
                    from = to;
                }
                let top = scan.finish();
                prop_assert!(top.is_some(), "{}", text);
                let got = top.and_then(|t| t.id);
                let want_len = id.to_string().len();
                if want_len > ID_MAX {
                    prop_assert_eq!(got, None);
                } else {
                    // Exactly the text written for it (compared as text: serde_json does not
                    // round-trip every float through a `Value`).
                    let got = got.expect("an id");
                    prop_assert_eq!(std::str::from_utf8(&got).unwrap(), id.to_string());
                }
            }

            /// Against serde_json on arbitrary (mostly invalid) input: whenever serde_json
            /// reads the line as an object, the scanner agrees on the id and on `method`.
            #[test]
            fn agrees_with_serde_json(
                flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..3),
                base in prop_oneof![
                    Just(r#"{"result":{"content":[{"id":3,"text":"a\"b"}]},"id":7}"#),
                    Just(r#"{"i\u0064":"x","method":"m","params":[{"id":1}]}"#),
                    Just(r#"{ "id" : -1.5e3 , "error" : { "id" : null } }"#),
                ],
            ) {
                let mut line = base.as_bytes().to_vec();
                for (at, b) in flips {
                    let i = at.index(line.len());
                    line[i] = b;
                }
                let mut scan = TopLevelId::new();
                scan.feed(&line);
                let top = scan.finish();
                if let Some(want) = serde_probe(&line) {
                    prop_assert_eq!(top, Some(want));
                }
            }
        }

        /// What serde_json (as the envelope parser uses it) finds, for input it accepts.
        fn serde_probe(line: &[u8]) -> Option<TopLevel> {
            #[derive(serde::Deserialize)]
            struct Probe {
                #[serde(default, deserialize_with = "present")]
                id: Option<Box<serde_json::value::RawValue>>,
                method: Option<serde::de::IgnoredAny>,
            }
            fn present<'de, D: serde::Deserializer<'de>>(
                d: D,
            ) -> Result<Option<Box<serde_json::value::RawValue>>, D::Error> {
                serde::Deserialize::deserialize(d).map(Some)
            }
            let p: Probe = serde_json::from_slice(line).ok()?;
            let id = p.id.filter(|r| {
                r.get().len() <= ID_MAX
                    && matches!(r.get().as_bytes()[0], b'"' | b'-' | b'0'..=b'9' | b'n')
            });
            Some(TopLevel {
                id: id.map(|r| Bytes::copy_from_slice(r.get().as_bytes())),
                has_method: p.method.is_some(),
            })
        }
    }
}
