//! Shared helpers for the sandbox's integration tests: a temporary workspace and a registry
//! call that goes through the same entry point as the engine, so commands reach the sandbox
//! the way an agent's do (through `Bash`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use maestro_tools::{
    BashSandboxMode, CancellationToken, Registry, RunScratch, ToolContext, ToolOutput, ToolsConfig,
    prepare_workspace,
};

pub(crate) struct Bench {
    pub dir: tempfile::TempDir,
    pub registry: Registry,
    pub ctx: ToolContext,
}

impl Bench {
    pub(crate) fn new(mode: BashSandboxMode) -> Bench {
        Bench::with_config(ToolsConfig {
            bash_sandbox: mode,
            ..ToolsConfig::default()
        })
    }

    pub(crate) fn with_config(config: ToolsConfig) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        prepare_workspace(dir.path()).unwrap();
        let ctx = ToolContext {
            workspace: dir.path().to_path_buf(),
            workspace_kind: maestro_tools::WorkspaceKind::Job,
            edit: false,
            allowed_commands: None,
            allowed_ssh_connections: None,
            cancel: CancellationToken::new(),
            scratch: Arc::new(Mutex::new(RunScratch::default())),
        };
        Bench {
            dir,
            registry: Registry::builtin(config),
            ctx,
        }
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub(crate) fn editing(mut self) -> Bench {
        self.ctx.edit = true;
        self
    }

    pub(crate) fn allow(mut self, commands: &[&str]) -> Bench {
        self.ctx.allowed_commands = Some(commands.iter().map(|s| s.to_string()).collect());
        self
    }

    pub(crate) async fn call(&self, tool: &str, input: serde_json::Value) -> ToolOutput {
        self.registry
            .execute(&self.ctx, tool, &input.to_string())
            .await
    }

    pub(crate) async fn bash(&self, command: &str) -> ToolOutput {
        self.call(
            "Bash",
            serde_json::json!({ "command": command, "timeout": 20_000 }),
        )
        .await
    }
}

/// Processes on the host whose command line contains `marker`.
pub(crate) fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker)
                && !cmdline.contains("cargo")
                && !cmdline.contains("nextest")
            {
                found.push(cmdline);
            }
        }
    }
    found
}
