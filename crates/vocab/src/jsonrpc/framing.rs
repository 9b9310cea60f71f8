//! Newline-delimited framing, sans-IO: bytes in, frames out.
//!
//! Owns: splitting a byte stream into lines under a size bound. Knows nothing about JSON-RPC,
//! sockets or processes, and never fails: a content problem is reported as a [`Frame`] variant,
//! never as an error that would end the stream (the `FramedRead` trap described in
//! `reference/supervision.md` §4.8 and R15).
//!
//! Rules (MCP stdio transport, every revision; field cases K01-K05, K22):
//! - a frame ends at `\n`; one trailing `\r` is removed (CRLF tolerated, K03);
//! - a UTF-8 byte-order mark at the start of a line is removed (K02);
//! - lines that are empty or only ASCII whitespace are skipped silently (K01), whatever
//!   their length;
//! - a line whose content (without BOM, `\r` and `\n`) is longer than `max_len` bytes is
//!   discarded up to the next `\n` while holding at most `max_len` + 4 bytes, and reported
//!   once as [`Frame::Oversized`] with its content length and the top-level `id` recovered
//!   from every byte of it by [`TopLevelId`] (K04, K22);
//! - at end of input, a final complete line without `\n` is delivered (K05);
//! - with a depth bound ([`LineDecoder::with_depth`], issue 47 §7), a line that nests
//!   deeper is [`Frame::TooDeep`]: measured by [`Depth`] in the same walk that finds its `\n`
//!   (no second pass over the bytes), never for an oversized line (its size says enough);
//! - the frames do not depend on how the input was split into chunks (property-tested).
//!
//! The other direction, [`LineBatch`], collects whole outgoing lines so a writer can hand
//! several to one vectored write without copying them.

use super::depth::Depth;
use super::toplevel::TopLevelId;
use bytes::{Bytes, BytesMut};

/// One unit produced by [`LineDecoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A line without its terminator, `\r` or leading BOM; never empty or blank.
    Line(Bytes),
    /// A line longer than the limit was discarded (K04).
    Oversized {
        /// Its length in bytes, without BOM, `\r` and `\n` (the length a [`Frame::Line`]
        /// would have had).
        len: usize,
        /// The raw JSON text of its top-level `id` (see [`super::toplevel`]): `None` when the
        /// line is not one complete JSON object, has no such member, or it is not a string,
        /// number or null of at most [`super::toplevel::ID_MAX`] bytes.
        id: Option<Bytes>,
        /// Whether the line is an object with a top-level `method` member (a request or a
        /// notification rather than a response); `false` when it is not an object.
        has_method: bool,
    },
    /// A line (as [`Frame::Line`] has it) that nests deeper than the decoder's depth bound:
    /// never to be relayed; read only to answer it.
    TooDeep(Bytes),
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bytes a line may hold beyond `max_len` before it is known to be too long: a leading BOM
/// (3) and a trailing `\r` (1) are not part of the content, so deciding earlier would make
/// the outcome depend on where the input was split.
const SLACK: usize = BOM.len() + 1;

/// An oversized line being discarded.
#[derive(Debug)]
struct Discard {
    /// Content bytes dropped so far (the BOM excluded, a trailing `\r` still included).
    len: usize,
    /// Whether the last byte dropped is `\r` (removed from the length if the line ends there).
    last_cr: bool,
    /// Whether every byte dropped so far is ASCII whitespace (a blank line is skipped).
    blank: bool,
    scan: TopLevelId,
}

impl Discard {
    fn new() -> Self {
        Discard {
            len: 0,
            last_cr: false,
            blank: true,
            scan: TopLevelId::new(),
        }
    }

    fn feed(&mut self, data: &[u8]) {
        let Some(&last) = data.last() else { return };
        self.len += data.len();
        self.last_cr = last == b'\r';
        self.blank = self.blank && data.iter().all(u8::is_ascii_whitespace);
        self.scan.feed(data);
    }

    /// The line ended (at `\n` or end of input): its frame, or `None` when it was blank.
    fn finish(self) -> Option<Frame> {
        if self.blank {
            return None;
        }
        let top = self.scan.finish();
        Some(Frame::Oversized {
            len: self.len - usize::from(self.last_cr),
            id: top.as_ref().and_then(|t| t.id.clone()),
            has_method: top.is_some_and(|t| t.has_method),
        })
    }
}

