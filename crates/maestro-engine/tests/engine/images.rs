//! Images from tool results, over real HTTP to a scripted model: the tool message is followed by
//! a user message carrying the image; the record names the image by hash (its bytes kept once
//! beside it), never as a data URL; a resumed run sends the same request again; a text-only
//! model reads a description and the run finishes.

use crate::support;

use std::sync::Arc;

use maestro_engine::{
    Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunSpec, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{Dialect, Piece};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::attach::{ToolImage, attach_image};
use maestro_tools::{Registry, ToolContext, ToolOutput, ToolsConfig, TypedTool};
use serde_json::{Value, json};
use support::*;

/// Shows the model a fixed image, as ReadImage does.
struct ShowImage;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoInput {}

const PICTURE: &[u8] = b"\x89PNG\r\n\x1a\n a picture of a cat";

impl TypedTool for ShowImage {
    type Input = NoInput;
    const NAME: &'static str = "ShowImage";
    const DESCRIPTION: &'static str = "Shows the model a picture.";

    async fn run(&self, _ctx: &ToolContext, _input: NoInput) -> ToolOutput {
        let shown = attach_image(ToolImage {
            media_type: "image/png".into(),
            width: 64,
            height: 48,
            data: PICTURE.to_vec(),
        });
        ToolOutput::ok(format!("a 64×48 PNG (shown: {shown})"))
    }
}

fn viewing_piece() -> Piece {
    let mut look = mv("look", vec![rule("described", "COMPLETE")]);
    look.allowed_tools = vec!["ShowImage".into()];
    piece(Dialect::Maestro, vec![look])
}

fn turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("ShowImage", json!({})),
        Turn::tool_call("complete", json!({"status": "success", "result": "A cat."})),
    ]
}

fn engine(server: &ScriptedLlm, text_only: bool) -> Engine {
    let mut config = OpenAiConfig::new(server.base_url())
        .with_retry(fast_retries())
        .with_tool_mode(ToolMode::Native);
    if text_only {
        config = config.with_text_only_model("scripted-model");
    }
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(config).unwrap());
    let mut tools = Registry::builtin(ToolsConfig::default());
    tools.register(Arc::new(ShowImage));
    Engine::new(provider, tools, engine_config())
}

fn data_url() -> String {
    use base64::Engine as _;
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(PICTURE)
    )
}

async fn full_run(
    text_only: bool,
) -> (
    ScriptedLlm,
    RunRecord,
    maestro_engine::RunReport,
    tempfile::TempDir,
) {
    let server = ScriptedLlm::start(turns()).await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let end = engine(&server, text_only)
        .run(
            Arc::new(viewing_piece()),
            "What is in the picture?",
            record.clone(),
            vec![],
        )
        .await
        .unwrap();
    (server, record, end, dir)
}

fn completed(end: &RunEnd) -> bool {
    matches!(end, RunEnd::Finished(report) if finished(report))
}

fn finished(report: &maestro_engine::RunReport) -> bool {
    report.status.to_string() == "completed"
}

#[tokio::test]
async fn a_tool_image_reaches_the_model_after_the_tool_message_and_is_recorded_by_hash() {
    let (server, record, report, _dir) = full_run(false).await;
    assert!(finished(&report), "{report:?}");
    let second = &server.requests()[1]["messages"];
    let n = second.as_array().unwrap().len();
    assert_eq!(second[n - 2]["role"], "tool");
    assert_eq!(
        second[n - 1],
        json!({"role": "user", "content": [
            {"type": "text", "text": format!("The image the `ShowImage` call {} showed:", second[n - 2]["tool_call_id"].as_str().unwrap())},
            {"type": "image_url", "image_url": {"url": data_url()}},
        ]})
    );
    let sha = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(PICTURE))
    };
    let events = std::fs::read_to_string(record.events_path()).unwrap();
    assert!(!events.contains("base64"), "the record holds no data URL");
    let result = read_events(&record.events_path())
        .unwrap()
        .into_iter()
        .find_map(|r| match r.event {
            RunEvent::ToolResult { images, .. } if !images.is_empty() => Some(images),
            _ => None,
        })
        .unwrap();
    assert_eq!(result[0].sha256, sha);
    assert_eq!((result[0].width, result[0].height), (64, 48));
    assert_eq!(
        std::fs::read(record.dir.join("images").join(&sha)).unwrap(),
        PICTURE
    );
}

#[tokio::test]
async fn a_text_only_model_reads_the_description_and_the_run_finishes() {
    let (server, _record, report, _dir) = full_run(true).await;
    assert!(finished(&report), "{report:?}");
    let request = server.requests()[1].to_string();
    assert!(!request.contains("image_url"), "{request}");
    assert!(
        request.contains("[image not shown: 64×48 px, image/png"),
        "{request}"
    );
    assert!(request.contains("cannot see images"), "{request}");
}

#[tokio::test]
async fn a_run_resumed_after_the_tool_result_sends_the_same_request_with_the_image() {
    let (server, record, _end, _dir) = full_run(false).await;
    let original: Value = server.requests()[1].clone();
    let full = read_events(&record.events_path()).unwrap();
    let cut = full
        .iter()
        .position(|r| matches!(r.event, RunEvent::ToolResult { .. }))
        .unwrap()
        + 1;
    let history: Vec<EventRecord> = full[..cut].to_vec();

    // a crash after the tool result: the run directory (with its images/) is what is left
    let again = ScriptedLlm::start(turns()[1..].to_vec()).await;
    let log = JsonlLog::rewrite(&record.events_path(), &history).unwrap();
    let mut spec = RunSpec::new(
        Arc::new(viewing_piece()),
        "What is in the picture?",
        RunRecord::open(record.dir.parent().unwrap(), &record.run_id, None).unwrap(),
    );
    spec.logs = vec![Arc::new(log)];
    spec.history = history;
    let end = engine(&again, false).run_spec(spec).await.unwrap();
    assert!(completed(&end), "{end:?}");
    let resent = again.requests();
    assert_eq!(resent.len(), 1, "the recorded tool result was reused");
    assert_eq!(resent[0]["messages"], original["messages"]);
}
