//! Finding, merging and finishing the configuration: the user file, then the project file (or
//! one `--config` file), merged map by map; relative paths made absolute; then the environment
//! (`MAESTRO_LLM_BASE_URL`, `MAESTRO_MODEL`, `MAESTRO_API_KEY`, the variable `llm.api_key_env`
//! names, those of `gateway.upstreams.*.api_key_env`); then the checks that span fields.

use std::path::{Path, PathBuf};

use maestro_llm::ProviderKind;
use maestro_protocol::Secret;
use serde_json::Value;

use crate::Config;
use crate::error::{ConfigError, Origin, Problem};
use crate::llm::DEFAULT_ANTHROPIC_BASE_URL;
use crate::parse::{KeyTree, ParsedFile, parse_file, saphyr_problem};

/// The directory holding a configuration file, below a project or the home directory.
pub const CONFIG_DIR: &str = ".maestro";
/// The configuration file's name inside [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "config.yaml";

/// Overrides the endpoint (`llm.base_url`).
pub const ENV_BASE_URL: &str = "MAESTRO_LLM_BASE_URL";
/// Overrides the model (`llm.model`).
pub const ENV_MODEL: &str = "MAESTRO_MODEL";
/// Overrides the API key (`llm.api_key` and `llm.api_key_env`).
pub const ENV_API_KEY: &str = "MAESTRO_API_KEY";

/// Where [`Config::load`] looks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadFrom {
    /// A file given with `--config`: used instead of the user and project files.
    pub explicit: Option<PathBuf>,
    /// The directory the command runs in; the project file is found by walking up from here.
    pub cwd: PathBuf,
    /// The home directory, holding the user file `~/.maestro/config.yaml`.
    pub home: Option<PathBuf>,
}

impl LoadFrom {
    /// The current directory and `$HOME`, with an optional `--config` file.
    pub fn current(explicit: Option<PathBuf>) -> std::io::Result<Self> {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        Ok(LoadFrom {
            explicit,
            cwd: std::env::current_dir()?,
            home,
        })
    }
}

/// One file that takes part, with the directory its relative paths start from.
struct Source {
    path: PathBuf,
    base: PathBuf,
}

