//! Repeating cycles of movements (A→B→A→B…, or longer) in a run's history: the maestro
//! dialect's loop detection beyond consecutive revisits of one movement. Pure, so each rule is
//! testable alone.

/// A cycle of movements the run keeps going round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cycle {
    /// One round, in order, starting with the movement the repetition started with.
    pub movements: Vec<String>,
    /// Rounds entered so far, the one the due movement starts or continues included.
    pub rounds: u32,
}

impl Cycle {
    /// The cycle as a reader sees it: `review → fix → review`.
    pub(crate) fn label(&self) -> String {
        let mut names: Vec<&str> = self.movements.iter().map(String::as_str).collect();
        names.extend(self.movements.first().map(String::as_str));
        names.join(" → ")
    }
}

/// The cycle that running `next` after `history` (top-level movements, in order) continues,
/// when it has started a second round. Cycles are 2 to `max_len` movements long (one movement
/// in a row is the consecutive-revisit rule's) and not themselves a repetition of a shorter
/// one. Where several fit, the one with the most rounds wins, then the shortest.
pub(crate) fn repeating_cycle(history: &[String], next: &str, max_len: usize) -> Option<Cycle> {
    let seq: Vec<&str> = history
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(next))
        .collect();
    let n = seq.len();
    let mut best: Option<Cycle> = None;
    for len in 2..=max_len.min(n.saturating_sub(1)) {
        // The longest tail of `seq` that repeats with period `len`.
        let repeated = (0..n - len)
            .take_while(|k| seq[n - 1 - k] == seq[n - 1 - k - len])
            .count();
        if repeated == 0 {
            continue;
        }
        let tail = len + repeated;
        let round: Vec<&str> = seq[n - tail..n - tail + len].to_vec();
        if (1..len).any(|d| len % d == 0 && (d..len).all(|i| round[i] == round[i - d])) {
            continue;
        }
        let rounds = tail.div_ceil(len) as u32;
        if best.as_ref().is_none_or(|b| rounds > b.rounds) {
            best = Some(Cycle {
                movements: round.iter().map(|m| m.to_string()).collect(),
                rounds,
            });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn cycle(history: &str, next: &str, max_len: usize) -> Option<(String, u32)> {
        let history: Vec<String> = history.split_whitespace().map(str::to_string).collect();
        repeating_cycle(&history, next, max_len).map(|c| (c.label(), c.rounds))
    }

    #[test]
    fn a_two_movement_cycle_counts_the_rounds_entered() {
        assert_eq!(cycle("a", "b", 2), None);
        assert_eq!(cycle("a b", "a", 2), Some(("a → b → a".into(), 2)));
        assert_eq!(cycle("a b a", "b", 2), Some(("a → b → a".into(), 2)));
        assert_eq!(cycle("a b a b", "a", 2), Some(("a → b → a".into(), 3)));
        assert_eq!(
            cycle("a b a b a b a b", "a", 2),
            Some(("a → b → a".into(), 5))
        );
    }

    #[test]
    fn a_review_loop_after_a_plan_starts_at_the_review() {
        assert_eq!(
            cycle("plan implement review fix review fix", "review", 4),
            Some(("review → fix → review".into(), 3))
        );
        assert_eq!(cycle("plan implement review", "fix", 4), None);
    }

    #[test]
    fn longer_cycles_are_found_up_to_the_number_of_movements() {
        assert_eq!(
            cycle("a b c a b c", "a", 3),
            Some(("a → b → c → a".into(), 3))
        );
        assert_eq!(cycle("a b c a b c", "a", 2), None);
        assert_eq!(
            cycle("x a b a c a b a c", "a", 4),
            Some(("a → b → a → c → a".into(), 3))
        );
    }

    #[test]
    fn one_movement_in_a_row_is_not_a_cycle() {
        assert_eq!(cycle("a a a", "a", 3), None);
        assert_eq!(cycle("b a a a", "a", 3), None);
    }
}
