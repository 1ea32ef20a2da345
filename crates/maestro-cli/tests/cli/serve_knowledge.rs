//! `maestro serve`'s `/api/v1/knowledge` over real HTTP on 127.0.0.1: ingest (a second time a
//! no-op), list, search with a query full of syntax, delete, and the problems a client gets.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support;

use support::jobs::Project;

#[tokio::test(flavor = "multi_thread")]
async fn documents_are_ingested_searched_listed_and_deleted_through_the_api() {
    let project = Project::new();
    let served = project.serve_plain(&["--insecure-no-auth"]);
    let body = json!({
        "name": "guide.md",
        "content": "# Guide\n\n## Install\n\nRun apt-get install quokka-server first.\n",
        "collection": "manuals",
    });
    let (status, first) = served.post("/api/v1/knowledge", body.clone()).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], true);
    assert_eq!(first["document"]["title"], "Guide");
    let id = first["document"]["id"].as_str().unwrap().to_string();
    let (status, again) = served.post("/api/v1/knowledge", body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["document"]["id"], id.as_str());

    let (status, hits) = served
        .get("/api/v1/knowledge/search?q=%22install%22%3A%20quokka*%20OR%20(&k=3")
        .await;
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits[0]["document_id"], id.as_str());
    assert_eq!(hits[0]["location"], "Guide > Install");

    let (status, listed) = served.get("/api/v1/knowledge?collection=manuals").await;
    assert_eq!(status, 200);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["chunk_count"], 1);

    let (status, problem) = served
        .post(
            "/api/v1/knowledge",
            json!({"name": "photo.png", "content": "x"}),
        )
        .await;
    assert_eq!(status, 422, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("photo.png"),
        "{problem}"
    );
    let (status, problem) = served
        .post("/api/v1/knowledge", json!({"title": "t"}))
        .await;
    assert_eq!(status, 400, "{problem}");
    // A URL that is not one to fetch is the request's fault: 422 naming `url`, not 502.
    for url in ["file:///etc/passwd", "http://127.0.0.1:9/secret"] {
        let (status, problem) = served.post("/api/v1/knowledge", json!({"url": url})).await;
        assert_eq!(status, 422, "{url}: {problem}");
        assert_eq!(problem["field"], "url", "{problem}");
    }

    let http = reqwest::Client::new();
    let deleted = http
        .delete(served.url(&format!("/api/v1/knowledge/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 200);
    let again = http
        .delete(served.url(&format!("/api/v1/knowledge/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 404);
    let (_, listed) = served.get("/api/v1/knowledge").await;
    assert_eq!(listed, json!([]));
    served.stop().await;
}
