//! Engine benchmarks (results in docs/benchmarks.md).
//!
//! - `movement_overhead`: a takt chain of movements against an instant in-memory model: what the
//!   engine itself costs per movement (state, events flushed to disk, prompt assembly and logs,
//!   outcome reading).
//! - `critical_path`: plan → 3 parallel reviewers → done against a model that takes a fixed
//!   delay per call. The critical path is 3 calls, so wall time / (3 × delay) is the overhead
//!   ratio; the parallel sub-movements must overlap for it to stay near 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use divan::Bencher;
use maestro_engine::{Engine, EngineConfig, MemoryLog, RunEnd, RunRecord, RunSpec};
use maestro_llm::{BoxFuture, ChatRequest, ChatResponse, LlmError, Provider, StreamEvent};
use maestro_piece::{Condition, Dialect, Facet, Movement, Piece, Rule, SessionMode, Target};
use maestro_protocol::{RunStatus, Usage};
use maestro_tools::{Registry, ToolsConfig};

fn main() {
    divan::main();
}

/// Answers every call with every movement's first tag, after `delay`.
struct FixedModel {
    delay: Duration,
    answer: String,
}

impl Provider for FixedModel {
    fn chat<'a>(
        &'a self,
        _request: ChatRequest,
        _on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            if !self.delay.is_zero() {
                // A thread sleep is precise to well under a millisecond; tokio's timer rounds up
                // to its 1 ms tick, which would show up as engine overhead.
                let delay = self.delay;
                tokio::task::spawn_blocking(move || std::thread::sleep(delay))
                    .await
                    .ok();
            }
            Ok(ChatResponse {
                content: self.answer.clone(),
                tool_calls: vec![],
                usage: Usage {
                    prompt_tokens: 100,
                    completion_tokens: 10,
                    total_tokens: 110,
                    cached_prompt_tokens: 0,
                    estimated: false,
                },
                finish_reason: Some("stop".into()),
                model: None,
            })
        })
    }

    fn context_length<'a>(&'a self, _model: &'a str) -> BoxFuture<'a, Option<u64>> {
        Box::pin(async { Some(100_000) })
    }
}

fn facet(text: &str) -> Facet {
    Facet {
        name: "inline".into(),
        text: text.into(),
        path: None,
    }
}

fn movement(name: &str, next: Option<Target>) -> Movement {
    Movement {
        name: name.into(),
        persona: Some(facet("You are a careful engineer.")),
        policies: vec![facet(&"Write clear code. ".repeat(50))],
        knowledge: vec![],
        instruction: Some(facet("Do the {movement_iteration}th step of {task}.")),
        edit: false,
        allowed_tools: vec![],
        allowed_commands: None,
        allowed_ssh_connections: None,
        rules: vec![
            Rule {
                condition: Condition::Text("done".into()),
                next,
                requires_user_input: false,
                interactive_only: false,
                appendix: None,
                prompt: None,
            },
            Rule {
                condition: Condition::Text("blocked".into()),
                next: Some(Target::Abort),
                requires_user_input: false,
                interactive_only: false,
                appendix: None,
                prompt: None,
            },
        ],
        default_next: None,
        max_consecutive_revisits: None,
        pass_previous_response: true,
        session: SessionMode::Refresh,
        output_contracts: vec![],
        quality_gates: vec![],
        command_gates: Vec::new(),
        companions: Vec::new(),
        parallel: vec![],
        frontmatter_schema: None,
        kind: Default::default(),
        dynamic: None,
        structured_output: None,
        delay_before_ms: None,
        completion_retry: None,
    }
}

fn piece(movements: Vec<Movement>) -> Piece {
    Piece {
        name: "bench".into(),
        description: String::new(),
        dialect: Dialect::Takt,
        source: Default::default(),
        hash: String::new(),
        max_movements: 100,
        initial_movement: movements[0].name.clone(),
        start_prompt: None,
        movements,
        loop_monitors: vec![],
        keywords: vec![],
        required_mcp: vec![],
        model: None,
        budget: None,
    }
}

