//! The proxied endpoints: read the client's body, route it, try the upstreams in order until
//! one answers before any byte reached the client, and meter what came back.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::anthropic::Attempt;
use crate::budget::{
    Hold, RESERVATION_TTL, Spend, answer_cap, choices, estimated_prompt_tokens, exhausted,
    key_budget, micro_usd,
};
use crate::config::UpstreamKind;
use crate::errors::error_response;
use crate::gateway::{Gateway, Inner, MAX_BODY_BYTES};
use crate::keys::GatewayKey;
use crate::limits::Admitted;
use crate::metrics::{
    CostLabels, FailureLabels, LatencyLabels, NO_KEY, RequestLabels, TokenLabels, UNKNOWN_MODEL,
};
use crate::route::Route;
use crate::route::millis_since;
use crate::stream::{MeteredStream, idle_limited};
use crate::usage::{UsageRecord, UsageStatus};

/// The header a Maestro run names its job with.
const JOB_HEADER: &str = "x-maestro-job";
/// The header a Maestro run names its movement with.
const MOVEMENT_HEADER: &str = "x-maestro-movement";
/// The longest job or movement name kept from a header.
const MAX_ATTRIBUTION: usize = 256;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Embeddings,
}

impl Endpoint {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/chat/completions",
            Endpoint::Embeddings => "/embeddings",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Embeddings => "embeddings",
        }
    }
}

pub(crate) async fn chat(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    proxy(&gateway, Endpoint::Chat, &headers, body).await
}

pub(crate) async fn embeddings(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    proxy(&gateway, Endpoint::Embeddings, &headers, body).await
}

/// The request's key, or the answer for a request that does not authenticate (counted as
/// refused, under the key's name when the store knows the key).
async fn authenticated(inner: &Inner, headers: &HeaderMap) -> Result<Option<GatewayKey>, Response> {
    crate::auth::authenticate(&inner.store, headers, now_ms())
        .await
        .map_err(|refused| {
            count_refused_as(inner, refused.key_name.as_deref().unwrap_or(NO_KEY), None);
            refused.answer
        })
}

/// A model object as `/v1/models` lists it.
fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "maestro-gateway"})
}

