//! `InstallSkill`: installs a skill (a directory, a `.zip` or a `.tar.gz` from the workspace)
//! into `tools.skills_install_dir`, where `ListSkills` and `ReadSkill` find it. It writes outside
//! the job into something every later run reads, so it exists only when the configuration names
//! that directory, and it checks what it installs: a `SKILL.md` with `name` and `description`
//! in its front matter, limits on files, bytes and entries, and nothing but plain files and
//! folders inside the skill (no links, no path that leads out of it).

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::ToolsConfig;
use crate::core::{blocking, open_workspace};
use crate::skills::find_skills;
use crate::{ToolContext, ToolOutput, TypedTool};

/// The most files a skill may hold.
pub const MAX_FILES: usize = 200;
/// The most bytes of all a skill's files together.
pub const MAX_BYTES: u64 = 20 * 1024 * 1024;
/// The most entries (files and folders) an archive may list.
pub const MAX_ENTRIES: usize = 1_000;
/// What an `InstallSkill` call answers when `tools.skills_install_dir` is not set.
pub const INSTALL_OFF: &str = "installing skills is off; set `tools.skills_install_dir` in \
    .maestro/config.yaml to turn it on (docs/security.md says what that allows)";
/// The largest `SKILL.md`.
const MAX_SKILL_MD: u64 = 1024 * 1024;

/// The input of an `InstallSkill` call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallSkillInput {
    /// The skill: a folder holding `SKILL.md` in the workspace, or a `.zip`, `.tar.gz` or
    /// `.tgz` archive of one, in the workspace or at an `http(s)://` URL.
    pub source: String,
}

/// `InstallSkill`.
#[derive(Debug)]
pub struct InstallSkill {
    /// `skills_install_dir` (where it installs) and `skills_dirs` (names already taken).
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for InstallSkill {
    type Input = InstallSkillInput;
    const NAME: &'static str = "InstallSkill";
    const DESCRIPTION: &'static str = "Install a skill (a folder with SKILL.md, or a .zip or \
         .tar.gz of one, from the workspace) so that ListSkills and ReadSkill offer it to every \
         later run.";

    async fn run(&self, ctx: &ToolContext, input: InstallSkillInput) -> ToolOutput {
        let Some(install_dir) = self.config.skills_install_dir.clone() else {
            return ToolOutput::error(INSTALL_OFF);
        };
        let ws = match open_workspace(ctx) {
            Ok(ws) => ws,
            Err(e) => return e,
        };
        let config = Arc::clone(&self.config);
        blocking(move || {
            let source = match ws.resolve(&input.source) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            match install(&source.abs, &source.display(), &install_dir, &config) {
                Ok(done) => ToolOutput::ok(done),
                Err(e) => ToolOutput::error(format!("InstallSkill {}: {e}", source.display())),
            }
        })
        .await
    }
}

/// Why a skill was not installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The source is neither a folder nor an archive this tool reads.
    #[error(
        "is not a folder, a .zip, a .tar.gz or a .tgz; give the skill's folder or an archive of it"
    )]
    UnknownKind,
    /// An entry is a link or another special file.
    #[error("`{0}` is a link or a special file; a skill holds only plain files and folders")]
    NotPlain(String),
    /// An entry's path is absolute or climbs out with `..`.
    #[error("`{0}` points outside the skill (an absolute path or `..`); the archive is refused")]
    Escapes(String),
    /// Past a size limit.
    #[error("{0}; a skill may hold {MAX_FILES} files, {MAX_BYTES} bytes and {MAX_ENTRIES} entries")]
    TooLarge(String),
    /// No `SKILL.md` at the top, or in the one folder at the top.
    #[error(
        "has no SKILL.md at its top (or at the top of its one folder); a skill is a folder with \
         SKILL.md and its supporting files"
    )]
    NoSkillMd,
    /// `SKILL.md` lacks what ListSkills needs.
    #[error("SKILL.md {0}")]
    BadSkillMd(String),
    /// A skill of that name exists.
    #[error(
        "a skill named `{0}` is already available; give this one another `name:` in its \
         SKILL.md, or remove the installed one from `tools.skills_install_dir`"
    )]
    Exists(String),
    /// The archive cannot be read.
    #[error("cannot be read as an archive: {0}")]
    Archive(String),
    /// Reading the source or writing the install directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, and where.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> InstallError {
    let what = what.into();
    move |source| InstallError::Io { what, source }
}

/// Files written so far into the staging folder, and the limits they are held to.
struct Staging {
    root: PathBuf,
    files: usize,
    bytes: u64,
    entries: usize,
}

