//! Loading real files from temporary directories: which files take part and in what order, the
//! environment on top, paths made absolute, and the errors a person sees.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use maestro_config::{
    Config, ConfigError, LlmConfig, LoadFrom, ModelOverrides, Origin, PathsConfig, Problem,
    RetrySettings,
};
use maestro_llm::ToolMode;
use maestro_protocol::Secret;
use pretty_assertions::assert_eq;
use tempfile::TempDir;

/// A home directory and a project (with a subdirectory to run from), both empty.
struct Dirs {
    _tmp: TempDir,
    home: PathBuf,
    project: PathBuf,
    cwd: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let (home, project) = (root.join("home"), root.join("work/project"));
        let cwd = project.join("src/deep");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        Dirs {
            _tmp: tmp,
            home,
            project,
            cwd,
        }
    }

    fn write(&self, path: &Path, text: &str) -> PathBuf {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        path.to_path_buf()
    }

    fn user_file(&self, text: &str) -> PathBuf {
        self.write(&self.home.join(".maestro/config.yaml"), text)
    }

    fn project_file(&self, text: &str) -> PathBuf {
        self.write(&self.project.join(".maestro/config.yaml"), text)
    }

    fn from(&self) -> LoadFrom {
        LoadFrom {
            explicit: None,
            cwd: self.cwd.clone(),
            home: Some(self.home.clone()),
        }
    }

    fn load(&self, env: &[(&str, &str)]) -> Result<(Config, Vec<PathBuf>), ConfigError> {
        self.load_from(self.from(), env)
    }

    fn load_from(
        &self,
        from: LoadFrom,
        env: &[(&str, &str)],
    ) -> Result<(Config, Vec<PathBuf>), ConfigError> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_with_env(from, move |name| env.get(name).cloned())
    }
}

fn problem(result: Result<(Config, Vec<PathBuf>), ConfigError>) -> Problem {
    match result {
        Err(ConfigError::Invalid(problem)) => *problem,
        other => panic!("expected an invalid configuration, got {other:?}"),
    }
}

#[test]
fn without_files_the_defaults_apply_with_paths_under_the_current_directory() {
    let dirs = Dirs::new();
    let (config, files) = dirs.load(&[]).unwrap();
    assert_eq!(files, Vec::<PathBuf>::new());
    assert_eq!(config.llm, LlmConfig::default());
    assert_eq!(config.llm.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(config.llm.tool_mode, ToolMode::Auto);
    assert_eq!(
        config.paths,
        PathsConfig {
            runs_dir: dirs.cwd.join(".maestro/runs"),
            pieces_dirs: vec![dirs.cwd.join(".maestro/pieces"), dirs.cwd.join("pieces")],
            facets_dirs: vec![],
        }
    );
    let err = config.engine_config().unwrap_err();
    assert_eq!(
        err.to_string(),
        "no model: set llm.model, MAESTRO_MODEL or --model"
    );
}

#[test]
fn the_project_file_overrides_the_user_file_field_by_field() {
    let dirs = Dirs::new();
    let user = dirs.user_file(
        "llm:\n  base_url: http://10.0.0.5:8080/v1\n  model: user-model\n  retry:\n    max_attempts: 3\n    initial_ms: 200\n\
         tools:\n  writable_dirs: [output, scratch]\n  bash_sandbox: off\n",
    );
    let project = dirs.project_file(
        "llm:\n  model: project-model\n  retry:\n    jitter: 0.5\ntools:\n  writable_dirs: [\".\"]\n",
    );
    let (config, files) = dirs.load(&[]).unwrap();
    assert_eq!(files, vec![user, project]);
    assert_eq!(
        config.llm,
        LlmConfig {
            base_url: "http://10.0.0.5:8080/v1".into(),
            model: Some("project-model".into()),
            retry: RetrySettings {
                max_attempts: 3,
                initial_ms: 200,
                max_ms: 30_000,
                jitter: 0.5
            },
            ..LlmConfig::default()
        }
    );
    // Lists are replaced, not appended.
    assert_eq!(config.tools.writable_dirs, vec!["."]);
    assert_eq!(
        config.tools.bash_sandbox,
        maestro_tools::BashSandboxMode::Off
    );
    // Defaults' relative paths start at the project root, not the directory run from.
    assert_eq!(config.paths.runs_dir, dirs.project.join(".maestro/runs"));
}

#[test]
fn an_explicit_file_replaces_the_user_and_project_files() {
    let dirs = Dirs::new();
    dirs.user_file("llm:\n  model: user-model\n  context_length: 4096\n");
    dirs.project_file("llm:\n  model: project-model\n");
    let explicit = dirs.write(
        &dirs.home.join("ci/maestro.yaml"),
        "llm:\n  model: ci-model\npaths:\n  runs_dir: runs\n",
    );
    let from = LoadFrom {
        explicit: Some(explicit.clone()),
        ..dirs.from()
    };
    let (config, files) = dirs.load_from(from, &[]).unwrap();
    assert_eq!(files, vec![explicit]);
    assert_eq!(
        (config.llm.model.as_deref(), config.llm.context_length),
        (Some("ci-model"), None)
    );
    assert_eq!(config.paths.runs_dir, dirs.home.join("ci/runs"));
}

#[test]
fn a_missing_explicit_file_is_an_error_naming_it() {
    let dirs = Dirs::new();
    let from = LoadFrom {
        explicit: Some("nope.yaml".into()),
        ..dirs.from()
    };
    let err = dirs.load_from(from, &[]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Read { path, .. } if *path == dirs.cwd.join("nope.yaml")),
        "{err}"
    );
}

