//! `mcp-supervisor attach NAME`: a transparent byte bridge between stdin/stdout and a server's
//! socket, for MCP clients that can only launch a command (issue 3 §2).
//!
//! Owns nothing but two copies. Half-close: stdin EOF shuts down the socket's write side, then
//! output drains until the supervisor closes. Never parses a byte.

use std::path::Path;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

/// Bridges until the supervisor closes the connection. Errors only when connecting fails.
pub async fn run(socket: &Path) -> Result<(), std::io::Error> {
    let stream = UnixStream::connect(socket).await?;
    let (mut rd, mut wr) = stream.into_split();
    let upstream = async move {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut wr).await;
        let _ = wr.shutdown().await;
        // Keep the read side going: the answers to the last requests may still be coming.
        std::future::pending::<()>().await
    };
    let downstream = async move {
        let mut stdout = tokio::io::stdout();
        let _ = tokio::io::copy(&mut rd, &mut stdout).await;
        let _ = stdout.flush().await;
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
    Ok(())
}
