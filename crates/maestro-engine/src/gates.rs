//! TAKT workflows' command quality gates (`quality_gates` entries with `type: command`): once
//! an agent movement has ended on a transition, each gate's shell command runs in the sandbox,
//! in file order. The first that fails sends the movement round again, its failure the previous
//! response, as TAKT v0.60 does; the model's choice of rule is set aside. No model call is made.
//!
//! Each outcome is recorded (`quality_gate_checked`), so a resumed run or `maestro replay`
//! takes it from the record and does not run the command again.

use maestro_piece::{CommandGate, Movement};

use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::RunEvent;
use crate::recorded::Divergence;

/// How much of a failing command's output goes back to the model, as in TAKT.
const FEEDBACK_CHARS: usize = 1_000;

/// Runs `movement`'s command gates; `Some(feedback)` names the first that failed.
pub(crate) async fn check(
    run: &RunCtx,
    movement: &Movement,
) -> Result<Option<String>, EngineError> {
    for gate in &movement.command_gates {
        let recorded = run
            .journal
            .recorded()
            .and_then(|r| r.quality_gate(&movement.name));
        let (passed, output) = match recorded {
            Some(outcome) => outcome,
            None if run.verifying() => {
                return Err(EngineError::Diverged(Divergence {
                    seq: None,
                    expected: None,
                    got: format!(
                        "the quality gate `{}` of `{}`, whose outcome the record does not hold",
                        gate.name, movement.name
                    ),
                }));
            }
            None => run_gate(run, gate).await,
        };
        run.emit(RunEvent::QualityGateChecked {
            movement: movement.name.clone(),
            gate: gate.name.clone(),
            command: gate.command.clone(),
            passed,
            output: output.clone(),
        })
        .await?;
        if !passed {
            return Ok(Some(feedback(gate, &output)));
        }
    }
    Ok(None)
}

/// Runs one gate through the sandbox's `Bash`: any program, the workspace writable as for an
/// editing movement (a gate is the workflow author's own check, like a piece's
/// `required_permission_mode: full`).
async fn run_gate(run: &RunCtx, gate: &CommandGate) -> (bool, String) {
    let ctx = run.engine_tool_context(true);
    let line = if gate.cwd == "." {
        gate.command.clone()
    } else {
        format!("cd {} && {}", shell_quote(&gate.cwd), gate.command)
    };
    let arguments = serde_json::json!({
        "command": line,
        "timeout": gate.timeout_ms,
        "description": format!("quality gate `{}`", gate.name),
    })
    .to_string();
    let out = run.tools.execute(&ctx, "Bash", &arguments).await;
    (out.ok, tail(&run.redact(&out.output), FEEDBACK_CHARS))
}

/// The text the movement's next visit gets as its previous response.
fn feedback(gate: &CommandGate, output: &str) -> String {
    format!(
        "Quality gate failed: {}\nType: command\nCommand: {}\nCwd: {}\n\nOutput:\n{}",
        gate.name, gate.command, gate.cwd, output
    )
}

/// The last `max` characters of `text`, marked when cut.
fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let kept: String = text.chars().skip(count - max).collect();
    format!("[{} earlier characters left out]\n{kept}", count - max)
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_output_keeps_its_end_and_says_how_much_was_cut() {
        let text = format!("{}END", "x".repeat(2_000));
        let kept = tail(&text, 10);
        assert!(kept.ends_with("xxxxxxxEND"), "{kept}");
        assert!(
            kept.starts_with("[1993 earlier characters left out]"),
            "{kept}"
        );
        assert_eq!(tail("short", 10), "short");
    }

    #[test]
    fn a_directory_with_a_quote_stays_one_shell_word() {
        assert_eq!(shell_quote("a b'c"), r"'a b'\''c'");
    }
}