/// Bounded line splitter. Feed bytes with [`LineDecoder::extend`], drain frames with
/// [`LineDecoder::next_frame`], and call [`LineDecoder::finish`] at end of input.
///
/// Memory held is at most `max_len` + 4 plus one read's worth of bytes, whatever the input.
#[derive(Debug)]
pub struct LineDecoder {
    buf: BytesMut,
    max_len: usize,
    /// The current line exceeded `max_len`: its bytes go through here instead of `buf`.
    discarding: Option<Discard>,
    /// Where to resume the search for `\n` in `buf` (bytes before it hold no `\n`).
    scanned: usize,
    /// The nesting of the current line's bytes before `scanned` (unbounded: not measured).
    depth: Depth,
}

impl LineDecoder {
    /// A decoder that accepts lines of up to `max_len` bytes (excluding BOM, `\r` and `\n`),
    /// whatever their nesting.
    pub fn new(max_len: usize) -> Self {
        LineDecoder {
            buf: BytesMut::new(),
            max_len,
            discarding: None,
            scanned: 0,
            depth: Depth::unbounded(),
        }
    }

    /// A decoder that also reports lines nesting deeper than `max_depth` arrays and objects
    /// as [`Frame::TooDeep`] (`max_message_depth`, issue 47 §7).
    pub fn with_depth(max_len: usize, max_depth: usize) -> Self {
        LineDecoder {
            depth: Depth::new(max_depth),
            ..LineDecoder::new(max_len)
        }
    }

    /// Appends input bytes. Call [`LineDecoder::next_frame`] until it returns `None` afterwards.
    pub fn extend(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Direct access to the buffer for reading into it without an intermediate copy.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Bytes this decoder holds (its buffer's capacity: what the allocation costs).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether part of a line has arrived and its end has not (bytes buffered, or an oversized
    /// line being discarded): what the stall timeout watches (issue 14 §3).
    pub fn mid_line(&self) -> bool {
        !self.buf.is_empty() || self.discarding.is_some()
    }

    /// The bytes held that are not a frame yet, for a hand-over (issue 32 §1); `None` while
    /// an oversized line is being discarded (its end cannot be told from a new line's start).
    pub fn pending(&self) -> Option<&[u8]> {
        self.discarding.is_none().then_some(&self.buf[..])
    }

    /// Gives a grown buffer back once it holds nothing: after a huge line the buffer keeps the
    /// capacity it grew to (and, once the line is dropped, the whole allocation), so an idle
    /// decoder whose capacity exceeds `limit` bytes gets a fresh, empty one. Call it after
    /// draining frames; it never drops input.
    pub fn shrink_if_idle(&mut self, limit: usize) {
        if self.buf.is_empty() && self.buf.capacity() > limit {
            self.buf = BytesMut::new();
            self.scanned = 0;
            self.depth.finish();
        }
    }

    /// The next complete frame, or `None` when more input is needed.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            // One walk finds the `\n` and measures the nesting on the way (issue 47 §7): `buf`
            // holds the line from its start, read up to `scanned` already.
            let newline = match self.discarding {
                Some(_) => memchr::memchr(b'\n', self.buf.get(self.scanned..).unwrap_or_default())
                    .map(|pos| self.scanned + pos),
                None => self.depth.line_end(&self.buf, self.scanned),
            };
            match newline {
                Some(end) => {
                    let mut line = self.buf.split_to(end + 1).freeze();
                    line.truncate(end);
                    self.scanned = 0;
                    let deep = self.depth.finish();
                    let frame = match self.discarding.take() {
                        Some(mut d) => {
                            d.feed(&line);
                            d.finish()
                        }
                        None => self.finish_line(line, deep),
                    };
                    if frame.is_some() {
                        return frame;
                    }
                }
                None => {
                    if self.discarding.is_none()
                        && self.buf.len() > self.max_len.saturating_add(SLACK)
                    {
                        // Too long whatever follows: keep memory bounded by scanning what
                        // we have and forgetting it.
                        let mut d = Discard::new();
                        let bom = if self.buf.starts_with(BOM) {
                            BOM.len()
                        } else {
                            0
                        };
                        d.feed(self.buf.get(bom..).unwrap_or_default());
                        self.discarding = Some(d);
                        self.buf.clear();
                        self.depth.finish();
                    } else if let Some(d) = &mut self.discarding {
                        d.feed(&self.buf);
                        self.buf.clear();
                    }
                    self.scanned = self.buf.len();
                    return None;
                }
            }
        }
    }

