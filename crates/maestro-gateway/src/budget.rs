//! Key budgets on the store's budget ledger: before a request of a key with a budget goes to an
//! upstream, its worst case (the prompt's estimated tokens, with an allowance for the chat
//! template, plus the answer's cap times the request's `n`, priced at the dearest target of the
//! route) is reserved in one atomic store operation; the answer's real
//! usage settles it. Concurrent requests, on one gateway or several sharing a store, can
//! therefore never pass a budget together.
//!
//! A key's budget is the ledger's budget `key:<id>` for a total, or `key:<id>:<period start>`
//! for a budget per day, week or month (UTC), so each period starts from nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value, json};
use time::{Date, Month, OffsetDateTime, Time, Weekday};

use crate::keys::GatewayKey;
use crate::usage::GatewayStore;

/// How long a reservation may stay open before the ledger takes it back (the gateway died
/// holding it): longer than any answer should take.
pub(crate) const RESERVATION_TTL: Duration = Duration::from_secs(2 * 60 * 60);

/// A budget's caps, as the ledger keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetLimits {
    /// The most tokens, prompt and completion together.
    pub max_tokens: Option<u64>,
    /// The most micro-USD (1 USD = 1,000,000).
    pub max_micro_usd: Option<u64>,
}

/// An amount reserved or spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spend {
    /// Tokens, prompt and completion together.
    pub tokens: u64,
    /// Micro-USD.
    pub micro_usd: u64,
}

/// Which cap a refused reservation would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cap {
    /// The token budget.
    Tokens,
    /// The dollar budget.
    Usd,
}

/// A reservation the ledger refused: the cap and the budget's amounts then (tokens, or
/// micro-USD for [`Cap::Usd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetDenied {
    /// The cap that does not fit.
    pub cap: Cap,
    /// Its limit.
    pub limit: u64,
    /// What the budget spent of it.
    pub spent: u64,
    /// What requests in progress hold of it.
    pub reserved: u64,
}

/// The budget a key spends from at `now_ms`: the ledger's id, and when it resets (Unix
/// milliseconds; `None` for a total). `None` when the key has no budget.
pub(crate) fn key_budget(
    key: &GatewayKey,
    now_ms: i64,
) -> Option<(String, BudgetLimits, Option<i64>)> {
    let limits = BudgetLimits {
        max_tokens: key.budget_tokens.and_then(|t| u64::try_from(t).ok()),
        max_micro_usd: key.budget_micro_usd.and_then(|t| u64::try_from(t).ok()),
    };
    if limits.max_tokens.is_none() && limits.max_micro_usd.is_none() {
        return None;
    }
    match key.period.as_deref() {
        None => Some((format!("key:{}", key.id), limits, None)),
        Some(period) => {
            let (label, resets) = period_window(period, now_ms)?;
            Some((
                format!("key:{}:{period}:{label}", key.id),
                limits,
                Some(resets),
            ))
        }
    }
}

/// The period of `now_ms` (UTC) that `period` (`day`, `week` from Monday, `month`) names: its
/// label (`2026-11-26`, the Monday's date, `2026-11`) and its end, Unix milliseconds.
pub(crate) fn period_window(period: &str, now_ms: i64) -> Option<(String, i64)> {
    let now = OffsetDateTime::from_unix_timestamp_nanos(i128::from(now_ms) * 1_000_000).ok()?;
    let today = now.date();
    let (label, next) = match period {
        "day" => (today.to_string(), today.next_day()?),
        "week" => {
            let monday = today.checked_sub(time::Duration::days(i64::from(
                today.weekday().number_days_from_monday(),
            )))?;
            debug_assert_eq!(monday.weekday(), Weekday::Monday);
            (
                monday.to_string(),
                monday.checked_add(time::Duration::days(7))?,
            )
        }
        "month" => {
            let (year, month) = (today.year(), today.month());
            let next = if month == Month::December {
                Date::from_calendar_date(year + 1, Month::January, 1).ok()?
            } else {
                Date::from_calendar_date(year, month.next(), 1).ok()?
            };
            (format!("{year:04}-{:02}", u8::from(month)), next)
        }
        _ => return None,
    };
    let resets = next.with_time(Time::MIDNIGHT).assume_utc().unix_timestamp() * 1000;
    Some((label, resets))
}

/// The chat template's allowance per chat request, in tokens: the tokens a template adds around
/// the messages once (a BOS token, the assistant's generation prompt, and the default system
/// prompt some templates insert when the request sends none: Qwen2.5's "You are Qwen, created
/// by Alibaba Cloud…" or Llama 3.1's knowledge and today's dates, about 20 to 30 tokens).
pub(crate) const TEMPLATE_TOKENS_PER_REQUEST: u64 = 48;