fn chain(n: usize) -> Piece {
    piece(
        (0..n)
            .map(|i| {
                let next = if i + 1 == n {
                    Target::Complete
                } else {
                    Target::Movement(format!("m{}", i + 1))
                };
                movement(&format!("m{i}"), Some(next))
            })
            .collect(),
    )
}

fn fan_out() -> Piece {
    let mut reviewers = movement("reviewers", None);
    reviewers.rules = vec![Rule {
        condition: Condition::All(vec!["done".into()]),
        ..movement("x", Some(Target::Movement("finish".into())))
            .rules
            .remove(0)
    }];
    reviewers.parallel = ["a", "b", "c"].iter().map(|n| movement(n, None)).collect();
    piece(vec![
        movement("plan", Some(Target::Movement("reviewers".into()))),
        reviewers,
        movement("finish", Some(Target::Complete)),
    ])
}

fn all_tags(piece: &Piece) -> String {
    let mut names: Vec<String> = vec![];
    for m in &piece.movements {
        names.push(m.name.clone());
        names.extend(m.parallel.iter().map(|s| s.name.clone()));
    }
    names
        .iter()
        .map(|n| format!("[{}:1]", n.to_uppercase()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn run_once(
    runtime: &tokio::runtime::Runtime,
    piece: &Arc<Piece>,
    delay: Duration,
    runs: &std::path::Path,
) {
    let provider = Arc::new(FixedModel {
        delay,
        answer: format!("Done. {}", all_tags(piece)),
    });
    let engine = Engine::new(
        provider,
        Registry::empty(ToolsConfig::default()),
        EngineConfig::new("bench"),
    );
    let record = RunRecord::create(runs, None).unwrap();
    let report = runtime
        .block_on(engine.run(Arc::clone(piece), "the benchmark task", record, vec![]))
        .unwrap();
    assert_eq!(report.status, RunStatus::Completed);
}

#[divan::bench(args = [1, 10, 50], sample_count = 20)]
fn movement_overhead(bencher: Bencher, movements: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let piece = Arc::new(chain(movements));
    bencher
        .counter(divan::counter::ItemsCount::new(movements))
        .bench_local(|| run_once(&runtime, &piece, Duration::ZERO, dir.path()));
}

/// Wall time of the fan-out run; divide by 3 × the delay for the critical-path ratio.
#[divan::bench(args = [50, 200], sample_count = 10)]
fn critical_path(bencher: Bencher, delay_ms: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let piece = Arc::new(fan_out());
    bencher.bench_local(|| {
        run_once(
            &runtime,
            &piece,
            Duration::from_millis(delay_ms),
            dir.path(),
        )
    });
}

/// Resuming a 50-movement run whose worker died during its last movement: the run is rebuilt
/// from its 49 finished movements' events (prompts assembled again, recorded answers reused,
/// nothing written again), then the last movement runs against the instant model.
#[divan::bench(sample_count = 20)]
fn resume_50_movements(bencher: Bencher) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let piece = Arc::new(chain(50));
    let provider = Arc::new(FixedModel {
        delay: Duration::ZERO,
        answer: format!("Done. {}", all_tags(&piece)),
    });
    let engine = Engine::new(
        provider,
        Registry::empty(ToolsConfig::default()),
        EngineConfig::new("bench"),
    );
    let record = RunRecord::create(dir.path(), None).unwrap();
    let events_path = record.events_path();
    runtime
        .block_on(engine.run(
            Arc::clone(&piece),
            "the benchmark task",
            record.clone(),
            vec![],
        ))
        .unwrap();
    let events = maestro_engine::read_events(&events_path).unwrap();
    let last_start = events
        .iter()
        .rposition(|r| r.event.kind() == "movement_started")
        .unwrap();
    let history = events[..=last_start].to_vec();
    bencher.bench_local(|| {
        let mut spec = RunSpec::new(Arc::clone(&piece), "the benchmark task", record.clone());
        spec.logs = vec![Arc::new(MemoryLog::default())];
        spec.history = history.clone();
        let end = runtime.block_on(engine.run_spec(spec)).unwrap();
        assert!(matches!(end, RunEnd::Finished(r) if r.status == RunStatus::Completed));
    });
}
