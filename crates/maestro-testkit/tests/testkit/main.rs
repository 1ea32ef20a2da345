//! The integration tests of `maestro-testkit`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod browser;
mod oidc_provider;
mod scripted_anthropic;
mod scripted_llm;
