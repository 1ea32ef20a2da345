//! `maestro submit`, `maestro jobs …` and `maestro workers`: queue tasks and look at the job
//! store (`--db`, `MAESTRO_DB`, `store.url`, or `.maestro/maestro.db`).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use maestro_app::{JobError, JobId, JobStatus, JobSummary, Store, Submission};

use crate::common::{actor, block_on, print_id};
use crate::flags::StoreArgs;
use crate::term::printable;

#[derive(Debug, clap::Args)]
pub(crate) struct SubmitArgs {
    /// A piece file, a piece name found in the pieces directories, or `auto` to let the
    /// worker's classifier choose.
    piece: String,
    /// The task to run.
    #[arg(long)]
    task: String,
    /// Work in this directory instead of the run directory's own workspace.
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// The task class; only workers serving it claim the job (default: `default`).
    #[arg(long)]
    class: Option<String>,
    /// Higher runs first (default 0).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// Claims allowed before the job ends `failed` (default 3).
    #[arg(long)]
    max_attempts: Option<i64>,
    /// Print `{"id": …}` instead of the bare id.
    #[arg(long)]
    json: bool,
    /// Directories searched for pieces by name (default: `paths.pieces_dirs`).
    #[arg(long)]
    pieces_dir: Vec<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum JobsCommand {
    /// List jobs, oldest first, one JSON object per line with --json.
    List {
        /// Only jobs in this status (queued, running, waiting_input, waiting_subtasks,
        /// completed, aborted, exceeded, failed, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// One JSON object per job per line (nothing at all when there are none).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show one job.
    Show {
        id: String,
        /// The job as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print a job's events, the same JSON lines as the run's `events.jsonl`.
    Events {
        id: String,
        /// Only events with a larger sequence number.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Keep printing new events until the job ends, through its parks: a question answered,
        /// subtasks waited for.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Wait for a job to end and exit with its run's exit code (0 completed, 1 failed or
    /// cancelled, 3 aborted, 4 waiting for input, 5 exceeded).
    Wait {
        id: String,
        /// Give up after this many seconds (exit code 124).
        #[arg(long)]
        timeout: Option<f64>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Cancel a job and its subtasks; a running job stops within about a second.
    Cancel {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Answer the question a job waiting for input asked: the answer is stored as a comment and
    /// the job is queued again; its run goes on in the movement that asked, with the answer as
    /// its next message (a worker picks it up, or `maestro run --resume ID` here).
    Answer {
        id: String,
        /// The answer.
        text: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct WorkersArgs {
    /// One JSON object per worker per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

fn parse_id(id: &str) -> anyhow::Result<JobId> {
    id.parse()
        .map_err(|_| anyhow!("`{id}` is not a job id (a UUID, as `maestro submit` prints)"))
}

pub(crate) fn submit(args: SubmitArgs) -> anyhow::Result<u8> {
    block_on(async move {
        let mut config = args.store.configuration()?;
        if !args.pieces_dir.is_empty() {
            config.paths.pieces_dirs = args.pieces_dir.clone();
        }
        let store = args.store.open(&config).await?;
        let submitted = maestro_app::submit(
            &store,
            &config,
            Submission {
                piece: args.piece,
                task: args.task,
                workspace: args.workspace,
                class: args.class,
                priority: args.priority,
                max_attempts: args.max_attempts,
                submitted_by: actor(),
                owner: None,
                inputs: Vec::new(),
                budget: Default::default(),
            },
        )
        .await;
        let id = match submitted {
            Ok(id) => id,
            Err(JobError::Piece(e)) => return Err(crate::common::explain_piece_error(e)),
            Err(e) => return Err(e.into()),
        };
        print_id(&id, args.json);
        Ok(0)
    })
}

fn human(job: &JobSummary) -> String {
    let mut line = format!(
        "{}  {:<16} {:<20} attempt {}",
        job.id,
        job.status,
        printable(&job.piece),
        job.attempt
    );
    if let Some(reason) = &job.reason {
        line.push_str(&format!("  ({})", printable(reason)));
    }
    line
}

pub(crate) fn jobs(command: JobsCommand) -> anyhow::Result<u8> {
    block_on(async move {
        match command {
            JobsCommand::List {
                status,
                json,
                store,
            } => {
                let status = status
                    .map(|s| s.parse::<JobStatus>())
                    .transpose()
                    .map_err(|e| {
                        anyhow!(
                            "{e}; expected one of: {}",
                            JobStatus::ALL.map(|s| s.as_str()).join(", ")
                        )
                    })?;
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let mut out = std::io::stdout().lock();
                for job in maestro_app::list_jobs(&store, status).await? {
                    if json {
                        writeln!(out, "{}", serde_json::to_string(&job)?)?;
                    } else {
                        writeln!(out, "{}", human(&job))?;
                    }
                }
                Ok(0)
            }
            JobsCommand::Show { id, json, store } => {
                let id = parse_id(&id)?;
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                // The job as `jobs list` prints it (its record's host path included), then
                // what it and its subtasks spent.
                let summary = maestro_app::show_job(&store, id).await?;
                let spend = maestro_app::job_spend(&store, id, &config.llm).await?;
                let mut job = serde_json::to_value(&summary)?;
                if let (Some(fields), serde_json::Value::Object(spent)) =
                    (job.as_object_mut(), serde_json::to_value(spend)?)
                {
                    fields.extend(spent);
                }
                if json {
                    println!("{}", serde_json::to_string(&job)?);
                } else {
                    let value = serde_json::to_value(&job)?;
                    if let Some(fields) = value.as_object() {
                        for (key, value) in fields {
                            if key == "result"
                                && let Some(outcome) = value.as_object()
                            {
                                // The run's own words first, then where its record is.
                                for (label, field) in [("result", "result"), ("run_dir", "run_dir")]
                                {
                                    let text = outcome.get(field).and_then(|v| v.as_str());
                                    println!("{label}: {}", printable(text.unwrap_or("-")));
                                }
                                continue;
                            }
                            if (key == "usage" || key == "tree_usage")
                                && let Some(total) = value["total_tokens"].as_u64()
                            {
                                println!(
                                    "{key}: {total} tokens (prompt {}, completion {})",
                                    value["prompt_tokens"], value["completion_tokens"]
                                );
                                continue;
                            }
                            match value {
                                serde_json::Value::String(text) => {
                                    println!("{key}: {}", printable(text));
                                }
                                serde_json::Value::Null => println!("{key}: -"),
                                other => println!("{key}: {other}"),
                            }
                        }
                    }
                }
                Ok(0)
            }
            JobsCommand::Events {
                id,
                after,
                follow,
                store,
            } => {
                let id = parse_id(&id)?;
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                follow_events(&store, id, after, follow).await?;
                Ok(0)
            }
            JobsCommand::Wait { id, timeout, store } => {
                let id = parse_id(&id)?;
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let timeout = timeout.map(Duration::from_secs_f64);
                let job = match maestro_app::wait_job(&store, id, timeout).await {
                    Err(e @ JobError::WaitTimedOut { .. }) => {
                        eprintln!("{e}");
                        return Ok(maestro_app::WAIT_TIMED_OUT_EXIT);
                    }
                    waited => waited?,
                };
                let code = maestro_app::exit_code(job.status).unwrap_or(1);
                let mut line = format!("job {} {}", job.id, job.status);
                if let Some(reason) = &job.reason {
                    line.push_str(&format!(" ({})", printable(reason)));
                }
                eprintln!("{line}");
                Ok(u8::try_from(code).unwrap_or(1))
            }
            JobsCommand::Answer { id, text, store } => {
                let job = parse_id(&id)?;
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                maestro_app::answer_job(&store, job, &actor(), &text).await?;
                println!("answered {job}; it is queued again");
                Ok(0)
            }
            JobsCommand::Cancel { id, store } => {
                let id = parse_id(&id)?;
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                for cancelled in maestro_app::cancel_job(&store, id, &actor()).await? {
                    println!("cancelled {cancelled}");
                }
                Ok(0)
            }
        }
    })
}

/// Prints the job's events after `after`; with `follow`, keeps going until the job has ended
/// and every event is printed.
async fn follow_events(store: &Store, id: JobId, after: i64, follow: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    if follow {
        // Followed through parks (a question answered, subtasks ended) to the job's end.
        let mut watch = maestro_app::watch_job(store, None, id, Some(after)).await?;
        while let Some(item) = watch.next().await {
            if let maestro_app::Watched::Event(record) = item {
                // As `jobs events` prints the stored payload: the record's fields in order.
                writeln!(out, "{}", serde_json::to_string(&*record)?)?;
                out.flush()?;
            }
        }
        if let Some(e) = watch.take_error() {
            return Err(e.into());
        }
        return Ok(());
    }
    maestro_app::follow_events(store, id, after, false, |event| {
        writeln!(out, "{}", serde_json::to_string(&event.payload)?)?;
        out.flush()?;
        Ok::<_, anyhow::Error>(())
    })
    .await
    .map_err(|e| match e {
        maestro_app::FollowError::Job(e) => e.into(),
        maestro_app::FollowError::Emit(e) => e,
    })
}

/// How recent a worker's heartbeat must be for `maestro workers` to list it.
const LIVE_WITHIN: Duration = Duration::from_secs(60);

pub(crate) fn workers(args: WorkersArgs) -> anyhow::Result<u8> {
    block_on(async move {
        let config = args.store.configuration()?;
        let store = args.store.open_existing(&config).await?;
        let mut out = std::io::stdout().lock();
        for w in maestro_app::live_workers(&store, LIVE_WITHIN).await? {
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&w)?)?;
            } else {
                let classes = if w.worker.task_classes.is_empty() {
                    "*".to_string()
                } else {
                    w.worker.task_classes.join(",")
                };
                let running: Vec<String> = w.running.iter().map(JobId::to_string).collect();
                writeln!(
                    out,
                    "{}  {}/{}  classes {}  {}:{}  running: {}",
                    w.worker.id,
                    w.worker.name,
                    w.worker.profile,
                    classes,
                    w.worker.host,
                    w.worker.pid,
                    if running.is_empty() {
                        "-".to_string()
                    } else {
                        running.join(", ")
                    }
                )?;
            }
        }
        Ok(0)
    })
}
