//! `BatchReviewTextWithLLM`: an engine tool that reviews a long text chunk by chunk, each chunk
//! its own model call through the run's client (its retries, its record, its budget), a few at
//! once, and writes the findings as JSONL under `input/` for the model (or
//! `MergeReviewedResults`) to read next.
//!
//! Each chunk's call is recorded under its own key (`<movement>/review:<key>`, the key a hash
//! of the instruction, the chunk's place and its text), so a resumed run matches every chunk
//! with its own recorded answer however the calls interleaved, and calls the model only for
//! the chunks the record does not answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use maestro_llm::{ChatRequest, Message};
use maestro_protocol::ToolCall;
use maestro_tools::ToolOutput;
use maestro_tools::regular_file::{self, Create};
use maestro_tools::workspace_file;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::CallPurpose;

/// The tool a movement calls to review a long text chunk by chunk.
pub const BATCH_REVIEW: &str = "BatchReviewTextWithLLM";

/// Chunk size when the call does not give one, in characters.
pub(crate) const DEFAULT_CHUNK_CHARS: usize = 6_000;
/// The smallest and largest chunk sizes a call may ask for.
const CHUNK_CHARS_RANGE: (usize, usize) = (200, 50_000);
/// Chunks reviewed at once when the call does not say.
pub(crate) const DEFAULT_CONCURRENCY: usize = 4;
/// The most characters of text one call reviews (about 1,000 default chunks).
const MAX_TEXT_CHARS: usize = 6_000_000;
/// The most chunks one call reviews: each is a model call.
const MAX_CHUNKS: usize = 2_000;

/// `BatchReviewTextWithLLM`'s arguments, as the model gives them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewArgs {
    /// The workspace file to review (text or Markdown), e.g. `input/contract.md`; give this or
    /// `text`.
    #[serde(default)]
    pub file_path: Option<String>,
    /// The text to review, when it is not in a file; give this or `file_path`.
    #[serde(default)]
    pub text: Option<String>,
    /// What to look for in each chunk, e.g. "list every claim that names no source".
    pub instruction: String,
    /// The most characters of one chunk (default 6000, from 200 to 50000); the text is split at
    /// headings first, then at blank lines, and only then inside a paragraph.
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    /// How many chunks are reviewed at once (default 4, at most
    /// `engine.review_max_concurrency`).
    #[serde(default)]
    pub concurrency: Option<usize>,
}

/// One piece of the text, with where it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chunk {
    pub text: String,
    /// e.g. `lines 12-40, under "Terms > Payment"`.
    pub location: String,
}

/// A run of lines that is kept together where it fits.
struct Unit {
    text: String,
    first_line: usize,
    last_line: usize,
    heading: Option<String>,
}

