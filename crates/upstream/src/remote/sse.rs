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
        // Checked at every byte: an oversized event that ends within this chunk must not
        // slip through because its blank line reset the count.
        let mut prev_nl = last_newline;
        for &b in chunk.iter() {
            if b == b'\n' && prev_nl {
                pending = 0;
            } else if b != b'\r' {
                pending = pending.saturating_add(1);
                if pending > limit {
                    over = true;
                    return Err(format!("oversized:{pending}"));
                }
            }
            if b != b'\r' {
                prev_nl = b == b'\n';
            }
        }
        last_newline = prev_nl;
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

#[cfg(test)]
mod tests {
    use super::{events, Item};
    use bytes::Bytes;
    use futures_util::StreamExt;
    use proptest::prelude::*;

    /// `body` as a response delivered in `cuts` pieces.
    fn response(body: &[u8], cuts: &[usize]) -> reqwest::Response {
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            let end = (at + c).min(body.len());
            chunks.push(Bytes::copy_from_slice(&body[at..end]));
            at = end;
        }
        chunks.push(Bytes::copy_from_slice(&body[at..]));
        let stream = futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        reqwest::Response::from(axum::http::Response::new(reqwest::Body::wrap_stream(
            stream,
        )))
    }

    fn collect(body: &[u8], cuts: &[usize], max: usize) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            events(response(body, cuts), max)
                .map(|i| match i {
                    Item::Event { id, data, .. } => format!("event {id} {data}"),
                    Item::Oversized(_) => "oversized".to_string(),
                    Item::Failed(why) => format!("failed {why}"),
                })
                .collect()
                .await
        })
    }

    #[test]
    fn events_ids_retry_and_an_oversized_event() {
        let body = b"id: 1\nretry: 500\ndata: \n\nid: 2\ndata: {\"a\":1}\n\n";
        assert_eq!(
            collect(body, &[3, 7], 1 << 20),
            ["event 1 ", "event 2 {\"a\":1}"]
        );
        let big = format!("data: {}\n\n", "x".repeat(10_000));
        assert_eq!(collect(big.as_bytes(), &[100, 100], 1024), ["oversized"]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever a hostile server sends, however it is cut: no panic, and the events of a
        /// stream whose every event fits are the same for every cut.
        #[test]
        fn any_bytes_any_cuts_never_panic_and_cuts_do_not_matter(
            body in prop::collection::vec(prop_oneof![
                Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '), Just(b'd'), Just(b'a'),
                any::<u8>(),
            ], 0..400),
            cuts in prop::collection::vec(0usize..50, 0..10),
        ) {
            let whole = collect(&body, &[], 1 << 20);
            let cut = collect(&body, &cuts, 1 << 20);
            prop_assert_eq!(whole, cut);
            let _ = collect(&body, &cuts, 8);
        }
    }
}