impl Staging {
    /// The path of `name` inside the staging folder, refused unless every part of it is a
    /// plain name (no root, no `..`).
    fn inside(&self, name: &str) -> Result<PathBuf, InstallError> {
        let path = Path::new(name);
        let mut out = self.root.clone();
        let mut parts = 0;
        for component in path.components() {
            match component {
                Component::Normal(part) => {
                    out.push(part);
                    parts += 1;
                }
                Component::CurDir => {}
                _ => return Err(InstallError::Escapes(name.to_string())),
            }
        }
        if parts == 0 {
            return Err(InstallError::Escapes(name.to_string()));
        }
        Ok(out)
    }

    fn entry(&mut self) -> Result<(), InstallError> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(InstallError::TooLarge(format!(
                "it has more than {MAX_ENTRIES} entries"
            )));
        }
        Ok(())
    }

    fn dir(&mut self, name: &str) -> Result<(), InstallError> {
        self.entry()?;
        let path = self.inside(name)?;
        std::fs::create_dir_all(&path).map_err(io(format!("cannot create {}", path.display())))
    }

    /// Copies one file, holding it to the limits by what is really read, not by what the
    /// archive claims.
    fn file(&mut self, name: &str, content: &mut dyn Read) -> Result<(), InstallError> {
        self.entry()?;
        self.files += 1;
        if self.files > MAX_FILES {
            return Err(InstallError::TooLarge(format!(
                "it has more than {MAX_FILES} files"
            )));
        }
        let path = self.inside(name)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("cannot create {}", parent.display())))?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io(format!("cannot write {name}")))?;
        let room = MAX_BYTES - self.bytes;
        let copied = std::io::copy(&mut content.take(room + 1), &mut out)
            .map_err(io(format!("cannot copy {name}")))?;
        self.bytes += copied;
        if self.bytes > MAX_BYTES {
            return Err(InstallError::TooLarge(format!(
                "its files hold more than {MAX_BYTES} bytes"
            )));
        }
        Ok(())
    }
}

/// Installs the skill at `source` (shown to the model as `shown`) into `install_dir`, and says
/// what was installed.
pub fn install(
    source: &Path,
    shown: &str,
    install_dir: &Path,
    config: &ToolsConfig,
) -> Result<String, InstallError> {
    std::fs::create_dir_all(install_dir).map_err(io(format!(
        "cannot create the skills install directory {}",
        install_dir.display()
    )))?;
    let staging_root = install_dir.join(format!(".installing-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&staging_root)
        .map_err(io(format!("cannot write into {}", install_dir.display())))?;
    let mut staging = Staging {
        root: staging_root.clone(),
        files: 0,
        bytes: 0,
        entries: 0,
    };
    let result = stage(source, &mut staging).and_then(|()| {
        let skill_root = skill_root(&staging_root)?;
        let (name, description) = front_matter(&skill_root.join("SKILL.md"))?;
        let taken = find_skills(&config.skill_dirs());
        if taken.iter().any(|s| s.name == name) || install_dir.join(&name).exists() {
            return Err(InstallError::Exists(name));
        }
        let target = install_dir.join(&name);
        std::fs::rename(&skill_root, &target)
            .map_err(io(format!("cannot install into {}", target.display())))?;
        Ok(format!(
            "installed skill `{name}` from {shown} ({} files, {} bytes): {description}. \
             ReadSkill `{name}` to use it; later runs list it with ListSkills.",
            staging.files, staging.bytes
        ))
    });
    let _ = std::fs::remove_dir_all(&staging_root);
    result
}

fn stage(source: &Path, staging: &mut Staging) -> Result<(), InstallError> {
    let meta = std::fs::symlink_metadata(source).map_err(io("cannot read it"))?;
    if meta.file_type().is_symlink() {
        return Err(InstallError::NotPlain(".".into()));
    }
    if meta.is_dir() {
        return stage_dir(source, source, staging);
    }
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let file =
        crate::regular_file::open_read(source).map_err(|e| InstallError::Archive(e.to_string()))?;
    if name.ends_with(".zip") {
        stage_zip(file, staging)
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        stage_tar(file, staging)
    } else {
        Err(InstallError::UnknownKind)
    }
}

fn stage_dir(root: &Path, dir: &Path, staging: &mut Staging) -> Result<(), InstallError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(format!("cannot list {}", dir.display())))?
        .collect::<Result<_, _>>()
        .map_err(io(format!("cannot list {}", dir.display())))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = entry
            .file_type()
            .map_err(io(format!("cannot read {rel}")))?;
        if kind.is_dir() {
            staging.dir(&rel)?;
            stage_dir(root, &path, staging)?;
        } else if kind.is_file() {
            let mut file = crate::regular_file::open_read(&path)
                .map_err(|e| InstallError::Archive(format!("{rel}: {e}")))?;
            staging.file(&rel, &mut file)?;
        } else {
            return Err(InstallError::NotPlain(rel));
        }
    }
    Ok(())
}