/// An ATX heading (`# Title` … `###### Title`): its level and title.
fn heading_of(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let level = trimmed.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &trimmed[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    Some((level, rest.trim().trim_end_matches('#').trim()))
}

/// Splits `text` into chunks of at most `max_chars` characters: at headings first (a section
/// that fits stays whole, and small neighbouring sections share a chunk), then at blank lines,
/// and only a paragraph longer than `max_chars` is cut, at the last whitespace before the
/// limit where there is one.
pub(crate) fn split(text: &str, max_chars: usize) -> Vec<Chunk> {
    let max_chars = max_chars.max(1);
    // Sections: each starts at a heading (or the start of the text).
    let mut sections: Vec<Unit> = Vec::new();
    let mut path: Vec<(usize, String)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let starts_section = match heading_of(line) {
            Some((level, title)) => {
                path.retain(|(l, _)| *l < level);
                path.push((level, title.to_string()));
                true
            }
            None => sections.is_empty(),
        };
        if starts_section {
            let heading = (!path.is_empty()).then(|| {
                path.iter()
                    .map(|(_, t)| t.as_str())
                    .collect::<Vec<_>>()
                    .join(" > ")
            });
            sections.push(Unit {
                text: String::new(),
                first_line: number,
                last_line: number,
                heading,
            });
        }
        if let Some(section) = sections.last_mut() {
            section.text.push_str(line);
            section.text.push('\n');
            section.last_line = number;
        }
    }
    // Units that each fit: whole sections, else their paragraphs, else pieces of those.
    let mut units = Vec::new();
    for section in sections {
        if section.text.trim().is_empty() {
            continue;
        }
        if section.text.chars().count() <= max_chars {
            units.push(section);
            continue;
        }
        for paragraph in paragraphs(&section) {
            if paragraph.text.chars().count() <= max_chars {
                units.push(paragraph);
            } else {
                units.extend(hard_split(paragraph, max_chars));
            }
        }
    }
    // Units packed in order into chunks that fit.
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current: Option<(String, usize, usize, Option<String>)> = None;
    for unit in units {
        let fits = current
            .as_ref()
            .is_some_and(|(t, ..)| t.chars().count() + unit.text.chars().count() <= max_chars);
        match current.as_mut() {
            Some((text, _, last, _)) if fits => {
                text.push_str(&unit.text);
                *last = unit.last_line;
            }
            _ => {
                if let Some(done) = current.take() {
                    chunks.push(chunk_of(done));
                }
                current = Some((unit.text, unit.first_line, unit.last_line, unit.heading));
            }
        }
    }
    if let Some(done) = current.take() {
        chunks.push(chunk_of(done));
    }
    chunks
}

fn chunk_of((text, first, last, heading): (String, usize, usize, Option<String>)) -> Chunk {
    let lines = if first == last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    };
    let location = match heading {
        Some(h) if !h.is_empty() => format!("{lines}, under \"{h}\""),
        _ => lines,
    };
    Chunk {
        text: text.trim_end().to_string(),
        location,
    }
}

/// A section's paragraphs (runs of lines between blank lines, each with the blank lines after
/// it).
fn paragraphs(section: &Unit) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    let mut open = false;
    for (offset, line) in section.text.lines().enumerate() {
        let number = section.first_line + offset;
        let blank = line.trim().is_empty();
        if !open && !blank || out.is_empty() {
            out.push(Unit {
                text: String::new(),
                first_line: number,
                last_line: number,
                heading: section.heading.clone(),
            });
        }
        open = !blank;
        if let Some(unit) = out.last_mut() {
            unit.text.push_str(line);
            unit.text.push('\n');
            unit.last_line = number;
        }
    }
    out
}

/// Cuts a paragraph longer than `max_chars` at the last whitespace before each limit (or at
/// the limit when there is none).
fn hard_split(unit: Unit, max_chars: usize) -> Vec<Unit> {
    let mut out = Vec::new();
    let chars: Vec<char> = unit.text.chars().collect();
    let mut start = 0;
    let mut line = unit.first_line;
    while start < chars.len() {
        let mut end = (start + max_chars).min(chars.len());
        if end < chars.len()
            && let Some(space) = chars[start..end].iter().rposition(|c| c.is_whitespace())
            && space > 0
        {
            end = start + space + 1;
        }
        let text: String = chars[start..end].iter().collect();
        let newlines = text.matches('\n').count();
        let last =
            (line + newlines.saturating_sub(usize::from(text.ends_with('\n')))).min(unit.last_line);
        out.push(Unit {
            text,
            first_line: line,
            last_line: last,
            heading: unit.heading.clone(),
        });
        line = (line + newlines).min(unit.last_line);
        start = end;
    }
    out
}

/// The key a chunk's call is recorded under: the same instruction, place and text give the
/// same key in every run.
pub(crate) fn chunk_key(instruction: &str, index: usize, text: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(instruction.as_bytes());
    hasher.update([0]);
    hasher.update(index.to_string().as_bytes());
    hasher.update([0]);
    hasher.update(text.as_bytes());
    hex::encode(hasher.finalize())[..16].to_string()
}

