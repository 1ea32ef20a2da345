//! `Glob` and `Grep`: finding files and lines inside the workspace with ripgrep's crates
//! (`ignore` for the walk, `globset`, `grep-searcher`/`grep-regex`). Symlinks are never followed
//! out of the workspace.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, sinks::Lossy};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{blocking, open_workspace};
use crate::config::ToolsConfig;
use crate::input::capped;
use crate::regular_file::{self, Access, FileKind, OpenError};
use crate::workspace::Workspace;
use crate::{ToolContext, ToolOutput, TypedTool};

/// Most file names `Glob` lists.
const MAX_GLOB_RESULTS: usize = 1000;
/// Most matching lines `Grep` returns.
const MAX_GREP_MATCHES: usize = 500;
/// Longer matching lines are cut.
const MAX_GREP_LINE: usize = 500;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct GlobInput {
    /// Glob pattern, e.g. `**/*.rs` or `input/*.csv` (`*` does not cross `/`; `**` does).
    pub pattern: String,
    /// Directory to search from, relative to the workspace root (default: the root).
    pub path: Option<String>,
}

/// `Glob`: workspace files whose path matches a pattern, newest first.
pub(crate) struct GlobTool {
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for GlobTool {
    type Input = GlobInput;
    const NAME: &'static str = "Glob";
    const DESCRIPTION: &'static str =
        "List workspace files matching a glob pattern such as `**/*.md`, newest first.";

    async fn run(&self, ctx: &ToolContext, input: GlobInput) -> ToolOutput {
        search_workspace(&self.config, ctx, input, glob).await
    }
}

/// Opens the workspace and runs `search` off the async runtime under the output cap: the whole
/// of a `Glob` or `Grep` call.
async fn search_workspace<I>(
    config: &ToolsConfig,
    ctx: &ToolContext,
    input: I,
    search: fn(&Workspace, &I, usize) -> ToolOutput,
) -> ToolOutput
where
    I: Send + 'static,
{
    let ws = match open_workspace(ctx) {
        Ok(ws) => ws,
        Err(e) => return e,
    };
    let cap = config.output_cap_bytes;
    blocking(move || search(&ws, &input, cap)).await
}

fn glob(ws: &Workspace, input: &GlobInput, cap: usize) -> ToolOutput {
    let base = match ws.resolve(input.path.as_deref().unwrap_or(".")) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    if !base.abs.is_dir() {
        return ToolOutput::error(format!("`{}` is not a directory", base.display()));
    }
    let matcher = match compile_glob(&input.pattern) {
        Ok(m) => m,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for entry in walk(&base.abs).flatten() {
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(rel_to_base) = entry.path().strip_prefix(&base.abs) else {
            continue;
        };
        if !matcher.is_match(rel_to_base) {
            continue;
        }
        let mtime = std::fs::symlink_metadata(entry.path())
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        let rel = entry
            .path()
            .strip_prefix(ws.root())
            .unwrap_or(entry.path())
            .to_path_buf();
        found.push((mtime, rel));
    }
    if found.is_empty() {
        return ToolOutput::ok(format!(
            "no files match `{}` under `{}`",
            input.pattern,
            base.display()
        ));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let mut out: String = found
        .iter()
        .take(MAX_GLOB_RESULTS)
        .map(|(_, p)| format!("{}\n", p.display()))
        .collect();
    if total > MAX_GLOB_RESULTS {
        out.push_str(&format!(
            "[{total} files match; showing the newest {MAX_GLOB_RESULTS}. Narrow the pattern]\n"
        ));
    }
    capped(out, cap)
}

/// A glob pattern that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("invalid glob pattern `{pattern}`: {source}")]
struct InvalidGlob {
    pattern: String,
    #[source]
    source: globset::Error,
}

fn compile_glob(pattern: &str) -> Result<GlobMatcher, InvalidGlob> {
    let pattern = pattern.trim_start_matches("./");
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|source| InvalidGlob {
            pattern: pattern.to_string(),
            source,
        })
}

/// A walk that does not follow symlinks and includes hidden files, but skips `.git` and honours
/// `.gitignore`.
fn walk(base: &Path) -> ignore::Walk {
    ignore::WalkBuilder::new(base)
        .hidden(false)
        .follow_links(false)
        .require_git(true)
        .build()
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct GrepInput {
    /// Regular expression (Rust/ripgrep syntax) to search for.
    pub pattern: String,
    /// File or directory to search, relative to the workspace root (default: the root).
    pub path: Option<String>,
    /// Only search files matching this glob, e.g. `*.rs` (matched against the file name when it
    /// has no `/`, else against the path below `path`).
    pub glob: Option<String>,
    /// Match case-insensitively (default false).
    #[serde(default)]
    pub ignore_case: Option<bool>,
}

/// `Grep`: matching lines in workspace files, as `path:line:text`.
pub(crate) struct GrepTool {
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for GrepTool {
    type Input = GrepInput;
    const NAME: &'static str = "Grep";
    const DESCRIPTION: &'static str = "Search workspace files for a regular expression and list matching lines as path:line:text.";

    async fn run(&self, ctx: &ToolContext, input: GrepInput) -> ToolOutput {
        search_workspace(&self.config, ctx, input, grep).await
    }
}

fn grep(ws: &Workspace, input: &GrepInput, cap: usize) -> ToolOutput {
    let base = match ws.resolve(input.path.as_deref().unwrap_or(".")) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    match std::fs::symlink_metadata(&base.abs).map(|m| FileKind::of(m.file_type())) {
        Err(_) => return ToolOutput::error(format!("`{}` does not exist", base.display())),
        Ok(FileKind::Regular | FileKind::Directory) => {}
        Ok(kind) => {
            return ToolOutput::error(OpenError::NotRegular { kind }.explain(
                &base.display(),
                "Grep",
                Access::Read,
            ));
        }
    }
    let matcher = match RegexMatcherBuilder::new()
        .case_insensitive(input.ignore_case.unwrap_or(false))
        .build(&input.pattern)
    {
        Ok(m) => m,
        Err(e) => {
            return ToolOutput::error(format!(
                "invalid regular expression `{}`: {e}",
                input.pattern
            ));
        }
    };
    let file_glob = match input.glob.as_deref().map(compile_glob).transpose() {
        Ok(g) => g,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let by_name = input.glob.as_deref().is_some_and(|g| !g.contains('/'));
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut lines: Vec<String> = Vec::new();
    let mut more = false;
    for entry in walk(&base.abs).flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            // Directories, symlinks (never followed, so a link to /etc leaks nothing), and
            // FIFOs, sockets and devices (reading them could block or have side effects).
            continue;
        }
        let path = entry.path();
        if let Some(g) = &file_glob {
            let subject = if by_name {
                path.file_name().map(PathBuf::from).unwrap_or_default()
            } else {
                path.strip_prefix(&base.abs).unwrap_or(path).to_path_buf()
            };
            if !g.is_match(&subject) && entry.depth() > 0 {
                continue;
            }
        }
        let rel = path
            .strip_prefix(ws.root())
            .unwrap_or(path)
            .display()
            .to_string();
        // Opened without blocking and checked again: a FIFO swapped in is skipped.
        let file = match regular_file::open_read(path) {
            Ok(file) => file,
            Err(e) => {
                tracing::debug!(path = %rel, error = %e, "grep skipped a file");
                continue;
            }
        };
        let result = searcher.search_file(
            &matcher,
            &file,
            Lossy(|line_number, line| {
                if lines.len() >= MAX_GREP_MATCHES {
                    more = true;
                    return Ok(false);
                }
                let line = line.trim_end_matches(['\n', '\r']);
                let line = match line.char_indices().nth(MAX_GREP_LINE) {
                    Some((cut, _)) => format!("{}…", &line[..cut]),
                    None => line.to_string(),
                };
                lines.push(format!("{rel}:{line_number}:{line}"));
                Ok(true)
            }),
        );
        if let Err(e) = result {
            tracing::debug!(path = %rel, error = %e, "grep skipped a file");
        }
        if more {
            break;
        }
    }
    if lines.is_empty() {
        return ToolOutput::ok(format!(
            "no matches for `{}` under `{}`",
            input.pattern,
            base.display()
        ));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    if more {
        out.push_str(&format!(
            "[stopped after {MAX_GREP_MATCHES} matching lines; narrow the pattern, path or glob]\n"
        ));
    }
    capped(out, cap)
}
