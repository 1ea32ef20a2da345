//! The one run path. Every run goes through [`execute`]: a worker's claimed job, a local
//! `maestro run` and its `--resume`, the children a local run runs itself, and `maestro replay`.
//!
//! For a job it chooses the piece and the model, keeps the lease, rebuilds the run from the
//! stored events, runs it through the engine with the store as its durable log (and the live
//! channel as an observer), and writes how it ended — or hands it back, or stops writing when
//! the lease is lost. A replay drives a finished run's record again with the same piece, the
//! same tools and the same engine, and writes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use maestro_config::Config;
use maestro_engine::{
    Engine, EventSink, JsonlLog, RunEnd, RunRecord, RunReport, RunSpec, SubtaskHost,
};
use maestro_llm::Provider;
use maestro_piece::Piece;
use maestro_protocol::{EndReason, EventRecord, RunEvent, RunStatus};
use maestro_store::{
    Claimed, CommentKind, FailDisposition, JobQueue, JobStatus, Lease, Outcome, Store,
};
use tokio_util::sync::CancellationToken;

use crate::completer::Completer;
use crate::context::JobContext;
use crate::live::LiveSink;
use crate::outcome::{RunError, RunOutcome, RunSummary};
use crate::outputs::OutputSync;
use crate::piece_store::{
    available_pieces_in, find_piece_in, stored_live_piece, stored_path, stored_piece_at,
};
use crate::pieces::{AUTO, classify_piece_within, load_piece};
use crate::store_log::{StopLatch, StoreLog};
use crate::subtasks::StoreSubtasks;
use crate::toolbox::{McpSelection, Toolbox};

/// What a run is of.
pub(crate) enum Target {
    /// A job this process claimed.
    Job(Box<Claimed>),
    /// A finished run driven again from its record: no model call, no tool run, nothing
    /// written.
    Replay {
        /// The run's id.
        id: String,
        /// Its recorded events.
        history: Vec<EventRecord>,
    },
}

/// One run to execute, and how its caller steers it.
pub(crate) struct Execution {
    pub target: Target,
    /// Stops the run as its user asked (Ctrl-C, `RunHandle::cancel`): it ends `cancelled`,
    /// and that is recorded.
    pub stop: Option<CancellationToken>,
    /// Hands the run back: it stops where it is and records no end, for the next claim to
    /// resume (a worker shutting down).
    pub hand_back: CancellationToken,
    /// Writes the ends of the process's runs in batches.
    pub completer: Completer,
}

/// Runs one run to its end, a park, a retry, a lost lease or a hand-back, and writes how it
/// ended. The only way a run starts.
pub(crate) async fn execute(ctx: &JobContext, execution: Execution) -> RunOutcome {
    let Execution {
        target,
        stop,
        hand_back,
        completer,
    } = execution;
    match target {
        Target::Replay { id, history } => match replay(ctx, &id, history).await {
            Ok(summary) => RunOutcome::Ended(summary),
            Err(error) => RunOutcome::Failed {
                error,
                requeued: false,
            },
        },
        Target::Job(claimed) => run_job(ctx, claimed, stop, &hand_back, &completer).await,
    }
}

/// What a claimed job's run came to before its end is written.
enum Ran {
    Finished(Box<RunReport>),
    /// The endpoint became unreachable: run it again later.
    Retry(String),
    /// Stopped for a hand-back, no end recorded.
    Suspended,
}

/// `claimed` stays boxed: a future keeps its arguments beside its own copies of them, and this
/// one lives as long as the run.
async fn run_job(
    ctx: &JobContext,
    claimed: Box<Claimed>,
    stop: Option<CancellationToken>,
    hand_back: &CancellationToken,
    completer: &Completer,
) -> RunOutcome {
    let store = &ctx.store;
    let lease = claimed.lease.clone();
    let job_id = claimed.job.id;
    let latch = Arc::new(StopLatch::default());
    let kept = ctx.leases.keep(lease.clone(), Arc::clone(&latch));
    // A hand-back suspends the run: it stops where it is and records no end, so that the
    // process that claims the job next resumes it.
    let suspend = hand_back.child_token();
    let live = ctx.live.open(job_id);
    let steer = Steer {
        latch: &latch,
        suspend: suspend.clone(),
        stop,
        live: Arc::new(LiveSink {
            run: Arc::clone(&live),
        }),
    };
    let ran = async {
        let history = history(store, &lease).await?;
        // Preparing may wait on the endpoint (its model list): a stop asked for meanwhile ends
        // the job there, as a stop during the run does.
        let preparing = prepare(ctx, &claimed, &history, &steer.live);
        let prepared = match &steer.stop {
            Some(stop) => tokio::select! {
                prepared = preparing => prepared?,
                () = stop.cancelled() => return Err(RunError::Cancelled),
            },
            None => preparing.await?,
        };
        run_prepared(ctx, &claimed, prepared, history, steer).await
    }
    .await;
    drop(kept);
    let outcome = record_end(ctx, &claimed, ran, &latch, &suspend, completer).await;
    // The channel closes once the end is written: a subscriber's last item is the run's last
    // event, and the job's status already says how it ended.
    drop(live);
    ctx.live.close(job_id);
    outcome
}

