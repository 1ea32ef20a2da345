//! The integration tests of `maestro-gateway`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod anthropic;
mod cached_pricing;
mod keys;
mod openai_client;
mod proxy;
mod upstream_faults;
