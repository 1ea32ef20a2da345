//! The shapes of names a maestro piece may use: piece names, MCP server slugs, SSH connection ids
//! and `allowed_tools` entries. Plain character checks rather than regular expressions: compiling
//! a regex brings a large part of the regex engine's code into every `maestro run` (see the
//! footprint in docs/benchmarks.md), and these shapes need none of it.

/// `[a-z0-9-]+`
pub(crate) fn is_piece_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `[a-z0-9_-]{1,64}`
pub(crate) fn is_mcp_slug(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// `[0-9a-f-]{8,}`
pub(crate) fn is_ssh_id(text: &str) -> bool {
    text.len() >= 8
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-')
}

/// A tool name (`[A-Za-z0-9_-]+`), `mcp__*`, or `mcp__<server slug>__*`.
pub(crate) fn is_tool_name(text: &str) -> bool {
    let plain = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    text == "mcp__*"
        || plain(text)
        || text
            .strip_prefix("mcp__")
            .and_then(|rest| rest.strip_suffix("__*"))
            .is_some_and(is_mcp_slug)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    /// The patterns these checks replaced, which stay their specification.
    fn regex(pattern: &str) -> regex::Regex {
        regex::Regex::new(pattern).unwrap()
    }

    proptest! {
        #[test]
        fn checks_agree_with_the_patterns(text in "(mcp__)?[a-zA-Z0-9_*ü -]{0,70}(__\\*)?") {
            prop_assert_eq!(is_piece_name(&text), regex(r"^[a-z0-9-]+$").is_match(&text));
            prop_assert_eq!(is_mcp_slug(&text), regex(r"^[a-z0-9_-]{1,64}$").is_match(&text));
            prop_assert_eq!(is_ssh_id(&text), regex(r"^[0-9a-f-]{8,}$").is_match(&text));
            prop_assert_eq!(
                is_tool_name(&text),
                regex(r"^(?:[A-Za-z0-9_-]+|mcp__\*|mcp__[a-z0-9_-]{1,64}__\*)$").is_match(&text)
            );
        }
    }

    #[test]
    fn tool_patterns() {
        assert!(is_tool_name("mcp__*"));
        assert!(is_tool_name("mcp__git__*"));
        assert!(is_tool_name("mcp__git__log"));
        assert!(!is_tool_name("mcp____*"));
        assert!(!is_tool_name("Re*d"));
        assert!(!is_tool_name(&format!("mcp__{}__*", "a".repeat(65))));
    }
}
