//! Marks the build `no_document_writers` when `python3` cannot import the writers the tests
//! make their documents with (python-docx, openpyxl, python-pptx, reportlab, msoffcrypto-tool),
//! and `no_pdf_programs` when poppler-utils or qpdf are missing, so those tests show as ignored
//! (`bash scripts/prerequisites.sh` installs both).

use std::process::{Command, Stdio};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_document_writers)");
    println!("cargo::rustc-check-cfg=cfg(no_pdf_programs)");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-changed=build.rs");
    let writers = Command::new("python3")
        .args(["-c", "import docx, openpyxl, pptx, reportlab, msoffcrypto"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !writers {
        println!("cargo::rustc-cfg=no_document_writers");
        println!(
            "cargo::warning=the Python document writers are not installed (scripts/prerequisites.sh): the document tools' tests will be ignored"
        );
    }
    let programs = ["pdftotext", "pdfinfo", "pdftoppm", "qpdf"]
        .iter()
        .all(|p| {
            Command::new(p)
                .arg("-v")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        });
    if !programs {
        println!("cargo::rustc-cfg=no_pdf_programs");
        println!(
            "cargo::warning=poppler-utils or qpdf is not installed (scripts/prerequisites.sh): the PDF tools' tests will be ignored"
        );
    }
}
