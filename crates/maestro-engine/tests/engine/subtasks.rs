//! `SpawnSubTask` and `WAIT_SUBTASKS` at the engine's boundary with the job system: a run
//! spawns children through its host, parks while they run, and goes on in the same movement
//! and conversation once they ended, told each child's title, status, result and workspace.
//! The host here keeps its children in memory; the store-backed host is tested in
//! `maestro-app` and through the `maestro` binary.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use maestro_engine::{
    Engine, EventRecord, HostFuture, JsonlLog, RunEnd, RunEvent, RunRecord, RunSpec, SpawnRequest,
    SpawnedSubtask, SubtaskError, SubtaskHost, SubtaskOutcome, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{Dialect, Piece};
use maestro_protocol::RunStatus;
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::json;
use support::*;

/// Children in memory: spawned by key, ended when the test says so.
#[derive(Default)]
struct Host {
    spawned: Mutex<Vec<(SpawnRequest, SpawnedSubtask)>>,
    ended: Mutex<BTreeMap<String, (String, String)>>,
    max_children: usize,
}

impl Host {
    fn new(max_children: usize) -> Arc<Host> {
        Arc::new(Host {
            max_children,
            ..Host::default()
        })
    }

    fn end_all(&self, status: &str) {
        let spawned = self.spawned.lock().unwrap().clone();
        let mut ended = self.ended.lock().unwrap();
        for (request, child) in spawned {
            ended.insert(
                child.id.clone(),
                (status.to_string(), format!("result of {}", request.task)),
            );
        }
    }

    fn keys(&self) -> Vec<String> {
        self.spawned
            .lock()
            .unwrap()
            .iter()
            .map(|(r, _)| r.key.clone())
            .collect()
    }
}

impl SubtaskHost for Host {
    fn spawn(&self, request: SpawnRequest) -> HostFuture<'_, SpawnedSubtask> {
        Box::pin(async move {
            let mut spawned = self.spawned.lock().unwrap();
            if let Some((_, child)) = spawned.iter().find(|(r, _)| r.key == request.key) {
                return Ok(child.clone());
            }
            if spawned.len() >= self.max_children {
                return Err(SubtaskError::Refused(format!(
                    "this run already has {} subtasks, the most it may have",
                    spawned.len()
                )));
            }
            let index = spawned.len() as i64 + 1;
            let child = SpawnedSubtask {
                id: format!("child-{index}"),
                index,
                title: request.title.clone(),
                workspace: format!("subtasks/{index}/"),
            };
            spawned.push((request, child.clone()));
            Ok(child)
        })
    }

    fn ended<'a>(&'a self, ids: &'a [String]) -> HostFuture<'a, Option<Vec<SubtaskOutcome>>> {
        Box::pin(async move {
            let spawned = self.spawned.lock().unwrap();
            let ended = self.ended.lock().unwrap();
            let mut outcomes = Vec::new();
            for id in ids {
                let Some((status, result)) = ended.get(id) else {
                    return Ok(None);
                };
                let (_, child) = spawned.iter().find(|(_, c)| &c.id == id).unwrap();
                outcomes.push(SubtaskOutcome {
                    id: id.clone(),
                    index: child.index,
                    title: child.title.clone(),
                    status: status.clone(),
                    result: result.clone(),
                    workspace: child.workspace.clone(),
                });
            }
            Ok(Some(outcomes))
        })
    }
}

/// plan spawns subtasks and waits for them, then completes.
fn splitting_piece() -> Piece {
    let mut plan = mv(
        "plan",
        vec![
            rule("the parts are spawned", "WAIT_SUBTASKS"),
            rule("nothing to split", "write"),
        ],
    );
    plan.allowed_tools = vec!["SpawnSubTask".into(), "Read".into()];
    plan.default_next = Some(target("write"));
    piece(
        Dialect::Maestro,
        vec![plan, mv("write", vec![rule("written", "COMPLETE")])],
    )
}

