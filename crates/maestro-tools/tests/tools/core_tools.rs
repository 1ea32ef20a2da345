//! Behaviour of the core, data, checklist, pieces, docs and skills tools through the registry,
//! and the registry's handling of bad calls.

use crate::support;

use maestro_tools::{BashSandboxMode, ChecklistItem, Registry, ToolOutput, ToolsConfig};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::Bench;

fn bench() -> Bench {
    Bench::new(BashSandboxMode::Always)
}

#[tokio::test]
async fn read_returns_numbered_line_ranges() {
    let b = bench();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    b.write("input/ten.txt", &text);
    let out = b
        .call(
            "Read",
            json!({"file_path": "input/ten.txt", "offset": 3, "limit": 2}),
        )
        .await;
    assert_eq!(
        out,
        ToolOutput::ok(
            "     3\tline 3\n     4\tline 4\n[showing lines 3-4 of 10; call Read with offset 5 to continue]\n"
        )
    );
    let out = b
        .call("Read", json!({"file_path": "input/ten.txt", "offset": 11}))
        .await;
    assert_eq!(
        out,
        ToolOutput::error("offset 11 is past the end of `input/ten.txt` (10 lines)")
    );
    let out = b
        .call("Read", json!({"file_path": "input/missing.txt"}))
        .await;
    assert_eq!(
        out,
        ToolOutput::error("`input/missing.txt` does not exist; use Glob to find files")
    );
    std::fs::write(b.path("input/bin"), [0u8, 1, 2]).unwrap();
    let out = b.call("Read", json!({"file_path": "input/bin"})).await;
    assert_eq!(
        out,
        ToolOutput::error("`input/bin` is a binary file (3 bytes); Read shows text files only")
    );
}

#[tokio::test]
async fn write_and_edit_change_files_exactly() {
    let b = bench().editing();
    let out = b
        .call(
            "Write",
            json!({"file_path": "output/sub/a.md", "content": "one two two\n"}),
        )
        .await;
    assert_eq!(out, ToolOutput::ok("created `output/sub/a.md` (12 bytes)"));
    let out = b
        .call(
            "Edit",
            json!({"file_path": "output/sub/a.md", "old_string": "two", "new_string": "2"}),
        )
        .await;
    assert_eq!(
        out,
        ToolOutput::error(
            "old_string occurs 2 times in `output/sub/a.md`; include more surrounding text to make it unique, or set replace_all to true"
        )
    );
    let out = b
        .call(
            "Edit",
            json!({"file_path": "output/sub/a.md", "old_string": "one", "new_string": "1"}),
        )
        .await;
    assert_eq!(
        out,
        ToolOutput::ok("replaced 1 occurrence in `output/sub/a.md`")
    );
    let out = b
        .call("Edit", json!({"file_path": "output/sub/a.md", "old_string": "two", "new_string": "2", "replace_all": true}))
        .await;
    assert_eq!(
        out,
        ToolOutput::ok("replaced 2 occurrences in `output/sub/a.md`")
    );
    assert_eq!(
        std::fs::read_to_string(b.path("output/sub/a.md")).unwrap(),
        "1 2 2\n"
    );
    let out = b
        .call(
            "Edit",
            json!({"file_path": "output/sub/a.md", "old_string": "zzz", "new_string": "y"}),
        )
        .await;
    assert!(!out.ok && out.output.starts_with("old_string was not found"));
}

#[tokio::test]
async fn glob_and_grep_find_files_and_lines() {
    let b = bench();
    b.write("input/a.rs", "fn main() {}\n");
    b.write("input/deep/b.rs", "fn helper() {}\nstruct X;\n");
    b.write("input/c.txt", "fn not_rust\n");
    let out = b.call("Glob", json!({"pattern": "**/*.rs"})).await;
    let mut lines: Vec<&str> = out.output.lines().collect();
    lines.sort();
    assert_eq!(lines, ["input/a.rs", "input/deep/b.rs"]);
    let out = b
        .call("Glob", json!({"pattern": "*.rs", "path": "input"}))
        .await;
    assert_eq!(out.output, "input/a.rs\n");
    let out = b
        .call("Grep", json!({"pattern": "fn \\w+\\(", "glob": "*.rs"}))
        .await;
    let mut lines: Vec<&str> = out.output.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "input/a.rs:1:fn main() {}",
            "input/deep/b.rs:1:fn helper() {}"
        ]
    );
    let out = b
        .call(
            "Grep",
            json!({"pattern": "STRUCT", "ignore_case": true, "path": "input/deep/b.rs"}),
        )
        .await;
    assert_eq!(out.output, "input/deep/b.rs:2:struct X;\n");
    let out = b.call("Grep", json!({"pattern": "("})).await;
    assert!(
        !out.ok && out.output.starts_with("invalid regular expression `(`"),
        "{out:?}"
    );
}

