//! The integration tests of `maestro-engine`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod arpeggio;
mod companions;
mod completion_retry;
mod dynamic_steps;
mod graph_dialect;
mod images;
mod limits;
mod maestro_dialect;
mod quality_gates;
mod resume;
mod review;
mod review_scope;
mod sandbox_record;
mod subtasks;
mod system_steps;
mod takt_dialect;
mod takt_permissions;
mod team_leader;
mod workflow_call;
mod workflow_steps;
