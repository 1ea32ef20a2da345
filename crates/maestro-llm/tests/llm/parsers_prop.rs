//! Property tests for the parsers that read what an endpoint sends: however a tool call's
//! arguments are cut into stream deltas they come back whole, and no input makes the client
//! panic (a model's garbage stays text).

use crate::common;

use common::{client, config, read_tool};
use maestro_llm::{Provider, ToolMode};
use maestro_testkit::{ScriptedLlm, Turn};
use proptest::prelude::*;
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Arbitrary (even malformed) argument text survives the split into interleaved deltas byte
    /// for byte.
    #[test]
    fn streamed_arguments_are_reassembled_exactly(raw in "\\PC{0,60}", other in "[a-z]{1,8}") {
        runtime().block_on(async {
            let server = ScriptedLlm::start([
                Turn::tool_call_raw("First", raw.clone()),
                Turn::tool_calls([("A", json!({"k": other})), ("B", json!({"v": raw}))]),
            ])
            .await;
            let llm = client(config(server.base_url()));
            let single = llm.chat(common::ask("x"), &|_| {}).await.unwrap();
            prop_assert_eq!(single.tool_calls[0].arguments.clone(), raw.clone());
            let both = llm.chat(common::ask("y"), &|_| {}).await.unwrap();
            let arguments: Vec<String> = both.tool_calls.iter().map(|c| c.arguments.clone()).collect();
            prop_assert_eq!(arguments, vec![json!({"k": other}).to_string(), json!({"v": raw}).to_string()]);
            Ok(())
        })?;
    }

    /// Whatever a model writes in JSON mode, the call succeeds: a tool call when the text is a
    /// well-formed tool object, otherwise the text itself.
    #[test]
    fn json_mode_never_fails_on_model_text(text in "\\PC{0,80}") {
        runtime().block_on(async {
            let server = ScriptedLlm::start([Turn::text(text.clone())]).await;
            let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Json));
            let mut request = common::ask("go");
            request.tools = vec![read_tool()].into();
            let answer = llm.chat(request, &|_| {}).await.unwrap();
            prop_assert!(answer.tool_calls.is_empty());
            prop_assert_eq!(answer.content, text);
            Ok(())
        })?;
    }
}
