//! Context-window detection: what the endpoint says about a model's context length, read from
//! the places the common servers publish it.
//!
//! In order: a `{base}/models` entry's `max_model_len` (vLLM), `context_length`,
//! `context_window` or `max_context_length`; llama.cpp's `{root}/props`
//! (`default_generation_settings.n_ctx`, or `n_ctx`); Ollama's `{root}/api/show`
//! (`model_info.<arch>.context_length`); last, llama.cpp's `/models` `meta.n_ctx`, then its
//! training context `meta.n_ctx_train`, which may exceed what the server allocated.
//!
//! llama.cpp reports the context of one slot: started with `-c 8192 -np 2` it says 4096, which
//! is indeed the most one request can use.

use std::time::Duration;

use serde_json::{Value, json};

/// Where an endpoint's routes live: `base` is the `…/v1` API root, `root` the server root.
#[derive(Debug, Clone)]
pub(crate) struct Endpoints {
    pub base: String,
    pub root: String,
    /// `{base}/chat/completions`, as text (for messages) and parsed once (for requests);
    /// `None` when it does not parse, and the request then reports why.
    pub chat: String,
    pub chat_url: Option<reqwest::Url>,
}

impl Endpoints {
    pub(crate) fn new(base_url: &str) -> Endpoints {
        let base = base_url.trim_end_matches('/').to_string();
        let root = base.strip_suffix("/v1").unwrap_or(&base).to_string();
        let chat = format!("{base}/chat/completions");
        let chat_url = reqwest::Url::parse(&chat).ok();
        Endpoints {
            base,
            root,
            chat,
            chat_url,
        }
    }
}

/// What one source of the context length said.
pub(crate) enum Probe {
    /// It answered with JSON.
    Json(Value),
    /// It answered, without what is asked (an error status, not JSON): another source may have it.
    Unavailable,
    /// Nothing answered (no connection, or no answer in time): no other source of the same
    /// endpoint will, so the detection stops.
    Silent,
}

impl Probe {
    fn json(&self) -> Option<&Value> {
        match self {
            Probe::Json(value) => Some(value),
            Probe::Unavailable | Probe::Silent => None,
        }
    }
}

/// GETs (or POSTs `body` to) `url` and reads JSON. Every source here is optional, so a failure
/// is only noted.
pub(crate) async fn fetch_json(
    client: &reqwest::Client,
    url: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Probe {
    let request = match body {
        Some(body) => client.post(url).json(body),
        None => client.get(url),
    };
    let response = match tokio::time::timeout(timeout, request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(_)) | Err(_) => return Probe::Silent,
    };
    if !response.status().is_success() {
        tracing::debug!(
            url,
            status = response.status().as_u16(),
            "context-length source not available"
        );
        return Probe::Unavailable;
    }
    match tokio::time::timeout(timeout, response.json::<Value>()).await {
        Ok(Ok(value)) => Probe::Json(value),
        Ok(Err(_)) => Probe::Unavailable,
        Err(_) => Probe::Silent,
    }
}

pub(crate) async fn detect(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    model: &str,
    timeout: Duration,
) -> Option<u64> {
    let models = fetch_json(client, &format!("{}/models", endpoints.base), None, timeout).await;
    let entry = models.json().and_then(|m| model_entry(m, model));
    if let Some(n) = entry.and_then(declared_length) {
        return Some(n);
    }
    if matches!(models, Probe::Silent) {
        return None;
    }
    let props = fetch_json(client, &format!("{}/props", endpoints.root), None, timeout).await;
    if let Some(n) = props.json().and_then(props_n_ctx) {
        return Some(n);
    }
    if matches!(props, Probe::Silent) {
        return None;
    }
    let show_url = format!("{}/api/show", endpoints.root);
    let show = fetch_json(client, &show_url, Some(&json!({"model": model})), timeout).await;
    if let Some(n) = show.json().and_then(ollama_context_length) {
        return Some(n);
    }
    let meta = |key: &str| {
        entry
            .and_then(|e| e.get("meta"))
            .and_then(|m| m.get(key))
            .and_then(Value::as_u64)
    };
    meta("n_ctx").or_else(|| meta("n_ctx_train"))
}

/// The `/models` entry for `model`; the only entry when there is one (llama.cpp lists its model
/// under the file name whatever the request calls it).
fn model_entry<'a>(models: &'a Value, model: &str) -> Option<&'a Value> {
    let data = models
        .get("data")
        .or_else(|| models.get("models"))?
        .as_array()?;
    data.iter()
        .find(|e| {
            e.get("id")
                .or_else(|| e.get("name"))
                .and_then(Value::as_str)
                == Some(model)
        })
        .or_else(|| if data.len() == 1 { data.first() } else { None })
}

fn declared_length(entry: &Value) -> Option<u64> {
    [
        "max_model_len",
        "context_length",
        "context_window",
        "max_context_length",
    ]
    .iter()
    .find_map(|key| entry.get(*key).and_then(Value::as_u64))
}

fn props_n_ctx(props: &Value) -> Option<u64> {
    props
        .pointer("/default_generation_settings/n_ctx")
        .or_else(|| props.get("n_ctx"))
        .and_then(Value::as_u64)
}

fn ollama_context_length(show: &Value) -> Option<u64> {
    let info = show.get("model_info")?.as_object()?;
    info.iter()
        .find(|(key, _)| key.ends_with(".context_length"))
        .and_then(|(_, v)| v.as_u64())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn root_drops_the_version_segment() {
        let e = Endpoints::new("http://h:1/v1/");
        assert_eq!(
            (e.base.as_str(), e.root.as_str()),
            ("http://h:1/v1", "http://h:1")
        );
        assert_eq!(
            Endpoints::new("http://h:1/openai").root,
            "http://h:1/openai"
        );
    }

    #[test]
    fn each_source_is_read() {
        let models = json!({"data": [{"id": "a", "max_model_len": 100}, {"id": "b", "context_length": 200}]});
        assert_eq!(
            model_entry(&models, "b").and_then(declared_length),
            Some(200)
        );
        assert_eq!(model_entry(&models, "c"), None);
        assert_eq!(
            props_n_ctx(&json!({"default_generation_settings": {"n_ctx": 8192}})),
            Some(8192)
        );
        assert_eq!(props_n_ctx(&json!({"n_ctx": 4096})), Some(4096));
        let show = json!({"model_info": {"general.architecture": "llama", "llama.context_length": 131072}});
        assert_eq!(ollama_context_length(&show), Some(131072));
    }
}
