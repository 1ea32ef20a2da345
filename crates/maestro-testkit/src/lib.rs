//! Test support shared by Maestro's crates: a scripted OpenAI-compatible server speaking real
//! HTTP/SSE on 127.0.0.1 ([`ScriptedLlm`], scripted with [`Turn`]s), and temporary workspaces
//! ([`TempWorkspace`]).

mod render;
mod scripted;
mod turn;
mod workspace;

pub use scripted::{RecordedRequest, ScriptedLlm, ScriptedLlmBuilder};
pub use turn::Turn;
pub use workspace::TempWorkspace;
