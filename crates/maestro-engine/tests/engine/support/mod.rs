//! Shared support for the engine's integration tests: small IR builders, and a runner that
//! drives a piece through the real OpenAI-compatible client against the scripted HTTP server.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use maestro_engine::{
    Engine, EngineConfig, EventRecord, RunRecord, RunReport, RunState, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, RetryPolicy, ToolMode};
use maestro_piece::{Condition, Dialect, Facet, Movement, Piece, Rule, SessionMode, Target};
use maestro_protocol::Secret;
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::Value;

pub(crate) fn facet(text: &str) -> Facet {
    Facet {
        name: "inline".into(),
        text: text.into(),
        path: None,
    }
}

pub(crate) fn target(label: &str) -> Target {
    match label {
        "COMPLETE" | "$END" => Target::Complete,
        "ABORT" => Target::Abort,
        "ASK" => Target::Ask,
        "WAIT_SUBTASKS" => Target::WaitSubtasks,
        other => Target::Movement(other.into()),
    }
}

/// A plain-text rule.
pub(crate) fn rule(condition: &str, next: &str) -> Rule {
    Rule {
        condition: Condition::Text(condition.into()),
        next: Some(target(next)),
        requires_user_input: false,
        interactive_only: false,
        appendix: None,
        prompt: None,
    }
}

pub(crate) fn rule_if(condition: Condition, next: Option<&str>) -> Rule {
    Rule {
        condition,
        next: next.map(target),
        ..rule("", "x")
    }
}

/// A movement reading the workspace, with an instruction that names it.
pub(crate) fn mv(name: &str, rules: Vec<Rule>) -> Movement {
    Movement {
        name: name.into(),
        persona: Some(facet(&format!("You are the {name} agent."))),
        policies: vec![],
        knowledge: vec![],
        instruction: Some(facet(&format!("Perform the {name} step."))),
        edit: false,
        allowed_tools: vec!["Read".into(), "Glob".into(), "Grep".into()],
        allowed_commands: None,
        allowed_ssh_connections: None,
        rules,
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

pub(crate) fn piece(dialect: Dialect, movements: Vec<Movement>) -> Piece {
    Piece {
        name: "test-piece".into(),
        description: "a piece for tests".into(),
        dialect,
        source: Default::default(),
        hash: "0123abcd".into(),
        max_movements: 10,
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

/// A finished run and everything a test looks at.
pub(crate) struct Ran {
    pub server: ScriptedLlm,
    pub report: RunReport,
    pub events: Vec<EventRecord>,
    pub dir: tempfile::TempDir,
}

impl Ran {
    pub(crate) fn kinds(&self) -> Vec<&'static str> {
        self.events.iter().map(|r| r.event.kind()).collect()
    }

    pub(crate) fn count(&self, kind: &str) -> usize {
        self.kinds().iter().filter(|k| **k == kind).count()
    }

    /// Chat requests the server received.
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.server.requests()
    }

    /// The text of every message of request `i`, joined.
    pub(crate) fn request_text(&self, i: usize) -> String {
        messages_text(&self.requests()[i])
    }

    /// `(status, reason)` of the run.
    pub(crate) fn status(&self) -> (String, Option<String>) {
        (
            self.report.status.to_string(),
            self.report.reason.as_ref().map(ToString::to_string),
        )
    }

    /// Checks what every run must satisfy (see [`assert_record_sound`]).
    pub(crate) fn assert_record_is_sound(&self) {
        assert_record_sound(&self.events, &self.report.state);
    }
}

/// `seq` gapless from 1, one `run_started` first and one `run_finished` last, and replaying the
/// events gives the final state.
pub(crate) fn assert_record_sound(events: &[EventRecord], state: &RunState) {
    let seqs: Vec<u64> = events.iter().map(|r| r.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "seq must be gapless from 1"
    );
    assert_eq!(events.first().map(|r| r.event.kind()), Some("run_started"));
    assert_eq!(events.last().map(|r| r.event.kind()), Some("run_finished"));
    assert_eq!(
        events
            .iter()
            .filter(|r| r.event.kind() == "run_finished")
            .count(),
        1
    );
    pretty_assertions::assert_eq!(
        &RunState::replay(events),
        state,
        "replaying events.jsonl must rebuild the state"
    );
}

pub(crate) fn messages_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The text of the last user message of a request.
pub(crate) fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

pub(crate) fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial: Duration::from_millis(10),
        max: Duration::from_millis(40),
        jitter: 0.0,
    }
}

pub(crate) fn engine_config() -> EngineConfig {
    EngineConfig {
        context_length: Some(100_000),
        ..EngineConfig::new("scripted-model")
    }
}

/// Runs `piece` for a task against a scripted server serving `turns`.
pub(crate) async fn run(piece: Piece, turns: Vec<Turn>) -> Ran {
    run_with(piece, turns, engine_config(), None).await
}

pub(crate) async fn run_with(
    piece: Piece,
    turns: Vec<Turn>,
    config: EngineConfig,
    api_key: Option<&str>,
) -> Ran {
    let server = ScriptedLlm::start(turns).await;
    run_against(server, piece, config, api_key, ToolMode::Native).await
}

/// Runs `piece` against `server` with the client in `tool_mode`.
pub(crate) async fn run_against(
    server: ScriptedLlm,
    piece: Piece,
    config: EngineConfig,
    api_key: Option<&str>,
    tool_mode: ToolMode,
) -> Ran {
    let mut llm_config = OpenAiConfig::new(server.base_url())
        .with_retry(fast_retries())
        .with_tool_mode(tool_mode);
    if let Some(key) = api_key {
        llm_config = llm_config.with_api_key(Secret::new(key));
    }
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(llm_config).unwrap());
    let mut engine = Engine::new(provider, Registry::builtin(ToolsConfig::default()), config);
    if let Some(key) = api_key {
        engine = engine.with_secret(Secret::new(key));
    }
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    std::fs::write(
        record.workspace.join("input/notes.txt"),
        "the secret ingredient is cardamom\n",
    )
    .unwrap();
    let events_path = record.events_path();
    let report = engine
        .run(Arc::new(piece), "Write the cookbook.", record, vec![])
        .await
        .unwrap();
    let events = read_events(&events_path).unwrap();
    Ran {
        server,
        report,
        events,
        dir,
    }
}
