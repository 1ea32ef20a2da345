//! TAKT `arpeggio` steps run: a CSV in the workspace, batched through a template file, each
//! batch one recorded model call (at most `concurrency` at once, a failed one tried again),
//! merged in batch order into `output_path`; a custom merge is refused; cut anywhere, the run
//! resumes calling only the batches its record has no answer for, and a replay calls none.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use maestro_engine::{
    Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunReport, RunSpec, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, load_str};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use support::{assert_record_sound, engine_config, fast_retries, messages_text};

const ROWS: &str = "id,name\n1,ada\n2,bob\n3,cy\n4,dee\n5,\"eve, jr\"\n";
const TEMPLATE: &str = "Batch {batch_index}/{total_batches}: {col:1:name}\n{line:1}\n";

/// A workflow whose `collect` step batches `data/items.csv` two rows at a time, two batches at
/// once, into `out/result.txt`; `merge` is the step's `merge:` block.
fn workflow(dir: &Path, merge: &str, max_retries: u32) -> Piece {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(dir.join("templates/row.txt"), TEMPLATE).unwrap();
    let source = format!(
        "\
name: batch-rows
max_steps: 3
initial_step: collect
steps:
  - name: collect
    persona: coder
    edit: false
    instruction: Summarise each row.
    arpeggio:
      source: csv
      source_path: data/items.csv
      batch_size: 2
      concurrency: 2
      template: templates/row.txt
      max_retries: {max_retries}
      retry_delay_ms: 10
{merge}      output_path: out/result.txt
    rules:
      - condition: Processing complete
        next: COMPLETE
"
    );
    load_str(
        &source,
        &dir.join("batch-rows.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece
}

const CONCAT: &str = "      merge:\n        strategy: concat\n        separator: \"\\n---\\n\"\n";

fn engine_for(server: &ScriptedLlm) -> Engine {
    let config = OpenAiConfig::new(server.base_url())
        .with_retry(fast_retries())
        .with_tool_mode(ToolMode::Native);
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(config).unwrap());
    Engine::new(
        provider,
        Registry::builtin(ToolsConfig::default()),
        engine_config(),
    )
}

fn data(record: &RunRecord) {
    std::fs::create_dir_all(record.workspace.join("data")).unwrap();
    std::fs::write(record.workspace.join("data/items.csv"), ROWS).unwrap();
}

struct Ran {
    server: ScriptedLlm,
    report: RunReport,
    events: Vec<EventRecord>,
    record: RunRecord,
    _dir: tempfile::TempDir,
}

async fn run(piece: &Piece, turns: Vec<Turn>) -> Ran {
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    data(&record);
    let path = record.events_path();
    let report = engine_for(&server)
        .run(
            Arc::new(piece.clone()),
            "Summarise the items.",
            record.clone(),
            vec![],
        )
        .await
        .unwrap();
    Ran {
        server,
        report,
        events: read_events(&path).unwrap(),
        record,
        _dir: dir,
    }
}

fn batch_turn(index: u32, answer: &str, delay_ms: u64) -> Turn {
    Turn::when_contains(
        format!("Batch {index}/3:"),
        Turn::text(answer).with_delay(Duration::from_millis(delay_ms)),
    )
}

fn requests_of(events: &[EventRecord], movement: &str) -> usize {
    events
        .iter()
        .filter(|r| r.event.kind() == "llm_request" && r.event.movement() == Some(movement))
        .count()
}

#[tokio::test]
async fn arpeggio_batches_a_csv_through_its_template_and_merges_in_batch_order() {
    let dir = tempfile::tempdir().unwrap();
    let piece = workflow(dir.path(), CONCAT, 2);
    // the first batch answers last: the merge still follows the batches' order
    let ran = run(
        &piece,
        vec![
            batch_turn(0, "ADA and BOB", 400),
            batch_turn(1, "CY and DEE", 200),
            batch_turn(2, "EVE", 0),
        ],
    )
    .await;
    assert_record_sound(&ran.events, &ran.report.state);
    assert_eq!(
        ran.report.status.to_string(),
        "completed",
        "{:?}",
        ran.report.reason
    );
    // every batch called once, its rows rendered into the template
    assert_eq!(ran.server.requests().len(), 3);
    for n in 1..=3 {
        assert_eq!(requests_of(&ran.events, &format!("collect/batch:{n}")), 1);
    }
    let texts: Vec<String> = ran.server.requests().iter().map(messages_text).collect();
    for rendered in [
        "Batch 0/3: ada\nid: 1\nname: ada\n",
        "Batch 1/3: cy\nid: 3\nname: cy\n",
        "Batch 2/3: eve, jr\nid: 5\nname: eve, jr\n",
    ] {
        assert!(texts.iter().any(|t| t.contains(rendered)), "{texts:#?}");
    }
    // two batches at once, never more
    assert_eq!(ran.server.peak_in_flight(), 2);
    // merged in order, written into the workspace, and the step's answer
    let merged = "ADA and BOB\n---\nCY and DEE\n---\nEVE";
    assert_eq!(
        std::fs::read_to_string(ran.record.workspace.join("out/result.txt")).unwrap(),
        merged
    );
    let finished: Vec<(String, String, String)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                response,
                ..
            } => Some((movement.clone(), next.clone(), response.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        [(
            "collect".to_string(),
            "COMPLETE".to_string(),
            merged.to_string()
        )]
    );
}

/// Batch 2 fails once (a 400 is not retried by the client) and then answers.
fn retry_turns() -> Vec<Turn> {
    vec![
        batch_turn(0, "ADA and BOB", 0),
        Turn::when_contains("Batch 1/3:", Turn::http_error(400, "bad batch")),
        batch_turn(1, "CY and DEE", 0),
        batch_turn(2, "EVE", 0),
    ]
}

#[tokio::test]
async fn a_failed_batch_is_tried_again_and_a_batch_failing_every_time_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let piece = workflow(dir.path(), CONCAT, 2);
    let ran = run(&piece, retry_turns()).await;
    assert_record_sound(&ran.events, &ran.report.state);
    assert_eq!(ran.report.status.to_string(), "completed");
    assert_eq!(ran.server.requests().len(), 4);
    assert_eq!(requests_of(&ran.events, "collect/batch:2"), 2);
    let failed: Vec<(String, u32, u32)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ArpeggioBatchFailed {
                movement,
                batch,
                attempt,
                error,
            } => {
                assert!(error.contains("bad batch"), "{error}");
                Some((movement.clone(), *batch, *attempt))
            }
            _ => None,
        })
        .collect();
    assert_eq!(failed, [("collect/batch:2".to_string(), 2, 1)]);
    assert_eq!(
        std::fs::read_to_string(ran.record.workspace.join("out/result.txt")).unwrap(),
        "ADA and BOB\n---\nCY and DEE\n---\nEVE"
    );

    // with one retry and two failures, the run fails naming the batch
    let piece = workflow(dir.path(), CONCAT, 1);
    let failing = vec![
        batch_turn(0, "ADA and BOB", 0),
        Turn::when_contains("Batch 1/3:", Turn::http_error(400, "bad batch")),
        Turn::when_contains("Batch 1/3:", Turn::http_error(400, "still bad")),
        batch_turn(2, "EVE", 0),
    ];
    let ran = run(&piece, failing).await;
    assert_record_sound(&ran.events, &ran.report.state);
    assert_eq!(ran.report.status.to_string(), "failed");
    let reason = ran.report.reason.as_ref().unwrap().to_string();
    assert!(
        reason.contains("arpeggio step `collect`: 1/3 batches failed after 1 retries (batch 2: "),
        "{reason}"
    );
    assert!(reason.contains("still bad"), "{reason}");
    assert_eq!(requests_of(&ran.events, "collect/batch:2"), 2);
    assert!(!ran.record.workspace.join("out/result.txt").exists());
}

