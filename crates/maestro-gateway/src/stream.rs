//! A streamed answer on its way to the client: passed through event by event as it arrives,
//! with the usage chunk read (and taken out when the client did not ask for it), and an SSE
//! `error` event in place of `[DONE]` when the upstream breaks off.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::errors::stream_error_event;
use crate::gateway::Gateway;
use crate::proxy::{Meter, TokenCounts, describe};
use crate::usage::UsageStatus;

/// The rest of an upstream's stream after its first chunk: its chunks, or why it broke off
/// (an error of the connection, or no chunk for the idle timeout), after which it ends.
pub(crate) type Upstream = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// `body` with `idle` as the longest wait for each chunk: past it, an error in words and the
/// end (the upstream's connection is dropped with it).
pub(crate) fn idle_limited<S>(body: S, idle: Duration) -> Upstream
where
    S: Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
{
    let body = Box::pin(body);
    Box::pin(futures::stream::unfold(
        Some(body),
        move |state| async move {
            let mut body = state?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(body))),
                Ok(Some(Err(e))) => Some((Err(describe(&e)), None)),
                Ok(None) => None,
                Err(_) => Some((
                    Err(format!(
                        "it sent nothing for {} s (gateway.stream_idle_timeout_secs)",
                        idle.as_secs()
                    )),
                    None,
                )),
            }
        },
    ))
}

/// The client's side of a streamed answer.
pub(crate) struct MeteredStream {
    gateway: Gateway,
    meter: Meter,
    upstream_name: String,
    first: Option<Bytes>,
    body: Upstream,
    strip_usage: bool,
    /// Bytes received and not yet passed on: at most one incomplete event.
    buf: BytesMut,
    counts: TokenCounts,
    done: bool,
    ended: bool,
    finished: bool,
}

impl MeteredStream {
    pub(crate) fn new(
        gateway: Gateway,
        meter: Meter,
        upstream_name: String,
        first: Bytes,
        body: Upstream,
        strip_usage: bool,
    ) -> MeteredStream {
        MeteredStream {
            gateway,
            meter,
            upstream_name,
            first: Some(first),
            body,
            strip_usage,
            buf: BytesMut::new(),
            counts: TokenCounts::default(),
            done: false,
            ended: false,
            finished: false,
        }
    }

    fn finish(&mut self, status: UsageStatus) {
        if !self.finished {
            self.finished = true;
            self.meter
                .finish(&self.gateway.inner, status, 200, self.counts);
        }
    }

    /// The complete events in the buffer, minus a usage chunk to be taken out; the incomplete
    /// rest stays. With `all`, the rest counts as a last event (the upstream closed after it).
    fn take_events(&mut self, all: bool) -> Bytes {
        let mut buf = std::mem::take(&mut self.buf);
        let mut start = 0;
        let mut kept: Option<BytesMut> = None;
        loop {
            let rest = &buf[start..];
            let end = match event_end(rest) {
                Some(end) => end,
                None if all && !rest.is_empty() => rest.len(),
                None => break,
            };
            let event = &rest[..end];
            let keep = self.inspect(event);
            match (&mut kept, keep) {
                (Some(out), true) => out.extend_from_slice(event),
                (Some(_), false) => {}
                (None, false) => {
                    // The first event taken out: copy what was kept before it.
                    kept = Some(BytesMut::from(&buf[..start]));
                }
                (None, true) => {}
            }
            start += end;
        }
        let consumed = buf.split_to(start);
        self.buf = buf;
        match kept {
            Some(out) => out.freeze(),
            None => consumed.freeze(),
        }
    }

    /// Reads one event: `[DONE]`, usage. False when it is to be taken out.
    fn inspect(&mut self, event: &[u8]) -> bool {
        let data = data_of(event);
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return true;
        }
        if !(contains(data, b"\"usage\":{") || contains(data, b"\"usage\": {")) {
            return true;
        }
        #[derive(Deserialize)]
        struct Chunk {
            #[serde(default)]
            choices: Option<Vec<IgnoredAny>>,
            #[serde(default)]
            usage: Option<TokenCounts>,
        }
        match serde_json::from_slice::<Chunk>(data) {
            Ok(chunk) => {
                if let Some(usage) = chunk.usage {
                    self.counts = usage;
                }
                let usage_only = chunk.choices.is_none_or(|c| c.is_empty());
                !(self.strip_usage && usage_only && chunk.usage.is_some())
            }
            Err(_) => true,
        }
    }

    fn cut(&mut self, detail: &str) -> Bytes {
        let mut out = BytesMut::from(&self.take_events(true)[..]);
        let message = format!(
            "the upstream {} broke off the stream before its end ({detail}); the answer is incomplete",
            self.upstream_name
        );
        tracing::warn!(upstream = %self.upstream_name, model = %self.meter.model, detail, "gateway stream cut");
        out.extend_from_slice(&stream_error_event(&message));
        self.finish(UsageStatus::Cut);
        out.freeze()
    }
}

impl Stream for MeteredStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let next = match this.first.take() {
                Some(first) => Some(Ok(first)),
                None => match this.body.as_mut().poll_next(cx) {
                    Poll::Ready(next) => next,
                    Poll::Pending => return Poll::Pending,
                },
            };
            match next {
                Some(Ok(bytes)) => {
                    this.buf.extend_from_slice(&bytes);
                    let out = this.take_events(false);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Some(Err(e)) => {
                    this.ended = true;
                    let out = this.cut(&e);
                    return Poll::Ready(Some(Ok(out)));
                }
                None => {
                    this.ended = true;
                    let out = this.take_events(true);
                    if this.done {
                        this.finish(UsageStatus::Ok);
                        return Poll::Ready((!out.is_empty()).then_some(Ok(out)));
                    }
                    let mut all = BytesMut::from(&out[..]);
                    all.extend_from_slice(&this.cut("it closed without [DONE]"));
                    return Poll::Ready(Some(Ok(all.freeze())));
                }
            }
        }
    }
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        // The client went away before the end.
        self.finish(if self.done {
            UsageStatus::Ok
        } else {
            UsageStatus::Abandoned
        });
    }
}

/// The length of the first complete event (its blank line included), if there is one.
pub(crate) fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            match bytes.get(i + 1) {
                Some(b'\n') => return Some(i + 2),
                Some(b'\r') if bytes.get(i + 2) == Some(&b'\n') => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// The `data:` payload of an event (its first data line; the OpenAI servers send one).
pub(crate) fn data_of(event: &[u8]) -> &[u8] {
    for line in event.split(|b| *b == b'\n') {
        if let Some(data) = line.strip_prefix(b"data:") {
            return data.trim_ascii();
        }
    }
    b""
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_a_blank_line_in_either_line_ending() {
        assert_eq!(event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(event_end(b"data: a\r\n\r\ndata: b"), Some(11));
        assert_eq!(event_end(b"data: a\n"), None);
        assert_eq!(data_of(b"event: x\ndata: {\"a\":1}\n\n"), b"{\"a\":1}");
    }
}
