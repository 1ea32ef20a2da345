//! Test support shared by Maestro's crates: a scripted OpenAI-compatible server speaking real
//! HTTP/SSE on 127.0.0.1 ([`ScriptedLlm`], scripted with [`Turn`]s), the same for the Anthropic
//! Messages API ([`ScriptedAnthropic`]), temporary workspaces
//! ([`TempWorkspace`]), a real OpenSSH server on a loopback port ([`Sshd`]), a throwaway
//! PostgreSQL cluster ([`PgCluster`]), and a real OpenID Connect provider ([`OidcProvider`],
//! npm `oidc-provider` run by node on 127.0.0.1; see the [`oidc`] module for its setup and use),
//! and a headless Chromium driven over WebDriver ([`Browser`], see the [`browser`] module).

mod anthropic;
mod ask;
pub mod browser;
pub mod oidc;
mod postgres;
mod render;
mod scripted;
mod serving;
mod sshd;
mod turn;
mod workspace;

pub use anthropic::{ANTHROPIC_VERSION, ScriptedAnthropic, ScriptedAnthropicBuilder};
pub use browser::{AxeViolation, Browser, BrowserError, Viewport};
pub use oidc::{OidcClient, OidcError, OidcProvider};
pub use postgres::PgCluster;
pub use scripted::{RecordedRequest, ScriptedLlm, ScriptedLlmBuilder, Timing, listen_loopback};
pub use sshd::Sshd;
pub use turn::Turn;
pub use workspace::TempWorkspace;
