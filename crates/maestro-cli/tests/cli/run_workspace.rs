//! `maestro run --workspace DIR` on a directory of the user's own: an editing movement may write
//! anywhere inside it, as the user meant, and still nowhere outside it. The real binary against
//! the scripted model server.

use crate::support;

use std::path::{Path, PathBuf};

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::json;
use support::{args, events, maestro, tool_results};

const EDITOR: &str = "\
name: editor
description: edits the repository it is pointed at
max_movements: 2
initial_movement: edit
movements:
  - name: edit
    edit: true
    persona: You edit.
    instruction: \"{task}\"
    allowed_tools: [Read, Write]
    rules: []
";

fn only_run(runs: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_editing_movement_writes_at_the_root_of_a_named_workspace() {
    let server = ScriptedLlm::start([
        Turn::tool_call(
            "Write",
            json!({"file_path": "f.txt", "content": "written at the root\n"}),
        ),
        Turn::tool_call(
            "Write",
            json!({"file_path": "../outside.txt", "content": "escaped\n"}),
        ),
        Turn::tool_call("complete", json!({"status": "success", "result": "done"})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("piece.yaml"), EDITOR).unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "# A repository\n").unwrap();
    let runs = dir.path().join("runs");
    let out = maestro(
        dir.path(),
        args(&[
            "run",
            "piece.yaml",
            "--task",
            "Add f.txt at the top of the repository.",
            "--workspace",
            repo.to_str().unwrap(),
            "--runs-dir",
            runs.to_str().unwrap(),
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
            "--tool-mode",
            "native",
        ]),
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("f.txt")).unwrap(),
        "written at the root\n"
    );
    assert!(!dir.path().join("outside.txt").exists());
    assert!(
        !repo.join("output").exists(),
        "no job layout in the user's directory"
    );
    let events = events(&only_run(&runs));
    assert_eq!(
        tool_results(&events),
        vec![
            ("Write".to_string(), true),
            ("Write".to_string(), false),
            ("complete".to_string(), true)
        ]
    );
}

/// A mistyped workspace or piece is said before anything is recorded: no directory is made
/// where the user did not mean one, no job is left behind, and no model is asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_or_piece_that_is_not_there_or_does_not_load_is_refused_before_anything_is_recorded()
 {
    let server = ScriptedLlm::start([]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("piece.yaml"), EDITOR).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "a file\n").unwrap();
    // A piece file that does not load: its errors are printed, and no failed job is recorded.
    std::fs::write(
        dir.path().join("broken.yaml"),
        EDITOR.replacen("max_movements:", "max_movemnts:", 1),
    )
    .unwrap();
    let url = server.base_url();
    let common = |extra: &[&str]| {
        let mut list = vec![
            "run",
            "--task",
            "edit it",
            "--llm-base-url",
            url.as_str(),
            "--model",
            "scripted-model",
        ];
        list.extend_from_slice(extra);
        args(&list)
    };
    let missing = dir.path().join("no/such/dir");
    let cases: [(Vec<String>, &str); 5] = [
        (
            common(&["piece.yaml", "--workspace", missing.to_str().unwrap()]),
            "does not exist; create it first",
        ),
        (
            common(&["piece.yaml", "--workspace", "notes.txt"]),
            "is not a directory",
        ),
        (common(&["no-such-piece"]), "no-such-piece"),
        (common(&["broken.yaml"]), "unknown field `max_movemnts`"),
        // Named, not given as a file: its errors, not "no piece named `broken`".
        (
            common(&["broken", "--pieces-dir", "."]),
            "unknown field `max_movemnts`",
        ),
    ];
    for (argv, said) in cases {
        let out = maestro(dir.path(), argv.clone()).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {stderr}");
        assert!(stderr.contains(said), "{argv:?}: {stderr}");
    }
    assert!(!dir.path().join("no").exists(), "the workspace was created");
    assert!(server.requests().is_empty());
    let listed = maestro(dir.path(), args(&["jobs", "list", "--json"])).await;
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.status.code(), Some(0), "{stdout}");
    // One JSON line per job; the store exists (a read-only command does not create one).
    assert_eq!(stdout.trim(), "", "a job was left behind");
}
