//! What the scripted servers ([`ScriptedLlm`](crate::ScriptedLlm) and
//! [`ScriptedAnthropic`](crate::ScriptedAnthropic)) share: serving their routes on a listener
//! until dropped, recording a request, and taking the turn that answers it.

use std::collections::VecDeque;

use axum::Router;
use axum::http::{HeaderMap, Uri};
use serde_json::Value;

use crate::scripted::RecordedRequest;
use crate::turn::Turn;

/// Serves `app` on `listener` in a task, which the server aborts when dropped; a server that
/// stops with an error says so on stderr, naming `server`.
pub(crate) fn spawn<L>(
    server: &'static str,
    listener: L,
    app: Router,
) -> tokio::task::JoinHandle<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("{server} server stopped: {e}");
        }
    })
}

/// A request as received: its path, its headers as text, and `body` (already parsed).
pub(crate) fn recorded(uri: &Uri, headers: &HeaderMap, body: Value) -> RecordedRequest {
    let headers = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    RecordedRequest {
        path: uri.path().to_string(),
        headers,
        body,
    }
}

/// Takes the turn that answers a request from `script`: the first conditional turn whose needle
/// occurs in the request's text (`haystack`, gathered only when some turn is conditional), else
/// the first unconditional turn.
pub(crate) fn take_turn(
    script: &mut VecDeque<Turn>,
    haystack: impl FnOnce() -> String,
) -> Option<Turn> {
    if !script.iter().any(|t| t.matcher.is_some()) {
        return script.pop_front();
    }
    let haystack = haystack();
    let position = script
        .iter()
        .position(|t| {
            t.matcher
                .as_ref()
                .is_some_and(|needle| haystack.contains(needle.as_str()))
        })
        .or_else(|| script.iter().position(|t| t.matcher.is_none()))?;
    script.remove(position)
}
