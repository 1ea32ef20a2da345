//! The Anthropic Messages API: [`Anthropic`], the [`Provider`](crate::Provider) that speaks it,
//! and [`translate`], the JSON-level translation between it and the Chat Completions API (which
//! the provider uses, and a gateway serving OpenAI-compatible clients from an Anthropic upstream
//! can use too).

mod client;
pub mod translate;

pub use client::{ANTHROPIC_VERSION, Anthropic, DEFAULT_BASE_URL, DEFAULT_CONTEXT_LENGTH};