impl Config {
    /// Loads the configuration with the process environment. Returns it with the files used,
    /// in the order they were applied.
    ///
    /// ```no_run
    /// use maestro_config::{Config, LoadFrom};
    ///
    /// let (config, files) = Config::load(LoadFrom::current(None)?)?;
    /// println!("from {files:?}:\n{}", config.redacted_yaml());
    /// let client = config.llm.to_openai_config();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(from: LoadFrom) -> Result<(Config, Vec<PathBuf>), ConfigError> {
        Config::load_with_env(from, |name| std::env::var(name).ok())
    }

    /// [`Config::load`] with the environment given as a lookup function (tests, the server).
    pub fn load_with_env(
        from: LoadFrom,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(Config, Vec<PathBuf>), ConfigError> {
        Config::load_inner(from, env, true)
    }

    /// [`Config::load`] for a command that never calls a model (managing the gateway's virtual
    /// keys, reading its usage): the model servers' API keys (`MAESTRO_API_KEY`, the variables
    /// `llm.api_key_env` and `gateway.upstreams.*.api_key_env` name) are not read, so those
    /// variables need not be set; the configuration holds no key but one written in a file.
    pub fn load_without_model_keys(from: LoadFrom) -> Result<(Config, Vec<PathBuf>), ConfigError> {
        Config::load_inner(from, |name| std::env::var(name).ok(), false)
    }

    fn load_inner(
        from: LoadFrom,
        env: impl Fn(&str) -> Option<String>,
        read_model_keys: bool,
    ) -> Result<(Config, Vec<PathBuf>), ConfigError> {
        let env = |name: &str| env(name).filter(|v| !v.is_empty());
        let (sources, root) = discover(&from)?;
        let mut merged = Value::Object(Default::default());
        let mut parsed: Vec<(&Source, KeyTree)> = Vec::new();
        for source in &sources {
            let text = std::fs::read_to_string(&source.path).map_err(|e| ConfigError::Read {
                path: source.path.clone(),
                source: e,
            })?;
            let ParsedFile { mut raw, keys } = parse_file(&source.path, &text)?;
            resolve_paths(&mut raw, &source.base, from.home.as_deref());
            merge(&mut merged, raw, &mut Vec::new());
            parsed.push((source, keys));
        }
        let files: Vec<PathBuf> = sources.iter().map(|s| s.path.clone()).collect();
        let mut config = typed(
            &merged,
            Origin::Merged {
                paths: files.clone(),
            },
        )?;
        absolutize(&mut config, &root);
        config.root = root;
        config.safety.apply(&mut config.tools);

        let mut from_env: Vec<(&[&str], &str)> = Vec::new();
        if let Some(url) = env(ENV_BASE_URL) {
            config.llm.base_url = url;
            from_env.push((&["llm", "base_url"], ENV_BASE_URL));
        }
        if let Some(model) = env(ENV_MODEL) {
            config.llm.model = Some(model);
            from_env.push((&["llm", "model"], ENV_MODEL));
        }
        let locate = |field: &[String]| -> Origin {
            if let Some((_, var)) = from_env.iter().find(|(f, _)| f.iter().eq(field.iter())) {
                return Origin::Env {
                    var: var.to_string(),
                };
            }
            for (source, keys) in parsed.iter().rev() {
                if let Some((line, column)) = keys.locate(field) {
                    return Origin::File {
                        path: source.path.clone(),
                        line: Some(line),
                        column: Some(column),
                    };
                }
            }
            Origin::Merged {
                paths: files.clone(),
            }
        };
        if !read_model_keys {
            // Neither the model's key nor the upstreams' is read.
        } else if let Some(key) = env(ENV_API_KEY) {
            config.llm.api_key = Some(Secret::new(key));
        } else if let Some(var) = config.llm.api_key_env.clone().filter(|v| !v.is_empty()) {
            match env(&var) {
                Some(key) => config.llm.api_key = Some(Secret::new(key)),
                None if config.llm.api_key.is_none() => {
                    return Err(Problem {
                        origin: locate(&["llm".into(), "api_key_env".into()]),
                        field: "llm.api_key_env".into(),
                        message: format!("names the environment variable {var}, which is not set"),
                        fix: format!(
                            "export {var}=<key>, set {ENV_API_KEY}, or remove llm.api_key_env"
                        ),
                    }
                    .into_error());
                }
                None => {}
            }
        }
        if read_model_keys && let Err(check) = config.gateway.read_keys(|var| env(var)) {
            return Err(Problem {
                origin: locate(&check.field),
                field: check.field.join("."),
                message: check.message,
                fix: check.fix,
            }
            .into_error());
        }
        if let Some(check) = config.check().into_iter().next() {
            return Err(Problem {
                origin: locate(&check.field),
                field: check.field.join("."),
                message: check.message,
                fix: check.fix,
            }
            .into_error());
        }
        Ok((config, files))
    }

    /// Parses one configuration document on its own (no other file, no environment); `name`
    /// is used in messages. Relative paths stay as written.
    pub fn from_yaml_str(text: &str, name: &Path) -> Result<Config, ConfigError> {
        let ParsedFile { raw, .. } = parse_file(name, text)?;
        typed(
            &raw,
            Origin::Merged {
                paths: vec![name.to_path_buf()],
            },
        )
    }
}

/// The files to read and the project root (where defaults' relative paths start).
fn discover(from: &LoadFrom) -> Result<(Vec<Source>, PathBuf), ConfigError> {
    let user = from
        .home
        .as_ref()
        .map(|h| h.join(CONFIG_DIR).join(CONFIG_FILE));
    let same_file = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let project = from.cwd.ancestors().find_map(|dir| {
        let file = dir.join(CONFIG_DIR).join(CONFIG_FILE);
        let is_user = user.as_deref().is_some_and(|u| same_file(u, &file));
        (file.is_file() && !is_user).then(|| Source {
            path: file,
            base: dir.to_path_buf(),
        })
    });
    let root = project
        .as_ref()
        .map_or_else(|| from.cwd.clone(), |p| p.base.clone());
    if let Some(explicit) = &from.explicit {
        let path = if explicit.is_absolute() {
            explicit.clone()
        } else {
            from.cwd.join(explicit)
        };
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| from.cwd.clone());
        let base = match (dir.file_name(), dir.parent()) {
            (Some(name), Some(parent)) if name == CONFIG_DIR => parent.to_path_buf(),
            _ => dir,
        };
        return Ok((vec![Source { path, base }], root));
    }
    let mut sources = Vec::new();
    if let (Some(path), Some(home)) = (user, &from.home)
        && path.is_file()
    {
        sources.push(Source {
            path,
            base: home.clone(),
        });
    }
    sources.extend(project);
    Ok((sources, root))
}

