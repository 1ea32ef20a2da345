//! Turning a [`Turn`] into HTTP answers shaped like a real Chat Completions server's: SSE chunks
//! (text in pieces, tool-call deltas split and interleaved by index, an optional usage chunk,
//! `[DONE]`) or one `chat.completion` object.

use std::collections::VecDeque;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::ask::Ask;
use crate::turn::{Action, ScriptedCall, Turn};

/// Something the response body does next.
pub(crate) enum Frame {
    Data(String),
    Sleep(Duration),
    Abort,
    /// `Data` again and again, `every` apart, until the client stops reading.
    Forever {
        data: String,
        every: Duration,
    },
}

/// Counts the bytes of every response body sent, for [`ScriptedLlm::bytes_sent`](crate::ScriptedLlm::bytes_sent).
pub(crate) type SentBytes = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// The answer to one chat request. `seq` numbers the answers, for ids.
pub(crate) fn respond(turn: Turn, ask: &Ask, seq: usize, sent: &SentBytes) -> Response {
    let stream = ask.stream;
    let include_usage = ask.include_usage;
    let model = turn
        .answered_by
        .clone()
        .or_else(|| ask.model.clone())
        .unwrap_or_else(|| "scripted".to_string());
    let usage = turn
        .usage
        .map(|(p, c)| json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}));
    let meta = Meta {
        id: format!("chatcmpl-scripted-{seq}"),
        model,
        seq,
    };
    match turn.action {
        Action::HttpError {
            status,
            body,
            retry_after,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (status, body).into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
        Action::Reply {
            content,
            tool_calls,
        } if stream => {
            let mut frames = reply_chunks(&meta, &content, &tool_calls);
            if let (true, Some(usage)) = (include_usage, usage) {
                frames.push(Frame::Data(meta.chunk(json!([]), Some(usage))));
            }
            frames.push(Frame::Data("[DONE]".into()));
            body_response("text/event-stream", frames, true, sent)
        }
        Action::Reply {
            content,
            tool_calls,
        } => {
            let body = meta.completion(&content, &tool_calls, usage);
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
        Action::BrokenStream {
            after_chunks,
            clean_close,
        } if stream => {
            let mut frames: Vec<Frame> =
                reply_chunks(&meta, "this answer breaks off before it ends", &[])
                    .into_iter()
                    .take(after_chunks)
                    .collect();
            if !clean_close {
                frames.push(Frame::Abort);
            }
            body_response("text/event-stream", frames, true, sent)
        }
        Action::BrokenStream { .. } => {
            let frames = vec![
                Frame::Data("{\"id\":\"chatcmpl-broken\",\"choices\":[{\"mess".into()),
                Frame::Abort,
            ];
            body_response("application/json", frames, false, sent)
        }
        Action::Stall(duration) if stream => {
            let first = meta.chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]), None);
            body_response(
                "text/event-stream",
                vec![Frame::Data(first), Frame::Sleep(duration), Frame::Abort],
                true,
                sent,
            )
        }
        Action::Stall(duration) => body_response(
            "application/json",
            vec![Frame::Sleep(duration), Frame::Abort],
            false,
            sent,
        ),
        Action::Endless { every } if stream => {
            let first = meta.delta(json!({"role": "assistant", "content": ""}), None);
            let data = meta.chunk(
                json!([{"index": 0, "delta": {"content": "la "}, "finish_reason": null}]),
                None,
            );
            body_response(
                "text/event-stream",
                vec![first, Frame::Forever { data, every }],
                true,
                sent,
            )
        }
        Action::Endless { every } => {
            let head = format!(
                "{{\"id\":\"{}\",\"object\":\"chat.completion\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"",
                meta.id
            );
            body_response(
                "application/json",
                vec![
                    Frame::Data(head),
                    Frame::Forever {
                        data: "la ".repeat(64),
                        every,
                    },
                ],
                false,
                sent,
            )
        }
        Action::Raw { content_type, body } => {
            let len = body.len();
            sent.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
            let mut response = (StatusCode::OK, body).into_response();
            if let Ok(value) = HeaderValue::from_str(&content_type) {
                response.headers_mut().insert(header::CONTENT_TYPE, value);
            }
            response
        }
    }
}

struct Meta {
    id: String,
    model: String,
    seq: usize,
}