fn spawn_three() -> Turn {
    Turn::tool_calls([
        (
            "SpawnSubTask",
            json!({"task": "Research the history of tea", "title": "history"}),
        ),
        (
            "SpawnSubTask",
            json!({"task": "Research tea chemistry", "title": "chemistry", "piece": "research"}),
        ),
        (
            "SpawnSubTask",
            json!({"task": "List tea regions\nin detail"}),
        ),
    ])
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
    piece: &Piece,
    record: &RunRecord,
    host: Option<Arc<Host>>,
) -> (RunEnd, Vec<EventRecord>) {
    let history = read_events(&record.events_path()).unwrap_or_default();
    let log = JsonlLog::rewrite(&record.events_path(), &history).unwrap();
    let mut spec = RunSpec::new(Arc::new(piece.clone()), "Write about tea.", record.clone());
    spec.logs = vec![Arc::new(log)];
    spec.history = history;
    spec.subtasks = host.map(|h| h as Arc<dyn SubtaskHost>);
    let end = engine(server).run_spec(spec).await.unwrap();
    (end, read_events(&record.events_path()).unwrap())
}

fn status_of(end: &RunEnd) -> RunStatus {
    match end {
        RunEnd::Finished(report) => report.status,
        other => panic!("expected an end, got {other:?}"),
    }
}

