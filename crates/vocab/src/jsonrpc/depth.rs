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
//! Cost, two modes (`examples/framing_cost.rs` measures them, docs/PERFORMANCE.md):
//! - **counting**, the common case: the `\n` search becomes `memchr3` for `\n`, `[` and `{`,
//!   and only counts opening brackets, strings included. A line with no more of them than the
//!   bound cannot nest deeper, so nothing else is done: an echo costs a few more `memchr`
//!   calls, a megabyte of base64 what the `\n` search alone cost.
//! - **exact**, once a line has more opening brackets than the bound (a long `tools/list`,
//!   JSON quoted in a text): the line is walked from its start with the string state, eight
//!   bytes at a time (SWAR: each word's quotes, backslashes, brackets and `\n` found at once,
//!   only those bytes handled one by one; a long string jumped over with `memchr3`). Only the
//!   part of the line before the switch is read twice, and only for such lines. Once the bound
//!   is passed, the rest of the line is only searched for its `\n`.

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
    /// Walking with the string state (see the module); else only counting `[` and `{`, in
    /// `open`.
    exact: bool,
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
            exact: false,
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
        self.exact = false;
        over
    }

    /// Reads `line[from..]`, the part of a line not fed yet (`line[..from]` was, by earlier
    /// calls, and is the same), up to its first `\n`: returns that `\n`'s index in `line`
    /// (the bytes before it are measured, the rest are not), or `None` when there is none (all
    /// of it is measured). The line decoder's `\n` search.
    pub fn line_end(&mut self, line: &[u8], from: usize) -> Option<usize> {
        self.walk(line, from, Stop::Newline)
    }

    /// Reads `body[from..]`, the part of a body not fed yet (`body[..from]` was and is the
    /// same): a body is one JSON value whatever its lines.
    pub fn feed(&mut self, body: &[u8], from: usize) {
        let _ = self.walk(body, from, Stop::Never);
    }

    /// Either mode (see the module) over `text[from..]`.
    fn walk(&mut self, text: &[u8], from: usize, stop: Stop) -> Option<usize> {
        let rest = text.get(from..).unwrap_or_default();
        let newline = stop == Stop::Newline;
        if self.over || !self.bounded() {
            return if newline {
                memchr::memchr(b'\n', rest).map(|n| from + n)
            } else {
                None
            };
        }
        if self.exact {
            return self.scan(rest, stop).map(|n| from + n);
        }
        // The head of the text (a whole short message), sixteen bytes at a time, counted in
        // bulk: a message of a hundred bytes costs a few dozen instructions more than the `\n`
        // search alone.
        let mut i = from;
        while i < HEAD {
            let Some(block) = text
                .get(i..i.saturating_add(16))
                .and_then(|b| <&[u8; 16]>::try_from(b).ok())
            else {
                break;
            };
            let (count, nl) = block_stats(block);
            if newline && nl {
                break;
            }
            self.open += count;
            if self.open > self.max {
                return self.switch(text, stop);
            }
            i += 16;
        }
        // The rest: from one opening bracket (or `\n`) to the next with `memchr`, which is
        // nearly free over long strings.
        let rest = text.get(i..).unwrap_or_default();
        let hits: &mut dyn Iterator<Item = usize> = if newline {
            &mut memchr::memchr3_iter(b'\n', b'[', b'{', rest)
        } else {
            &mut memchr::memchr2_iter(b'[', b'{', rest)
        };
        for at in hits {
            if rest.get(at) == Some(&b'\n') {
                return Some(i + at);
            }
            self.open += 1;
            if self.open > self.max {
                return self.switch(text, stop);
            }
        }
        None
    }

    /// More opening brackets than the bound: it could nest that deep, so `text` is walked
    /// from its start, exactly.
    fn switch(&mut self, text: &[u8], stop: Stop) -> Option<usize> {
        self.open = 0;
        self.exact = true;
        self.scan(text, stop)
    }

    /// The common walk; see [`Depth::line_end`] for what it returns with [`Stop::Newline`]
    /// ([`Stop::Never`] always returns `None`).
    ///
    /// Eight bytes at a time (SWAR): one pass over a word finds every quote, backslash,
    /// bracket and `\n` in it, and only those bytes are looked at one by one, in order, with
    /// the string state. Inside a long string (two words with nothing that can end it) the
    /// rest is searched with `memchr`, as the plain `\n` search would.
    fn scan(&mut self, text: &[u8], stop: Stop) -> Option<usize> {
        let newline = stop == Stop::Newline;
        let (mut open, mut in_str) = (self.open, self.in_str);
        // The first byte of the next word is escaped (a backslash ended the previous one).
        let mut carry = std::mem::take(&mut self.escape);
        // Words in a row inside a string with nothing that ends it.
        let mut quiet = 0u32;
        let mut i = 0;
        let end = loop {
            if i >= text.len() {
                self.escape = carry;
                break None;
            }
            let word = load(text, i);
            let quote = eq(word, b'"');
            let backslash = eq(word, b'\\');
            let nl = if newline { eq(word, b'\n') } else { 0 };
            // `[`/`{` and `]`/`}` differ from each other only in bit 0x20.
            let wide = word | 0x2020_2020_2020_2020;
            let opening = eq(wide, b'{');
            let closing = eq(wide, b'}');
            // The bits of the bytes already handled (a prefix of the word).
            let mut done = 0u64;
            if std::mem::take(&mut carry) {
                if nl & 0x80 != 0 {
                    break Some(i);
                }
                done = 0xff;
            } else if backslash == 0 {
                // No escape in the word: its string state in bulk. Bit `8k + 7` of `parity`
                // is the parity of the quotes at bytes `0..=k`, so a byte is outside strings
                // when that parity equals the state before the word (a quote itself does not
                // matter: it is no bracket).
                let mut parity = quote;
                parity ^= parity << 8;
                parity ^= parity << 16;
                parity ^= parity << 32;
                let outside = if in_str { parity } else { !parity } & HIGH;
                // Up to the line's end, if it is in this word.
                let before = if nl == 0 {
                    u64::MAX
                } else {
                    (1u64 << nl.trailing_zeros()) - 1
                };
                let opened = bytes(opening & outside & before);
                let closed = bytes(closing & outside & before);
                // In bulk only when no step can pass the bound or go below zero; else one
                // byte at a time below.
                if open + opened <= self.max && closed <= open {
                    open = open + opened - closed;
                    if nl != 0 {
                        break Some(i + (nl.trailing_zeros() / 8) as usize);
                    }
                    in_str ^= parity >> 63 != 0;
                    quiet = if in_str && quote == 0 { quiet + 1 } else { 0 };
                    i += 8;
                    if quiet >= 2 {
                        i = skip_string(text, i, newline);
                        quiet = 0;
                    }
                    continue;
                }
            }
            // What ended the walk in this word: `Some(Some(at))` a line's end, `Some(None)`
            // the bound passed in a body.
            let found = loop {
                let m = if in_str {
                    quote | backslash | nl
                } else {
                    quote | opening | closing | nl
                } & !done;
                if m == 0 {
                    break None;
                }
                let here = 1u64 << m.trailing_zeros();
                let p = (m.trailing_zeros() / 8) as usize;
                done |= (here << 1).wrapping_sub(1);
                if nl & here != 0 {
                    // A line ends at its `\n`, in a string or not.
                    break Some(Some(i + p));
                }
                if quote & here != 0 {
                    in_str = !in_str;
                } else if in_str {
                    // A backslash: the next byte is escaped.
                    let next = here << 8;
                    if i + p + 1 >= text.len() {
                        self.escape = true;
                        self.open = open;
                        self.in_str = in_str;
                        return None;
                    }
                    if next == 0 {
                        carry = true;
                    } else if nl & next != 0 {
                        break Some(Some(i + p + 1));
                    } else {
                        done |= (next << 1).wrapping_sub(1);
                    }
                } else if opening & here != 0 {
                    open += 1;
                    if open > self.max {
                        self.over = true;
                        // Nothing more to measure: only the line's end matters now.
                        let from = i + p;
                        break Some(if newline {
                            memchr::memchr(b'\n', text.get(from..).unwrap_or_default())
                                .map(|n| from + n)
                        } else {
                            None
                        });
                    }
                } else {
                    open = open.saturating_sub(1);
                }
            };
            if let Some(at) = found {
                break at;
            }
            quiet = if in_str && done == 0 { quiet + 1 } else { 0 };
            i += 8;
            if quiet >= 2 && !carry {
                i = skip_string(text, i, newline);
                quiet = 0;
            }
        };
        self.open = open;
        self.in_str = in_str;
        end
    }
}

