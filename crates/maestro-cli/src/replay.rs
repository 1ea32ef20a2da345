//! `maestro replay ID`: drives a finished run again from its record, through the app's one run
//! path, with no model call and no tool run, and checks that it reaches the same movements,
//! transitions and status.

use anyhow::{Context as _, anyhow};
use maestro_app::{
    EndReason, JobQueue, JobStatus, PoolSize, RunEvent, RunKind, RunOutcome, RunRequest,
    StoreError, StoreUrl,
};

use crate::flags::{ConfigFlag, PiecesFlag, RunsFlag, StoreFlag, settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The run's id (its job id).
    id: String,
    #[command(flatten)]
    store: StoreFlag,
    #[command(flatten)]
    runs: RunsFlag,
    #[command(flatten)]
    pieces: PiecesFlag,
    #[command(flatten)]
    config: ConfigFlag,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    crate::common::block_on(replay(args))
}

async fn replay(args: Args) -> anyhow::Result<u8> {
    let config = settings(&args.config, &[&args.runs, &args.pieces])?;
    // A replay writes nothing: a store that does not exist is not created; the run's
    // `events.jsonl` is read instead.
    let store =
        match maestro_app::open_store_existing(args.store.db.as_deref(), &config, PoolSize::Shared)
            .await
        {
            Ok(store) => Some(store),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(anyhow!(maestro_app::error_chain(&e))),
        };
    let history = maestro_app::recorded_run(store.as_ref(), &config.paths.runs_dir, &args.id)
        .await
        .map_err(|e| anyhow!(maestro_app::error_chain(&e)))?;
    // A run stopped by its user ended where it was, not where its piece led: it has nothing to
    // replay until it is continued.
    let last_end = history.iter().rev().find_map(|r| match &r.event {
        RunEvent::RunFinished { status, reason, .. } => Some((*status, reason.clone())),
        _ => None,
    });
    let status = match last_end {
        Some((_, Some(EndReason::Cancelled))) | None => None,
        Some((status, _)) => Some(status),
    };
    let Some(status) = status else {
        eprintln!("error: {}", unfinished(store.as_ref(), &args.id).await);
        return Ok(1);
    };
    // The run path runs every run on a store; a replay without one gets a scratch store that
    // nothing reads.
    let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
    let store = match store {
        Some(store) => store,
        None => {
            let url = StoreUrl::Sqlite {
                path: scratch.path().join("replay.db"),
            };
            maestro_app::open_url(&url, PoolSize::Single).await?
        }
    };
    let request = RunRequest {
        kind: RunKind::Replay {
            id: args.id.clone(),
            history,
        },
        model_from_flag: false,
        live_capacity: None,
    };
    let handle = maestro_app::start(store, config, request).await?;
    match handle.outcome().await {
        RunOutcome::Ended(summary) => {
            eprintln!(
                "replay of run {}: the same movements, transitions and status ({status}); \
                 {} recorded answers and {} recorded tool results reused, 0 model calls, 0 tool \
                 runs",
                args.id, summary.reused_answers, summary.reused_tool_results
            );
            debug_assert_eq!(summary.status, status);
            Ok(0)
        }
        RunOutcome::Failed { error, .. } if error.divergence().is_some() => {
            if let Some(divergence) = error.divergence() {
                eprintln!("replay of run {} diverged: {divergence}", args.id);
            }
            Ok(1)
        }
        RunOutcome::Failed { error, .. } => Err(anyhow!(maestro_app::error_chain(&error))),
        RunOutcome::Fenced { why } => Err(anyhow!("the replay stopped: {why}")),
        RunOutcome::HandedBack => Err(anyhow!("the replay was handed back")),
    }
}

/// Why run `id` has nothing to replay: its job ended without finishing its record (the lease
/// sweep failed it after its process died), or it was stopped, or it is still running.
async fn unfinished(store: Option<&maestro_app::Store>, id: &str) -> String {
    let job = match (store, id.parse()) {
        (Some(store), Ok(job)) => store.job(job).await.ok().flatten(),
        _ => None,
    };
    match job {
        Some(job) if job.status.is_final() && job.status != JobStatus::Cancelled => format!(
            "run {id} ended {} ({}) before its record was finished, so there is nothing to \
             replay; continue it with `maestro run --resume {id}`",
            job.status,
            crate::term::printable(job.reason.as_deref().unwrap_or("no reason recorded"))
        ),
        Some(job) if job.status == JobStatus::Running => {
            format!("run {id} is still running; replay it once it has finished")
        }
        _ => format!(
            "run {id} has not finished (it was stopped, or is still running); continue it with \
             `maestro run --resume {id}`"
        ),
    }
}