    /// End of input: the final unterminated line, if any, as a frame.
    pub fn finish(&mut self) -> Option<Frame> {
        if let Some(frame) = self.next_frame() {
            return Some(frame);
        }
        self.scanned = 0;
        let line = self.buf.split().freeze();
        // `next_frame` measured every byte left.
        let deep = self.depth.finish();
        match self.discarding.take() {
            Some(mut d) => {
                d.feed(&line);
                d.finish()
            }
            None => self.finish_line(line, deep),
        }
    }

    /// The frame of a complete line that was not being discarded; `deep` when its bytes
    /// nested past the depth bound.
    fn finish_line(&self, mut line: Bytes, deep: bool) -> Option<Frame> {
        if line.last() == Some(&b'\r') {
            line.truncate(line.len().saturating_sub(1));
        }
        if line.starts_with(BOM) {
            line = line.slice(BOM.len()..);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        if line.len() > self.max_len {
            let mut scan = TopLevelId::new();
            scan.feed(&line);
            let top = scan.finish();
            return Some(Frame::Oversized {
                len: line.len(),
                id: top.as_ref().and_then(|t| t.id.clone()),
                has_method: top.is_some_and(|t| t.has_method),
            });
        }
        if deep {
            return Some(Frame::TooDeep(line));
        }
        Some(Frame::Line(line))
    }
}

/// One outgoing line in up to three shared pieces, written with one vectored write and never
/// joined (issue 15 §3): a response whose `result` is the child's bytes is a new head
/// (`{"jsonrpc":"2.0","id":7,"result":`), the result as a slice of the buffer it was read
/// into, and `}\n`. Most lines are one piece. The empty line is the session writer's "close
/// after this" marker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    head: Bytes,
    body: Bytes,
    tail: Bytes,
}

impl Line {
    /// `head`, `body` and `tail` written back to back.
    pub fn spliced(head: Bytes, body: Bytes, tail: &'static [u8]) -> Line {
        Line {
            head,
            body,
            tail: Bytes::from_static(tail),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.tail.len()
    }

    /// Whether it has no bytes (the close marker).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its pieces, in order.
    pub fn parts(&self) -> [&Bytes; 3] {
        [&self.head, &self.body, &self.tail]
    }

    /// The line as one buffer: free for a one-piece line, a copy otherwise (for the rare
    /// readers that need it whole: batch answers, tests).
    pub fn to_bytes(&self) -> Bytes {
        match (self.body.is_empty(), self.tail.is_empty()) {
            (true, true) => self.head.clone(),
            _ => {
                let mut v = Vec::with_capacity(self.len());
                for p in self.parts() {
                    v.extend_from_slice(p);
                }
                Bytes::from(v)
            }
        }
    }
}

impl From<Bytes> for Line {
    fn from(head: Bytes) -> Line {
        Line {
            head,
            ..Line::default()
        }
    }
}

/// Whole lines collected for one vectored write, with the position reached so far; the lines
/// are written as they are (never copied). Sans-IO: [`LineBatch::io_slices`] gives what is left
/// to write, [`LineBatch::advance`] records what a write took.
#[derive(Debug, Default)]
pub struct LineBatch {
    lines: Vec<Bytes>,
    /// Index of the first line not completely written.
    next: usize,
    /// Bytes of `lines[next]` already written.
    offset: usize,
    /// Total bytes of every line pushed since the last [`LineBatch::clear`].
    bytes: usize,
}

/// Most lines handed to one vectored write (well under `IOV_MAX`, 1024 on Linux).
pub const BATCH_SLICES: usize = 64;

impl LineBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a line (behind the ones already pushed).
    pub fn push(&mut self, line: Bytes) {
        self.bytes += line.len();
        self.lines.push(line);
    }

    /// Appends each piece of a [`Line`] (shared, not copied).
    pub fn push_line(&mut self, line: Line) {
        let Line { head, body, tail } = line;
        for part in [head, body, tail] {
            if !part.is_empty() {
                self.push(part);
            }
        }
    }