/// Writes how the run of `claimed` ended, and says so.
async fn record_end(
    ctx: &JobContext,
    claimed: &Claimed,
    ran: Result<Ran, RunError>,
    latch: &StopLatch,
    suspend: &CancellationToken,
    completer: &Completer,
) -> RunOutcome {
    let store = &ctx.store;
    let lease = &claimed.lease;
    let job_id = claimed.job.id;
    if suspend.is_cancelled() && !matches!(ran, Ok(Ran::Finished(_))) {
        return match store.release(lease).await {
            Ok(()) => RunOutcome::HandedBack,
            Err(e) => {
                tracing::warn!(job = %job_id, "handing the job back failed: {e}");
                RunOutcome::Fenced {
                    why: format!("handing the job back failed: {e}"),
                }
            }
        };
    }
    if let Some(why) = latch.closed() {
        tracing::info!(job = %job_id, "stopped, writing nothing more: {why}");
        return RunOutcome::Fenced { why };
    }
    match ran {
        Err(error) if error.is_transient() => fail(store, lease, error).await,
        Err(error) => {
            let reason = error.end_reason();
            tracing::info!(job = %job_id, "failed: {reason}");
            // A budget that refused a call before the run began (the classifier's) ends the job
            // as a refusal during the run would.
            let status = if matches!(reason, EndReason::Budget(_)) {
                JobStatus::Exceeded
            } else {
                JobStatus::Failed
            };
            let written = completer
                .finish(
                    lease,
                    Outcome {
                        status,
                        result: None,
                        reason: Some(reason.to_string()),
                    },
                )
                .await;
            match written {
                Ok(()) => RunOutcome::Failed {
                    error,
                    requeued: false,
                },
                Err(e) => fenced_by(job_id, e),
            }
        }
        Ok(Ran::Retry(reason)) => fail(store, lease, RunError::Endpoint(reason)).await,
        Ok(Ran::Finished(report)) => {
            if let Err(e) = completer.finish(lease, outcome(&report)).await {
                return fenced_by(job_id, e);
            }
            if report.status == RunStatus::NeedsUserInput {
                // The run's question, for `maestro jobs show` and whoever answers it.
                let asked = store
                    .add_comment(job_id, &lease.worker, CommentKind::Question, &report.result)
                    .await;
                if let Err(e) = asked {
                    tracing::warn!(job = %job_id, "recording the run's question failed: {e}");
                }
            }
            RunOutcome::Ended(summary(&report, 0, 0))
        }
        // Only when the hand-back came too late to release (the release above failed).
        Ok(Ran::Suspended) => RunOutcome::Fenced {
            why: "the run was handed back".into(),
        },
    }
}

fn fenced_by(job: maestro_store::JobId, e: maestro_store::StoreError) -> RunOutcome {
    tracing::warn!(job = %job, "recording the job's end failed: {e}");
    RunOutcome::Fenced {
        why: format!("recording the job's end failed: {e}"),
    }
}

/// Reports a failure that may pass: the job goes back to the queue while attempts are left.
async fn fail(store: &Store, lease: &Lease, error: RunError) -> RunOutcome {
    let reason = error.end_reason().to_string();
    match store.fail(lease, &reason).await {
        Ok(FailDisposition::Requeued { run_at }) => {
            tracing::info!(job = %lease.job_id, %run_at, "requeued: {reason}");
            RunOutcome::Failed {
                error,
                requeued: true,
            }
        }
        Ok(FailDisposition::Failed) => {
            tracing::info!(job = %lease.job_id, "failed: {reason}");
            RunOutcome::Failed {
                error,
                requeued: false,
            }
        }
        Err(e) => fenced_by(lease.job_id, e),
    }
}

