//! TAKT `arpeggio` steps: the rows of a CSV file in the workspace, `batch_size` at a time, each
//! batch rendered into the step's template and sent to the model in one call, at most
//! `concurrency` batches at once; a failed call is tried again up to `max_retries` times,
//! `retry_delay_ms` apart. The answers are joined in batch order (`merge: concat` with its
//! `separator`), written to `output_path` when one is set, and the step's rules read them.
//!
//! Each batch's calls are recorded under their own key, `<step>/batch:<n>`, with a failed attempt
//! recorded as `arpeggio_batch_failed`: a resumed run reuses every answer and failure its record
//! holds and calls the model only for the batches that have none; a replay calls it for none.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use maestro_llm::{ChatRequest, LlmError, Message};
use maestro_piece::Movement;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::csv::{self, Row};
use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::{EngineError, InternalError};
use crate::event::{CallPurpose, RunEvent};
use crate::movement::Ended;
use crate::prompt::{self, Visit};

/// The step's `arpeggio` block, with TAKT's defaults.
#[derive(Debug, Clone)]
struct Config {
    source: String,
    source_path: String,
    batch_size: usize,
    concurrency: usize,
    template: String,
    max_retries: u32,
    retry_delay: Duration,
    strategy: String,
    separator: String,
    output_path: Option<String>,
}

impl Config {
    fn read(definition: &Value) -> Config {
        let a = &definition["arpeggio"];
        let text = |v: &Value| v.as_str().map(str::to_string);
        let count = |key: &str, default: u64| a[key].as_u64().unwrap_or(default);
        let merge = &a["merge"];
        Config {
            source: text(&a["source"]).unwrap_or_else(|| "csv".into()),
            source_path: text(&a["source_path"]).unwrap_or_default(),
            batch_size: count("batch_size", 1).max(1) as usize,
            concurrency: count("concurrency", 1).max(1) as usize,
            template: text(&a["template"]).unwrap_or_default(),
            max_retries: count("max_retries", 2).min(u64::from(u32::MAX)) as u32,
            retry_delay: Duration::from_millis(count("retry_delay_ms", 1000)),
            strategy: text(&merge["strategy"]).unwrap_or_else(|| "concat".into()),
            separator: text(&merge["separator"]).unwrap_or_else(|| "\n".into()),
            output_path: text(&a["output_path"]),
        }
    }
}

/// Runs the step up to its end (the caller records `movement_finished`).
pub(super) async fn run(
    run: &Arc<RunCtx>,
    step: &Movement,
    definition: &Value,
) -> Result<Ended, EngineError> {
    let state = super::start(run, step)?;
    let config = Config::read(definition);
    let refuse = |problem: String| {
        Ok(super::failed(
            String::new(),
            EndReason::PieceError(format!("arpeggio step `{}`: {problem}", step.name)),
        ))
    };
    if config.strategy != "concat" {
        return refuse(format!(
            "`merge.strategy: {}` runs a JavaScript merge function (`inline_js` or `file`), which Maestro does not run; use `strategy: concat` with a `separator`",
            config.strategy
        ));
    }
    if config.source != "csv" {
        return refuse(format!(
            "`source: {}` names a JavaScript data-source module, which Maestro does not run; the built-in source is `csv`",
            config.source
        ));
    }
    let rows = match read_source(run, &config.source_path) {
        Ok(rows) => rows,
        Err(problem) => return refuse(problem),
    };
    let template = match read_template(run, &config.template) {
        Ok(text) => text,
        Err(problem) => return refuse(problem),
    };
    let batches: Vec<&[Row]> = rows.chunks(config.batch_size).collect();
    let total = batches.len();
    let mut prompts = Vec::with_capacity(total);
    for (index, rows) in batches.iter().enumerate() {
        match expand(&template, rows, index, total) {
            Ok(text) => prompts.push(text),
            Err(problem) => {
                return refuse(format!(
                    "template `{}`, batch {}: {problem}",
                    config.template,
                    index + 1
                ));
            }
        }
    }
    let system = prompt::first_messages(
        &run.piece,
        &state,
        &Visit {
            movement: step,
            cycle_count: 0,
            loop_warning: None,
            report_dir: run.record.reports_dir().display().to_string(),
            max_carried_chars: run.config.max_carried_chars,
            review_scope: None,
        },
    )
    .system;
    let results = fan_out(run, step, &config, &system, prompts).await?;
    let mut answers = Vec::with_capacity(total);
    let mut failures = Vec::new();
    for (index, result) in results.into_iter().enumerate() {
        match result {
            Ok(answer) => answers.push(answer),
            Err(error) => failures.push(format!("batch {}: {error}", index + 1)),
        }
    }
    if !failures.is_empty() {
        return Ok(super::failed(
            String::new(),
            EndReason::LlmError(format!(
                "arpeggio step `{}`: {}/{total} batches failed after {} retries ({})",
                step.name,
                failures.len(),
                config.max_retries,
                failures.join("; ")
            )),
        ));
    }
    let merged = answers.join(&config.separator);
    if let Some(output) = &config.output_path
        && let Err(problem) = write_output(run, output, &merged)
    {
        return Ok(super::failed(
            merged,
            EndReason::PieceError(format!("arpeggio step `{}`: {problem}", step.name)),
        ));
    }
    super::route(run, step, merged).await
}

