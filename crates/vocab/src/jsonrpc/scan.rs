//! The members of a JSON object read straight from its text, without a parser, an allocation
//! or a copy: for the request log's fields (the tool name and the argument keys of every
//! `tools/call`, issue 15 §2), read on every request.
//!
//! The text must be valid JSON (it always is here: it is a `RawValue` serde_json parsed).
//! On anything else the scan stops early; it never panics and never reads out of bounds.

/// The top-level members of the object `text`, in order: `(key, value)`, the key as written
/// between its quotes (escapes not decoded, see [`key_text`]) and the value's raw JSON text.
/// Empty when `text` is not an object.
pub fn members(text: &str) -> Members<'_> {
    let b = text.as_bytes();
    let start = skip_ws(b, 0);
    let open = b.get(start) == Some(&b'{');
    Members {
        text,
        at: start + 1,
        done: !open,
    }
}

/// Iterator of [`members`].
#[derive(Debug)]
pub struct Members<'a> {
    text: &'a str,
    at: usize,
    done: bool,
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.member();
        if item.is_none() {
            self.done = true;
        }
        item
    }
}

impl<'a> Members<'a> {
    fn member(&mut self) -> Option<(&'a str, &'a str)> {
        let b = self.text.as_bytes();
        let mut i = skip_ws(b, self.at);
        if b.get(i) == Some(&b',') {
            i = skip_ws(b, i + 1);
        }
        if b.get(i) != Some(&b'"') {
            return None; // `}` or not an object member
        }
        let key_end = string_end(b, i)?;
        let key = self.text.get(i + 1..key_end - 1)?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = value_end(b, value_start)?;
        let value = self.text.get(value_start..value_end)?;
        self.at = value_end;
        Some((key, value))
    }
}

/// A key (or the inside of any JSON string) decoded: borrowed when it has no escape.
pub fn key_text(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.contains('\\') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let quoted = format!("\"{raw}\"");
    std::borrow::Cow::Owned(serde_json::from_str::<String>(&quoted).unwrap_or_default())
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// The index just past the string that starts with the quote at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The index just past the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
            ) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    #[test]
    fn reads_members_keys_and_raw_values() {
        let text =
            r#" { "name" : "e\"cho", "arguments":{"a\u0062":[1,{"x":"}"}],"c":-1.5e3},"z":null } "#;
        let m: Vec<_> = members(text).collect();
        assert_eq!(
            m,
            [
                ("name", r#""e\"cho""#),
                ("arguments", r#"{"a\u0062":[1,{"x":"}"}],"c":-1.5e3}"#),
                ("z", "null")
            ]
        );
        let inner: Vec<_> = members(m[1].1).map(|(k, _)| key_text(k)).collect();
        assert_eq!(inner, ["ab", "c"]);
        assert_eq!(members("[1,2]").count(), 0);
        assert_eq!(members("{}").count(), 0);
        assert_eq!(members("\"x\"").count(), 0);
        // Not valid JSON: stops, never panics.
        for bad in [
            "{\"a",
            "{\"a\":",
            "{\"a\":[",
            "{\"a\":\"\\",
            "{\"a\" 1}",
            "{",
        ] {
            let _ = members(bad).count();
        }
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            // Integers only: serde_json's float parsing does not round-trip every f64, which
            // would fail the comparison for a reason that is not the scanner's.
            any::<i64>().prop_map(Value::from),
            "\\PC{0,8}|[\"\\\\\\n\\u{1}{}\\[\\],:]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                proptest::collection::btree_map("\\PC{0,6}|[\"\\\\{}:,]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    proptest! {
        #[test]
        fn members_agree_with_serde_json(
            obj in proptest::collection::btree_map("\\PC{0,6}|[\"\\\\{}:,]{0,4}", json(), 0..6),
            pretty in any::<bool>(),
        ) {
            let v = Value::Object(obj.into_iter().collect());
            let text = if pretty {
                serde_json::to_string_pretty(&v).unwrap()
            } else {
                serde_json::to_string(&v).unwrap()
            };
            let got: Vec<(String, Value)> = members(&text)
                .map(|(k, raw)| (key_text(k).into_owned(), serde_json::from_str(raw).unwrap()))
                .collect();
            let want: Vec<(String, Value)> =
                v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(got, want);
        }
    }
}
