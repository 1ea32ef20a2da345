//! Test support, not shipped: the store's tests that need real processes live here, with the
//! child programs they start (`src/bin/`), so that no production crate carries a test program.
//!
//! - `maestro-store-crash-worker URL WORKER LEASE_MS`: claims a job and appends events until it
//!   is killed (`tests/crash.rs`).
//! - `maestro-store-open URL`: opens (creates and migrates) a store, prints `opened` and exits
//!   (`tests/concurrent_open.rs`).
