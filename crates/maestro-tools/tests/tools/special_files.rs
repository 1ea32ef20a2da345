//! Tools never hang on FIFOs, sockets or devices, never follow a link out of the pieces, skills
//! and docs directories, and read-only SQLite leaves `input/` as it found it.

use crate::support;

use std::path::Path;
use std::time::Duration;

use maestro_tools::{BashSandboxMode, ToolOutput, ToolsConfig};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::Bench;

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A call that must answer well before the registry's own limit; a hang fails the test.
async fn answer(b: &Bench, tool: &str, input: serde_json::Value) -> ToolOutput {
    tokio::time::timeout(Duration::from_secs(30), b.call(tool, input))
        .await
        .unwrap_or_else(|_| panic!("{tool} hung"))
}

#[tokio::test]
async fn fifos_are_refused_by_read_write_edit_and_grep_without_hanging() {
    let b = Bench::new(BashSandboxMode::Always).editing();
    mkfifo(&b.path("output/p"));
    let fifo = |tool: &str, verb: &str| {
        ToolOutput::error(format!(
            "`output/p` is a FIFO (named pipe), not a regular file; {tool} only {verb} regular files"
        ))
    };
    assert_eq!(
        answer(&b, "Read", json!({"file_path": "output/p"})).await,
        fifo("Read", "reads")
    );
    assert_eq!(
        answer(
            &b,
            "Write",
            json!({"file_path": "output/p", "content": "x"})
        )
        .await,
        fifo("Write", "writes")
    );
    assert_eq!(
        answer(
            &b,
            "Edit",
            json!({"file_path": "output/p", "old_string": "a", "new_string": "b"})
        )
        .await,
        fifo("Edit", "reads")
    );
    assert_eq!(
        answer(&b, "Grep", json!({"pattern": "x", "path": "output/p"})).await,
        fifo("Grep", "reads")
    );
    // A walk over a directory holding the FIFO skips it and still finds the regular file.
    b.write("output/a.txt", "needle\n");
    assert_eq!(
        answer(&b, "Grep", json!({"pattern": "needle"})).await,
        ToolOutput::ok("output/a.txt:1:needle\n")
    );
    let glob = answer(&b, "Glob", json!({"pattern": "output/*"})).await;
    assert!(glob.ok, "{glob:?}");
}

#[tokio::test]
async fn sockets_and_devices_are_refused_by_name() {
    let b = Bench::new(BashSandboxMode::Always);
    let _listener = std::os::unix::net::UnixListener::bind(b.path("input/s")).unwrap();
    assert_eq!(
        answer(&b, "Read", json!({"file_path": "input/s"})).await,
        ToolOutput::error(
            "`input/s` is a socket, not a regular file; Read only reads regular files"
        )
    );
    mkfifo(&b.path("input/data.db"));
    assert_eq!(
        answer(
            &b,
            "SQLite",
            json!({"database": "input/data.db", "query": "SELECT 1"})
        )
        .await,
        ToolOutput::error(
            "`input/data.db` is a FIFO (named pipe), not a regular file; SQLite only reads regular files"
        )
    );
}

const PIECE: &str = "name: demo\ndescription: A demo piece\nmax_movements: 5\ninitial_movement: work\nmovements:\n  - name: work\n    edit: false\n    persona: You are a careful worker.\n    instruction: Do the work.\n    allowed_tools: [Read]\n    rules: []\n";

fn pieces_bench(pieces: &Path) -> Bench {
    Bench::with_config(ToolsConfig {
        pieces_dir: Some(pieces.to_path_buf()),
        ..ToolsConfig::default()
    })
}

#[tokio::test]
async fn update_piece_refuses_a_symlinked_piece_and_leaves_its_target_alone() {
    let pieces = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.yaml");
    std::fs::write(&victim, "precious: true\n").unwrap();
    std::os::unix::fs::symlink(&victim, pieces.path().join("demo.yaml")).unwrap();
    let b = pieces_bench(pieces.path());
    let out = answer(&b, "UpdatePiece", json!({"name": "demo", "content": PIECE})).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "nothing was saved: `demo.yaml` is a symbolic link, not a regular file; UpdatePiece only writes regular files"
        )
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious: true\n"
    );
    let out = answer(&b, "GetPiece", json!({"name": "demo"})).await;
    assert!(!out.ok && !out.output.contains("precious"), "{out:?}");
    assert!(out.output.contains("symbolic link"), "{out:?}");
}

