//! The integration tests of `maestro-tools`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod core_paths;
mod core_tools;
mod review_merge;
mod skills_install;
mod special_files;
