//! Live progress of `maestro run` on stderr.
//!
//! [`ProgressModel`] is the whole rendering, as pure functions of the run's events, the streamed
//! answer text and the elapsed time: the lines that stay (movements, tool calls, warnings, the
//! end) and, on a terminal, the one status line redrawn under them (spinner, movement and visit,
//! the streamed text's last line, tokens, elapsed time). [`Progress`] only puts those strings on
//! the screen: through `indicatif` on a terminal, as plain lines elsewhere.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use maestro_protocol::{EventRecord, RunEvent};
use serde_json::Value;

/// Spinner frames, one per [`SPIN_STEP`].
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const SPIN_STEP: Duration = Duration::from_millis(100);
/// How much of the streamed text's last line, or of a tool's argument, the status line shows.
const PREVIEW_CHARS: usize = 60;

/// What the run is doing now, as far as the display cares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Activity {
    Starting,
    /// A model call is in flight.
    Answering,
    /// A tool runs: its name and a short view of its input.
    Tool(String),
    /// Between calls (outcome rules, reports, the next prompt).
    Working,
    Finished,
}

/// The rendering state: fed events and streamed text, asked for lines.
#[derive(Debug, Clone)]
pub(crate) struct ProgressModel {
    max_movements: u32,
    tokens: u64,
    /// The top-level movement, its position in the run and its visit.
    movement: Option<(String, u32, u32)>,
    /// The sub-movement running under a parallel movement, if any.
    sub: Option<String>,
    activity: Activity,
    /// The answer text streamed so far in the current call (only its tail is kept).
    streamed: String,
}

impl ProgressModel {
    pub(crate) fn new(max_movements: u32) -> Self {
        ProgressModel {
            max_movements,
            tokens: 0,
            movement: None,
            sub: None,
            activity: Activity::Starting,
            streamed: String::new(),
        }
    }

