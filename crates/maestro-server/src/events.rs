//! `GET /api/v1/jobs/{id}/events`: a job's events as Server-Sent Events, from the store and
//! then live, across parks and answers, until the job's status is final.
//!
//! Each committed event goes out with `id:` (its `seq`), `event:` (its type) and `data:` (the
//! line `events.jsonl` holds). `text_delta` (the model's text as it streams, from the node that
//! runs the job), `status` (the job's status, first as it is, then at each change) and
//! `resync` (the cursor is beyond the last event) have no `id`, so they never move a client's
//! cursor. `Last-Event-ID` or `?after=SEQ` resumes after that event. With
//! `Limits::max_stream` (`maestro serve --max-stream-secs`) a stream ends after that long, between
//! two events, and its client resumes.
//!
//! No host path leaves the server: every event goes out through [`for_client`], which drops the
//! run's directories and makes the files under them relative to the run directory.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use maestro_app::{JobId, JobQueue as _, Watched};

use serde::Deserialize;
use tokio::sync::mpsc;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::ServerState;

/// How often an idle stream sends a comment, so that proxies keep it open.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Stream clients per job on this node.
#[derive(Debug, Default)]
pub(crate) struct StreamCounts {
    by_job: Mutex<HashMap<JobId, usize>>,
}

/// One client's place among its job's; it leaves when dropped.
struct StreamSlot {
    state: ServerState,
    job: JobId,
}

impl StreamCounts {
    fn take(&self, state: &ServerState, job: JobId) -> Result<StreamSlot, ApiError> {
        let limit = state.limits().stream_clients_per_job;
        let mut by_job = self
            .by_job
            .lock()
            .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is failing"))?;
        let n = by_job.entry(job).or_default();
        if *n >= limit {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "job {job} already has {limit} stream clients on this node \
                     (`maestro serve --stream-clients-per-job`); close one, or follow it from another node"
                ),
            ));
        }
        *n += 1;
        state.metrics().stream_opened();
        Ok(StreamSlot {
            state: state.clone(),
            job,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Ok(mut by_job) = self.state.inner.streams.by_job.lock()
            && let Some(n) = by_job.get_mut(&self.job)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                by_job.remove(&self.job);
            }
        }
        self.state.metrics().stream_closed();
    }
}

/// The query of `GET /jobs/{id}/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Resume after this `seq` (as `Last-Event-ID` does; the header wins when both are given).
    after: Option<i64>,
    /// `jsonl`: the events committed so far, at once, one JSON line each.
    format: Option<String>,
}

/// Follow a job's events.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/events", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job's id"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "Server-Sent Events, or JSON lines with `?format=jsonl`",
            content_type = "text/event-stream", body = String),
        (status = 404, description = "No such job (or not one of yours)", body = crate::openapi::schema::Problem),
        (status = 429, description = "Too many stream clients on this job", body = crate::openapi::schema::Problem),
    ),
)]
pub(crate) async fn events(
    State(state): State<ServerState>,
    caller: Caller,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = caller.job()?;
    stream_job(state, id, q, &headers).await
}