/// Inside a long string at `i`: where the next quote, backslash or (in a line) `\n` is, found
/// with `memchr` (the end of `text` when none is).
#[inline]
fn skip_string(text: &[u8], i: usize, newline: bool) -> usize {
    let rest = text.get(i..).unwrap_or_default();
    let next = if newline {
        memchr::memchr3(b'"', b'\\', b'\n', rest)
    } else {
        memchr::memchr2(b'"', b'\\', rest)
    };
    next.map_or(text.len(), |n| i + n)
}

/// Bytes at the start of a text counted sixteen at a time before `memchr` takes over.
const HEAD: usize = 256;

/// How many `[` and `{` `block` holds and whether it holds a `\n` (`[`/`{` differ only in bit
/// 0x20; the compiler makes both one vector comparison each).
#[inline(always)]
fn block_stats(block: &[u8; 16]) -> (u32, bool) {
    let mut count = 0u8;
    let mut nl = 0u8;
    for &b in block {
        count += u8::from(b | 0x20 == b'{');
        nl |= u8::from(b == b'\n');
    }
    (u32::from(count), nl != 0)
}

/// The eight bytes of `text` from `i` as a little-endian word (byte `k` in bits `8k..8k+8`),
/// zero past its end (zero is no byte the walk looks for).
#[inline(always)]
fn load(text: &[u8], i: usize) -> u64 {
    if let Some(w) = text
        .get(i..i.saturating_add(8))
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
    {
        return u64::from_le_bytes(w);
    }
    let mut b = [0u8; 8];
    for (d, s) in b.iter_mut().zip(text.get(i..).unwrap_or_default()) {
        *d = *s;
    }
    u64::from_le_bytes(b)
}

