//! The piece intermediate representation: what every dialect loader produces and what the
//! engine runs. It is plain data (serialisable), with all facets already resolved to text.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use maestro_protocol::Dialect;

/// A loaded, validated piece.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Piece {
    /// The piece's name, as `maestro run NAME` and the classifier know it.
    pub name: String,
    /// What the piece is for, in a sentence; the classifier reads it.
    pub description: String,
    /// The dialect the file was written in.
    pub dialect: Dialect,
    /// The file the piece was loaded from (empty for pieces created from a string).
    pub source: PathBuf,
    /// Hex SHA-256 of the source text; a run records it so a resume can tell the piece changed.
    pub hash: String,
    /// Hard cap on movements per run (graph pieces get the configurable default, 50).
    pub max_movements: u32,
    /// The movement a run starts with; always a top-level movement of the piece.
    pub initial_movement: String,
    /// Graph dialect: the `$START` edge prompt, rendered as the first movement's instruction
    /// preamble. `None` for other dialects.
    pub start_prompt: Option<String>,
    /// The top-level movements, in file order.
    pub movements: Vec<Movement>,
    /// takt loop monitors; empty for the other dialects.
    pub loop_monitors: Vec<LoopMonitor>,
    /// `triggers.keywords`: hints for the piece classifier.
    pub keywords: Vec<String>,
    /// MCP server slugs that must be up before a run starts.
    pub required_mcp: Vec<String>,
    /// Preferred model, if the piece names one.
    pub model: Option<String>,
    /// The piece's own cost caps (a maestro piece's top-level `budget:`), covering each job it
    /// runs and every subtask under it.
    #[serde(default)]
    pub budget: Option<PieceBudget>,
}

/// A maestro piece's `budget: {max_total_tokens, max_cost_usd}`: either may be absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PieceBudget {
    /// The most tokens (prompt and completion together) a job tree may spend.
    pub max_total_tokens: Option<u64>,
    /// The most US dollars a job tree may spend, priced by `llm.models.<name>.price`.
    pub max_cost_usd: Option<f64>,
}

impl Piece {
    /// Finds a top-level movement, or a parallel sub-movement, by name.
    pub fn movement(&self, name: &str) -> Option<&Movement> {
        self.movements.iter().find_map(|m| {
            if m.name == name {
                Some(m)
            } else {
                m.parallel.iter().find(|s| s.name == name)
            }
        })
    }

    /// Names of the top-level movements, in file order.
    pub fn movement_names(&self) -> Vec<&str> {
        self.movements.iter().map(|m| m.name.as_str()).collect()
    }
}

/// A piece of prompt text that came from a facet file or was written inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facet {
    /// The key or name the piece used (`coder`, `review`, or the inline text's first line).
    pub name: String,
    /// The resolved text.
    pub text: String,
    /// Where the text came from: a file, or `None` when it was inline.
    pub path: Option<PathBuf>,
}

/// How a movement's conversation relates to earlier visits of the same movement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// Keep the conversation of earlier visits (takt default).
    #[default]
    Continue,
    /// Start a fresh conversation on every visit.
    Refresh,
}

/// One step of a piece.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Movement {
    /// The movement's name, unique in the piece; rules lead to it by this name.
    pub name: String,
    /// Who the model is in this movement; the start of the system message.
    pub persona: Option<Facet>,
    /// Rules of conduct added to the system message (takt `policy`).
    pub policies: Vec<Facet>,
    /// Reference text added to the system message (takt `knowledge`).
    pub knowledge: Vec<Facet>,
    /// The instruction template; template variables (`{task}` …) are filled at run time.
    pub instruction: Option<Facet>,
    /// Whether Write/Edit are offered.
    pub edit: bool,
    /// Tool names offered to the model; may contain the `mcp__*` wildcard. For takt pieces this
    /// is taken from `allowed_tools` or `provider_options.*.allowed_tools`.
    pub allowed_tools: Vec<String>,
    /// Bash allowlist of program names; `None` means the configured default.
    pub allowed_commands: Option<Vec<String>>,
    /// SSH connection ids this movement may use; `None` (omitted) and `[]` both deny all.
    pub allowed_ssh_connections: Option<Vec<String>>,
    /// The transition rules, in order: the first that matches decides the next movement.
    pub rules: Vec<Rule>,
    /// Engine-internal fallback target (context overflow, no control outcome).
    pub default_next: Option<Target>,
    /// Consecutive visits allowed before the run ends `loop_detected`; `None`: the
    /// configured `engine.default_max_consecutive_revisits` (3).
    pub max_consecutive_revisits: Option<u32>,
    /// Whether the previous movement's answer is carried into this one (default true).
    pub pass_previous_response: bool,
    /// Whether a revisit keeps the conversation of the earlier visits.
    pub session: SessionMode,
    /// The reports the movement must write before it ends.
    pub output_contracts: Vec<OutputContract>,
    /// Checks the model is told to make before it finishes (takt `quality_gates` written as
    /// text).
    pub quality_gates: Vec<String>,
    /// Shell checks the engine runs in the sandbox after the movement ends (TAKT workflows'
    /// `quality_gates` entries with `type: command`); a failing one sends the movement round
    /// again with the failure as its previous response.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_gates: Vec<CommandGate>,
    /// TAKT workflows' companion reviewers declared on the step (fixed, pool and moderator
    /// names). Maestro does not run them, as TAKT does not by default; a run records a warning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub companions: Vec<String>,
    /// Non-empty for a parallel parent: the sub-movements run concurrently and the parent's
    /// `all()` / `any()` rules aggregate their outcomes.
    pub parallel: Vec<Movement>,
    /// Graph dialect: the JSON Schema the answer's frontmatter must satisfy.
    pub frontmatter_schema: Option<serde_json::Value>,
    /// What runs the movement: an agent (every piece's movements), or one of the TAKT
    /// workflow step kinds the engine does not run yet, kept whole for when it does.
    #[serde(default, skip_serializing_if = "StepKind::is_agent")]
    pub kind: StepKind,
    /// TAKT workflows: what a selector decides at run time (a dynamic parallel step's pool
    /// items, a step's `dynamic_facets`); `None` for everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<Box<crate::dynamic::Dynamic>>,
    /// TAKT workflows: the agent step's `structured_output`, its schema resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    /// TAKT workflows: `delay_before_ms`, waited before the step runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_before_ms: Option<u64>,
    /// TAKT workflows: `completion_retry`, a completeness check of the step's answer by a
    /// fresh judge call, and bounded retries of the step in its conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_retry: Option<CompletionRetry>,
}

