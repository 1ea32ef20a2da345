//! A job's files end to end: uploaded with the submit, laid out in the run's `input/` when a
//! real worker claims it, what the agent leaves in `output/` recorded when the run ends, and
//! both read from the store after the worker and its run directory are gone. Real parts: the
//! scripted model server over HTTP on 127.0.0.1, a SQLite store on disk, a worker.

use crate::support;

use maestro_app::{
    FileError, FileKind, JobError, JobQueue as _, JobStatus, Store, job_files, read_job_file,
};
use maestro_store::CommentKind;
use maestro_testkit::ScriptedLlm;
use pretty_assertions::assert_eq;
use support::{Project, done, read, upload, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_reach_the_run_and_its_outputs_are_read_after_the_worker_is_gone() {
    let server = ScriptedLlm::start([
        read("input/data/x.txt"),
        write("output/y.txt", "made from: hello input"),
        write("output/sub/z.md", "# z"),
        done("wrote y"),
    ])
    .await;
    let project = Project::sqlite(&server.base_url()).await;
    let id = project
        .submit(
            "Read input/data/x.txt and write output/y.txt",
            vec![upload("data/x.txt", b"hello input")],
        )
        .await;
    // A host file outside the workspace, and a link to it planted in the run's output/
    // before the run: it must not leave the host through the job's files.
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("secret"), "host secret").unwrap();
    let output = project
        .config
        .paths
        .runs_dir
        .join(id.to_string())
        .join("output");
    std::fs::create_dir_all(&output).unwrap();
    std::os::unix::fs::symlink(secret.path().join("secret"), output.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(secret.path(), output.join("dir")).unwrap();

    let worker = project.worker();
    project.until(id, JobStatus::Completed).await;
    assert_eq!(worker.stop().await.finished, 1);

    // The agent read the input where the worker laid it out.
    let events = project.stored(id).await;
    let results: Vec<String> = events
        .iter()
        .filter(|e| e.event.kind() == "tool_result")
        .map(|e| serde_json::to_string(&e.event).unwrap())
        .collect();
    assert!(results[0].contains("hello input"), "{results:?}");
    // Its task said where the inputs are and that output/ is delivered.
    let first = serde_json::to_string(&server.requests()[0]).unwrap();
    assert!(first.contains("input/data/x.txt"), "{first}");
    assert!(
        first.contains("Files you leave in `output/` are delivered"),
        "{first}"
    );
    // The links were left out, and a note on the job says so.
    let notes: Vec<String> = project
        .store
        .comments(id)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.kind == CommentKind::Note)
        .map(|c| c.body)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("output/leak.txt: a symlink"), "{notes:?}");
    assert!(notes[0].contains("output/dir: a symlink"), "{notes:?}");

    // The worker is gone; so is the run directory: the files come from the store, read
    // through a store handle of its own.
    std::fs::remove_dir_all(&project.config.paths.runs_dir).unwrap();
    let store = Store::open(&project.url).await.unwrap();
    let listed: Vec<(FileKind, String, u64)> = job_files(&store, id)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.kind, f.path, f.size))
        .collect();
    assert_eq!(
        listed,
        vec![
            (FileKind::Input, "data/x.txt".into(), 11),
            (FileKind::Output, "sub/z.md".into(), 3),
            (FileKind::Output, "y.txt".into(), 22),
        ]
    );
    let (file, bytes) = read_job_file(&store, id, "y.txt").await.unwrap();
    assert_eq!(
        (file.kind, &bytes[..]),
        (FileKind::Output, &b"made from: hello input"[..])
    );
    let (file, bytes) = read_job_file(&store, id, "data/x.txt").await.unwrap();
    assert_eq!(
        (file.kind, &bytes[..]),
        (FileKind::Input, &b"hello input"[..])
    );
    // What a front end lists carries no host path.
    let json = serde_json::to_string(&job_files(&store, id).await.unwrap()).unwrap();
    assert!(
        !json.contains(&project.dir.path().display().to_string()),
        "{json}"
    );
    assert!(json.contains(r#""kind":"output""#), "{json}");

    for leaked in ["leak.txt", "dir/secret"] {
        let missing = read_job_file(&store, id, leaked).await.unwrap_err();
        assert!(matches!(missing, FileError::NoSuchFile { .. }), "{missing}");
    }
    for outside in ["../secret", "/etc/passwd", "a/../../b", "a\\b"] {
        let refused = read_job_file(&store, id, outside).await.unwrap_err();
        assert!(
            matches!(refused, FileError::BadPath { .. }),
            "{outside}: {refused}"
        );
    }
    let other = maestro_app::JobId::new();
    assert!(matches!(
        job_files(&store, other).await,
        Err(FileError::NoSuchJob(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_outside_the_input_directory_or_over_the_limits_are_refused_and_nothing_is_stored()
{
    let mut project = Project::sqlite("http://127.0.0.1:9/v1").await;
    project.config.files.max_files = 2;
    project.config.files.max_upload_mb = 1;
    let cases = [
        (vec![upload("../x", b"1")], "`..` segment"),
        (vec![upload("/etc/passwd", b"1")], "absolute"),
        (vec![upload("a\\b", b"1")], "backslash"),
        (vec![upload("a\0b", b"1")], "NUL"),
        (vec![upload("a", b"1"), upload("a", b"2")], "given twice"),
        (
            vec![upload("a", b""), upload("b", b""), upload("c", b"")],
            "over the limit of 2 per job",
        ),
        (
            vec![upload("big", &vec![0; 1024 * 1024 + 1])],
            "`files.max_upload_mb`",
        ),
    ];
    for (inputs, why) in cases {
        let refused = maestro_app::submit(
            &project.store,
            &project.config,
            project.submission("t", inputs),
        )
        .await
        .unwrap_err();
        assert!(matches!(refused, JobError::Files(_)), "{refused:?}");
        assert!(refused.to_string().contains(why), "{why}: {refused}");
    }
    assert_eq!(project.store.jobs(None).await.unwrap(), vec![]);
}

/// A park records what `output/` holds then, as an end does; a file over the limit is left out
/// with a note on the job, and the run is not failed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_park_records_the_outputs_and_a_file_over_the_limit_is_left_out_with_a_note() {
    let server = ScriptedLlm::start([
        write("output/empty.txt", ""),
        write("output/a.txt", "more than nothing"),
        support::ask("Is this enough?"),
    ])
    .await;
    let mut project = Project::sqlite(&server.base_url()).await;
    // Every file that holds a byte is over the limit.
    project.config.files.max_upload_mb = 0;
    let id = project
        .submit("Write two files, then ask", Vec::new())
        .await;
    let worker = project.worker();
    project.until(id, JobStatus::WaitingInput).await;
    worker.stop().await;
    let listed: Vec<(FileKind, String)> = job_files(&project.store, id)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.kind, f.path))
        .collect();
    assert_eq!(listed, vec![(FileKind::Output, "empty.txt".to_string())]);
    let notes: Vec<String> = project
        .store
        .comments(id)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.kind == CommentKind::Note)
        .map(|c| c.body)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("output/a.txt: 17 bytes, over 0 per file (`files.max_upload_mb`)"),
        "{notes:?}"
    );
}

/// The tool results of the job's record, as the model read them: `(tool, ok, output)`.
fn tool_results(events: &[maestro_protocol::EventRecord]) -> Vec<(String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            maestro_protocol::RunEvent::ToolResult {
                tool, ok, output, ..
            } => Some((tool.clone(), *ok, output.clone().unwrap_or_default())),
            _ => None,
        })
        .collect()
}

