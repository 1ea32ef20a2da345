//! One model call's request on the wire, shared by both providers: sent with the idle timeout
//! on the response headers, and a response that is not a success read and classified into a
//! [`Failure`].

use std::time::Duration;

use reqwest::header::RETRY_AFTER;

use super::retry::{
    Failure, classify_status, closed_before_answer, describe, parse_retry_after, provider_message,
};
use super::sse::{self, Limits};
use crate::LlmError;

/// What [`send`] needs to classify a refusal beyond the response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    /// The request asked for `stream_options` (an endpoint may refuse them).
    pub stream_options: bool,
    /// The request asked for a stream (an endpoint may refuse streaming).
    pub stream: bool,
}

/// Sends `request` to `url` and waits up to `idle` for the response headers. A successful
/// status gives the response; anything else is the attempt's [`Failure`]: a timeout or a
/// connect error to retry, a kept-alive connection the endpoint had dropped to send again at
/// once, a request that could not be built as final, a status other than a success read and
/// classified by [`classify_status`], with `explain` putting the endpoint's own message into
/// the error's words (given the HTTP status).
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    url: &str,
    idle: Duration,
    limits: Limits,
    sent: Sent,
    explain: impl FnOnce(u16, String) -> String,
) -> Result<reqwest::Response, Failure> {
    let response = match tokio::time::timeout(idle, request.send()).await {
        Err(_) => {
            return Err(Failure::Retryable {
                error: LlmError::Timeout(format!(
                    "no answer from {url} within {} ms (idle_timeout)",
                    idle.as_millis()
                )),
                retry_after: None,
            });
        }
        Ok(Err(e)) => {
            let error = LlmError::Connect {
                url: url.to_string(),
                message: describe(&e),
            };
            if e.is_builder() {
                return Err(Failure::Final(error));
            }
            if closed_before_answer(&e) {
                return Err(Failure::Resend(error));
            }
            return Err(Failure::Retryable {
                error,
                retry_after: None,
            });
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let text = sse::read_body(response, idle, limits)
        .await
        .unwrap_or_default();
    let status = status.as_u16();
    Err(classify_status(
        status,
        explain(status, provider_message(&text)),
        retry_after,
        sent.stream && sent.stream_options,
        sent.stream,
    ))
}