#[tokio::test]
async fn bad_calls_come_back_as_readable_errors() {
    let b = bench();
    let reg = &b.registry;
    let out = reg.execute(&b.ctx, "Reed", "{}").await;
    assert!(
        !out.ok
            && out.output.starts_with(
                "unknown tool `Reed`; the tools you can call are: Read, Glob, Grep, Bash"
            ),
        "{out:?}"
    );
    let out = reg.execute(&b.ctx, "Read", "{\"file_path\": ").await;
    assert!(
        !out.ok
            && out
                .output
                .starts_with("the arguments for `Read` are not valid JSON ("),
        "{out:?}"
    );
    assert!(out.output.ends_with("send one JSON object with the fields: `file_path` (string, required), `offset` (integer, optional), `limit` (integer, optional)"), "{out:?}");
    let out = reg.execute(&b.ctx, "Read", "{\"path\": \"a\"}").await;
    assert_eq!(
        out,
        ToolOutput::error(
            "invalid input for `Read`: missing field `file_path`. Expected fields: `file_path` (string, required), `offset` (integer, optional), `limit` (integer, optional)"
        )
    );
    let out = reg.execute(&b.ctx, "Bash", "{\"command\": 5}").await;
    assert!(
        out.output
            .starts_with("invalid input for `Bash`: field `command`: invalid type: integer `5`, expected a string. Expected fields: `command` (string, required)"),
        "{out:?}"
    );
    let out = reg.execute(&b.ctx, "Read", "[1]").await;
    assert!(
        out.output
            .starts_with("invalid input for `Read`: expected a JSON object, got an array"),
        "{out:?}"
    );
    let out = reg
        .execute(
            &b.ctx,
            "Write",
            "{\"file_path\":\"output/x\",\"content\":\"\"}",
        )
        .await;
    assert!(
        out.output
            .starts_with("`Write` is not available in this movement (it cannot edit files)"),
        "{out:?}"
    );
    let allowed = vec!["Read".to_string()];
    let out = reg
        .execute_allowed(&b.ctx, &allowed, "Grep", "{\"pattern\":\"x\"}")
        .await;
    assert_eq!(
        out,
        ToolOutput::error(
            "`Grep` is not offered in this movement; the tools you can call are: Read, ReadToolDoc"
        )
    );
}