/// The chat template's allowance per message, in tokens: the role header and end-of-turn
/// markers around each message (ChatML's `<|im_start|>role\n … <|im_end|>\n`, Llama 3's
/// `<|start_header_id|>role<|end_header_id|>\n\n … <|eot_id|>`: 4 to 6 tokens).
pub(crate) const TEMPLATE_TOKENS_PER_MESSAGE: u64 = 8;

/// The prompt's estimated tokens: four bytes of the request's `messages`, `tools` and
/// `response_format` (or an embedding's `input`) as JSON a token, plus, for a chat request
/// (one with `messages`), the chat template's allowance: [`TEMPLATE_TOKENS_PER_REQUEST`] and
/// [`TEMPLATE_TOKENS_PER_MESSAGE`] for each message.
pub(crate) fn estimated_prompt_tokens(request: &Map<String, Value>) -> u64 {
    let bytes: usize = ["messages", "tools", "response_format", "input", "prompt"]
        .iter()
        .filter_map(|field| request.get(*field))
        .map(|value| serde_json::to_string(value).map_or(0, |s| s.len()))
        .sum();
    let content = u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX);
    let template = match request.get("messages") {
        Some(Value::Array(messages)) => {
            let count = u64::try_from(messages.len()).unwrap_or(u64::MAX);
            TEMPLATE_TOKENS_PER_MESSAGE
                .saturating_mul(count)
                .saturating_add(TEMPLATE_TOKENS_PER_REQUEST)
        }
        _ => 0,
    };
    content.saturating_add(template)
}

/// How many answers the request asks for: its `n`, at least 1.
pub(crate) fn choices(request: &Map<String, Value>) -> u64 {
    request.get("n").and_then(Value::as_u64).unwrap_or(1).max(1)
}

/// The most answer tokens each of the request's choices may get: its `max_completion_tokens` or
/// `max_tokens`, else `default_cap`, which is then written into the request so the upstream keeps to it.
pub(crate) fn answer_cap(request: &mut Map<String, Value>, default_cap: u64) -> u64 {
    for field in ["max_completion_tokens", "max_tokens"] {
        if let Some(cap) = request.get(field).and_then(Value::as_u64) {
            return cap;
        }
    }
    request.insert("max_tokens".into(), Value::from(default_cap));
    default_cap
}

/// Micro-USD of `usd`, rounded up.
pub(crate) fn micro_usd(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1_000_000.0).ceil() as u64
    } else {
        0
    }
}

/// A reservation held for one request, settled or released once its answer is complete.
#[derive(Clone)]
pub(crate) struct Hold {
    pub store: Arc<dyn GatewayStore>,
    pub reservation: String,
    pub reserved: Spend,
    /// The reservation's prompt tokens (the prompt's estimate) and answer tokens (the answer's
    /// cap times `n`), which `reserved.tokens` sums: what a request charged in full is recorded
    /// as.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("reservation", &self.reservation)
            .field("reserved", &self.reserved)
            .field("prompt_tokens", &self.prompt_tokens)
            .field("completion_tokens", &self.completion_tokens)
            .finish_non_exhaustive()
    }
}

impl Hold {
    /// Settles the reservation to `actual` (the request was answered; `None`: it was, but what
    /// it spent is unknown, so the reservation is spent whole), or releases it (`spent` false:
    /// no upstream did the work). The store write runs in the background.
    pub(crate) fn close(self, spent: bool, actual: Option<Spend>) {
        tokio::spawn(async move {
            let result = if spent {
                self.store
                    .budget_settle(&self.reservation, actual.unwrap_or(self.reserved))
                    .await
            } else {
                self.store.budget_release(&self.reservation).await
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, reservation = %self.reservation,
                    "the gateway could not settle a budget reservation; the ledger takes it back when it expires");
            }
        });
    }
}

