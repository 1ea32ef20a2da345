//! `MergeReviewedResults` through the registry, on real files: the same JSONL merged twice, or
//! its lines shuffled, gives byte-identical reports; duplicates fold with their locations; the
//! report is an artifact, so it needs `edit` and a writable directory.

use crate::support;

use maestro_tools::BashSandboxMode;
use serde_json::json;
use support::Bench;

/// 30 chunks as `BatchReviewTextWithLLM` writes them: every third chunk repeats one finding
/// in other words' case and spacing, and chunk 7 has none.
fn lines() -> Vec<String> {
    (1..=30)
        .map(|n| {
            let findings = if n == 7 {
                json!([])
            } else if n % 3 == 0 {
                json!([{"text": "The  notice period is NOT defined."}, {"text": format!("Typo in clause {n}")}])
            } else {
                json!([{"text": format!("Typo in clause {n}"), "quote": format!("claus {n}")}])
            };
            json!({"chunk": n, "location": format!("lines {}-{}", n * 10, n * 10 + 9), "findings": findings})
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn merging_is_deterministic_and_folds_duplicates_with_their_locations() {
    let b = Bench::new(BashSandboxMode::Off).editing();
    let ordered = lines();
    b.write("input/review-a.jsonl", &(ordered.join("\n") + "\n"));
    // The same lines in another order (a fixed permutation), as a concurrent writer might leave them.
    let mut shuffled = ordered.clone();
    shuffled.reverse();
    shuffled.swap(3, 17);
    shuffled.rotate_left(11);
    b.write("input/review-b.jsonl", &(shuffled.join("\n") + "\n"));

    let out = b
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/review-a.jsonl"}),
        )
        .await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(
        out.output,
        "merged 30 chunks (30 findings, 9 duplicates folded) into `output/review-a.md`"
    );
    let first = std::fs::read(b.path("output/review-a.md")).unwrap();
    let again = b
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/review-a.jsonl"}),
        )
        .await;
    assert!(again.ok, "{}", again.output);
    assert_eq!(std::fs::read(b.path("output/review-a.md")).unwrap(), first);
    let out = b
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/review-b.jsonl", "output_path": "output/review-a-shuffled.md"}),
        )
        .await;
    assert!(out.ok, "{}", out.output);
    let from_shuffled = std::fs::read_to_string(b.path("output/review-a-shuffled.md")).unwrap();
    assert_eq!(
        from_shuffled.replace("input/review-b.jsonl", "input/review-a.jsonl"),
        String::from_utf8(first).unwrap()
    );

    let report = from_shuffled;
    // Folded once, with each of the ten places it was found, in the text's order.
    assert_eq!(report.matches("notice period").count(), 1, "{report}");
    let places: Vec<String> = (1..=10)
        .map(|i| format!("chunk {} (lines {}-{})", i * 3, i * 30, i * 30 + 9))
        .collect();
    assert!(
        report.contains(&format!("   - Locations: {}\n", places.join("; "))),
        "{report}"
    );
    // Findings in the order of the text: chunk 1's first.
    assert!(
        report.contains(
            "\n1. Typo in clause 1\n   - Location: chunk 1 (lines 10-19)\n   - quote: claus 1\n"
        ),
        "{report}"
    );
    // Without folding every finding stays.
    let out = b
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/review-a.jsonl", "dedupe": false, "output_path": "output/all.md"}),
        )
        .await;
    assert_eq!(
        out.output,
        "merged 30 chunks (39 findings) into `output/all.md`"
    );
}

#[tokio::test]
async fn the_report_needs_edit_and_a_writable_directory() {
    let reading = Bench::new(BashSandboxMode::Off);
    reading.write("input/r.jsonl", &(lines().join("\n") + "\n"));
    let out = reading
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/r.jsonl"}),
        )
        .await;
    assert!(!out.ok);
    assert!(out.output.contains("cannot edit files"), "{}", out.output);
    assert!(!reading.path("output/r.md").exists());

    let b = Bench::new(BashSandboxMode::Off).editing();
    b.write("input/r.jsonl", &(lines().join("\n") + "\n"));
    let out = b
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/r.jsonl", "output_path": "input/r.md"}),
        )
        .await;
    assert!(!out.ok, "{}", out.output);
    assert!(!b.path("input/r.md").exists());
    b.write(
        "input/bad.jsonl",
        "{\"chunk\": 1, \"findings\": []}\n{oops\n",
    );
    let out = b
        .call(
            "MergeReviewedResults",
            json!({"file_path": "input/bad.jsonl"}),
        )
        .await;
    assert!(!out.ok);
    assert!(
        out.output
            .starts_with("input/bad.jsonl line 2 is not a line"),
        "{}",
        out.output
    );
}
