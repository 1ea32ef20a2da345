//! `POST {base}/embeddings`: vectors for texts, for the knowledge base's similarity search.

use serde_json::{Value, json};

use super::OpenAiCompat;
use super::retry::describe;
use crate::LlmError;

/// At most this many texts go in one request; longer lists are sent in several.
pub const EMBEDDING_BATCH: usize = 64;

impl OpenAiCompat {
    /// One vector per text of `inputs`, in their order, from the endpoint's
    /// `POST {base}/embeddings` with `model` (texts are sent [`EMBEDDING_BATCH`] at a time).
    /// The error names the URL, and the endpoint's own words when it refused.
    pub async fn embeddings(
        &self,
        model: &str,
        inputs: &[String],
    ) -> Result<Vec<Vec<f32>>, LlmError> {
        let url = format!("{}/embeddings", self.endpoints.base);
        let mut vectors = Vec::with_capacity(inputs.len());
        for batch in inputs.chunks(EMBEDDING_BATCH) {
            let request = self
                .client
                .post(&url)
                .json(&json!({"model": model, "input": batch}))
                .send();
            let response = tokio::time::timeout(self.config.idle_timeout, request)
                .await
                .map_err(|_| LlmError::Timeout(format!("asking {url} for embeddings")))?
                .map_err(|e| LlmError::Connect {
                    url: url.clone(),
                    message: describe(&e),
                })?;
            let status = response.status().as_u16();
            let text = response.text().await.map_err(|e| LlmError::Connect {
                url: url.clone(),
                message: describe(&e),
            })?;
            if status >= 400 {
                return Err(LlmError::Http {
                    status,
                    message: format!("{url}: {}", text.chars().take(500).collect::<String>()),
                });
            }
            let body: Value = serde_json::from_str(&text).map_err(|e| {
                LlmError::Protocol(format!("{url} answered HTTP {status} without JSON: {e}"))
            })?;
            vectors.extend(parse(&url, &body, batch.len())?);
        }
        Ok(vectors)
    }
}

/// The vectors of an embeddings answer, put in the order of their `index`.
fn parse(url: &str, body: &Value, expected: usize) -> Result<Vec<Vec<f32>>, LlmError> {
    let bad = |what: &str| LlmError::Protocol(format!("{url}: the embeddings answer {what}"));
    let data = body["data"]
        .as_array()
        .ok_or_else(|| bad("has no `data` list"))?;
    if data.len() != expected {
        return Err(bad(&format!(
            "has {} vectors for {expected} texts",
            data.len()
        )));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (position, item) in data.iter().enumerate() {
        let index = item["index"].as_u64().map_or(position, |i| i as usize);
        let vector = item["embedding"]
            .as_array()
            .ok_or_else(|| bad(&format!("has no `embedding` list at {position}")))?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| bad(&format!("has a value that is not a number at {position}")))?;
        match out.get_mut(index) {
            Some(slot @ None) => *slot = Some(vector),
            _ => return Err(bad(&format!("has a wrong or repeated `index` {index}"))),
        }
    }
    out.into_iter()
        .map(|v| v.ok_or_else(|| bad("misses a vector")))
        .collect()
}
