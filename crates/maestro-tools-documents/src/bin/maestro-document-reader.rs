//! The reader child for this crate's tests, the same entry the shipped `maestro` binary runs as
//! `maestro __document-reader`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    maestro_tools_documents::reader_main(&args)
}
