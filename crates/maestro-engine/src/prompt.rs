//! What the engine hands to prompt assembly for one movement visit: the run's carried values
//! (task, previous answer, feedback, lessons, reports, loop warning, edge prompt) gathered from
//! the run state, and the texts of the engine's own follow-up requests.

use std::collections::BTreeMap;

use maestro_piece::prompt::{Prompt, PromptContext, assemble};
use maestro_piece::{Movement, Piece};

use crate::state::RunState;

/// Values of one visit that the state does not hold.
pub(crate) struct Visit<'a> {
    pub movement: &'a Movement,
    pub cycle_count: u32,
    pub loop_warning: Option<String>,
    pub report_dir: String,
    pub max_carried_chars: usize,
    /// `{review_scope}`, computed for a movement that uses it.
    pub review_scope: Option<String>,
}

/// The system and first user message for a visit.
pub(crate) fn first_messages(piece: &Piece, state: &RunState, visit: &Visit<'_>) -> Prompt {
    let reports: BTreeMap<String, String> = state
        .reports
        .iter()
        .filter_map(|(name, path)| {
            maestro_tools::regular_file::read_to_string(std::path::Path::new(path))
                .ok()
                .map(|text| (name.clone(), text))
        })
        .collect();
    let ctx = PromptContext {
        task: state.task.clone(),
        iteration: state.iteration,
        max_movements: piece.max_movements,
        movement_iteration: state.visits_of(&visit.movement.name),
        previous_response: state.previous_response.clone(),
        feedback: state.feedback.clone(),
        lessons: state.lessons.clone(),
        report_dir: visit.report_dir.clone(),
        reports,
        user_inputs: state.user_inputs.clone(),
        cycle_count: visit.cycle_count,
        loop_warning: visit.loop_warning.clone(),
        edge_prompt: state.edge_prompt.clone(),
        max_carried_chars: visit.max_carried_chars,
        review_scope: visit.review_scope.clone(),
    };
    let mut prompt = assemble(piece, visit.movement, &ctx);
    if piece.dialect == maestro_piece::Dialect::Takt {
        prompt.user = crate::steps::render_instruction(&prompt.user, &state.workflow);
    }
    if let Some(so) = &visit.movement.structured_output {
        prompt
            .user
            .push_str(&crate::steps::structured::instruction(so));
    }
    prompt
}

/// The warning carried into a movement entered again and again in a row.
pub(crate) fn loop_warning(name: &str, consecutive: u32, threshold: u32) -> String {
    format!(
        "You have entered `{name}` {consecutive} times in a row (the limit is {threshold}). What you did before did \
         not move the run on: change your approach, or end the run if it cannot succeed."
    )
}

/// The warning carried into a movement that continues a cycle the run keeps going round.
pub(crate) fn cycle_warning(cycle: &str, rounds: u32, threshold: u32) -> String {
    format!(
        "The run keeps going round the movements {cycle}: this is round {rounds} (the limit is {threshold}). \
         If the last rounds did not move the work on, change your approach, or end the run if it cannot succeed."
    )
}

pub(crate) const CONTROL_REMINDER: &str = "Your turn ended without a control tool. This movement ends only when you \
call `transition` (to go on to the next movement) or `complete` (to end the run). Call one of them now.";

pub(crate) const CONTEXT_PRESSURE: &str = "The conversation is close to the model's context limit. Wrap up now: \
finish the essential part of the work and end this movement.";

pub(crate) fn report_reminder(missing: &[String]) -> String {
    format!(
        "Before this movement ends, write the required report(s) with the `write_report` tool: {}.",
        missing.join(", ")
    )
}

pub(crate) fn frontmatter_reminder(problem: &str) -> String {
    format!(
        "Your answer cannot be routed: {problem}\nAnswer again, starting with YAML frontmatter between two `---` lines \
         that matches the required fields."
    )
}

/// The note after an answer that asked for more tool calls than are run per answer.
pub(crate) fn tool_call_limit(asked: usize, cap: usize) -> String {
    format!(
        "Your last answer asked for {asked} tool calls. Only the first {cap} were run (their results \
         are above); the other {} were not run. Ask for what you still need in your next answer, at \
         most {cap} tool calls per answer.",
        asked - cap
    )
}