/// The job's output files with their bytes, by path, read from `store`.
async fn outputs(store: &Store, id: maestro_app::JobId) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for file in job_files(store, id).await.unwrap() {
        if file.kind == FileKind::Output {
            let (_, bytes) = read_job_file(store, id, &file.path).await.unwrap();
            found.push((file.path, String::from_utf8(bytes.to_vec()).unwrap()));
        }
    }
    found
}

/// A run writes a file to `output/` and asks a question; the job parks on one node and its
/// answer is run on another (its own store handle and runs directory, none of the first's
/// files): the run finds the file it wrote before the question, and the job ends with both.
async fn outputs_recorded_at_a_park_are_laid_out_where_the_run_resumes(project: Project) {
    let id = project
        .submit("Write before the question, read it after", Vec::new())
        .await;
    let first = project.worker();
    project.until(id, JobStatus::WaitingInput).await;
    first.stop().await;
    maestro_app::answer_job(&project.store, id, "alice", "go on")
        .await
        .unwrap();

    let mut elsewhere = project.config.clone();
    elsewhere.paths.runs_dir = project.dir.path().join("other-node/runs");
    let store = Store::open(&project.url).await.unwrap();
    let second = project.worker_with(store, elsewhere.clone());
    second.start();
    project.until(id, JobStatus::Completed).await;
    second.stop().await;

    let results = tool_results(&project.stored(id).await);
    let read_back = results
        .iter()
        .find(|(tool, ..)| tool == "Read")
        .unwrap_or_else(|| panic!("no Read in {results:?}"));
    assert!(
        read_back.1 && read_back.2.contains("written before the question"),
        "{results:?}"
    );
    // The second node's workspace holds it too, and the store keeps both files.
    let laid_out = elsewhere.paths.runs_dir.join(id.to_string()).join("output");
    assert_eq!(
        std::fs::read_to_string(laid_out.join("before.txt")).unwrap(),
        "written before the question"
    );
    assert_eq!(
        outputs(&project.store, id).await,
        vec![
            ("after.txt".into(), "written after the answer".into()),
            ("before.txt".into(), "written before the question".into()),
        ]
    );
}

