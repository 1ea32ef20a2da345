//! The integration tests of `maestro-store`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

mod auth;
mod batch;
mod budgets;
mod docs;
mod files_watch;
mod gateway;
mod gateway_budgets;
mod gateway_keys;
mod knowledge;
mod pieces_config;
mod store;
mod subtasks;
