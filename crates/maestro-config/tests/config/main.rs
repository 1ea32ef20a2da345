//! The integration tests of `maestro-config`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod docs;
mod gateway;
mod load;
mod overlay;
mod provider;
mod robust;
