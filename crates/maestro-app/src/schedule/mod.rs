//! The scheduler: schedule rules and their slots (`spec`), the use cases behind
//! `maestro schedules …`, and the tick every worker runs (`tick`).

mod spec;
mod tick;
mod zone;

use maestro_config::Config;
use maestro_store::{NewSchedule, Store, StoreError};
use serde::Serialize;
use time::OffsetDateTime;

use crate::piece_store::find_piece_in;
use crate::pieces::{AUTO, PieceError};
use crate::toolbox::load_options;

pub use spec::{Misfire, Spec, SpecError, zone};
pub use tick::{GRACE, TICK, TickReport, tick};
pub use zone::{Zone, ZoneOffset};

/// Why a schedule command failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The spec, zone or misfire policy is not understood.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The piece cannot be found or does not load.
    #[error(transparent)]
    Piece(#[from] PieceError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No schedule has this id.
    #[error("no schedule with id {0}; `maestro schedules list` shows the ids")]
    NoSuchSchedule(String),
    /// The task is empty or only whitespace: every job it fired would have nothing to do.
    #[error(
        "the task is empty; say what each fired job should do, e.g. `--task \"report the open issues\"`"
    )]
    EmptyTask,
}

/// A schedule to add, as the command line gives it.
#[derive(Debug, Clone)]
pub struct ScheduleRequest {
    /// The piece each fired job runs: a name, a file, or `auto`.
    pub piece: String,
    /// The task each fired job runs; not empty.
    pub task: String,
    /// When it fires.
    pub spec: Spec,
    /// The tz database zone its times are read in (`UTC`, `Europe/Paris`).
    pub tz: String,
    /// What to do with slots missed while no worker ran.
    pub misfire: Misfire,
    /// Who adds it (the audit log's actor).
    pub created_by: String,
    /// The user (an email) the schedule and every job it fires belong to: the server sets the
    /// signed-in creator; `maestro schedules add` sets none.
    pub owner: Option<String>,
}

/// Adds a schedule after checking that its task is not empty, its zone exists, it will fire
/// (a `once` still to come, a cron expression that matches a date) and its piece loads (or is
/// `auto`); returns its id.
pub async fn add_schedule(
    store: &Store,
    config: &Config,
    request: ScheduleRequest,
) -> Result<String, ScheduleError> {
    if request.task.trim().is_empty() {
        return Err(ScheduleError::EmptyTask);
    }
    let tz = zone(&request.tz)?;
    request
        .spec
        .check_fires(spec::to_chrono(store.now()), &tz)?;
    check_piece(store, config, &request.piece).await?;
    Ok(store
        .add_schedule(&NewSchedule {
            piece: request.piece,
            task: request.task,
            spec: request.spec.to_string(),
            tz: tz.name().unwrap_or(&request.tz).to_string(),
            misfire: request.misfire.as_str().to_string(),
            created_by: request.created_by,
            owner: request.owner,
        })
        .await?)
}

/// Checks that `piece` loads, unless it is `auto` (the worker classifies each fired job's task,
/// as it does a submitted job's).
async fn check_piece(store: &Store, config: &Config, piece: &str) -> Result<(), ScheduleError> {
    if piece != AUTO {
        find_piece_in(
            store,
            piece,
            &config.paths.pieces_dirs,
            &load_options(config),
        )
        .await?;
    }
    Ok(())
}

/// What `maestro schedules list` prints about a schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleSummary {
    /// The schedule's id.
    pub id: String,
    /// The piece its jobs run.
    pub piece: String,
    /// The task its jobs run.
    pub task: String,
    /// When it fires, as stored (`cron:…`, `every:…`, `daily:…`, `once:…`).
    pub spec: String,
    /// The zone its times are read in.
    pub tz: String,
    /// `skip` or `catch_up_once`.
    pub misfire: String,
    /// True while it is paused: it fires nothing.
    pub paused: bool,
    /// The next slot (None when paused, or a `once` that has fired).
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_fire: Option<OffsetDateTime>,
    /// The next [`NEXT_FIRES`] slots, `next_fire` first (fewer when the rule has fewer left;
    /// none when paused).
    #[serde(serialize_with = "rfc3339_list")]
    pub next_fires: Vec<OffsetDateTime>,
    /// Slots it fired a job for.
    pub fired: i64,
    /// Slots it let pass (missed while no worker ran, under `skip`).
    pub missed: i64,
    /// The user it and the jobs it fires belong to (an email), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// How many coming slots [`ScheduleSummary::next_fires`] lists.