#[tokio::test]
async fn offered_tools_follow_allowed_tools_and_edit() {
    let registry = Registry::builtin(ToolsConfig::default());
    let names = |allowed: &[&str], edit: bool| -> Vec<String> {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        registry
            .offered(&allowed, edit)
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    assert_eq!(
        names(&["Read", "Write", "Edit", "Bash"], false),
        ["Read", "Bash", "ReadToolDoc"]
    );
    assert_eq!(
        names(&["Read", "Write", "Edit", "Bash"], true),
        ["Read", "Write", "Edit", "Bash", "ReadToolDoc"]
    );
    for spec in registry.list() {
        assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
        assert!(
            !spec.description.is_empty() && spec.description.ends_with('.'),
            "{}",
            spec.name
        );
        assert!(
            maestro_tools::docs::tool_doc(&spec.name).is_some(),
            "{} has no docs/tools/{}.md",
            spec.name,
            spec.name
        );
    }
    let read = registry.get("Read").unwrap().spec();
    assert_eq!(read.input_schema["required"], json!(["file_path"]));
    assert_eq!(
        read.input_schema["properties"]["offset"]["type"],
        json!(["integer", "null"])
    );
}

/// The model reads what a tool does in its one-sentence description and what to send in its
/// fields' descriptions; the input type's doc comment is for the code and stays out of the schema.
#[test]
fn input_schemas_describe_fields_not_the_input_type() {
    let registry = Registry::builtin(ToolsConfig::default());
    let bash = registry.get("Bash").unwrap().spec();
    assert_eq!(
        bash.input_schema["properties"]["command"]["description"],
        "The command line to run (in the workspace directory)."
    );
    for spec in registry.list() {
        let schema = spec.input_schema.as_object().unwrap();
        for key in ["description", "title", "$schema"] {
            assert!(
                !schema.contains_key(key),
                "{}'s input schema has a top-level `{key}`: {}",
                spec.name,
                spec.input_schema
            );
        }
    }
}

#[tokio::test]
async fn sqlite_is_read_only_unless_the_movement_can_edit() {
    let b = bench();
    {
        let conn = rusqlite_setup(&b.path("input/shop.db"));
        drop(conn);
    }
    let out = b.call("SQLite", json!({"database": "input/shop.db", "query": "select name, price from items where price > ? order by price", "params": [1]})).await;
    assert_eq!(
        out.output,
        "[\n  {\n    \"name\": \"pear\",\n    \"price\": 2.5\n  }\n]\n"
    );
    let out = b
        .call(
            "SQLite",
            json!({"database": "input/shop.db", "query": "delete from items"}),
        )
        .await;
    assert!(
        !out.ok && out.output.contains("the database is open read-only"),
        "{out:?}"
    );
    let out = b.call("SQLite", json!({"database": "input/shop.db", "query": "attach database '/tmp/maestro-attach.db' as x"})).await;
    assert!(
        !out.ok && !std::path::Path::new("/tmp/maestro-attach.db").exists(),
        "{out:?}"
    );
    let out = b
        .call(
            "SQLite",
            json!({"database": "input/shop.db", "query": "pragma query_only = 0"}),
        )
        .await;
    assert!(!out.ok, "{out:?}");
    let out = b
        .call(
            "SQLite",
            json!({"database": "input/shop.db", "query": "vacuum into '/tmp/maestro-vacuum.db'"}),
        )
        .await;
    assert!(
        !out.ok && !std::path::Path::new("/tmp/maestro-vacuum.db").exists(),
        "{out:?}"
    );
    let b = b.editing();
    std::fs::copy(b.path("input/shop.db"), b.path("output/shop.db")).unwrap();
    let out = b.call("SQLite", json!({"database": "output/shop.db", "query": "delete from items where name = ?", "params": ["apple"]})).await;
    assert_eq!(out, ToolOutput::ok("ok; 1 row(s) changed"));
    // Still read-only outside the writable directories, even when editing.
    let out = b
        .call(
            "SQLite",
            json!({"database": "input/shop.db", "query": "delete from items"}),
        )
        .await;
    assert!(!out.ok, "{out:?}");
}

fn rusqlite_setup(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("create table items(name text, price real); insert into items values ('apple', 1.0), ('pear', 2.5);")
        .unwrap();
    conn
}

#[tokio::test]
async fn the_checklist_lives_in_the_run_scratch() {
    let b = bench();
    let out = b
        .call("CreateChecklist", json!({"items": ["read", "write", " "]}))
        .await;
    assert_eq!(
        out,
        ToolOutput::ok("checklist: 0/2 done\n1. [ ] read\n2. [ ] write\n")
    );
    let out = b
        .call("CheckItem", json!({"index": 1, "note": "3 files"}))
        .await;
    assert_eq!(
        out,
        ToolOutput::ok("checklist: 1/2 done\n1. [x] read — 3 files\n2. [ ] write\n")
    );
    let out = b.call("CheckItem", json!({"index": 3})).await;
    assert_eq!(
        out,
        ToolOutput::error("index 3 is out of range; items are numbered 1 to 2")
    );
    assert_eq!(
        b.ctx.scratch.lock().unwrap().checklist,
        vec![
            ChecklistItem {
                text: "read".into(),
                done: true,
                note: Some("3 files".into())
            },
            ChecklistItem {
                text: "write".into(),
                done: false,
                note: None
            },
        ]
    );
    let out = b.call("GetChecklist", json!({})).await;
    assert_eq!(
        out.output,
        "checklist: 1/2 done\n1. [x] read — 3 files\n2. [ ] write\n"
    );
}

const VALID_PIECE: &str = "name: demo\ndescription: A demo piece\nmax_movements: 5\ninitial_movement: work\nmovements:\n  - name: work\n    edit: false\n    persona: You are a careful worker.\n    instruction: Do the work.\n    allowed_tools: [Read]\n    rules: []\n";

#[tokio::test]
async fn pieces_are_validated_before_they_are_saved() {
    let pieces = tempfile::tempdir().unwrap();
    let b = Bench::with_config(ToolsConfig {
        pieces_dir: Some(pieces.path().to_path_buf()),
        ..ToolsConfig::default()
    });
    let broken = VALID_PIECE.replace("initial_movement: work", "initial_movement: nowhere");
    let out = b
        .call("CreatePiece", json!({"name": "demo", "content": broken}))
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output
            .starts_with("the piece is invalid; nothing was saved."),
        "{out:?}"
    );
    assert!(out.output.contains("demo.yaml:4:"), "{out:?}");
    assert!(!pieces.path().join("demo.yaml").exists());
    // a model-written piece cannot pull a host file into its prompts through a facet path
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "host secret").unwrap();
    let escaping = VALID_PIECE.replace(
        "persona: You are a careful worker.",
        &format!("persona: {}", outside.path().display()),
    );
    let out = b
        .call("CreatePiece", json!({"name": "demo", "content": escaping}))
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains("movements[0].persona: facet file")
            && out.output.contains("lies outside"),
        "{out:?}"
    );
    assert!(!out.output.contains("host secret"), "{out:?}");
    assert!(!pieces.path().join("demo.yaml").exists());
    let out = b
        .call(
            "CreatePiece",
            json!({"name": "demo", "content": VALID_PIECE}),
        )
        .await;
    assert_eq!(out, ToolOutput::ok("created piece `demo` (1 movements)\n"));
    let out = b
        .call(
            "CreatePiece",
            json!({"name": "demo", "content": VALID_PIECE}),
        )
        .await;
    assert!(!out.ok && out.output.contains("already exists"));
    let out = b.call("ListPieces", json!({})).await;
    assert_eq!(out.output, "demo (maestro, 1 movements): A demo piece\n");
    let out = b.call("GetPiece", json!({"name": "demo"})).await;
    assert_eq!(out.output, VALID_PIECE);
    let updated = VALID_PIECE.replace("A demo piece", "Changed");
    let out = b
        .call("UpdatePiece", json!({"name": "demo", "content": updated}))
        .await;
    assert_eq!(out, ToolOutput::ok("updated piece `demo` (1 movements)\n"));
    assert_eq!(
        std::fs::read_to_string(pieces.path().join("demo.yaml")).unwrap(),
        updated
    );
    let out = b
        .call(
            "UpdatePiece",
            json!({"name": "other", "content": VALID_PIECE}),
        )
        .await;
    assert!(!out.ok && out.output.contains("use CreatePiece"), "{out:?}");
}

