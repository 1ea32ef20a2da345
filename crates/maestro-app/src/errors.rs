//! An error and its causes as one line for a person, each cause once.

/// `error: cause: cause…`, leaving out a cause whose text the line already holds (many errors
/// repeat their source in their own message).
pub fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("migrating the store failed: {0}")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("while executing migration 2: table job_comments already exists")]
    struct Inner(#[source] Leaf);

    #[derive(Debug, thiserror::Error)]
    #[error("table job_comments already exists")]
    struct Leaf;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open the store")]
    struct Plain(#[source] Leaf);

    #[test]
    fn each_cause_appears_once() {
        assert_eq!(
            error_text(&Outer(Inner(Leaf))),
            "migrating the store failed: while executing migration 2: table job_comments already \
             exists"
        );
        assert_eq!(
            error_text(&Plain(Leaf)),
            "cannot open the store: table job_comments already exists"
        );
    }
}