#[tokio::test]
async fn a_custom_merge_is_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let merge = "      merge:\n        strategy: custom\n        inline_js: \"return results.map(r => r.content).join('')\"\n";
    let piece = workflow(dir.path(), merge, 2);
    let ran = run(&piece, vec![batch_turn(0, "never", 0)]).await;
    assert_record_sound(&ran.events, &ran.report.state);
    assert_eq!(ran.report.status.to_string(), "failed");
    assert_eq!(ran.server.requests().len(), 0);
    let reason = ran.report.reason.as_ref().unwrap().to_string();
    assert!(
        reason.contains(
            "arpeggio step `collect`: `merge.strategy: custom` runs a JavaScript merge function"
        ),
        "{reason}"
    );
    assert!(reason.contains("use `strategy: concat`"), "{reason}");
}

#[tokio::test]
async fn a_source_outside_the_workspace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let piece = workflow(dir.path(), CONCAT, 2);
    let mut piece_text = serde_json::to_value(&piece).unwrap();
    let kind = &mut piece_text["movements"][0]["kind"]["definition"]["arpeggio"];
    kind["source_path"] = "../../../etc/passwd".into();
    let piece: Piece = serde_json::from_value(piece_text).unwrap();
    let ran = run(&piece, vec![]).await;
    assert_eq!(ran.report.status.to_string(), "failed");
    assert_eq!(ran.server.requests().len(), 0);
    let reason = ran.report.reason.as_ref().unwrap().to_string();
    assert!(
        reason.contains("`source_path: ../../../etc/passwd` is not a file of the workspace"),
        "{reason}"
    );
}

