//! Newline-delimited framing, sans-IO: bytes in, frames out.
//!
//! Owns: splitting a byte stream into lines under a size bound. Knows nothing about JSON-RPC,
//! sockets or processes, and never fails: a content problem is reported as a [`Frame`] variant,
//! never as an error that would end the stream (the `FramedRead` trap described in
//! `reference/supervision.md` §4.8 and R15).
//!
//! Rules (MCP stdio transport, every revision; field cases K01-K05):
//! - a frame ends at `\n`; one trailing `\r` is removed (CRLF tolerated, K03);
//! - a UTF-8 byte-order mark at the start of a line is removed (K02);
//! - lines that are empty or only ASCII whitespace are skipped silently (K01);
//! - a line longer than `max_len` bytes is discarded up to the next `\n` while holding at most
//!   `max_len` bytes, and reported once as [`Frame::Oversized`] with its full length (K04);
//! - at end of input, a final complete line without `\n` is delivered (K05).
//!
//! The other direction, [`LineBatch`], collects whole outgoing lines so a writer can hand
//! several to one vectored write without copying them.

use bytes::{Bytes, BytesMut};

/// One unit produced by [`LineDecoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A line without its terminator, `\r` or leading BOM; never empty or blank.
    Line(Bytes),
    /// A line longer than the limit was discarded; `len` is its length in bytes (without `\n`)
    /// and `head` its first [`HEAD_LEN`] bytes, kept to recover the message's `id`.
    Oversized { len: usize, head: Bytes },
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bytes kept from the start of an oversized line (enough for the envelope's `id`).
pub const HEAD_LEN: usize = 1024;

/// Bounded line splitter. Feed bytes with [`LineDecoder::extend`], drain frames with
/// [`LineDecoder::next_frame`], and call [`LineDecoder::finish`] at end of input.
///
/// Memory held is at most `max_len` plus one read's worth of bytes, whatever the input.
#[derive(Debug)]
pub struct LineDecoder {
    buf: BytesMut,
    max_len: usize,
    /// Bytes of the current line already discarded because it exceeded `max_len`, and its head.
    discarding: Option<(usize, Bytes)>,
    /// Where to resume the search for `\n` in `buf` (bytes before it hold no `\n`).
    scanned: usize,
}

impl LineDecoder {
    /// A decoder that accepts lines of up to `max_len` bytes (excluding the `\n`).
    pub fn new(max_len: usize) -> Self {
        LineDecoder {
            buf: BytesMut::new(),
            max_len,
            discarding: None,
            scanned: 0,
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

    /// Gives a grown buffer back once it holds nothing: after a huge line the buffer keeps the
    /// capacity it grew to (and, once the line is dropped, the whole allocation), so an idle
    /// decoder whose capacity exceeds `limit` bytes gets a fresh, empty one. Call it after
    /// draining frames; it never drops input.
    pub fn shrink_if_idle(&mut self, limit: usize) {
        if self.buf.is_empty() && self.buf.capacity() > limit {
            self.buf = BytesMut::new();
            self.scanned = 0;
        }
    }

    /// The next complete frame, or `None` when more input is needed.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                Some(pos) => {
                    let end = self.scanned + pos;
                    let line = self.buf.split_to(end + 1).freeze();
                    self.scanned = 0;
                    if let Some((dropped, head)) = self.discarding.take() {
                        return Some(Frame::Oversized {
                            len: dropped + trim_cr_len(&line[..end]),
                            head,
                        });
                    }
                    let line = line.slice(..end);
                    if let Some(frame) = self.finish_line(line) {
                        return Some(frame);
                    }
                }
                None => {
                    if self.buf.len() > self.max_len {
                        // Keep memory bounded: forget what we have, remember how much.
                        let n = self.buf.len();
                        let head = &self.buf[..n.min(HEAD_LEN)];
                        let entry = self
                            .discarding
                            .get_or_insert_with(|| (0, Bytes::copy_from_slice(head)));
                        entry.0 += n;
                        self.buf.clear();
                        self.scanned = 0;
                    } else {
                        self.scanned = self.buf.len();
                    }
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
        if let Some((dropped, head)) = self.discarding.take() {
            let rest = self.buf.len();
            self.buf.clear();
            return Some(Frame::Oversized {
                len: dropped + rest,
                head,
            });
        }
        let line = self.buf.split().freeze();
        self.finish_line(line)
    }

    fn finish_line(&self, mut line: Bytes) -> Option<Frame> {
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        if line.starts_with(BOM) {
            line = line.slice(BOM.len()..);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        if line.len() > self.max_len {
            let head = line.slice(..line.len().min(HEAD_LEN));
            return Some(Frame::Oversized {
                len: line.len(),
                head,
            });
        }
        Some(Frame::Line(line))
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
        let mut n = 0;
        for (i, line) in self.lines[self.next..].iter().enumerate() {
            if n == out.len() {
                break;
            }
            let skip = if i == 0 { self.offset } else { 0 };
            if line.len() > skip {
                out[n] = std::io::IoSlice::new(&line[skip..]);
                n += 1;
            }
        }
        n
    }

    /// Records that a write took `n` more bytes.
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 && self.next < self.lines.len() {
            let left = self.lines[self.next].len() - self.offset;
            if n < left {
                self.offset += n;
                return;
            }
            n -= left;
            self.next += 1;
            self.offset = 0;
        }
        // Skip empty lines so `is_done` is exact.
        while self.next < self.lines.len() && self.lines[self.next].len() == self.offset {
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
                w.write_vectored(&slices[..k]).await?
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.advance(n);
        }
        Ok(())
    }
}

fn trim_cr_len(line: &[u8]) -> usize {
    line.len() - usize::from(line.last() == Some(&b'\r'))
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
        assert_eq!(out.len(), 2);
        assert!(matches!(&out[0], Frame::Oversized { len: 8000, head } if head.len() == 16));
        assert_eq!(out[1], line("ok"));
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
                    head: Bytes::from_static(b"abcde")
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