/// Every batch, at most `concurrency` at once; their outcomes in batch order.
async fn fan_out(
    run: &Arc<RunCtx>,
    step: &Movement,
    config: &Config,
    system: &str,
    prompts: Vec<String>,
) -> Result<Vec<Result<String, String>>, EngineError> {
    let total = prompts.len();
    let limit = Arc::new(Semaphore::new(config.concurrency));
    let shared = Arc::new((step.clone(), config.clone(), system.to_string()));
    let mut tasks = JoinSet::new();
    for (index, user) in prompts.into_iter().enumerate() {
        let run = Arc::clone(run);
        let limit = Arc::clone(&limit);
        let shared = Arc::clone(&shared);
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await.ok();
            let (step, config, system) = &*shared;
            let number = index as u32 + 1;
            (index, batch(&run, step, config, number, system, user).await)
        });
    }
    let mut results: Vec<Option<Result<String, String>>> = vec![None; total];
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Ok(outcome))) => results[index] = Some(outcome),
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
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("the batch did not run".into())))
        .collect())
}

/// One batch: its call, tried again while `max_retries` allows. `Ok(Err(_))`: every attempt
/// failed; `Err(_)`: the run must stop (cancelled, diverged, over budget).
async fn batch(
    run: &RunCtx,
    step: &Movement,
    config: &Config,
    number: u32,
    system: &str,
    user: String,
) -> Result<Result<String, String>, EngineError> {
    let key = format!("{}/batch:{number}", step.name);
    let request = ChatRequest {
        model: run.config.model.clone(),
        messages: vec![
            Message::System {
                content: system.to_string(),
            },
            Message::user(user),
        ],
        tools: Default::default(),
        response_schema: None,
        temperature: run.config.temperature,
        max_tokens: run.config.max_tokens,
        headers: Vec::new(),
    };
    let mut last_error = String::new();
    for attempt in 1..=config.max_retries + 1 {
        // A failure the record holds is recorded again, not retried against the model.
        if let Some(error) = run.journal.recorded().and_then(|r| r.failed_call(&key)) {
            run.emit(RunEvent::LlmRequest {
                movement: key.clone(),
                purpose: CallPurpose::Movement,
                messages: request.messages.len(),
                tools: request.tools.len(),
            })
            .await?;
            run.emit(RunEvent::ArpeggioBatchFailed {
                movement: key.clone(),
                batch: number,
                attempt,
                error: error.clone(),
            })
            .await?;
            last_error = error;
            continue;
        }
        match run.chat(&key, CallPurpose::Movement, request.clone()).await {
            Ok(response) => return Ok(Ok(response.content)),
            Err(EngineError::Llm(error)) if !matches!(error, LlmError::Cancelled) => {
                let error = run.redact(&error.to_string());
                run.emit(RunEvent::ArpeggioBatchFailed {
                    movement: key.clone(),
                    batch: number,
                    attempt,
                    error: error.clone(),
                })
                .await?;
                last_error = error;
                if attempt <= config.max_retries {
                    tokio::select! {
                        _ = tokio::time::sleep(config.retry_delay) => {}
                        _ = run.cancel.cancelled() => return Err(EngineError::Llm(LlmError::Cancelled)),
                    }
                }
            }
            Err(other) => return Err(other),
        }
    }
    Ok(Err(last_error))
}

/// The rows of the CSV at `path`, a path inside the run's workspace.
fn read_source(run: &RunCtx, path: &str) -> Result<Vec<Row>, String> {
    let file = workspace_file(run, path, "source_path")?;
    let text = maestro_tools::regular_file::read_to_string(&file).map_err(|e| {
        format!(
            "cannot read `source_path: {path}` ({}): {e}",
            file.display()
        )
    })?;
    csv::rows(&text).map_err(|e| format!("`source_path: {path}`: {e}"))
}

