//! `/v1/embeddings` over real HTTP on 127.0.0.1: one vector per text, in order, also when the
//! texts go in several requests; a refusal names the URL and the endpoint's words.

use crate::common;

use maestro_llm::{EMBEDDING_BATCH, OpenAiCompat};
use maestro_testkit::ScriptedLlm;
use pretty_assertions::assert_eq;

#[tokio::test]
async fn embeddings_come_back_one_per_text_in_order() {
    let server = ScriptedLlm::start([]).await;
    let client = OpenAiCompat::new(common::config(server.base_url())).unwrap();
    let texts: Vec<String> = (0..EMBEDDING_BATCH + 3)
        .map(|i| format!("text number {i}"))
        .collect();
    let vectors = client.embeddings("embedder", &texts).await.unwrap();
    assert_eq!(vectors.len(), texts.len());
    assert!(vectors.iter().all(|v| v.len() == 8));
    // The same text gets the same vector, whichever request carried it.
    let again = client
        .embeddings("embedder", &[texts[EMBEDDING_BATCH + 1].clone()])
        .await
        .unwrap();
    assert_eq!(again[0], vectors[EMBEDDING_BATCH + 1]);
    assert_ne!(vectors[0], vectors[1]);
    let requests: Vec<_> = server
        .recorded()
        .into_iter()
        .filter(|r| r.path == "/v1/embeddings")
        .map(|r| r.body)
        .collect();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["model"], "embedder");
    assert_eq!(
        requests[0]["input"].as_array().unwrap().len(),
        EMBEDDING_BATCH
    );
}

#[tokio::test]
async fn a_refused_embeddings_request_names_the_url() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/v1/embeddings",
        axum::routing::post(|| async {
            (
                axum::http::StatusCode::NOT_FOUND,
                "model `embedder` not found",
            )
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = OpenAiCompat::new(common::config(base.clone())).unwrap();
    let error = client
        .embeddings("embedder", &["hello".to_string()])
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "the model endpoint answered HTTP 404: {base}/embeddings: model `embedder` not found"
        )
    );
    server.abort();
}