/// The `429` for a key whose budget has no room for the request.
pub(crate) fn exhausted(
    key: &GatewayKey,
    denied: BudgetDenied,
    charge: Spend,
    resets_ms: Option<i64>,
) -> Response {
    let amount = |value: u64| match denied.cap {
        Cap::Tokens => Value::from(value),
        Cap::Usd => Value::from(value as f64 / 1_000_000.0),
    };
    let what = match (denied.cap, key.period.as_deref()) {
        (Cap::Tokens, None) => "token budget".to_string(),
        (Cap::Usd, None) => "dollar budget".to_string(),
        (Cap::Tokens, Some(p)) => format!("token budget per {p}"),
        (Cap::Usd, Some(p)) => format!("dollar budget per {p}"),
    };
    let figures = match denied.cap {
        Cap::Tokens => format!(
            "{} of {} tokens spent, {} held by requests in progress",
            denied.spent, denied.limit, denied.reserved
        ),
        Cap::Usd => format!(
            "${} of ${} spent, ${} held by requests in progress",
            dollars(denied.spent),
            dollars(denied.limit),
            dollars(denied.reserved)
        ),
    };
    let resets_at = resets_ms.and_then(|ms| {
        OffsetDateTime::from_unix_timestamp(ms / 1000)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
    });
    let when = match &resets_at {
        Some(at) => format!("it resets at {at}"),
        None => "it does not reset; ask for a larger budget or a new key".to_string(),
    };
    let needed = match denied.cap {
        Cap::Tokens => charge.tokens,
        Cap::Usd => charge.micro_usd,
    };
    let message = if needed > denied.limit {
        // Not even an unspent budget would take it: waiting does not help.
        let worst = match denied.cap {
            Cap::Tokens => format!("{needed} tokens"),
            Cap::Usd => format!("${}", dollars(needed)),
        };
        format!(
            "the request may spend up to {worst} (its prompt's estimate with the chat template's \
             allowance, and its max_tokens, or the gateway's default_max_tokens when it sends \
             none, times its n), more than the whole {what} of the key {}… \
             ({}); send a smaller max_tokens",
            key.prefix, key.name
        )
    } else {
        format!(
            "the key {}… ({}) has no room left in its {what} for this request ({figures}); {when}",
            key.prefix, key.name
        )
    };
    let body = json!({"error": {
        "message": message,
        "type": "budget_exceeded",
        "code": "budget_exceeded",
        "budget": {
            "key": key.name,
            "cap": denied.cap,
            "period": key.period,
            "limit": amount(denied.limit),
            "spent": amount(denied.spent),
            "reserved": amount(denied.reserved),
            "resets_at": resets_at,
        },
    }});
    let mut response = (StatusCode::TOO_MANY_REQUESTS, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(ms) = resets_ms {
        let now = OffsetDateTime::now_utc().unix_timestamp() * 1000;
        let secs = (ms - now).max(0) / 1000 + 1;
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            headers.insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// Micro-USD as dollars, six decimals at most, trailing zeros dropped.
fn dollars(micro: u64) -> String {
    let text = format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn ms(date: &str) -> i64 {
        let t = OffsetDateTime::parse(date, &time::format_description::well_known::Rfc3339)
            .expect("date");
        t.unix_timestamp() * 1000
    }

    #[test]
    fn periods_start_on_utc_boundaries() {
        let now = ms("2026-11-26T13:45:00Z");
        assert_eq!(
            period_window("day", now),
            Some(("2026-11-26".into(), ms("2026-11-27T00:00:00Z")))
        );
        // 2026-11-26 is a Thursday: its week began on Monday the 23rd.
        assert_eq!(
            period_window("week", now),
            Some(("2026-11-23".into(), ms("2026-11-30T00:00:00Z")))
        );
        assert_eq!(
            period_window("month", now),
            Some(("2026-11".into(), ms("2026-12-01T00:00:00Z")))
        );
        assert_eq!(
            period_window("month", ms("2026-12-31T23:59:59Z")),
            Some(("2026-12".into(), ms("2027-01-01T00:00:00Z")))
        );
        assert_eq!(period_window("year", now), None);
    }

    #[test]
    fn the_answer_cap_is_written_into_a_request_without_one() {
        let mut request = Map::new();
        assert_eq!(answer_cap(&mut request, 512), 512);
        assert_eq!(request.get("max_tokens"), Some(&Value::from(512)));
        let mut request = Map::new();
        request.insert("max_completion_tokens".into(), Value::from(7));
        assert_eq!(answer_cap(&mut request, 512), 7);
        assert!(!request.contains_key("max_tokens"));
    }

    #[test]
    fn the_estimate_counts_messages_and_tools() {
        let request: Map<String, Value> = serde_json::from_value(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "x".repeat(400)}],
        }))
        .expect("object");
        let estimate = estimated_prompt_tokens(&request);
        let template = TEMPLATE_TOKENS_PER_REQUEST + TEMPLATE_TOKENS_PER_MESSAGE;
        assert!(
            (100 + template..=110 + template).contains(&estimate),
            "{estimate}"
        );
    }

    #[test]
    fn the_estimate_of_a_short_prompt_covers_its_chat_template() {
        // llama.cpp counts 31 prompt tokens for "hi" once its chat template is applied.
        let request: Map<String, Value> = serde_json::from_value(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
        }))
        .expect("object");
        assert!(estimated_prompt_tokens(&request) >= 31);
        // Embeddings have no chat template.
        let request: Map<String, Value> =
            serde_json::from_value(json!({"model": "m", "input": "hi"})).expect("object");
        assert_eq!(estimated_prompt_tokens(&request), 1);
    }

    #[test]
    fn n_counts_the_choices() {
        let mut request = Map::new();
        assert_eq!(choices(&request), 1);
        request.insert("n".into(), Value::from(3));
        assert_eq!(choices(&request), 3);
        request.insert("n".into(), Value::from(0));
        assert_eq!(choices(&request), 1);
    }
}
