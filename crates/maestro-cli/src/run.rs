//! `maestro run`: start a run of a task (or the resume of a stopped one) through the app's one
//! run path, show its progress from the run's live subscription, print the result (or, for a
//! run that did not complete, why it ended) and exit with the run's status.

use std::path::PathBuf;

use anyhow::{Context as _, anyhow};
use maestro_app::{
    Live, PoolSize, RunError, RunKind, RunOutcome, RunRequest, RunStatus, endpoint_unreachable,
    no_endpoint,
};
use std::io::Write as _;

use maestro_config::Config;
use maestro_protocol::ToolMode;

use crate::flags::{ConfigFlag, ModelFlags, Override, PiecesFlag, RunsFlag, StoreFlag, settings};
use crate::progress::Progress;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A piece file, a piece name found in the pieces directories, or `auto` (the default) to
    /// let the classifier choose.
    piece: Option<String>,
    /// The piece, as TAKT names it (`takt --workflow NAME`): the same as giving NAME as PIECE.
    #[arg(long, value_name = "NAME", conflicts_with = "piece")]
    workflow: Option<String>,
    /// The task to run; `-` reads it from standard input.
    #[arg(long, required_unless_present_any = ["resume", "task_file"], conflicts_with = "task_file")]
    task: Option<String>,
    /// Read the task from this file (for a task longer than a command line); `-` reads it
    /// from standard input.
    #[arg(long)]
    task_file: Option<PathBuf>,
    /// Continue the run (the job) with this id where it stopped: after Ctrl-C, a failure or
    /// kill -9. What its record holds is reused: no recorded model answer is asked again and no
    /// recorded tool call runs again.
    #[arg(long, conflicts_with_all = ["piece", "workflow", "task", "task_file", "workspace"])]
    resume: Option<String>,
    /// Work in this directory instead of the run directory's own workspace; an editing
    /// movement may then write anywhere inside it.
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Print the run's events to stdout (instead of progress lines on stderr).
    #[arg(long, value_enum)]
    events: Option<EventsFormat>,
    /// How tools are offered: native tool calls, JSON answers, or probe once (`llm.tool_mode`).
    #[arg(long, value_enum)]
    tool_mode: Option<ToolModeArg>,
    /// The model's context window in tokens (default: asked from the endpoint).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    context_length: Option<u64>,
    /// Model calls one movement may make before the engine ends it.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_iterations: Option<u32>,
    /// Cap on each answer's length in tokens.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: Option<u32>,
    /// The most US dollars this run and its subtasks may spend together (priced by
    /// `llm.models.<model>.price`); a model call that could pass it is not made and the run
    /// ends `exceeded` (reason `budget: max_cost_usd`). Kept with the job, so a resume keeps it.
    #[arg(long, value_parser = positive_usd)]
    max_cost_usd: Option<f64>,
    /// The most tokens this run and its subtasks may use together (`budget: max_total_tokens`
    /// past it).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_total_tokens: Option<u64>,
    /// Carried text (previous answers, knowledge, reports) longer than this many characters is
    /// cut in prompts, pointing to the full copy.
    #[arg(long)]
    max_carried_chars: Option<usize>,
    #[command(flatten)]
    store: StoreFlag,
    #[command(flatten)]
    model: ModelFlags,
    #[command(flatten)]
    pieces: PiecesFlag,
    #[command(flatten)]
    runs: RunsFlag,
    #[command(flatten)]
    config: ConfigFlag,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum EventsFormat {
    Jsonl,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ToolModeArg {
    Native,
    Json,
    Auto,
}

/// The engine settings only `maestro run` takes.
impl Override for Args {
    fn apply(&self, config: &mut Config) {
        if let Some(mode) = self.tool_mode {
            config.llm.tool_mode = match mode {
                ToolModeArg::Native => ToolMode::Native,
                ToolModeArg::Json => ToolMode::Json,
                ToolModeArg::Auto => ToolMode::Auto,
            };
        }
        if let Some(tokens) = self.context_length {
            config.llm.context_length = Some(tokens);
        }
        if let Some(n) = self.max_iterations {
            config.engine.max_iterations_per_movement = n;
        }
        if self.max_tokens.is_some() {
            config.engine.max_tokens = self.max_tokens;
        }
        if let Some(n) = self.max_carried_chars {
            config.engine.max_carried_chars = n;
        }
    }
}

/// `--max-cost-usd`: US dollars above 0.
fn positive_usd(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd > 0.0 => Ok(usd),
        _ => Err(format!(
            "`{text}` is not an amount of US dollars above 0; give e.g. 2.5"
        )),
    }
}

/// Resolves to true on SIGINT (Ctrl-C) or SIGTERM (what `kill`, systemd and container runtimes
/// send), so that either ends the run as `cancelled` with its `run_finished` recorded. The
/// handlers are installed before it returns, so a signal arriving right after is not lost.
fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = bool> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            got = terminate.recv() => got.is_some(),
            got = interrupt.recv() => got.is_some(),
        }
    })
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    crate::common::block_on(run_async(args))
}

