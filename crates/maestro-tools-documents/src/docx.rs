//! `.docx` to Markdown: headings, paragraphs, lists, tables, footnotes and comments, from the
//! WordprocessingML parts of the package.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::markdown;
use crate::package::Package;
use crate::protocol::ReadFailure;
use crate::xml::{Element, Node};

const WHAT: &str = "a .docx file";

/// The document in `bytes` as Markdown.
pub(crate) fn read(bytes: &[u8], max_expanded: u64) -> Result<String, ReadFailure> {
    let mut package = Package::open(bytes, WHAT, max_expanded)?;
    if !package.has("word/document.xml") {
        let hint = if package.has("ppt/presentation.xml") {
            "it is a PowerPoint presentation; use ReadPPTX"
        } else if package.has("xl/workbook.xml") {
            "it is an Excel workbook; use ReadExcel"
        } else {
            "it has no word/document.xml part"
        };
        return Err(ReadFailure::WrongType(format!(
            "not a Word document: {hint}"
        )));
    }
    let document = package
        .xml("word/document.xml")?
        .ok_or_else(|| ReadFailure::Corrupt("word/document.xml is missing".into()))?;
    let styles = heading_styles(package.xml("word/styles.xml")?.as_ref());
    let numbering = Numbering::from(package.xml("word/numbering.xml")?.as_ref());
    let footnotes = notes(package.xml("word/footnotes.xml")?.as_ref(), "footnote");
    let comments = comments(package.xml("word/comments.xml")?.as_ref());
    let body = document
        .child("body")
        .ok_or_else(|| ReadFailure::Corrupt("word/document.xml has no body".into()))?;
    let cx = Cx {
        styles: &styles,
        numbering: &numbering,
    };
    let mut out = String::new();
    blocks(&cx, body, &mut out);
    let (numbered, footnotes) = number_footnotes(&out, footnotes);
    out = numbered;
    if !footnotes.is_empty() {
        out.push_str("\n## Footnotes\n\n");
        for (number, text) in &footnotes {
            let _ = writeln!(out, "[^{number}]: {text}");
        }
    }
    if !comments.is_empty() {
        out.push_str("\n## Comments\n\n");
        for c in &comments {
            let _ = writeln!(out, "- [comment {}] {}: {}", c.id, c.author, c.text);
        }
    }
    Ok(out.trim_end().to_string() + "\n")
}

struct Cx<'a> {
    /// Style id → heading level (Title is 1, Heading N is N).
    styles: &'a HashMap<String, usize>,
    numbering: &'a Numbering,
}

/// Block content (paragraphs, tables, content controls) of `parent` into `out`.
fn blocks(cx: &Cx<'_>, parent: &Element, out: &mut String) {
    for e in parent.elements() {
        match e.name.as_str() {
            "p" => paragraph(cx, e, out),
            "tbl" => {
                out.push('\n');
                out.push_str(&table(cx, e));
                out.push('\n');
            }
            "sdt" => {
                if let Some(content) = e.child("sdtContent") {
                    blocks(cx, content, out);
                }
            }
            _ => {}
        }
    }
}

