//! TAKT's `{review_scope}`: the files the task changed in the workspace, listed for reviewers.
//! As in TAKT v0.60 it is the union of what was committed on the branch since it left its base
//! (the merge base with `origin/HEAD`, `main` or `master`, the first that exists and is not the
//! branch itself), uncommitted changes and untracked files (ignored ones left out). It is
//! computed only for a movement whose text uses it, by `git` in the sandbox, reading only.

use maestro_piece::Movement;
use std::collections::BTreeSet;

use crate::ctx::RunCtx;

/// Past this many files the list is cut, with the rest counted, as TAKT does.
const MAX_FILES: usize = 200;

/// The script `Bash` runs: a marker line, then one changed path per line.
const SCRIPT: &str = r#"g() { git -c safe.directory='*' -c core.fsmonitor=false "$@"; }
if ! g rev-parse --is-inside-work-tree >/dev/null 2>&1; then echo '@@not-git'; exit 0; fi
head=$(g rev-parse -q --verify HEAD 2>/dev/null)
base=''
if [ -n "$head" ]; then
  for ref in refs/remotes/origin/HEAD refs/heads/main refs/heads/master; do
    if g rev-parse -q --verify "$ref" >/dev/null 2>&1; then
      b=$(g merge-base HEAD "$ref" 2>/dev/null)
      if [ -n "$b" ] && [ "$b" != "$head" ]; then base=$b; break; fi
    fi
  done
fi
echo "@@base $base"
if [ -n "$base" ]; then g diff --name-only "$base" HEAD; fi
if [ -n "$head" ]; then g diff --name-only HEAD; else g diff --name-only --cached; fi
g ls-files --others --exclude-standard"#;

/// True when one of the movement's texts uses `{review_scope}`.
pub(crate) fn wanted(movement: &Movement) -> bool {
    let uses = |text: &str| text.contains("{review_scope}");
    movement.instruction.iter().any(|f| uses(&f.text))
        || movement.policies.iter().any(|f| uses(&f.text))
        || movement.knowledge.iter().any(|f| uses(&f.text))
        || movement.persona.iter().any(|f| uses(&f.text))
}

/// The text `{review_scope}` stands for in this run's workspace now.
pub(crate) async fn review_scope(run: &RunCtx) -> String {
    let ctx = run.engine_tool_context(false);
    let arguments = serde_json::json!({
        "command": SCRIPT,
        "description": "list the files this task changed ({review_scope})",
    })
    .to_string();
    let out = run.tools.execute(&ctx, "Bash", &arguments).await;
    if !out.ok {
        return format!(
            "The files changed by this task could not be listed: {}",
            out.output.trim()
        );
    }
    render(&out.output)
}

/// Reads the script's output into the text the model gets.
fn render(output: &str) -> String {
    let mut lines = output.lines();
    let Some(first) = lines.next() else {
        return "The files changed by this task could not be listed: git printed nothing."
            .to_string();
    };
    if first.trim() == "@@not-git" {
        return "The working directory is not a Git repository, so the files changed by this task cannot be listed.".to_string();
    }
    let base = first.strip_prefix("@@base").map(str::trim).unwrap_or("");
    let files: BTreeSet<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
    if files.is_empty() {
        return "No change was detected in the working directory: nothing was committed since the branch's base, and nothing is modified or untracked.".to_string();
    }
    let since = if base.is_empty() {
        "uncommitted and untracked files; no base commit to compare committed changes with"
            .to_string()
    } else {
        format!(
            "committed since {}, uncommitted and untracked",
            &base[..base.len().min(12)]
        )
    };
    let mut text = format!("Files changed by this task ({since}):");
    for file in files.iter().take(MAX_FILES) {
        text.push_str("\n- ");
        text.push_str(file);
    }
    if files.len() > MAX_FILES {
        text.push_str(&format!("\n… and {} more", files.len() - MAX_FILES));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_becomes_a_sorted_list_without_repeats_cut_at_two_hundred() {
        assert_eq!(
            render("@@base 0123456789abcdef\nsrc/b.rs\nsrc/a.rs\nsrc/b.rs\n"),
            "Files changed by this task (committed since 0123456789ab, uncommitted and untracked):\n- src/a.rs\n- src/b.rs"
        );
        let many: String = (0..205).map(|i| format!("f{i:03}\n")).collect();
        let text = render(&format!("@@base \n{many}"));
        assert!(text.ends_with("- f199\n… and 5 more"), "{text}");
        assert!(text.contains("no base commit"), "{text}");
        assert!(render("@@not-git\n").contains("not a Git repository"));
        assert!(render("@@base \n").starts_with("No change was detected"));
    }
}
