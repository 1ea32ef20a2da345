//! The integration tests of `maestro-cli`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod budgets;
mod config_cli;
mod dist_script;
mod documents_cli;
mod gateway_cli;
mod jobs_answer;
mod jobs_cli;
mod jobs_crash;
mod jobs_outputs;
mod jobs_spend;
mod jobs_subtasks;
mod jobs_workers;
mod knowledge_cli;
mod no_hang_cli;
mod piece_cli;
mod review_resume;
mod run_anthropic;
mod run_calls;
mod run_cli;
mod run_resume;
mod run_workspace;
mod sandbox_python;
mod schedules_cli;
mod serve_api;
mod serve_auth;
mod serve_knowledge;
mod serve_nodes;
mod serve_pieces;
mod serve_web;
mod signals;
mod store_faults;
mod takt_paths;
mod toolbox_cli;
mod tools_call_all;
mod tools_cli;
mod users_cli;
mod validate_garbled;
mod web_ui;
mod workflow_call_resume;
mod workflow_cli;
