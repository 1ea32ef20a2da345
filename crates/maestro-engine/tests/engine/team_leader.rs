//! TAKT `team_leader` steps run: the builtin `audit-architecture` workflow on a scripted path,
//! its leader planning two batches of parts that run as sub-movements at most `max_parts` at
//! once; cut anywhere, the run resumes without repeating a recorded call, and a replay makes
//! none.

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use maestro_engine::{
    Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunSpec, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, load_file};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::json;
use support::{assert_record_sound, engine_config, fast_retries, run};

fn audit_architecture() -> Piece {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-piece/takt-builtins/v0.60/en/workflows/audit-architecture.yaml");
    load_file(&path, &LoadOptions::default())
        .unwrap_or_else(|f| panic!("{f}"))
        .piece
}

fn part(id: &str, title: &str, needle: &str) -> serde_json::Value {
    json!({"id": id, "title": title, "instruction": format!("Audit {title}; marker {needle}.")})
}

/// plan → audit (leader: four parts, then one more, then done) → supervise → COMPLETE.
fn turns() -> Vec<Turn> {
    let slow = Duration::from_millis(300);
    vec![
        // plan: its report, then its answer
        Turn::tool_call(
            "write_report",
            json!({"name": "01-architecture-audit-plan.md", "content": "# Plan\nmodules: api, core, db, ui\n"}),
        ),
        Turn::text("The inventory is complete.\n[PLAN:1]"),
        // the leader's decomposition, and the parts of the first batch
        Turn::when_contains(
            "decomposition-only planning",
            Turn::text(
                json!({"parts": [
                    part("api", "the api module", "INSPECT-API"),
                    part("core", "the core module", "INSPECT-CORE"),
                    part("db", "the db module", "INSPECT-DB"),
                    part("ui", "the ui module", "INSPECT-UI"),
                ]})
                .to_string(),
            ),
        ),
        Turn::when_contains(
            "INSPECT-API",
            Turn::text("api: handlers call the db directly").with_delay(slow),
        ),
        Turn::when_contains(
            "INSPECT-CORE",
            Turn::text("core: clean boundaries").with_delay(slow),
        ),
        Turn::when_contains(
            "INSPECT-DB",
            Turn::text("db: one god object").with_delay(slow),
        ),
        Turn::when_contains(
            "INSPECT-UI",
            Turn::text("ui: no findings").with_delay(slow),
        ),
        // after the second batch the leader is done; after the first it wants a cross-check
        Turn::when_contains(
            "### verify:",
            Turn::text(r#"{"done": true, "reasoning": "every module is covered", "parts": []}"#),
        ),
        Turn::when_contains(
            "Review the completed parts",
            Turn::text(
                json!({"done": false, "reasoning": "the api finding needs a cross-check",
                       "parts": [part("api", "again", "INSPECT-DUP"), part("verify", "the api/db cross-check", "INSPECT-VERIFY")]})
                .to_string(),
            ),
        ),
        Turn::when_contains(
            "INSPECT-VERIFY",
            Turn::text("verify: confirmed, api reaches into db"),
        ),
        // supervise
        Turn::text("The audit is issue-ready.\n[SUPERVISE:1]"),
    ]
}

const CALLS: usize = 11;

fn started(events: &[EventRecord], parent: Option<&str>) -> Vec<String> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementStarted {
                movement,
                parent: p,
                ..
            } if p.as_deref() == parent => Some(movement.clone()),
            _ => None,
        })
        .collect()
}

fn seq_of(events: &[EventRecord], kind: &str, movement: &str) -> u64 {
    events
        .iter()
        .find(|r| r.event.kind() == kind && r.event.movement() == Some(movement))
        .map(|r| r.seq)
        .unwrap_or_else(|| panic!("no {kind} of {movement}"))
}

