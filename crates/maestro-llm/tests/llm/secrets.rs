//! The API key travels as a Bearer header and nowhere else: not in errors, retry events or Debug.

use crate::common;

use common::{Events, ask, client, config, fast_retry};
use maestro_llm::Provider;
use maestro_protocol::Secret;
use maestro_testkit::{ScriptedLlm, Turn};

const KEY: &str = "sk-test-0123456789abcdef";

#[tokio::test]
async fn the_key_is_sent_as_bearer_and_redacted_everywhere_else() {
    // A careless endpoint that echoes the key in its error body.
    let echo = format!(r#"{{"error":{{"message":"invalid key {KEY} for this org"}}}}"#);
    let server = ScriptedLlm::start([
        Turn::http_error(500, echo.clone()),
        Turn::text("ok"),
        Turn::http_error(401, echo),
    ])
    .await;
    let llm = client(
        config(server.base_url())
            .with_api_key(Secret::new(KEY))
            .with_header("X-Org-Token", Secret::new("org-secret-value"))
            .with_retry(fast_retry(2)),
    );
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("hi"), &events.sink()).await.unwrap().content,
        "ok"
    );
    let error = llm.chat(ask("again"), &events.sink()).await.unwrap_err();

    let recorded = server.recorded();
    assert!(
        recorded
            .iter()
            .all(|r| r.header("authorization") == Some(&*format!("Bearer {KEY}")))
    );
    assert!(
        recorded
            .iter()
            .all(|r| r.header("x-org-token") == Some("org-secret-value"))
    );

    assert_eq!(
        error.to_string(),
        "the model endpoint answered HTTP 401: invalid key *** for this org"
    );
    let retry_reason = &events.retries()[0].2;
    assert_eq!(
        retry_reason,
        "the model endpoint answered HTTP 500: invalid key *** for this org"
    );
    let debug = format!("{llm:?} {:?} {error:?}", llm.config());
    assert!(
        !debug.contains(KEY) && !debug.contains("org-secret-value"),
        "{debug}"
    );
}