#[tokio::test]
async fn create_piece_refuses_a_dangling_link_and_creates_nothing_outside() {
    let pieces = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let planted = outside.path().join("planted.yaml");
    std::os::unix::fs::symlink(&planted, pieces.path().join("demo.yaml")).unwrap();
    let b = pieces_bench(pieces.path());
    let out = answer(&b, "CreatePiece", json!({"name": "demo", "content": PIECE})).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "nothing was saved: `demo.yaml` is a symbolic link, not a regular file; CreatePiece only writes regular files"
        )
    );
    assert!(!planted.exists());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn create_piece_refuses_report_names_that_leave_the_report_directory() {
    let pieces = tempfile::tempdir().unwrap();
    let b = pieces_bench(pieces.path());
    let takt = "name: demo\ndescription: A demo piece\nmax_movements: 5\ninitial_movement: work\nmovements:\n  - name: work\n    edit: false\n    persona: You are a careful worker.\n    instruction_template: Do the work.\n    output_contracts:\n      report:\n        - name: ../escape.md\n    rules:\n      - condition: done\n        next: COMPLETE\n";
    let out = answer(&b, "CreatePiece", json!({"name": "demo", "content": takt})).await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains(
            "demo.yaml:12:17: movements[0].output_contracts.report[0].name: report name `../escape.md` must be a plain file name"
        ),
        "{out:?}"
    );
    assert_eq!(std::fs::read_dir(pieces.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn symlinked_skills_and_docs_are_not_followed() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.md");
    std::fs::write(&secret, "# host secret\n").unwrap();
    let skills = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&secret, skills.path().join("linked.md")).unwrap();
    std::fs::create_dir(skills.path().join("dir")).unwrap();
    std::os::unix::fs::symlink(&secret, skills.path().join("dir/SKILL.md")).unwrap();
    std::os::unix::fs::symlink(outside.path(), skills.path().join("linkdir")).unwrap();
    std::fs::create_dir(skills.path().join("ok")).unwrap();
    std::fs::write(skills.path().join("ok/SKILL.md"), "# Fine\n").unwrap();
    std::os::unix::fs::symlink(&secret, skills.path().join("ok/extra.md")).unwrap();
    let docs = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&secret, docs.path().join("Read.md")).unwrap();
    let b = Bench::with_config(ToolsConfig {
        skills_dirs: vec![skills.path().to_path_buf()],
        docs_dir: Some(docs.path().to_path_buf()),
        ..ToolsConfig::default()
    });
    assert_eq!(
        answer(&b, "ListSkills", json!({})).await,
        ToolOutput::ok("ok: Fine\n")
    );
    for name in ["linked", "dir", "linkdir"] {
        let out = answer(&b, "ReadSkill", json!({"name": name})).await;
        assert_eq!(
            out,
            ToolOutput::error(format!("no skill named `{name}`; available: ok"))
        );
    }
    let out = answer(&b, "ReadSkill", json!({"name": "ok"})).await;
    assert!(out.ok && !out.output.contains("secret"), "{out:?}");
    assert!(!b.path("skills/ok/extra.md").exists());
    assert_eq!(
        answer(&b, "ReadToolDoc", json!({"tool": "Read"})).await,
        ToolOutput::error(
            "`Read.md` is a symbolic link, not a regular file; ReadToolDoc only reads regular files"
        )
    );
}

/// The names in a directory, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn read_only_sqlite_creates_nothing_in_input() {
    let b = Bench::new(BashSandboxMode::Always);
    let db = b.path("input/data.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);")
            .unwrap();
    }
    let query = json!({"database": "input/data.db", "query": "SELECT count(*) AS n FROM t"});
    let rows = ToolOutput::ok("[\n  {\n    \"n\": 2\n  }\n]\n");
    assert_eq!(listing(&b.path("input")), ["data.db"]);
    assert_eq!(answer(&b, "SQLite", query.clone()).await, rows);
    assert_eq!(listing(&b.path("input")), ["data.db"]);

    // A writer still open: its log holds a row the database file does not have yet.
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    writer.execute("INSERT INTO t VALUES (3)", []).unwrap();
    let with_log = listing(&b.path("input"));
    assert_eq!(with_log, ["data.db", "data.db-shm", "data.db-wal"]);
    let rows3 = ToolOutput::ok("[\n  {\n    \"n\": 3\n  }\n]\n");
    assert_eq!(answer(&b, "SQLite", query.clone()).await, rows3);
    assert_eq!(listing(&b.path("input")), with_log);

    // As left by a crashed writer: the log without its index.
    let crashed = b.path("input/crashed.db");
    std::fs::copy(&db, &crashed).unwrap();
    std::fs::copy(b.path("input/data.db-wal"), b.path("input/crashed.db-wal")).unwrap();
    drop(writer);
    let before = listing(&b.path("input"));
    assert!(before.contains(&"crashed.db-wal".to_string()), "{before:?}");
    let out = answer(
        &b,
        "SQLite",
        json!({"database": "input/crashed.db", "query": "SELECT count(*) AS n FROM t"}),
    )
    .await;
    assert_eq!(out, rows3);
    assert_eq!(listing(&b.path("input")), before);
}
