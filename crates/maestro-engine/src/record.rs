//! The run record on disk: `<runs dir>/<run-id>/` with `events.jsonl`, `reports/`, `logs/` and,
//! unless another workspace is given, the job workspace layout (`input/`, `output/`, `logs/`,
//! `subtasks/`, `skills/`).

use std::path::{Path, PathBuf};

use maestro_tools::WorkspaceKind;

use crate::error::{EngineError, RecordError};

/// Where one run keeps its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's id, also the name of its directory (see [`new_run_id`]).
    pub run_id: String,
    /// `<runs dir>/<run-id>`.
    pub dir: PathBuf,
    /// The root the tools work in: the run directory, or `--workspace`.
    pub workspace: PathBuf,
    /// [`WorkspaceKind::Named`] for a `--workspace` (an editing movement may write anywhere in
    /// it), [`WorkspaceKind::Job`] for the run directory (only under `tools.writable_dirs`).
    pub workspace_kind: WorkspaceKind,
}

impl RunRecord {
    /// Creates a fresh run directory under `runs_dir`. With `workspace`, the tools work there
    /// (created if missing, its contents left alone); otherwise in the run directory, laid out as
    /// a job workspace.
    pub fn create(runs_dir: &Path, workspace: Option<&Path>) -> Result<RunRecord, EngineError> {
        let io = |what: &'static str, path: &Path, e: std::io::Error| {
            EngineError::Record(RecordError::Create {
                what,
                path: path.to_path_buf(),
                source: e,
            })
        };
        std::fs::create_dir_all(runs_dir).map_err(|e| io("the runs directory", runs_dir, e))?;
        let (run_id, dir) = loop {
            let id = new_run_id();
            let dir = runs_dir.join(&id);
            match std::fs::create_dir(&dir) {
                Ok(()) => break (id, dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io("the run directory", &dir, e)),
            }
        };
        RunRecord::lay_out(run_id, dir, workspace)
    }

    /// Creates `<runs_dir>/<run_id>` or opens it again (a run resumed on this machine, or a job
    /// whose run id is its job id), with the same layout as [`RunRecord::create`].
    pub fn open(
        runs_dir: &Path,
        run_id: &str,
        workspace: Option<&Path>,
    ) -> Result<RunRecord, EngineError> {
        let io = |what: &'static str, path: &Path, e: std::io::Error| {
            EngineError::Record(RecordError::Create {
                what,
                path: path.to_path_buf(),
                source: e,
            })
        };
        if run_id.is_empty() || run_id.contains(['/', '\\', '\0']) || run_id.starts_with('.') {
            return Err(io(
                "the run directory",
                &runs_dir.join(run_id),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a run id"),
            ));
        }
        let dir = runs_dir.join(run_id);
        std::fs::create_dir_all(&dir).map_err(|e| io("the run directory", &dir, e))?;
        RunRecord::lay_out(run_id.to_string(), dir, workspace)
    }

    fn lay_out(
        run_id: String,
        dir: PathBuf,
        workspace: Option<&Path>,
    ) -> Result<RunRecord, EngineError> {
        let io = |what: &'static str, path: &Path, e: std::io::Error| {
            EngineError::Record(RecordError::Create {
                what,
                path: path.to_path_buf(),
                source: e,
            })
        };
        for sub in ["reports", "logs"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(|e| io("", &path, e))?;
        }
        let (workspace, workspace_kind) = match workspace {
            Some(ws) => {
                std::fs::create_dir_all(ws).map_err(|e| io("the workspace", ws, e))?;
                let ws = ws.canonicalize().map_err(|e| io("the workspace", ws, e))?;
                (ws, WorkspaceKind::Named)
            }
            None => {
                maestro_tools::prepare_workspace(&dir)
                    .map_err(|e| io("the workspace in", &dir, e))?;
                let ws = dir
                    .canonicalize()
                    .map_err(|e| io("the run directory", &dir, e))?;
                (ws, WorkspaceKind::Job)
            }
        };
        let dir = dir
            .canonicalize()
            .map_err(|e| io("the run directory", &dir, e))?;
        Ok(RunRecord {
            run_id,
            dir,
            workspace,
            workspace_kind,
        })
    }

    /// `<run dir>/events.jsonl`, the run's events.
    pub fn events_path(&self) -> PathBuf {
        self.dir.join("events.jsonl")
    }

    /// `<run dir>/reports/`, where `write_report` puts the movements' reports.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.join("reports")
    }

    /// `<run dir>/logs/`, the prompt logs and visit transcripts.
    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }
}

/// A new run id: a UUIDv7, so ids sort by creation time and a job's id can be its run's id.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_run_directory_has_the_job_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let record = RunRecord::create(&tmp.path().join("runs"), None).unwrap();
        for sub in ["reports", "logs", "input", "output", "subtasks", "skills"] {
            assert!(record.dir.join(sub).is_dir(), "{sub}");
        }
        assert_eq!(record.workspace, record.dir);
        assert_eq!(record.workspace_kind, WorkspaceKind::Job);
        let id = uuid::Uuid::parse_str(&record.run_id).unwrap();
        assert_eq!(id.get_version_num(), 7, "{}", record.run_id);
        let again = RunRecord::open(&tmp.path().join("runs"), &record.run_id, None).unwrap();
        assert_eq!(again, record);
        assert!(RunRecord::open(&tmp.path().join("runs"), "../x", None).is_err());
        let other =
            RunRecord::create(&tmp.path().join("runs"), Some(&tmp.path().join("ws"))).unwrap();
        assert_ne!(other.run_id, record.run_id);
        assert!(!other.dir.join("input").exists());
        assert!(other.workspace.ends_with("ws"));
        assert_eq!(other.workspace_kind, WorkspaceKind::Named);
    }
}
