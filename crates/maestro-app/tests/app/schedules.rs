//! Schedules through the app's functions, on a real SQLite file with a clock the tests move:
//! the slots `list_schedules` says are to come (the next few, read in the schedule's zone by
//! the scheduler's own rule), and a schedule that leaves the choice of piece to the worker.

use std::sync::Arc;

use maestro_app::{
    GRACE, Misfire, NEXT_FIRES, ScheduleRequest, Spec, add_schedule, list_schedules, set_paused,
    tick, update_schedule,
};
use maestro_config::Config;
use maestro_store::{JobQueue as _, ManualClock, Store, StoreUrl};
use pretty_assertions::assert_eq;
use time::format_description::well_known::Rfc3339;

const PIECE: &str = "\
name: one
description: one movement that completes
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You work.
    instruction: \"{task}\"
    allowed_tools: [Read]
    rules: []
";

/// A Friday, two days before Europe/Paris moves its clocks forward (2026-03-29).
const T0: time::OffsetDateTime = time::macros::datetime!(2026-03-27 12:00:00 UTC);

async fn store_with_clock(dir: &std::path::Path) -> (Store, Arc<ManualClock>) {
    std::fs::write(dir.join("one.yaml"), PIECE).unwrap();
    let url: StoreUrl = format!("sqlite://{}", dir.join("m.db").display())
        .parse()
        .unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = Store::open(&url)
        .await
        .unwrap()
        .with_clock(clock.clone() as Arc<dyn maestro_store::Clock>);
    (store, clock)
}

async fn store(dir: &std::path::Path) -> Store {
    store_with_clock(dir).await.0
}

fn request(piece: String, spec: &str, tz: &str) -> ScheduleRequest {
    ScheduleRequest {
        piece,
        task: "report".into(),
        spec: spec.parse().unwrap(),
        tz: tz.into(),
        misfire: Misfire::Skip,
        created_by: "alice".into(),
        owner: None,
    }
}

async fn add(store: &Store, dir: &std::path::Path, spec: &str, tz: &str) -> String {
    let piece = dir.join("one.yaml").display().to_string();
    add_schedule(store, &Config::default(), request(piece, spec, tz))
        .await
        .unwrap()
}

fn texts(list: &[time::OffsetDateTime]) -> Vec<String> {
    list.iter().map(|at| at.format(&Rfc3339).unwrap()).collect()
}

#[tokio::test]
async fn a_schedule_lists_its_next_slots_in_its_zone_across_a_clock_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let daily = add(&store, dir.path(), "daily 09:00", "Europe/Paris").await;
    // A zone named in another case is found, and kept in the database's spelling.
    let weekly = add(&store, dir.path(), "weekly mon@09:00", "america/new_york").await;
    let once = add(&store, dir.path(), "once 2026-04-01T10:00:00Z", "UTC").await;
    let paused = add(&store, dir.path(), "every 1h", "UTC").await;
    set_paused(&store, &paused, true, "alice").await.unwrap();

    let listed = list_schedules(&store, T0).await.unwrap();
    let of = |id: &str| listed.iter().find(|s| s.id == id).unwrap();

    // 09:00 in Paris is 08:00 UTC until the clocks move on the 29th, 07:00 after.
    assert_eq!(
        texts(&of(&daily).next_fires),
        [
            "2026-03-28T08:00:00Z",
            "2026-03-29T07:00:00Z",
            "2026-03-30T07:00:00Z",
            "2026-03-31T07:00:00Z",
            "2026-04-01T07:00:00Z",
        ]
    );
    assert_eq!(of(&weekly).tz, "America/New_York");
    // New York moved on 8 March: 09:00 there is 13:00 UTC.
    assert_eq!(
        texts(&of(&weekly).next_fires),
        [
            "2026-03-30T13:00:00Z",
            "2026-04-06T13:00:00Z",
            "2026-04-13T13:00:00Z",
            "2026-04-20T13:00:00Z",
            "2026-04-27T13:00:00Z",
        ]
    );
    // A rule with fewer slots left lists those it has; a paused one lists none.
    assert_eq!(texts(&of(&once).next_fires), ["2026-04-01T10:00:00Z"]);
    assert!(of(&paused).next_fires.is_empty());
    assert_eq!(of(&paused).next_fire, None);
    for s in &listed {
        assert!(s.next_fires.len() <= NEXT_FIRES);
        assert_eq!(s.next_fire, s.next_fires.first().copied(), "{s:?}");
        // Each slot is the scheduler's next after the one before.
        let spec: Spec = s.spec.parse().unwrap();
        let tz = maestro_app::zone(&s.tz).unwrap();
        for pair in s.next_fires.windows(2) {
            let after = chrono::DateTime::from_timestamp(pair[0].unix_timestamp(), 0).unwrap();
            let next = spec.next_after(after, &tz).unwrap();
            assert_eq!(next.timestamp(), pair[1].unix_timestamp(), "{s:?}");
        }
    }

    // The JSON a client reads carries them as RFC 3339 text.
    let json = serde_json::to_value(of(&daily)).unwrap();
    assert_eq!(json["next_fires"][1], "2026-03-29T07:00:00Z");
    assert_eq!(json["next_fire"], json["next_fires"][0]);
}

#[tokio::test]
async fn a_schedule_may_leave_the_piece_to_the_worker_and_fires_auto_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = store_with_clock(dir.path()).await;
    let config = Config::default();
    // Added with `auto`, as a submitted job may be.
    let id = add_schedule(&store, &config, request("auto".into(), "every 1h", "UTC"))
        .await
        .unwrap();
    // Changed to a piece and back.
    let one = dir.path().join("one.yaml").display().to_string();
    update_schedule(&store, &config, &id, request(one, "every 1h", "UTC"))
        .await
        .unwrap();
    update_schedule(
        &store,
        &config,
        &id,
        request("auto".into(), "every 1h", "UTC"),
    )
    .await
    .unwrap();
    // A name that is neither a piece nor `auto` is still refused.
    let error = add_schedule(&store, &config, request("nope".into(), "every 1h", "UTC"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, maestro_app::ScheduleError::Piece(_)),
        "{error:?}"
    );

    clock.advance(std::time::Duration::from_secs(3600));
    let report = tick(&store, store.now(), GRACE).await.unwrap();
    assert_eq!(report.fired, 1, "{report:?}");
    let fired: Vec<_> = store
        .jobs(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.schedule_id.as_deref() == Some(id.as_str()))
        .collect();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].piece, "auto");
}
