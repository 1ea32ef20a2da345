//! The integration tests of `maestro-app`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod access;
mod event_writer;
mod files;
mod input;
mod knowledge;
mod pieces_config;
mod schedules;
mod subscription;
mod system_effects;
mod tool_specs;
mod watch;
