//! The children of a local `maestro run`: a local run has no worker, so the process runs the
//! subtasks its run spawns itself, each through the one run path, with the same context.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use maestro_store::{Claimed, Job, JobId, JobQueue, JobStatus, StoreError};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::completer::Completer;
use crate::context::{ChildRunner, JobContext};
use crate::lease_owner::LeaseOwner;
use crate::run::{Execution, Target, execute};

/// The children a local run runs in its own process, through the worker's job path.
pub(crate) struct LocalChildren {
    /// Itself, for the tasks it spawns.
    me: std::sync::Weak<LocalChildren>,
    context: Arc<JobContext>,
    /// This process as a lease owner.
    owner: LeaseOwner,
    running: Mutex<HashSet<JobId>>,
    told: Mutex<HashSet<JobId>>,
    tasks: Mutex<JoinSet<()>>,
    /// Cancelled to hand the children back (the parent stopped without an end).
    hand_back: CancellationToken,
    /// Writes the children's ends.
    completer: Completer,
}

impl std::fmt::Debug for LocalChildren {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalChildren")
            .field("owner", &self.owner)
            .finish()
    }
}

impl LocalChildren {
    /// Children run with `context` (the grandchildren they spawn run here too).
    pub(crate) fn new(parent: &JobContext, owner: LeaseOwner) -> Arc<LocalChildren> {
        let (completer, _writing) = Completer::start(parent.store.clone());
        Arc::new_cyclic(|me: &std::sync::Weak<LocalChildren>| {
            let runner: std::sync::Weak<dyn ChildRunner> = me.clone();
            LocalChildren {
                me: me.clone(),
                context: Arc::new(parent.for_children(runner)),
                owner,
                running: Mutex::default(),
                told: Mutex::default(),
                tasks: Mutex::default(),
                hand_back: CancellationToken::new(),
                completer,
            }
        })
    }

    fn me(&self) -> Option<Arc<LocalChildren>> {
        self.me.upgrade()
    }

    /// Runs the child `id` here unless this process already does: claimed when it is queued,
    /// or when its lease lapsed or its local process is gone (a resumed parent's children).
    fn run_here(self: &Arc<Self>, id: JobId) {
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        if !running.insert(id) {
            return;
        }
        drop(running);
        let this = Arc::clone(self);
        let task = async move {
            let claimed = match this.claim(id).await {
                Ok(Some(claimed)) => claimed,
                Ok(None) => {
                    // Someone else runs it, or it waits for a person: look again later.
                    if let Ok(mut running) = this.running.lock() {
                        running.remove(&id);
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(child = %id, "claiming a subtask failed: {e}");
                    if let Ok(mut running) = this.running.lock() {
                        running.remove(&id);
                    }
                    return;
                }
            };
            let execution = Execution {
                target: Target::Job(Box::new(claimed)),
                stop: None,
                hand_back: this.hand_back.clone(),
                completer: this.completer.clone(),
            };
            let _ = Box::pin(execute(&this.context, execution)).await;
            if let Ok(mut running) = this.running.lock() {
                running.remove(&id);
            }
        };
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.spawn(task);
        }
    }

    async fn claim(&self, id: JobId) -> Result<Option<Claimed>, StoreError> {
        let store = &self.context.store;
        let owner = self.owner.to_string();
        if let Some(claimed) = store
            .claim_job(id, &owner, self.context.leases.lease_for(), false)
            .await?
        {
            return Ok(Some(claimed));
        }
        let gone = store.job(id).await?.is_some_and(|job| {
            job.status == JobStatus::Running
                && job
                    .lease_owner
                    .as_deref()
                    .is_some_and(LeaseOwner::is_gone_process)
        });
        if gone {
            return store
                .take_over_job(id, &owner, self.context.leases.lease_for())
                .await;
        }
        Ok(None)
    }

    /// Says once, in the log, that a child waits for an answer and how to give it.
    fn tell(&self, child: &Job) {
        let first = self.told.lock().is_ok_and(|mut told| told.insert(child.id));
        if first {
            tracing::warn!(
                "subtask {} waits for an answer; give it with `maestro jobs answer {} \"…\"`",
                child.id,
                child.id
            );
        }
    }

    /// After the parent's run: stops the children when the parent was stopped (cancelling
    /// them and theirs in the store), then waits for every child this process runs to write
    /// its end or hand its job back.
    pub(crate) async fn finish(&self, parent: JobId, parent_stopped: bool) {
        if parent_stopped {
            let store = &self.context.store;
            if let Ok(children) = store.children(parent).await {
                for child in children.iter().filter(|c| !c.status.is_final()) {
                    if let Err(e) = store.cancel(child.id, &self.owner.to_string()).await {
                        tracing::warn!(child = %child.id, "cancelling a subtask failed: {e}");
                    }
                }
            }
        }
        // Children may spawn children while this waits: take the set until it stays empty.
        loop {
            let mut tasks = match self.tasks.lock() {
                Ok(mut tasks) => std::mem::take(&mut *tasks),
                Err(_) => return,
            };
            if tasks.is_empty() {
                return;
            }
            while tasks.join_next().await.is_some() {}
        }
    }
}

impl ChildRunner for LocalChildren {
    fn run(&self, id: JobId) {
        if let Some(me) = self.me() {
            me.run_here(id);
        }
    }

    fn tell_waiting(&self, child: &Job) {
        self.tell(child);
    }
}