fn paragraph(cx: &Cx<'_>, p: &Element, out: &mut String) {
    let text = inline_text(p);
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let props = p.child("pPr");
    let style = props
        .and_then(|pr| pr.child("pStyle"))
        .and_then(|s| s.attr("val"))
        .unwrap_or("");
    if let Some(level) = heading_level(cx.styles, style) {
        let _ = write!(out, "\n{} {}\n\n", "#".repeat(level.clamp(1, 6)), text);
        return;
    }
    if let Some(num) = props.and_then(|pr| pr.child("numPr")) {
        let level: usize = num
            .child("ilvl")
            .and_then(|l| l.attr("val"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let id = num.child("numId").and_then(|n| n.attr("val")).unwrap_or("");
        let marker = if cx.numbering.is_bullet(id, level) {
            "-"
        } else {
            "1."
        };
        let _ = writeln!(out, "{}{marker} {text}", "  ".repeat(level));
        return;
    }
    if style.to_ascii_lowercase().starts_with("list") {
        let marker = if style.contains("Number") { "1." } else { "-" };
        let _ = writeln!(out, "{marker} {text}");
        return;
    }
    let _ = write!(out, "\n{text}\n\n");
}

/// The text of a paragraph: its runs, tabs and breaks, footnote and comment markers.
fn inline_text(e: &Element) -> String {
    let mut out = String::new();
    collect_inline(e, &mut out);
    out
}

fn collect_inline(e: &Element, out: &mut String) {
    for node in &e.children {
        let Node::Element(child) = node else { continue };
        match child.name.as_str() {
            "t" if e.name == "r" => out.push_str(&child.text()),
            "tab" if e.name == "r" => out.push('\t'),
            "br" | "cr" if e.name == "r" => out.push(' '),
            "footnoteReference" => {
                let _ = write!(out, "[^{}]", child.attr("id").unwrap_or("?"));
            }
            "commentReference" => {
                let _ = write!(out, " [comment {}]", child.attr("id").unwrap_or("?"));
            }
            "pPr" | "rPr" | "del" | "delText" | "instrText" => {}
            _ => collect_inline(child, out),
        }
    }
}

fn table(cx: &Cx<'_>, tbl: &Element) -> String {
    let rows: Vec<Vec<String>> = tbl
        .elements()
        .filter(|e| e.name == "tr")
        .map(|tr| {
            tr.elements()
                .filter(|e| e.name == "tc")
                .map(|tc| cell_text(cx, tc))
                .collect()
        })
        .collect();
    markdown::table(&rows)
}

fn cell_text(cx: &Cx<'_>, tc: &Element) -> String {
    let mut parts = Vec::new();
    for e in tc.elements() {
        match e.name.as_str() {
            "p" => {
                let t = inline_text(e);
                if !t.trim().is_empty() {
                    parts.push(t.trim().to_string());
                }
            }
            "tbl" => parts.push(table(cx, e).replace('\n', " ")),
            _ => {}
        }
    }
    parts.join("\n")
}

fn heading_level(styles: &HashMap<String, usize>, style: &str) -> Option<usize> {
    if let Some(level) = styles.get(style) {
        return Some(*level);
    }
    let lower = style.to_ascii_lowercase();
    if lower == "title" {
        return Some(1);
    }
    lower
        .strip_prefix("heading")
        .and_then(|n| n.trim().parse::<usize>().ok())
        .map(|n| n.min(5) + 1)
}

/// Style ids whose names are `Title` or `heading N` (Title → `#`, heading N → N+1 `#`s, so the
/// title stays above the headings under it).
fn heading_styles(styles: Option<&Element>) -> HashMap<String, usize> {
    let mut map = HashMap::new();
    let Some(styles) = styles else { return map };
    for style in styles.elements().filter(|e| e.name == "style") {
        let Some(id) = style.attr("styleId") else {
            continue;
        };
        let name = style
            .child("name")
            .and_then(|n| n.attr("val"))
            .unwrap_or("")
            .to_ascii_lowercase();
        if name == "title" {
            map.insert(id.to_string(), 1);
        } else if let Some(n) = name
            .strip_prefix("heading")
            .and_then(|n| n.trim().parse::<usize>().ok())
        {
            map.insert(id.to_string(), n.min(5) + 1);
        }
    }
    map
}

/// Which list levels are bullets: numId → abstractNumId → level → numFmt.
#[derive(Default)]
struct Numbering {
    bullets: HashMap<(String, usize), bool>,
}

impl Numbering {
    fn from(numbering: Option<&Element>) -> Numbering {
        let Some(root) = numbering else {
            return Numbering::default();
        };
        let mut abstract_formats: HashMap<String, HashMap<usize, bool>> = HashMap::new();
        for a in root.elements().filter(|e| e.name == "abstractNum") {
            let id = a.attr("abstractNumId").unwrap_or("").to_string();
            let levels = a
                .elements()
                .filter(|e| e.name == "lvl")
                .map(|l| {
                    let level = l.attr("ilvl").and_then(|v| v.parse().ok()).unwrap_or(0);
                    let bullet = l.child("numFmt").and_then(|f| f.attr("val")) == Some("bullet");
                    (level, bullet)
                })
                .collect();
            abstract_formats.insert(id, levels);
        }
        let mut bullets = HashMap::new();
        for num in root.elements().filter(|e| e.name == "num") {
            let id = num.attr("numId").unwrap_or("").to_string();
            let abstract_id = num
                .child("abstractNumId")
                .and_then(|a| a.attr("val"))
                .unwrap_or("");
            if let Some(levels) = abstract_formats.get(abstract_id) {
                for (level, bullet) in levels {
                    bullets.insert((id.clone(), *level), *bullet);
                }
            }
        }
        Numbering { bullets }
    }

    fn is_bullet(&self, num_id: &str, level: usize) -> bool {
        self.bullets
            .get(&(num_id.to_string(), level))
            .copied()
            .unwrap_or(true)
    }
}

/// Footnotes (or endnotes) by id, without the separator notes Word writes.
/// Footnotes numbered 1, 2, … in the order the text refers to them, as Word shows them (the
/// ids in the file are internal and often start elsewhere): `text` with its `[^id]` markers
/// renumbered, and the notes in that order (notes the text never refers to come last).
fn number_footnotes(text: &str, notes: Vec<(String, String)>) -> (String, Vec<(usize, String)>) {
    if notes.is_empty() {
        return (text.to_string(), Vec::new());
    }
    let mut order: Vec<String> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[^") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let id_len = after
            .find(']')
            .filter(|&n| n > 0 && after[..n].bytes().all(|b| b.is_ascii_digit() || b == b'-'));
        match id_len {
            Some(n) if notes.iter().any(|(id, _)| id == &after[..n]) => {
                let id = &after[..n];
                let number = match order.iter().position(|seen| seen == id) {
                    Some(i) => i + 1,
                    None => {
                        order.push(id.to_string());
                        order.len()
                    }
                };
                let _ = write!(out, "[^{number}]");
                rest = &after[n + 1..];
            }
            _ => {
                out.push_str("[^");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    let mut numbered: Vec<(usize, String)> = Vec::new();
    let mut unreferenced = Vec::new();
    for (id, note) in notes {
        match order.iter().position(|seen| *seen == id) {
            Some(i) => numbered.push((i + 1, note)),
            None => unreferenced.push(note),
        }
    }
    numbered.sort_by_key(|(n, _)| *n);
    for note in unreferenced {
        numbered.push((numbered.len() + 1, note));
    }
    (out, numbered)
}

fn notes(root: Option<&Element>, name: &str) -> Vec<(String, String)> {
    let Some(root) = root else { return Vec::new() };
    root.elements()
        .filter(|e| e.name == name)
        .filter(|e| {
            !matches!(
                e.attr("type"),
                Some("separator" | "continuationSeparator" | "continuationNotice")
            )
        })
        .filter_map(|e| {
            let text = paragraphs_text(e);
            (!text.is_empty()).then(|| (e.attr("id").unwrap_or("?").to_string(), text))
        })
        .collect()
}

struct Comment {
    id: String,
    author: String,
    text: String,
}

fn comments(root: Option<&Element>) -> Vec<Comment> {
    let Some(root) = root else { return Vec::new() };
    root.elements()
        .filter(|e| e.name == "comment")
        .map(|e| Comment {
            id: e.attr("id").unwrap_or("?").to_string(),
            author: e.attr("author").unwrap_or("unknown").to_string(),
            text: paragraphs_text(e),
        })
        .collect()
}

/// The paragraphs under `e`, joined with spaces.
fn paragraphs_text(e: &Element) -> String {
    let mut ps = Vec::new();
    e.find_all("p", &mut ps);
    ps.iter()
        .map(|p| inline_text(p).trim().to_string())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
