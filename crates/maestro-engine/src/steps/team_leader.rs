//! TAKT `team_leader` steps: a leader splits the step's task into parts at run time, the parts
//! run as sub-movements of the step (`<step>.<id>`, at most `max_concurrency` at once), and after
//! each batch the leader decides whether another batch is needed. The step's rules then read the
//! combined answer (the plan and every part's answer), as TAKT builds it.
//!
//! Every decision comes from the record: the leader's answers are model calls under the step's
//! own name, each plan is recorded as `team_leader_planned`, and each part's calls under its
//! sub-movement's name, so a resumed run reuses them all and a replay calls the model for none.

use std::collections::BTreeSet;
use std::sync::Arc;

use maestro_llm::Message;
use maestro_piece::{Facet, Movement, SessionMode, StepKind};
use maestro_protocol::TeamPart;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::agent::{Agent, TurnEnd};
use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::{EngineError, InternalError};
use crate::event::{OutcomeSource, RunEvent};
use crate::movement::{Ended, Step};
use crate::prompt::{self, Visit};
use crate::state::RunState;

/// What a part's sub-movement records as its `next` when it answered.
const PART_DONE: &str = "done";
/// … and when it ended without an answer.
const PART_FAILED: &str = "failed";
/// How much of a part's answer the leader's follow-up question quotes.
const FEEDBACK_CHARS: usize = 2000;

/// The step's `team_leader` block, with TAKT's defaults.
#[derive(Debug, Clone)]
struct Config {
    max_concurrency: usize,
    initial_max_parts: Option<usize>,
    fail_on_part_error: bool,
    inspect_tools: Vec<String>,
    leader_persona: Option<Facet>,
    part_persona: Option<Facet>,
    part_edit: Option<bool>,
    part_allowed_tools: Option<Vec<String>>,
}

impl Config {
    fn read(definition: &Value) -> Config {
        let t = &definition["team_leader"];
        let facet = |key: &str| serde_json::from_value::<Facet>(t[key].clone()).ok();
        let list = |key: &str| {
            t[key].as_array().map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
        };
        let inspect_tools = list("inspect_tools")
            .map(|tools| tools.iter().map(|t| tool_name(t)).collect())
            .unwrap_or_else(|| vec!["Read".into(), "Glob".into(), "Grep".into()]);
        Config {
            max_concurrency: t["max_concurrency"]
                .as_u64()
                .or_else(|| t["max_parts"].as_u64())
                .unwrap_or(3)
                .clamp(1, 3) as usize,
            initial_max_parts: t["initial_max_parts"].as_u64().map(|n| n as usize),
            fail_on_part_error: t["fail_on_part_error"].as_bool().unwrap_or(false),
            inspect_tools,
            leader_persona: facet("persona_facet"),
            part_persona: facet("part_persona_facet"),
            part_edit: t["part_edit"].as_bool(),
            part_allowed_tools: list("part_allowed_tools"),
        }
    }
}

/// `read` → `Read`: TAKT's inspection tools by their names here.
fn tool_name(name: &str) -> String {
    match name.to_ascii_lowercase().as_str() {
        "read" => "Read".into(),
        "glob" => "Glob".into(),
        "grep" => "Grep".into(),
        _ => name.to_string(),
    }
}

/// A part's end.
#[derive(Debug, Clone)]
struct PartResult {
    part: TeamPart,
    /// The part's answer, or why it has none.
    outcome: Result<String, String>,
}

