//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
//! `tracestate` values, parsed from a client request (`params._meta`, or the HTTP headers) and
//! written into the request passed on to the child. Pure: no clock, no I/O, no randomness
//! (ids are given by the caller).

/// One `traceparent`: `{version}-{trace-id}-{parent-id}-{trace-flags}` in lowercase hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// The span that sent the request: 8 bytes, never all zero.
    pub span_id: [u8; 8],
    /// `trace-flags`; bit 0 is `sampled`.
    pub flags: u8,
}

/// The `sampled` bit of `trace-flags`.
pub const SAMPLED: u8 = 0x01;

/// The longest `tracestate` kept (W3C §3.3.1.5: 512 characters must be propagated; longer
/// values may be dropped, and are here).
pub const MAX_TRACESTATE: usize = 512;

impl TraceParent {
    /// Parses a `traceparent` value as W3C Trace Context §3.2 and §4.3 (version handling)
    /// say: `None` for anything invalid (wrong length or separators, upper-case or non-hex
    /// digits, version `ff`, an all-zero trace or parent id, version `00` with trailing
    /// text). A version above `00` is read by its first four fields when what follows them
    /// starts with `-`. Surrounding spaces and tabs are ignored (HTTP header whitespace).
    pub fn parse(s: &str) -> Option<TraceParent> {
        let s = s.trim_matches([' ', '\t']);
        let b = s.as_bytes();
        if b.len() < 55 {
            return None;
        }
        let version = hex_byte(b.get(0..2)?)?;
        if version == 0xff || *b.get(2)? != b'-' || *b.get(35)? != b'-' || *b.get(52)? != b'-' {
            return None;
        }
        match (version, b.get(55)) {
            (_, None) => {}
            (0, Some(_)) => return None,
            (_, Some(b'-')) => {}
            (_, Some(_)) => return None,
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(b.get(3 + 2 * i..5 + 2 * i)?)?;
        }
        let mut span_id = [0u8; 8];
        for (i, out) in span_id.iter_mut().enumerate() {
            *out = hex_byte(b.get(36 + 2 * i..38 + 2 * i)?)?;
        }
        let flags = hex_byte(b.get(53..55)?)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// Whether the sender recorded its span (`sampled`).
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The version-00 text, 55 characters, as written to the child.
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        s
    }
}

/// A `tracestate` value worth passing on: at most [`MAX_TRACESTATE`] bytes of visible ASCII
/// and spaces (W3C §3.3.1: list members are printable ASCII), not blank; `None` otherwise.
/// Members are not re-validated one by one: the value is passed on as the client wrote it.
pub fn tracestate(s: &str) -> Option<&str> {
    let s = s.trim_matches([' ', '\t']);
    let ok = !s.is_empty()
        && s.len() <= MAX_TRACESTATE
        && s.bytes().all(|c| c == b' ' || c.is_ascii_graphic());
    ok.then_some(s)
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    let [h, l] = two else { return None };
    Some(nibble(*h)? << 4 | nibble(*l)?)
}

/// Lowercase hex only (W3C §3.2.2: `HEXDIGLC`).
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    for b in bytes {
        for n in [b >> 4, b & 0xf] {
            // `n` < 16: always a digit.
            s.push(char::from_digit(u32::from(n), 16).unwrap_or('0'));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_w3c_example_parses_and_formats_back() {
        let t = TraceParent::parse(GOOD).unwrap();
        assert_eq!(t.trace_id[0], 0x4b);
        assert_eq!(t.trace_id[15], 0x36);
        assert_eq!(t.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(t.sampled());
        assert_eq!(t.format(), GOOD);
        let unsampled = TraceParent::parse(&GOOD.replace("-01", "-00")).unwrap();
        assert!(!unsampled.sampled());
        assert_eq!(TraceParent::parse(&format!(" {GOOD}\t")), Some(t));
    }

    #[test]
    fn invalid_values_are_refused_not_guessed() {
        let bad = [
            "",
            "00",
            &GOOD[..54],
            &format!("{GOOD}-"),
            &format!("{GOOD}x"),
            &GOOD.to_uppercase(),
            &GOOD.replace("4bf9", "4bg9"),
            &GOOD.replacen('-', "_", 1),
            &GOOD.replace("-00f0", "_00f0"),
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
        ];
        for b in bad {
            assert_eq!(TraceParent::parse(b), None, "{b:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields() {
        let v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(TraceParent::parse(v).is_some());
        assert!(TraceParent::parse(&format!("{v}-what-comes-next")).is_some());
        assert_eq!(TraceParent::parse(&format!("{v}x")), None);
        assert_eq!(
            TraceParent::parse(v).unwrap().format(),
            GOOD,
            "we write version 00"
        );
    }

    #[test]
    fn tracestate_is_kept_as_written_within_bounds() {
        assert_eq!(
            tracestate(" rojo=00f067aa0ba902b7,congo=t61rcWkgMzE "),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(tracestate(""), None);
        assert_eq!(tracestate("a=\u{1}"), None);
        assert_eq!(
            tracestate(&"a".repeat(MAX_TRACESTATE)).map(str::len),
            Some(512)
        );
        assert_eq!(tracestate(&"a".repeat(MAX_TRACESTATE + 1)), None);
    }
}
