//! How deeply JSON text nests, measured in the pass that already reads it (issue 47 §7): the
//! line decoder's search for `\n` ([`super::framing`]), a POST body as it arrives, a url
//! server's body or SSE event. Sans-IO, streaming (any split of the text gives the same
//! answer), O(1) memory.
//!
//! Depth counts arrays and objects: `1` is `{}` or `[1]`, `2` is `{"a":[]}`; a scalar alone is
//! `0`. A bracket inside a string does not count, nor does one after a backslash escape in it.
//! Text is not validated here (the parser does that); on text that is not JSON the count is
//! still finite and never panics, and a stray closing bracket never takes it below zero.
//!
//! The bound is the deepest nesting relayed, inclusive. Its default, [`SERDE_DEEPEST`], is what
//! serde_json reads: its recursion limit (128) refuses the 128th level, so a Rust client
//! (rmcp, anything on serde_json) fails on a line nested 128 deep; the unit test
//! `the_default_is_the_deepest_serde_json_reads` holds the constant to the serde_json we link.
//!
//! Cost: outside strings one branch per byte (a message's structure is a small part of it);
//! inside a string the scan jumps to the next quote, backslash or newline with `memchr3`, so a
//! megabyte of base64 costs what the `\n` search alone cost. Once the bound is passed, the rest
//! of the line is only searched for its `\n`.

/// Deepest nesting serde_json's default recursion limit (128) lets through: 127 arrays and
/// objects inside one another. The default of `max_message_depth`.
pub const SERDE_DEEPEST: usize = 127;

/// The depth of one line or body being read: feed it the text in order, then
/// [`Depth::finish`] says whether it went past the bound (and starts over for the next).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Depth {
    /// The deepest nesting allowed; `u32::MAX` when nothing is measured.
    max: u32,
    /// Arrays and objects open at this point.
    open: u32,
    /// Inside a string.
    in_str: bool,
    /// Inside a string, right after a backslash (the next byte is escaped).
    escape: bool,
    /// The bound was passed.
    over: bool,
}

/// What a [`Depth::scan`] stops at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A `\n` ends the scan (a line: `\n` is never part of one).
    Newline,
    /// Nothing: the whole text is one value (a body; `\n` is whitespace in it).
    Never,
}

impl Depth {
    /// A measure whose bound is `max` levels (values beyond `u32::MAX - 1` are that).
    pub fn new(max: usize) -> Depth {
        Depth {
            max: u32::try_from(max).unwrap_or(u32::MAX - 1).min(u32::MAX - 1),
            open: 0,
            in_str: false,
            escape: false,
            over: false,
        }
    }

    /// No bound: nothing is measured, [`Depth::line_end`] is a plain `\n` search.
    pub fn unbounded() -> Depth {
        Depth {
            max: u32::MAX,
            ..Depth::new(0)
        }
    }

    /// Whether this measure has a bound.
    pub fn bounded(&self) -> bool {
        self.max != u32::MAX
    }

    /// The bound, in levels (`None` when unbounded).
    pub fn max(&self) -> Option<usize> {
        self.bounded().then_some(self.max as usize)
    }

    /// Whether the text fed so far went past the bound.
    pub fn over(&self) -> bool {
        self.over
    }

    /// The text fed since the last call ended: whether it went past the bound. The measure
    /// starts over.
    pub fn finish(&mut self) -> bool {
        let over = self.over;
        self.open = 0;
        self.in_str = false;
        self.escape = false;
        self.over = false;
        over
    }

    /// Feeds `text`, the next part of a line, up to its first `\n`: returns that `\n`'s
    /// index (the bytes before it are measured, the rest are not), or `None` when `text` has
    /// none (all of it is measured). The line decoder's `\n` search.
    pub fn line_end(&mut self, text: &[u8]) -> Option<usize> {
        if self.over || !self.bounded() {
            return memchr::memchr(b'\n', text);
        }
        self.scan(text, Stop::Newline)
    }

    /// Feeds `text`, the next part of a body (one JSON value whatever its lines).
    pub fn feed(&mut self, text: &[u8]) {
        if !self.over && self.bounded() {
            let _ = self.scan(text, Stop::Never);
        }
    }