/// A TAKT step's `completion_retry`: after each answer a completion judge says whether the
/// instruction's obligations are closed; an incomplete answer is retried in the same
/// conversation with `retry_instruction` and the judge's gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRetry {
    /// The instruction facet telling the step how to close the gaps.
    pub retry_instruction: Facet,
    /// Retries made whatever the judge says (0–4; default 0).
    pub min_retry: u32,
    /// The most retries (default 4).
    pub max_retry: u32,
}

/// A TAKT agent step's `structured_output: {schema_ref}`: its answer must be one JSON value
/// valid against `schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructuredOutput {
    /// The `schema_ref` as written (a key of the workflow's `schemas`, or a schema name).
    pub schema_ref: String,
    /// The schema name it resolved to (`<name>.json`).
    pub schema_name: String,
    /// The JSON Schema.
    pub schema: serde_json::Value,
}

/// What runs a movement. Everything but [`StepKind::Agent`] comes from TAKT workflows
/// (v0.36 and later) and carries the validated step definition as JSON, positions removed and
/// parameters already substituted, so that a later engine can execute it without reloading
/// the file; until then a run reaching one ends with an error naming the step kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "definition", rename_all = "snake_case")]
pub enum StepKind {
    /// A model call loop with the movement's persona, instruction and tools (and, for a
    /// parallel parent, its sub-movements).
    #[default]
    Agent,
    /// `kind: workflow_call`: runs another workflow (`call`, `args`, `vars`) and routes on the
    /// label it returns; the called workflow is loaded with its arguments at load time.
    WorkflowCall(Box<WorkflowCall>),
    /// `parallel: {fixed, pool, selection}`: a selector picks pool items each round.
    DynamicParallel(serde_json::Value),
    /// `team_leader`: a leader splits the task into parts that run as sub-movements of the
    /// step, batch after batch.
    TeamLeader(serde_json::Value),
    /// `arpeggio`: the same step over each batch of a data source, merged.
    Arpeggio(serde_json::Value),
    /// `kind: system` / `mode: system`: engine-side inputs and effects, no model call.
    System(serde_json::Value),
}

/// A `kind: workflow_call` step, resolved when the calling workflow loads: the called
/// workflow with the call's `args` substituted into its `subworkflow.params` (and its own
/// calls resolved the same way), so a run never reads a workflow file again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowCall {
    /// The validated step definition, positions removed and parameters substituted.
    pub definition: serde_json::Value,
    /// The called workflow, loaded with the call's arguments.
    pub callee: Piece,
    /// The call's scalar `vars`, as text; they are inherited by nested calls, which override
    /// a key by declaring it again, and `{var:name}` renders them in prompts.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub vars: std::collections::BTreeMap<String, String>,
}

impl StepKind {
    /// True for a movement an agent runs.
    pub fn is_agent(&self) -> bool {
        matches!(self, StepKind::Agent)
    }

    /// The TAKT name of the step kind, as errors name it.
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Agent => "agent",
            StepKind::WorkflowCall(_) => "workflow_call",
            StepKind::DynamicParallel(_) => "dynamic parallel",
            StepKind::TeamLeader(_) => "team_leader",
            StepKind::Arpeggio(_) => "arpeggio",
            StepKind::System(_) => "system",
        }
    }
}