const SYSTEM: &str = "You review one part of a longer text, following the instruction for this \
    part only. Answer with JSON and nothing else, in this form: {\"findings\": [{\"text\": \"what \
    you found\", \"quote\": \"the words of the part it is about\"}]}. `quote` may be left out. \
    When nothing in this part calls for a finding, answer {\"findings\": []}.";

/// The note on a finding that is a model's answer kept as it came.
pub(crate) const UNPARSED_NOTE: &str =
    "the model's answer was not the JSON findings asked for; its text is kept as it came";

/// The findings in a model's answer, and whether it was the JSON asked for. An answer that is
/// not becomes one finding holding its text, with [`UNPARSED_NOTE`].
pub(crate) fn findings_of(answer: &str) -> (Vec<Value>, bool) {
    let trimmed = answer.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|s| s.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let parsed = serde_json::from_str::<Value>(unfenced).ok().or_else(|| {
        let start = unfenced.find(['{', '['])?;
        let end = unfenced.rfind(['}', ']'])?;
        (end > start)
            .then(|| serde_json::from_str::<Value>(&unfenced[start..=end]).ok())
            .flatten()
    });
    let items = match parsed {
        Some(Value::Object(mut map)) => match map.remove("findings") {
            Some(Value::Array(items)) => Some(items),
            _ => None,
        },
        Some(Value::Array(items)) => Some(items),
        _ => None,
    };
    match items {
        Some(items) => (
            items
                .into_iter()
                .map(|item| match item {
                    Value::String(text) => json!({ "text": text }),
                    Value::Object(map) if map.get("text").is_some_and(Value::is_string) => {
                        Value::Object(map)
                    }
                    other => json!({ "text": other.to_string() }),
                })
                .collect(),
            true,
        ),
        None => (
            vec![json!({ "text": trimmed, "note": UNPARSED_NOTE })],
            false,
        ),
    }
}

