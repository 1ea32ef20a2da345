//! Spreadsheets to Markdown: xlsx, xlsm, xlsb, xls and ods through `calamine` (the values the
//! writer computed for formulas, dates as dates), csv through `csv`.

use std::fmt::Write as _;
use std::io::Cursor;

use calamine::{Data, Range, Reader, open_workbook_auto_from_rs};

use crate::markdown;
use crate::protocol::{CFB_MAGIC, ReadFailure, Request};

/// The workbook in `bytes` as Markdown: every sheet's name and size, then the cells of the
/// chosen sheet (all sheets when none is chosen) within `range`, cut at `max_chars`.
pub(crate) fn read(bytes: &[u8], request: &Request) -> Result<String, ReadFailure> {
    if crate::protocol::is_encrypted_office(bytes) {
        return Err(ReadFailure::Encrypted(
            "the workbook is protected with a password (an encrypted package); save an unprotected copy and read that".into(),
        ));
    }
    if bytes.starts_with(b"PK\x03\x04") {
        let mut package =
            crate::package::Package::open(bytes, "a spreadsheet", request.max_expanded_bytes)?;
        if package.has("word/document.xml") {
            return Err(ReadFailure::WrongType(
                "it is a Word document, not a spreadsheet; use ReadDocx".into(),
            ));
        }
        if package.has("ppt/presentation.xml") {
            return Err(ReadFailure::WrongType(
                "it is a PowerPoint presentation, not a spreadsheet; use ReadPPTX".into(),
            ));
        }
        // Reading every part through the capped reader stops a zip bomb whose headers lie about
        // its sizes before calamine inflates it whole.
        package.read_all()?;
    } else if !bytes.starts_with(CFB_MAGIC) {
        return Err(ReadFailure::WrongType(
            "it is neither an Excel workbook (xlsx, xlsm, xlsb, xls) nor an OpenDocument spreadsheet (ods); for a .csv file give its .csv name".into(),
        ));
    }
    let mut workbook = open_workbook_auto_from_rs(Cursor::new(bytes)).map_err(failure)?;
    let names = workbook.sheet_names();
    if let Some(wanted) = &request.sheet
        && !names.iter().any(|n| n == wanted)
    {
        return Err(ReadFailure::NotFound(format!(
            "the workbook has no sheet named {wanted:?}; its sheets are {}",
            quoted(&names)
        )));
    }
    let mut ranges = Vec::new();
    for name in &names {
        let range = workbook.worksheet_range(name).map_err(failure)?;
        ranges.push((name.clone(), range));
    }
    let mut out = String::from("Sheets:\n");
    for (name, range) in &ranges {
        let (rows, cols) = range.get_size();
        let span = match (range.start(), range.end()) {
            (Some(s), Some(e)) => format!(", cells {}:{}", a1(s), a1(e)),
            _ => String::new(),
        };
        let _ = writeln!(out, "- {name:?}: {rows} rows x {cols} columns{span}");
    }
    let limits = match &request.range {
        Some(r) => Some(parse_range(r)?),
        None => None,
    };
    let mut budget = request.max_chars.saturating_sub(out.len());
    for (name, range) in &ranges {
        if request.sheet.as_ref().is_some_and(|s| s != name) {
            continue;
        }
        let formulas = workbook.worksheet_formula(name).ok();
        let _ = write!(out, "\n## Sheet: {name}\n\n");
        match render(range, formulas.as_ref(), limits, budget, name) {
            Rendered::Empty => out.push_str("(no cells in this range)\n"),
            Rendered::Table(text, note) => {
                budget = budget.saturating_sub(text.len());
                out.push_str(&text);
                out.push_str(&note);
            }
        }
    }
    Ok(out)
}

/// A block of cells: zero-based (row, column) of its first and last cell.
type Span = ((u32, u32), (u32, u32));

enum Rendered {
    Empty,
    /// The table and what follows it (what was cut, formulas without values).
    Table(String, String),
}

