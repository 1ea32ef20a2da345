//! `ListSkills` and `ReadSkill`: skills are markdown files in the configured skills directories
//! (`<dir>/<name>.md` or `<dir>/<name>/SKILL.md` with its supporting files). Reading one
//! materialises it into the workspace's `skills/` so later commands can use its files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::ToolsConfig;
use crate::core::{blocking, open_workspace};
use crate::input::capped;
use crate::regular_file::{self, Access, Create, OpenError};
use crate::workspace::{Workspace, WorkspaceError};
use crate::{ToolContext, ToolOutput, TypedTool};

/// Most files copied with a directory skill, and their total size.
const MAX_SKILL_FILES: usize = 200;
const MAX_SKILL_BYTES: u64 = 20 * 1024 * 1024;

/// The input of a `ListSkills` call: none.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListSkillsInput {}

/// The input of a `ReadSkill` call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadSkillInput {
    /// The skill's name, as listed by ListSkills.
    pub name: String,
}

/// A skill found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// The name it is listed and read by: the file stem of `<name>.md`, or the directory's name.
    pub name: String,
    /// The skills directory it was found in.
    pub root: PathBuf,
    /// The markdown file (`<name>.md` or `<name>/SKILL.md`).
    pub file: PathBuf,
    /// For directory skills, the directory.
    pub dir: Option<PathBuf>,
}

/// Every skill in `dirs`, first occurrence of a name winning, sorted by name.
pub fn find_skills(dirs: &[PathBuf]) -> Vec<Skill> {
    let mut skills: Vec<Skill> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            // Only regular files count: a symlinked skill file could lead anywhere on the host.
            let skill = if kind.is_dir() && is_regular(&path.join("SKILL.md")) {
                path.file_name().map(|n| Skill {
                    name: n.to_string_lossy().into_owned(),
                    root: dir.clone(),
                    file: path.join("SKILL.md"),
                    dir: Some(path.clone()),
                })
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "md") {
                path.file_stem().map(|n| Skill {
                    name: n.to_string_lossy().into_owned(),
                    root: dir.clone(),
                    file: path.clone(),
                    dir: None,
                })
            } else {
                None
            };
            if let Some(skill) = skill
                && !skills.iter().any(|s| s.name == skill.name)
            {
                skills.push(skill);
            }
        }
    }
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    skills
}

fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// Reads a skill's file: a regular file whose directory, resolved, lies inside the skill's
/// skills directory.
fn read_skill_file(skills_dir: &Path, file: &Path) -> Result<String, OpenError> {
    regular_file::ensure_inside(skills_dir, file)?;
    regular_file::read_to_string(file)
}

