//! The integration tests of `maestro-llm`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod anthropic;
mod cached_usage;
mod context;
mod embeddings;
mod images;
mod json_mode;
mod parsers_prop;
mod retries;
mod runaway;
mod secrets;
mod streaming;
