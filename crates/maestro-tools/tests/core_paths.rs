//! Path traversal attempts against the file tools: `..`, absolute paths and symlinks that lead
//! outside the workspace are refused; writes stay in the writable directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use maestro_tools::BashSandboxMode;
use serde_json::json;
use support::Bench;

fn bench() -> Bench {
    let b = Bench::new(BashSandboxMode::Always).editing();
    b.write("input/a.txt", "alpha\n");
    b
}

#[tokio::test]
async fn traversal_is_refused_by_every_file_tool() {
    let b = bench();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "root-secret\n").unwrap();
    let abs = outside.path().join("secret.txt").display().to_string();
    let rel = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    for path in [
        abs.as_str(),
        rel.as_str(),
        "/etc/passwd",
        "output/../../x",
        "/",
        "../",
    ] {
        let attempts = [
            ("Read", json!({"file_path": path})),
            ("Write", json!({"file_path": path, "content": "x"})),
            (
                "Edit",
                json!({"file_path": path, "old_string": "root", "new_string": "x"}),
            ),
            ("Glob", json!({"pattern": "*", "path": path})),
            ("Grep", json!({"pattern": "root", "path": path})),
            ("SQLite", json!({"database": path, "query": "select 1"})),
        ];
        for (tool, input) in attempts {
            let out = b.call(tool, input.clone()).await;
            assert!(!out.ok, "{tool} {input} succeeded: {out:?}");
            assert!(
                !out.output.contains("root-secret") && !out.output.contains("root:x:0"),
                "{out:?}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "root-secret\n"
    );
}

#[tokio::test]
async fn symlinked_files_and_dirs_pointing_out_are_not_followed() {
    let b = bench();
    std::os::unix::fs::symlink("/etc", b.path("input/etc")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", b.path("input/passwd")).unwrap();
    let glob = b.call("Glob", json!({"pattern": "**/*"})).await;
    assert!(glob.ok, "{glob:?}");
    assert!(
        !glob.output.contains("shadow") && !glob.output.contains("input/etc/"),
        "{glob:?}"
    );
    let grep = b.call("Grep", json!({"pattern": "root"})).await;
    assert_eq!(grep.output, "no matches for `root` under `.`");
    let grep = b
        .call("Grep", json!({"pattern": "root", "path": "input/etc"}))
        .await;
    assert!(!grep.ok, "{grep:?}");
    let read = b.call("Read", json!({"file_path": "input/passwd"})).await;
    assert!(!read.ok, "{read:?}");
}

#[tokio::test]
async fn absolute_paths_inside_the_workspace_and_the_sandbox_name_work() {
    let b = bench();
    let abs = b.path("input/a.txt").display().to_string();
    for path in [
        abs.as_str(),
        "/workspace/input/a.txt",
        "./input/./a.txt",
        "output/../input/a.txt",
    ] {
        let out = b.call("Read", json!({"file_path": path})).await;
        assert_eq!(out.output, "     1\talpha\n", "{path}");
    }
}

#[tokio::test]
async fn writes_are_limited_to_writable_dirs_and_edit_movements() {
    let mut b = bench();
    let out = b
        .call(
            "Write",
            json!({"file_path": "input/new.txt", "content": "x"}),
        )
        .await;
    assert_eq!(
        (out.ok, out.output.as_str()),
        (
            false,
            "`input/new.txt` is not in a writable directory; this movement may write only under `output/`"
        )
    );
    let out = b
        .call(
            "Edit",
            json!({"file_path": "input/a.txt", "old_string": "alpha", "new_string": "beta"}),
        )
        .await;
    assert!(!out.ok);
    assert_eq!(
        std::fs::read_to_string(b.path("input/a.txt")).unwrap(),
        "alpha\n"
    );
    b.ctx.edit = false;
    let out = b
        .call(
            "Write",
            json!({"file_path": "output/new.txt", "content": "x"}),
        )
        .await;
    assert!(
        !out.ok && out.output.contains("not available in this movement"),
        "{out:?}"
    );
    assert!(!b.path("output/new.txt").exists());
}
