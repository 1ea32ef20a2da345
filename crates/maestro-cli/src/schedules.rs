//! `maestro schedules …`: add, list, pause, resume and remove schedules in the job store; every
//! `maestro worker` fires them.

use std::path::PathBuf;

use anyhow::anyhow;
use maestro_app::{Misfire, ScheduleError, ScheduleRequest, Spec};

use crate::common::{actor, block_on};
use crate::flags::StoreArgs;
use crate::term::printable;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Add a schedule; prints its id (`{"id": …}` with --json).
    Add(Box<AddArgs>),
    /// List schedules: spec, zone, misfire policy, next fire, slots fired and missed.
    List {
        /// One JSON object per schedule per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Stop firing a schedule until `resume`.
    Pause {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Fire a paused schedule again, from its next slot (the slots it slept through are not
    /// missed).
    Resume {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a schedule; the jobs it fired stay.
    Rm {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// A piece file or a piece name found in the pieces directories.
    #[arg(long)]
    piece: String,
    /// The task each fired job runs.
    #[arg(long)]
    task: String,
    #[command(flatten)]
    when: When,
    /// The time zone wall-clock specs are read in (a tz database name).
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// Slots missed while no worker ran: `skip` fires none, `catch_up_once` fires one job.
    #[arg(long, default_value = "skip")]
    misfire: String,
    /// Print `{"id": …}` instead of the bare id.
    #[arg(long)]
    json: bool,
    /// Directories searched for pieces by name (default: `paths.pieces_dirs`).
    #[arg(long)]
    pieces_dir: Vec<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
}

/// Exactly one rule.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct When {
    /// A cron expression: five fields, or six with seconds first (`*/2 * * * * *`).
    #[arg(long)]
    cron: Option<String>,
    /// Every DURATION (`30s`, `5m`, `2h`, `1d`), at multiples of it since the Unix epoch.
    #[arg(long)]
    every: Option<String>,
    /// Every day at HH:MM.
    #[arg(long)]
    daily: Option<String>,
    /// Every week at DAY@HH:MM (`mon@09:00`).
    #[arg(long)]
    weekly: Option<String>,
    /// Every month at N@HH:MM (`1@09:00`); months without day N are skipped.
    #[arg(long)]
    monthly: Option<String>,
    /// Once, at an RFC 3339 time.
    #[arg(long)]
    once: Option<String>,
}

impl When {
    fn spec(&self) -> anyhow::Result<Spec> {
        let When {
            cron,
            every,
            daily,
            weekly,
            monthly,
            once,
        } = self;
        let spec = match (cron, every, daily, weekly, monthly, once) {
            (Some(e), ..) => Spec::cron(e),
            (_, Some(e), ..) => Spec::every(e),
            (_, _, Some(e), ..) => Spec::daily(e),
            (_, _, _, Some(e), ..) => Spec::weekly(e),
            (_, _, _, _, Some(e), _) => Spec::monthly(e),
            (.., Some(e)) => Spec::once(e),
            (None, None, None, None, None, None) => {
                return Err(anyhow!(
                    "no schedule given; add one of --cron, --every, --daily, --weekly, --monthly, --once"
                ));
            }
        };
        Ok(spec?)
    }
}

/// The schedules as a table, each column as wide as its widest cell.
fn table(schedules: &[maestro_app::ScheduleSummary]) -> String {
    let header = [
        "ID", "PIECE", "SCHEDULE", "TZ", "MISFIRE", "STATE", "NEXT", "FIRED", "MISSED",
    ];
    let rows: Vec<[String; 9]> = schedules
        .iter()
        .map(|s| {
            // Stored text may come from any front end: no control character reaches the terminal.
            let cell = |text: &str| printable(text).into_owned();
            [
                cell(&s.id),
                cell(&s.piece),
                cell(&s.spec),
                cell(&s.tz),
                cell(&s.misfire),
                if s.paused { "paused" } else { "active" }.to_string(),
                s.next_fire
                    .and_then(|at| {
                        at.format(&time::format_description::well_known::Rfc3339)
                            .ok()
                    })
                    .unwrap_or_else(|| "-".to_string()),
                s.fired.to_string(),
                s.missed.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub(crate) fn run(command: Command) -> anyhow::Result<u8> {
    block_on(async move {
        match command {
            Command::Add(args) => add(*args).await,
            Command::List { json, store } => {
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let schedules = maestro_app::list_schedules(&store, store.now()).await?;
                if json {
                    for s in &schedules {
                        println!("{}", serde_json::to_string(s)?);
                    }
                } else if !schedules.is_empty() {
                    print!("{}", table(&schedules));
                }
                Ok(0)
            }
            Command::Pause { id, store } => change(&store, &id, Change::Pause).await,
            Command::Resume { id, store } => change(&store, &id, Change::Resume).await,
            Command::Rm { id, store } => change(&store, &id, Change::Remove).await,
        }
    })
}

async fn add(args: AddArgs) -> anyhow::Result<u8> {
    let spec = args.when.spec()?;
    let misfire: Misfire = args.misfire.parse()?;
    let mut config = args.store.configuration()?;
    if !args.pieces_dir.is_empty() {
        config.paths.pieces_dirs = args.pieces_dir.clone();
    }
    let store = args.store.open(&config).await?;
    let added = maestro_app::add_schedule(
        &store,
        &config,
        ScheduleRequest {
            piece: args.piece,
            task: args.task,
            spec,
            tz: args.tz,
            misfire,
            created_by: actor(),
            owner: None,
        },
    )
    .await;
    let id = match added {
        Ok(id) => id,
        Err(ScheduleError::Piece(e)) => return Err(crate::common::explain_piece_error(e)),
        Err(e) => return Err(e.into()),
    };
    crate::common::print_id(&id, args.json);
    Ok(0)
}

enum Change {
    Pause,
    Resume,
    Remove,
}

async fn change(store: &StoreArgs, id: &str, change: Change) -> anyhow::Result<u8> {
    let config = store.configuration()?;
    let store = store.open(&config).await?;
    let done = match change {
        Change::Pause => maestro_app::set_paused(&store, id, true, &actor()).await,
        Change::Resume => maestro_app::set_paused(&store, id, false, &actor()).await,
        Change::Remove => maestro_app::remove_schedule(&store, id, &actor()).await,
    };
    done.map_err(|e| anyhow!("{e}"))?;
    Ok(0)
}