    /// Applies one event and returns the lines it adds to the log (possibly none).
    pub(crate) fn apply(&mut self, event: &RunEvent) -> Vec<String> {
        let line = match event {
            RunEvent::RunStarted {
                run_id,
                piece,
                dialect,
                max_movements,
                ..
            } => {
                self.max_movements = *max_movements;
                Some(format!("run {run_id}: piece {piece} ({dialect})"))
            }
            RunEvent::RunResumed { after_seq } => Some(format!(
                "resumed after event {after_seq}: what the record holds is reused, not repeated"
            )),
            RunEvent::MovementStarted {
                movement,
                iteration,
                movement_iteration,
                parent,
                ..
            } => {
                self.activity = Activity::Working;
                match parent {
                    Some(parent) => {
                        self.sub = Some(movement.clone());
                        Some(format!("  ▸ {parent}/{movement}"))
                    }
                    None => {
                        self.movement = Some((movement.clone(), *iteration, *movement_iteration));
                        self.sub = None;
                        let visit = if *movement_iteration > 1 {
                            format!(", visit {movement_iteration}")
                        } else {
                            String::new()
                        };
                        Some(format!(
                            "▶ {movement} ({iteration}/{}{visit})",
                            self.max_movements
                        ))
                    }
                }
            }
            RunEvent::LlmRequest { .. } => {
                self.activity = Activity::Answering;
                self.streamed.clear();
                None
            }
            RunEvent::LlmResponse { usage, .. } => {
                self.tokens += usage.total_tokens;
                self.activity = Activity::Working;
                None
            }
            RunEvent::LlmRetry {
                attempt,
                delay_ms,
                reason,
                ..
            } => Some(format!("  retry {attempt} in {delay_ms} ms: {reason}")),
            RunEvent::ToolCall {
                movement,
                tool,
                input,
                ..
            } => {
                let shown = match input_preview(input) {
                    Some(arg) => format!("{tool} {arg}"),
                    None => tool.clone(),
                };
                self.activity = Activity::Tool(shown.clone());
                Some(format!("  {movement}: {shown}"))
            }
            RunEvent::ToolResult { tool, ok, .. } => {
                self.activity = Activity::Working;
                (!ok).then(|| format!("  {tool} failed"))
            }
            RunEvent::JudgeRequest { movement, kind, .. } => {
                Some(format!("  {movement}: {} call", wire(kind)))
            }
            RunEvent::ReportWritten { name, .. } => Some(format!("  report {name}")),
            RunEvent::ToolModeChanged { mode, reason, .. } => {
                Some(format!("  tool mode now {}: {reason}", wire(mode)))
            }
            RunEvent::CycleWarning {
                cycle,
                rounds,
                threshold,
                ..
            } => Some(format!(
                "  warning: cycle {} round {rounds}/{threshold}",
                cycle.join(" → ")
            )),
            RunEvent::LoopDetected { cycle, rounds, .. } => Some(format!(
                "  loop detected: {} ({rounds} rounds)",
                cycle.join(" → ")
            )),
            RunEvent::Reminder { movement, kind, .. } => {
                Some(format!("  {movement}: reminder ({})", wire(kind)))
            }
            RunEvent::ContextWarning {
                level,
                used_tokens,
                context_length,
                ..
            } => Some(format!(
                "  context {}: {}/{} tokens",
                wire(level),
                group_thousands(*used_tokens),
                group_thousands(*context_length)
            )),
            RunEvent::LoopWarning {
                movement,
                consecutive,
                ..
            } => Some(format!(
                "  loop warning: {movement} entered {consecutive} times in a row"
            )),
            RunEvent::LoopMonitorTriggered {
                judge, cycle_count, ..
            } => Some(format!(
                "  loop monitor: {cycle_count} cycles, judge {judge}"
            )),
            RunEvent::Warning { message, .. } => Some(format!("  warning: {message}")),
            RunEvent::MovementFinished {
                movement,
                next,
                via,
                parent,
                reason,
                ..
            } => {
                self.activity = Activity::Working;
                let indent = if parent.is_some() { "    " } else { "" };
                // Why the engine ended the visit, when the model did not (`max_iterations`).
                let why = reason
                    .as_ref()
                    .map(|r| format!("; {r}"))
                    .unwrap_or_default();
                // A visit that ends the run in failure, or that the engine cut off, is not
                // marked as done well.
                let mark = if reason.is_some() || next == "ABORT" || next == "FAIL" {
                    '✗'
                } else {
                    '✓'
                };
                Some(format!(
                    "{indent}{mark} {movement} → {next} ({}{why})",
                    wire(via)
                ))
            }
            RunEvent::RunFinished { status, reason, .. } => {
                self.activity = Activity::Finished;
                Some(format!(
                    "■ {status}{}",
                    reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ))
            }
            RunEvent::ScratchUpdated { .. } => None,
            RunEvent::UserInput { movement, text } => {
                Some(format!("  answer for {movement}: {}", one_line(text)))
            }
            RunEvent::QualityGateChecked {
                movement,
                gate,
                passed,
                ..
            } => Some(format!(
                "  quality gate {gate} of {movement}: {}",
                if *passed {
                    "passed"
                } else {
                    "failed, the step goes again"
                }
            )),
            RunEvent::WorkflowCallStarted {
                movement, workflow, ..
            } => Some(format!("↳ {movement} calls workflow {workflow}")),
            RunEvent::WorkflowCallReturned {
                movement,
                workflow,
                result,
            } => Some(format!("↲ {workflow} returned {result} to {movement}")),
            RunEvent::SubtasksEnded { movement, children } => Some(format!(
                "  subtasks for {movement} ended: {}",
                children
                    .iter()
                    .map(|c| format!("{} {}", c.title, c.status))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            RunEvent::TeamLeaderPlanned {
                movement,
                batch,
                parts,
                done,
                ..
            } => Some(if parts.is_empty() && *done {
                format!("  {movement}: the leader planned no more parts")
            } else {
                format!(
                    "  {movement}: batch {batch}: {}",
                    parts
                        .iter()
                        .map(|p| p.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
            RunEvent::ArpeggioBatchFailed {
                movement,
                attempt,
                error,
                ..
            } => Some(format!(
                "  {movement}: attempt {attempt} failed: {}",
                one_line(error)
            )),
            RunEvent::SystemInputs { movement, inputs } => Some(format!(
                "  {movement} read {}",
                inputs.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            RunEvent::EffectResult {
                movement,
                effect,
                result,
            } => Some(format!(
                "  {movement}: effect {effect} {}",
                if result["success"] == serde_json::Value::Bool(true) {
                    "succeeded"
                } else {
                    "did not succeed"
                }
            )),
            RunEvent::StructuredOutput { movement, .. } => {
                Some(format!("  {movement} gave its structured answer"))
            }
            RunEvent::SelectionMade {
                movement,
                effective,
                ..
            } => Some(format!(
                "  selected for {movement}: {}",
                if effective.is_empty() {
                    "nothing from the pool".to_string()
                } else {
                    effective.join(", ")
                }
            )),
        };
        line.into_iter().collect()
    }

    /// Streamed answer text arrived.
    pub(crate) fn text(&mut self, delta: &str) {
        self.streamed.push_str(delta);
        // Keep the tail only: enough for the last line, bounded whatever the answer's size.
        if self.streamed.len() > 4 * PREVIEW_CHARS * 4 {
            let mut cut = self.streamed.len() - 2 * PREVIEW_CHARS * 4;
            while !self.streamed.is_char_boundary(cut) {
                cut += 1;
            }
            self.streamed.drain(..cut);
        }
    }

    /// A log line as printed off a terminal: elapsed time and tokens so far, then the line.
    pub(crate) fn plain(&self, line: &str, elapsed: Duration) -> String {
        format!(
            "[{} {:>7} tok] {line}",
            clock(elapsed),
            group_thousands(self.tokens)
        )
    }

    /// The status line redrawn under the log on a terminal.
    pub(crate) fn status(&self, elapsed: Duration) -> String {
        let spin = match self.activity {
            Activity::Answering | Activity::Tool(_) => {
                SPINNER[(elapsed.as_millis() / SPIN_STEP.as_millis()) as usize % SPINNER.len()]
            }
            Activity::Finished => '■',
            Activity::Starting | Activity::Working => '·',
        };
        let mut parts = Vec::new();
        match &self.movement {
            Some((name, iteration, visit)) => {
                let name = match &self.sub {
                    Some(sub) => format!("{name}/{sub}"),
                    None => name.clone(),
                };
                parts.push(format!(
                    "{name} · visit {visit} · movement {iteration}/{}",
                    self.max_movements
                ));
            }
            None => parts.push("starting".to_string()),
        }
        match &self.activity {
            Activity::Answering => match last_line(&self.streamed) {
                Some(line) => parts.push(format!("› {line}")),
                None => parts.push("waiting for the model".to_string()),
            },
            Activity::Tool(shown) => parts.push(format!("running {shown}")),
            Activity::Starting | Activity::Working | Activity::Finished => {}
        }
        parts.push(format!("{} tok", group_thousands(self.tokens)));
        parts.push(clock(elapsed));
        format!("{spin} {}", parts.join(" · "))
    }
}

/// The last non-blank line of `text`, cut to [`PREVIEW_CHARS`].
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    Some(cut(line))
}

fn cut(text: &str) -> String {
    if text.chars().count() <= PREVIEW_CHARS {
        return text.to_string();
    }
    let mut out: String = text.chars().take(PREVIEW_CHARS - 1).collect();
    out.push('…');
    out
}

/// The argument that says most about a tool call: a path, command, pattern, URL or name; else
/// the first string argument. One line, cut.
fn input_preview(input: &Value) -> Option<String> {
    const KEYS: [&str; 8] = [
        "file_path",
        "path",
        "command",
        "pattern",
        "url",
        "query",
        "name",
        "next",
    ];
    let object = input.as_object()?;
    let text = KEYS
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
        .or_else(|| object.values().find_map(Value::as_str))?;
    let line = text.lines().next().unwrap_or_default().trim();
    (!line.is_empty()).then(|| cut(line))
}

/// `m:ss`, or `h:mm:ss` past an hour.
fn clock(elapsed: Duration) -> String {
    let s = elapsed.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// A value as the record names it (`default_next`, `complete_tool`): its serde name, not its Rust
/// one.
fn wire(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(_) => String::from("?"),
    }
}

/// `1234567` as `1,234,567`.
pub(crate) fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Puts the model's rendering on stderr.
pub(crate) struct Progress {
    model: Arc<Mutex<ProgressModel>>,
    start: Instant,
    live: Mutex<Option<Live>>,
}

/// The terminal display: the log above, the status line redrawn by a ticker thread.
struct Live {
    display: MultiProgress,
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Live on a terminal, plain lines otherwise.
    pub(crate) fn new(max_movements: u32) -> Self {
        let model = Arc::new(Mutex::new(ProgressModel::new(max_movements)));
        let start = Instant::now();
        let live = std::io::IsTerminal::is_terminal(&std::io::stderr())
            .then(|| Live::start(Arc::clone(&model), start));
        Progress {
            model,
            start,
            live: Mutex::new(live),
        }
    }

    /// Clears the status line; the log stays.
    pub(crate) fn finish(&self) {
        let live = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut live) = live {
            live.stop.store(true, Ordering::Relaxed);
            if let Some(ticker) = live.ticker.take() {
                let _ = ticker.join();
            }
            live.bar.finish_and_clear();
            crate::logs::release_display();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Live {
    fn start(model: Arc<Mutex<ProgressModel>>, start: Instant) -> Live {
        let display = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let bar = display.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{wide_msg}").unwrap_or_else(|_| {
                // The template is a constant; this arm only keeps `expect` out of the code.
                ProgressStyle::default_spinner()
            }),
        );
        crate::logs::attach_display(display.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let bar = bar.clone();
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("progress".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let status = model
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .status(start.elapsed());
                        bar.set_message(status);
                        std::thread::sleep(SPIN_STEP);
                    }
                })
                .ok()
        };
        Live {
            display,
            bar,
            stop,
            ticker,
        }
    }
}

impl Progress {
    /// Brings the display up to date with an event of an earlier attempt, showing nothing.
    pub(crate) fn catch_up(&self, record: &EventRecord) {
        let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = model.apply(&record.event);
    }

    /// Prints a note above the status line.
    pub(crate) fn note(&self, text: &str) {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        match live.as_ref() {
            Some(live) => {
                let _ = live.display.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// Shows one committed event.
    pub(crate) fn record(&self, record: &EventRecord) -> std::io::Result<()> {
        let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        let lines = model.apply(&record.event);
        let elapsed = self.start.elapsed();
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        match live.as_ref() {
            Some(live) => {
                for line in &lines {
                    live.display
                        .println(crate::term::printable(&model.plain(line, elapsed)))?;
                }
                live.bar.set_message(model.status(elapsed));
            }
            None => {
                let mut err = std::io::stderr().lock();
                for line in &lines {
                    writeln!(
                        err,
                        "{}",
                        crate::term::printable(&model.plain(line, elapsed))
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Shows a piece of the model's answer as it streams.
    pub(crate) fn text_delta(&self, text: &str) {
        self.model
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .text(text);
    }
}

/// The first line of `text`, cut to 80 characters.
fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_protocol::{CallPurpose, Dialect, EndReason, OutcomeSource};
    use maestro_protocol::{RunStatus, Usage};
    use serde_json::json;

    /// What happened, step by step: each event at its time, the log lines it printed and the
    /// status line a terminal shows after it.
    #[allow(clippy::large_enum_variant)]
    enum Step {
        Event(u64, RunEvent),
        Text(u64, &'static str),
    }

    fn script() -> Vec<Step> {
        use Step::*;
        vec![
            Event(
                0,
                RunEvent::RunStarted {
                    run_id: "20260101-000000-abcd".into(),
                    piece: "explore".into(),
                    dialect: Dialect::Maestro,
                    piece_hash: "h".into(),
                    task: "t".into(),
                    max_movements: 10,
                    initial_movement: "investigate".into(),
                    run_dir: "/r".into(),
                    workspace: "/w".into(),
                    loop_monitors: vec![],
                    context_window: None,
                    piece_file: None,
                    subtasks: false,
                    model: Some("scripted-model".into()),
                    max_iterations_per_movement: None,
                },
            ),
            Event(
                120,
                RunEvent::MovementStarted {
                    movement: "investigate".into(),
                    iteration: 1,
                    movement_iteration: 1,
                    parent: None,
                    prompt_log: None,
                },
            ),
            Event(
                150,
                RunEvent::LlmRequest {
                    movement: "investigate".into(),
                    purpose: CallPurpose::Movement,
                    messages: 2,
                    tools: 4,
                },
            ),
            Text(900, "Let me look"),
            Text(1_300, " at the README.\nReading it now"),
            Event(
                2_050,
                RunEvent::LlmResponse {
                    movement: "investigate".into(),
                    purpose: CallPurpose::Movement,
                    model: Some("scripted-model".into()),
                    usage: Usage {
                        prompt_tokens: 1_000,
                        completion_tokens: 234,
                        total_tokens: 1_234,
                        ..Usage::default()
                    },
                    finish_reason: Some("tool_calls".into()),
                    tool_calls: 1,
                    text_chars: 42,
                    answer: None,
                },
            ),
            Event(
                2_060,
                RunEvent::ToolCall {
                    movement: "investigate".into(),
                    tool: "Read".into(),
                    call_id: "c1".into(),
                    input: json!({"file_path": "README.md", "limit": 40}),
                },
            ),
            Event(
                2_300,
                RunEvent::ToolResult {
                    movement: "investigate".into(),
                    tool: "Read".into(),
                    call_id: "c1".into(),
                    ok: true,
                    output_chars: 3_000,
                    truncated: false,
                    output: None,
                    images: vec![],
                },
            ),
            Event(
                2_310,
                RunEvent::LlmRequest {
                    movement: "investigate".into(),
                    purpose: CallPurpose::Movement,
                    messages: 4,
                    tools: 4,
                },
            ),
            Event(
                2_400,
                RunEvent::Warning {
                    movement: Some("investigate".into()),
                    message: "the model sent an unknown tool".into(),
                },
            ),
            Event(
                4_000,
                RunEvent::LlmResponse {
                    movement: "investigate".into(),
                    purpose: CallPurpose::Movement,
                    model: Some("scripted-model".into()),
                    usage: Usage {
                        prompt_tokens: 1_500,
                        completion_tokens: 80,
                        total_tokens: 1_580,
                        ..Usage::default()
                    },
                    finish_reason: Some("tool_calls".into()),
                    tool_calls: 1,
                    text_chars: 0,
                    answer: None,
                },
            ),
            Event(
                4_010,
                RunEvent::MovementFinished {
                    movement: "investigate".into(),
                    next: "summarize".into(),
                    via: OutcomeSource::TransitionTool,
                    parent: None,
                    rule: None,
                    response: "found it".into(),
                    transcript: None,
                    summary: None,
                    lessons: vec![],
                    edge_prompt: None,
                    reason: None,
                },
            ),
            Event(
                4_020,
                RunEvent::MovementStarted {
                    movement: "investigate".into(),
                    iteration: 3,
                    movement_iteration: 2,
                    parent: None,
                    prompt_log: None,
                },
            ),
            Event(
                65_000,
                RunEvent::RunFinished {
                    status: RunStatus::Completed,
                    result: "done".into(),
                    reason: None,
                },
            ),
        ]
    }

    /// A visit that ends the run in failure or that the engine cut off is marked ✗, not ✓.
    #[test]
    fn failed_and_cut_off_visits_are_not_marked_done() {
        let finished = |next: &str, reason: Option<EndReason>| RunEvent::MovementFinished {
            movement: "implement".into(),
            next: next.into(),
            via: OutcomeSource::Engine,
            parent: None,
            rule: None,
            response: String::new(),
            transcript: None,
            summary: None,
            lessons: vec![],
            edge_prompt: None,
            reason,
        };
        let mut model = ProgressModel::new(10);
        let lines: Vec<String> = [
            finished("review", None),
            finished("FAIL", None),
            finished("ABORT", None),
            finished("review", Some(EndReason::MaxIterations)),
        ]
        .iter()
        .flat_map(|event| model.apply(event))
        .collect::<Vec<_>>()
        .iter()
        .map(|line| model.plain(line, Duration::from_millis(0)))
        .collect();
        let marks: Vec<char> = lines
            .iter()
            .map(|l| l.chars().find(|c| *c == '✓' || *c == '✗').unwrap_or(' '))
            .collect();
        assert_eq!(marks, ['✓', '✗', '✗', '✗'], "{lines:#?}");
    }

    #[test]
    fn plain_rendering_prints_one_line_per_step_with_time_and_tokens() {
        let mut model = ProgressModel::new(10);
        let mut out = String::new();
        for step in script() {
            if let Step::Event(ms, event) = step {
                for line in model.apply(&event) {
                    out.push_str(&model.plain(&line, Duration::from_millis(ms)));
                    out.push('\n');
                }
            }
        }
        insta::assert_snapshot!("plain", out);
    }

    #[test]
    fn terminal_rendering_shows_the_log_and_a_live_status_line() {
        let mut model = ProgressModel::new(10);
        let mut out = String::new();
        for step in script() {
            let ms = match step {
                Step::Event(ms, event) => {
                    for line in model.apply(&event) {
                        out.push_str(&format!(
                            "log    {}\n",
                            model.plain(&line, Duration::from_millis(ms))
                        ));
                    }
                    ms
                }
                Step::Text(ms, text) => {
                    model.text(text);
                    ms
                }
            };
            out.push_str(&format!(
                "status {}\n",
                model.status(Duration::from_millis(ms))
            ));
        }
        insta::assert_snapshot!("terminal", out);
    }

    #[test]
    fn the_spinner_turns_with_time_while_the_model_answers() {
        let mut model = ProgressModel::new(1);
        model.apply(&RunEvent::LlmRequest {
            movement: "m".into(),
            purpose: CallPurpose::Movement,
            messages: 1,
            tools: 0,
        });
        let a = model.status(Duration::from_millis(0));
        let b = model.status(Duration::from_millis(100));
        assert_ne!(a.chars().next(), b.chars().next(), "{a} / {b}");
    }

    #[test]
    fn a_selection_names_what_runs_or_that_nothing_from_the_pool_does() {
        let mut model = ProgressModel::new(5);
        let mut lines = Vec::new();
        for effective in [
            vec!["frontend-review".to_string(), "backend-review".into()],
            vec![],
        ] {
            lines.extend(model.apply(&RunEvent::SelectionMade {
                movement: "reviewers".into(),
                target: maestro_protocol::SelectionTarget::Participants,
                round: 1,
                selected: effective.clone(),
                effective,
                rationale: "the change is in the UI".into(),
            }));
        }
        insta::assert_snapshot!("selection", lines.join("\n"));
    }

    #[test]
    fn a_huge_streamed_answer_keeps_a_bounded_tail() {
        let mut model = ProgressModel::new(1);
        for _ in 0..10_000 {
            model.text("ééééééééé ");
        }
        model.text("\nlast line");
        assert!(model.streamed.len() < 2_000, "{}", model.streamed.len());
        assert_eq!(last_line(&model.streamed).as_deref(), Some("last line"));
    }
}