/// Runs the step up to its end (the caller records `movement_finished`).
pub(super) async fn run(
    run: &Arc<RunCtx>,
    step: &Movement,
    definition: &Value,
) -> Result<Ended, EngineError> {
    let state = super::start(run, step)?;
    let config = Config::read(definition);
    let visit = |movement| Visit {
        movement,
        cycle_count: 0,
        loop_warning: None,
        report_dir: run.record.reports_dir().display().to_string(),
        max_carried_chars: run.config.max_carried_chars,
        review_scope: None,
    };
    let leader = leader_movement(step, &config);
    let first = prompt::first_messages(&run.piece, &state, &visit(&leader));
    let task = first.user.clone();

    // The first batch: the decomposition.
    let mut planned: Vec<TeamPart> = Vec::new();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    let ask = decompose_prompt(&task, config.initial_max_parts, &config.inspect_tools);
    let parts = match ask_leader(run, &leader, &first.system, ask, |text| {
        parse_parts(text, config.initial_max_parts)
    })
    .await?
    {
        Ok(parts) => parts,
        Err(problem) => {
            return Ok(super::failed(
                String::new(),
                EndReason::PieceError(format!(
                    "team-leader step `{}`: the leader's decomposition is unusable: {problem}",
                    step.name
                )),
            ));
        }
    };
    run.emit(RunEvent::TeamLeaderPlanned {
        movement: step.name.clone(),
        batch: 1,
        parts: parts.clone(),
        done: false,
        reasoning: None,
    })
    .await?;
    let mut batch = parts;
    let mut results: Vec<PartResult> = Vec::new();
    let mut number = 1;
    loop {
        ids.extend(batch.iter().map(|p| p.id.clone()));
        planned.extend(batch.iter().cloned());
        results.extend(run_batch(run, step, &config, &batch).await?);
        // The leader decides whether more work is needed, from every part's result.
        let ask = more_parts_prompt(&task, &results, &ids, &config.inspect_tools);
        let answer = ask_leader(run, &leader, &first.system, ask, parse_more).await?;
        number += 1;
        let (done, reasoning, new) = match answer {
            Ok((done, reasoning, parts)) => {
                let new: Vec<TeamPart> = if done {
                    Vec::new()
                } else {
                    parts.into_iter().filter(|p| !ids.contains(&p.id)).collect()
                };
                (done || new.is_empty(), Some(reasoning), new)
            }
            // TAKT stops planning when the follow-up fails; so does this.
            Err(problem) => (
                true,
                Some(format!("the leader's answer is unusable: {problem}")),
                vec![],
            ),
        };
        run.emit(RunEvent::TeamLeaderPlanned {
            movement: step.name.clone(),
            batch: number,
            parts: new.clone(),
            done,
            reasoning,
        })
        .await?;
        if done {
            break;
        }
        batch = new;
    }

    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.outcome
                .as_ref()
                .err()
                .map(|e| format!("{}: {e}", r.part.id))
        })
        .collect();
    if !failures.is_empty() && (failures.len() == results.len() || config.fail_on_part_error) {
        let what = if failures.len() == results.len() {
            "every part failed"
        } else {
            "a part failed and `fail_on_part_error` is set"
        };
        return Ok(super::failed(
            combined(&planned, &results),
            EndReason::PieceError(format!(
                "team-leader step `{}`: {what} ({})",
                step.name,
                failures.join("; ")
            )),
        ));
    }
    let response = combined(&planned, &results);
    write_reports(run, step, &response).await?;
    super::route(run, step, response).await
}

/// The leader's movement: the step with its leader persona, inspection tools only, no edits
/// and no reports of its own.
fn leader_movement(step: &Movement, config: &Config) -> Movement {
    Movement {
        persona: config
            .leader_persona
            .clone()
            .or_else(|| step.persona.clone()),
        edit: false,
        allowed_tools: config.inspect_tools.clone(),
        allowed_commands: None,
        allowed_ssh_connections: None,
        output_contracts: vec![],
        quality_gates: vec![],
        rules: vec![],
        parallel: vec![],
        kind: StepKind::Agent,
        ..step.clone()
    }
}

/// A part's movement: `<step>.<id>`, with the part persona, the part's instruction, the step's
/// policies and knowledge, and the part's tools.
fn part_movement(step: &Movement, config: &Config, part: &TeamPart) -> Movement {
    Movement {
        name: format!("{}.{}", step.name, part.id),
        persona: config.part_persona.clone().or_else(|| step.persona.clone()),
        instruction: Some(Facet {
            name: part.title.clone(),
            text: part.instruction.clone(),
            path: None,
        }),
        edit: config.part_edit.unwrap_or(step.edit),
        allowed_tools: config
            .part_allowed_tools
            .clone()
            .unwrap_or_else(|| step.allowed_tools.clone()),
        rules: vec![],
        default_next: None,
        pass_previous_response: false,
        session: SessionMode::Refresh,
        output_contracts: vec![],
        quality_gates: vec![],
        parallel: vec![],
        frontmatter_schema: None,
        kind: StepKind::Agent,
        ..step.clone()
    }
}