impl Meta {
    fn chunk(&self, choices: Value, usage: Option<Value>) -> String {
        /// A `chat.completion.chunk`, written without building its outer object as a tree.
        #[derive(serde::Serialize)]
        struct Chunk<'a> {
            id: &'a str,
            object: &'static str,
            created: u8,
            model: &'a str,
            choices: &'a Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            usage: Option<&'a Value>,
        }
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: 0,
            model: &self.model,
            choices: &choices,
            usage: usage.as_ref(),
        };
        serde_json::to_string(&chunk).unwrap_or_default()
    }

    fn delta(&self, delta: Value, finish_reason: Option<&str>) -> Frame {
        Frame::Data(self.chunk(
            json!([{"index": 0, "delta": delta, "finish_reason": finish_reason}]),
            None,
        ))
    }

    fn call_id(&self, index: usize) -> String {
        format!("call_{}_{index}", self.seq)
    }

    fn completion(&self, content: &str, calls: &[ScriptedCall], usage: Option<Value>) -> Value {
        let mut message = json!({"role": "assistant", "content": if content.is_empty() && !calls.is_empty() { Value::Null } else { json!(content) }});
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    json!({"id": self.call_id(i), "type": "function",
                                     "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let mut body = json!({"id": self.id, "object": "chat.completion", "created": 0, "model": self.model,
                              "choices": [{"index": 0, "message": message, "finish_reason": finish}]});
        if let Some(usage) = usage {
            body["usage"] = usage;
        }
        body
    }
}

/// Role chunk, text in up to three pieces, tool-call deltas (names first, then each call's
/// arguments in two or more pieces, interleaved by index), and the finishing chunk.
fn reply_chunks(meta: &Meta, content: &str, calls: &[ScriptedCall]) -> Vec<Frame> {
    let mut frames = vec![meta.delta(json!({"role": "assistant", "content": ""}), None)];
    for piece in split(content, 3) {
        frames.push(meta.delta(json!({"content": piece}), None));
    }
    for (i, call) in calls.iter().enumerate() {
        frames.push(meta.delta(
            json!({"tool_calls": [{"index": i, "id": meta.call_id(i), "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]}),
            None,
        ));
    }
    let pieces: Vec<Vec<String>> = calls.iter().map(|c| split(&c.arguments, 3)).collect();
    let rounds = pieces.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..rounds {
        for (i, parts) in pieces.iter().enumerate() {
            if let Some(part) = parts.get(round) {
                frames.push(meta.delta(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                    None,
                ));
            }
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    frames.push(meta.delta(json!({}), Some(finish)));
    frames
}

/// Splits `text` into at most `parts` non-empty pieces on character boundaries.
pub(crate) fn split(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

pub(crate) fn body_response(
    content_type: &'static str,
    frames: Vec<Frame>,
    sse: bool,
    sent: &SentBytes,
) -> Response {
    let queue: VecDeque<Frame> = frames.into();
    let sent = sent.clone();
    let frame_bytes = move |data: &str| {
        let bytes = if sse {
            Bytes::from(format!("data: {data}\n\n"))
        } else {
            Bytes::from(data.to_string())
        };
        sent.fetch_add(bytes.len(), std::sync::atomic::Ordering::Relaxed);
        bytes
    };
    let stream = futures::stream::unfold(queue, move |mut queue| {
        let frame_bytes = frame_bytes.clone();
        async move {
            loop {
                if let Some(Frame::Forever { data, every }) = queue.front() {
                    if !every.is_zero() {
                        tokio::time::sleep(*every).await;
                    }
                    let bytes = frame_bytes(data);
                    return Some((Ok(bytes), queue));
                }
                match queue.pop_front()? {
                    Frame::Sleep(duration) => tokio::time::sleep(duration).await,
                    Frame::Forever { .. } => {}
                    Frame::Data(data) => {
                        return Some((Ok(frame_bytes(&data)), queue));
                    }
                    Frame::Abort => {
                        // Let what came before reach the client (a real server flushes as it goes),
                        // then drop the connection.
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        queue.clear();
                        return Some((
                            Err(std::io::Error::other("scripted connection drop")),
                            queue,
                        ));
                    }
                }
            }
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn split_keeps_every_character() {
        assert_eq!(split("abcdefg", 3), vec!["abc", "def", "g"]);
        assert_eq!(split("é", 3), vec!["é"]);
        assert!(split("", 3).is_empty());
    }
}
