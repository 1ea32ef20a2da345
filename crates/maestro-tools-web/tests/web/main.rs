//! The integration tests of `maestro-tools-web`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

mod install_skill_url;
mod web_ssrf;
mod web_tools;