/// `BatchReviewTextWithLLM` as offered to the model (and listed by `maestro tools list`).
pub fn review_spec() -> maestro_protocol::ToolSpec {
    let mut spec = maestro_tools::input::spec_for::<ReviewArgs>(BATCH_REVIEW, DESCRIPTION);
    if let Some(obj) = Arc::make_mut(&mut spec.input_schema).as_object_mut() {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    spec
}

/// The tool's one-sentence description.
const DESCRIPTION: &str = "Review a long text (a workspace file or `text`) chunk by chunk \
     with `instruction`, each chunk its own model call, and write the findings as JSONL under \
     input/ (merge them into a report with MergeReviewedResults).";

/// What went wrong with the call's input, for the model.
fn refused(message: impl std::fmt::Display) -> ToolOutput {
    ToolOutput::error(format!("{BATCH_REVIEW}: {message}"))
}

/// Runs one `BatchReviewTextWithLLM` call of `movement`. Errors of the run itself (the record,
/// the budget, the endpoint after its retries) stop the run, as a failed movement call does; a
/// resume then calls only the chunks the record does not answer.
pub(crate) async fn run_review(
    run: &RunCtx,
    movement: &str,
    call: &ToolCall,
) -> Result<ToolOutput, EngineError> {
    let input = serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
    let args: ReviewArgs = match maestro_tools::input::parse_input(BATCH_REVIEW, input) {
        Ok(args) => args,
        Err(refused) => return Ok(refused),
    };
    if args.instruction.trim().is_empty() {
        return Ok(refused(
            "`instruction` is empty; say what to look for in each chunk",
        ));
    }
    let workspace = run.record.workspace.clone();
    let (text, source) = match (&args.file_path, &args.text) {
        (Some(path), None) => match read_text(&workspace, path).await {
            Ok(text) => (text, path.clone()),
            Err(message) => return Ok(refused(message)),
        },
        (None, Some(text)) => (text.clone(), "the text given".to_string()),
        _ => {
            return Ok(refused(
                "give exactly one of `file_path` (a workspace file) and `text`",
            ));
        }
    };
    if text.chars().count() > MAX_TEXT_CHARS {
        return Ok(refused(format!(
            "{source} has more than {MAX_TEXT_CHARS} characters; review it in parts (Read with \
             offsets, or split the file)"
        )));
    }
    let chunk_chars = args.chunk_chars.unwrap_or(DEFAULT_CHUNK_CHARS);
    if !(CHUNK_CHARS_RANGE.0..=CHUNK_CHARS_RANGE.1).contains(&chunk_chars) {
        return Ok(refused(format!(
            "`chunk_chars` is {chunk_chars}; give a number from {} to {}",
            CHUNK_CHARS_RANGE.0, CHUNK_CHARS_RANGE.1
        )));
    }
    let max_concurrency = run.config.review_max_concurrency.max(1);
    let concurrency = args.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    if concurrency == 0 || concurrency > max_concurrency {
        return Ok(refused(format!(
            "`concurrency` is {concurrency}; give a number from 1 to {max_concurrency} \
             (`engine.review_max_concurrency`)"
        )));
    }
    let chunks = split(&text, chunk_chars);
    if chunks.is_empty() {
        return Ok(refused(format!("{source} has no text to review")));
    }
    if chunks.len() > MAX_CHUNKS {
        return Ok(refused(format!(
            "{source} makes {} chunks of {chunk_chars} characters, more than the {MAX_CHUNKS} \
             one call reviews; give a larger `chunk_chars` or review the text in parts",
            chunks.len()
        )));
    }

    let total = chunks.len();
    let gate = tokio::sync::Semaphore::new(concurrency);
    let failed = AtomicBool::new(false);
    let reviews = chunks.iter().enumerate().map(|(index, chunk)| {
        let gate = &gate;
        let failed = &failed;
        let instruction = args.instruction.as_str();
        async move {
            let _permit = gate.acquire().await.ok();
            if failed.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let key = chunk_key(instruction, index, &chunk.text);
            let request = ChatRequest {
                model: run.config.model.clone(),
                messages: vec![
                    Message::System {
                        content: SYSTEM.to_string(),
                    },
                    Message::user(format!(
                        "Instruction: {instruction}\n\nPart {} of {total} ({}):\n<<<\n{}\n>>>",
                        index + 1,
                        chunk.location,
                        chunk.text
                    )),
                ],
                tools: Arc::from(Vec::new()),
                response_schema: None,
                temperature: run.config.temperature,
                max_tokens: run.config.max_tokens,
                headers: Vec::new(),
            };
            let answer = run
                .chat(
                    &format!("{movement}/review:{key}"),
                    CallPurpose::Review,
                    request,
                )
                .await;
            match answer {
                Ok(answer) => Ok(Some(answer.content)),
                Err(e) => {
                    failed.store(true, Ordering::SeqCst);
                    Err(e)
                }
            }
        }
    });
    let answers = futures::future::join_all(reviews).await;

    let mut lines = String::new();
    let mut findings_total = 0;
    let mut unparsed = 0;
    let mut first_error = None;
    for ((index, chunk), answer) in chunks.iter().enumerate().zip(answers) {
        match answer {
            Ok(Some(content)) => {
                let (findings, parsed) = findings_of(&content);
                findings_total += findings.len();
                unparsed += usize::from(!parsed);
                lines.push_str(
                    &json!({
                        "chunk": index + 1,
                        "location": chunk.location,
                        "findings": findings,
                    })
                    .to_string(),
                );
                lines.push('\n');
            }
            Ok(None) => {}
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let name = format!(
        "input/review-{}.jsonl",
        &chunk_key(&args.instruction, 0, &format!("{source}\0{text}"))[..12]
    );
    let path = match workspace_file::writable_file(&workspace, &name) {
        Ok(path) => path,
        Err(e) => return Ok(refused(format!("cannot write {name}: {e}"))),
    };
    let bytes = lines.into_bytes();
    let written =
        maestro_tools::off_runtime(move || regular_file::write(&path, &bytes, Create::OrTruncate))
            .await;
    if let Err(e) = written {
        return Ok(refused(format!(
            "cannot write {name}: {}",
            e.explain(&name, BATCH_REVIEW, regular_file::Access::Write)
        )));
    }
    let mut summary = format!(
        "reviewed {source} in {total} chunk{} ({chunk_chars} characters at most each): \
         {findings_total} finding{}; written to {name} (one JSON line a chunk: chunk, location, \
         findings). Merge them into a report with MergeReviewedResults.",
        if total == 1 { "" } else { "s" },
        if findings_total == 1 { "" } else { "s" },
    );
    if unparsed > 0 {
        summary.push_str(&format!(
            " {unparsed} answer{} not the JSON asked for; {} kept as one finding with a note.",
            if unparsed == 1 { " was" } else { "s were" },
            if unparsed == 1 {
                "its text is"
            } else {
                "their text is"
            },
        ));
    }
    Ok(ToolOutput::ok(summary))
}

/// Reads a workspace text file for review.
async fn read_text(workspace: &std::path::Path, path: &str) -> Result<String, String> {
    let file = workspace_file::existing_file(workspace, path, BATCH_REVIEW)
        .await
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take((MAX_TEXT_CHARS * 4 + 1) as u64)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "{path} is not UTF-8 text; convert it first (ReadPdf, ReadDocx and the other readers \
             give text you can Write to a file)"
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sections_that_fit_stay_whole_and_small_ones_share_a_chunk() {
        let text = "# Intro\nshort\n\n# Terms\n## Payment\nPay in 30 days.\n\n## Late\nA fee.\n";
        let chunks = split(text, 30);
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.text.as_str(), c.location.as_str()))
                .collect::<Vec<_>>(),
            vec![
                ("# Intro\nshort\n\n# Terms", "lines 1-4, under \"Intro\""),
                (
                    "## Payment\nPay in 30 days.",
                    "lines 5-7, under \"Terms > Payment\""
                ),
                ("## Late\nA fee.", "lines 8-9, under \"Terms > Late\""),
            ]
        );
    }

    #[test]
    fn a_long_section_splits_at_blank_lines_then_at_whitespace() {
        let para = "word ".repeat(30);
        let text = format!("# Big\n{para}\n\nsecond paragraph\n");
        let chunks = split(&text, 60);
        assert!(chunks.iter().all(|c| c.text.chars().count() <= 60));
        let joined: String = chunks
            .iter()
            .map(|c| c.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            joined.split_whitespace().filter(|w| *w == "word").count(),
            30
        );
        assert!(chunks.last().unwrap().text.contains("second paragraph"));
        assert!(chunks.iter().all(|c| !c.text.contains("wo\nrd")));
        // no word is cut: every piece ends at whitespace
        for c in &chunks {
            assert!(
                c.text
                    .split_whitespace()
                    .all(|w| matches!(w, "word" | "#" | "Big" | "second" | "paragraph"))
            );
        }
    }

    #[test]
    fn findings_come_from_json_or_keep_the_garbage_with_a_note() {
        let (f, ok) = findings_of("```json\n{\"findings\": [{\"text\": \"a\"}, \"b\"]}\n```");
        assert!(ok);
        assert_eq!(f, vec![json!({"text": "a"}), json!({"text": "b"})]);
        let (f, ok) = findings_of("Sure! Here: [\"x\"] hope it helps");
        assert!(ok);
        assert_eq!(f, vec![json!({"text": "x"})]);
        let (f, ok) = findings_of("I found nothing of note {oops");
        assert!(!ok);
        assert_eq!(
            f,
            vec![json!({"text": "I found nothing of note {oops", "note": UNPARSED_NOTE})]
        );
    }

    #[test]
    fn a_chunk_key_depends_on_the_instruction_the_place_and_the_text() {
        let k = chunk_key("find typos", 3, "text");
        assert_eq!(k, chunk_key("find typos", 3, "text"));
        assert_ne!(k, chunk_key("find typos", 4, "text"));
        assert_ne!(k, chunk_key("find dates", 3, "text"));
        assert_ne!(k, chunk_key("find typos", 3, "text!"));
        assert_eq!(k.len(), 16);
    }
}
