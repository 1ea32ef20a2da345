//! `maestro tools`.

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List every tool with its one-sentence description.
    List,
}

pub fn run(_cmd: Command) -> anyhow::Result<u8> {
    anyhow::bail!("`maestro tools` is not available in this build yet")
}