#[test]
fn relative_paths_start_where_the_file_lives_and_tilde_is_home() {
    let dirs = Dirs::new();
    dirs.user_file("paths:\n  facets_dirs: [\"~/facets\", shared/facets]\n");
    dirs.project_file("paths:\n  runs_dir: out/runs\n  pieces_dirs: [/opt/pieces]\n");
    let (config, _) = dirs.load(&[]).unwrap();
    assert_eq!(
        config.paths,
        PathsConfig {
            runs_dir: dirs.project.join("out/runs"),
            pieces_dirs: vec![PathBuf::from("/opt/pieces")],
            facets_dirs: vec![dirs.home.join("facets"), dirs.home.join("shared/facets")],
        }
    );
}

#[test]
fn the_environment_overrides_the_files() {
    let dirs = Dirs::new();
    dirs.project_file("llm:\n  model: file-model\n  api_key: sk-from-file-123\n");
    let env = [
        ("MAESTRO_MODEL", "env-model"),
        ("MAESTRO_LLM_BASE_URL", "http://127.0.0.1:9/v1"),
    ];
    let (config, _) = dirs.load(&env).unwrap();
    assert_eq!(config.llm.model.as_deref(), Some("env-model"));
    assert_eq!(config.llm.base_url, "http://127.0.0.1:9/v1");
    assert_eq!(config.llm.api_key, Some(Secret::new("sk-from-file-123")));

    let (config, _) = dirs
        .load(&[
            ("MAESTRO_API_KEY", "sk-from-env-456"),
            ("MAESTRO_MODEL", ""),
        ])
        .unwrap();
    assert_eq!(config.llm.api_key, Some(Secret::new("sk-from-env-456")));
    assert_eq!(
        config.llm.model.as_deref(),
        Some("file-model"),
        "an empty variable counts as unset"
    );
}