/// The run's end as the run path reports it.
fn summary(report: &RunReport, reused_answers: usize, reused_tool_results: usize) -> RunSummary {
    RunSummary {
        run_id: report.run_id.clone(),
        status: report.status,
        result: report.result.clone(),
        reason: report.reason.clone(),
        run_dir: report.run_dir.clone(),
        usage: report.state.usage,
        reused_answers,
        reused_tool_results,
    }
}

/// The job's outcome for a run that ended on its own; a run its user stopped is `cancelled`.
pub(crate) fn outcome(report: &RunReport) -> Outcome {
    let status = match report.status {
        RunStatus::Completed => JobStatus::Completed,
        RunStatus::Aborted => JobStatus::Aborted,
        RunStatus::Exceeded => JobStatus::Exceeded,
        RunStatus::NeedsUserInput => JobStatus::WaitingInput,
        RunStatus::WaitingSubtasks => JobStatus::WaitingSubtasks,
        RunStatus::Failed if report.reason == Some(EndReason::Cancelled) => JobStatus::Cancelled,
        RunStatus::Failed => JobStatus::Failed,
    };
    Outcome {
        status,
        result: Some(serde_json::json!({
            "run_id": report.run_id,
            "status": report.status,
            "result": report.result,
            "run_dir": report.run_dir,
            "usage": report.state.usage,
        })),
        reason: report.reason.as_ref().map(EndReason::to_string),
    }
}

/// The piece a resumed run started with, as its `run_started` event recorded it: the file, and
/// the piece's name.
pub fn recorded_piece(history: &[EventRecord]) -> Option<(String, Option<PathBuf>)> {
    history.iter().find_map(|record| match &record.event {
        RunEvent::RunStarted {
            piece, piece_file, ..
        } => Some((piece.clone(), piece_file.as_ref().map(PathBuf::from))),
        _ => None,
    })
}

/// What a job runs with.
struct Prepared {
    piece: Arc<Piece>,
    /// The piece's file, recorded in `run_started`.
    piece_file: Option<PathBuf>,
    config: Arc<Config>,
    /// The tag of the configuration it came from ([`JobContext::current_config`]).
    tag: Option<crate::runtime_config::ETag>,
    /// The classifier's call when it chose the piece just now (`auto`), for the run's record.
    preamble: Vec<RunEvent>,
}

/// The piece a recorded run started with: the stored version it names (`store:NAME@VERSION`,
/// deleted since or not), its file when it is still there, else the piece of that name.
async fn recorded(
    ctx: &JobContext,
    config: &Config,
    opts: &maestro_piece::LoadOptions,
    name: &str,
    file: Option<PathBuf>,
) -> Result<(Arc<Piece>, PathBuf, Option<i64>), RunError> {
    let dirs = &config.paths.pieces_dirs;
    if let Some((stored_name, version)) = file.as_deref().and_then(stored_version)
        && let Some(piece) = stored_piece_at(&ctx.store, &stored_name, version, dirs, opts).await?
    {
        return Ok((piece, stored_path(&stored_name, version), Some(version)));
    }
    Ok(match file.filter(|file| file.is_file()) {
        Some(file) => (Arc::new(load_piece(&file, opts)?), file, None),
        None => {
            let found = find_piece_in(&ctx.store, name, dirs, opts).await?;
            (Arc::new(found.piece), found.path, found.version)
        }
    })
}

/// The name and version a `store:NAME@VERSION` piece path names.
fn stored_version(path: &std::path::Path) -> Option<(String, i64)> {
    let text = path.to_str()?.strip_prefix("store:")?;
    let (name, version) = text.rsplit_once('@')?;
    Some((name.to_string(), version.parse().ok()?))
}

