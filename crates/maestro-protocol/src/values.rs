//! Small value types that the events carry: how tools are offered, the piece's dialect, the
//! checklist the tools keep for a run, and how a child run ended.

use serde::{Deserialize, Serialize};

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// The `tools` request parameter and `tool_calls` in the answer.
    #[default]
    Native,
    /// For models without native tool calling: the model answers with one JSON object that
    /// names a tool and its arguments (or gives a final answer), constrained by
    /// `response_format: json_schema`, and the client turns it into the same
    /// [`ToolCall`](crate::ToolCall).
    Json,
    /// Start with `Native` and let the model's answers decide, once per endpoint and model: a
    /// tool call back settles `Native`; an endpoint refusing the `tools` parameter (HTTP 400
    /// naming tools), or a plain-text answer where a tool call was required (see
    /// `Provider::switch_to_json_tools` in `maestro-llm`), settles `Json` and the request is sent again once.
    /// No separate probe request is sent.
    Auto,
}

/// The YAML dialect a piece was written in. It decides how a movement's outcome is read; the
/// rest of the engine is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// Native format: movements end through the `transition` / `complete` control tools.
    Maestro,
    /// TAKT format: movements end with an answer; `[MOVEMENT:N]` tags or a judge pick the rule.
    Takt,
    /// Roles + graph format: answers carry YAML frontmatter whose `$status` picks the edge.
    Graph,
}

impl Dialect {
    /// The dialect's name as pieces, events and `--dialect` spell it: `maestro`, `takt`, `graph`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Maestro => "maestro",
            Dialect::Takt => "takt",
            Dialect::Graph => "graph",
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "maestro" => Ok(Dialect::Maestro),
            "takt" => Ok(Dialect::Takt),
            "graph" => Ok(Dialect::Graph),
            other => Err(format!(
                "unknown dialect `{other}`; known: maestro, takt, graph"
            )),
        }
    }
}

/// An image a tool result showed the model, as the run's record names it: by the SHA-256 of its
/// bytes, which the run keeps once beside the record (`images/<sha256>` in the run directory).
/// Never a `data:` URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// The SHA-256 of the encoded image, in lowercase hex.
    pub sha256: String,
    /// Its media type, e.g. `image/png`.
    pub media_type: String,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// One checklist item (CreateChecklist / CheckItem / GetChecklist).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChecklistItem {
    /// What is to be done, as the model wrote it.
    pub text: String,
    /// True while the item is marked done (`CheckItem`).
    pub done: bool,
    /// A short note given with `CheckItem` (e.g. where the result is), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Tool state that belongs to the run and survives from one movement to the next. The engine
/// stores it in the run state after every tool call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunScratch {
    /// The run's checklist, in the order `CreateChecklist` gave it.
    pub checklist: Vec<ChecklistItem>,
}

/// How a child run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtaskOutcome {
    /// The child job's id.
    pub id: String,
    /// The child's number among the parent's subtasks, as `SpawnSubTask` answered it.
    pub index: i64,
    /// The child's title: the one given to `SpawnSubTask`, else the first line of its task.
    pub title: String,
    /// The child job's status: `completed`, `aborted`, `exceeded`, `failed` or `cancelled`.
    pub status: String,
    /// Its result, or why it ended so.
    pub result: String,
    /// Its workspace, relative to the parent's.
    pub workspace: String,
}
