//! An SSE response as a stream of events (`eventsource-stream` parses; this bounds it): each
//! event's `data`, `id` and `retry`, an event over `max_message_size` (the stream is then
//! abandoned: nothing after it can be trusted to be framed), or the failure that ended the
//! stream. What a dropped stream needs to be resumed is kept in [`Resume`].

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use std::time::Duration;

/// One item of an SSE stream.
pub enum Item {
    /// An event: its `id` (empty when none), the server's `retry`, its `data`.
    Event {
        id: String,
        retry: Option<Duration>,
        data: String,
    },
    /// An event longer than the limit, in bytes read before giving up.
    Oversized(usize),
    /// The stream broke (transport error or bad framing).
    Failed(String),
}

/// Where to resume a stream: the last event id and the server's `retry`.
#[derive(Default)]
pub struct Resume {
    pub last_id: Option<String>,
    pub retry: Option<Duration>,
}

impl Resume {
    /// Notes an event's `id` and `retry`. `retry` is capped at a minute: a hostile value must
    /// not park a request for days.
    pub fn note(&mut self, id: String, retry: Option<Duration>) {
        if !id.is_empty() {
            self.last_id = Some(id);
        }
        if let Some(r) = retry {
            self.retry = Some(r.min(Duration::from_secs(60)));
        }
    }
}

/// The events of `resp`, bounded: bytes since the last blank line beyond `max` (plus room for
/// the `data:` prefixes) end the stream with [`Item::Oversized`].
pub fn events(resp: reqwest::Response, max: usize) -> impl Stream<Item = Item> + Unpin {
    let limit = max.saturating_add(max / 8).saturating_add(4096);
    let mut pending: usize = 0;
    let mut last_newline = false;
    let mut over = false;
    let bytes = resp.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if over {
            return Err("oversized".to_string());
        }
        // Bytes since the end of the last event (a blank line), across chunks.
        let mut prev_nl = last_newline;
        for &b in chunk.iter() {
            if b == b'\n' && prev_nl {
                pending = 0;
            } else if b != b'\r' {
                pending = pending.saturating_add(1);
            }
            if b != b'\r' {
                prev_nl = b == b'\n';
            }
        }
        last_newline = prev_nl;
        if pending > limit {
            over = true;
            return Err(format!("oversized:{pending}"));
        }
        Ok(chunk)
    });
    Box::pin(bytes.eventsource().map(|ev| match ev {
        Ok(e) => Item::Event {
            id: e.id,
            retry: e.retry,
            data: e.data,
        },
        Err(eventsource_stream::EventStreamError::Transport(t)) => {
            match t.strip_prefix("oversized:").and_then(|n| n.parse().ok()) {
                Some(n) => Item::Oversized(n),
                None => Item::Failed(t),
            }
        }
        Err(e) => Item::Failed(e.to_string()),
    }))
}