/// The piece and the settings a job runs with. A resumed run keeps the piece it started with
/// (the classifier is not asked again, and a stored piece is read at the version the job
/// recorded). The configuration is the process's current one ([`JobContext::current_config`]),
/// read once per job.
async fn prepare(
    ctx: &JobContext,
    claimed: &Claimed,
    history: &[EventRecord],
    live: &LiveSink,
) -> Result<Prepared, RunError> {
    let job = &claimed.job;
    let served = |config: &Config, model: &str| {
        live.note(format!(
            "model: {model} (the only model {} serves)",
            config.llm.base_url
        ));
    };
    let (mut config, tag) = ctx.current_config().await;
    let dirs = config.paths.pieces_dirs.clone();
    let opts = ctx.load_options(&config, tag.as_ref());
    let mut preamble = Vec::new();
    let (piece, piece_file, version) = if let Some((name, file)) = recorded_piece(history) {
        let file = match job.piece_version {
            Some(version) => Some(stored_path(&name, version)),
            None => file,
        };
        recorded(ctx, &config, &opts, &name, file).await?
    } else if job.piece == AUTO {
        if config.llm.model.is_none() {
            let model = ctx.models.served_model(&config).await?;
            served(&config, &model);
            Arc::make_mut(&mut config).llm.model = Some(model);
        }
        let model = config.llm.model.clone().unwrap_or_default();
        let provider = ctx.models.client(&config)?;
        let available = available_pieces_in(&ctx.store, &dirs, &opts).await?;
        let versions = available.versions.clone();
        // The classifier's call spends from the job's budget too; the piece, and so its own
        // cap, is not known yet.
        let guard = crate::budget::guard_for(&ctx.store, &config, job, None).await?;
        let chosen = classify_piece_within(
            &*provider,
            &model,
            &job.task,
            available,
            guard.as_ref().map(|g| g as &dyn maestro_engine::SpendGuard),
        )
        .await?;
        tracing::info!(job = %job.id, piece = %chosen.choice.piece, "classified: {}", chosen.choice.reason);
        live.note(format!(
            "piece: {} ({})",
            chosen.choice.piece, chosen.choice.reason
        ));
        let version = versions.get(&chosen.piece.name).copied();
        preamble = chosen.choice.calls;
        (Arc::new(chosen.piece), chosen.path, version)
    } else {
        // The claim said whether the store holds a piece of this name at all.
        let stored = if claimed.piece_stored {
            stored_live(ctx, &job.piece, &dirs, &opts).await?
        } else {
            None
        };
        match stored {
            Some(found) => found,
            None => {
                let found = ctx.pieces.find(&job.piece, &dirs, &opts)?;
                (found.piece, found.path, None)
            }
        }
    };
    if let Some(version) = version
        && job.piece_version.is_none()
    {
        ctx.store
            .set_job_piece_version(job.id, version)
            .await
            .map_err(|source| RunError::Store {
                what: "the job's piece version",
                source,
            })?;
    }
    if !ctx.model_from_flag && piece.model.is_some() && piece.model != config.llm.model {
        Arc::make_mut(&mut config).llm.model = piece.model.clone();
    }
    // A run started against an endpoint that does not answer would only wait for it: an
    // unreachable endpoint sends the job back to the queue instead.
    match &config.llm.model {
        Some(model) => ctx.models.check_served(&config, model).await?,
        None => {
            let model = ctx.models.served_model(&config).await?;
            served(&config, &model);
            Arc::make_mut(&mut config).llm.model = Some(model);
        }
    }
    Ok(Prepared {
        piece,
        piece_file: Some(piece_file),
        config,
        tag,
        preamble,
    })
}

/// The store's live piece `given` names (not a file path), with its recorded path and
/// version; `None` sends the lookup to the pieces directories (through the process's cache).
async fn stored_live(
    ctx: &JobContext,
    given: &str,
    dirs: &[PathBuf],
    opts: &maestro_piece::LoadOptions,
) -> Result<Option<(Arc<Piece>, PathBuf, Option<i64>)>, RunError> {
    Ok(stored_live_piece(&ctx.store, given, dirs, opts)
        .await?
        .map(|found| (Arc::new(found.piece), found.path, found.version)))
}

/// The job's stored events, to resume from (none for a new run).
async fn history(store: &Store, lease: &Lease) -> Result<Vec<EventRecord>, RunError> {
    if first_claim(lease) {
        return Ok(Vec::new());
    }
    stored_events(store, lease.job_id).await
}

/// Every event the store holds for `job`, in `seq` order.
pub(crate) async fn stored_events(
    store: &Store,
    job: maestro_store::JobId,
) -> Result<Vec<EventRecord>, RunError> {
    let stored = store
        .events(job, 0)
        .await
        .map_err(|source| RunError::Store {
            what: "events",
            source,
        })?;
    stored
        .into_iter()
        .map(|event| serde_json::from_value::<EventRecord>(event.payload))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RunError::Events)
}

/// Whether `lease` is the job's first claim. Events are written only under a lease and a
/// question is answered only once a run asked it, so such a job has neither: nothing to read.
fn first_claim(lease: &Lease) -> bool {
    lease.fence == 1
}

/// How the caller steers a claimed job's run.
struct Steer<'a> {
    latch: &'a Arc<StopLatch>,
    suspend: CancellationToken,
    stop: Option<CancellationToken>,
    live: Arc<LiveSink>,
}