impl Movement {
    /// True for a parallel parent, whose sub-movements run concurrently.
    pub fn is_parallel(&self) -> bool {
        !self.parallel.is_empty()
    }
}

/// A transition rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// When the rule applies.
    pub condition: Condition,
    /// `None` only for parallel sub-movement rules, whose `next` the parent decides.
    pub next: Option<Target>,
    /// takt: the run ends asking the user when this rule matches.
    pub requires_user_input: bool,
    /// takt: the rule counts only in an interactive run (`engine.interactive`); otherwise it is
    /// left out of the rule tags offered to the model.
    pub interactive_only: bool,
    /// Extra text shown with the rule (takt `appendix`).
    pub appendix: Option<String>,
    /// Graph dialect: the edge prompt (`{{{field}}}` filled from the frontmatter) handed to the
    /// next role.
    pub prompt: Option<String>,
}

/// The condition of a rule, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Condition {
    /// A plain description: shown to the model (maestro), matched by tag or judged (takt).
    Text(String),
    /// `ai("…")`: judged by the model against the answer.
    Ai(String),
    /// `all("A")` / `all("A", "B")`: every sub-movement matched (positionally when several).
    All(Vec<String>),
    /// `any("A")` / `any("A", "B")`: at least one sub-movement matched one of the listed
    /// conditions, in any place (not positional).
    Any(Vec<String>),
    /// Graph dialect: the `$status` value this edge is keyed on; `_` is unconditional.
    Status(String),
    /// TAKT workflows: a `when(…)` state predicate over the run's context, effects and
    /// structured outputs, alone or joined with `&&` to a label or an aggregate (`base`).
    When {
        /// The label or aggregate that must match as well, if any.
        base: Option<Box<Condition>>,
        /// The predicate inside `when(…)`, as written.
        predicate: String,
    },
}

/// Where a rule leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Go on with the named movement.
    Movement(String),
    /// End the run successfully (`COMPLETE`, `$END`).
    Complete,
    /// End the run as aborted (`ABORT`).
    Abort,
    /// End the run asking the user (`ASK`).
    Ask,
    /// Wait for spawned subtasks (maestro `WAIT_SUBTASKS`).
    WaitSubtasks,
    /// TAKT workflows: end the called workflow with this label of its `subworkflow.returns`
    /// (`return: <label>`); the calling step's rules route on it.
    Return(String),
}

impl Target {
    /// The sentinel `text` spells (`COMPLETE`, `ABORT`, `ASK`, `WAIT_SUBTASKS`), if it is one.
    /// Loaders read a `next` through this once; past loading a target is never a string again.
    pub fn sentinel(text: &str) -> Option<Target> {
        match text {
            "COMPLETE" => Some(Target::Complete),
            "ABORT" => Some(Target::Abort),
            "ASK" => Some(Target::Ask),
            "WAIT_SUBTASKS" => Some(Target::WaitSubtasks),
            _ => None,
        }
    }

    /// The spelling used in piece files and in the `transition` tool's enum.
    pub fn label(&self) -> &str {
        match self {
            Target::Movement(name) => name,
            Target::Complete => "COMPLETE",
            Target::Abort => "ABORT",
            Target::Ask => "ASK",
            Target::WaitSubtasks => "WAIT_SUBTASKS",
            Target::Return(label) => label,
        }
    }
}

/// A report the movement must write into the run's report directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputContract {
    /// File name inside the report dir, e.g. `plan.md`.
    pub name: String,
    /// The label form's key (`Summary: summary.md`), if used.
    pub label: Option<String>,
    /// The report format text (resolved from `report_formats` or inline).
    pub format: Option<Facet>,
}

/// A `type: command` quality gate: a shell command that must exit 0 once the movement ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandGate {
    /// The gate's name, as failures name it.
    pub name: String,
    /// The shell command, run by the sandbox's shell.
    pub command: String,
    /// The directory it runs in, relative to the workspace (`.` when omitted).
    pub cwd: String,
    /// How long it may run, in milliseconds (TAKT's default: 300,000).
    pub timeout_ms: u64,
}

/// A takt loop monitor: counts cycles through `cycle` and runs `judge` at `threshold`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopMonitor {
    /// The movement names that make up the watched cycle, in order.
    pub cycle: Vec<String>,
    /// The judge runs each time the cycle has completed this many times.
    pub threshold: u32,
    /// The judge, as a movement whose rules pick the next movement.
    pub judge: Movement,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sentinel_reads_back_from_its_label_and_a_movement_name_does_not() {
        for target in [
            Target::Complete,
            Target::Abort,
            Target::Ask,
            Target::WaitSubtasks,
        ] {
            assert_eq!(Target::sentinel(target.label()), Some(target));
        }
        assert_eq!(Target::sentinel("complete"), None);
        assert_eq!(Target::sentinel("review"), None);
    }
}
