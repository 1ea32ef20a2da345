//! Helpers shared by the integration tests: a client with fast retries, requests, and an event
//! recorder.
#![allow(dead_code)]

use std::sync::Mutex;
use std::time::Duration;

use maestro_llm::{
    ChatRequest, Message, OpenAiCompat, OpenAiConfig, RetryPolicy, StreamEvent, ToolMode,
};
use maestro_protocol::ToolSpec;
use serde_json::json;

/// Millisecond backoff without jitter, so retry tests run fast and delays are exact.
pub(crate) fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial: Duration::from_millis(5),
        max: Duration::from_millis(20),
        jitter: 0.0,
    }
}

pub(crate) fn config(base_url: String) -> OpenAiConfig {
    OpenAiConfig::new(base_url)
        .with_retry(fast_retry(6))
        .with_idle_timeout(Duration::from_secs(5))
}

pub(crate) fn client(config: OpenAiConfig) -> OpenAiCompat {
    OpenAiCompat::new(config).unwrap()
}

pub(crate) fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        model: "scripted-model".into(),
        messages: vec![
            Message::System {
                content: "Be brief.".into(),
            },
            Message::user(text),
        ],
        ..ChatRequest::default()
    }
}

pub(crate) fn read_tool() -> ToolSpec {
    ToolSpec {
        name: "Read".into(),
        description: "Reads a file of the workspace.".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}).into(),
    }
}

/// Collects the events a call reports.
#[derive(Default)]
pub(crate) struct Events(Mutex<Vec<StreamEvent>>);

impl Events {
    pub(crate) fn sink(&self) -> impl Fn(StreamEvent) + Send + Sync + '_ {
        |event| self.0.lock().unwrap().push(event)
    }

    pub(crate) fn all(&self) -> Vec<StreamEvent> {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn text(&self) -> String {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta(t) => Some(t),
                StreamEvent::Retry { .. } | StreamEvent::ToolModeChanged { .. } => None,
            })
            .collect()
    }

    /// `(mode, reason)` of each tool-mode change.
    pub(crate) fn tool_mode_changes(&self) -> Vec<(ToolMode, String)> {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::ToolModeChanged { mode, reason } => Some((mode, reason)),
                StreamEvent::TextDelta(_) | StreamEvent::Retry { .. } => None,
            })
            .collect()
    }

    /// `(attempt, delay)` of each retry.
    pub(crate) fn retries(&self) -> Vec<(u32, Duration, String)> {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::Retry {
                    attempt,
                    delay,
                    reason,
                } => Some((attempt, delay, reason)),
                StreamEvent::TextDelta(_) | StreamEvent::ToolModeChanged { .. } => None,
            })
            .collect()
    }
}
