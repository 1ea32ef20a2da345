//! The OpenAPI document generated from the handlers matches the committed copy
//! (`crates/maestro-server/openapi.json`), so that a change to the API shows in review.
//! `MAESTRO_UPDATE_OPENAPI=1 cargo test -p maestro-server --test openapi` rewrites the copy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn the_openapi_document_matches_the_committed_copy() {
    let generated = maestro_server::openapi_document().to_pretty_json().unwrap() + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var_os("MAESTRO_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from the document the handlers generate; review the change and run \
         `MAESTRO_UPDATE_OPENAPI=1 cargo test -p maestro-server --test openapi` to update it",
        path.display()
    );
}

#[test]
fn every_operation_has_a_summary_a_tag_and_an_error_shape() {
    let doc: serde_json::Value =
        serde_json::from_str(&maestro_server::openapi_document().to_json().unwrap()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.contains_key("/api/v1/jobs/{id}/events"));
    assert!(paths.contains_key("/api/v1/openapi.json"));
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["summary"].is_string(), "{method} {path} has no summary");
            assert!(
                op["tags"].as_array().is_some_and(|t| !t.is_empty()),
                "{method} {path}"
            );
            // A PUT of a name makes the thing when it is new (a piece).
            let names_a_thing = path.contains('{') && method != "put" || path.contains("{id}");
            if names_a_thing {
                assert!(
                    op["responses"].get("404").is_some(),
                    "{method} {path} names a thing but documents no 404"
                );
            }
        }
    }
}