#[tokio::test]
async fn a_run_parks_on_its_subtasks_and_goes_on_in_the_same_conversation() {
    let server = ScriptedLlm::start([
        spawn_three(),
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
        Turn::tool_call("transition", json!({"next": "write"})),
        Turn::tool_call(
            "complete",
            json!({"status": "success", "result": "Tea, in three parts."}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let host = Host::new(5);
    let piece = splitting_piece();

    let (end, events) = run_once(&server, &piece, &record, Some(host.clone())).await;
    assert_eq!(status_of(&end), RunStatus::WaitingSubtasks);
    assert_eq!(server.requests().len(), 2);
    // The first request offers the tool; its schema comes from the typed arguments.
    let offered = &server.requests()[0]["tools"];
    let spawn = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "SpawnSubTask")
        .expect("SpawnSubTask offered");
    assert_eq!(spawn["function"]["parameters"]["required"], json!(["task"]));
    let spawned = host.spawned.lock().unwrap().clone();
    let titles: Vec<(&str, Option<&str>)> = spawned
        .iter()
        .map(|(r, c)| (c.title.as_str(), r.piece.as_deref()))
        .collect();
    assert_eq!(
        titles,
        vec![
            ("history", None),
            ("chemistry", Some("research")),
            ("List tea regions", None)
        ]
    );
    assert!(matches!(
        events.last().map(|r| &r.event),
        Some(RunEvent::RunFinished {
            status: RunStatus::WaitingSubtasks,
            ..
        })
    ));

    // Still running: resuming parks again without a model call.
    let (end, _) = run_once(&server, &piece, &record, Some(host.clone())).await;
    assert_eq!(status_of(&end), RunStatus::WaitingSubtasks);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(host.spawned.lock().unwrap().len(), 3, "no spawn repeated");

    host.end_all("completed");
    let (end, events) = run_once(&server, &piece, &record, Some(host.clone())).await;
    assert_eq!(status_of(&end), RunStatus::Completed);
    assert_eq!(
        server.requests().len(),
        4,
        "only the two new turns were asked"
    );
    // The third request goes on with plan's conversation: the spawns, the wait, then the
    // children's ends as the next user message.
    let third = &server.requests()[2];
    let told = last_user_text(third);
    for needle in [
        "Your 3 subtasks have ended",
        "## Subtask 1: history",
        "result of Research the history of tea",
        "## Subtask 2: chemistry",
        "## Subtask 3: List tea regions",
        "- workspace: subtasks/3/",
        "- status: completed",
    ] {
        assert!(told.contains(needle), "{needle} missing from {told}");
    }
    let roles: Vec<&str> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        vec![
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "tool",
            "assistant",
            "tool",
            "user"
        ]
    );
    let kinds: Vec<&str> = events.iter().map(|r| r.event.kind()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "subtasks_ended").count(), 1);
    let seqs: Vec<u64> = events.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let state = maestro_engine::RunState::replay(&events);
    assert!(state.pending_subtasks().is_empty());
    assert_eq!(state.subtasks.len(), 3);
    // Every spawn has its own key: the movement, its visit, the turn and the call.
    let keys = host.keys();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| k.starts_with("plan/1/1/")), "{keys:?}");

    // A replay of the whole run (park, wait and all) needs no model and no host.
    let scratch = RunRecord::create(&dir.path().join("replay"), None).unwrap();
    let replayed = engine(&server)
        .replay(Arc::new(piece), events, scratch)
        .await
        .unwrap();
    assert_eq!(replayed.status, RunStatus::Completed);
    assert_eq!(server.requests().len(), 4, "the replay asked nothing");
    assert_eq!(host.spawned.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn children_that_ended_already_do_not_park_the_run() {
    let server = ScriptedLlm::start([
        spawn_three(),
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
        Turn::tool_call("transition", json!({"next": "write"})),
        Turn::tool_call("complete", json!({"status": "success", "result": "Done."})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let host = Host::new(5);
    // A host that runs its children itself reports them ended by the time the run waits.
    let eager = Arc::new(EagerHost(host.clone()));
    let history = Vec::new();
    let log = JsonlLog::rewrite(&record.events_path(), &history).unwrap();
    let mut spec = RunSpec::new(
        Arc::new(splitting_piece()),
        "Write about tea.",
        record.clone(),
    );
    spec.logs = vec![Arc::new(log)];
    spec.subtasks = Some(eager);
    let end = engine(&server).run_spec(spec).await.unwrap();
    assert_eq!(status_of(&end), RunStatus::Completed);
    let events = read_events(&record.events_path()).unwrap();
    assert!(
        !events.iter().any(|r| matches!(
            r.event,
            RunEvent::RunFinished {
                status: RunStatus::WaitingSubtasks,
                ..
            }
        )),
        "no park"
    );
    assert!(last_user_text(&server.requests()[2]).contains("Your 3 subtasks have ended"));
}

/// Ends every child the moment the run asks.
struct EagerHost(Arc<Host>);

impl SubtaskHost for EagerHost {
    fn spawn(&self, request: SpawnRequest) -> HostFuture<'_, SpawnedSubtask> {
        self.0.spawn(request)
    }

    fn ended<'a>(&'a self, ids: &'a [String]) -> HostFuture<'a, Option<Vec<SubtaskOutcome>>> {
        self.0.end_all("completed");
        self.0.ended(ids)
    }
}

#[tokio::test]
async fn a_refused_spawn_is_a_tool_error_the_model_sees() {
    let server = ScriptedLlm::start([
        spawn_three(),
        Turn::tool_call("SpawnSubTask", json!({"task": ""})),
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
        Turn::tool_call("complete", json!({"status": "success", "result": "Done."})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let host = Host::new(2);
    let piece = splitting_piece();
    let (end, events) = run_once(&server, &piece, &record, Some(host.clone())).await;
    assert_eq!(status_of(&end), RunStatus::WaitingSubtasks);
    let results: Vec<(bool, String)> = events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ToolResult {
                tool, ok, output, ..
            } if tool == "SpawnSubTask" => Some((*ok, output.clone().unwrap_or_default())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(results[0].0 && results[1].0);
    assert!(!results[2].0);
    assert!(
        results[2].1.contains("already has 2 subtasks"),
        "{}",
        results[2].1
    );
    assert!(!results[3].0);
    assert!(results[3].1.contains("`task` is empty"), "{}", results[3].1);
    // The model saw both errors in its next request.
    let second = messages_text(&server.requests()[1]);
    assert!(
        second.contains("error: this run already has 2 subtasks"),
        "{second}"
    );
    assert_eq!(host.spawned.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn without_a_host_the_tool_is_not_offered_and_the_wait_falls_back() {
    let server = ScriptedLlm::start([
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
        Turn::tool_call("complete", json!({"status": "success", "result": "Alone."})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let (end, events) = run_once(&server, &splitting_piece(), &record, None).await;
    assert_eq!(status_of(&end), RunStatus::Completed);
    let offered = server.requests()[0]["tools"].to_string();
    assert!(!offered.contains("SpawnSubTask"), "{offered}");
    assert!(events.iter().any(|r| matches!(
        &r.event,
        RunEvent::Warning { message, .. }
            if message.starts_with("subtasks are not available to this run: WAIT_SUBTASKS takes default_next `write`")
    )));
}

#[tokio::test]
async fn a_wait_with_nothing_spawned_takes_default_next() {
    let server = ScriptedLlm::start([
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
        Turn::tool_call("complete", json!({"status": "success", "result": "Alone."})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let (end, events) = run_once(&server, &splitting_piece(), &record, Some(Host::new(3))).await;
    assert_eq!(status_of(&end), RunStatus::Completed);
    assert!(events.iter().any(|r| matches!(
        &r.event,
        RunEvent::Warning { message, .. } if message.starts_with("no subtask is running")
    )));
}
