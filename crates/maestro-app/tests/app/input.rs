//! What the use cases refuse before anything is stored: an empty task or answer, fewer than one
//! attempt, a schedule that would never fire. Each on a real SQLite file.

use std::sync::Arc;
use std::time::Duration;

use maestro_app::{
    JobError, Misfire, ScheduleError, ScheduleRequest, Spec, SpecError, Submission, add_schedule,
    answer_job, submit,
};
use maestro_config::Config;
use maestro_store::{JobQueue as _, JobStatus, ManualClock, Outcome, Store, StoreUrl};
use pretty_assertions::assert_eq;
use serde_json::json;

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

const T0: time::OffsetDateTime = time::macros::datetime!(2026-01-01 00:00:00 UTC);

struct Project {
    dir: tempfile::TempDir,
    store: Store,
    config: Config,
}

impl Project {
    async fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("one.yaml"), PIECE).unwrap();
        let url: StoreUrl = format!("sqlite://{}", dir.path().join("m.db").display())
            .parse()
            .unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let store = Store::open(&url)
            .await
            .unwrap()
            .with_clock(clock as Arc<dyn maestro_store::Clock>);
        Project {
            dir,
            store,
            config: Config::default(),
        }
    }

    fn piece(&self) -> String {
        self.dir.path().join("one.yaml").display().to_string()
    }

    async fn submit(&self, task: &str, max_attempts: Option<i64>) -> Result<String, JobError> {
        submit(
            &self.store,
            &self.config,
            Submission {
                piece: self.piece(),
                task: task.into(),
                workspace: None,
                class: None,
                priority: 0,
                max_attempts,
                submitted_by: "alice".into(),
                owner: None,
                inputs: Vec::new(),
                budget: Default::default(),
            },
        )
        .await
        .map(|id| id.to_string())
    }

    async fn add(&self, task: &str, spec: Spec) -> Result<String, ScheduleError> {
        add_schedule(
            &self.store,
            &self.config,
            ScheduleRequest {
                piece: self.piece(),
                task: task.into(),
                spec,
                tz: "UTC".into(),
                misfire: Misfire::Skip,
                created_by: "alice".into(),
                owner: None,
            },
        )
        .await
    }
}

#[tokio::test]
async fn an_empty_task_is_refused_at_submit_and_nothing_is_stored() {
    let project = Project::new().await;
    for task in ["", "   ", "\n\t "] {
        let error = project.submit(task, None).await.unwrap_err();
        assert!(matches!(error, JobError::EmptyTask), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the task is empty; say what the job should do, e.g. `--task \"make the failing tests pass\"`"
        );
    }
    assert_eq!(project.store.jobs(None).await.unwrap(), vec![]);
    project.submit("fix the tests", None).await.unwrap();
    assert_eq!(project.store.jobs(None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn fewer_than_one_attempt_is_refused_at_submit() {
    let project = Project::new().await;
    for n in [0, -1] {
        let error = project.submit("fix the tests", Some(n)).await.unwrap_err();
        assert!(
            matches!(error, JobError::MaxAttempts(got) if got == n),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "--max-attempts {n} is not allowed: a job needs at least 1 attempt; give 1 for no \
                 retry, or leave the flag out for the default (3)"
            )
        );
    }
    assert_eq!(project.store.jobs(None).await.unwrap(), vec![]);
    let id = project.submit("fix the tests", Some(1)).await.unwrap();
    let job = project
        .store
        .job(id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.max_attempts, 1);
}

#[tokio::test]
async fn an_empty_answer_is_refused_and_the_job_keeps_waiting() {
    let project = Project::new().await;
    let id = project
        .submit("style the button", None)
        .await
        .unwrap()
        .parse()
        .unwrap();
    let claimed = project
        .store
        .claim_job(id, "w1", Duration::from_secs(30), false)
        .await
        .unwrap()
        .unwrap();
    project
        .store
        .finish(
            &claimed.lease,
            Outcome {
                status: JobStatus::WaitingInput,
                result: Some(json!({"result": "Which colour?"})),
                reason: None,
            },
        )
        .await
        .unwrap();
    for text in ["", " ", "\n"] {
        let error = answer_job(&project.store, id, "alice", text)
            .await
            .unwrap_err();
        assert!(
            matches!(error, JobError::EmptyAnswer(got) if got == id),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "the answer to job {id} is empty; write the answer to its question (`maestro jobs \
                 show {id}` prints the question)"
            )
        );
    }
    let job = project.store.job(id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::WaitingInput);
    assert_eq!(
        project.store.answers(id).await.unwrap(),
        Vec::<String>::new()
    );

    answer_job(&project.store, id, "alice", "blue")
        .await
        .unwrap();
    let job = project.store.job(id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Queued);
    assert_eq!(project.store.answers(id).await.unwrap(), vec!["blue"]);
}

#[tokio::test]
async fn a_once_schedule_in_the_past_is_refused() {
    let project = Project::new().await;
    // The store's clock says 2026-01-01T00:00:00Z.
    for past in [
        "2025-12-31T23:59:59Z",
        "2026-01-01T00:00:00Z",
        "2020-06-01T09:00:00+02:00",
    ] {
        let error = project
            .add("report", Spec::once(past).unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(error, ScheduleError::Spec(SpecError::OnceInPast { .. })),
            "{error:?}"
        );
        let at = Spec::once(past).unwrap().to_string().replace("once ", "");
        assert_eq!(
            error.to_string(),
            format!(
                "--once `{at}` is in the past (it is now 2026-01-01T00:00:00Z), so it would never \
                 fire; give a time still to come"
            )
        );
    }
    assert_eq!(project.store.schedules().await.unwrap(), vec![]);
    project
        .add("report", Spec::once("2026-01-01T00:00:01Z").unwrap())
        .await
        .unwrap();
    assert_eq!(project.store.schedules().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_cron_rule_that_matches_no_date_is_refused() {
    let project = Project::new().await;
    for expr in ["0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 11 *"] {
        let error = project
            .add("report", Spec::cron(expr).unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(error, ScheduleError::Spec(SpecError::NeverMatches(_))),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "--cron `{expr}` matches no date, so it would never fire; check its day-of-month \
                 and month fields (February has no 30th or 31st; April, June, September and \
                 November no 31st)"
            )
        );
    }
    assert_eq!(project.store.schedules().await.unwrap(), vec![]);
    // February 29th comes, if only every fourth year.
    project
        .add("report", Spec::cron("0 0 29 2 *").unwrap())
        .await
        .unwrap();
    assert_eq!(project.store.schedules().await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_empty_schedule_task_is_refused() {
    let project = Project::new().await;
    let error = project
        .add("  ", Spec::daily("09:00").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(error, ScheduleError::EmptyTask), "{error:?}");
    assert_eq!(project.store.schedules().await.unwrap(), vec![]);
}