/// The tools a run of `piece` gets: a piece that uses no MCP server runs with the process's
/// shared tools; one that does starts its servers for this run (returned, to shut down).
async fn tools(
    ctx: &JobContext,
    piece: &Piece,
    config: &Config,
    tag: Option<&crate::runtime_config::ETag>,
) -> Result<(maestro_tools::Registry, Option<Toolbox>), RunError> {
    let selection = McpSelection::for_piece(piece);
    let uses_mcp = !piece.required_mcp.is_empty()
        || config.mcp.servers.keys().any(|slug| selection.wants(slug));
    if !uses_mcp {
        let registry = ctx
            .shared_tools(config, tag)
            .await
            .map_err(RunError::Tools)?;
        return Ok((registry, None));
    }
    let mut toolbox = Toolbox::build(config, &selection)
        .await
        .map_err(RunError::Tools)?;
    toolbox.write_pieces_to(ctx.piece_writer(config));
    if let Err(problem) = toolbox.ensure_required(&piece.required_mcp) {
        toolbox.shutdown().await;
        return Err(RunError::RequiredMcp {
            piece: piece.name.clone(),
            problem,
        });
    }
    Ok((toolbox.registry.clone(), Some(toolbox)))
}

/// Runs the engine over the job, its events going to the store under the lease.
async fn run_prepared(
    ctx: &JobContext,
    claimed: &Claimed,
    prepared: Prepared,
    history: Vec<EventRecord>,
    steer: Steer<'_>,
) -> Result<Ran, RunError> {
    let Prepared {
        piece,
        piece_file,
        config,
        tag,
        preamble,
    } = prepared;
    let engine_config = config.engine_config().map_err(RunError::Config)?;
    let provider: Arc<dyn Provider> = ctx.models.client(&config)?;
    let spend = crate::budget::guard_for(&ctx.store, &config, &claimed.job, Some(&piece))
        .await?
        .map(|guard| Arc::new(guard) as Arc<dyn maestro_engine::SpendGuard>);
    let answers = if first_claim(&claimed.lease) {
        Vec::new()
    } else {
        ctx.store
            .answers(claimed.job.id)
            .await
            .map_err(|source| RunError::Store {
                what: "answers",
                source,
            })?
    };
    let (mut registry, toolbox) = tools(ctx, &piece, &config, tag.as_ref()).await?;
    // The knowledge tools act for the job's owner, so they are added per run.
    let embedder = match config.knowledge.embedding_model {
        Some(_) => Some(ctx.models.client(&config)?),
        None => None,
    };
    let knowledge = ctx.knowledge(&config, tag.as_ref(), embedder);
    crate::knowledge_tools::register(&mut registry, knowledge, claimed.job.owner.as_deref());
    // Stored pieces are every user's pieces: the job of a user who is not an admin reads them,
    // and its `CreatePiece` and `UpdatePiece` are refused, as the API refuses that user.
    if let Some(owner) = claimed.job.owner.as_deref()
        && !crate::piece_store::may_write_pieces(&ctx.store, owner)
            .await
            .map_err(|source| RunError::Store {
                what: "the job owner's role",
                source,
            })?
    {
        let writer: Arc<dyn maestro_tools::pieces::PieceWriter> =
            Arc::new(crate::piece_store::ReadOnlyPieces {
                inner: ctx.piece_writer(&config),
                owner: owner.to_string(),
            });
        for tool in maestro_tools::pieces::piece_writing_tools(registry.config(), &writer) {
            registry.register(tool);
        }
    }
    // The run's own browser: started on its first BrowseWeb call, closed (its profile removed)
    // when the run's registry is dropped. A resumed run starts without one.
    registry.register(maestro_tools_browser::browse_web(&config.web));
    let mut engine = Engine::new(provider, registry, engine_config);
    if let Some(key) = config.llm.api_key.clone() {
        engine = engine.with_secret(key);
    }
    let cancel = engine.cancel_token();
    let stop_run = steer.latch.stop_run.clone();
    let stop = steer.stop.clone().unwrap_or_default();
    let forward = tokio::spawn(async move {
        tokio::select! {
            _ = stop_run.cancelled() => {}
            _ = stop.cancelled() => {}
        }
        cancel.cancel();
    });
    let mut workspace = None;
    let spec = run_spec(
        ctx, claimed, piece, piece_file, history, answers, &config, &steer,
    )
    .map(|(spec, outputs)| {
        let spec = RunSpec {
            preamble,
            attribution: Some(claimed.job.id.to_string()),
            spend,
            ..spec
        };
        (spec, outputs)
    });
    let ran = match spec {
        Ok((mut spec, outputs)) => match with_files(ctx, claimed, &mut spec, &outputs).await {
            Ok(()) => {
                workspace = Some((spec.record.workspace.clone(), outputs));
                match engine.run_spec(spec).await {
                    Ok(RunEnd::Finished(report)) => Ok(Ran::Finished(report)),
                    Ok(RunEnd::Retry { reason }) => Ok(Ran::Retry(reason)),
                    Ok(RunEnd::Suspended) => Ok(Ran::Suspended),
                    Err(e) => Err(RunError::Engine(e)),
                }
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    forward.abort();
    // What the run left in `output/`, recorded before its end or park is: whoever sees the
    // job's new status can read its files.
    if let Some((workspace, outputs)) = workspace
        && matches!(ran, Ok(Ran::Finished(_)) | Err(_))
    {
        record_outputs(ctx, claimed, &workspace, &outputs, &steer.live).await;
    }
    // The MCP servers live as long as the run: the engine's registry goes first so that the
    // hub holds the last handle on each connection and can wait for the servers to exit.
    drop(engine);
    if let Some(toolbox) = toolbox {
        toolbox.shutdown().await;
    }
    ran
}

/// Lays the job's files out in the workspace before the run starts: the outputs its earlier
/// runs recorded under `output/` when the run goes on from the job's record (on any node; see
/// `outputs.rs` for which copy wins), and its input files under `input/` (again on a resume:
/// the same content), telling the run where they are and that what it leaves in `output/` is
/// delivered.
async fn with_files(
    ctx: &JobContext,
    claimed: &Claimed,
    spec: &mut RunSpec,
    outputs: &OutputSync,
) -> Result<(), RunError> {
    // Outputs are recorded only under a lease: a first claim has none to lay out.
    if !first_claim(&claimed.lease) {
        outputs
            .restore(claimed.job.id)
            .await
            .map_err(RunError::Inputs)?;
    }
    // The claim said whether the job has any inputs (they come only with the submission).
    if !claimed.has_inputs {
        return Ok(());
    }
    let paths = crate::files::lay_out_inputs(&ctx.store, claimed.job.id, &spec.record.workspace)
        .await
        .map_err(RunError::Inputs)?;
    if !paths.is_empty() {
        spec.task.push_str(&crate::files::inputs_note(&paths));
    }
    Ok(())
}

/// Records the files under the workspace's `output/` as the job's outputs. A file over a limit
/// is left out and a note on the job says which and why; the run is not failed for it.
async fn record_outputs(
    ctx: &JobContext,
    claimed: &Claimed,
    workspace: &std::path::Path,
    synced: &OutputSync,
    live: &LiveSink,
) {
    let job = claimed.job.id;
    let limits = crate::files::FileLimits::from_config(&ctx.config.files);
    let outputs = crate::files::collect_outputs(workspace, limits).await;
    // A first attempt that left no files has none to record and no earlier ones to forget
    // (outputs are recorded only under a lease, and this run recorded none as it went): no
    // write transaction, which a thousand runs ending together would otherwise queue for, one
    // by one.
    let nothing_to_write =
        outputs.files.is_empty() && first_claim(&claimed.lease) && !synced.recorded_any().await;
    if !outputs.skipped.is_empty() {
        let note = format!(
            "output files not delivered:\n- {}",
            outputs.skipped.join("\n- ")
        );
        tracing::warn!(job = %job, "{note}");
        live.note(note.clone());
        if let Err(e) = ctx
            .store
            .add_comment(job, &claimed.lease.worker, CommentKind::Note, &note)
            .await
        {
            tracing::warn!(job = %job, "noting the outputs left out failed: {e}");
        }
    }
    if nothing_to_write {
        return;
    }
    if let Err(e) = ctx
        .store
        .record_outputs(&claimed.lease, &outputs.files)
        .await
    {
        tracing::warn!(job = %job, "recording the run's output files failed: {e}");
    }
}

/// The engine's run of the job: its directory named by the job id, its events in the store
/// (first, the authority) and in `events.jsonl`, and whatever the store already holds as the
/// history to resume from.
/// With it, the run's [`OutputSync`]: its store log records what changed under `output/`
/// before the result of a call that may have changed it.
#[allow(clippy::too_many_arguments)]
fn run_spec(
    ctx: &JobContext,
    claimed: &Claimed,
    piece: Arc<Piece>,
    piece_file: Option<PathBuf>,
    history: Vec<EventRecord>,
    answers: Vec<String>,
    config: &Arc<Config>,
    steer: &Steer<'_>,
) -> Result<(RunSpec, Arc<OutputSync>), RunError> {
    let workspace = claimed.job.workspace.as_ref().map(PathBuf::from);
    let mut record = RunRecord::open(
        &config.paths.runs_dir,
        &claimed.job.id.to_string(),
        workspace.as_deref(),
    )?;
    if claimed.job.parent_id.is_some() {
        // A subtask's workspace (`subtasks/<n>/` of its parent's) is made for it, not named.
        record.workspace_kind = maestro_tools::WorkspaceKind::Job;
    }
    // The store is the run's record here: `events.jsonl` follows it without holding up the
    // run (and is made to match it again when the run resumes).
    let jsonl = JsonlLog::rewrite(&record.events_path(), &history)
        .map(JsonlLog::behind)
        .map_err(|source| {
            RunError::Engine(maestro_engine::EngineError::Record(
                maestro_engine::RecordError::Open {
                    path: record.events_path(),
                    source,
                },
            ))
        })?;
    let outputs = Arc::new(OutputSync::new(
        ctx.store.clone(),
        claimed.lease.clone(),
        record.workspace.clone(),
        crate::files::FileLimits::from_config(&ctx.config.files),
    ));
    let store_log = StoreLog::new(
        ctx.events.clone(),
        claimed.lease.clone(),
        Arc::clone(steer.latch),
    )
    .with_outputs(Arc::clone(&outputs));
    let mut spec = RunSpec::new(piece, &claimed.job.task, record);
    spec.logs = vec![Arc::new(store_log), Arc::new(jsonl)];
    spec.observers = vec![Arc::clone(&steer.live) as Arc<dyn EventSink>];
    if let Some(observer) = &ctx.observer {
        spec.observers.push(Arc::new(crate::context::ObserverSink {
            job: claimed.job.id,
            observer: Arc::clone(observer),
        }));
    }
    spec.history = history;
    // The last attempt records how the run ended, even when the endpoint is down.
    spec.retry_infrastructure = claimed.job.attempts < claimed.job.max_attempts;
    spec.piece_file = piece_file;
    spec.suspend = Some(steer.suspend.clone());
    spec.answers = answers;
    spec.subtasks = StoreSubtasks::for_job(
        &ctx.store,
        &claimed.lease,
        &claimed.job,
        spec.record.workspace.clone(),
        config,
        ctx.children(),
    )
    .map(|host| Arc::new(host) as Arc<dyn SubtaskHost>);
    spec.system = Some(Arc::new(crate::system_host::StoreSystemHost::for_job(
        &ctx.store,
        &claimed.job,
    )));
    Ok((spec, outputs))
}

/// Drives a finished run's record again: the piece it started with, the tools it was offered
/// (their counts are part of the record; none runs), no model call.
async fn replay(
    ctx: &JobContext,
    id: &str,
    history: Vec<EventRecord>,
) -> Result<RunSummary, RunError> {
    let (name, file) = recorded_piece(&history).ok_or_else(|| RunError::NotStarted(id.into()))?;
    let opts = ctx.load_options(&ctx.config, None);
    let (piece, _, _) = recorded(ctx, &ctx.config, &opts, &name, file).await?;
    let mut config = (*ctx.config).clone();
    if config.llm.model.is_none() {
        config.llm.model = Some(piece.model.clone().unwrap_or_else(|| "replay".into()));
    }
    let engine_config = config.engine_config().map_err(RunError::Config)?;
    // The client is never called: a replay answers every call from the record.
    let provider: Arc<dyn Provider> = ctx.models.client(&config)?;
    let toolbox = Toolbox::build(&config, &McpSelection::for_piece(&piece))
        .await
        .map_err(RunError::Tools)?;
    // Offered as in the run, never called: a replay answers every tool call from the record.
    let mut registry = toolbox.registry.clone();
    crate::knowledge_tools::register(
        &mut registry,
        Arc::new(crate::knowledge::Knowledge::with_client(
            ctx.store.clone(),
            &config,
            None,
        )),
        None,
    );
    let engine = Engine::new(provider, registry, engine_config);
    let answers = count(&history, |e| matches!(e, RunEvent::LlmResponse { .. }));
    let results = count(&history, |e| matches!(e, RunEvent::ToolResult { .. }));
    let scratch = std::env::temp_dir().join(format!("maestro-replay-{}", uuid::Uuid::now_v7()));
    let outcome = match RunRecord::open(&scratch, id, None) {
        Ok(record) => engine.replay(piece, history, record).await,
        Err(e) => Err(e),
    };
    drop(engine);
    toolbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(summary(&outcome?, answers, results))
}

fn count(history: &[EventRecord], which: impl Fn(&RunEvent) -> bool) -> usize {
    history.iter().filter(|r| which(&r.event)).count()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use maestro_store::{Classes, JobId, NewJob, StoreUrl};
    use sqlx::Connection;

    use super::*;
    use crate::lease::LeaseKeeper;

    const LEASE: Duration = Duration::from_secs(30);

    /// A store at `path` holding one queued job, and the worker's context and live sink for
    /// its run.
    async fn one_job(path: &Path) -> (Store, JobId, JobContext, LiveSink) {
        let store = Store::open(&StoreUrl::Sqlite {
            path: path.to_path_buf(),
        })
        .await
        .unwrap();
        let id = store.submit(NewJob::new("p", "t", "alice")).await.unwrap();
        let ctx = JobContext::new(
            store.clone(),
            Arc::new(Config::default()),
            LeaseKeeper::new(store.clone(), LEASE),
            false,
        );
        let live = LiveSink {
            run: ctx.live.open(id),
        };
        (store, id, ctx, live)
    }

    /// A first attempt that leaves no output files writes nothing about them: its end does not
    /// queue for the store's write lock (taken here by another connection, as a thousand runs
    /// ending together take it in turn). A later attempt still forgets the files an earlier
    /// one recorded.
    #[tokio::test]
    async fn only_an_attempt_with_outputs_to_record_or_forget_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maestro.db");
        let (store, id, ctx, live) = one_job(&path).await;
        let claim = || async {
            store
                .claim_batch("w", &Classes::Any, LEASE, 1)
                .await
                .unwrap()
                .remove(0)
        };
        let first = claim().await;
        assert!(first_claim(&first.lease));
        let ws = tempfile::tempdir().unwrap();

        let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        let synced = |claimed: &Claimed| {
            OutputSync::new(
                store.clone(),
                claimed.lease.clone(),
                ws.path().to_path_buf(),
                crate::files::FileLimits::default(),
            )
        };
        let first_sync = synced(&first);
        tokio::time::timeout(Duration::from_secs(5), async {
            // Nor does a tool call's check of an `output/` that is not there.
            first_sync.record_changes().await.unwrap();
            record_outputs(&ctx, &first, ws.path(), &first_sync, &live).await;
        })
        .await
        .expect("a first attempt without outputs waited for the store's write lock");
        sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();

        // The first attempt leaves a file after all; the next attempt leaves none.
        std::fs::create_dir(ws.path().join("output")).unwrap();
        std::fs::write(ws.path().join("output/a.txt"), "a").unwrap();
        record_outputs(&ctx, &first, ws.path(), &first_sync, &live).await;
        assert_eq!(store.job_files(id).await.unwrap().len(), 1);
        store.release(&first.lease).await.unwrap();
        let second = claim().await;
        std::fs::remove_file(ws.path().join("output/a.txt")).unwrap();
        record_outputs(&ctx, &second, ws.path(), &synced(&second), &live).await;
        assert!(store.job_files(id).await.unwrap().is_empty());
    }

    /// A first attempt whose tool call's file was recorded as the run went, and removed before
    /// the run ended, has that file forgotten at the end.
    #[tokio::test]
    async fn a_file_recorded_during_a_first_attempt_and_removed_is_forgotten_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let (store, id, ctx, live) = one_job(&dir.path().join("maestro.db")).await;
        let first = store
            .claim_batch("w", &Classes::Any, LEASE, 1)
            .await
            .unwrap()
            .remove(0);
        let ws = tempfile::tempdir().unwrap();
        let synced = OutputSync::new(
            store.clone(),
            first.lease.clone(),
            ws.path().to_path_buf(),
            crate::files::FileLimits::default(),
        );
        std::fs::create_dir(ws.path().join("output")).unwrap();
        std::fs::write(ws.path().join("output/a.txt"), "a").unwrap();
        synced.record_changes().await.unwrap();
        assert_eq!(store.job_files(id).await.unwrap().len(), 1);
        std::fs::remove_file(ws.path().join("output/a.txt")).unwrap();
        record_outputs(&ctx, &first, ws.path(), &synced, &live).await;
        assert!(store.job_files(id).await.unwrap().is_empty());
    }
}
