//! Who is asking: every handler takes a [`Caller`], and asks it for the scope it needs and for
//! the jobs it may see.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use maestro_app::{JobId, JobQueue};

use crate::error::ApiError;
use crate::jobs::parse_job_id;
use crate::state::ServerState;

/// The person or token behind a request.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The name the audit log and comments record.
    pub(crate) name: String,
    /// Sees and acts on every job.
    pub(crate) admin: bool,
}

impl FromRequestParts<ServerState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        _parts: &mut Parts,
        _state: &ServerState,
    ) -> Result<Self, Self::Rejection> {
        // Without auth the server listens on loopback only, and whoever reaches it is the
        // machine's own user.
        Ok(Caller {
            name: "local".to_string(),
            admin: true,
        })
    }
}

impl Caller {
    pub(crate) fn require_read(&self) -> Result<(), ApiError> {
        Ok(())
    }

    pub(crate) fn require_write(&self) -> Result<(), ApiError> {
        Ok(())
    }

    /// The job `id` when it exists and the caller may see it; 404 otherwise, so that ids of
    /// other people's jobs do not leak.
    pub(crate) async fn visible_job(
        &self,
        state: &ServerState,
        id: &str,
    ) -> Result<JobId, ApiError> {
        let id = parse_job_id(id)?;
        match state.store().job(id).await? {
            Some(_) if self.admin => Ok(id),
            _ => Err(ApiError::not_found(format!("no job with id {id}"))),
        }
    }
}