    /// The common walk; see [`Depth::line_end`] for what it returns with [`Stop::Newline`]
    /// ([`Stop::Never`] always returns `None`).
    fn scan(&mut self, text: &[u8], stop: Stop) -> Option<usize> {
        let newline = stop == Stop::Newline;
        let mut i = 0;
        if self.escape {
            // The escaped byte is the first of this part.
            match text.first() {
                None => return None,
                Some(b'\n') if newline => return Some(0),
                Some(_) => {
                    self.escape = false;
                    i = 1;
                }
            }
        }
        loop {
            if self.in_str {
                // To the string's closing quote, skipping escapes.
                let rest = text.get(i..).unwrap_or_default();
                let at = if newline {
                    memchr::memchr3(b'"', b'\\', b'\n', rest)
                } else {
                    memchr::memchr2(b'"', b'\\', rest)
                };
                let p = i + at?;
                match text.get(p) {
                    Some(b'"') => {
                        self.in_str = false;
                        i = p + 1;
                    }
                    Some(b'\\') => match text.get(p + 1) {
                        None => {
                            self.escape = true;
                            return None;
                        }
                        Some(b'\n') if newline => return Some(p + 1),
                        Some(_) => i = p + 2,
                    },
                    // `\n` (only searched for in a line): the line ends inside the string.
                    _ => return Some(p),
                }
                continue;
            }
            // Outside strings: structure, numbers, literals, whitespace.
            let rest = text.get(i..).unwrap_or_default();
            let mut k = 0;
            let mut hit = None;
            for &b in rest {
                if stops_outside(b) {
                    hit = Some(b);
                    break;
                }
                k += 1;
            }
            let p = i + k;
            match hit {
                None => return None,
                Some(b'"') => self.in_str = true,
                Some(b'[' | b'{') => {
                    self.open += 1;
                    if self.open > self.max {
                        self.over = true;
                        // Nothing more to measure: only the line's end matters now.
                        return if newline {
                            memchr::memchr(b'\n', text.get(p..).unwrap_or_default()).map(|n| p + n)
                        } else {
                            None
                        };
                    }
                }
                Some(b']' | b'}') => self.open = self.open.saturating_sub(1),
                Some(_) if newline => return Some(p),
                // `\n` is whitespace in a body.
                Some(_) => {}
            }
            i = p + 1;
        }
    }
}

/// Whether the walk outside strings stops at `b`: `"`, brackets and `\n`.
#[inline(always)]
const fn stops_outside(b: u8) -> bool {
    matches!(b, b'"' | b'[' | b'{' | b']' | b'}' | b'\n')
}