/// The high bit of each byte.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// How many bytes' high bits are set in `mask` (which has no other bits).
#[inline(always)]
fn bytes(mask: u64) -> u32 {
    ((mask >> 7).wrapping_mul(0x0101_0101_0101_0101) >> 56) as u32
}

/// The high bit of each byte of `word` that equals `b` (exactly: no carry crosses a byte).
#[inline(always)]
fn eq(word: u64, b: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let y = word ^ (0x0101_0101_0101_0101 * u64::from(b));
    !(((y & LOW7).wrapping_add(LOW7)) | y | LOW7)
}

/// Whether `text` (one JSON value) nests deeper than `max`, for text measured as a whole (an
/// SSE event's data, tests).
pub fn deeper_than(text: &[u8], max: usize) -> bool {
    let mut d = Depth::new(max);
    d.feed(text, 0);
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
            assert_eq!(d.line_end(text.as_bytes(), 0), Some(at), "{text:?}");
            // With a bound of 0 the first bracket switches to the exact walk.
            let mut d = Depth::new(0);
            assert_eq!(d.line_end(text.as_bytes(), 0), Some(at), "{text:?}");
        }
        let mut d = Depth::unbounded();
        assert_eq!(d.line_end(b"[[[[\n", 0), Some(4));
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
        assert_eq!(d.line_end(line.as_bytes(), 0), Some(text.len()));
        assert!(d.finish());
        assert_eq!(d.line_end(b"{}\n", 0), Some(2));
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
                // What has arrived so far; everything before `from` was fed already.
                d.feed(&text.as_bytes()[..to], from);
                from = to;
            }
            prop_assert_eq!(d.finish(), depth > max);
            if !pretty {
                // A compact line: no `\n` inside; fed as a line in pieces, the same verdict.
                let line = format!("{text}\n");
                let bytes = line.as_bytes();
                let mut d = Depth::new(max);
                let (mut to, mut end) = (0, None);
                while end.is_none() && to < bytes.len() {
                    let from = to;
                    to = (to + 3).min(bytes.len());
                    end = d.line_end(&bytes[..to], from);
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
                let end = d.line_end(&bytes, 0);
                (end, d.finish())
            };
            let c = cut.index(bytes.len() + 1);
            let mut d = Depth::new(max);
            let end = match d.line_end(&bytes[..c], 0) {
                Some(n) => Some(n),
                None => d.line_end(&bytes, c),
            };
            prop_assert_eq!((end, d.finish()), whole);
            // The exact walk alone (bound 0: it starts at the first bracket) agrees with
            // itself too, and so does a body fed the same way.
            let mut d = Depth::new(max);
            d.feed(&bytes[..c], 0);
            d.feed(&bytes, c);
            let mut e = Depth::new(max);
            e.feed(&bytes, 0);
            prop_assert_eq!(d.finish(), e.finish());
        }
    }
}
