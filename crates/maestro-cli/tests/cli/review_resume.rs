//! `BatchReviewTextWithLLM` in a real `maestro run` that is killed (SIGKILL) in the middle of a
//! 100-chunk review and resumed with `maestro run --resume`: no chunk whose answer was recorded
//! is asked again (requests counted per chunk at the scripted model server), the calls in flight
//! never pass the call's `concurrency`, and the JSONL holds every chunk with its own answer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

const CHUNKS: usize = 100;
const CONCURRENCY: usize = 4;

const REVIEWER: &str = "\
name: reviewer
description: reviews a long document chunk by chunk
max_movements: 2
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You review documents.
    instruction: \"{task}\"
    allowed_tools: [BatchReviewTextWithLLM]
    rules: []
";

fn document() -> String {
    (1..=CHUNKS)
        .map(|n| {
            format!(
                "## Clause {n:03}\n\n[chunk-{n:03}] {}\n",
                "The supplier delivers the goods within ten working days. ".repeat(12)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Chunk `n`'s answer, after a delay long enough for the kill to land mid-review.
fn chunk_turn(n: usize) -> Turn {
    Turn::when_contains(
        format!("[chunk-{n:03}]"),
        Turn::text(json!({"findings": [{"text": format!("finding of chunk {n:03}")}]}).to_string())
            .with_delay(Duration::from_millis(120)),
    )
}

fn maestro(dir: &Path, base_url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env("MAESTRO_LLM_BASE_URL", base_url)
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_DB")
        .stdin(Stdio::null());
    cmd
}

fn only_run(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir.join(".maestro/runs"))
        .ok()?
        .map(|e| e.unwrap().path())
        .next()
}

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The chunks whose review answers the record holds.
fn recorded_chunks(events: &[Value]) -> BTreeSet<usize> {
    events
        .iter()
        .filter(|e| e["type"] == "llm_response" && e["purpose"] == "review")
        .map(|e| {
            let content = e["answer"]["content"].as_str().unwrap();
            let (_, n) = content.split_once("finding of chunk ").unwrap();
            n[..3].parse().unwrap()
        })
        .collect()
}

fn requests_for(server: &ScriptedLlm, n: usize) -> usize {
    let needle = format!("[chunk-{n:03}]");
    server
        .requests()
        .iter()
        .filter(|r| r["messages"].to_string().contains(&needle))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_review_killed_midway_resumes_without_asking_a_recorded_chunk_again() {
    let mut turns = vec![Turn::tool_call(
        "BatchReviewTextWithLLM",
        json!({
            "file_path": "contract.md",
            "instruction": "Find the clauses that contradict each other.",
            "chunk_chars": 1000,
            "concurrency": CONCURRENCY,
        }),
    )];
    turns.extend((1..=CHUNKS).map(chunk_turn));
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "reviewed after the crash"}),
    ));
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("piece.yaml"), REVIEWER).unwrap();
    std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
    std::fs::write(
        dir.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n  model: scripted-model\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("contract.md"), document()).unwrap();

    let mut run = maestro(
        dir.path(),
        &server.base_url(),
        &[
            "run",
            "piece.yaml",
            "--task",
            "Review contract.md",
            "--workspace",
            ".",
            "--events",
            "jsonl",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // A third of the chunks answered and recorded: kill -9, with calls in flight.
    let start = Instant::now();
    loop {
        if let Some(run_dir) = only_run(dir.path())
            && recorded_chunks(&events(&run_dir)).len() >= CHUNKS / 3
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waited for 33 chunks; {} requests, the run's events: {:?}",
            server.requests().len(),
            only_run(dir.path()).map(|r| events(&r))
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    run.kill().unwrap();
    run.wait().unwrap();
    let run_dir = only_run(dir.path()).unwrap();
    let before = recorded_chunks(&events(&run_dir));
    assert!(before.len() < CHUNKS, "the kill came too late: {before:?}");
    let asked_before: Vec<usize> = (1..=CHUNKS).map(|n| requests_for(&server, n)).collect();
    // Chunks asked but not answered when the process died get a fresh turn; any chunk asked
    // again would find one too, and be counted.
    for n in 1..=CHUNKS {
        server.push(chunk_turn(n));
    }

    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    let out = maestro(dir.path(), &server.base_url(), &["run", "--resume", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "reviewed after the crash"
    );

    for n in 1..=CHUNKS {
        let asked = requests_for(&server, n);
        if before.contains(&n) {
            assert_eq!(asked, 1, "chunk {n} was recorded before the kill");
        } else {
            assert!(asked >= 1, "chunk {n} was never asked");
            assert!(
                asked <= asked_before[n - 1] + 1,
                "chunk {n} asked {asked} times"
            );
        }
    }
    assert!(
        server.peak_in_flight() <= CONCURRENCY,
        "{} calls in flight at once",
        server.peak_in_flight()
    );

    // The JSONL the resumed review wrote holds every chunk once, in order, with its answer.
    let events = events(&run_dir);
    assert_eq!(recorded_chunks(&events).len(), CHUNKS);
    let output = events
        .iter()
        .filter(|e| e["type"] == "tool_result" && e["tool"] == "BatchReviewTextWithLLM")
        .find_map(|e| e["output"].as_str())
        .unwrap()
        .to_string();
    let name = output
        .split_whitespace()
        .find(|w| w.starts_with("input/review-"))
        .unwrap()
        .trim_end_matches(|c: char| !c.is_alphanumeric());
    let lines: Vec<Value> = std::fs::read_to_string(dir.path().join(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), CHUNKS);
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        assert_eq!(line["chunk"], json!(n));
        assert_eq!(
            line["findings"],
            json!([{"text": format!("finding of chunk {n:03}")}])
        );
        assert!(
            line["location"]
                .as_str()
                .unwrap()
                .contains(&format!("Clause {n:03}"))
        );
    }
}