#[tokio::test]
async fn an_arpeggio_run_cut_anywhere_calls_only_the_missing_batches_and_replays_with_none() {
    let dir = tempfile::tempdir().unwrap();
    let piece = workflow(dir.path(), CONCAT, 2);
    let full = run(&piece, retry_turns()).await;
    assert_eq!(full.report.status.to_string(), "completed");
    let full = full.events;
    let run_id = full
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .unwrap();
    for cut in 1..full.len() {
        let history = &full[..cut];
        let holds = |kind: &str, movement: &str| {
            history
                .iter()
                .any(|r| r.event.kind() == kind && r.event.movement() == Some(movement))
        };
        // the turns of the calls the cut record has no outcome for
        let left: Vec<Turn> = retry_turns()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| match i {
                0 => !holds("llm_response", "collect/batch:1"),
                1 => !holds("arpeggio_batch_failed", "collect/batch:2"),
                2 => !holds("llm_response", "collect/batch:2"),
                _ => !holds("llm_response", "collect/batch:3"),
            })
            .map(|(_, t)| t)
            .collect();
        let expected = left.len();
        let server = ScriptedLlm::start(left).await;
        let scratch = tempfile::tempdir().unwrap();
        let record = RunRecord::open(&scratch.path().join("runs"), &run_id, None).unwrap();
        data(&record);
        let log = JsonlLog::rewrite(&record.events_path(), history).unwrap();
        let mut spec = RunSpec::new(
            Arc::new(piece.clone()),
            "Summarise the items.",
            record.clone(),
        );
        spec.logs = vec![Arc::new(log)];
        spec.history = history.to_vec();
        let end = engine_for(&server).run_spec(spec).await.unwrap();
        let RunEnd::Finished(report) = &end else {
            panic!("cut at {cut}: {end:?}");
        };
        assert_eq!(
            report.status.to_string(),
            "completed",
            "cut at {cut}: {:?}",
            report.reason
        );
        assert_eq!(
            server.requests().len(),
            expected,
            "cut at {cut} ({})",
            full[cut - 1].event.kind()
        );
        let events = read_events(&record.events_path()).unwrap();
        assert_eq!(&events[..cut], history, "cut at {cut}");
        assert_record_sound(&events, &report.state);
        assert_eq!(
            std::fs::read_to_string(record.workspace.join("out/result.txt")).unwrap(),
            "ADA and BOB\n---\nCY and DEE\n---\nEVE",
            "cut at {cut}"
        );
    }

    // replay: the record again, the failed attempt included, with no model call
    let server = ScriptedLlm::start(vec![]).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    data(&record);
    let report = engine_for(&server)
        .replay(Arc::new(piece), full, record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(server.requests().len(), 0, "replay calls no model");
}