#[test]
fn the_key_is_read_from_the_variable_api_key_env_names() {
    let dirs = Dirs::new();
    dirs.project_file("llm:\n  model: m\n  api_key_env: MY_LLM_KEY\n");
    let (config, _) = dirs.load(&[("MY_LLM_KEY", "sk-named-789")]).unwrap();
    assert_eq!(
        config.llm.to_openai_config().api_key,
        Some(Secret::new("sk-named-789"))
    );
    let (config, _) = dirs
        .load(&[
            ("MY_LLM_KEY", "sk-named-789"),
            ("MAESTRO_API_KEY", "sk-wins"),
        ])
        .unwrap();
    assert_eq!(config.llm.api_key, Some(Secret::new("sk-wins")));

    let missing = problem(dirs.load(&[]));
    assert_eq!(
        missing,
        Problem {
            origin: Origin::File {
                path: dirs.project.join(".maestro/config.yaml"),
                line: Some(3),
                column: Some(3)
            },
            field: "llm.api_key_env".into(),
            message: "names the environment variable MY_LLM_KEY, which is not set".into(),
            fix: "export MY_LLM_KEY=<key>, set MAESTRO_API_KEY, or remove llm.api_key_env".into(),
        }
    );
}

#[test]
fn per_model_overrides_apply_to_the_configured_model_only() {
    let dirs = Dirs::new();
    dirs.project_file(
        "llm:\n  model: qwen2.5-coder\n  tool_mode: native\n  context_length: 32768\n  idle_timeout_secs: 30\n\
         \x20 retry: {max_attempts: 2, initial_ms: 10, max_ms: 20, jitter: 0}\n  models:\n\
         \x20   qwen2.5-coder: {tool_mode: json, context_length: 8192}\n    other: {tool_mode: native, vision: false}\n",
    );
    let (config, _) = dirs.load(&[]).unwrap();
    assert_eq!(
        config.llm.models["qwen2.5-coder"],
        ModelOverrides {
            tool_mode: Some(ToolMode::Json),
            context_length: Some(8192),
            price: None,
            vision: None,
        }
    );
    assert_eq!(config.llm.models["other"].vision, Some(false));
    let client = config.llm.to_openai_config();
    assert_eq!(client.text_only_models, vec!["other".to_string()]);
    assert_eq!(
        (client.tool_mode, client.context_length),
        (ToolMode::Json, Some(8192))
    );
    assert_eq!(client.idle_timeout, std::time::Duration::from_secs(30));
    assert_eq!(
        client.retry,
        maestro_llm::RetryPolicy {
            max_attempts: 2,
            initial: std::time::Duration::from_millis(10),
            max: std::time::Duration::from_millis(20),
            jitter: 0.0,
        }
    );
    assert_eq!(config.engine_config().unwrap().context_length, Some(8192));

    let (config, _) = dirs.load(&[("MAESTRO_MODEL", "llama3")]).unwrap();
    let client = config.llm.to_openai_config();
    assert_eq!(
        (client.tool_mode, client.context_length),
        (ToolMode::Native, Some(32768))
    );
    assert_eq!(config.engine_config().unwrap().model, "llama3");
}

#[test]
fn an_unknown_field_names_file_line_column_and_the_known_fields() {
    let dirs = Dirs::new();
    let file = dirs.project_file("llm:\n  model: m\n  modle: n\n");
    let found = problem(dirs.load(&[]));
    assert_eq!(
        found.origin,
        Origin::File {
            path: file.clone(),
            line: Some(3),
            column: Some(3)
        }
    );
    assert_eq!(found.field, "llm.modle");
    assert!(
        found.message.starts_with(
            "unknown field `modle`, expected one of provider, base_url, model, api_key_env"
        ),
        "{found}"
    );
    let shown = found.to_string();
    assert!(
        shown.starts_with(&format!(
            "{}:3:3: `llm.modle`: unknown field",
            file.display()
        )),
        "{shown}"
    );
    assert!(
        shown.ends_with("fix: remove it, or correct the spelling to one of the fields listed"),
        "{shown}"
    );
}

#[test]
fn an_unknown_field_in_a_section_that_does_not_deny_them_is_still_refused() {
    let dirs = Dirs::new();
    let file = dirs.project_file("tools:\n  output_cap_bytes: 100\n  bash_sandbx: off\n");
    let found = problem(dirs.load(&[]));
    assert_eq!(
        found.origin,
        Origin::File {
            path: file,
            line: Some(3),
            column: Some(3)
        }
    );
    assert_eq!(found.field, "tools.bash_sandbx");
    assert!(
        found
            .message
            .starts_with("unknown field `bash_sandbx`, expected one of bash_sandbox, "),
        "{found}"
    );
}

