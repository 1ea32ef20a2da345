//! The tool trait and the context a call runs in.

use std::borrow::Cow;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use maestro_protocol::ToolSpec;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
pub use tokio_util::sync::CancellationToken;

/// The future a [`Tool::call`] returns: boxed, so the trait stays object-safe, and `Send`, so a
/// call can run on any runtime thread.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool call produced. `ok: false` carries an error the model can read and act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Whether the call did what was asked; `false` makes `output` an error message.
    pub ok: bool,
    /// Text handed back to the model (already capped; see `truncated`).
    pub output: String,
    /// True when `output` was cut; the text then ends with an explicit marker.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl ToolOutput {
    /// A successful result with this text, not truncated.
    pub fn ok(output: impl Into<String>) -> Self {
        ToolOutput {
            ok: true,
            output: output.into(),
            truncated: false,
        }
    }
    /// A failed call: `message` says what went wrong and what to send instead.
    pub fn error(message: impl Into<String>) -> Self {
        ToolOutput {
            ok: false,
            output: message.into(),
            truncated: false,
        }
    }
}

pub use maestro_protocol::{ChecklistItem, RunScratch};

/// Who chose the workspace, which decides where a movement with `edit: true` may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceKind {
    /// Laid out for the run (`input/`, `output/`, `logs/`, …): writes go only under the
    /// configured `tools.writable_dirs` (default `output/`).
    #[default]
    Job,
    /// A directory the user named (`maestro run --workspace DIR`, a job submitted with a
    /// workspace): writes may go anywhere inside it, still never outside it.
    Named,
}

/// Everything a tool call may depend on. Built by the engine per movement (or by
/// `maestro tools call`), so both take the same code path.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The job workspace root; relative paths resolve against it, nothing escapes it.
    pub workspace: PathBuf,
    /// Who chose the workspace: where `edit` lets a movement write ([`ToolContext::writable_dirs`]).
    pub workspace_kind: WorkspaceKind,
    /// The movement's `edit` flag: Write/Edit (and writable SQLite) only when true.
    pub edit: bool,
    /// Bash allowlist of program names; `None` means the configured default.
    pub allowed_commands: Option<Vec<String>>,
    /// SSH connection ids the movement may use (`None`/empty deny all, `*` any registered).
    pub allowed_ssh_connections: Option<Vec<String>>,
    /// Fires when the run is cancelled; a tool stops its work (and any process it started) when
    /// it does, and the registry then answers that the call was cancelled.
    pub cancel: CancellationToken,
    /// The run's scratch state (the checklist), shared by the run's movements; the engine
    /// records it in the run's events, so it survives a resume.
    pub scratch: Arc<Mutex<RunScratch>>,
}

impl ToolContext {
    /// The workspace-relative directories a movement with `edit: true` may write: the whole
    /// workspace (`.`) when the user named it, else `configured` (`tools.writable_dirs`).
    pub fn writable_dirs<'a>(&self, configured: &'a [String]) -> Cow<'a, [String]> {
        match self.workspace_kind {
            WorkspaceKind::Job => Cow::Borrowed(configured),
            WorkspaceKind::Named => Cow::Owned(vec![".".to_string()]),
        }
    }
}

/// A tool the model can call, as the registry and the engine see it.
///
/// Built-in tools do not implement this trait by hand: they implement [`TypedTool`] and get it
/// from the blanket implementation, so their schema always comes from their input type. The one
/// exception is a tool whose schema is only known at runtime (an MCP server's tool).
///
/// An implementation promises: it validates its own input and answers bad input with
/// `ToolOutput { ok: false, .. }` that says what to fix (never a panic); it stays inside
/// `ctx.workspace` and the movement's permissions; it stops when `ctx.cancel` fires; and it caps
/// its output, setting `truncated`.
pub trait Tool: Send + Sync {
    /// Name, one-sentence description and input JSON Schema.
    fn spec(&self) -> ToolSpec;

    /// Runs one call with the model's arguments (`input`, not yet checked against the schema)
    /// and answers with its output; failures are outputs with `ok: false`, never panics.
    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, ToolOutput>;

    /// The time limit the registry applies to one call; `None` means the configured
    /// `call_timeout`. Tools that enforce their own, longer limit (Bash) return it here plus a
    /// margin so that their own, more informative timeout fires first.
    fn time_limit(&self) -> Option<std::time::Duration> {
        None
    }
}

/// The one way to define a built-in tool: a typed input and a function from it to an output.
///
/// The model sees `NAME`, `DESCRIPTION` and the JSON Schema of [`Input`](Self::Input) (doc
/// comments become field descriptions, `Option` fields are optional). The blanket
/// [`Tool`] implementation parses the model's arguments into `Input` once, and answers input
/// that does not fit with one uniform error naming the tool, what was wrong and the fields it
/// expects, so [`run`](Self::run) only ever sees well-formed input.
///
/// An implementation promises what [`Tool`] asks for: errors the model can act on, staying inside
/// the workspace and the movement's permissions, stopping on `ctx.cancel`, capped output.
///
/// ```
/// use maestro_tools::{ToolContext, ToolOutput, TypedTool};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct EchoInput {
///     /// The text to send back.
///     text: String,
/// }
///
/// struct Echo;
///
/// impl TypedTool for Echo {
///     type Input = EchoInput;
///     const NAME: &'static str = "Echo";
///     const DESCRIPTION: &'static str = "Send the text back.";
///
///     async fn run(&self, _ctx: &ToolContext, input: EchoInput) -> ToolOutput {
///         ToolOutput::ok(input.text)
///     }
/// }
/// ```
pub trait TypedTool: Send + Sync {
    /// What the model sends; its JSON Schema is the tool's input schema.
    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    /// The name the model calls the tool by.
    const NAME: &'static str;
    /// One sentence; it rides every model call, details go in `docs/tools/<NAME>.md`.
    const DESCRIPTION: &'static str;

    /// Runs one call with parsed input.
    fn run(&self, ctx: &ToolContext, input: Self::Input)
    -> impl Future<Output = ToolOutput> + Send;

    /// See [`Tool::time_limit`].
    fn time_limit(&self) -> Option<std::time::Duration> {
        None
    }
}

impl<T: TypedTool> Tool for T {
    fn spec(&self) -> ToolSpec {
        crate::input::spec_for::<T::Input>(T::NAME, T::DESCRIPTION)
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match crate::input::parse_input::<T::Input>(T::NAME, input) {
                Ok(input) => self.run(ctx, input).await,
                Err(error) => error,
            }
        })
    }

    fn time_limit(&self) -> Option<std::time::Duration> {
        <T as TypedTool>::time_limit(self)
    }
}
