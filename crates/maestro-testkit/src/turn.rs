//! [`Turn`]: one scripted answer (or failure) of the [`ScriptedLlm`](crate::ScriptedLlm).

use std::time::Duration;

use serde_json::Value;

/// One scripted answer of the [`ScriptedLlm`](crate::ScriptedLlm): what the next request
/// receives. Build it with a constructor and refine it with the `with_*` methods:
///
/// ```
/// use std::time::Duration;
/// use maestro_testkit::Turn;
/// use serde_json::json;
///
/// let script = vec![
///     Turn::http_error(429, "slow down").retry_after(1),
///     Turn::tool_call("Read", json!({"path": "src/main.rs"})).with_usage(120, 8),
///     Turn::text("All done.").with_delay(Duration::from_millis(20)),
///     Turn::when_contains("ARCH-REVIEW", Turn::text("approved")),
/// ];
/// # let _ = script;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub(crate) action: Action,
    pub(crate) usage: Option<(u64, u64)>,
    pub(crate) delay: Option<Duration>,
    pub(crate) matcher: Option<String>,
    pub(crate) answered_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    Reply {
        content: String,
        tool_calls: Vec<ScriptedCall>,
    },
    HttpError {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    BrokenStream {
        after_chunks: usize,
        clean_close: bool,
    },
    Stall(Duration),
    Endless {
        every: Duration,
    },
    Raw {
        content_type: String,
        body: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScriptedCall {
    pub name: String,
    /// The raw `arguments` text, exactly as it will be sent (it may be malformed on purpose).
    pub arguments: String,
}

impl Turn {
    fn new(action: Action) -> Turn {
        Turn {
            action,
            usage: None,
            delay: None,
            matcher: None,
            answered_by: None,
        }
    }

    /// A plain text answer (`finish_reason: stop`), streamed in several chunks.
    pub fn text(content: impl Into<String>) -> Turn {
        Turn::new(Action::Reply {
            content: content.into(),
            tool_calls: Vec::new(),
        })
    }

    /// A text answer holding `value` serialised: the reply to a `json_schema` request (a judge
    /// call, or a JSON-tool-mode call such as `json!({"tool": "Read", "arguments": {…}})`).
    pub fn json(value: Value) -> Turn {
        Turn::text(value.to_string())
    }

    /// One native tool call (`finish_reason: tool_calls`) with `arguments` serialised. When
    /// streamed, the name comes in the first delta and the arguments over two or more more.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Turn {
        Turn::tool_calls([(name, arguments)])
    }

    /// A tool call whose `arguments` text is sent verbatim, e.g. `"{\"path\": "` to test how a
    /// malformed call is handled.
    pub fn tool_call_raw(name: impl Into<String>, arguments: impl Into<String>) -> Turn {
        let call = ScriptedCall {
            name: name.into(),
            arguments: arguments.into(),
        };
        Turn::new(Action::Reply {
            content: String::new(),
            tool_calls: vec![call],
        })
    }

    /// Several tool calls in one answer. When streamed, their deltas are interleaved by `index`
    /// (all names first, then the argument pieces of each call in turn).
    pub fn tool_calls<S: Into<String>>(calls: impl IntoIterator<Item = (S, Value)>) -> Turn {
        let tool_calls = calls
            .into_iter()
            .map(|(name, arguments)| ScriptedCall {
                name: name.into(),
                arguments: arguments.to_string(),
            })
            .collect();
        Turn::new(Action::Reply {
            content: String::new(),
            tool_calls,
        })
    }

    /// Adds answer text before the tool calls of this turn (or replaces a text answer's text).
    pub fn with_text(mut self, text: impl Into<String>) -> Turn {
        if let Action::Reply { content, .. } = &mut self.action {
            *content = text.into();
        }
        self
    }

    /// An HTTP error answer with `body` as its body (pass JSON such as
    /// `{"error":{"message":"…"}}` or plain text).
    pub fn http_error(status: u16, body: impl Into<String>) -> Turn {
        Turn::new(Action::HttpError {
            status,
            body: body.into(),
            retry_after: None,
        })
    }

    /// Adds a `Retry-After: <seconds>` header to an [`http_error`](Turn::http_error) turn.
    pub fn retry_after(mut self, seconds: u64) -> Turn {
        if let Action::HttpError { retry_after, .. } = &mut self.action {
            *retry_after = Some(seconds);
        }
        self
    }

    /// A 200 answer that sends `after_chunks` chunks of text and then drops the connection,
    /// without `finish_reason` or `[DONE]`. A non-streaming request gets a truncated body.
    pub fn broken_stream(after_chunks: usize) -> Turn {
        Turn::new(Action::BrokenStream {
            after_chunks,
            clean_close: false,
        })
    }

    /// Like [`broken_stream`](Turn::broken_stream), but the stream ends in good order (the
    /// chunked body is terminated) — still without `finish_reason` or `[DONE]`.
    pub fn truncated_stream(after_chunks: usize) -> Turn {
        Turn::new(Action::BrokenStream {
            after_chunks,
            clean_close: true,
        })
    }

    /// A 200 answer that falls silent: a streaming request gets the response headers and a first
    /// chunk, then nothing for `duration`, then the connection drops; a non-streaming request
    /// waits `duration` for headers, then the connection drops. For idle-timeout tests.
    pub fn stall(duration: Duration) -> Turn {
        Turn::new(Action::Stall(duration))
    }

    /// A 200 answer that never ends: a streaming request gets text chunks (`"la "`) for as long
    /// as the client reads, a non-streaming request a JSON body that never closes. For tests of
    /// the answer-size caps; see [`ScriptedLlm::bytes_sent`](crate::ScriptedLlm::bytes_sent).
    pub fn endless() -> Turn {
        Turn::new(Action::Endless {
            every: Duration::ZERO,
        })
    }

    /// Like [`endless`](Turn::endless), but one chunk every `every`: each chunk arrives well
    /// within any idle timeout, yet the answer never completes. For the total-deadline tests.
    pub fn endless_every(every: Duration) -> Turn {
        Turn::new(Action::Endless { every })
    }

    /// A 200 answer with `body` sent verbatim as `content_type`, whatever the request asked
    /// for: an HTML page (`"text/html"`), a JSON body that is not a completion, or an SSE stream
    /// with a chunk that is not JSON (`"text/event-stream"`, `"data: {oops\n\n"`).
    pub fn raw(content_type: impl Into<String>, body: impl Into<String>) -> Turn {
        Turn::new(Action::Raw {
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// Reports this usage: in the non-streamed answer, or as the final usage chunk when the
    /// request asked for `stream_options.include_usage`. Without it no usage is sent.
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Turn {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Names `model` as the model that answered (the answer's `model` field), as a gateway or
    /// router does when it serves another model than the one asked for. Without it the answer
    /// names the requested model.
    pub fn answered_by(mut self, model: impl Into<String>) -> Turn {
        self.answered_by = Some(model.into());
        self
    }

    /// Waits `delay` before answering.
    pub fn with_delay(mut self, delay: Duration) -> Turn {
        self.delay = Some(delay);
        self
    }

    /// Serves `turn` only to a request whose message texts contain `needle`. Such turns are
    /// looked for first (in script order); requests that match none take the first turn without
    /// a condition. This keeps concurrent callers (parallel movements) deterministic.
    pub fn when_contains(needle: impl Into<String>, turn: Turn) -> Turn {
        Turn {
            matcher: Some(needle.into()),
            ..turn
        }
    }
}