#[tokio::test]
async fn audit_architecture_runs_its_team_leader_to_completed() {
    let ran = run(audit_architecture(), turns()).await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "completed", "{reason:?}");
    assert_eq!(ran.requests().len(), CALLS);

    // the steps and their transitions
    assert_eq!(started(&ran.events, None), ["plan", "audit", "supervise"]);
    let transitions: Vec<(String, String)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                parent: None,
                ..
            } => Some((movement.clone(), next.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        transitions,
        [
            ("plan".to_string(), "audit".to_string()),
            ("audit".into(), "supervise".into()),
            ("supervise".into(), "COMPLETE".into()),
        ]
    );

    // the plans: four parts, then the one new part (a reused id is dropped), then done
    let plans: Vec<(u32, Vec<String>, bool)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::TeamLeaderPlanned {
                batch, parts, done, ..
            } => Some((*batch, parts.iter().map(|p| p.id.clone()).collect(), *done)),
            _ => None,
        })
        .collect();
    assert_eq!(
        plans,
        [
            (
                1,
                vec!["api".into(), "core".into(), "db".into(), "ui".into()],
                false
            ),
            (2, vec!["verify".to_string()], false),
            (3, vec![], true),
        ]
    );

    // the parts ran as sub-movements of the step, each once
    let mut parts = started(&ran.events, Some("audit"));
    assert_eq!(parts.pop().as_deref(), Some("audit.verify"));
    parts.sort();
    assert_eq!(parts, ["audit.api", "audit.core", "audit.db", "audit.ui"]);
    // at most `max_parts: 3` at once, and the bound was used
    assert_eq!(ran.server.peak_in_flight(), 3);
    // the second batch started after every part of the first had finished
    let verify = seq_of(&ran.events, "movement_started", "audit.verify");
    for first in ["audit.api", "audit.core", "audit.db", "audit.ui"] {
        assert!(seq_of(&ran.events, "movement_finished", first) < verify);
    }
    // the leader's calls are recorded under the step, the parts' under theirs
    let calls_of = |m: &str| {
        ran.events
            .iter()
            .filter(|r| r.event.kind() == "llm_request" && r.event.movement() == Some(m))
            .count()
    };
    assert_eq!(calls_of("audit"), 3, "decomposition and two follow-ups");
    assert_eq!(calls_of("audit.api"), 1);
    assert_eq!(calls_of("audit.verify"), 1);

    // the leader inspects read-only; the parts read what the step may
    let leader_request = ran
        .requests()
        .into_iter()
        .find(|r| support::messages_text(r).contains("decomposition-only planning"))
        .unwrap();
    let tools: Vec<String> = leader_request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for tool in ["Read", "Glob", "Grep"] {
        assert!(tools.iter().any(|t| t == tool), "{tools:?}");
    }
    for tool in ["Write", "Edit", "Bash", "write_report"] {
        assert!(!tools.iter().any(|t| t == tool), "{tools:?}");
    }

    // the step's answer and its report hold the plan and every part's answer
    let audit = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement, response, ..
            } if movement == "audit" => Some(response.clone()),
            _ => None,
        })
        .unwrap();
    assert!(audit.starts_with("## decomposition\n"), "{audit}");
    for text in [
        "## api: the api module\napi: handlers call the db directly",
        "## verify: the api/db cross-check\nverify: confirmed",
    ] {
        assert!(audit.contains(text), "{audit}");
    }
    let report = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::ReportWritten { movement, path, .. } if movement == "audit" => {
                Some(path.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(std::fs::read_to_string(report).unwrap(), audit);
}

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

async fn full_run(piece: &Piece) -> (Vec<EventRecord>, tempfile::TempDir) {
    let server = ScriptedLlm::start(turns()).await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let path = record.events_path();
    engine_for(&server)
        .run(Arc::new(piece.clone()), "Audit the shop.", record, vec![])
        .await
        .unwrap();
    (read_events(&path).unwrap(), dir)
}

#[tokio::test]
async fn a_team_leader_run_cut_anywhere_resumes_without_repeating_a_call_and_replays_with_none() {
    let piece = audit_architecture();
    let (full, _dir) = full_run(&piece).await;
    let answers = |events: &[EventRecord]| {
        events
            .iter()
            .filter(|r| matches!(r.event, RunEvent::LlmResponse { .. }))
            .count()
    };
    assert_eq!(answers(&full), CALLS);
    for cut in 1..full.len() {
        let history = &full[..cut];
        // the turns whose calls the cut record answers are left out (a later prompt quoting a
        // part's instruction must not find that part's turn)
        let answered = |m: &str| {
            history
                .iter()
                .filter(|r| r.event.kind() == "llm_response" && r.event.movement() == Some(m))
                .count()
        };
        let left: Vec<Turn> = turns()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| match i {
                0 | 1 => *i >= answered("plan"),
                2 => answered("audit") < 1,
                3 => answered("audit.api") == 0,
                4 => answered("audit.core") == 0,
                5 => answered("audit.db") == 0,
                6 => answered("audit.ui") == 0,
                7 => answered("audit") < 3,
                8 => answered("audit") < 2,
                9 => answered("audit.verify") == 0,
                _ => answered("supervise") == 0,
            })
            .map(|(_, t)| t)
            .collect();
        let server = ScriptedLlm::start(left).await;
        let dir = tempfile::tempdir().unwrap();
        let run_id = full
            .iter()
            .find_map(|r| match &r.event {
                RunEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
                _ => None,
            })
            .unwrap();
        let record = RunRecord::open(&dir.path().join("runs"), &run_id, None).unwrap();
        let log = JsonlLog::rewrite(&record.events_path(), history).unwrap();
        let mut spec = RunSpec::new(Arc::new(piece.clone()), "Audit the shop.", record.clone());
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
        // only the calls the cut record holds no answer to were made
        assert_eq!(
            server.requests().len(),
            CALLS - answers(history),
            "cut at {cut} ({})",
            full[cut - 1].event.kind()
        );
        let events = read_events(&record.events_path()).unwrap();
        assert_eq!(&events[..cut], history, "cut at {cut}");
        assert_record_sound(&events, &report.state);
        let mut got = started(&events, Some("audit"));
        got.sort();
        assert_eq!(
            got,
            [
                "audit.api",
                "audit.core",
                "audit.db",
                "audit.ui",
                "audit.verify"
            ],
            "cut at {cut}"
        );
    }

    // replay: the whole record again, no model call
    let server = ScriptedLlm::start(vec![]).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    let report = engine_for(&server)
        .replay(Arc::new(piece), full, record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(server.requests().len(), 0, "replay calls no model");
    assert_eq!(report.state.history, ["plan", "audit", "supervise"]);
}

/// One team-leader step whose parts may fail: `fail_on_part_error` ends it with an error after
/// the leader has had its say, naming the part.
#[tokio::test]
async fn a_failed_part_with_fail_on_part_error_fails_the_step_naming_the_part() {
    let source = "\
name: split-work
max_steps: 3
initial_step: implement
steps:
  - name: implement
    persona: coder
    edit: false
    instruction: Implement the change.
    team_leader:
      max_concurrency: 2
      initial_max_parts: 2
      fail_on_part_error: true
      part_allowed_tools: [Read, Glob]
    rules:
      - condition: All parts completed
        next: COMPLETE
";
    let piece = maestro_piece::load_str(
        source,
        std::path::Path::new("split-work.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece;
    let turns = vec![
        Turn::when_contains(
            "decomposition-only planning",
            Turn::text(
                json!({"parts": [part("lib", "the library", "DO-LIB"), part("cli", "the cli", "DO-CLI")]})
                    .to_string(),
            ),
        ),
        Turn::when_contains("DO-LIB", Turn::text("library done")),
        // the cli part only looks around and never answers within its one model call
        Turn::when_contains("DO-CLI", Turn::tool_call("Glob", json!({"pattern": "**/*"}))),
        Turn::when_contains(
            "Review the completed parts",
            Turn::text(r#"{"done": true, "reasoning": "nothing more to plan", "parts": []}"#),
        ),
    ];
    let config = maestro_engine::EngineConfig {
        max_iterations_per_movement: 1,
        ..engine_config()
    };
    let ran = support::run_with(piece, turns, config, None).await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.requests().len(),
        4,
        "decomposition, two parts, one follow-up"
    );
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.contains(
            "team-leader step `implement`: a part failed and `fail_on_part_error` is set (cli: it used up its model calls before it answered)"
        ),
        "{reason}"
    );
    let parts: Vec<(String, String)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                parent: Some(_),
                ..
            } => Some((movement.clone(), next.clone())),
            _ => None,
        })
        .collect();
    assert!(
        parts.contains(&("implement.lib".into(), "done".into())),
        "{parts:?}"
    );
    assert!(
        parts.contains(&("implement.cli".into(), "failed".into())),
        "{parts:?}"
    );
}