#[test]
fn a_wrong_type_names_the_field_and_what_was_expected() {
    let dirs = Dirs::new();
    let file = dirs.user_file("llm:\n  idle_timeout_secs: soon\n");
    let found = problem(dirs.load(&[]));
    assert_eq!(
        found.origin,
        Origin::File {
            path: file,
            line: Some(2),
            column: Some(22)
        }
    );
    assert_eq!(found.field, "llm.idle_timeout_secs");
    assert_eq!(found.message, "`soon` is not a whole number (0 or more)");
    assert!(
        found
            .fix
            .starts_with("give `llm.idle_timeout_secs` a value of the expected kind"),
        "{found}"
    );

    dirs.user_file("llm:\n  tool_mode: nativ\n");
    let found = problem(dirs.load(&[]));
    assert_eq!(
        found.message,
        "unknown variant `nativ`, expected one of native, json, auto"
    );
    assert_eq!(found.fix, "use one of the values listed");
}

/// Broken YAML is said as broken YAML, where it breaks, not as a value of the wrong kind where
/// the typed reading first stumbled.
#[test]
fn broken_yaml_is_a_syntax_error_with_its_place() {
    let dirs = Dirs::new();
    let file = dirs.user_file("llm:\n  model: [\n");
    let found = problem(dirs.load(&[]));
    assert_eq!(
        found.origin,
        Origin::File {
            path: file,
            line: Some(2),
            column: Some(10)
        }
    );
    assert_eq!(found.message, "unclosed bracket '['");
    assert!(
        found.fix.starts_with("correct the YAML syntax here"),
        "{found}"
    );
    // A well-formed value of the wrong kind is still said as such.
    dirs.user_file("llm:\n  model: [a]\n");
    let found = problem(dirs.load(&[]));
    assert_eq!(found.field, "llm.model");
    assert!(found.fix.starts_with("give `llm.model` a value"), "{found}");
}

#[test]
fn a_value_out_of_range_points_at_the_file_that_set_it() {
    let dirs = Dirs::new();
    dirs.user_file("llm:\n  retry:\n    max_attempts: 4\n");
    let project = dirs.project_file(
        "engine:\n  max_iterations_per_movement: 10\nllm:\n  retry:\n    max_attempts: 0\n",
    );
    let found = problem(dirs.load(&[]));
    assert_eq!(
        found,
        Problem {
            origin: Origin::File {
                path: project,
                line: Some(5),
                column: Some(5)
            },
            field: "llm.retry.max_attempts".into(),
            message: "must be at least 1".into(),
            fix: "use 1 to disable retries".into(),
        }
    );
    let found = problem(dirs.load(&[("MAESTRO_LLM_BASE_URL", "localhost:11434")]));
    assert_eq!(
        found.origin,
        Origin::Env {
            var: "MAESTRO_LLM_BASE_URL".into()
        }
    );
    assert_eq!(found.field, "llm.base_url");
}

#[test]
fn secrets_never_show_in_debug_or_the_display_form() {
    let dirs = Dirs::new();
    dirs.project_file(
        "llm:\n  api_key: sk-inline-secret-1\n\
         mcp:\n  servers:\n    fs: {command: mcp-fs, env: {TOKEN: env-secret-2}}\n\
         \x20   web: {url: \"http://127.0.0.1:8000/mcp\", headers: {Authorization: Bearer header-secret-3}}\n\
         ssh:\n  connections:\n    - id: 6f9619ff-8b86-d011-b42d-00c04fc964ff\n      name: lab\n      host: 127.0.0.1\n\
         \x20     user: u\n      auth: {password: ssh-secret-4}\n",
    );
    let (config, _) = dirs.load(&[]).unwrap();
    let debug = format!("{config:?}");
    let yaml = config.redacted_yaml();
    for secret in [
        "sk-inline-secret-1",
        "env-secret-2",
        "header-secret-3",
        "ssh-secret-4",
    ] {
        assert!(!debug.contains(secret), "{secret} in Debug: {debug}");
        assert!(
            !yaml.contains(secret),
            "{secret} in the display form: {yaml}"
        );
    }
    let shown = config.redacted_value();
    assert_eq!(shown["llm"]["api_key"], "***");
    assert_eq!(shown["mcp"]["servers"]["fs"]["env"]["TOKEN"], "***");
    assert_eq!(
        shown["mcp"]["servers"]["web"]["headers"]["Authorization"],
        "***"
    );
    assert_eq!(shown["ssh"]["connections"][0]["auth"]["password"], "***");
    assert_eq!(config.ssh.registry().unwrap().iter().count(), 1);
}

