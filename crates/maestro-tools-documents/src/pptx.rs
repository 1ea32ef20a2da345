//! `.pptx` to Markdown: each slide's title, text (bullets by level), tables and speaker notes,
//! in the presentation's order.

use std::fmt::Write as _;

use crate::markdown;
use crate::package::Package;
use crate::protocol::ReadFailure;
use crate::xml::Element;

const WHAT: &str = "a .pptx file";
const SLIDE: &str = "/relationships/slide";
const NOTES: &str = "/relationships/notesSlide";

/// The presentation in `bytes` as Markdown, one `## Slide N` section per slide.
pub(crate) fn read(bytes: &[u8], max_expanded: u64) -> Result<String, ReadFailure> {
    let mut package = Package::open(bytes, WHAT, max_expanded)?;
    let Some(presentation) = package.xml("ppt/presentation.xml")? else {
        let hint = if package.has("word/document.xml") {
            "it is a Word document; use ReadDocx"
        } else if package.has("xl/workbook.xml") {
            "it is an Excel workbook; use ReadExcel"
        } else {
            "it has no ppt/presentation.xml part"
        };
        return Err(ReadFailure::WrongType(format!(
            "not a PowerPoint presentation: {hint}"
        )));
    };
    let rels = package.relationships("ppt/presentation.xml")?;
    let mut slides = Vec::new();
    if let Some(list) = presentation.child("sldIdLst") {
        for id in list.elements().filter(|e| e.name == "sldId") {
            let rid = id.prefixed_attr("id").unwrap_or("");
            if let Some(rel) = rels.iter().find(|r| r.id == rid && r.kind.ends_with(SLIDE)) {
                slides.push(rel.target.clone());
            }
        }
    }
    let mut out = format!("Slides: {}\n", slides.len());
    for (n, part) in slides.iter().enumerate() {
        let slide = package.xml(part)?.ok_or_else(|| {
            ReadFailure::Corrupt(format!(
                "slide {} ({part}) is missing from the package",
                n + 1
            ))
        })?;
        let mut title = None;
        let mut body = String::new();
        if let Some(tree) = slide.find("spTree") {
            shapes(tree, &mut title, &mut body);
        }
        let _ = write!(out, "\n## Slide {}", n + 1);
        if let Some(t) = &title {
            let _ = write!(out, ": {t}");
        }
        out.push_str("\n\n");
        out.push_str(&body);
        let notes_part = package
            .relationships(part)?
            .into_iter()
            .find(|r| r.kind.ends_with(NOTES));
        if let Some(rel) = notes_part
            && let Some(notes) = package.xml(&rel.target)?
        {
            let text = notes_text(&notes);
            if !text.is_empty() {
                let _ = write!(out, "\nSpeaker notes:\n\n{text}\n");
            }
        }
    }
    Ok(out)
}

/// The shapes of a shape tree (groups included) in document order.
fn shapes(tree: &Element, title: &mut Option<String>, out: &mut String) {
    for shape in tree.elements() {
        match shape.name.as_str() {
            "sp" => {
                let ph = shape.find("nvPr").and_then(|p| p.child("ph"));
                let placeholder = ph.and_then(|ph| ph.attr("type")).unwrap_or("");
                let Some(body) = shape.child("txBody") else {
                    continue;
                };
                if matches!(placeholder, "title" | "ctrTitle") && title.is_none() {
                    let text = paragraphs(body)
                        .into_iter()
                        .map(|(_, t)| t)
                        .collect::<Vec<_>>()
                        .join(" ");
                    *title = Some(text);
                    continue;
                }
                // A body placeholder (`type="body"`, or no type: an object placeholder) holds
                // bullets; subtitles, footers and free text boxes hold plain lines.
                let bulleted = ph.is_some() && matches!(placeholder, "" | "body" | "obj");
                for (level, text) in paragraphs(body) {
                    if bulleted {
                        let _ = writeln!(out, "{}- {text}", "  ".repeat(level));
                    } else {
                        let _ = writeln!(out, "{text}");
                    }
                }
                out.push('\n');
            }
            "graphicFrame" => {
                if let Some(tbl) = shape.find("tbl") {
                    let rows: Vec<Vec<String>> = tbl
                        .elements()
                        .filter(|e| e.name == "tr")
                        .map(|tr| {
                            tr.elements()
                                .filter(|e| e.name == "tc")
                                .map(|tc| {
                                    tc.child("txBody")
                                        .map(|b| {
                                            paragraphs(b)
                                                .into_iter()
                                                .map(|(_, t)| t)
                                                .collect::<Vec<_>>()
                                                .join("\n")
                                        })
                                        .unwrap_or_default()
                                })
                                .collect()
                        })
                        .collect();
                    out.push_str(&markdown::table(&rows));
                    out.push('\n');
                }
            }
            "grpSp" => shapes(shape, title, out),
            _ => {}
        }
    }
}

/// The non-empty paragraphs of a text body with their indent levels.
fn paragraphs(body: &Element) -> Vec<(usize, String)> {
    body.elements()
        .filter(|e| e.name == "p")
        .filter_map(|p| {
            let level = p
                .child("pPr")
                .and_then(|pr| pr.attr("lvl"))
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            let mut text = String::new();
            for run in p.elements() {
                match run.name.as_str() {
                    "r" | "fld" => {
                        if let Some(t) = run.child("t") {
                            text.push_str(&t.text());
                        }
                    }
                    "br" => text.push(' '),
                    _ => {}
                }
            }
            let text = text.trim().to_string();
            (!text.is_empty()).then_some((level, text))
        })
        .collect()
}

/// The speaker notes: the text of the notes page's body placeholder.
fn notes_text(notes: &Element) -> String {
    let mut shapes = Vec::new();
    notes.find_all("sp", &mut shapes);
    shapes
        .into_iter()
        .filter(|s| {
            s.find("nvPr")
                .and_then(|p| p.child("ph"))
                .and_then(|ph| ph.attr("type"))
                == Some("body")
        })
        .filter_map(|s| s.child("txBody"))
        .flat_map(paragraphs)
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join("\n")
}