/// A model-written piece is checked against the tools there are: a misspelled one is refused
/// with a suggestion, one this configuration does not set up is saved with a warning.
#[tokio::test]
async fn created_pieces_name_real_tools() {
    let pieces = tempfile::tempdir().unwrap();
    let tools = ToolsConfig {
        pieces_dir: Some(pieces.path().to_path_buf()),
        ..ToolsConfig::default()
    };
    let b = Bench::with_config(ToolsConfig {
        tool_catalog: Some(maestro_tools::catalog::tool_catalog(&tools, true)),
        ..tools.clone()
    });
    let typo = VALID_PIECE.replace("allowed_tools: [Read]", "allowed_tools: [Raed]");
    let out = b
        .call("CreatePiece", json!({"name": "demo", "content": typo}))
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains(
            "demo.yaml:10:21: movements[0].allowed_tools[0]: unknown tool `Raed`; did you mean `Read`?"
        ),
        "{out:?}"
    );
    assert!(!pieces.path().join("demo.yaml").exists());
    let unset = VALID_PIECE.replace("allowed_tools: [Read]", "allowed_tools: [Read, ListSkills]");
    let out = b
        .call("CreatePiece", json!({"name": "demo", "content": unset}))
        .await;
    assert!(out.ok, "{out:?}");
    assert!(
        out.output.contains("warnings:\ndemo.yaml:10:27: movements[0].allowed_tools[1]: `ListSkills` is not available here, so it is not offered: no skills directory is configured"),
        "{out:?}"
    );
}

#[tokio::test]
async fn tool_docs_and_skills_are_served() {
    let skills = tempfile::tempdir().unwrap();
    std::fs::write(
        skills.path().join("csv.md"),
        "# Working with CSV\nUse python3 csv.\n",
    )
    .unwrap();
    std::fs::create_dir(skills.path().join("report")).unwrap();
    std::fs::write(
        skills.path().join("report/SKILL.md"),
        "---\nname: report\ndescription: Write reports\n---\nSteps...\n",
    )
    .unwrap();
    std::fs::write(skills.path().join("report/template.md"), "TEMPLATE").unwrap();
    let b = Bench::with_config(ToolsConfig {
        skills_dirs: vec![skills.path().to_path_buf()],
        ..ToolsConfig::default()
    });
    let out = b.call("ReadToolDoc", json!({"tool": "bash"})).await;
    assert!(out.ok && out.output.starts_with("# Bash\n"), "{out:?}");
    let out = b.call("ReadToolDoc", json!({"tool": "Nope"})).await;
    assert!(
        !out.ok
            && out
                .output
                .starts_with("no documentation for `Nope`; documented tools: "),
        "{out:?}"
    );
    let out = b.call("ListSkills", json!({})).await;
    assert_eq!(out.output, "csv: Working with CSV\nreport: Write reports\n");
    let out = b.call("ReadSkill", json!({"name": "report"})).await;
    assert!(
        out.output
            .starts_with("[skill `report` saved to skills/report/ (2 file(s)"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(b.path("skills/report/template.md")).unwrap(),
        "TEMPLATE"
    );
    let out = b.call("ReadSkill", json!({"name": "csv"})).await;
    assert_eq!(
        out.output,
        "[skill `csv` saved to skills/csv.md]\n\n# Working with CSV\nUse python3 csv.\n"
    );
    let out = b.call("ReadSkill", json!({"name": "../etc"})).await;
    assert!(!out.ok, "{out:?}");
}