/// One leader question in a fresh conversation, its answer read by `parse`; an answer `parse`
/// rejects is asked for once more in the same conversation, told why (as TAKT regenerates a
/// rejected decomposition). `Ok(Err(_))`: still unusable.
async fn ask_leader<T>(
    run: &RunCtx,
    leader: &Movement,
    system: &str,
    question: String,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Result<T, String>, EngineError> {
    let messages = vec![
        Message::System {
            content: system.to_string(),
        },
        Message::user(question),
    ];
    let mut agent = Agent::new(run, leader, messages);
    let mut problem = String::new();
    for attempt in 0..2 {
        if attempt > 0 {
            agent.messages.push(Message::user(format!(
                "Your answer was rejected: {problem}. Answer again with the JSON object only, fixing that."
            )));
        }
        let text = match agent.drive().await? {
            TurnEnd::Answer(text) => text,
            other => {
                return Ok(Err(format!(
                    "the leader ended without an answer ({other:?})"
                )));
            }
        };
        // Read as recorded (secrets removed), so a resumed run plans exactly the same parts.
        match parse(&run.redact(&text)) {
            Ok(value) => return Ok(Ok(value)),
            Err(e) => problem = e,
        }
    }
    Ok(Err(problem))
}

/// The parts of one batch, at most `max_concurrency` at once; their results in plan order.
async fn run_batch(
    run: &Arc<RunCtx>,
    step: &Movement,
    config: &Config,
    batch: &[TeamPart],
) -> Result<Vec<PartResult>, EngineError> {
    let limit = Arc::new(Semaphore::new(config.max_concurrency));
    let shared = Arc::new((step.clone(), config.clone()));
    let mut tasks = JoinSet::new();
    for (index, part) in batch.iter().cloned().enumerate() {
        let run = Arc::clone(run);
        let limit = Arc::clone(&limit);
        let shared = Arc::clone(&shared);
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await.ok();
            let (step, config) = &*shared;
            (index, run_part(&run, step, config, &part).await)
        });
    }
    let mut results: Vec<Option<PartResult>> = vec![None; batch.len()];
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Ok(result))) => results[index] = Some(result),
            Ok((_, Err(e))) => {
                failure.get_or_insert(e);
            }
            Err(e) => {
                failure.get_or_insert(EngineError::from(InternalError::SubMovementCrashed {
                    parent: step.name.clone(),
                    source: e,
                }));
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(results.into_iter().flatten().collect())
}

/// Runs one part as a sub-movement of `step` and records its start and end.
async fn run_part(
    run: &RunCtx,
    step: &Movement,
    config: &Config,
    part: &TeamPart,
) -> Result<PartResult, EngineError> {
    let movement = part_movement(step, config, part);
    let state = run.journal.state();
    let mut started = RunEvent::MovementStarted {
        movement: movement.name.clone(),
        iteration: state.iteration,
        movement_iteration: state.visits_of(&movement.name) + 1,
        parent: Some(step.name.clone()),
        prompt_log: None,
    };
    let mut preview: RunState = state;
    preview.apply(&started);
    let first = prompt::first_messages(
        &run.piece,
        &preview,
        &Visit {
            movement: &movement,
            cycle_count: 0,
            loop_warning: None,
            report_dir: run.record.reports_dir().display().to_string(),
            max_carried_chars: run.config.max_carried_chars,
            review_scope: None,
        },
    );
    if let RunEvent::MovementStarted { prompt_log, .. } = &mut started {
        *prompt_log = crate::runner::write_prompt_log(run, &preview, &movement, &first).await?;
    }
    run.emit_queued(started)?;
    let messages = vec![
        Message::System {
            content: first.system,
        },
        Message::user(first.user),
    ];
    let mut agent = Agent::new(run, &movement, messages);
    let (outcome, reason) = match agent.drive().await? {
        TurnEnd::Answer(text) => (Ok(text), None),
        TurnEnd::ContextExhausted => (
            Err("the context window filled up before it answered".to_string()),
            Some(EndReason::ContextExhausted),
        ),
        TurnEnd::IterationsExhausted => (
            Err("it used up its model calls before it answered".to_string()),
            Some(EndReason::MaxIterations),
        ),
        TurnEnd::Transition { .. } | TurnEnd::Complete { .. } => (
            Err("it ended through a control tool instead of answering".to_string()),
            None,
        ),
    };
    let transcript =
        crate::runner::write_transcript(run, &preview, &movement, &agent.messages).await?;
    let ended = Ended {
        response: outcome.clone().unwrap_or_default(),
        via: OutcomeSource::Engine,
        rule: None,
        step: Step::Matched(
            if outcome.is_ok() {
                PART_DONE
            } else {
                PART_FAILED
            }
            .into(),
        ),
        summary: None,
        lessons: vec![],
        edge_prompt: None,
        reason,
    };
    crate::runner::record_finished(run, &movement, Some(&step.name), &ended, transcript).await?;
    Ok(PartResult {
        part: part.clone(),
        outcome,
    })
}