/// `path` resolved inside the workspace under the file tools' rules (no escape through `..`,
/// an absolute path or a symlink).
fn workspace_file(run: &RunCtx, path: &str, field: &str) -> Result<PathBuf, String> {
    let workspace = maestro_tools::Workspace::open(&run.record.workspace)
        .map_err(|e| format!("the workspace cannot be opened: {e}"))?;
    workspace
        .resolve(path)
        .map(|p| p.abs)
        .map_err(|e| format!("`{field}: {path}` is not a file of the workspace: {e}"))
}

/// The template's text: a file beside the workflow (as TAKT resolves it), or in the workspace
/// for a workflow without a file.
fn read_template(run: &RunCtx, path: &str) -> Result<String, String> {
    let beside = run
        .piece
        .source
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|dir| dir.join(path));
    let file = match beside {
        Some(file) => file,
        None => workspace_file(run, path, "template")?,
    };
    maestro_tools::regular_file::read_to_string(&file).map_err(|e| {
        format!(
            "cannot read `template: {path}` ({}): {e}; the template is read relative to the workflow file",
            file.display()
        )
    })
}

/// Writes the merged answers to `path` in the workspace.
fn write_output(run: &RunCtx, path: &str, text: &str) -> Result<(), String> {
    let file = maestro_tools::workspace_file::writable_file(&run.record.workspace, path)
        .map_err(|e| format!("`output_path: {path}` cannot be written: {e}"))?;
    std::fs::write(&file, text).map_err(|e| {
        format!(
            "cannot write `output_path: {path}` ({}): {e}",
            file.display()
        )
    })
}

/// The template with a batch's placeholders filled as TAKT fills them: `{batch_index}`
/// (0-based), `{total_batches}`, `{col:N:name}` (column `name` of row N, 1-based) and
/// `{line:N}` (row N as `column: value` lines). Other braces are left as written.
fn expand(template: &str, rows: &[Row], index: usize, total: usize) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let inner = &after[..close];
        match placeholder(inner, rows, index, total)? {
            Some(value) => out.push_str(&value),
            None => {
                out.push('{');
                out.push_str(inner);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn placeholder(
    inner: &str,
    rows: &[Row],
    index: usize,
    total: usize,
) -> Result<Option<String>, String> {
    let row = |n: &str| -> Result<Option<&Row>, String> {
        let Ok(n) = n.parse::<usize>() else {
            return Ok(None);
        };
        match n.checked_sub(1).and_then(|i| rows.get(i)) {
            Some(row) => Ok(Some(row)),
            None => Err(format!(
                "`{{{inner}}}` names row {n}, but the batch has {} row(s)",
                rows.len()
            )),
        }
    };
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    match inner.split(':').collect::<Vec<_>>().as_slice() {
        ["batch_index"] => Ok(Some(index.to_string())),
        ["total_batches"] => Ok(Some(total.to_string())),
        ["line", n] if n.chars().all(|c| c.is_ascii_digit()) => Ok(row(n)?.map(|r| {
            r.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        })),
        ["col", n, name] if n.chars().all(|c| c.is_ascii_digit()) && word(name) => {
            let Some(r) = row(n)? else {
                return Ok(None);
            };
            match r.iter().find(|(k, _)| k == name) {
                Some((_, v)) => Ok(Some(v.clone())),
                None => Err(format!("`{{{inner}}}` names the unknown column `{name}`")),
            }
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn row(pairs: &[(&str, &str)]) -> Row {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_fill_from_the_batch() {
        let rows = vec![
            row(&[("id", "1"), ("name", "ada")]),
            row(&[("id", "2"), ("name", "bob")]),
        ];
        let text = expand(
            "{batch_index}/{total_batches} {col:2:name} {json}\n{line:1}",
            &rows,
            0,
            3,
        )
        .unwrap();
        assert_eq!(text, "0/3 bob {json}\nid: 1\nname: ada");
    }

    #[test]
    fn a_row_or_column_the_batch_lacks_is_named() {
        let rows = vec![row(&[("id", "1")])];
        assert!(
            expand("{line:2}", &rows, 0, 1)
                .unwrap_err()
                .contains("names row 2, but the batch has 1 row(s)")
        );
        assert!(
            expand("{col:1:nope}", &rows, 0, 1)
                .unwrap_err()
                .contains("unknown column `nope`")
        );
    }
}
