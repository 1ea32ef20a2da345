//! `maestro serve`: the HTTP API over Maestro's job system (`maestro-app`), its live event
//! stream, and its operations endpoints. This crate holds HTTP alone: every use case is a call
//! into `maestro-app`.
//!
//! See `docs/server.md` for the API, the stream, limits and deployment.

mod access;
mod auth;
mod error;
mod events;
mod extract;
mod files;
mod gateway;
mod jobs;
mod knowledge;
mod metrics;
mod oidc;
mod openapi;
mod ops;
mod pieces;
mod router;
mod schedules;
mod share;
mod state;
mod system;

pub use error::ApiError;
pub use router::{openapi_document, router, serve};
pub use state::{Limits, ServerState};