pub const NEXT_FIRES: usize = 5;

fn rfc3339_list<S: serde::Serializer>(
    list: &[OffsetDateTime],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::{Error as _, SerializeSeq as _};
    let mut seq = serializer.serialize_seq(Some(list.len()))?;
    for at in list {
        let text = at
            .format(&time::format_description::well_known::Rfc3339)
            .map_err(S::Error::custom)?;
        seq.serialize_element(&text)?;
    }
    seq.end()
}

/// Every schedule with its next slots after `now` (the tick's own rule: the first slot after
/// the later of `now`, its last fired slot and its last change).
pub async fn list_schedules(
    store: &Store,
    now: OffsetDateTime,
) -> Result<Vec<ScheduleSummary>, ScheduleError> {
    let mut out = Vec::new();
    for s in store.schedules().await? {
        let next_fires = if s.paused {
            Vec::new()
        } else {
            let spec: Spec = s.spec.parse()?;
            let tz = zone(&s.tz)?;
            let floor = s.last_slot.map_or(s.updated_at, |l| l.max(s.updated_at));
            std::iter::successors(
                spec.next_after(spec::to_chrono(floor.max(now)), &tz),
                |at| spec.next_after(*at, &tz),
            )
            .take(NEXT_FIRES)
            .map(spec::to_time)
            .collect()
        };
        out.push(ScheduleSummary {
            id: s.id,
            piece: s.piece,
            task: s.task,
            spec: s.spec,
            tz: s.tz,
            misfire: s.misfire,
            paused: s.paused,
            next_fire: next_fires.first().copied(),
            next_fires,
            fired: s.fired,
            missed: s.missed,
            owner: s.owner,
        });
    }
    Ok(out)
}

/// Pauses (`true`) or resumes (`false`) a schedule.
pub async fn set_paused(
    store: &Store,
    id: &str,
    paused: bool,
    actor: &str,
) -> Result<(), ScheduleError> {
    if store.set_schedule_paused(id, paused, actor).await? {
        Ok(())
    } else {
        Err(ScheduleError::NoSuchSchedule(id.to_string()))
    }
}

/// Changes a schedule after the same checks as [`add_schedule`]; the slots it fired stay
/// fired, and its paused state stays as it is.
pub async fn update_schedule(
    store: &Store,
    config: &Config,
    id: &str,
    request: ScheduleRequest,
) -> Result<(), ScheduleError> {
    if request.task.trim().is_empty() {
        return Err(ScheduleError::EmptyTask);
    }
    let tz = zone(&request.tz)?;
    request
        .spec
        .check_fires(spec::to_chrono(store.now()), &tz)?;
    check_piece(store, config, &request.piece).await?;
    let updated = store
        .update_schedule(
            id,
            &NewSchedule {
                piece: request.piece,
                task: request.task,
                spec: request.spec.to_string(),
                tz: tz.name().unwrap_or(&request.tz).to_string(),
                misfire: request.misfire.as_str().to_string(),
                created_by: request.created_by.clone(),
                // An update keeps the schedule's owner.
                owner: None,
            },
            &request.created_by,
        )
        .await?;
    if updated {
        Ok(())
    } else {
        Err(ScheduleError::NoSuchSchedule(id.to_string()))
    }
}

/// Removes a schedule; the jobs it fired stay.
pub async fn remove_schedule(store: &Store, id: &str, actor: &str) -> Result<(), ScheduleError> {
    if store.remove_schedule(id, actor).await? {
        Ok(())
    } else {
        Err(ScheduleError::NoSuchSchedule(id.to_string()))
    }
}
