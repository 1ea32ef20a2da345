//! Context-length detection from each endpoint style, the config override, and caching.

use crate::common;

use common::{client, config};
use maestro_llm::Provider;
use maestro_testkit::ScriptedLlm;
use pretty_assertions::assert_eq;
use serde_json::json;

fn paths(server: &ScriptedLlm) -> Vec<String> {
    server.recorded().into_iter().map(|r| r.path).collect()
}

#[tokio::test]
async fn vllm_style_max_model_len_in_models() {
    let server = ScriptedLlm::builder()
        .model_id("qwen")
        .max_model_len(32768)
        .start()
        .await;
    let llm = client(config(server.base_url()));
    assert_eq!(llm.context_length("qwen").await, Some(32768));
    assert_eq!(llm.context_length("qwen").await, Some(32768));
    assert_eq!(
        paths(&server),
        vec!["/v1/models"],
        "detected once, then cached"
    );
}

#[tokio::test]
async fn llama_cpp_props_n_ctx() {
    let server = ScriptedLlm::builder()
        .model_field("meta", json!({"n_ctx_train": 131072}))
        .props(json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 2}))
        .start()
        .await;
    let llm = client(config(server.base_url()));
    assert_eq!(
        llm.context_length("whatever-name").await,
        Some(8192),
        "the allocated context, not n_ctx_train"
    );
    assert_eq!(paths(&server), vec!["/v1/models", "/props"]);
}

#[tokio::test]
async fn ollama_api_show_model_info() {
    let server = ScriptedLlm::builder()
        .model_id("llama3.2:3b")
        .ollama_show(json!({"model_info": {"general.architecture": "llama", "llama.context_length": 131072}}))
        .start()
        .await;
    let llm = client(config(server.base_url()));
    assert_eq!(llm.context_length("llama3.2:3b").await, Some(131072));
    let show = server
        .recorded()
        .into_iter()
        .find(|r| r.path == "/api/show")
        .unwrap();
    assert_eq!(show.body, json!({"model": "llama3.2:3b"}));
}

#[tokio::test]
async fn training_context_is_the_last_resort() {
    let server = ScriptedLlm::builder()
        .model_field("meta", json!({"n_ctx_train": 2048}))
        .start()
        .await;
    let llm = client(config(server.base_url()));
    assert_eq!(llm.context_length("m").await, Some(2048));
}

#[tokio::test]
async fn nothing_known_gives_none_and_config_wins_without_asking() {
    let server = ScriptedLlm::builder().max_model_len(4096).start().await;
    assert_eq!(
        client(config(server.base_url()))
            .context_length("other")
            .await,
        Some(4096),
        "the only entry is used"
    );
    let bare = ScriptedLlm::start([]).await;
    assert_eq!(
        client(config(bare.base_url())).context_length("m").await,
        None
    );
    let configured = ScriptedLlm::builder().max_model_len(4096).start().await;
    let llm = client(config(configured.base_url()).with_context_length(16000));
    assert_eq!(llm.context_length("m").await, Some(16000));
    assert!(configured.recorded().is_empty());
}

/// Asks for `model`'s context length from 50 tasks at once, through one client.
async fn ask_together(server: &ScriptedLlm, model: &'static str) -> Vec<Option<u64>> {
    let llm = std::sync::Arc::new(client(config(server.base_url())));
    let asks: Vec<_> = (0..50)
        .map(|_| {
            let llm = llm.clone();
            tokio::spawn(async move { llm.context_length(model).await })
        })
        .collect();
    let mut answers = Vec::new();
    for ask in asks {
        answers.push(ask.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_ask_together_share_one_detection() {
    // Known: many callers at once, one request to the endpoint.
    let server = ScriptedLlm::builder()
        .model_id("qwen")
        .max_model_len(32768)
        .start()
        .await;
    assert_eq!(ask_together(&server, "qwen").await, vec![Some(32768); 50]);
    assert_eq!(paths(&server), vec!["/v1/models"]);

    // Unknown: the endpoint is asked once for all of them too.
    let server = ScriptedLlm::builder().start().await;
    assert_eq!(ask_together(&server, "mystery").await, vec![None; 50]);
    let once = paths(&server);
    let mut distinct = once.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(once.len(), distinct.len(), "each path asked once: {once:?}");
}
