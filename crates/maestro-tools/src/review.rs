//! `MergeReviewedResults`: merges the JSONL a `BatchReviewTextWithLLM` call wrote (one line a
//! chunk: `{chunk, location, findings}`) into one Markdown report for the user, duplicates
//! folded with every location kept. The report is the same bytes for the same lines in any
//! order.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::config::ToolsConfig;
use crate::core::{blocking, open_workspace};
use crate::regular_file::{self, Access, Create};
use crate::{ToolContext, ToolOutput, TypedTool};

/// The largest JSONL file merged.
const MAX_INPUT_BYTES: u64 = 50 * 1024 * 1024;

/// The input of a `MergeReviewedResults` call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeReviewedResultsInput {
    /// The JSONL file `BatchReviewTextWithLLM` wrote, e.g. `input/review-3f9c0a1b2d4e.jsonl`.
    pub file_path: String,
    /// Fold findings whose text is the same once case, spacing and end punctuation are set
    /// aside into one, listing every location (default true).
    #[serde(default)]
    pub dedupe: Option<bool>,
    /// Where to write the report (default `output/<the JSONL file's name>.md`); inside the
    /// writable directories.
    #[serde(default)]
    pub output_path: Option<String>,
}

/// `MergeReviewedResults`.
#[derive(Debug)]
pub struct MergeReviewedResults {
    /// The writable directories.
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for MergeReviewedResults {
    type Input = MergeReviewedResultsInput;
    const NAME: &'static str = "MergeReviewedResults";
    const DESCRIPTION: &'static str = "Merge the JSONL findings of BatchReviewTextWithLLM into one \
         Markdown report in output/, duplicates folded and their locations kept.";

    async fn run(&self, ctx: &ToolContext, input: MergeReviewedResultsInput) -> ToolOutput {
        if !ctx.edit {
            return ToolOutput::error(
                "this movement cannot edit files (edit: false); MergeReviewedResults writes a \
                 report and is not available",
            );
        }
        let ws = match open_workspace(ctx) {
            Ok(ws) => ws,
            Err(e) => return e,
        };
        let writable = ctx.writable_dirs(&self.config.writable_dirs).into_owned();
        blocking(move || merge_file(&ws, &writable, input)).await
    }
}

fn merge_file(
    ws: &crate::Workspace,
    writable: &[String],
    input: MergeReviewedResultsInput,
) -> ToolOutput {
    let source = match ws.resolve(&input.file_path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let shown = source.display();
    let size = std::fs::metadata(&source.abs).map(|m| m.len()).unwrap_or(0);
    if size > MAX_INPUT_BYTES {
        return ToolOutput::error(format!(
            "{shown} has {size} bytes, more than the {MAX_INPUT_BYTES} MergeReviewedResults \
             reads; review the text in parts and merge each"
        ));
    }
    let text = match regular_file::read_to_string(&source.abs) {
        Ok(t) => t,
        Err(e) => {
            return ToolOutput::error(e.explain(&shown, "MergeReviewedResults", Access::Read));
        }
    };
    let lines = match parse_lines(&shown, &text) {
        Ok(lines) => lines,
        Err(e) => return ToolOutput::error(e),
    };
    let merged = merge(&lines, input.dedupe.unwrap_or(true));
    let report = render(&shown, &merged);
    let target = input.output_path.clone().unwrap_or_else(|| {
        let stem = source
            .abs
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "review".into());
        format!("output/{stem}.md")
    });
    let path = match ws.resolve_writable(&target, writable) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    if let Some(parent) = path.abs.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "cannot create the directory for `{}`: {e}",
            path.display()
        ));
    }
    if let Err(e) = regular_file::write(&path.abs, report.as_bytes(), Create::OrTruncate) {
        return ToolOutput::error(e.explain(
            &path.display(),
            "MergeReviewedResults",
            Access::Write,
        ));
    }
    ToolOutput::ok(format!(
        "merged {} chunks ({} findings{}) into `{}`",
        merged.chunks,
        merged.findings.len(),
        if merged.folded > 0 {
            format!(", {} duplicates folded", merged.folded)
        } else {
            String::new()
        },
        path.display()
    ))
}

/// One JSONL line.
#[derive(Debug, Clone)]
struct Line {
    chunk: u64,
    location: String,
    findings: Vec<Value>,
    /// The line as written, to order lines that claim the same chunk.
    raw: String,
}

fn parse_lines(shown: &str, text: &str) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let what = || {
            format!(
                "{shown} line {} is not a line of BatchReviewTextWithLLM's JSONL \
                 ({{\"chunk\": N, \"location\": \"…\", \"findings\": […]}})",
                index + 1
            )
        };
        let value: Value = serde_json::from_str(raw).map_err(|e| format!("{}: {e}", what()))?;
        let chunk = value["chunk"]
            .as_u64()
            .ok_or_else(|| format!("{}: `chunk` is not a number", what()))?;
        let findings = value["findings"]
            .as_array()
            .ok_or_else(|| format!("{}: `findings` is not a list", what()))?
            .clone();
        lines.push(Line {
            chunk,
            location: value["location"].as_str().unwrap_or("").to_string(),
            findings,
            raw: raw.trim().to_string(),
        });
    }
    // The text's order, whatever order the lines came in.
    lines.sort_by(|a, b| a.chunk.cmp(&b.chunk).then_with(|| a.raw.cmp(&b.raw)));
    Ok(lines)
}

/// A finding of the report, with every place it was found.
#[derive(Debug)]
struct Merged {
    text: String,
    /// `(chunk, location)`, in the text's order.
    places: Vec<(u64, String)>,
    /// Other fields (`quote`, `note`, …) by name, each value once, in the order first seen.
    details: BTreeMap<String, Vec<String>>,
}

