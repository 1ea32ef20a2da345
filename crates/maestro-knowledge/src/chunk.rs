//! Cutting sections into chunks: a chunk never spans two sections (so it has one location), is
//! at most [`ChunkOptions::max_chars`] long, is cut between paragraphs where it can, then
//! between words, and starts with the last [`ChunkOptions::overlap_chars`] of the chunk before
//! it in the same section, so that a sentence cut in two is still found whole.

use crate::extract::Section;

/// How long chunks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// The longest chunk, in characters (default 1200).
    pub max_chars: usize,
    /// How much of a chunk's end the next chunk of its section repeats, in characters
    /// (default 200; less than half of `max_chars`).
    pub overlap_chars: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            max_chars: 1200,
            overlap_chars: 200,
        }
    }
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Its position in the document, from 0.
    pub ordinal: usize,
    /// Its section's location (heading trail or page).
    pub location: String,
    /// Its text.
    pub text: String,
}

/// The chunks of `sections`, in order.
pub fn chunk(sections: &[Section], options: ChunkOptions) -> Vec<Chunk> {
    let max = options.max_chars.max(16);
    let overlap = options.overlap_chars.min(max / 2);
    // A chunk after the first is the overlap, a space and a unit.
    let unit_limit = max - overlap - 1;
    let mut chunks = Vec::new();
    for section in sections {
        let mut current = String::new();
        for unit in units(&section.text, unit_limit) {
            if current.is_empty() {
                current = unit;
                continue;
            }
            let joined = char_len(&current) + 2 + char_len(&unit);
            if joined <= max {
                current.push_str("\n\n");
                current.push_str(&unit);
                continue;
            }
            let tail = tail(&current, overlap).to_string();
            push(&mut chunks, &section.location, std::mem::take(&mut current));
            current = if tail.is_empty() {
                unit
            } else {
                format!("{tail} {unit}")
            };
        }
        push(&mut chunks, &section.location, current);
    }
    chunks
}

fn push(chunks: &mut Vec<Chunk>, location: &str, text: String) {
    if !text.trim().is_empty() {
        chunks.push(Chunk {
            ordinal: chunks.len(),
            location: location.to_string(),
            text,
        });
    }
}

fn char_len(text: &str) -> usize {
    text.chars().count()
}

/// Paragraphs of `text`, each cut between words (or, for a word longer than `limit`, inside
/// it) into pieces of at most `limit` characters.
fn units(text: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    for paragraph in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if char_len(paragraph) <= limit {
            out.push(paragraph.to_string());
            continue;
        }
        let mut piece = String::new();
        let mut piece_len = 0;
        for word in paragraph.split_whitespace() {
            let word_len = char_len(word);
            if piece_len > 0 && piece_len + 1 + word_len > limit {
                out.push(std::mem::take(&mut piece));
                piece_len = 0;
            }
            if word_len > limit {
                let chars: Vec<char> = word.chars().collect();
                for part in chars.chunks(limit) {
                    out.push(part.iter().collect());
                }
                continue;
            }
            if piece_len > 0 {
                piece.push(' ');
                piece_len += 1;
            }
            piece.push_str(word);
            piece_len += word_len;
        }
        if piece_len > 0 {
            out.push(piece);
        }
    }
    out
}

/// The last `n` characters of `text`, starting at a word.
fn tail(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    let total = char_len(text);
    if total <= n {
        return text.trim();
    }
    let start = text
        .char_indices()
        .nth(total - n)
        .map_or(text.len(), |(i, _)| i);
    let rest = &text[start..];
    // Start after the first whitespace, unless the tail is one word.
    match rest.find(char::is_whitespace) {
        Some(i) if !text[..start].ends_with(char::is_whitespace) => rest[i..].trim(),
        _ => rest.trim(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;

    fn section(location: &str, text: &str) -> Section {
        Section {
            location: location.into(),
            text: text.into(),
        }
    }

    #[test]
    fn short_sections_are_one_chunk_each_with_their_location() {
        let chunks = chunk(
            &[section("A", "alpha"), section("A > B", "beta")],
            ChunkOptions::default(),
        );
        assert_eq!(
            chunks,
            [
                Chunk {
                    ordinal: 0,
                    location: "A".into(),
                    text: "alpha".into()
                },
                Chunk {
                    ordinal: 1,
                    location: "A > B".into(),
                    text: "beta".into()
                },
            ]
        );
    }

    #[test]
    fn long_sections_are_cut_between_paragraphs_with_overlap() {
        let paragraphs: Vec<String> = (0..6)
            .map(|p| {
                (0..12)
                    .map(|w| format!("p{p}w{w}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let text = paragraphs.join("\n\n");
        let options = ChunkOptions {
            max_chars: 140,
            overlap_chars: 30,
        };
        let chunks = chunk(&[section("S", &text)], options);
        assert!(chunks.len() >= 3, "{chunks:#?}");
        for pair in chunks.windows(2) {
            assert!(pair[0].text.chars().count() <= 140);
            // The next chunk starts with words the previous one ended with.
            let first_word = pair[1].text.split_whitespace().next().unwrap();
            assert!(pair[0].text.contains(first_word), "{pair:#?}");
        }
        for p in &paragraphs {
            assert!(chunks.iter().any(|c| c.text.contains(p.as_str())), "{p}");
        }
    }

    proptest! {
        /// Every word of the section is in some chunk, and no chunk is too long.
        #[test]
        fn every_word_is_kept_and_chunks_stay_short(
            words in proptest::collection::vec("[a-zé]{1,30}", 1..400),
            max in 80usize..400,
            overlap in 0usize..100,
        ) {
            let text = words.join(" ");
            let options = ChunkOptions { max_chars: max, overlap_chars: overlap };
            let chunks = chunk(&[section("", &text)], options);
            for c in &chunks {
                prop_assert!(c.text.chars().count() <= max, "{} > {max}", c.text.chars().count());
            }
            let all: String = chunks.iter().map(|c| c.text.as_str()).collect::<Vec<_>>().join(" ");
            for w in &words {
                prop_assert!(all.contains(w.as_str()));
            }
        }
    }
}