#[test]
fn an_mcp_server_is_replaced_whole_by_a_later_file() {
    let dirs = Dirs::new();
    dirs.user_file("mcp:\n  servers:\n    docs: {command: docs-server, args: [--stdio]}\n    fs: {command: mcp-fs}\n");
    dirs.project_file("mcp:\n  call_timeout_secs: 5\n  servers:\n    docs: {url: \"http://127.0.0.1:7000/mcp\"}\n");
    let (config, _) = dirs.load(&[]).unwrap();
    assert_eq!(
        config.mcp.servers["docs"],
        maestro_tools_mcp::McpServer::Http {
            url: "http://127.0.0.1:7000/mcp".into(),
            headers: BTreeMap::new()
        }
    );
    assert!(config.mcp.servers.contains_key("fs"));
    assert_eq!(
        (
            config.mcp.call_timeout_secs,
            config.mcp.startup_timeout_secs
        ),
        (5, 30)
    );
}

#[test]
fn empty_files_take_part_and_change_nothing() {
    let dirs = Dirs::new();
    let user = dirs.user_file("");
    let project = dirs.project_file("# nothing yet\n");
    let (config, files) = dirs.load(&[]).unwrap();
    assert_eq!(files, vec![user, project]);
    assert_eq!(
        config.redacted_value()["llm"],
        Config::default().redacted_value()["llm"]
    );
}

#[test]
fn scalars_read_after_merging_as_they_read_in_one_file() {
    let dirs = Dirs::new();
    dirs.user_file("web:\n  allow_private: yes\nllm:\n  model: 7\n");
    dirs.project_file("web:\n  timeout_secs: 5\ntools:\n  bash_sandbox: off\n");
    let (config, _) = dirs.load(&[]).unwrap();
    assert_eq!(
        (config.web.allow_private, config.web.timeout_secs),
        (true, 5)
    );
    assert_eq!(config.llm.model.as_deref(), Some("7"));
    assert_eq!(
        config.tools.bash_sandbox,
        maestro_tools::BashSandboxMode::Off
    );
}

#[test]
fn safety_bash_sandbox_is_the_architectures_name_for_the_switch_and_wins() {
    let dirs = Dirs::new();
    dirs.project_file("tools:\n  bash_sandbox: off\nsafety:\n  bash_sandbox: always\n");
    let (config, _) = dirs.load(&[]).unwrap();
    assert_eq!(
        config.tools.bash_sandbox,
        maestro_tools::BashSandboxMode::Always
    );
    let dirs = Dirs::new();
    dirs.project_file("safety:\n  bash_sandbx: always\n");
    let message = dirs.load(&[]).unwrap_err().to_string();
    assert!(message.contains("unknown field `bash_sandbx`"), "{message}");
    assert!(message.contains("bash_sandbox"), "{message}");
}