/// The stream of one job, for a caller already allowed to see it.
pub(crate) async fn stream_job(
    state: ServerState,
    id: JobId,
    q: EventsQuery,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    match q.format.as_deref() {
        None | Some("sse") => {}
        Some("jsonl") => return jsonl(&state, id).await,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`format` `{}` is not known; use `jsonl`, or leave it out for a stream",
                other.escape_debug()
            )));
        }
    }
    let header_after = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "`Last-Event-ID` must be the `id` of an event this stream sent (a number)",
                    )
                })?,
        ),
        None => None,
    };
    let after = header_after.or(q.after);
    if after.is_some_and(|a| a < 0) {
        return Err(ApiError::bad_request("`after` must be 0 or more"));
    }
    let slot = state.inner.streams.take(&state, id)?;
    let mut watch = maestro_app::watch_job(state.store(), state.worker(), id, after).await?;
    let (tx, rx) = mpsc::channel::<Event>(64);
    let closing = state.inner.closing.clone();
    // `--max-stream-secs`: the stream ends then, between two events; the client resumes.
    let cut = state.limits().max_stream;
    tokio::spawn(async move {
        let _slot = slot;
        let cut_at = cut.map(|after| tokio::time::Instant::now() + after);
        loop {
            let expired = async {
                match cut_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            // A client that went away frees its place at once, not at the job's next event.
            let item = tokio::select! {
                item = watch.next() => item,
                () = closing.cancelled() => None,
                () = tx.closed() => None,
                () = expired => None,
            };
            let Some(item) = item else {
                return;
            };
            let Some(event) = sse_event(&item, id) else {
                continue;
            };
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// An event as the API sends it (the stream, `?format=jsonl`, a share link's): the line
/// `events.jsonl` holds without the server's paths. `run_dir` and `workspace` are dropped; the
/// files under the run directory (`prompt_log`, `transcript`, a report's `path`) are given
/// relative to it (`logs/…`, `reports/…`), and `piece_file` by its file name.
pub(crate) fn for_client(mut event: serde_json::Value, job: JobId) -> serde_json::Value {
    let Some(fields) = event.as_object_mut() else {
        return event;
    };
    fields.remove("run_dir");
    fields.remove("workspace");
    let run_dir = format!("/{job}/");
    for key in ["prompt_log", "transcript", "path", "piece_file"] {
        let Some(serde_json::Value::String(path)) = fields.get_mut(key) else {
            continue;
        };
        let relative = match path.rfind(&run_dir) {
            Some(at) if key != "piece_file" => path[at + run_dir.len()..].to_string(),
            // Not under this job's run directory (a subtask's, another layout): the name alone.
            _ => std::path::Path::new(path.as_str())
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        *path = relative;
    }
    event
}

fn sse_event(item: &Watched, job: JobId) -> Option<Event> {
    match item {
        Watched::Event(record) => {
            let data =
                serde_json::to_string(&for_client(serde_json::to_value(&**record).ok()?, job))
                    .ok()?;
            Some(
                Event::default()
                    .id(record.seq.to_string())
                    .event(record.event.kind())
                    .data(data),
            )
        }
        Watched::Status(status) => Some(
            Event::default()
                .event("status")
                .data(serde_json::json!({ "status": status }).to_string()),
        ),
        Watched::TextDelta { movement, text } => Some(
            Event::default()
                .event("text_delta")
                .data(serde_json::json!({ "movement": movement, "text": text }).to_string()),
        ),
        Watched::Resync { last_seq } => Some(
            Event::default()
                .event("resync")
                .data(serde_json::json!({ "last_seq": last_seq }).to_string()),
        ),
    }
}

async fn jsonl(state: &ServerState, id: JobId) -> ApiResult<Response> {
    let events = state.store().events(id, 0).await?;
    let mut body = String::new();
    for event in events {
        body.push_str(&for_client(event.payload, id).to_string());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::for_client;
    use maestro_app::JobId;
    use serde_json::json;

    #[test]
    fn an_event_leaves_without_the_server_s_paths() {
        let job: JobId = "01a21469-d7c1-7768-a83c-3149cc1664aa".parse().unwrap();
        let run = format!("/srv/maestro/runs/{job}");
        let started = json!({"type": "run_started", "run_dir": run, "workspace": run,
            "piece_file": "/srv/maestro/pieces/review.yaml", "task": "x"});
        assert_eq!(
            for_client(started, job),
            json!({"type": "run_started", "piece_file": "review.yaml", "task": "x"})
        );
        let report = json!({"type": "report_written", "path": format!("{run}/reports/plan.md")});
        assert_eq!(
            for_client(report, job),
            json!({"type": "report_written", "path": "reports/plan.md"})
        );
        // Under another run's directory (a subtask's): the file's name alone.
        let other = json!({"type": "movement_started", "prompt_log": "/srv/runs/other/logs/1.md"});
        assert_eq!(
            for_client(other, job),
            json!({"type": "movement_started", "prompt_log": "1.md"})
        );
    }
}
