//! How one visit of a movement ends, per dialect: maestro through control tools (with reminders),
//! takt through an answer and its rule, graph through frontmatter and its edge. The agent loop
//! does the talking; this module reads the turn's end and decides.

use maestro_llm::{Message, ResponseSchema};
use maestro_piece::{Dialect, Movement, Target};
use maestro_protocol::RunStatus;

use crate::agent::{Agent, TurnEnd};
use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::EngineError;
use crate::event::{OutcomeSource, ReminderKind, RunEvent};
use crate::outcome::{extract_frontmatter, route, validate_frontmatter};
use crate::prompt;

/// What a visit decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ended {
    /// The movement's answer, carried as `{previous_response}`.
    pub response: String,
    pub via: OutcomeSource,
    /// 1-based rule that decided, if one did.
    pub rule: Option<usize>,
    pub step: Step,
    pub summary: Option<String>,
    pub lessons: Vec<String>,
    pub edge_prompt: Option<String>,
    /// Why the engine, not the model, ended the visit (`max_iterations`, `context_exhausted`),
    /// also when `default_next` then carried the run on.
    pub reason: Option<EndReason>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    Go(Target),
    /// A parallel sub-movement matched this condition; its parent decides where to go.
    Matched(String),
    Finish {
        status: RunStatus,
        result: Option<String>,
        reason: Option<EndReason>,
    },
}

impl Ended {
    fn new(response: String, via: OutcomeSource, step: Step) -> Self {
        Ended {
            response,
            via,
            rule: None,
            step,
            summary: None,
            lessons: vec![],
            edge_prompt: None,
            reason: None,
        }
    }

    /// `default_next` when the movement has one, otherwise the run aborts with `reason`.
    fn fallback(movement: &Movement, response: String, reason: EndReason) -> Self {
        match &movement.default_next {
            Some(target) => Ended {
                reason: Some(reason),
                ..Ended::new(
                    response,
                    OutcomeSource::DefaultNext,
                    Step::Go(target.clone()),
                )
            },
            None => Ended {
                reason: Some(reason.clone()),
                ..Ended::new(
                    response,
                    OutcomeSource::Engine,
                    Step::Finish {
                        status: RunStatus::Aborted,
                        result: None,
                        reason: Some(reason),
                    },
                )
            },
        }
    }

    /// The run aborts: no rule matched the answer.
    pub(crate) fn no_rule_matched(response: String) -> Self {
        Ended::new(
            response,
            OutcomeSource::Engine,
            Step::Finish {
                status: RunStatus::Aborted,
                result: None,
                reason: Some(EndReason::NoRuleMatched),
            },
        )
    }

    /// A command quality gate failed: the movement goes round again with the failure as its
    /// answer.
    pub(crate) fn gate_failed(movement: &str, feedback: String) -> Self {
        Ended::new(
            feedback,
            OutcomeSource::QualityGate,
            Step::Go(Target::Movement(movement.to_string())),
        )
    }

    /// The step a chosen rule leads to.
    pub(crate) fn by_rule(
        movement: &Movement,
        response: String,
        via: OutcomeSource,
        index: usize,
    ) -> Self {
        let rule = &movement.rules[index - 1];
        let step = if rule.requires_user_input {
            Step::Finish {
                status: RunStatus::NeedsUserInput,
                result: None,
                reason: Some(EndReason::RequiresUserInput),
            }
        } else {
            match &rule.next {
                Some(target) => Step::Go(target.clone()),
                None => Step::Matched(crate::outcome::condition_text(&rule.condition)),
            }
        };
        Ended {
            rule: Some(index),
            ..Ended::new(response, via, step)
        }
    }
}