    /// Lines pushed since the last clear.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Bytes pushed since the last clear (written or not).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether everything pushed has been written (true for an empty batch).
    pub fn is_done(&self) -> bool {
        self.next == self.lines.len()
    }

    /// Whether nothing was pushed since the last clear.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Forgets every line (keeping the allocation for the next batch).
    pub fn clear(&mut self) {
        self.lines.clear();
        self.next = 0;
        self.offset = 0;
        self.bytes = 0;
    }

    /// Fills `out` with what is left to write, in order; returns how many slices it used.
    pub fn io_slices<'a>(&'a self, out: &mut [std::io::IoSlice<'a>]) -> usize {
        let pending = self.lines.iter().skip(self.next).enumerate();
        let mut used = 0;
        let mut slots = out.iter_mut();
        for (i, line) in pending {
            let skip = if i == 0 { self.offset } else { 0 };
            // `offset` is always below the current line's length (see `advance`); an empty
            // rest is skipped either way.
            let rest = line.get(skip..).unwrap_or_default();
            if rest.is_empty() {
                continue;
            }
            let Some(slot) = slots.next() else { break };
            *slot = std::io::IoSlice::new(rest);
            used += 1;
        }
        used
    }

    /// Records that a write took `n` more bytes.
    pub fn advance(&mut self, mut n: usize) {
        while let Some(line) = self.lines.get(self.next) {
            let left = line.len().saturating_sub(self.offset);
            if n < left {
                self.offset += n;
                return;
            }
            // Also skips empty lines (n == 0), so `is_done` is exact.
            n -= left;
            self.next += 1;
            self.offset = 0;
        }
    }