/// Deep merge: maps merge key by key, everything else (lists included) is replaced. An MCP
/// server is replaced whole, since mixing a `command` server with a `url` one makes neither.
fn merge(base: &mut Value, over: Value, path: &mut Vec<String>) {
    let atomic = matches!(path.as_slice(), [a, b, _] if a == "mcp" && b == "servers");
    match (base, over) {
        (Value::Object(base), Value::Object(over)) if !atomic => {
            for (key, value) in over {
                path.push(key.clone());
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value, path),
                    None => {
                        base.insert(key, value);
                    }
                }
                path.pop();
            }
        }
        (base, over) => *base = over,
    }
}

/// The merged tree read into [`Config`]. Each file was valid alone, so this fails only when the
/// combination is not (e.g. half of a setting in each file).
pub(crate) fn typed(merged: &Value, origin: Origin) -> Result<Config, ConfigError> {
    let origin = || origin.clone();
    // Through YAML rather than `serde_json::from_value`, so scalars are read as the typed parse
    // of one file reads them (`yes` where a boolean is expected, `123` where a string is).
    let text = serde_saphyr::to_string(merged).map_err(|e| {
        Problem {
            origin: origin(),
            field: "(top level)".into(),
            message: e.to_string(),
            fix: "report this".into(),
        }
        .into_error()
    })?;
    let mut field = None;
    serde_saphyr::with_deserializer_from_str(&text, |de| {
        serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
            field = Some(e.path().to_string());
            e.into_inner()
        })
    })
    .map_err(|e| saphyr_problem(origin(), field, &e, None))
    .map(|mut config: Config| {
        // `provider: anthropic` without a `base_url` means the Anthropic API, not the default
        // local endpoint of the Chat Completions API.
        if config.llm.provider == ProviderKind::Anthropic
            && merged.pointer("/llm/base_url").is_none_or(Value::is_null)
        {
            config.llm.base_url = DEFAULT_ANTHROPIC_BASE_URL.to_string();
        }
        config
    })
}

/// The places in a file that hold paths (`*` is any key or index).
const PATH_FIELDS: &[&[&str]] = &[
    &["paths", "runs_dir"],
    &["paths", "pieces_dirs", "*"],
    &["paths", "facets_dirs", "*"],
    &["tools", "pieces_dir"],
    &["tools", "extra_pieces_dirs", "*"],
    &["tools", "skills_dirs", "*"],
    &["tools", "skills_install_dir"],
    &["tools", "docs_dir"],
    &["safety", "python_requirements"],
    &["safety", "python_env"],
    &["mcp", "servers", "*", "cwd"],
    &["ssh", "connections", "*", "auth", "key"],
];

/// Makes the paths of one file absolute: `~/…` from `home`, other relative paths from `base`.
fn resolve_paths(raw: &mut Value, base: &Path, home: Option<&Path>) {
    fn walk(node: &mut Value, pattern: &[&str], f: &dyn Fn(&str) -> String) {
        let Some((first, rest)) = pattern.split_first() else {
            if let Value::String(text) = node {
                *text = f(text);
            }
            return;
        };
        let children: Vec<&mut Value> = match (node, *first) {
            (Value::Object(map), "*") => map.values_mut().collect(),
            (Value::Array(items), "*") => items.iter_mut().collect(),
            (Value::Object(map), key) => map.get_mut(key).into_iter().collect(),
            _ => Vec::new(),
        };
        for child in children {
            walk(child, rest, f);
        }
    }
    let resolve = |text: &str| -> String {
        let expanded = match (text.strip_prefix("~"), home) {
            (Some(""), Some(home)) => home.to_path_buf(),
            (Some(rest), Some(home)) if rest.starts_with('/') => home.join(&rest[1..]),
            _ => PathBuf::from(text),
        };
        base.join(expanded).to_string_lossy().into_owned()
    };
    for pattern in PATH_FIELDS {
        walk(raw, pattern, &resolve);
    }
}

/// Makes the paths still relative after merging (the defaults) absolute from the project root.
pub(crate) fn absolutize(config: &mut Config, root: &Path) {
    let fix = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = root.join(&*p);
        }
    };
    let paths = &mut config.paths;
    fix(&mut paths.runs_dir);
    paths.pieces_dirs.iter_mut().for_each(fix);
    paths.facets_dirs.iter_mut().for_each(fix);
    let tools = &mut config.tools;
    tools.pieces_dir.iter_mut().for_each(fix);
    tools.extra_pieces_dirs.iter_mut().for_each(fix);
    tools.skills_dirs.iter_mut().for_each(fix);
    tools.skills_install_dir.iter_mut().for_each(fix);
    tools.docs_dir.iter_mut().for_each(fix);
    let safety = &mut config.safety;
    fix(safety
        .python_env
        .get_or_insert_with(|| PathBuf::from(".maestro/python")));
    safety.python_requirements.iter_mut().for_each(fix);
}
