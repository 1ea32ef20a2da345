//! What is retried and how long to wait: backoff with jitter, `Retry-After`, and the reading of
//! an endpoint's error body into the provider's own message.

use std::time::Duration;

use super::config::RetryPolicy;
use crate::LlmError;

/// `Retry-After` is honoured up to this bound, so a confused endpoint cannot park a run for hours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// How one failed attempt is to be handled.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Try again after the backoff (or the endpoint's `Retry-After`).
    Retryable {
        error: LlmError,
        retry_after: Option<Duration>,
    },
    /// The connection closed before any byte of an answer came back: a kept-alive connection
    /// the endpoint had already let go (llama.cpp's server closes them after a few requests or
    /// seconds). Sent again at once on a new connection, without a wait and without counting as a
    /// retry, once per attempt; a second such failure in a row is [`Failure::Retryable`].
    Resend(LlmError),
    /// Give up at once.
    Final(LlmError),
    /// The endpoint refused a request feature; send the request again without it (the error is
    /// what to report should that not help).
    Unsupported(Feature, LlmError),
}

/// A request feature some endpoints reject with HTTP 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feature {
    StreamOptions,
    Streaming,
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based), jitter included.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(20);
        let base = self.initial.saturating_mul(1u32 << exp).min(self.max);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = if jitter > 0.0 {
            1.0 + rand::random_range(-jitter..=jitter)
        } else {
            1.0
        };
        base.mul_f64(factor)
    }
}

/// Reads a `Retry-After` header: delay-seconds (`"2"`, `"1.5"`) or an HTTP date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`), which counts from now; a date in the past means "now".
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    parse_retry_after_at(value, time::OffsetDateTime::now_utc())
}

fn parse_retry_after_at(value: &str, now: time::OffsetDateTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        return Some(Duration::from_secs_f64(secs).min(MAX_RETRY_AFTER));
    }
    let at =
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc2822).ok()?;
    let wait = (at - now).max(time::Duration::ZERO);
    Some(Duration::try_from(wait).ok()?.min(MAX_RETRY_AFTER))
}

/// Sorts an HTTP error answer into retryable, final or "a feature was refused".
pub(crate) fn classify_status(
    status: u16,
    message: String,
    retry_after: Option<Duration>,
    sent_stream_options: bool,
    sent_stream: bool,
) -> Failure {
    let lower = message.to_ascii_lowercase();
    if is_context_overflow(status, &lower) {
        return Failure::Final(LlmError::ContextOverflow { status, message });
    }
    if status == 400 && sent_stream_options && lower.contains("stream_options") {
        return Failure::Unsupported(Feature::StreamOptions, LlmError::Http { status, message });
    }
    if status == 400 && sent_stream && lower.contains("stream") {
        return Failure::Unsupported(Feature::Streaming, LlmError::Http { status, message });
    }
    let error = LlmError::Http { status, message };
    if status == 429 || (500..600).contains(&status) {
        Failure::Retryable { error, retry_after }
    } else {
        Failure::Final(error)
    }
}

/// Whether an HTTP error answer says the request exceeded the model's context window. The
/// wording differs per server: llama.cpp ("exceeds the available context size"), vLLM and
/// OpenAI ("maximum context length", `context_length_exceeded`), Ollama ("context length"),
/// Anthropic ("prompt is too long: 210000 tokens > 200000 maximum").
fn is_context_overflow(status: u16, lower_message: &str) -> bool {
    matches!(status, 400 | 413)
        && [
            "context size",
            "context length",
            "context_length",
            "context window",
            "too many tokens",
            "prompt is too long",
        ]
        .iter()
        .any(|needle| lower_message.contains(needle))
}

/// The provider's own words from an error body: `error.message`, `error` (a string), `message`
/// or `detail` when the body is JSON, else the body itself (shortened).
pub(crate) fn provider_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(body) {
        let candidates = [
            value.pointer("/error/message"),
            value.get("error"),
            value.get("message"),
            value.get("detail"),
        ];
        for candidate in candidates.into_iter().flatten() {
            if let Some(text) = candidate.as_str() {
                return text.to_string();
            }
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty response body)".to_string();
    }
    if looks_like_html(trimmed) {
        // A proxy's or a web server's error page: its words, not its markup, and few of them
        // (the message goes into every retry's warning and the run's reason).
        return format!("(an HTML page) {}", shorten(&html_text(trimmed), 300));
    }
    shorten(trimmed, 2000)
}