    /// Writes what is left with vectored writes until all of it is written. Cancel safe in
    /// the sense that a dropped future leaves the batch at the position reached.
    pub async fn write_all<W>(&mut self, w: &mut W) -> std::io::Result<()>
    where
        W: tokio::io::AsyncWrite + Unpin + ?Sized,
    {
        use tokio::io::AsyncWriteExt;
        self.advance(0);
        while !self.is_done() {
            let n = {
                let mut slices = [std::io::IoSlice::new(&[]); BATCH_SLICES];
                let k = self.io_slices(&mut slices);
                w.write_vectored(slices.get(..k).unwrap_or_default())
                    .await?
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.advance(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(dec: &mut LineDecoder, input: &[u8]) -> Vec<Frame> {
        dec.extend(input);
        let mut out = Vec::new();
        while let Some(f) = dec.next_frame() {
            out.push(f);
        }
        out
    }

    fn line(s: &str) -> Frame {
        Frame::Line(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn splits_lines_and_skips_blank_ones_case_k01() {
        let mut d = LineDecoder::new(1024);
        let f = all(&mut d, b"a\n\n   \n\t\r\nb\n");
        assert_eq!(f, vec![line("a"), line("b")]);
    }

    #[test]
    fn strips_crlf_case_k03() {
        let mut d = LineDecoder::new(1024);
        assert_eq!(all(&mut d, b"{\"a\":1}\r\n"), vec![line("{\"a\":1}")]);
    }

    #[test]
    fn strips_leading_bom_case_k02() {
        let mut d = LineDecoder::new(1024);
        assert_eq!(
            all(&mut d, b"\xEF\xBB\xBF{}\n{}\n"),
            vec![line("{}"), line("{}")]
        );
    }

    #[test]
    fn byte_at_a_time_gives_same_frames() {
        let input = b"one\r\ntwo\n\n\xEF\xBB\xBFthree\n";
        let mut d = LineDecoder::new(1024);
        let mut out = Vec::new();
        for b in input {
            out.extend(all(&mut d, &[*b]));
        }
        assert_eq!(out, vec![line("one"), line("two"), line("three")]);
    }

    #[test]
    fn oversized_line_is_discarded_with_bounded_memory_and_stream_continues_case_k04() {
        let mut d = LineDecoder::new(10);
        let mut out = Vec::new();
        for _ in 0..1000 {
            out.extend(all(&mut d, b"xxxxxxxx"));
            assert!(d.buf.capacity() < 64 * 1024, "memory must stay bounded");
        }
        out.extend(all(&mut d, b"\nok\n"));
        assert_eq!(
            out,
            vec![
                Frame::Oversized {
                    len: 8000,
                    id: None,
                    has_method: false
                },
                line("ok")
            ]
        );
    }

    #[test]
    fn line_exactly_at_limit_passes_one_over_fails() {
        let mut d = LineDecoder::new(4);
        assert_eq!(
            all(&mut d, b"abcd\nabcde\nz\n"),
            vec![
                line("abcd"),
                Frame::Oversized {
                    len: 5,
                    id: None,
                    has_method: false
                },
                line("z")
            ]
        );
    }

    #[test]
    fn final_unterminated_line_is_delivered_at_eof_case_k05() {
        let mut d = LineDecoder::new(1024);
        assert_eq!(all(&mut d, b"a\n{\"last\":true}"), vec![line("a")]);
        assert_eq!(d.finish(), Some(line("{\"last\":true}")));
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn oversized_partial_line_at_eof_is_reported() {
        let mut d = LineDecoder::new(3);
        assert_eq!(all(&mut d, b"abcdefgh"), vec![]);
        assert!(matches!(d.finish(), Some(Frame::Oversized { len: 8, .. })));
    }

    #[test]
    fn idle_buffer_is_given_back_after_a_huge_line() {
        let mut d = LineDecoder::new(16 * 1024 * 1024);
        let big = vec![b'A'; 4 * 1024 * 1024];
        assert!(all(&mut d, &big).is_empty());
        // Not idle while a line is incomplete: nothing is dropped.
        d.shrink_if_idle(1024 * 1024);
        assert_eq!(d.buf.len(), big.len());
        let out = all(&mut d, b"\nnext");
        assert!(matches!(&out[..], [Frame::Line(b)] if b.len() == big.len()));
        // A partial line is still held: no shrink yet.
        d.shrink_if_idle(1024 * 1024);
        assert_eq!(&d.buf[..], b"next");
        assert_eq!(all(&mut d, b"\n"), vec![line("next")]);
        assert!(d.buf.capacity() > 1024 * 1024);
        d.shrink_if_idle(1024 * 1024);
        assert!(d.buf.capacity() <= 1024 * 1024);
        assert_eq!(all(&mut d, b"a\nb\n"), vec![line("a"), line("b")]);
        // A small buffer is left alone.
        d.extend(b"x");
        d.buf.clear();
        let cap = d.buf.capacity();
        d.shrink_if_idle(1024 * 1024);
        assert_eq!(d.buf.capacity(), cap);
    }

    fn oversized(len: usize, id: Option<&'static str>, has_method: bool) -> Frame {
        Frame::Oversized {
            len,
            id: id.map(|i| Bytes::from_static(i.as_bytes())),
            has_method,
        }
    }

    /// Every frame of `input` fed in chunks of `chunk` bytes, then `finish`.
    fn chunked(max: usize, input: &[u8], chunk: usize) -> Vec<Frame> {
        let mut d = LineDecoder::new(max);
        let mut out = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            out.extend(all(&mut d, c));
        }
        out.extend(d.finish());
        out
    }

    #[test]
    fn oversized_line_reports_the_top_level_id_only_case_k22() {
        let text = "x".repeat(5000);
        let l = format!(
            r#"{{"jsonrpc":"2.0","result":{{"content":[{{"id":3,"type":"text","text":"{text}"}}]}},"id":7}}"#
        );
        let r = format!(r#"{{"id":8,"method":"m","params":"{text}"}}"#);
        let input = format!("{l}\r\n{r}\nok\n");
        let want = vec![
            oversized(l.len(), Some("7"), false),
            oversized(r.len(), Some("8"), true),
            line("ok"),
        ];
        for chunk in [1, 7, 1000, 4096, input.len()] {
            assert_eq!(chunked(100, input.as_bytes(), chunk), want, "chunk {chunk}");
        }
    }

    #[test]
    fn bom_and_crlf_do_not_count_toward_the_limit_whatever_the_split() {
        // Content of exactly `max` bytes with BOM and CRLF around it is a line.
        let input = b"\xEF\xBB\xBF{\"a\":1}\r\n";
        for chunk in 1..=input.len() {
            assert_eq!(chunked(7, input, chunk), vec![line("{\"a\":1}")], "{chunk}");
            assert_eq!(
                chunked(6, input, chunk),
                vec![oversized(7, None, false)],
                "{chunk}"
            );
        }
    }

    #[test]
    fn long_blank_lines_are_skipped_whatever_the_split() {
        let mut input = vec![b' '; 100];
        input.extend_from_slice(b"\r\nz\n");
        input.extend(vec![b'\t'; 50]);
        for chunk in [1, 3, 60, input.len()] {
            assert_eq!(chunked(10, &input, chunk), vec![line("z")], "{chunk}");
        }
    }

    #[test]
    fn oversized_final_line_at_eof_carries_its_id() {
        let l = br#"{"result":"0123456789","id":"r-1"}"#;
        for chunk in [1, 5, l.len()] {
            assert_eq!(
                chunked(10, l, chunk),
                vec![oversized(l.len(), Some("\"r-1\""), false)]
            );
        }
    }

    #[test]
    fn a_line_nested_past_the_bound_is_too_deep_and_the_next_one_is_not() {
        let at = format!("{{\"a\":{}1{}}}", "[".repeat(126), "]".repeat(126));
        let past = format!("{{\"a\":{}1{}}}", "[".repeat(127), "]".repeat(127));
        // Brackets in strings and after escapes do not count.
        let quoted = format!("{{\"a\":\"\\\"{}\"}}", "[".repeat(500));
        let input = format!(
            "{at}\n{past}\r\n{quoted}\n{bom}{past}\n{{}}",
            bom = '\u{feff}'
        );
        let want = vec![
            line(&at),
            Frame::TooDeep(Bytes::from(past.clone())),
            line(&quoted),
            Frame::TooDeep(Bytes::from(past.clone())),
            line("{}"),
        ];
        for chunk in [1, 2, 3, 5, 64, 127, input.len()] {
            let mut d = LineDecoder::with_depth(1 << 20, 127);
            let mut out = Vec::new();
            for c in input.as_bytes().chunks(chunk) {
                out.extend(all(&mut d, c));
            }
            out.extend(d.finish());
            assert_eq!(out, want, "chunk {chunk}");
        }
        // Without a bound nothing is too deep.
        assert_eq!(chunked(1 << 20, past.as_bytes(), 7), vec![line(&past)]);
    }

    #[test]
    fn two_hundred_thousand_levels_are_too_deep_and_oversized_wins() {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}{}}}",
            "[".repeat(200_000),
            "]".repeat(200_000)
        );
        let input = format!("{deep}\n{{\"ok\":1}}\n");
        for chunk in [4096, 65536, input.len()] {
            let mut d = LineDecoder::with_depth(1 << 20, 127);
            let mut out = Vec::new();
            for c in input.as_bytes().chunks(chunk) {
                out.extend(all(&mut d, c));
            }
            assert_eq!(
                out,
                vec![
                    Frame::TooDeep(Bytes::from(deep.clone())),
                    line("{\"ok\":1}")
                ]
            );
            // Its envelope still parses (serde_json's raw values do not recurse): the reader
            // learns whose answer it was.
            let Frame::TooDeep(l) = &out[0] else { panic!() };
            let m = crate::jsonrpc::message::parse_line(l).unwrap();
            assert_eq!(m[0].as_ref().unwrap().id.as_ref().unwrap().get(), "1");
        }
        // Over max_message_size, it is oversized whatever its depth (`TopLevelId` gives up
        // past 128 levels, so no id: the request waits for its deadline).
        let mut d = LineDecoder::with_depth(1000, 127);
        assert_eq!(
            all(&mut d, input.as_bytes()),
            vec![oversized(deep.len(), None, false), line("{\"ok\":1}")]
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// The rules of the module header applied to the whole input at once: the model the
        /// streaming decoder must match for every split.
        fn model(max: usize, depth: Option<usize>, input: &[u8]) -> Vec<Frame> {
            let mut out = Vec::new();
            for mut l in input.split(|b| *b == b'\n') {
                if let Some(rest) = l.strip_suffix(b"\r") {
                    l = rest;
                }
                if let Some(rest) = l.strip_prefix(BOM) {
                    l = rest;
                }
                if l.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if l.len() > max {
                    let mut scan = TopLevelId::new();
                    scan.feed(l);
                    let top = scan.finish();
                    out.push(Frame::Oversized {
                        len: l.len(),
                        id: top.as_ref().and_then(|t| t.id.clone()),
                        has_method: top.is_some_and(|t| t.has_method),
                    });
                } else if depth.is_some_and(|d| crate::jsonrpc::depth::deeper_than(l, d)) {
                    out.push(Frame::TooDeep(Bytes::copy_from_slice(l)));
                } else {
                    out.push(Frame::Line(Bytes::copy_from_slice(l)));
                }
            }
            out
        }

        fn piece() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                Just(b"\n".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b"\r".to_vec()),
                Just(BOM.to_vec()),
                Just(b"   \t".to_vec()),
                Just(br#"{"jsonrpc":"2.0","id":1,"result":{"id":2}}"#.to_vec()),
                Just(br#"{"result":{"content":[{"id":3}]},"id":7}"#.to_vec()),
                Just(br#"{"id":"a\"b","method":"m"}"#.to_vec()),
                "[a-z{}\\[\\]\":,]{0,40}".prop_map(String::into_bytes),
                (0usize..8).prop_map(
                    |n| format!("{}\"]\\\"[\"{}", "[".repeat(n), "]".repeat(n)).into_bytes()
                ),
                Just(b"\"\\".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..20),
                (1usize..300).prop_map(|n| vec![b'x'; n]),
            ]
        }

        proptest! {
            #[test]
            fn any_split_gives_the_same_frames(
                pieces in proptest::collection::vec(piece(), 0..12),
                max in 0usize..64,
                depth in proptest::option::of(0usize..6),
                cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..16),
            ) {
                let input: Vec<u8> = pieces.concat();
                let want = model(max, depth, &input);
                let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
                at.sort_unstable();
                let mut d = match depth {
                    Some(depth) => LineDecoder::with_depth(max, depth),
                    None => LineDecoder::new(max),
                };
                let mut got = Vec::new();
                let mut from = 0;
                for to in at.into_iter().chain([input.len()]) {
                    got.extend(all(&mut d, &input[from..to]));
                    prop_assert!(d.buf.len() <= max + SLACK + (to - from));
                    from = to;
                }
                got.extend(d.finish());
                prop_assert_eq!(got, want);
            }
        }
    }

    fn remaining(b: &LineBatch) -> Vec<u8> {
        let mut slices = [std::io::IoSlice::new(&[]); BATCH_SLICES];
        let k = b.io_slices(&mut slices);
        slices[..k].iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn line_batch_tracks_partial_writes() {
        let mut b = LineBatch::new();
        assert!(b.is_done() && b.is_empty());
        for l in ["ab\n", "", "cde\n", "f\n"] {
            b.push(Bytes::copy_from_slice(l.as_bytes()));
        }
        assert_eq!((b.len(), b.bytes()), (4, 9));
        assert_eq!(remaining(&b), b"ab\ncde\nf\n");
        b.advance(1);
        assert_eq!(remaining(&b), b"b\ncde\nf\n");
        b.advance(2);
        assert_eq!(remaining(&b), b"cde\nf\n");
        b.advance(4);
        assert_eq!(remaining(&b), b"f\n");
        assert!(!b.is_done());
        b.advance(2);
        assert!(b.is_done());
        assert_eq!(b.bytes(), 9);
        b.clear();
        assert!(b.is_empty() && b.bytes() == 0);
    }

    #[test]
    fn line_batch_writes_more_lines_than_one_call_takes() {
        let mut b = LineBatch::new();
        let mut want = Vec::new();
        for i in 0..200 {
            let l = format!("{{\"n\":{i}}}\n");
            want.extend_from_slice(l.as_bytes());
            b.push(Bytes::from(l));
        }
        let mut out: Vec<u8> = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(b.write_all(&mut out)).unwrap();
        assert!(b.is_done());
        assert_eq!(out, want);
    }

    #[test]
    fn large_screenshot_line_passes_case_k05() {
        let mut d = LineDecoder::new(16 * 1024 * 1024);
        let payload = vec![b'A'; 13 * 1024 * 1024];
        let mut out = Vec::new();
        for chunk in payload.chunks(64 * 1024) {
            out.extend(all(&mut d, chunk));
        }
        out.extend(all(&mut d, b"\n"));
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0], Frame::Line(b) if b.len() == payload.len()));
    }
}
