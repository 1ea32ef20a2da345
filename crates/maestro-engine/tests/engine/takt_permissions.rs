//! takt `permission_mode` and the default toolset, as the model sees them: the tools each
//! movement is offered in the requests the scripted server recorded, and what Bash may do.

use crate::support;

use std::path::Path;

use maestro_engine::RunEvent;
use maestro_piece::{LoadOptions, load_str};
use maestro_testkit::Turn;
use serde_json::{Value, json};
use support::*;

const PIECE: &str = "\
name: modes
max_movements: 5
initial_movement: ro
movements:
  - name: ro
    persona: You are the read-only agent.
    permission_mode: readonly
    edit: false
    allowed_tools: [Read, Write, Edit, Bash]
    instruction_template: Look around.
    rules:
      - condition: done
        next: ed
  - name: ed
    persona: You are the editing agent.
    permission_mode: edit
    allowed_tools: [Read, Write, Edit, Bash]
    instruction_template: Change things.
    rules:
      - condition: done
        next: fu
  - name: fu
    persona: You are the full agent.
    permission_mode: full
    instruction_template: Do anything.
    rules:
      - condition: done
        next: COMPLETE
";

/// The names of the tools offered in the request whose messages contain `marker`.
fn offered(requests: &[Value], marker: &str) -> Vec<String> {
    let request = requests
        .iter()
        .find(|r| messages_text(r).contains(marker))
        .unwrap_or_else(|| panic!("no request mentions {marker:?}"));
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn each_permission_mode_offers_what_it_maps_to() {
    let piece = load_str(PIECE, Path::new("modes.yaml"), &LoadOptions::default())
        .unwrap()
        .piece;
    let modes: Vec<(bool, Option<Vec<String>>)> = piece
        .movements
        .iter()
        .map(|m| (m.edit, m.allowed_commands.clone()))
        .collect();
    assert_eq!(
        modes,
        vec![
            (false, None),
            (true, None),
            (true, Some(vec!["*".to_owned()]))
        ]
    );
    let ran = run(
        piece,
        vec![
            // readonly: Bash runs, but the workspace is read-only to it.
            Turn::tool_call(
                "Bash",
                json!({"command": "touch output/written-by-readonly"}),
            ),
            Turn::text("Looked.\n[RO:1]"),
            Turn::text("Changed.\n[ED:1]"),
            Turn::text("Done.\n[FU:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let requests = ran.requests();
    assert_eq!(
        offered(&requests, "You are the read-only agent."),
        vec!["Read", "Bash", "ReadToolDoc"]
    );
    assert_eq!(
        offered(&requests, "You are the editing agent."),
        vec!["Read", "Write", "Edit", "Bash", "ReadToolDoc"]
    );
    // No allowed_tools: the default set for an editing movement.
    assert_eq!(
        offered(&requests, "You are the full agent."),
        vec![
            "Read",
            "Write",
            "Edit",
            "Glob",
            "Grep",
            "Bash",
            "ReadToolDoc"
        ]
    );
    // Bash ran in the readonly movement and could not write.
    let bash: Vec<(String, bool)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ToolResult {
                movement, tool, ok, ..
            } if tool == "Bash" => Some((movement.clone(), *ok)),
            _ => None,
        })
        .collect();
    assert_eq!(bash, vec![("ro".to_owned(), false)]);
    let workspace = ran.dir.path().join("runs");
    let written: Vec<_> = walk(&workspace)
        .into_iter()
        .filter(|p| p.ends_with("written-by-readonly"))
        .collect();
    assert_eq!(written, Vec::<std::path::PathBuf>::new());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