fn looks_like_html(body: &str) -> bool {
    let head: String = body
        .chars()
        .take(15)
        .collect::<String>()
        .to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html")
}

/// The text of an HTML page: markup, `<style>` and `<script>` left out, white space collapsed.
fn html_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        out.push(' ');
        let tag = &rest[open..];
        let lower: String = tag.chars().take(8).collect::<String>().to_ascii_lowercase();
        let skip_to = if lower.starts_with("<style") {
            find_ci(tag, "</style>").map(|at| at + "</style>".len())
        } else if lower.starts_with("<script") {
            find_ci(tag, "</script>").map(|at| at + "</script>".len())
        } else {
            tag.find('>').map(|at| at + 1)
        };
        match skip_to {
            Some(len) => rest = &tag[len..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    haystack.to_ascii_lowercase().find(needle)
}

/// An error with its chain of causes, `outer: inner: root`, since reqwest's own message alone
/// ("error sending request") rarely says what went wrong.
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Whether a failed send is hyper's "connection closed before message completed": the request
/// went out on a connection that the peer closed before it answered anything.
pub(crate) fn closed_before_answer(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_within_jitter() {
        let policy = RetryPolicy::default();
        for (attempt, base) in [
            (1, 1.0),
            (2, 2.0),
            (3, 4.0),
            (5, 16.0),
            (6, 30.0),
            (30, 30.0),
        ] {
            let got = policy.backoff(attempt).as_secs_f64();
            assert!(
                got >= base * 0.8 - 1e-9 && got <= base * 1.2 + 1e-9,
                "attempt {attempt}: {got}"
            );
        }
        let exact = RetryPolicy {
            jitter: 0.0,
            ..policy
        };
        assert_eq!(exact.backoff(3), Duration::from_secs(4));
    }

    #[test]
    fn retry_after_reads_seconds_and_ignores_dates() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        let now = time::macros::datetime!(2015-10-21 07:27:30 UTC);
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after_at("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("99999"), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn provider_message_prefers_the_error_chain() {
        assert_eq!(
            provider_message(r#"{"error":{"message":"model not found","type":"x"}}"#),
            "model not found"
        );
        assert_eq!(provider_message(r#"{"error":"overloaded"}"#), "overloaded");
        assert_eq!(provider_message(r#"{"detail":"bad"}"#), "bad");
        assert_eq!(provider_message("  plain text  "), "plain text");
        assert_eq!(provider_message(""), "(empty response body)");
        let page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head><title>Error response</title>\n\
                    <style>p { color: red }</style></head>\n<body>\n<h1>Error response</h1>\n\
                    <p>Error code: 501</p>\n<p>Message: Unsupported method ('POST').</p>\n\
                    </body>\n</html>\n";
        assert_eq!(
            provider_message(page),
            "(an HTML page) Error response Error response Error code: 501 Message: Unsupported \
             method ('POST')."
        );
        let long = format!("<html><body>{}</body></html>", "word ".repeat(500));
        assert!(provider_message(&long).chars().count() < 330);
    }

    #[test]
    fn statuses_sort_into_retryable_final_and_unsupported() {
        let retryable = |s| {
            matches!(
                classify_status(s, "x".into(), None, true, true),
                Failure::Retryable { .. }
            )
        };
        assert!(retryable(429) && retryable(500) && retryable(503));
        assert!(matches!(
            classify_status(401, "no".into(), None, true, true),
            Failure::Final(_)
        ));
        assert!(matches!(
            classify_status(400, "Unknown field stream_options".into(), None, true, true),
            Failure::Unsupported(Feature::StreamOptions, _)
        ));
        assert!(matches!(
            classify_status(400, "streaming is not supported".into(), None, false, true),
            Failure::Unsupported(Feature::Streaming, _)
        ));
        assert!(matches!(
            classify_status(400, "bad messages".into(), None, true, true),
            Failure::Final(LlmError::Http { .. })
        ));
    }

    #[test]
    fn only_a_refused_request_names_a_context_overflow() {
        let overflow = |status, message: &str| {
            matches!(
                classify_status(status, message.into(), None, true, true),
                Failure::Final(LlmError::ContextOverflow { .. })
            )
        };
        assert!(overflow(
            400,
            "This model's maximum context length is 8192 tokens"
        ));
        assert!(overflow(413, "request exceeds the available context size"));
        assert!(!overflow(400, "unknown model `x`"));
        assert!(!overflow(500, "context size exceeded"));
    }
}