fn park_and_resume_turns() -> Vec<maestro_testkit::Turn> {
    vec![
        write("output/before.txt", "written before the question"),
        support::ask("Go on?"),
        read("output/before.txt"),
        write("output/after.txt", "written after the answer"),
        done("both written"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_jobs_outputs_reach_the_node_that_resumes_it() {
    let server = ScriptedLlm::start(park_and_resume_turns()).await;
    let project = Project::sqlite(&server.base_url()).await;
    outputs_recorded_at_a_park_are_laid_out_where_the_run_resumes(project).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_parked_jobs_outputs_reach_the_node_that_resumes_it_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let server = ScriptedLlm::start(park_and_resume_turns()).await;
    let url = maestro_app::StoreUrl::Postgres { url: cluster.url() };
    let project = Project::on(tempfile::tempdir().unwrap(), url, &server.base_url()).await;
    outputs_recorded_at_a_park_are_laid_out_where_the_run_resumes(project).await;
}

/// A file a tool call wrote is in the store as soon as the call's result is in the record,
/// while the run goes on (its next model call is held back): a run that takes the job over from
/// there finds it, though it does not run the call again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_files_are_stored_before_its_result_is() {
    let server = ScriptedLlm::start([
        write("output/a.txt", "written by the first call"),
        done("written").with_delay(std::time::Duration::from_secs(3)),
    ])
    .await;
    let project = Project::sqlite(&server.base_url()).await;
    let id = project.submit("Write a file", Vec::new()).await;
    let worker = project.worker();
    let seen = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let events = project.stored(id).await;
            if !tool_results(&events).is_empty() {
                return events;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the call's result was never recorded");
    assert!(
        !seen.iter().any(|e| e.event.kind() == "run_finished"),
        "the run ended before the check"
    );
    assert_eq!(
        outputs(&project.store, id).await,
        vec![("a.txt".into(), "written by the first call".into())]
    );
    project.until(id, JobStatus::Completed).await;
    worker.stop().await;
}