/// `GET /v1/models`: the public model names the request's key may call. It authenticates like
/// the other routes: once a key exists, a request without a usable key gets the `401`.
pub(crate) async fn models(State(gateway): State<Gateway>, headers: HeaderMap) -> Response {
    let inner = &*gateway.inner;
    let key = match authenticated(inner, &headers).await {
        Ok(key) => key,
        Err(answer) => return answer,
    };
    let data: Vec<Value> = callable_names(inner, key.as_ref())
        .into_iter()
        .map(model_object)
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/models/{id}`: one public model name as `/v1/models` lists it, authenticated and
/// filtered by the key as that list is; a model the key may not call, or that no route serves,
/// is a `404` (`model_not_found`).
pub(crate) async fn model(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let inner = &*gateway.inner;
    let key = match authenticated(inner, &headers).await {
        Ok(key) => key,
        Err(answer) => return answer,
    };
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => {
            return refuse(
                inner,
                key.as_ref(),
                None,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_model",
                format!(
                    "the model id in the path cannot be read ({}); send a public model name as GET /v1/models lists it",
                    rejection.body_text()
                ),
            );
        }
    };
    let served = inner
        .routes
        .get_key_value(&id)
        .map(|(name, _)| name.as_str());
    match served {
        Some(name) if key.as_ref().is_none_or(|k| k.allows(name)) => {
            axum::Json(model_object(name)).into_response()
        }
        _ => refuse(
            inner,
            key.as_ref(),
            served,
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "the model {id:?} does not exist here{}; use one of: {} (GET /v1/models lists them)",
                if key.is_some() {
                    " or the key may not call it"
                } else {
                    ""
                },
                callable_names(inner, key.as_ref()).join(", ")
            ),
        ),
    }
}

/// The public model names, sorted, that `key` may call (all of them without a key, or for a
/// key that names no models).
fn callable_names<'a>(inner: &'a Inner, key: Option<&GatewayKey>) -> Vec<&'a str> {
    inner
        .public_names
        .iter()
        .filter(|name| key.is_none_or(|k| k.allows(name)))
        .map(String::as_str)
        .collect()
}

/// What the metering of one request needs once its answer is complete.
#[derive(Debug, Clone)]
pub(crate) struct Meter {
    pub started: Instant,
    pub at_ms: i64,
    pub endpoint: Endpoint,
    /// The public model name, known to the routes.
    pub model: String,
    pub key_id: Option<String>,
    pub key_name: Option<String>,
    pub job: Option<String>,
    pub movement: Option<String>,
    /// The upstream tried last, and the model sent to it.
    pub upstream: Option<(String, String)>,
    /// The request's admission by its key's rate limits, to count its answer's tokens.
    pub admitted: Option<Admitted>,
    /// The reservation on its key's budget, to settle.
    pub hold: Option<Hold>,
}

impl Meter {
    /// Counts the request in the metrics and queues its usage record.
    pub(crate) fn finish(
        &self,
        inner: &Inner,
        status: UsageStatus,
        http_status: u16,
        counts: TokenCounts,
    ) {
        let TokenCounts {
            prompt_tokens,
            completion_tokens,
            ..
        } = counts;
        let cached_tokens = counts.cached_tokens();
        let latency = self.started.elapsed();
        let (upstream, upstream_model) = match &self.upstream {
            Some((u, m)) => (Some(u.clone()), Some(m.clone())),
            None => (None, None),
        };
        let price = upstream_model
            .as_deref()
            .and_then(|m| inner.prices.get(m))
            .or_else(|| inner.prices.get(&self.model));
        let cost_usd = price.map(|p| p.cost_usd(prompt_tokens, cached_tokens, completion_tokens));
        let total = prompt_tokens.saturating_add(completion_tokens);
        if let Some(admitted) = self.admitted.clone() {
            admitted.finish(total, inner.store.0.clone());
        }
        // What the usage record says was spent: what the upstream reported, or, for a request
        // charged its whole reservation, that reservation.
        let mut recorded = (prompt_tokens, completion_tokens, cost_usd, false);
        if let Some(hold) = self.hold.clone() {
            // The upstream did the work unless it refused or none answered; what a cut or
            // abandoned answer spent is unknown without its usage, so it is charged in full.
            let spent = !matches!(status, UsageStatus::Rejected | UsageStatus::Unavailable);
            let actual = (total > 0).then(|| Spend {
                tokens: total,
                micro_usd: cost_usd.map_or(0, micro_usd),
            });
            if spent && actual.is_none() {
                let cost = if hold.reserved.micro_usd > 0 {
                    // A dollar budget was charged the reservation's price.
                    Some(hold.reserved.micro_usd as f64 / 1_000_000.0)
                } else {
                    price.map(|p| p.cost_usd(hold.prompt_tokens, 0, hold.completion_tokens))
                };
                recorded = (hold.prompt_tokens, hold.completion_tokens, cost, true);
            }
            hold.close(spent, actual);
        }
        let metrics = &inner.metrics;
        let upstream_label = upstream.clone().unwrap_or_default();
        let key = self.key_name.clone().unwrap_or_else(|| NO_KEY.to_string());
        metrics
            .requests
            .get_or_create(&RequestLabels {
                upstream: upstream_label.clone(),
                model: self.model.clone(),
                key: key.clone(),
                status: status.as_str(),
            })
            .inc();
        for (kind, count) in [("prompt", prompt_tokens), ("completion", completion_tokens)] {
            if count > 0 {
                metrics
                    .tokens
                    .get_or_create(&TokenLabels {
                        upstream: upstream_label.clone(),
                        model: self.model.clone(),
                        key: key.clone(),
                        kind,
                    })
                    .inc_by(count);
            }
        }
        if let Some(cost) = cost_usd.filter(|c| *c > 0.0) {
            metrics
                .cost
                .get_or_create(&CostLabels {
                    upstream: upstream_label.clone(),
                    model: self.model.clone(),
                    key: key.clone(),
                })
                .inc_by(cost);
        }
        metrics
            .duration
            .get_or_create(&LatencyLabels {
                upstream: upstream_label,
                model: self.model.clone(),
            })
            .observe(latency.as_secs_f64());
        let (prompt_tokens, completion_tokens, cost_usd, estimated) = recorded;
        let record = UsageRecord {
            at_ms: self.at_ms,
            key_id: self.key_id.clone(),
            key_name: self.key_name.clone(),
            endpoint: self.endpoint.word().to_string(),
            model: self.model.clone(),
            upstream,
            upstream_model,
            prompt_tokens,
            completion_tokens,
            cost_usd,
            estimated,
            latency_ms: u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
            status,
            http_status,
            job: self.job.clone(),
            movement: self.movement.clone(),
        };
        if !inner.usage.send(record) {
            metrics.usage_dropped.inc();
        }
    }
}

/// `usage` of a non-streamed answer; everything else in the body is skipped unparsed.
#[derive(Deserialize)]
struct AnswerUsage {
    #[serde(default)]
    usage: Option<TokenCounts>,
}

/// The token counts of an OpenAI `usage` object.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct TokenCounts {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// `prompt_tokens_details`, for the prompt tokens read from the upstream's cache.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
}

/// `usage.prompt_tokens_details` of an OpenAI answer.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl TokenCounts {
    /// Of the prompt tokens, those read from the upstream's cache.
    pub(crate) fn cached_tokens(&self) -> u64 {
        self.prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0)
    }
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.chars().take(MAX_ATTRIBUTION).collect())
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
}

/// Why an attempt at one upstream failed over to the next.
pub(crate) struct Failure {
    upstream: String,
    detail: String,
    status: Option<StatusCode>,
    /// The upstream's `Retry-After`, in seconds.
    retry_after: Option<u64>,
}

async fn proxy(
    gateway: &Gateway,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let inner = &*gateway.inner;
    let started = Instant::now();
    let key = match authenticated(inner, headers).await {
        Ok(key) => key,
        Err(answer) => return answer,
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return unreadable_body(inner, key.as_ref(), &rejection),
    };
    let mut request: Map<String, Value> = match serde_json::from_slice(&body) {
        Ok(Value::Object(map)) => map,
        Ok(_) => {
            return refuse(inner, key.as_ref(), None, StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_body",
                "the request body is a JSON value but not an object; send the request as a JSON object".into());
        }
        Err(e) => {
            return refuse(
                inner,
                key.as_ref(),
                None,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_body",
                format!("the request body is not JSON ({e}); send the request as a JSON object"),
            );
        }
    };
    let Some(model) = request
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return refuse(
            inner,
            key.as_ref(),
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "missing_model",
            format!(
                "the request names no `model`; use one of: {}",
                callable_names(inner, key.as_ref()).join(", ")
            ),
        );
    };
    let Some(route) = inner.routes.get(&model) else {
        return refuse(
            inner,
            key.as_ref(),
            None,
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "the model {model:?} is not served here; use one of: {} (GET /v1/models lists them)",
                callable_names(inner, key.as_ref()).join(", ")
            ),
        );
    };
    if let Some(key) = &key
        && !key.allows(&model)
    {
        return refuse(
            inner,
            Some(key),
            Some(&model),
            StatusCode::FORBIDDEN,
            "permission_error",
            "model_not_allowed",
            format!(
                "the key {}… ({}) may not call the model {model:?}; it may call: {}",
                key.prefix,
                key.name,
                key.models.as_deref().unwrap_or_default().join(", ")
            ),
        );
    }
    let (admitted, hold) = match &key {
        Some(key) => match admit(inner, key, endpoint, route, &model, &mut request).await {
            Ok(admission) => admission,
            Err(answer) => {
                count_refused(inner, Some(key), Some(&model));
                return answer;
            }
        },
        None => (None, None),
    };
    let stream = endpoint == Endpoint::Chat
        && request
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    // The client's own wish for the usage chunk: when it did not ask, the chunk the gateway asks
    // for is taken out of its stream.
    let client_wants_usage = request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if stream && !client_wants_usage {
        match request.get_mut("stream_options") {
            Some(Value::Object(options)) => {
                options.insert("include_usage".into(), Value::Bool(true));
            }
            _ => {
                request.insert("stream_options".into(), json!({"include_usage": true}));
            }
        }
    }
    let mut meter = Meter {
        started,
        at_ms: now_ms(),
        endpoint,
        model: model.clone(),
        key_id: key.as_ref().map(|k| k.id.clone()),
        key_name: key.as_ref().map(|k| k.name.clone()),
        job: header_text(headers, JOB_HEADER),
        movement: header_text(headers, MOVEMENT_HEADER),
        upstream: None,
        admitted,
        hold,
    };
    let mut failures: Vec<Failure> = Vec::new();
    // Targets whose upstream cannot serve this endpoint at all, and why.
    let mut unable: Vec<String> = Vec::new();
    for index in route.order(&inner.upstreams, millis_since(inner.epoch)) {
        let target = &route.targets[index];
        let upstream = &inner.upstreams[target.upstream];
        meter.upstream = Some((upstream.name.clone(), target.model.clone()));
        request.insert("model".into(), Value::String(target.model.clone()));
        if upstream.kind == UpstreamKind::Anthropic {
            let call = crate::anthropic::Call {
                gateway,
                endpoint,
                upstream,
                stream,
                client_wants_usage,
            };
            match call.attempt(&request, &mut meter).await {
                Attempt::Answered(response) => return response,
                Attempt::Failed(failure) => failures.push(failure),
                Attempt::Unable(why) => unable.push(why),
            }
            continue;
        }
        let payload = match serde_json::to_vec(&request) {
            Ok(payload) => payload,
            Err(e) => {
                return refuse(
                    inner,
                    key.as_ref(),
                    Some(&model),
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "invalid_body",
                    format!("the request body cannot be written back as JSON ({e})"),
                );
            }
        };
        let mut call = inner
            .client
            .post(format!("{}{}", upstream.base_url, endpoint.path()))
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(payload);
        if let Some(authorization) = &upstream.authorization {
            call = call.header(header::AUTHORIZATION, authorization.clone());
        }
        if stream {
            call = call.header(
                header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
        }
        let deadline = tokio::time::Instant::now() + inner.first_byte_timeout;
        let answer = match tokio::time::timeout_at(deadline, call.send()).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                let reason = if e.is_timeout() { "timeout" } else { "connect" };
                failures.push(fail(inner, upstream, reason, describe(&e), None));
                continue;
            }
            Err(_) => {
                failures.push(fail(
                    inner,
                    upstream,
                    "timeout",
                    timeout_text(inner.first_byte_timeout),
                    None,
                ));
                continue;
            }
        };
        let status = answer.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            failures.push(status_failure(inner, upstream, answer, deadline).await);
            continue;
        }
        let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
        if stream && status.is_success() {
            if !is_event_stream(content_type.as_ref()) {
                failures.push(not_a_stream(inner, upstream, status, content_type.as_ref()));
                continue;
            }
            let mut body = answer.bytes_stream();
            let first = match tokio::time::timeout_at(deadline, body.next()).await {
                Ok(Some(Ok(first))) => first,
                Ok(Some(Err(e))) => {
                    failures.push(fail(inner, upstream, "empty", describe(&e), None));
                    continue;
                }
                Ok(None) => {
                    failures.push(fail(
                        inner,
                        upstream,
                        "empty",
                        "the stream ended before its first byte".into(),
                        None,
                    ));
                    continue;
                }
                Err(_) => {
                    failures.push(fail(
                        inner,
                        upstream,
                        "timeout",
                        timeout_text(inner.first_byte_timeout),
                        None,
                    ));
                    continue;
                }
            };
            first_byte(inner, &meter);
            let metered = MeteredStream::new(
                gateway.clone(),
                meter,
                upstream.name.clone(),
                first,
                idle_limited(body, inner.stream_idle_timeout),
                !client_wants_usage,
            );
            let mut response = Response::new(Body::from_stream(metered));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                content_type.unwrap_or(HeaderValue::from_static("text/event-stream")),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            return response;
        }
        // A whole answer: read it before the client sees a byte, so that a broken one still
        // fails over.
        let bytes = match tokio::time::timeout_at(deadline, answer.bytes()).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                failures.push(fail(inner, upstream, "empty", describe(&e), None));
                continue;
            }
            Err(_) => {
                failures.push(fail(
                    inner,
                    upstream,
                    "timeout",
                    timeout_text(inner.first_byte_timeout),
                    None,
                ));
                continue;
            }
        };
        let (usage_status, counts) = if status.is_success() {
            // A success that is not a JSON object is a broken answer: the next upstream may
            // give a real one.
            let Some(counts) = whole_answer(&bytes) else {
                failures.push(fail(
                    inner,
                    upstream,
                    "invalid",
                    format!(
                        "HTTP {} with a body that is not a JSON object ({}, {} bytes)",
                        status.as_u16(),
                        content_type_text(content_type.as_ref()),
                        bytes.len()
                    ),
                    None,
                ));
                continue;
            };
            (UsageStatus::Ok, counts)
        } else {
            (UsageStatus::Rejected, TokenCounts::default())
        };
        first_byte(inner, &meter);
        meter.finish(inner, usage_status, status.as_u16(), counts);
        let mut response = Response::new(Body::from(bytes));
        *response.status_mut() = status;
        if let Some(content_type) = content_type {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, content_type);
        }
        return response;
    }
    if failures.is_empty() && !unable.is_empty() {
        meter.finish(inner, UsageStatus::Rejected, 400, TokenCounts::default());
        return error_response(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "endpoint_unsupported",
            format!(
                "the model {model:?} cannot serve {}: {}; route it to an OpenAI-compatible upstream that can",
                endpoint.path(),
                unable.join("; ")
            ),
        );
    }
    // Every upstream failed before answering.
    let all_busy = !failures.is_empty()
        && failures
            .iter()
            .all(|f| f.status == Some(StatusCode::TOO_MANY_REQUESTS));
    let status = if all_busy {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::BAD_GATEWAY
    };
    meter.finish(
        inner,
        UsageStatus::Unavailable,
        status.as_u16(),
        TokenCounts::default(),
    );
    let tried: Vec<String> = failures
        .iter()
        .map(|f| format!("{}: {}", f.upstream, f.detail))
        .collect();
    // The soonest any busy upstream said it would take requests again.
    let retry_after = if all_busy {
        failures.iter().filter_map(|f| f.retry_after).min()
    } else {
        None
    };
    let mut response = error_response(
        status,
        "upstream_error",
        if all_busy {
            "upstreams_busy"
        } else {
            "upstreams_failed"
        },
        format!(
            "every upstream of the model {model:?} failed before answering ({}); each is passed over for {} s after a failure (longer when its Retry-After asks it); try again later",
            tried.join("; "),
            inner.cooldown.as_secs()
        ),
    );
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The token counts of a whole answer that is a JSON object (none reported: zero); `None`
/// when the body is not one.
fn whole_answer(bytes: &[u8]) -> Option<TokenCounts> {
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    match serde_json::from_slice::<AnswerUsage>(bytes) {
        Ok(answer) => Some(answer.usage.unwrap_or_default()),
        // An object whose `usage` has another shape is still an answer, uncounted.
        Err(_) => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .ok()
            .map(|_| TokenCounts::default()),
    }
}

/// Whether a content type is `text/event-stream` (parameters aside).
pub(crate) fn is_event_stream(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// A content type in words, for a failure's detail.
pub(crate) fn content_type_text(content_type: Option<&HeaderValue>) -> String {
    match content_type.and_then(|v| v.to_str().ok()) {
        Some(v) => format!("content-type {:?}", v.chars().take(100).collect::<String>()),
        None => "no content-type".into(),
    }
}

/// The failure of an upstream that answered a streamed request with something other than
/// `text/event-stream`: nothing of it is sent, and the next upstream is tried.
pub(crate) fn not_a_stream(
    inner: &Inner,
    upstream: &crate::route::Upstream,
    status: StatusCode,
    content_type: Option<&HeaderValue>,
) -> Failure {
    fail(
        inner,
        upstream,
        "invalid",
        format!(
            "HTTP {} with {} instead of text/event-stream for a streamed request",
            status.as_u16(),
            content_type_text(content_type)
        ),
        None,
    )
}

/// A keyed request's admission: its key's rate limits, then a reservation on its key's budget
/// for the request's worst case, priced at the dearest target of its route (failover may reach
/// any of them). Gives the answer to send instead when either refuses.
async fn admit(
    inner: &Inner,
    key: &GatewayKey,
    endpoint: Endpoint,
    route: &Route,
    model: &str,
    request: &mut Map<String, Value>,
) -> Result<(Option<Admitted>, Option<Hold>), Response> {
    let now = now_ms();
    let prompt = estimated_prompt_tokens(request);
    let store = inner.store.0.as_ref();
    let admitted = inner.limits.admit(key, prompt, store, now).await?;
    let Some((budget, limits, resets)) = key_budget(key, now) else {
        return Ok((admitted, None));
    };
    let Some(store) = store else {
        return Ok((admitted, None));
    };
    let completion = match endpoint {
        // Each of the request's `n` choices may take the whole cap.
        Endpoint::Chat => {
            answer_cap(request, inner.default_max_tokens).saturating_mul(choices(request))
        }
        Endpoint::Embeddings => 0,
    };
    let mut micro = 0;
    if limits.max_micro_usd.is_some() {
        for target in &route.targets {
            let Some(price) = inner
                .prices
                .get(&target.model)
                .or_else(|| inner.prices.get(model))
            else {
                return Err(error_response(
                    StatusCode::FORBIDDEN,
                    "permission_error",
                    "model_unpriced",
                    format!(
                        "the key {}… ({}) has a dollar budget, and the model {:?} that serves {model:?} has no price, so its cost cannot be bounded; set llm.models.{}.price in the gateway's configuration",
                        key.prefix, key.name, target.model, target.model
                    ),
                ));
            };
            micro = micro.max(micro_usd(price.cost_usd(prompt, 0, completion)));
        }
    }
    let charge = Spend {
        tokens: prompt.saturating_add(completion),
        micro_usd: micro,
    };
    match store
        .budget_reserve(&budget, limits, charge, RESERVATION_TTL)
        .await
    {
        Ok(Ok(reservation)) => Ok((
            admitted,
            Some(Hold {
                store: store.clone(),
                reservation,
                reserved: charge,
                prompt_tokens: prompt,
                completion_tokens: completion,
            }),
        )),
        Ok(Err(denied)) => Err(exhausted(key, denied, charge, resets)),
        Err(e) => {
            tracing::warn!(error = %e, "the gateway could not reserve from a key's budget");
            Err(error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "budget_unavailable",
                "the gateway could not reserve the request's cost from the key's budget in its store; try again, and if it persists check the store (the gateway's log names the cause)".into(),
            ))
        }
    }
}

pub(crate) fn first_byte(inner: &Inner, meter: &Meter) {
    let upstream = meter
        .upstream
        .as_ref()
        .map(|(u, _)| u.clone())
        .unwrap_or_default();
    inner
        .metrics
        .first_byte
        .get_or_create(&LatencyLabels {
            upstream,
            model: meter.model.clone(),
        })
        .observe(meter.started.elapsed().as_secs_f64());
}

/// Counts a failed attempt, starts the upstream's cool-down, and says what happened.
pub(crate) fn fail(
    inner: &Inner,
    upstream: &crate::route::Upstream,
    reason: &'static str,
    detail: String,
    status: Option<StatusCode>,
) -> Failure {
    fail_after(inner, upstream, reason, detail, status, None)
}

/// The longest cool-down an upstream's `Retry-After` gives it.
const MAX_RETRY_AFTER_SECS: u64 = 600;
/// The most of an upstream's error message repeated in the gateway's, in characters.
const MAX_UPSTREAM_MESSAGE: usize = 300;
/// The most of an upstream's error body read for its message.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// The longest wait for an upstream's error body.
const ERROR_BODY_WAIT: Duration = Duration::from_secs(5);

/// An upstream's 429 or 5xx as a failure: its `Retry-After` (seconds) sets its cool-down when
/// longer than `gateway.cooldown_secs` (at most [`MAX_RETRY_AFTER_SECS`]), and its error's
/// `message` is kept in the detail.
pub(crate) async fn status_failure(
    inner: &Inner,
    upstream: &crate::route::Upstream,
    mut answer: reqwest::Response,
    deadline: tokio::time::Instant,
) -> Failure {
    let status = answer.status();
    let reason = if status == StatusCode::TOO_MANY_REQUESTS {
        "status_429"
    } else {
        "status_5xx"
    };
    let retry_after = retry_after_secs(answer.headers());
    let until = deadline.min(tokio::time::Instant::now() + ERROR_BODY_WAIT);
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match tokio::time::timeout_at(until, answer.chunk()).await {
            Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let mut detail = format!("HTTP {}", status.as_u16());
    if let Some(message) = upstream_message(&body, upstream) {
        detail.push_str(": ");
        detail.push_str(&message);
    }
    fail_after(inner, upstream, reason, detail, Some(status), retry_after)
}

/// `Retry-After` in its seconds form.
fn retry_after_secs(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds);
    }
    let seconds = value.parse::<f64>().ok()?;
    // Whole seconds, rounded up; the cast saturates.
    (seconds.is_finite() && seconds >= 0.0).then(|| seconds.ceil() as u64)
}

/// The `error.message` of an upstream's JSON error body, on one line, at most
/// [`MAX_UPSTREAM_MESSAGE`] characters, with the upstream's key and anything like a key
/// blanked out.
fn upstream_message(body: &[u8], upstream: &crate::route::Upstream) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let message = value
        .pointer("/error/message")
        .or_else(|| value.get("error").filter(|e| e.is_string()))
        .or_else(|| value.get("message"))
        .and_then(Value::as_str)?;
    let mut text: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if let Some(key) = upstream
        .authorization
        .as_ref()
        .and_then(|a| a.to_str().ok())
        .map(|a| a.strip_prefix("Bearer ").unwrap_or(a).trim())
        .filter(|k| !k.is_empty())
    {
        text = text.replace(key, "[redacted]");
    }
    let text = text
        .split_whitespace()
        .map(|word| {
            if looks_like_key(word) {
                "[redacted]"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        return None;
    }
    let mut chars = text.chars();
    let mut short: String = chars.by_ref().take(MAX_UPSTREAM_MESSAGE).collect();
    if chars.next().is_some() {
        short.push('…');
    }
    Some(short)
}

/// A word that may be an API key: `sk-…`, `mk-…` and the like, or a long run of key
/// characters.
fn looks_like_key(word: &str) -> bool {
    let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_');
    let prefixed = ["sk-", "mk-", "sk_", "key-", "pk-", "rk-"]
        .iter()
        .any(|p| word.len() > p.len() + 4 && word.to_ascii_lowercase().starts_with(p));
    let long_token = word.len() >= 32
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && word.chars().any(|c| c.is_ascii_digit());
    prefixed || long_token
}

/// [`fail`], the cool-down lengthened to `retry_after` seconds when the upstream asked for
/// more than `gateway.cooldown_secs` (at most [`MAX_RETRY_AFTER_SECS`]).
fn fail_after(
    inner: &Inner,
    upstream: &crate::route::Upstream,
    reason: &'static str,
    detail: String,
    status: Option<StatusCode>,
    retry_after: Option<u64>,
) -> Failure {
    let asked = Duration::from_secs(retry_after.unwrap_or(0).min(MAX_RETRY_AFTER_SECS));
    let cooldown = inner.cooldown.max(asked);
    let cooldown_ms = u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX);
    upstream.cool_down(millis_since(inner.epoch).saturating_add(cooldown_ms));
    inner
        .metrics
        .upstream_failures
        .get_or_create(&FailureLabels {
            upstream: upstream.name.clone(),
            reason,
        })
        .inc();
    tracing::warn!(upstream = %upstream.name, reason, detail = %detail, "gateway upstream failed; trying the next one");
    Failure {
        upstream: upstream.name.clone(),
        detail,
        status,
        retry_after,
    }
}

/// A request error in words, with its causes (a refused connection says so).
pub(crate) fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(crate) fn timeout_text(limit: Duration) -> String {
    format!(
        "no answer within {} s (gateway.first_byte_timeout_secs)",
        limit.as_secs()
    )
}

/// A request the gateway answers itself, counted under `refused` with its key and model as
/// far as they are known (`model` only when a route names it).
fn refuse(
    inner: &Inner,
    key: Option<&GatewayKey>,
    model: Option<&str>,
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    message: String,
) -> Response {
    count_refused(inner, key, model);
    error_response(status, kind, code, message)
}

/// The answer to a body the gateway could not read: one past [`MAX_BODY_BYTES`] is a `413`.
fn unreadable_body(
    inner: &Inner,
    key: Option<&GatewayKey>,
    rejection: &BytesRejection,
) -> Response {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return refuse(
            inner,
            key,
            None,
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!(
                "the request body is larger than the gateway's limit of 2 MiB ({MAX_BODY_BYTES} bytes); send a smaller request (fewer or shorter messages, images by URL instead of inline)"
            ),
        );
    }
    refuse(
        inner,
        key,
        None,
        rejection.status(),
        "invalid_request_error",
        "invalid_body",
        format!(
            "the request body could not be read ({}); send the request again",
            rejection.body_text()
        ),
    )
}

/// Counts a request the gateway answered itself, under `key` (by its name) and `model` (a
/// public name a route gives; `None`: `(unknown)`).
fn count_refused(inner: &Inner, key: Option<&GatewayKey>, model: Option<&str>) {
    count_refused_as(inner, key.map_or(NO_KEY, |k| k.name.as_str()), model);
}

/// [`count_refused`] by the key's name.
fn count_refused_as(inner: &Inner, key: &str, model: Option<&str>) {
    inner
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            upstream: String::new(),
            model: model.unwrap_or(UNKNOWN_MODEL).to_string(),
            key: key.to_string(),
            status: "refused",
        })
        .inc();
}