/// The `description:` of a YAML front matter, else the first non-empty line without `#`.
pub fn summary(markdown: &str) -> String {
    let mut lines = markdown.lines();
    if markdown.starts_with("---") {
        lines.next();
        for line in lines.by_ref() {
            if line.trim() == "---" {
                break;
            }
            if let Some(d) = line.trim().strip_prefix("description:") {
                return d.trim().trim_matches('"').to_string();
            }
        }
    }
    lines
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

/// `ListSkills`.
#[derive(Debug)]
pub struct ListSkills {
    /// The directories it lists (`skills_dirs`) and the output cap.
    pub config: Arc<ToolsConfig>,
}

/// `ReadSkill`.
#[derive(Debug)]
pub struct ReadSkill {
    /// The directories it looks in (`skills_dirs`) and the output cap.
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for ListSkills {
    type Input = ListSkillsInput;
    const NAME: &'static str = "ListSkills";
    const DESCRIPTION: &'static str = "List the available skills with a one-line summary each.";

    async fn run(&self, _ctx: &ToolContext, _input: ListSkillsInput) -> ToolOutput {
        let config = Arc::clone(&self.config);
        blocking(move || list(&config)).await
    }
}

impl TypedTool for ReadSkill {
    type Input = ReadSkillInput;
    const NAME: &'static str = "ReadSkill";
    const DESCRIPTION: &'static str = "Read a skill's instructions and copy it (with its files) into the workspace's skills/ directory.";

    async fn run(&self, ctx: &ToolContext, input: ReadSkillInput) -> ToolOutput {
        let ws = match open_workspace(ctx) {
            Ok(ws) => ws,
            Err(e) => return e,
        };
        let config = Arc::clone(&self.config);
        blocking(move || read(&config, &ws, &input.name)).await
    }
}

fn list(config: &ToolsConfig) -> ToolOutput {
    let skills = find_skills(&config.skill_dirs());
    if skills.is_empty() {
        return ToolOutput::ok("no skills are available");
    }
    let out: String = skills
        .iter()
        .map(|s| {
            let text = read_skill_file(&s.root, &s.file).unwrap_or_default();
            format!("{}: {}\n", s.name, summary(&text))
        })
        .collect();
    capped(out, config.output_cap_bytes)
}

fn read(config: &ToolsConfig, ws: &Workspace, name: &str) -> ToolOutput {
    let skills = find_skills(&config.skill_dirs());
    let Some(skill) = skills.iter().find(|s| s.name == name) else {
        return ToolOutput::error(format!(
            "no skill named `{name}`; available: {}",
            if skills.is_empty() {
                "none".to_string()
            } else {
                skills
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    };
    let content = match read_skill_file(&skill.root, &skill.file) {
        Ok(c) => c,
        Err(e) => {
            return ToolOutput::error(format!(
                "cannot read skill `{name}`: {}",
                e.explain(&format!("{name}.md"), "ReadSkill", Access::Read)
            ));
        }
    };
    let saved = match &skill.dir {
        None => materialise(ws, &format!("skills/{name}.md"), content.as_bytes())
            .map(|()| format!("skills/{name}.md")),
        Some(dir) => copy_dir(ws, dir, &format!("skills/{name}")).map(|n| {
            format!("skills/{name}/ ({n} file(s); instructions in skills/{name}/SKILL.md)")
        }),
    };
    match saved {
        Ok(where_) => {
            let mut out = format!("[skill `{name}` saved to {where_}]\n\n");
            out.push_str(&content);
            capped(out, config.output_cap_bytes)
        }
        Err(e) => ToolOutput::error(format!(
            "cannot copy skill `{name}` into the workspace: {e}"
        )),
    }
}

/// Why a skill could not be copied into the workspace.
#[derive(Debug, thiserror::Error)]
enum CopyError {
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// `message` is the source explained for ReadSkill.
    #[error("{message}")]
    File {
        message: String,
        #[source]
        source: OpenError,
    },
    #[error(
        "the skill is too large (more than {MAX_SKILL_FILES} files or {MAX_SKILL_BYTES} bytes)"
    )]
    TooLarge,
}

impl CopyError {
    fn file(source: OpenError, shown: &str, access: Access) -> CopyError {
        CopyError::File {
            message: source.explain(shown, "ReadSkill", access),
            source,
        }
    }
}

/// Writes one file to a workspace path (resolved safely, parents created, only as a regular
/// file: never through a symlink or into a FIFO planted there).
fn materialise(ws: &Workspace, rel: &str, content: &[u8]) -> Result<(), CopyError> {
    let target = ws.resolve_writable(rel, &["skills".to_string()])?;
    if let Some(parent) = target.abs.parent() {
        std::fs::create_dir_all(parent)?;
    }
    regular_file::write(&target.abs, content, Create::OrTruncate)
        .map_err(|e| CopyError::file(e, rel, Access::Write))
}

/// Copies a skill directory's regular files (symlinks are skipped) into the workspace.
fn copy_dir(ws: &Workspace, dir: &Path, rel: &str) -> Result<usize, CopyError> {
    let mut copied = 0usize;
    let mut bytes = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)?.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                let Ok(sub) = path.strip_prefix(dir) else {
                    continue;
                };
                bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
                if copied >= MAX_SKILL_FILES || bytes > MAX_SKILL_BYTES {
                    return Err(CopyError::TooLarge);
                }
                let content = regular_file::read(&path)
                    .map_err(|e| CopyError::file(e, &sub.display().to_string(), Access::Read))?;
                materialise(ws, &format!("{rel}/{}", sub.display()), &content)?;
                copied += 1;
            }
        }
    }
    Ok(copied)
}
