//! Subtasks on the job store: the engine's [`SubtaskHost`] for a run that is a job. A spawn
//! is a child job in the store (fenced on the parent's lease, keyed by the call); the wait
//! reads the children's ends from the store.
//!
//! In a worker, a run whose children are still open parks (`waiting_subtasks`) and holds no
//! slot; the store queues it again when the last child ends. A local `maestro run` has no
//! other worker: its host runs the children itself, in the same process, and the wait waits
//! for them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use maestro_config::Config;
use maestro_engine::{
    HostFuture, SpawnRequest, SpawnedSubtask, SubtaskError, SubtaskHost, SubtaskOutcome,
};
use maestro_store::{Job, JobId, JobStatus, Lease, NewChild, NewJob, Spawned, Store};

use crate::context::ChildRunner;
use crate::piece_store::find_piece_in;
use crate::pieces::AUTO;
use crate::toolbox::load_options;

/// How often a local run waiting for its subtasks looks at the store.
const LOCAL_POLL: Duration = Duration::from_millis(100);

/// The store's side of subtasks for one run (its job's lease).
pub(crate) struct StoreSubtasks {
    store: Store,
    lease: Lease,
    /// The parent job's depth below its root.
    depth: i64,
    /// The parent's workspace, where the children's go.
    workspace: PathBuf,
    config: Arc<Config>,
    /// Set for a local run: its children run in this process.
    local: Option<Arc<dyn ChildRunner>>,
}

impl StoreSubtasks {
    /// The host for the run of `job` under `lease`, or `None` when subtasks are off
    /// (`subtasks.max_depth: 0`).
    pub(crate) fn for_job(
        store: &Store,
        lease: &Lease,
        job: &Job,
        workspace: PathBuf,
        config: &Arc<Config>,
        local: Option<Arc<dyn ChildRunner>>,
    ) -> Option<StoreSubtasks> {
        (config.subtasks.max_depth > 0).then(|| StoreSubtasks {
            store: store.clone(),
            lease: lease.clone(),
            depth: job.depth,
            workspace,
            config: Arc::clone(config),
            local,
        })
    }

    async fn check_piece(&self, piece: &str) -> Result<(), SubtaskError> {
        let opts = load_options(&self.config);
        find_piece_in(&self.store, piece, &self.config.paths.pieces_dirs, &opts)
            .await
            .map(drop)
            .map_err(|e| {
                SubtaskError::Refused(format!(
                    "{e}; name one of the known pieces, or leave `piece` out to have one chosen"
                ))
            })
    }

    async fn spawn_child(&self, request: SpawnRequest) -> Result<SpawnedSubtask, SubtaskError> {
        let max_depth = i64::from(self.config.subtasks.max_depth);
        if self.depth >= max_depth {
            return Err(SubtaskError::Refused(format!(
                "this run is itself a subtask {} level{} deep, and subtasks may go {max_depth} \
                 level{} deep (`subtasks.max_depth`); do this part here instead",
                self.depth,
                if self.depth == 1 { "" } else { "s" },
                if max_depth == 1 { "" } else { "s" },
            )));
        }
        let piece = match request.piece {
            Some(piece) => {
                self.check_piece(&piece).await?;
                piece
            }
            None => AUTO.to_string(),
        };
        let child = NewChild {
            key: request.key,
            title: request.title,
            piece,
            task: request.task,
            parent_workspace: Some(self.workspace.display().to_string()),
            max_children: i64::from(self.config.subtasks.max_children),
            max_attempts: NewJob::DEFAULT_MAX_ATTEMPTS,
        };
        let job = match self.store.spawn_child(&self.lease, child).await {
            Ok(Spawned::Created(job) | Spawned::Existing(job)) => job,
            Ok(Spawned::Full { children }) => {
                return Err(SubtaskError::Refused(format!(
                    "this run already has {children} subtasks, the most one run may spawn \
                     (`subtasks.max_children`); wait for them, or do the rest here"
                )));
            }
            Err(e) => return Err(SubtaskError::Failed(e.to_string())),
        };
        tracing::info!(parent = %self.lease.job_id, child = %job.id, "spawned a subtask");
        if let Some(local) = &self.local {
            local.run(job.id);
        }
        Ok(spawned(&job))
    }

    async fn children_ended(
        &self,
        ids: &[String],
    ) -> Result<Option<Vec<SubtaskOutcome>>, SubtaskError> {
        let ids: Vec<JobId> = ids
            .iter()
            .map(|id| {
                id.parse()
                    .map_err(|_| SubtaskError::Failed(format!("`{id}` is not a job id")))
            })
            .collect::<Result<_, _>>()?;
        loop {
            let children = self
                .store
                .children(self.lease.job_id)
                .await
                .map_err(|e| SubtaskError::Failed(e.to_string()))?;
            let mut outcomes = Vec::new();
            let mut open = Vec::new();
            for id in &ids {
                match children.iter().find(|c| c.id == *id) {
                    Some(child) if child.status.is_final() => outcomes.push(outcome(child)),
                    Some(child) => open.push(child.clone()),
                    None => {
                        return Err(SubtaskError::Failed(format!(
                            "subtask {id} is not a child of job {}",
                            self.lease.job_id
                        )));
                    }
                }
            }
            if open.is_empty() {
                return Ok(Some(outcomes));
            }
            let Some(local) = &self.local else {
                return Ok(None);
            };
            for child in &open {
                local.run(child.id);
                if child.status == JobStatus::WaitingInput {
                    local.tell_waiting(child);
                }
            }
            tokio::time::sleep(LOCAL_POLL).await;
        }
    }
}

impl SubtaskHost for StoreSubtasks {
    fn spawn(&self, request: SpawnRequest) -> HostFuture<'_, SpawnedSubtask> {
        Box::pin(self.spawn_child(request))
    }

    fn ended<'a>(&'a self, ids: &'a [String]) -> HostFuture<'a, Option<Vec<SubtaskOutcome>>> {
        Box::pin(self.children_ended(ids))
    }
}

/// What `SpawnSubTask` answers for `job`.
fn spawned(job: &Job) -> SpawnedSubtask {
    let index = job.child_index.unwrap_or(0);
    SpawnedSubtask {
        id: job.id.to_string(),
        index,
        title: job.title.clone().unwrap_or_default(),
        workspace: format!("subtasks/{index}/"),
    }
}

/// How an ended child is told to its parent: its run's result, else why it ended.
fn outcome(job: &Job) -> SubtaskOutcome {
    let result = job
        .result
        .as_ref()
        .and_then(|r| r.get("result"))
        .and_then(|r| r.as_str())
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .or_else(|| job.reason.clone())
        .unwrap_or_default();
    let base = spawned(job);
    SubtaskOutcome {
        id: base.id,
        index: base.index,
        title: base.title,
        status: job.status.as_str().to_string(),
        result,
        workspace: base.workspace,
    }
}