/// Whether `text` (one JSON value) nests deeper than `max`: one pass, for text measured as a
/// whole (an SSE event's data, tests).
pub fn deeper_than(text: &[u8], max: usize) -> bool {
    let mut d = Depth::new(max);
    d.feed(text);
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `n` arrays inside one another.
    fn arrays(n: usize) -> String {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
    }

    /// The depth of a JSON value, the slow way.
    fn model(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::Array(a) => 1 + a.iter().map(model).max().unwrap_or(0),
            serde_json::Value::Object(o) => 1 + o.values().map(model).max().unwrap_or(0),
            _ => 0,
        }
    }

    #[test]
    fn the_default_is_the_deepest_serde_json_reads() {
        let ok: Result<serde_json::Value, _> = serde_json::from_str(&arrays(SERDE_DEEPEST));
        assert!(ok.is_ok());
        let err = serde_json::from_str::<serde_json::Value>(&arrays(SERDE_DEEPEST + 1))
            .expect_err("serde_json refuses one more level");
        assert!(err.to_string().contains("recursion limit"), "{err}");
        assert!(!deeper_than(
            arrays(SERDE_DEEPEST).as_bytes(),
            SERDE_DEEPEST
        ));
        assert!(deeper_than(
            arrays(SERDE_DEEPEST + 1).as_bytes(),
            SERDE_DEEPEST
        ));
    }

    #[test]
    fn strings_and_escapes_do_not_count() {
        for (text, depth) in [
            ("1", 0),
            ("\"[[[\"", 0),
            ("{}", 1),
            (r#"{"a":"[{[{","b":[1]}"#, 2),
            (r#"{"a\"[":"\\","b":{"c":[[]]}}"#, 4),
            (r#"["\\\"[[[[", [], {"x": "]]]]"}]"#, 2),
            ("[\n[\n]\n]", 2),
        ] {
            assert!(!deeper_than(text.as_bytes(), depth), "{text}");
            assert!(deeper_than(text.as_bytes(), depth.saturating_sub(1)) || depth == 0);
        }
    }

    #[test]
    fn a_line_ends_at_its_newline_wherever_it_is() {
        // In a string, right after a backslash, outside.
        for (text, at) in [
            ("{\"a\":\"x\ny\"}", 7),
            ("{\"a\":\"x\\\ny\"}", 8),
            ("[1,\n2]", 3),
            ("[[[[[[[[[[\n", 10),
        ] {
            let mut d = Depth::new(3);
            assert_eq!(d.line_end(text.as_bytes()), Some(at), "{text:?}");
        }
        let mut d = Depth::unbounded();
        assert_eq!(d.line_end(b"[[[[\n"), Some(4));
        assert!(!d.finish());
    }

    #[test]
    fn stray_closing_brackets_never_go_below_zero() {
        assert!(!deeper_than(b"]]]]}}}}[[", 2));
        assert!(deeper_than(b"]]]]}}}}[[[", 2));
    }

    #[test]
    fn two_hundred_thousand_levels_cost_one_pass_and_no_stack() {
        let text = arrays(200_000);
        let mut d = Depth::new(SERDE_DEEPEST);
        let line = format!("{text}\n{{}}\n");
        assert_eq!(d.line_end(line.as_bytes()), Some(text.len()));
        assert!(d.finish());
        assert_eq!(d.line_end(b"{}\n"), Some(2));
        assert!(!d.finish());
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<i32>().prop_map(serde_json::Value::from),
            "[\\[\\]{}\"\\\\a-z \n\t]{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(12, 64, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[\\[{\"\\\\a-z]{0,6}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Valid JSON as serde_json writes it, pretty or compact, cut anywhere: the value's
        /// depth, the same verdict for every bound and every split.
        #[test]
        fn agrees_with_serde_json_whatever_the_split(
            v in json(),
            pretty in any::<bool>(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            max in 0usize..14,
        ) {
            let text = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }.unwrap();
            let depth = model(&v);
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(text.len() + 1)).collect();
            at.sort_unstable();
            let mut d = Depth::new(max);
            let mut from = 0;
            for to in at.into_iter().chain([text.len()]) {
                d.feed(&text.as_bytes()[from..to]);
                from = to;
            }
            prop_assert_eq!(d.finish(), depth > max);
            if !pretty {
                // A compact line: no `\n` inside; fed as a line in pieces, the same verdict.
                let line = format!("{text}\n");
                let mut d = Depth::new(max);
                let mut seen = 0;
                let mut end = None;
                for piece in line.as_bytes().chunks(3) {
                    if let Some(n) = d.line_end(piece) {
                        end = Some(seen + n);
                        break;
                    }
                    seen += piece.len();
                }
                prop_assert_eq!(end, Some(text.len()));
                prop_assert_eq!(d.finish(), depth > max);
            }
        }

        /// Any bytes, any split: no panic, and the split never changes the verdict or where
        /// the line ends.
        #[test]
        fn any_bytes_any_split_same_verdict(
            bytes in prop::collection::vec(prop_oneof![
                Just(b'['), Just(b']'), Just(b'{'), Just(b'}'), Just(b'"'), Just(b'\\'),
                Just(b'\n'), any::<u8>(),
            ], 0..200),
            cut in any::<prop::sample::Index>(),
            max in 0usize..8,
        ) {
            let whole = {
                let mut d = Depth::new(max);
                let end = d.line_end(&bytes);
                (end, d.finish())
            };
            let c = cut.index(bytes.len() + 1);
            let mut d = Depth::new(max);
            let end = match d.line_end(&bytes[..c]) {
                Some(n) => Some(n),
                None => d.line_end(&bytes[c..]).map(|n| n + c),
            };
            prop_assert_eq!((end, d.finish()), whole);
        }
    }
}
