//! The Anthropic Messages API: [`translate`], the JSON-level translation between it and the
//! Chat Completions API.

pub mod translate;