/// The step's answer: the plan, then each part's answer (TAKT's layout).
fn combined(planned: &[TeamPart], results: &[PartResult]) -> String {
    let plan = serde_json::to_string_pretty(&json!({ "parts": planned })).unwrap_or_default();
    std::iter::once(format!("## decomposition\n{plan}"))
        .chain(results.iter().map(|r| {
            let body = match &r.outcome {
                Ok(text) => text.clone(),
                Err(error) => format!("[ERROR] {error}"),
            };
            format!("## {}: {}\n{body}", r.part.id, r.part.title)
        }))
        .collect::<Vec<_>>()
        .join("\n\n---\n\n")
}

/// The step's declared reports hold its combined answer (the leader writes none itself).
async fn write_reports(run: &RunCtx, step: &Movement, response: &str) -> Result<(), EngineError> {
    for contract in &step.output_contracts {
        let path = run.record.reports_dir().join(&contract.name);
        match std::fs::write(&path, response) {
            Ok(()) => {
                run.emit(RunEvent::ReportWritten {
                    movement: step.name.clone(),
                    name: contract.name.clone(),
                    path: path.display().to_string(),
                    bytes: response.len(),
                })
                .await?
            }
            Err(e) => {
                run.emit(RunEvent::Warning {
                    movement: Some(step.name.clone()),
                    message: format!("cannot write the report {}: {e}", path.display()),
                })
                .await?
            }
        }
    }
    Ok(())
}

fn tool_guidance(inspect_tools: &[String]) -> String {
    if inspect_tools.is_empty() {
        "- Do not use any tool".into()
    } else {
        format!(
            "- You may use the read-only tools ({}) only to inspect the task, earlier reports and the file layout\n\
             - Do not edit files, run commands or carry out the task yourself",
            inspect_tools.join(", ")
        )
    }
}

fn decompose_prompt(task: &str, max: Option<usize>, inspect_tools: &[String]) -> String {
    let limit = max
        .map(|n| format!("- Produce between 1 and {n} parts in this first batch\n"))
        .unwrap_or_default();
    format!(
        "This is decomposition-only planning. Do not execute the task.\n\
         {}\n\
         - Return at least one part; if the work should not be split, one part carrying the whole task\n\
         {limit}\
         - Parts of one batch run at the same time: each must be independently executable and self-contained\n\
         - Look first for responsibility boundaries that can run in parallel\n\
         - Put verification that needs the results in a later batch, not in this one\n\
         - Keep work that shares a contract in one part\n\n\
         Answer with one JSON object only: {{\"parts\": [{{\"id\": \"…\", \"title\": \"…\", \"instruction\": \"…\"}}]}} \
         (ids unique; each instruction complete on its own).\n\n\
         ## Original Task\n{task}",
        tool_guidance(inspect_tools)
    )
}