#[derive(Debug)]
struct Report {
    chunks: usize,
    findings: Vec<Merged>,
    folded: usize,
}

/// The text findings are compared by: lower case, spacing collapsed, end punctuation dropped.
fn normalised(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
        .trim_end_matches(['.', '!', ';', ',', ':'])
        .to_string()
}

fn merge(lines: &[Line], dedupe: bool) -> Report {
    let mut findings: Vec<Merged> = Vec::new();
    let mut by_text: BTreeMap<String, usize> = BTreeMap::new();
    let mut folded = 0;
    for line in lines {
        for finding in &line.findings {
            let (text, details) = match finding {
                Value::Object(map) => (
                    map.get("text")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| finding.to_string()),
                    map.iter()
                        .filter(|(k, _)| k.as_str() != "text")
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                v.as_str()
                                    .map(str::to_string)
                                    .unwrap_or_else(|| v.to_string()),
                            )
                        })
                        .collect::<Vec<_>>(),
                ),
                Value::String(s) => (s.clone(), Vec::new()),
                other => (other.to_string(), Vec::new()),
            };
            let text = text.trim().to_string();
            let place = (line.chunk, line.location.clone());
            let key = normalised(&text);
            let existing = if dedupe {
                by_text.get(&key).copied()
            } else {
                None
            };
            let index = match existing {
                Some(index) => {
                    folded += 1;
                    index
                }
                None => {
                    findings.push(Merged {
                        text,
                        places: Vec::new(),
                        details: BTreeMap::new(),
                    });
                    by_text.insert(key, findings.len() - 1);
                    findings.len() - 1
                }
            };
            let merged = &mut findings[index];
            if !merged.places.contains(&place) {
                merged.places.push(place);
            }
            for (name, value) in details {
                let values = merged.details.entry(name).or_default();
                if !values.contains(&value) {
                    values.push(value);
                }
            }
        }
    }
    let chunks = {
        let mut numbers: Vec<u64> = lines.iter().map(|l| l.chunk).collect();
        numbers.dedup();
        numbers.len()
    };
    Report {
        chunks,
        findings,
        folded,
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn render(source: &str, report: &Report) -> String {
    let mut out = format!(
        "# Review report\n\nFrom `{source}`: {} chunks reviewed, {} findings",
        report.chunks,
        report.findings.len()
    );
    if report.folded > 0 {
        out.push_str(&format!(" ({} duplicates folded)", report.folded));
    }
    out.push_str(".\n");
    if report.findings.is_empty() {
        out.push_str("\nNo findings.\n");
        return out;
    }
    out.push('\n');
    for (index, finding) in report.findings.iter().enumerate() {
        out.push_str(&format!("{}. {}\n", index + 1, one_line(&finding.text)));
        let places: Vec<String> = finding
            .places
            .iter()
            .map(|(chunk, location)| {
                if location.is_empty() {
                    format!("chunk {chunk}")
                } else {
                    format!("chunk {chunk} ({location})")
                }
            })
            .collect();
        out.push_str(&format!(
            "   - {}: {}\n",
            if places.len() == 1 {
                "Location"
            } else {
                "Locations"
            },
            places.join("; ")
        ));
        for (name, values) in &finding.details {
            for value in values {
                out.push_str(&format!("   - {name}: {}\n", one_line(value)));
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const JSONL: &str = concat!(
        r#"{"chunk": 1, "location": "lines 1-9, under \"Intro\"", "findings": [{"text": "The date is missing.", "quote": "on the day"}]}"#,
        "\n",
        r#"{"chunk": 2, "location": "lines 10-20", "findings": []}"#,
        "\n",
        r#"{"chunk": 3, "location": "lines 21-30", "findings": [{"text": "the date is  MISSING"}, {"text": "Two prices for one item", "note": "kept as it came"}]}"#,
        "\n",
    );

    fn report(text: &str, dedupe: bool) -> String {
        let lines = parse_lines("input/r.jsonl", text).unwrap();
        render("input/r.jsonl", &merge(&lines, dedupe))
    }

    #[test]
    fn duplicates_fold_with_every_location_kept() {
        let out = report(JSONL, true);
        assert_eq!(
            out,
            "# Review report\n\nFrom `input/r.jsonl`: 3 chunks reviewed, 2 findings (1 \
             duplicates folded).\n\n\
             1. The date is missing.\n   - Locations: chunk 1 (lines 1-9, under \"Intro\"); chunk 3 (lines 21-30)\n   - quote: on the day\n\
             2. Two prices for one item\n   - Location: chunk 3 (lines 21-30)\n   - note: kept as it came\n"
        );
        let kept = report(JSONL, false);
        assert!(kept.contains("3 findings."), "{kept}");
        assert!(kept.contains("2. the date is MISSING"), "{kept}");
    }

    #[test]
    fn the_report_is_the_same_for_shuffled_lines() {
        let lines: Vec<&str> = JSONL.lines().collect();
        let shuffled = format!("{}\n{}\n\n{}\n", lines[2], lines[0], lines[1]);
        assert_eq!(report(JSONL, true), report(&shuffled, true));
        assert_eq!(report(JSONL, true), report(JSONL, true));
    }

    #[test]
    fn a_line_that_is_not_the_reviews_json_is_named() {
        let err = parse_lines(
            "input/r.jsonl",
            "{\"chunk\": 1, \"findings\": []}\nnot json\n",
        )
        .unwrap_err();
        assert!(
            err.starts_with("input/r.jsonl line 2 is not a line"),
            "{err}"
        );
    }
}
