//! The knowledge base through its use cases and its tools, on a real SQLite store: re-ingesting
//! is a no-op, a URL is fetched through the SSRF guard, and with an embedding model the search
//! fuses full text with vectors served by `/v1/embeddings` over real HTTP on 127.0.0.1.

use std::sync::{Arc, Mutex};

use maestro_app::{
    DocumentSource, IngestRequest, Knowledge, KnowledgeError, Store, StoreUrl, knowledge_tools,
};
use maestro_config::Config;
use maestro_protocol::RunScratch;
use maestro_tools::{Registry, ToolContext, ToolsConfig, prepare_workspace};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Words that mean the same thing, one dimension each: the stub's embeddings put a text on
/// the dimensions of the words it has, so `kitten` is near a text about cats although no word
/// is shared.
const CONCEPTS: &[&[&str]] = &[
    &["cat", "cats", "kitten", "feline", "purrs"],
    &["car", "cars", "engine", "vehicle", "oil"],
    &["bread", "flour", "oven", "baking"],
];

fn concept_vector(text: &str) -> Vec<f32> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let mut vector: Vec<f32> = CONCEPTS
        .iter()
        .map(|group| words.iter().filter(|w| group.contains(w)).count() as f32)
        .collect();
    // A small constant dimension, so a text with no concept still has a direction.
    vector.push(0.1);
    vector
}

