//! `BatchReviewTextWithLLM`: a long text reviewed chunk by chunk through the run's client,
//! against the scripted model over real HTTP: the calls in flight never pass `concurrency`,
//! each chunk's call is reserved from the budget and recorded, garbage answers are kept with a
//! note, and a resume of a stopped review asks only the chunks the record does not answer.
//! The same after a real kill -9 of `maestro run` is in `maestro-cli/tests/review_resume.rs`.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_engine::{
    CallPurpose, Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunSpec, SpendAsk,
    SpendFuture, SpendGuard, SpendRefused, SpendTicket, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{Dialect, Piece};
use maestro_protocol::{RunStatus, Usage};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::{Value, json};
use support::*;

const CHUNKS: usize = 100;

/// A document of `CHUNKS` sections, each about 700 characters and marked `[chunk-NNN]`: with
/// `chunk_chars: 1000` each section is one chunk.
fn document() -> String {
    (1..=CHUNKS)
        .map(|n| {
            format!(
                "## Part {n:03}\n\n[chunk-{n:03}] {}\n",
                "The tenant pays the rent on the first day of each month. ".repeat(12)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn review_piece() -> Piece {
    let mut review = mv("review", vec![rule("reviewed", "COMPLETE")]);
    review.allowed_tools = vec!["BatchReviewTextWithLLM".into(), "Read".into()];
    piece(Dialect::Maestro, vec![review])
}

fn review_call(concurrency: usize) -> Turn {
    Turn::tool_call(
        "BatchReviewTextWithLLM",
        json!({
            "file_path": "input/lease.md",
            "instruction": "List every clause that contradicts another.",
            "chunk_chars": 1000,
            "concurrency": concurrency,
        }),
    )
}

/// Chunk `n`'s answer: its findings as JSON, except chunk 8's, which is not JSON.
fn chunk_turn(n: usize) -> Turn {
    let answer = if n == 8 {
        "I could not decide; the clause about rent seems fine.".to_string()
    } else {
        json!({"findings": [{"text": format!("issue in chunk {n:03}"), "quote": "rent"}]})
            .to_string()
    };
    Turn::when_contains(
        format!("[chunk-{n:03}]"),
        Turn::text(answer)
            .with_delay(Duration::from_millis(15))
            .with_usage(200, 20),
    )
}

/// Records what it is asked; past `limit` reservations, when one is set, the budget cannot be
/// checked (the store is down), so the job is to be retried later.
#[derive(Default)]
struct Budget {
    asks: Mutex<Vec<SpendAsk>>,
    settled: Mutex<Vec<Usage>>,
    limit: Option<usize>,
}

impl SpendGuard for Budget {
    fn reserve(&self, ask: SpendAsk) -> SpendFuture<'_, Result<SpendTicket, SpendRefused>> {
        Box::pin(async move {
            let mut asks = self.asks.lock().unwrap();
            if self.limit.is_some_and(|l| asks.len() >= l) {
                return Err(SpendRefused::Unavailable("the store is down".into()));
            }
            asks.push(ask);
            Ok(SpendTicket::new(asks.len().to_string()))
        })
    }

    fn settle(&self, _ticket: SpendTicket, _model: String, usage: Usage) -> SpendFuture<'_, ()> {
        Box::pin(async move { self.settled.lock().unwrap().push(usage) })
    }

    fn release(&self, _ticket: SpendTicket) -> SpendFuture<'_, ()> {
        Box::pin(async {})
    }
}

fn engine(server: &ScriptedLlm) -> Engine {
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

async fn run_once(
    server: &ScriptedLlm,
    record: &RunRecord,
    budget: Arc<Budget>,
) -> (RunEnd, Vec<EventRecord>) {
    let history = read_events(&record.events_path()).unwrap_or_default();
    let log = JsonlLog::rewrite(&record.events_path(), &history).unwrap();
    let mut spec = RunSpec::new(
        Arc::new(review_piece()),
        "Review the lease.",
        record.clone(),
    );
    spec.logs = vec![Arc::new(log)];
    spec.history = history;
    spec.spend = Some(budget as Arc<dyn SpendGuard>);
    spec.retry_infrastructure = true;
    let end = engine(server).run_spec(spec).await.unwrap();
    (end, read_events(&record.events_path()).unwrap())
}

fn new_record(dir: &tempfile::TempDir) -> RunRecord {
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    std::fs::write(record.workspace.join("input/lease.md"), document()).unwrap();
    record
}

/// The review's JSONL lines, from the file the tool result names.
fn jsonl(record: &RunRecord, events: &[EventRecord]) -> Vec<Value> {
    let output = events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::ToolResult {
                tool,
                ok: true,
                output: Some(output),
                ..
            } if tool == "BatchReviewTextWithLLM" => Some(output.clone()),
            _ => None,
        })
        .expect("a successful review");
    let name = output
        .split_whitespace()
        .find(|w| w.starts_with("input/review-"))
        .unwrap()
        .trim_end_matches(|c: char| !c.is_alphanumeric());
    std::fs::read_to_string(record.workspace.join(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// How many requests the server received for chunk `n`.
fn requests_for(server: &ScriptedLlm, n: usize) -> usize {
    let needle = format!("[chunk-{n:03}]");
    server
        .requests()
        .iter()
        .filter(|r| messages_text(r).contains(&needle))
        .count()
}

fn status_of(end: &RunEnd) -> RunStatus {
    match end {
        RunEnd::Finished(report) => report.status,
        other => panic!("expected an end, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_chunks_never_have_more_than_concurrency_calls_in_flight() {
    let mut turns = vec![review_call(3)];
    turns.extend((1..=CHUNKS).map(chunk_turn));
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "reviewed"}),
    ));
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let record = new_record(&dir);
    let budget = Arc::new(Budget::default());

    let (end, events) = run_once(&server, &record, budget.clone()).await;
    assert_eq!(status_of(&end), RunStatus::Completed);
    assert_eq!(server.remaining(), 0);
    assert_eq!(server.requests().len(), CHUNKS + 2);
    let peak = server.peak_in_flight();
    assert!(
        (2..=3).contains(&peak),
        "{peak} calls in flight at once; concurrency was 3"
    );
    for n in 1..=CHUNKS {
        assert_eq!(requests_for(&server, n), 1, "chunk {n}");
    }

    // One line a chunk, in the text's order, with where it is and what was found.
    let lines = jsonl(&record, &events);
    assert_eq!(lines.len(), CHUNKS);
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        assert_eq!(line["chunk"], json!(n));
        let location = line["location"].as_str().unwrap();
        assert!(location.contains(&format!("Part {n:03}")), "{location}");
        if n == 8 {
            assert_eq!(line["findings"].as_array().unwrap().len(), 1);
            assert!(
                line["findings"][0]["text"]
                    .as_str()
                    .unwrap()
                    .starts_with("I could not decide")
            );
            assert!(
                line["findings"][0]["note"]
                    .as_str()
                    .unwrap()
                    .contains("not the JSON")
            );
        } else {
            assert_eq!(
                line["findings"],
                json!([{"text": format!("issue in chunk {n:03}"), "quote": "rent"}])
            );
        }
    }

    // Every chunk's call was reserved from the budget and settled, and recorded.
    let review_asks: Vec<SpendAsk> = budget
        .asks
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.purpose == CallPurpose::Review)
        .cloned()
        .collect();
    assert_eq!(review_asks.len(), CHUNKS);
    assert!(
        review_asks
            .iter()
            .all(|a| a.movement.starts_with("review/review:"))
    );
    assert_eq!(budget.settled.lock().unwrap().len(), CHUNKS + 2);
    let recorded = events
        .iter()
        .filter(|r| {
            matches!(
                r.event,
                RunEvent::LlmResponse {
                    purpose: CallPurpose::Review,
                    ..
                }
            )
        })
        .count();
    assert_eq!(recorded, CHUNKS);
    // The tool result sums it up.
    let summary = events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::ToolResult {
                output: Some(o), ..
            } if o.starts_with("reviewed") => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    assert!(summary.contains("in 100 chunks"), "{summary}");
    assert!(summary.contains("100 findings"), "{summary}");
    assert!(summary.contains("1 answer was not the JSON"), "{summary}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_review_stopped_midway_resumes_asking_only_the_chunks_not_recorded() {
    let mut turns = vec![review_call(4)];
    turns.extend((1..=CHUNKS).map(chunk_turn));
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let record = new_record(&dir);
    // The movement's call and 40 chunks are reserved; then the budget cannot be checked and the
    // run stops, to be retried: the chunks in flight finish, the rest are not asked.
    let budget = Arc::new(Budget {
        limit: Some(41),
        ..Budget::default()
    });
    let (end, events) = run_once(&server, &record, budget).await;
    assert!(matches!(end, RunEnd::Retry { .. }), "{end:?}");
    let answered: Vec<String> = events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::LlmResponse {
                purpose: CallPurpose::Review,
                movement,
                ..
            } => Some(movement.clone()),
            _ => None,
        })
        .collect();
    assert!((37..=40).contains(&answered.len()), "{}", answered.len());
    let first_requests: Vec<usize> = (1..=CHUNKS).map(|n| requests_for(&server, n)).collect();

    // Resumed with room: the recorded chunks are not asked again, the others once each.
    server.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "reviewed"}),
    ));
    let (end, events) = run_once(&server, &record, Arc::new(Budget::default())).await;
    assert_eq!(status_of(&end), RunStatus::Completed);
    for n in 1..=CHUNKS {
        assert_eq!(
            requests_for(&server, n),
            1,
            "chunk {n} (asked {} time(s) before the resume)",
            first_requests[n - 1]
        );
    }
    let lines = jsonl(&record, &events);
    assert_eq!(lines.len(), CHUNKS);
    // Each chunk has its own answer, whichever run asked for it.
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        assert_eq!(line["chunk"], json!(n));
        if n != 8 {
            assert_eq!(
                line["findings"][0]["text"],
                json!(format!("issue in chunk {n:03}"))
            );
        }
    }
}
