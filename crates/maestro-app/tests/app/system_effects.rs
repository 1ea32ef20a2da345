//! TAKT system steps in a job: `enqueue_task` makes a real job in the SQLite store, and
//! `task_queue_context` counts the store's queue.

use crate::support;

use maestro_app::{JobQueue, JobStatus};
use maestro_protocol::RunEvent;
use maestro_testkit::ScriptedLlm;
use support::{Project, done};

const WORKFLOW: &str = r#"
name: enqueue-one
description: enqueues a follow-up job and checks the queue holds it
max_steps: 5
initial_step: enqueue
steps:
  - name: enqueue
    mode: system
    effects:
      - type: enqueue_task
        mode: new
        workflow: files
        task: "Write the changelog for {context:look.task.body}"
    rules:
      - condition: when(effect.enqueue.enqueue_task.success == true)
        next: count
      - condition: when(effect.enqueue.enqueue_task.failed == true)
        next: ABORT
  - name: count
    mode: system
    system_inputs:
      - type: task_queue_context
        source: current_project
        as: queue
        exclude_current_task: true
    rules:
      - condition: when(context.count.queue.pending_count == 1)
        next: COMPLETE
      - condition: when(context.count.queue.pending_count != 1)
        next: ABORT
"#;

#[tokio::test]
async fn enqueue_task_submits_a_job_to_the_store_and_the_queue_counts_it() {
    let server = ScriptedLlm::start(vec![done("The changelog is written.")]).await;
    let project = Project::sqlite(&server.base_url()).await;
    let pieces = &project.config.paths.pieces_dirs[0];
    std::fs::write(
        pieces.join("enqueue-one.yaml"),
        WORKFLOW.replace(" for {context:look.task.body}", "."),
    )
    .unwrap();
    let mut submission = project.submission("Release 1.2.", vec![]);
    submission.piece = "enqueue-one".into();
    let id = maestro_app::submit(&project.store, &project.config, submission)
        .await
        .unwrap();
    let worker = project.worker();
    project.until(id, JobStatus::Completed).await;
    let events = project.stored(id).await;
    let job_id = events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::EffectResult { effect, result, .. } if effect == "enqueue_task" => {
                Some(result["job_id"].as_str().unwrap().to_owned())
            }
            _ => None,
        })
        .expect("the effect's result is recorded");
    let counted = events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::SystemInputs { inputs, .. } => Some(inputs["queue"].clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(counted["pending_count"], 1, "{counted}");
    let jobs = project.store.jobs(None).await.unwrap();
    assert_eq!(jobs.len(), 2);
    let made = jobs.iter().find(|j| j.id.to_string() == job_id).unwrap();
    assert_eq!(made.piece, "files");
    assert_eq!(made.task, "Write the changelog.");
    assert!(
        made.submitted_by.starts_with("workflow effect "),
        "{}",
        made.submitted_by
    );
    // The worker runs the new job too.
    project.until(made.id, JobStatus::Completed).await;
    worker.stop().await;
}
