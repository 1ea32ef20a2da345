//! The integration tests of `maestro-sandbox`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod sandbox_allowlist;
mod sandbox_escape;
mod sandbox_exec_capable;
mod sandbox_fallback;
mod sandbox_hardening;
mod sandbox_policy_props;
