//! `mcp-supervisor attach NAME`: a transparent byte bridge between stdin/stdout and a server's
//! socket, for MCP clients that can only launch a command (issue 3 §2).
//!
//! Owns nothing but two copies, each on a plain thread with blocking I/O (no async runtime:
//! tokio's stdin/stdout hand every read and write to its blocking pool and each chunk between
//! threads). Half-close: stdin EOF shuts down the socket's write side, then output drains until
//! the supervisor closes. Never parses a byte.

use std::fs::File;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Read size of the socket → stdout copy.
const CHUNK: usize = 64 * 1024;

/// Bridges until the supervisor closes the connection (or stdout can no longer be written).
/// Errors only when connecting fails.
pub fn run(socket: &Path) -> Result<(), std::io::Error> {
    let stream = UnixStream::connect(socket)?;
    let mut up = stream.try_clone()?;
    // Unbuffered handles on duplicates of fds 0 and 1: std's `Stdout` is line-buffered (a
    // newline scan per write) and neither needs its lock here. A closed fd 0 reads as EOF and
    // a closed fd 1 discards, as std's own handles do.
    let stdin = dup(std::io::stdin().as_fd());
    let stdout = dup(std::io::stdout().as_fd());
    std::thread::Builder::new()
        .name("attach-stdin".into())
        .spawn(move || {
            if let Some(mut stdin) = stdin {
                // `splice` when stdin is a pipe: unlike the other direction this is safe, as
                // it waits for input without holding the pipe's lock.
                let _ = std::io::copy(&mut stdin, &mut up);
            }
            // The main thread keeps reading: the answers to the last requests may still be
            // coming.
            let _ = up.shutdown(Shutdown::Write);
        })?;
    let mut down = stream;
    match stdout {
        Some(mut stdout) => {
            let _ = pump(&mut down, &mut stdout);
            let _ = stdout.flush();
        }
        None => {
            let _ = pump(&mut down, &mut std::io::sink());
        }
    }
    Ok(())
}

/// Copies until end of input, one read and one `write_all` at a time. Not `std::io::copy`:
/// into a pipe it uses `splice`, and a `splice` from a socket into a pipe keeps the pipe
/// locked while it waits for socket data, so the client could not read the answer already in
/// the pipe until the next message arrived.
fn pump(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // `read` never reports more than it was given; a reader that did is an error, not a
        // panic.
        let chunk = buf
            .get(..n)
            .ok_or_else(|| std::io::Error::other("read reported more bytes than its buffer"))?;
        to.write_all(chunk)?;
    }
}

/// A `File` on a duplicate of `fd` (closing it leaves the original open), `None` when `fd` is
/// not open.
fn dup(fd: std::os::fd::BorrowedFd<'_>) -> Option<File> {
    fd.try_clone_to_owned().ok().map(File::from)
}
