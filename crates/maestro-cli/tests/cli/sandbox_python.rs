//! `maestro sandbox setup`: the sandbox's Python environment is built from the built-in
//! requirements with pip from the package index, survives a setup killed half-way, and is the
//! `python3` a sandboxed `Bash` command runs: it imports pandas and writes a matplotlib chart into
//! `output/`, while installing packages stays refused.

use std::path::Path;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::{Value, json};

fn maestro(project: &Path) -> Command {
    let mut cmd = Command::cargo_bin("maestro").unwrap();
    cmd.current_dir(project).env("HOME", project);
    cmd
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn bash(project: &Path, command: &str) -> Value {
    let out = maestro(project)
        .args(["tools", "call", "Bash", "--workspace", "ws", "--edit"])
        .args(["--allowed-commands", "*", "--input"])
        .arg(json!({ "command": command }).to_string())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[cfg_attr(
    no_python_venv,
    ignore = "needs Debian's python3 with venv (scripts/prerequisites.sh)"
)]
fn setup_builds_the_environment_bash_runs_and_installs_stay_refused() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    std::fs::create_dir_all(project.join(".maestro")).unwrap();
    std::fs::create_dir_all(project.join("ws/input")).unwrap();

    // Before any setup, sandboxed commands get the system's interpreter.
    let status = json_of(
        &maestro(project)
            .args(["sandbox", "status", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(status["python"], "system", "{status}");
    let before = bash(project, "command -v python3");
    assert_eq!(before["ok"], true, "{before}");
    let system_python = before["output"].as_str().unwrap().trim().to_string();
    assert!(system_python.starts_with("/usr/"), "{system_python}");

    // A setup killed half-way (after the virtual environment exists, during pip) leaves no
    // environment in use, and the next setup builds one from scratch.
    let mut killed = std::process::Command::new(assert_cmd::cargo::cargo_bin("maestro"))
        .args(["sandbox", "setup"])
        .current_dir(project)
        .env("HOME", project)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let envs = project.join(".maestro/python/envs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir(&envs).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().join("bin/python3").exists())
    }) {
        assert!(
            Instant::now() < deadline,
            "setup never made its environment"
        );
        assert!(killed.try_wait().unwrap().is_none(), "setup ended too soon");
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    let status = json_of(
        &maestro(project)
            .args(["sandbox", "status", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(
        status["python"], "system",
        "half-built env in use: {status}"
    );
    assert_eq!(
        bash(project, "command -v python3")["output"]
            .as_str()
            .unwrap()
            .trim(),
        system_python
    );

    let built = json_of(
        &maestro(project)
            .args(["sandbox", "setup", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(built["built"], true, "{built}");
    assert_eq!(built["requirements_source"], "built-in");
    let packages: Vec<String> = built["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_lowercase())
        .collect();
    for name in [
        "pandas==",
        "numpy==",
        "matplotlib==",
        "openpyxl==",
        "python-docx==",
        "pypdf==",
    ] {
        assert!(
            packages.iter().any(|p| p.starts_with(name)),
            "{name} missing from {packages:?}"
        );
    }
    let env_python = built["python"].as_str().unwrap().to_string();

    // The same requirements again: nothing to do.
    let again = json_of(
        &maestro(project)
            .args(["sandbox", "setup", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(again["built"], false, "{again}");
    assert_eq!(again["path"], built["path"]);

    // Bash's python3 is now the environment's: pandas imports and matplotlib writes a chart.
    std::fs::write(
        project.join("ws/input/chart.py"),
        "import pandas as pd\nimport matplotlib.pyplot as plt\n\
         df = pd.DataFrame({'x': [1, 2, 3], 'y': [2, 4, 8]})\n\
         df.plot(x='x', y='y')\nplt.savefig('output/chart.png')\n\
         print('rows', len(df), 'sum', int(df['y'].sum()))\n",
    )
    .unwrap();
    let ran = bash(project, "command -v python3 && python3 input/chart.py");
    assert_eq!(ran["ok"], true, "{ran}");
    let output = ran["output"].as_str().unwrap();
    assert!(output.starts_with(&env_python), "{output}");
    assert!(output.contains("rows 3 sum 14"), "{output}");
    let chart = std::fs::read(project.join("ws/output/chart.png")).unwrap();
    assert!(chart.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(chart.len() > 1000, "an empty chart: {} bytes", chart.len());

    // Installing stays refused: on the command line, with a message naming the setting ...
    let refused = bash(project, "pip install requests");
    assert_eq!(refused["ok"], false);
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("safety.python_requirements"), "{error}");
    assert!(error.contains("maestro sandbox setup"), "{error}");
    // ... and from inside a program: no network, and the environment is read-only.
    std::fs::write(
        project.join("ws/input/sneak.py"),
        "import subprocess, sys\n\
         r = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-input', 'requests'],\n\
                            capture_output=True, text=True)\n\
         print('pip exit', r.returncode)\n",
    )
    .unwrap();
    let sneak = bash(
        project,
        "python3 input/sneak.py; python3 -c 'import requests'",
    );
    assert_eq!(sneak["ok"], false, "{sneak}");
    let output = sneak["error"].as_str().unwrap();
    assert!(output.contains("pip exit 1"), "{sneak}");
    assert!(output.contains("No module named 'requests'"), "{sneak}");
}

#[test]
fn a_missing_requirements_file_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
    std::fs::write(
        dir.path().join(".maestro/config.yaml"),
        "safety:\n  python_requirements: reqs/missing.txt\n",
    )
    .unwrap();
    let out = maestro(dir.path())
        .args(["sandbox", "setup"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = dir.path().join("reqs/missing.txt");
    assert!(stderr.contains(&expected.display().to_string()), "{stderr}");
    assert!(stderr.contains("safety.python_requirements"), "{stderr}");
    assert!(!dir.path().join(".maestro/python/current").exists());
}