/// Runs one visit of a (non-parallel) movement in `messages` (the first ones, or a continued
/// session) and returns its decision and the conversation.
pub(crate) async fn visit(
    run: &RunCtx,
    movement: &Movement,
    messages: Vec<Message>,
) -> Result<(Ended, Vec<Message>), EngineError> {
    let mut agent = Agent::new(run, movement, messages);
    let ended = match run.piece.dialect {
        Dialect::Maestro => maestro(run, &mut agent, movement).await?,
        Dialect::Takt => takt(run, &mut agent, movement).await?,
        Dialect::Graph => graph(run, &mut agent, movement).await?,
    };
    Ok((ended, agent.messages))
}

fn last_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Assistant { content, .. } if !content.trim().is_empty() => {
                Some(content.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

async fn maestro(
    run: &RunCtx,
    agent: &mut Agent<'_>,
    movement: &Movement,
) -> Result<Ended, EngineError> {
    let mut reminders = 0;
    let mut resent = false;
    loop {
        let end = agent.drive().await?;
        let response = last_text(&agent.messages);
        return Ok(match end {
            TurnEnd::Answer(_) if agent.context_exhausted() => {
                Ended::fallback(movement, response, EndReason::ContextExhausted)
            }
            TurnEnd::Answer(_) if !resent && agent.resend_with_json_tools().await? => {
                resent = true;
                continue;
            }
            TurnEnd::Answer(_) if reminders < run.config.control_reminders => {
                reminders += 1;
                agent
                    .ask_again(
                        ReminderKind::ControlTool,
                        reminders,
                        prompt::CONTROL_REMINDER.to_string(),
                    )
                    .await?;
                continue;
            }
            TurnEnd::Answer(_) => Ended::fallback(movement, response, EndReason::NoControlOutcome),
            TurnEnd::Transition {
                next,
                summary,
                lessons,
            } => {
                let index = movement
                    .rules
                    .iter()
                    .position(|r| r.next.as_ref() == Some(&next));
                let mut ended = match index {
                    Some(i) => {
                        Ended::by_rule(movement, response, OutcomeSource::TransitionTool, i + 1)
                    }
                    None => Ended::new(response, OutcomeSource::TransitionTool, Step::Go(next)),
                };
                ended.summary = summary;
                ended.lessons = lessons;
                ended
            }
            TurnEnd::Complete { status, result } => {
                let reason = match status {
                    RunStatus::Completed => None,
                    _ => Some(EndReason::CompleteTool),
                };
                Ended::new(
                    response,
                    OutcomeSource::CompleteTool,
                    Step::Finish {
                        status,
                        result: Some(result),
                        reason,
                    },
                )
            }
            TurnEnd::ContextExhausted => {
                Ended::fallback(movement, response, EndReason::ContextExhausted)
            }
            TurnEnd::IterationsExhausted => {
                Ended::fallback(movement, response, EndReason::MaxIterations)
            }
        });
    }
}

/// The answer of a turn for the answer-ending dialects, or the fallback when the turn ran out.
fn answer_or_fallback(
    end: TurnEnd,
    agent: &Agent<'_>,
    movement: &Movement,
) -> Result<String, Box<Ended>> {
    match end {
        TurnEnd::Answer(text) => Ok(text),
        TurnEnd::ContextExhausted => Err(Box::new(Ended::fallback(
            movement,
            last_text(&agent.messages),
            EndReason::ContextExhausted,
        ))),
        TurnEnd::IterationsExhausted => Err(Box::new(Ended::fallback(
            movement,
            last_text(&agent.messages),
            EndReason::MaxIterations,
        ))),
        TurnEnd::Transition { .. } | TurnEnd::Complete { .. } => Ok(last_text(&agent.messages)),
    }
}

async fn takt(
    run: &RunCtx,
    agent: &mut Agent<'_>,
    movement: &Movement,
) -> Result<Ended, EngineError> {
    let mut end = agent.drive().await?;
    // A required report not written by a model that answered in plain text may be a model
    // that cannot call tools natively: under `tool_mode: auto` the turn goes again in JSON mode.
    if matches!(end, TurnEnd::Answer(_))
        && !agent.missing_reports().is_empty()
        && agent.reports_written.is_empty()
        && agent.resend_with_json_tools().await?
    {
        end = agent.drive().await?;
    }
    let answer = match answer_or_fallback(end, agent, movement) {
        Ok(answer) => answer,
        Err(ended) => return Ok(*ended),
    };
    let mut read = answer.clone();
    if agent.ask_for_missing_reports().await? {
        if let TurnEnd::Answer(more) = agent.drive().await? {
            read = format!("{answer}\n{more}");
        }
        let missing = agent.missing_reports();
        if !missing.is_empty() {
            run.emit(RunEvent::Warning {
                movement: Some(movement.name.clone()),
                message: format!("required report(s) not written: {}", missing.join(", ")),
            })
            .await?;
        }
    }
    if let Some(failed) = crate::steps::structured::capture(run, movement, &answer).await? {
        return Ok(failed);
    }
    let decided = crate::steps::rules::decide(run, movement, &read, None).await?;
    Ok(crate::steps::rules::ended(movement, answer, decided))
}

async fn graph(
    run: &RunCtx,
    agent: &mut Agent<'_>,
    movement: &Movement,
) -> Result<Ended, EngineError> {
    let mut attempt = 0;
    loop {
        let end = agent.drive().await?;
        let answer = match answer_or_fallback(end, agent, movement) {
            Ok(answer) => answer,
            Err(ended) => return Ok(*ended),
        };
        let checked = extract_frontmatter(&answer).and_then(|fm| {
            if let Some(schema) = &movement.frontmatter_schema {
                validate_frontmatter(schema, &fm)?;
            }
            Ok((route(movement, &fm)?, fm))
        });
        match checked {
            Ok((index, fm)) => {
                let mut ended = Ended::by_rule(movement, answer, OutcomeSource::Frontmatter, index);
                ended.edge_prompt = edge_prompt(run, movement, index, &fm).await?;
                return Ok(ended);
            }
            Err(problem) if attempt < run.config.frontmatter_retries => {
                attempt += 1;
                // The retry asks for the frontmatter fields as one JSON object constrained by
                // the role's schema, so a model that cannot write the format freely still
                // answers validly; `extract_frontmatter` accepts that form.
                let constrained = movement.frontmatter_schema.clone().is_some_and(|schema| {
                    agent.constrain_answer(ResponseSchema {
                        name: "frontmatter".into(),
                        schema,
                    })
                });
                let mut reminder = prompt::frontmatter_reminder(&problem.0);
                if constrained {
                    reminder.push_str(
                        "\nAnswer now with the frontmatter fields only, as one JSON object.",
                    );
                }
                agent
                    .ask_again(ReminderKind::Frontmatter, attempt, reminder)
                    .await?;
            }
            Err(problem) => {
                return Ok(Ended::new(
                    answer,
                    OutcomeSource::Engine,
                    Step::Finish {
                        status: RunStatus::Failed,
                        result: None,
                        reason: Some(EndReason::InvalidFrontmatter(problem.0)),
                    },
                ));
            }
        }
    }
}

async fn edge_prompt(
    run: &RunCtx,
    movement: &Movement,
    index: usize,
    fm: &serde_json::Value,
) -> Result<Option<String>, EngineError> {
    let Some(template) = &movement.rules[index - 1].prompt else {
        return Ok(None);
    };
    let empty = serde_json::Map::new();
    let fields = fm.as_object().unwrap_or(&empty);
    match maestro_piece::prompt::render_edge_prompt(template, fields) {
        Ok(text) => Ok(Some(text)),
        Err(e) => {
            run.emit(RunEvent::Warning {
                movement: Some(movement.name.clone()),
                message: format!("edge prompt not rendered ({e}); passing it as written"),
            })
            .await?;
            Ok(Some(template.clone()))
        }
    }
}
