//! Path traversal attempts against the file tools: `..`, absolute paths and symlinks that lead
//! outside the workspace are refused; writes stay in the writable directories.

use crate::support;

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

/// A workspace the user named is theirs to edit: an editing movement writes anywhere inside it
/// (its root included), with the file tools and with Bash, and still nowhere outside it. A
/// workspace laid out for the run keeps writes under `output/`.
#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn a_named_workspace_is_writable_anywhere_inside() {
    use std::os::unix::fs::MetadataExt;
    let laid_out = bench();
    let refused = laid_out
        .call("Write", json!({"file_path": "f.txt", "content": "x"}))
        .await;
    assert!(
        !refused.ok && refused.output.contains("may write only under `output/`"),
        "{refused:?}"
    );

    let b = Bench::new(BashSandboxMode::Always).editing().named();
    b.write("src/lib.rs", "fn main() {}\n");
    if running_as_root() {
        // Commands in a named workspace run as its owner, never as root.
        std::os::unix::fs::chown(b.root(), Some(4242), Some(4242)).unwrap();
    }
    let owner_before = std::fs::metadata(b.path("src/lib.rs")).unwrap().uid();
    let out = b
        .call(
            "Write",
            json!({"file_path": "f.txt", "content": "at the root\n"}),
        )
        .await;
    assert!(out.ok, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(b.path("f.txt")).unwrap(),
        "at the root\n"
    );
    let out = b
        .call(
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": "main", "new_string": "run"}),
        )
        .await;
    assert!(out.ok, "{out:?}");
    let out = b.bash("echo from-bash > g.txt && cat g.txt").await;
    assert!(out.ok && out.output == "from-bash\n", "{out:?}");
    assert_eq!(
        std::fs::read_to_string(b.path("g.txt")).unwrap(),
        "from-bash\n"
    );
    assert_eq!(
        std::fs::metadata(b.path("src/lib.rs")).unwrap().uid(),
        owner_before,
        "the user's files keep their owner"
    );

    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), b.path("out-link")).unwrap();
    let escape = format!(
        "../{}/x.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    for path in [escape.as_str(), "out-link/x.txt", "/etc/x.txt"] {
        let out = b
            .call("Write", json!({"file_path": path, "content": "x"}))
            .await;
        assert!(!out.ok, "{path}: {out:?}");
    }
    let out = b
        .bash(&format!("echo x > {}/y.txt", outside.path().display()))
        .await;
    assert!(!out.ok, "{out:?}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

    let read_only = Bench::new(BashSandboxMode::Always).named();
    let out = read_only
        .call("Write", json!({"file_path": "f.txt", "content": "x"}))
        .await;
    assert!(!out.ok, "without edit nothing is written: {out:?}");
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}
