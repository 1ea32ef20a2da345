//! Marks the build `no_document_writers` when `python3` cannot import the writers the tests
//! make their documents with, and `no_pdf_programs` when poppler-utils or qpdf are missing, so
//! those tests show as ignored (`bash scripts/prerequisites.sh` installs both), and `no_pillow`
//! when `python3` cannot import Pillow, which the image tests make their photos with.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    maestro_buildcheck::check_document_writers();
    maestro_buildcheck::check_pdf_programs();
    maestro_buildcheck::check_pillow();
}