fn more_parts_prompt(
    task: &str,
    results: &[PartResult],
    ids: &BTreeSet<String>,
    inspect_tools: &[String],
) -> String {
    let done: Vec<String> = results
        .iter()
        .map(|r| {
            let (status, text) = match &r.outcome {
                Ok(text) => ("done", head(text, FEEDBACK_CHARS)),
                Err(error) => ("error", format!("[ERROR] {error}")),
            };
            format!("### {}: {} ({status})\n{text}", r.part.id, r.part.title)
        })
        .collect();
    let existing = ids.iter().cloned().collect::<Vec<_>>().join(", ");
    format!(
        "Review the completed parts and decide whether additional parts are needed.\n\
         {}\n\n\
         ## Original Task\n{task}\n\n\
         ## Completed Parts\n{}\n\n\
         ## Decision Rules\n\
         - Set done=true when no additional work is required\n\
         - If more work is needed, give the new parts in \"parts\" (several at once when several are missing)\n\
         - Preserve the existing changes; put only unfinished work into new parts\n\
         - Parts of one batch must not depend on each other\n\
         - Do not reuse existing ids: {existing}\n\n\
         Answer with one JSON object only: {{\"done\": true or false, \"reasoning\": \"…\", \"parts\": [{{\"id\": \"…\", \"title\": \"…\", \"instruction\": \"…\"}}]}}",
        tool_guidance(inspect_tools),
        done.join("\n\n")
    )
}

fn head(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}\n[… the rest of this part's answer is omitted]")
}

/// The JSON value of an answer: an object (`{…}`), or the last ```json block (TAKT's
/// prompt-based form, where the parts may be a bare array).
fn answer_json(text: &str) -> Option<Value> {
    if let Some(block) = text
        .rsplit("```json")
        .next()
        .filter(|_| text.contains("```json"))
        && let Some(end) = block.find("```")
        && let Ok(value) = serde_json::from_str(block[..end].trim())
    {
        return Some(value);
    }
    crate::judge::parse_json_object(text)
}

fn parse_part_list(value: &Value) -> Result<Vec<TeamPart>, String> {
    let Some(items) = value.as_array() else {
        return Err("`parts` must be an array".into());
    };
    let mut seen = BTreeSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let field = |key: &str| {
                item[key]
                    .as_str()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| format!("part {} has no `{key}` text", i + 1))
            };
            let part = TeamPart {
                id: field("id")?,
                title: field("title")?,
                instruction: field("instruction")?,
            };
            if part.id.contains(['/', '\\']) || !seen.insert(part.id.clone()) {
                return Err(format!(
                    "part id `{}` is repeated or contains a slash",
                    part.id
                ));
            }
            Ok(part)
        })
        .collect()
}

fn parse_parts(text: &str, max: Option<usize>) -> Result<Vec<TeamPart>, String> {
    let value = answer_json(text).ok_or("the answer holds no JSON object")?;
    let list = if value.is_array() {
        &value
    } else {
        &value["parts"]
    };
    let parts = parse_part_list(list)?;
    if parts.is_empty() {
        return Err("`parts` is empty; return at least one part".into());
    }
    if let Some(max) = max
        && parts.len() > max
    {
        return Err(format!(
            "{} parts, more than `initial_max_parts` ({max})",
            parts.len()
        ));
    }
    Ok(parts)
}

fn parse_more(text: &str) -> Result<(bool, String, Vec<TeamPart>), String> {
    let value = answer_json(text).ok_or("the answer holds no JSON object")?;
    let done = value["done"]
        .as_bool()
        .ok_or("`done` must be true or false")?;
    let reasoning = value["reasoning"].as_str().unwrap_or_default().to_string();
    let parts = match &value["parts"] {
        Value::Null => Vec::new(),
        list => parse_part_list(list)?,
    };
    Ok((done, reasoning, parts))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_read_from_an_object_or_a_json_block() {
        let object = r#"Plan: {"parts": [{"id": "a", "title": "A", "instruction": "do a"}]}"#;
        assert_eq!(parse_parts(object, None).unwrap()[0].id, "a");
        let block = "```json\n[{\"id\": \"b\", \"title\": \"B\", \"instruction\": \"do b\"}]\n```";
        assert_eq!(parse_parts(block, Some(1)).unwrap()[0].id, "b");
    }

    #[test]
    fn a_bad_decomposition_says_what_is_wrong() {
        let two = r#"{"parts": [{"id": "a", "title": "A", "instruction": "x"}, {"id": "a", "title": "B", "instruction": "y"}]}"#;
        assert!(
            parse_parts(two, None)
                .unwrap_err()
                .contains("`a` is repeated")
        );
        assert!(parse_parts(two, Some(1)).is_err());
        assert!(
            parse_parts(r#"{"parts": []}"#, None)
                .unwrap_err()
                .contains("empty")
        );
        assert!(
            parse_more(r#"{"parts": []}"#)
                .unwrap_err()
                .contains("`done`")
        );
    }
}