fn render(
    range: &Range<Data>,
    formulas: Option<&Range<String>>,
    limits: Option<Span>,
    budget: usize,
    sheet: &str,
) -> Rendered {
    let (Some(start), Some(end)) = (range.start(), range.end()) else {
        return Rendered::Empty;
    };
    let (from, to) = match limits {
        Some((a, b)) => (
            (a.0.max(start.0), a.1.max(start.1)),
            (b.0.min(end.0), b.1.min(end.1)),
        ),
        None => (start, end),
    };
    if from.0 > to.0 || from.1 > to.1 {
        return Rendered::Empty;
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    // The header row names the columns by letter, so every data row keeps its own number.
    let mut header = vec![String::new()];
    header.extend((from.1..=to.1).map(column_name));
    rows.push(header);
    let mut unvalued = 0usize;
    let mut used = 0usize;
    let mut cut_at = None;
    for r in from.0..=to.0 {
        let mut row = vec![(r + 1).to_string()];
        for c in from.1..=to.1 {
            let value = range.get_value((r, c)).unwrap_or(&Data::Empty);
            let formula = formulas
                .and_then(|f| f.get_value((r, c)))
                .filter(|f| !f.is_empty());
            let text = match (value, formula) {
                (Data::Empty, Some(f)) => {
                    unvalued += 1;
                    format!("={f} (no saved value)")
                }
                (v, _) => show(v),
            };
            row.push(text);
        }
        used += row.iter().map(|c| c.len() + 3).sum::<usize>() + 2;
        if used > budget && r > from.0 {
            cut_at = Some(r);
            break;
        }
        rows.push(row);
    }
    let mut note = String::new();
    if let Some(r) = cut_at {
        let _ = writeln!(
            note,
            "\n[cut: rows {} to {} of sheet {sheet:?} are not shown; call ReadExcel again with sheet: {sheet:?} and range: \"{}:{}\" to read on]",
            r + 1,
            to.0 + 1,
            a1((r, from.1)),
            a1(to)
        );
    }
    if unvalued > 0 {
        let _ = writeln!(
            note,
            "\n{unvalued} formula cell(s) have no saved value (the program that wrote the file did not compute them); their formulas are shown instead"
        );
    }
    Rendered::Table(markdown::table(&rows), note)
}

fn show(value: &Data) -> String {
    match value {
        Data::Empty => String::new(),
        Data::String(s) => s.clone(),
        Data::Int(i) => i.to_string(),
        Data::Float(f) => f.to_string(),
        Data::Bool(b) => b.to_string(),
        Data::DateTime(d) => match d.as_datetime() {
            Some(dt) if d.is_datetime() => {
                if dt.time() == chrono::NaiveTime::MIN {
                    dt.date().to_string()
                } else {
                    dt.to_string()
                }
            }
            _ => d.to_string(),
        },
        Data::DateTimeIso(s) | Data::DurationIso(s) => s.clone(),
        Data::Error(e) => format!("#{e:?}"),
    }
}

fn failure(e: calamine::Error) -> ReadFailure {
    let text = e.to_string();
    if text.to_ascii_lowercase().contains("password") || text.contains("encrypt") {
        ReadFailure::Encrypted(format!("{text}; save an unprotected copy and read that"))
    } else {
        ReadFailure::Corrupt(format!(
            "{text}; the workbook is damaged, truncated or not a spreadsheet"
        ))
    }
}

/// `A1:D20` (or `A1`) as zero-based ((row, col), (row, col)).
fn parse_range(text: &str) -> Result<Span, ReadFailure> {
    let bad = || {
        ReadFailure::NotFound(format!(
            "range {text:?} is not a cell range; write it as A1:D20 (columns by letter, rows from 1)"
        ))
    };
    let (a, b) = text.split_once(':').unwrap_or((text, text));
    let a = parse_cell(a.trim()).ok_or_else(bad)?;
    let b = parse_cell(b.trim()).ok_or_else(bad)?;
    Ok(((a.0.min(b.0), a.1.min(b.1)), (a.0.max(b.0), a.1.max(b.1))))
}

fn parse_cell(text: &str) -> Option<(u32, u32)> {
    let split = text.find(|c: char| c.is_ascii_digit())?;
    let (letters, digits) = text.split_at(split);
    if letters.is_empty() || letters.len() > 3 || !letters.chars().all(|c| c.is_ascii_alphabetic())
    {
        return None;
    }
    let mut col: u32 = 0;
    for c in letters.chars() {
        col = col * 26 + (c.to_ascii_uppercase() as u32 - 'A' as u32 + 1);
    }
    let row: u32 = digits.parse().ok()?;
    (row >= 1).then_some((row - 1, col - 1))
}

/// The letters of a zero-based column (0 → A, 26 → AA).
fn column_name(col: u32) -> String {
    let mut n = col + 1;
    let mut out = Vec::new();
    while n > 0 {
        let rem = (n - 1) % 26;
        out.push(char::from(b'A' + rem as u8));
        n = (n - 1) / 26;
    }
    out.iter().rev().collect()
}

fn a1((row, col): (u32, u32)) -> String {
    format!("{}{}", column_name(col), row + 1)
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A csv file as one Markdown table, cut at `max_chars`.
pub(crate) fn read_csv(bytes: &[u8], request: &Request) -> Result<String, ReadFailure> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut rows = Vec::new();
    let mut used = 0usize;
    let mut cut = None;
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| {
            ReadFailure::Corrupt(format!("{e}; the csv file is damaged or not csv text"))
        })?;
        let row: Vec<String> = record.iter().map(str::to_string).collect();
        used += row.iter().map(|c| c.len() + 3).sum::<usize>() + 2;
        if used > request.max_chars && i > 0 {
            cut = Some(i + 1);
            break;
        }
        rows.push(row);
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = format!(
        "Sheets:\n- {:?}: {}{} rows x {cols} columns\n\n## Sheet: {}\n\n",
        request.shown,
        if cut.is_some() { "at least " } else { "" },
        rows.len(),
        request.shown
    );
    out.push_str(&markdown::table(&rows));
    if let Some(row) = cut {
        let _ = writeln!(
            out,
            "\n[cut: the file continues at row {row}; read the rest with Read (offset) or Bash (`sed -n '{row},$p'`)]"
        );
    }
    Ok(out)
}