#[test]
fn model_prices_are_read_and_a_call_is_priced_by_them() {
    let dirs = Dirs::new();
    dirs.project_file(
        "llm:\n  model: some-model\n  models:\n    some-model: {price: {input_per_mtok: 0.5, output_per_mtok: 1.5}}\n\
         \x20   cached: {price: {input_per_mtok: 2, output_per_mtok: 8, cached_input_per_mtok: 0.5}}\n",
    );
    let (config, _) = dirs.load(&[]).unwrap();
    let price = config.llm.price("some-model").unwrap();
    assert_eq!(
        price,
        maestro_config::ModelPrice {
            input_per_mtok: 0.5,
            output_per_mtok: 1.5,
            cached_input_per_mtok: None
        }
    );
    let usage = maestro_protocol::Usage {
        prompt_tokens: 2_000_000,
        completion_tokens: 1_000_000,
        total_tokens: 3_000_000,
        cached_prompt_tokens: 0,
        estimated: false,
    };
    assert_eq!(price.cost_usd(&usage), 2.5);
    let cached = config.llm.price("cached").unwrap();
    assert_eq!(cached.cached_input_per_mtok, Some(0.5));
    // 1.5 M of the 2 M prompt tokens came from the cache: 0.5 M at $2, 1.5 M at $0.5, 1 M
    // answer tokens at $8.
    let usage = maestro_protocol::Usage {
        cached_prompt_tokens: 1_500_000,
        ..usage
    };
    assert_eq!(cached.cost_usd(&usage), 1.0 + 0.75 + 8.0);
    // Without a cached price, cached tokens are input tokens.
    assert_eq!(price.cost_usd(&usage), 2.5);
    assert_eq!(config.llm.price("unpriced"), None);
}

#[test]
fn a_price_that_is_not_a_price_is_refused_with_its_line_and_field() {
    let dirs = Dirs::new();
    dirs.project_file(
        "llm:\n  models:\n    some-model:\n      price:\n        input_per_mtok: 0.5\n        output_per_mtok: -1.5\n",
    );
    assert_eq!(
        problem(dirs.load(&[])),
        Problem {
            origin: Origin::File {
                path: dirs.project.join(".maestro/config.yaml"),
                line: Some(6),
                column: Some(9)
            },
            field: "llm.models.some-model.price.output_per_mtok".into(),
            message: "-1.5 is not a price".into(),
            fix: "give US dollars per million tokens, 0 or more, e.g. 0.5".into(),
        }
    );
    dirs.project_file("llm:\n  models:\n    some-model:\n      price: {input_per_mtok: 0.5}\n");
    let missing = problem(dirs.load(&[]));
    assert_eq!(missing.field, "llm.models.some-model.price");
    assert!(
        missing.message.contains("output_per_mtok"),
        "{}",
        missing.message
    );
}

#[test]
fn cost_caps_are_read_and_a_cap_that_allows_nothing_is_refused_with_its_line_and_field() {
    let dirs = Dirs::new();
    dirs.project_file(
        "engine:\n  max_total_tokens: 200000\n  max_cost_usd: 2.5\n  pieces:\n    review:\n      budget: {max_cost_usd: 0.5}\n",
    );
    let (config, _) = dirs.load(&[]).unwrap();
    assert_eq!(
        config.engine.budget_for("review"),
        maestro_config::BudgetSettings {
            max_total_tokens: Some(200_000),
            max_cost_usd: Some(0.5),
        }
    );
    assert_eq!(config.engine.budget_for("other").max_cost_usd, Some(2.5));

    dirs.project_file("engine:\n  max_cost_usd: -1\n");
    assert_eq!(
        problem(dirs.load(&[])),
        Problem {
            origin: Origin::File {
                path: dirs.project.join(".maestro/config.yaml"),
                line: Some(2),
                column: Some(3)
            },
            field: "engine.max_cost_usd".into(),
            message: "-1 is not a positive amount of US dollars".into(),
            fix: "give US dollars above 0, e.g. 2.5, or remove the field for no cap".into(),
        }
    );
    dirs.project_file("engine:\n  pieces:\n    review:\n      budget: {max_total_tokens: 0}\n");
    let zero = problem(dirs.load(&[]));
    assert_eq!(zero.field, "engine.pieces.review.budget.max_total_tokens");
    dirs.project_file("engine:\n  pieces:\n    review:\n      budget: {max_usd: 1}\n");
    let unknown = problem(dirs.load(&[]));
    assert!(unknown.message.contains("max_usd"), "{}", unknown.message);
}
