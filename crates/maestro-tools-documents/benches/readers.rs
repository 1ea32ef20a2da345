//! The document readers against a well-known Python reader on the same files: the whole text of
//! a 100-page PDF (Maestro: poppler's `pdftotext` in the sandbox, as `ReadPdf` and the knowledge
//! base run it; Python: pypdf), and every row of a 50,000-row sheet (Maestro: calamine in the
//! reader child, as `ReadExcel` runs it; Python: openpyxl in read-only mode).
//!
//! ```text
//! python3 -m pip install pypdf openpyxl reportlab   # the comparison readers and the PDF writer
//! cargo bench -p maestro-tools-documents --bench readers
//! ```
//!
//! Each measurement runs in a fresh process (this binary again, or `python3`), so its time is
//! the whole job, start-up included, and its memory is the peak resident set of the largest
//! process it ran (`ru_maxrss` of itself and of its children: the reader child, the sandbox and
//! poppler for Maestro). `MAESTRO_BENCH_RUNS` (default 7) sets the runs; the median and the
//! extremes are printed. Results: docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use maestro_tools::ToolsConfig;
use maestro_tools_documents::{DocumentsConfig, ReaderCommand, markdown_for_index};

const WRITE: &str = r#"
import sys, os
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas
from openpyxl import Workbook
out = sys.argv[1]
c = canvas.Canvas(os.path.join(out, "hundred.pdf"), pagesize=A4)
for n in range(1, 101):
    c.setFont("Helvetica-Bold", 16)
    c.drawString(72, 790, f"Section {n}")
    c.setFont("Helvetica", 10)
    for line in range(48):
        c.drawString(72, 770 - 14 * line,
                     f"Page {n} line {line}: the quick brown fox jumps over the lazy dog {n * line}.")
    c.showPage()
c.save()
wb = Workbook(write_only=True)
ws = wb.create_sheet("Data")
ws.append(["id", "name", "region", "amount", "ratio"])
for i in range(1, 50001):
    ws.append([i, f"customer {i}", ["north", "south", "east", "west"][i % 4], i * 3, i / 7])
wb.save(os.path.join(out, "rows.xlsx"))
"#;

const PYPDF: &str = r#"
import sys, resource
from pypdf import PdfReader
r = PdfReader(sys.argv[1])
n = sum(len(p.extract_text() or "") for p in r.pages)
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"#;

const OPENPYXL: &str = r#"
import sys, resource
from openpyxl import load_workbook
wb = load_workbook(sys.argv[1], read_only=True, data_only=True)
n = 0
for ws in wb.worksheets:
    for row in ws.iter_rows(values_only=True):
        n += 1
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"#;

fn maxrss_kib(who: libc::c_int) -> i64 {
    let mut usage: libc::rusage = unsafe_zeroed();
    // SAFETY: getrusage fills the struct it is given.
    #[allow(unsafe_code)]
    unsafe {
        libc::getrusage(who, &mut usage);
    }
    usage.ru_maxrss
}

fn unsafe_zeroed() -> libc::rusage {
    // SAFETY: rusage is plain integers, for which all-zero is valid.
    #[allow(unsafe_code)]
    unsafe {
        std::mem::zeroed()
    }
}

/// One Maestro measurement, in this process: the document's whole Markdown.
fn one(file: &Path) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut config = DocumentsConfig::from_tools(
        &ToolsConfig::default(),
        ReaderCommand {
            program: std::env::current_exe().unwrap(),
            args: vec![maestro_tools_documents::READER_ARG.to_string()],
        },
    );
    config.timeout = std::time::Duration::from_secs(120);
    let bytes = std::fs::read(file).unwrap();
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let cancel = tokio_util::sync::CancellationToken::new();
    let markdown = runtime
        .block_on(markdown_for_index(&config, &name, bytes, &cancel))
        .unwrap()
        .unwrap();
    // The PDF's amount is its characters of text; the sheet's, its rows (the table's lines but
    // the delimiter line), as the Python readers count them.
    let amount = if name.ends_with(".pdf") {
        markdown.chars().count()
    } else {
        markdown.lines().filter(|l| l.starts_with("| ")).count()
    };
    println!(
        "{} {} {}",
        amount,
        maxrss_kib(libc::RUSAGE_SELF),
        maxrss_kib(libc::RUSAGE_CHILDREN)
    );
    ExitCode::SUCCESS
}

struct Sample {
    secs: f64,
    peak_kib: i64,
    amount: String,
}

fn measure(mut command: Command) -> Sample {
    let start = Instant::now();
    let out = command.output().unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    let peak_kib = fields[1..]
        .iter()
        .map(|f| f.parse::<i64>().unwrap())
        .max()
        .unwrap();
    Sample {
        secs,
        peak_kib,
        amount: fields[0].to_string(),
    }
}

fn report(label: &str, samples: &mut [Sample]) {
    samples.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    let median = &samples[samples.len() / 2];
    let peak = samples.iter().map(|s| s.peak_kib).max().unwrap();
    println!(
        "{label:<34} median {:>8.1} ms  (min {:.1}, max {:.1})  peak RSS {:>6.1} MiB  output {}",
        median.secs * 1e3,
        samples[0].secs * 1e3,
        samples[samples.len() - 1].secs * 1e3,
        peak as f64 / 1024.0,
        median.amount
    );
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(maestro_tools_documents::READER_ARG) {
        return maestro_tools_documents::reader_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--one") {
        return one(Path::new(&args[1]));
    }
    let runs: usize = std::env::var("MAESTRO_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("python3")
        .args(["-c", WRITE])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "writing the files failed");
    let me: PathBuf = std::env::current_exe().unwrap();
    let cases: [(&str, &str, &str, &str); 2] = [
        ("hundred.pdf", "pdftotext (ReadPdf)", "pypdf", PYPDF),
        (
            "rows.xlsx",
            "calamine (ReadExcel)",
            "openpyxl read-only",
            OPENPYXL,
        ),
    ];
    for (file, ours, theirs, script) in cases {
        let path = dir.path().join(file);
        let mut mine = Vec::new();
        let mut python = Vec::new();
        for _ in 0..runs {
            let mut cmd = Command::new(&me);
            cmd.arg("--one").arg(&path);
            mine.push(measure(cmd));
            let mut cmd = Command::new("python3");
            cmd.args(["-c", script]).arg(&path);
            python.push(measure(cmd));
        }
        println!("{file} ({runs} runs each, whole processes):");
        report(&format!("  Maestro {ours}"), &mut mine);
        report(&format!("  Python {theirs}"), &mut python);
    }
    ExitCode::SUCCESS
}