/// The task as given: the flag's text, standard input for `-`, or a file's text.
pub(crate) fn task_text(
    task: Option<&str>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let stdin = task == Some("-") || file.is_some_and(|f| f == std::path::Path::new("-"));
    let text = match (task, file) {
        _ if stdin => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("reading the task from standard input")?;
            text
        }
        (Some(task), _) => task.to_string(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the task from {}", path.display()))?,
        (None, None) => return Err(anyhow!("--task is required")),
    };
    if text.trim().is_empty() {
        return Err(anyhow!(
            "the task is empty; say what the run should do with --task \"…\", --task - (standard \
             input) or --task-file FILE"
        ));
    }
    Ok(text)
}

async fn run_async(args: Args) -> anyhow::Result<u8> {
    let config = settings(
        &args.config,
        &[&args.pieces, &args.runs, &args.model, &args],
    )?;
    let kind = match &args.resume {
        Some(id) => RunKind::Resume { id: id.clone() },
        None => RunKind::New {
            piece: args
                .piece
                .clone()
                .or_else(|| args.workflow.clone())
                .unwrap_or_else(|| maestro_app::AUTO.to_string()),
            task: task_text(args.task.as_deref(), args.task_file.as_deref())?,
            workspace: args.workspace.clone(),
            submitted_by: whoami(),
            budget: maestro_config::BudgetSettings {
                max_total_tokens: args.max_total_tokens,
                max_cost_usd: args.max_cost_usd,
            },
        },
    };
    // One connection: a run's queries come one at a time (docs/benchmarks.md, "Footprint").
    let store = args.store.open(&config, PoolSize::Single).await?;
    let request = RunRequest {
        kind,
        model_from_flag: args.model.model.is_some(),
        live_capacity: None,
    };
    let handle = match maestro_app::start(store.clone(), config.clone(), request).await {
        Ok(handle) => handle,
        Err(maestro_app::StartError::Piece(e)) => {
            return Err(crate::common::explain_piece_error(*e));
        }
        Err(e) => return Err(e.into()),
    };
    let stop = stop_signal()?;
    let shown = tokio::spawn(show(
        handle.subscribe_after(0),
        handle.resumed_after(),
        args.events.is_some(),
    ));
    let canceller = handle.canceller();
    tokio::spawn(async move {
        if stop.await {
            // The run stops where it is and records that it was cancelled.
            canceller.cancel();
        }
    });
    let outcome = handle.outcome().await;
    let _ = shown.await;
    report(outcome, &config, &store, args.events.is_some()).await
}

