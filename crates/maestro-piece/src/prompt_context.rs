//! [`PromptContext`], what the engine knows at the start of a movement, and [`cut`], how carried
//! text is shortened. A leaf: prompt assembly and template filling both read it.

use std::collections::BTreeMap;

/// What the engine knows at the start of a movement, beyond the piece itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptContext {
    /// The run's task text (`{task}`).
    pub task: String,
    /// 1-based number of this movement in the run.
    pub iteration: u32,
    /// The piece's cap on movements per run (`{max_movements}`).
    pub max_movements: u32,
    /// 1-based visit number of this movement.
    pub movement_iteration: u32,
    /// The previous movement's answer (`{previous_response}`); `None` in the first movement.
    pub previous_response: Option<String>,
    /// The last `transition.summary`.
    pub feedback: Option<String>,
    /// The lessons earlier movements passed on with their transitions, oldest first.
    pub lessons: Vec<String>,
    /// The run's report directory, as the model should refer to it.
    pub report_dir: String,
    /// Reports written so far, by file name (for `{report:<file>}`).
    pub reports: BTreeMap<String, String>,
    /// Every answer a person gave to the run's questions so far, oldest first (`{user_inputs}`).
    pub user_inputs: Vec<String>,
    /// Loop-monitor cycle count (for `{cycle_count}`).
    pub cycle_count: u32,
    /// Set at the revisit threshold: "you have returned here N times …".
    pub loop_warning: Option<String>,
    /// Graph dialect: the rendered edge prompt that led here.
    pub edge_prompt: Option<String>,
    /// Carried text (previous answer, knowledge, reports) is cut at this many characters,
    /// with a note saying where the full copy is. 0 means no limit.
    pub max_carried_chars: usize,
    /// TAKT's `{review_scope}`: the files the task changed in the workspace, as text. `None`
    /// (where no run computes it, as in `maestro prompt`) leaves the variable as written.
    pub review_scope: Option<String>,
}

impl Default for PromptContext {
    fn default() -> Self {
        PromptContext {
            task: String::new(),
            iteration: 1,
            max_movements: 1,
            movement_iteration: 1,
            previous_response: None,
            feedback: None,
            lessons: Vec::new(),
            report_dir: "reports".to_owned(),
            reports: BTreeMap::new(),
            user_inputs: Vec::new(),
            cycle_count: 0,
            loop_warning: None,
            edge_prompt: None,
            max_carried_chars: 40_000,
            review_scope: None,
        }
    }
}

/// The first `max` characters of `text`, with a note when cut; `max == 0` keeps all.
pub(crate) fn cut(text: &str, max: usize, full_copy: &str) -> String {
    if max == 0 {
        return text.to_owned();
    }
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((at, _)) => format!(
            "{}\n[… cut after {max} of {} characters; {full_copy}]",
            &text[..at],
            text.chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_counts_characters_and_says_where_the_rest_is() {
        assert_eq!(cut("abcdef", 0, "x"), "abcdef");
        assert_eq!(cut("abc", 3, "x"), "abc");
        assert_eq!(
            cut("äbcdef", 2, "see y"),
            "äb\n[… cut after 2 of 6 characters; see y]"
        );
    }
}