/// The file type bits of a Unix mode that mark a symbolic link.
const S_IFMT: u32 = 0o170_000;
const S_IFLNK: u32 = 0o120_000;

fn stage_zip(file: std::fs::File, staging: &mut Staging) -> Result<(), InstallError> {
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| InstallError::Archive(e.to_string()))?;
    if archive.len() > MAX_ENTRIES {
        return Err(InstallError::TooLarge(format!(
            "it lists {} entries",
            archive.len()
        )));
    }
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| InstallError::Archive(e.to_string()))?;
        let name = entry
            .name()
            .map_err(|e| InstallError::Archive(e.to_string()))?
            .into_owned();
        if entry.enclosed_name().is_none() {
            return Err(InstallError::Escapes(name));
        }
        if entry.unix_mode().is_some_and(|m| m & S_IFMT == S_IFLNK) {
            return Err(InstallError::NotPlain(name));
        }
        if entry.is_dir() {
            staging.dir(name.trim_end_matches('/'))?;
        } else {
            staging.file(&name, &mut entry)?;
        }
    }
    Ok(())
}

fn stage_tar(file: std::fs::File, staging: &mut Staging) -> Result<(), InstallError> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = archive
        .entries()
        .map_err(|e| InstallError::Archive(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| InstallError::Archive(e.to_string()))?;
        let name = entry
            .path()
            .map_err(|e| InstallError::Archive(e.to_string()))?
            .to_string_lossy()
            .into_owned();
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                if name
                    .trim_end_matches('/')
                    .trim_start_matches("./")
                    .is_empty()
                {
                    continue;
                }
                staging.dir(name.trim_end_matches('/'))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                staging.file(&name, &mut entry)?;
            }
            // Extended headers carry metadata of the next entry, not files.
            tar::EntryType::XHeader | tar::EntryType::XGlobalHeader => {}
            _ => return Err(InstallError::NotPlain(name)),
        }
    }
    Ok(())
}

/// Where the staged skill starts: the top, or its one folder when only that is at the top.
fn skill_root(staged: &Path) -> Result<PathBuf, InstallError> {
    if staged.join("SKILL.md").is_file() {
        return Ok(staged.to_path_buf());
    }
    let entries: Vec<_> = std::fs::read_dir(staged)
        .map_err(io("cannot list the staged skill"))?
        .flatten()
        .collect();
    match entries.as_slice() {
        [only] if only.path().join("SKILL.md").is_file() => Ok(only.path()),
        _ => Err(InstallError::NoSkillMd),
    }
}

/// The `name` and `description` of `SKILL.md`'s front matter.
fn front_matter(path: &Path) -> Result<(String, String), InstallError> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > MAX_SKILL_MD {
        return Err(InstallError::BadSkillMd(format!(
            "has {size} bytes, more than {MAX_SKILL_MD}"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|_| InstallError::BadSkillMd("is not UTF-8 text".into()))?;
    let missing = || {
        InstallError::BadSkillMd(
            "has no front matter: start it with `---`, a `name:` and a `description:` line, and \
             `---`"
                .into(),
        )
    };
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("---") {
        return Err(missing());
    }
    let mut name = None;
    let mut description = None;
    let mut closed = false;
    for line in lines {
        if line.trim() == "---" {
            closed = true;
            break;
        }
        let value = |v: &str| v.trim().trim_matches('"').trim_matches('\'').to_string();
        if let Some(v) = line.strip_prefix("name:") {
            name = Some(value(v));
        } else if let Some(v) = line.strip_prefix("description:") {
            description = Some(value(v));
        }
    }
    if !closed {
        return Err(missing());
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| InstallError::BadSkillMd("has no `name:` in its front matter".into()))?;
    let description = description.filter(|d| !d.is_empty()).ok_or_else(|| {
        InstallError::BadSkillMd("has no `description:` in its front matter".into())
    })?;
    let valid = name.len() <= 64
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        return Err(InstallError::BadSkillMd(format!(
            "names the skill `{name}`; a name is up to 64 lower-case letters, digits, `-` and `_`, \
             starting with a letter or digit"
        )));
    }
    Ok((name, description))
}