/// Shows the run as it goes: progress lines on stderr, or its events as JSON lines on stdout.
/// Events of a resumed run's earlier attempts only bring the display up to date.
async fn show(mut events: maestro_app::Subscription, resumed_after: u64, jsonl: bool) {
    let progress = (!jsonl).then(|| Progress::new(0));
    let mut out = std::io::stdout();
    while let Some(item) = events.next().await {
        match item {
            Ok(Live::Event(record)) => match &progress {
                Some(progress) if record.seq <= resumed_after => progress.catch_up(&record),
                Some(progress) => {
                    let _ = progress.record(&record);
                }
                None if record.seq <= resumed_after => {}
                None => {
                    if let Ok(line) = serde_json::to_string(&*record) {
                        let _ = writeln!(out, "{line}");
                        let _ = out.flush();
                    }
                }
            },
            Ok(Live::TextDelta { text, .. }) => {
                if let Some(progress) = &progress {
                    progress.text_delta(&text);
                }
            }
            Ok(Live::Note(note)) => match &progress {
                Some(progress) => progress.note(&crate::term::printable(&note)),
                None => eprintln!("{}", crate::term::printable(&note)),
            },
            Err(e) => {
                eprintln!("warning: reading the run's events from the store failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
    if let Some(progress) = &progress {
        progress.finish();
    }
}

/// Says how the run ended and picks the exit code.
async fn report(
    outcome: RunOutcome,
    config: &Config,
    store: &maestro_app::Store,
    jsonl: bool,
) -> anyhow::Result<u8> {
    let summary = match outcome {
        RunOutcome::Ended(summary) => summary,
        RunOutcome::Failed {
            error: error @ RunError::RequiredMcp { .. },
            ..
        } => {
            // The piece cannot run here: said, and nothing ran (exit 1, as for a failed run).
            eprintln!(
                "error: {}\nno run was started",
                crate::term::printable(&maestro_app::error_chain(&error))
            );
            return Ok(1);
        }
        RunOutcome::Failed {
            error: RunError::Cancelled,
            ..
        } => {
            // Stopped while it was being prepared: recorded as cancelled, like a stop later on.
            eprintln!("run cancelled before it started; nothing was asked of the model");
            return Ok(RunStatus::Failed.exit_code() as u8);
        }
        RunOutcome::Failed { error, .. } => return Err(explain_run_error(error)),
        RunOutcome::Fenced { why } => {
            eprintln!("the run stopped without writing its end: {why}");
            return Ok(RunStatus::Failed.exit_code() as u8);
        }
        RunOutcome::HandedBack => return Ok(RunStatus::Failed.exit_code() as u8),
    };
    if summary.status == RunStatus::Failed && endpoint_unreachable(config).await {
        eprintln!("error: {}", no_endpoint(&config.llm.base_url));
    }
    let mut line = format!("run {} {}", summary.run_id, summary.status);
    if let Some(reason) = &summary.reason {
        line.push_str(&format!(
            " ({})",
            crate::term::printable(&reason.to_string())
        ));
    }
    eprintln!("{line}; record in {}", summary.run_dir.display());
    if let Some(spent) = spend_line(store, &summary.run_id, config).await {
        eprintln!("{spent}");
    }
    if summary.status == RunStatus::Failed {
        eprintln!(
            "continue it where it stopped with: maestro run --resume {}",
            summary.run_id
        );
    }
    if summary.status == RunStatus::NeedsUserInput {
        eprintln!(
            "the run asks: {}\nanswer it, then go on, with:\n  maestro jobs answer {id} \"…\"\n  maestro run --resume {id}",
            crate::term::printable(&summary.result),
            id = summary.run_id
        );
    }
    if !jsonl {
        match did_not_complete(&summary) {
            Some(failure) => println!("{}", crate::term::printable(&failure)),
            None if !summary.result.is_empty() => {
                println!("{}", crate::term::printable(&summary.result));
            }
            None => {}
        }
    }
    Ok(summary.status.exit_code() as u8)
}

/// What a run that failed, aborted or went past a limit prints where a completed run prints
/// its result: how it ended and why, marked as an error. Its last answer is no result, and is
/// kept in the record. `None` for a run that completed or waits (for an answer, for subtasks).
fn did_not_complete(summary: &maestro_app::RunSummary) -> Option<String> {
    match summary.status {
        RunStatus::Failed | RunStatus::Aborted | RunStatus::Exceeded => {}
        RunStatus::Completed | RunStatus::NeedsUserInput | RunStatus::WaitingSubtasks => {
            return None;
        }
    }
    Some(match &summary.reason {
        Some(reason) => format!(
            "error: the run did not complete: {} ({reason})",
            summary.status
        ),
        None => format!("error: the run did not complete: {}", summary.status),
    })
}

/// The run's tokens and cost, from its record in the store: `tokens: 1,234 (prompt 1,000,
/// completion 234) · cost: $0.0012`, or `cost: unknown (no price for model X)`. `None` when
/// the record cannot be read.
async fn spend_line(store: &maestro_app::Store, run_id: &str, config: &Config) -> Option<String> {
    use maestro_app::JobQueue as _;
    let id: maestro_app::JobId = run_id.parse().ok()?;
    let events: Vec<maestro_app::RunEvent> = store
        .events(id, 0)
        .await
        .ok()?
        .into_iter()
        .filter_map(|e| serde_json::from_value::<maestro_app::EventRecord>(e.payload).ok())
        .map(|r| r.event)
        .collect();
    let spend = maestro_app::run_spend_in(&events, &config.llm);
    let usage = spend.usage;
    let cost = match spend.cost_usd {
        Some(usd) => format!("${usd:.4}"),
        None => {
            let run_model = events.iter().find_map(|e| match e {
                maestro_app::RunEvent::RunStarted { model, .. } => model.clone(),
                _ => None,
            });
            let unpriced = events
                .iter()
                .find_map(|e| match e {
                    maestro_app::RunEvent::LlmResponse { model, .. } => model
                        .clone()
                        .or_else(|| run_model.clone())
                        .filter(|m| config.llm.price(m).is_none()),
                    _ => None,
                })
                .or(run_model)
                .unwrap_or_default();
            format!("unknown (no price for model {unpriced})")
        }
    };
    Some(format!(
        "tokens: {} (prompt {}, completion {}) · cost: {cost}",
        crate::progress::group_thousands(usage.total_tokens),
        crate::progress::group_thousands(usage.prompt_tokens),
        crate::progress::group_thousands(usage.completion_tokens)
    ))
}

/// Prints what a run error carries besides its message (a piece's diagnostics), and turns it
/// into the command's error.
fn explain_run_error(error: RunError) -> anyhow::Error {
    match error {
        RunError::Piece(e) => crate::common::explain_piece_error(e),
        e => anyhow!(maestro_app::error_chain(&e)),
    }
}

/// Who submits a local run, for the audit log.
fn whoami() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".to_string())
}