/// A 127.0.0.1 server with `/v1/embeddings` (concept vectors, requests recorded) and an HTML
/// page at `/page.html`.
async fn stub() -> (String, Arc<Mutex<Vec<Value>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorded = Arc::clone(&seen);
    let app = axum::Router::new()
        .route(
            "/v1/embeddings",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let recorded = Arc::clone(&recorded);
                async move {
                    recorded.lock().unwrap().push(body.clone());
                    let data: Vec<Value> = body["input"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .enumerate()
                        .map(|(i, text)| {
                            json!({"index": i, "embedding": concept_vector(text.as_str().unwrap())})
                        })
                        .collect();
                    axum::Json(json!({"object": "list", "data": data}))
                }
            }),
        )
        .route(
            "/page.html",
            axum::routing::get(|| async {
                (
                    [("content-type", "text/html; charset=utf-8")],
                    "<html><head><title>Baking notes</title></head><body>\
                     <h1>Bread</h1><p>Knead the dough, then bake it in a hot oven.</p></body></html>",
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen, server)
}

fn config(base: &str, embedding_model: Option<&str>) -> Config {
    let mut config = Config::default();
    config.llm.base_url = format!("{base}/v1");
    config.knowledge.embedding_model = embedding_model.map(str::to_string);
    config
}

async fn store(dir: &std::path::Path) -> Store {
    Store::open(&StoreUrl::Sqlite {
        path: dir.join("maestro.db"),
    })
    .await
    .unwrap()
}

fn bytes(name: &str, text: &str) -> IngestRequest {
    IngestRequest {
        source: DocumentSource::Bytes {
            name: name.into(),
            bytes: text.as_bytes().to_vec(),
        },
        collection: None,
        title: None,
        owner: "ana@example.com".into(),
        created_by: "ana@example.com".into(),
    }
}

const CATS: &str = "# Cats\n\nThe cat purrs and sleeps all day on the sofa.\n";
const CARS: &str = "# Cars\n\nThe engine needs fresh oil every spring.\n";

#[tokio::test]
async fn search_fuses_full_text_with_embeddings_from_the_endpoint() {
    let (base, seen, server) = stub().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let knowledge = Knowledge::new(store.clone(), &config(&base, Some("concepts")), None).unwrap();
    let cancel = CancellationToken::new();
    let cats = knowledge
        .ingest(bytes("notes/cats.md", CATS), &cancel)
        .await
        .unwrap();
    assert!(cats.created);
    assert_eq!(cats.document.title, "Cats");
    knowledge
        .ingest(bytes("notes/cars.md", CARS), &cancel)
        .await
        .unwrap();
    let requests = seen.lock().unwrap().len();
    assert_eq!(requests, 2);
    assert_eq!(seen.lock().unwrap()[0]["model"], "concepts");

    // The same content again: nothing stored, no embedding asked for.
    let again = knowledge
        .ingest(bytes("elsewhere/cats.md", CATS), &cancel)
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.document.id, cats.document.id);
    assert_eq!(seen.lock().unwrap().len(), requests);
    assert_eq!(
        knowledge.list("ana@example.com", None).await.unwrap().len(),
        2
    );

    // `kitten` shares no word with any document: only the vectors find the cats.
    let hits = knowledge
        .search("ana@example.com", "kitten", None, Some(2))
        .await
        .unwrap();
    assert_eq!(hits[0].document_id, cats.document.id);
    assert_eq!(hits[0].location, "Cats");
    assert!(hits[0].text.contains("purrs"));
    // A chunk first in both rankings scores more than one first in only one of them.
    let both = knowledge
        .search("ana@example.com", "engine oil", None, Some(2))
        .await
        .unwrap();
    assert_eq!(both[0].title, "Cars");
    assert!((both[0].score - 2.0 / 61.0).abs() < 1e-9, "{both:?}");
    assert!((hits[0].score - 1.0 / 61.0).abs() < 1e-9, "{hits:?}");

    // Without the embedding model, the same store is searched by full text alone.
    let text_only = Knowledge::new(store, &config(&base, None), None).unwrap();
    assert!(
        text_only
            .search("ana@example.com", "kitten", None, None)
            .await
            .unwrap()
            .is_empty()
    );
    server.abort();
}

#[tokio::test]
async fn urls_go_through_the_ssrf_guard() {
    let (base, _seen, server) = stub().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let url = format!("{base}/page.html");
    let guarded = Knowledge::new(store.clone(), &config(&base, None), None).unwrap();
    let mut request = bytes("", "");
    request.source = DocumentSource::Url(url.clone());
    let error = guarded
        .ingest(request.clone(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(error, KnowledgeError::Web { .. }), "{error:?}");
    let chain = maestro_app::error_chain(&error);
    assert!(chain.contains("127.0.0.1"), "{chain}");

    let mut allowed = config(&base, None);
    allowed.web.allow_hosts = vec!["127.0.0.1".into()];
    let knowledge = Knowledge::new(store, &allowed, None).unwrap();
    let outcome = knowledge
        .ingest(request, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.document.title, "Baking notes");
    assert_eq!(outcome.document.source, url);
    let hits = knowledge
        .search("ana@example.com", "dough", None, None)
        .await
        .unwrap();
    assert_eq!(hits[0].location, "Bread");
    server.abort();
}

#[tokio::test]
async fn the_tools_ingest_search_list_and_delete_for_the_jobs_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let knowledge = Knowledge::new(store.clone(), &Config::default(), None).unwrap();
    let mut registry = Registry::empty(ToolsConfig::default());
    for tool in knowledge_tools(knowledge.clone(), Some("ana@example.com")) {
        registry.register(tool);
    }
    let workspace = tempfile::tempdir().unwrap();
    prepare_workspace(workspace.path()).unwrap();
    std::fs::write(workspace.path().join("input/cats.md"), CATS).unwrap();
    std::fs::write(workspace.path().join("input/photo.png"), b"\x89PNG").unwrap();
    let ctx = ToolContext {
        workspace: workspace.path().to_path_buf(),
        workspace_kind: maestro_tools::WorkspaceKind::Job,
        edit: false,
        allowed_commands: None,
        allowed_ssh_connections: None,
        cancel: CancellationToken::new(),
        scratch: Arc::new(Mutex::new(RunScratch::default())),
    };
    let call = |name: &'static str, input: Value| {
        let registry = registry.clone();
        let ctx = ctx.clone();
        async move { registry.execute(&ctx, name, &input.to_string()).await }
    };
    let ingested = call(
        "IngestDocument",
        json!({"source": "input/cats.md", "collection": "pets"}),
    )
    .await;
    assert!(ingested.ok, "{}", ingested.output);
    let ingested: Value = serde_json::from_str(&ingested.output).unwrap();
    assert_eq!(ingested["created"], true);
    assert_eq!(ingested["document"]["collection"], "pets");
    let id = ingested["document"]["id"].as_str().unwrap().to_string();
    let again = call(
        "IngestDocument",
        json!({"source": "input/cats.md", "collection": "pets"}),
    )
    .await;
    assert!(
        again.output.contains("\"created\": false"),
        "{}",
        again.output
    );

    let refused = call("IngestDocument", json!({"source": "input/photo.png"})).await;
    assert!(!refused.ok);
    assert!(
        refused.output.contains("input/photo.png"),
        "{}",
        refused.output
    );
    assert!(refused.output.contains(".png"), "{}", refused.output);
    let outside = call("IngestDocument", json!({"source": "../../etc/passwd.txt"})).await;
    assert!(!outside.ok, "{}", outside.output);

    let found = call(
        "SearchKnowledge",
        json!({"query": "\"sofa\": NEAR(cat*", "k": 3}),
    )
    .await;
    assert!(found.ok, "{}", found.output);
    let found: Value = serde_json::from_str(&found.output).unwrap();
    assert_eq!(found[0]["document_id"], id.as_str());
    assert_eq!(found[0]["location"], "Cats");

    let listed = call("ListDocuments", json!({})).await;
    let listed: Value = serde_json::from_str(&listed.output).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["chunk_count"], 1);
    assert_eq!(listed[0]["source"], "input/cats.md");

    // Another owner's tools neither see nor delete it.
    let bob = knowledge_tools(knowledge.clone(), Some("bob@example.com"));
    let mut bob_registry = Registry::empty(ToolsConfig::default());
    for tool in bob {
        bob_registry.register(tool);
    }
    let bob_delete = bob_registry
        .execute(&ctx, "DeleteDocument", &json!({"id": id}).to_string())
        .await;
    assert!(!bob_delete.ok);
    assert!(
        bob_delete.output.contains("no document"),
        "{}",
        bob_delete.output
    );

    let deleted = call("DeleteDocument", json!({"id": id})).await;
    assert!(deleted.ok, "{}", deleted.output);
    let listed = call("ListDocuments", json!({})).await;
    assert_eq!(listed.output, "[]");
}
