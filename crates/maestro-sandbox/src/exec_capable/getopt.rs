//! Reads a program's arguments the way GNU `getopt_long` would, so an option hidden in a short
//! cluster (`-iS"..."`), an abbreviated long option (`--compress-prog=sh`) or an option placed
//! after the operands is seen for what it is.

use super::super::command_line::Word;

/// What a program's option parser accepts, as far as the checks need to know.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    /// Short options that take a value, attached (`-fFILE`) or as the next word (`-f FILE`).
    pub short_valued: &'static str,
    /// Short options whose value can only be attached (`-i.bak`, `-iPLACEHOLDER`): the rest of
    /// the cluster is their value.
    pub short_optional: &'static str,
    /// Long options that take a value, as `--name=value` or `--name value`.
    pub long_valued: &'static [&'static str],
    /// Options end at the first operand (getopt's leading `+`), as wrappers do: the words after
    /// it belong to the command they start.
    pub stop_at_operand: bool,
}

/// One argument as the program sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg<'a> {
    /// `-x`, with its value when `x` takes one.
    Short(char, Option<&'a str>),
    /// `--name` as written (possibly abbreviated), with its value when it takes one.
    Long(&'a str, Option<&'a str>),
    /// An operand, by its index in the argument list.
    Operand(usize),
}

impl Spec {
    /// Splits `args` into options and operands. With `stop_at_operand`, the first operand ends
    /// the scan and is the last item returned.
    pub(crate) fn scan<'a>(&self, args: &'a [Word]) -> Vec<Arg<'a>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let text = args[i].text.as_str();
            if text == "--" {
                out.extend((i + 1..args.len()).map(Arg::Operand));
                break;
            }
            if let Some(long) = text.strip_prefix("--") {
                let (name, value) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None if self.long_takes_value(long) => {
                        i += 1;
                        (long, args.get(i).map(|w| w.text.as_str()))
                    }
                    None => (long, None),
                };
                out.push(Arg::Long(name, value));
            } else if text.len() > 1 && text.starts_with('-') {
                let cluster = &text[1..];
                for (at, c) in cluster.char_indices() {
                    if self.short_valued.contains(c) {
                        let rest = &cluster[at + c.len_utf8()..];
                        let value = if rest.is_empty() {
                            i += 1;
                            args.get(i).map(|w| w.text.as_str())
                        } else {
                            Some(rest)
                        };
                        out.push(Arg::Short(c, value));
                        break;
                    }
                    if self.short_optional.contains(c) {
                        let rest = &cluster[at + c.len_utf8()..];
                        out.push(Arg::Short(c, (!rest.is_empty()).then_some(rest)));
                        break;
                    }
                    out.push(Arg::Short(c, None));
                }
            } else {
                out.push(Arg::Operand(i));
                if self.stop_at_operand {
                    break;
                }
            }
            i += 1;
        }
        out
    }

    /// The index of the first operand when options stop there (the wrapped command).
    pub(crate) fn first_operand(&self, args: &[Word]) -> Option<usize> {
        self.scan(args).into_iter().find_map(|a| match a {
            Arg::Operand(i) => Some(i),
            _ => None,
        })
    }

    fn long_takes_value(&self, written: &str) -> bool {
        self.long_valued.iter().any(|full| is_long(written, full))
    }
}

/// True when a long option written as `written` selects `full`: GNU getopt accepts any
/// unambiguous prefix, and an ambiguous one is an error, so a prefix is treated as a match.
pub(crate) fn is_long(written: &str, full: &str) -> bool {
    !written.is_empty() && full.starts_with(written)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn words(args: &[&str]) -> Vec<Word> {
        args.iter()
            .map(|a| Word {
                text: a.to_string(),
                ..Word::default()
            })
            .collect()
    }

    #[test]
    fn clusters_abbreviations_and_operands_are_read_like_getopt() {
        let spec = Spec {
            short_valued: "uS",
            short_optional: "i",
            long_valued: &["unset", "split-string"],
            stop_at_operand: true,
        };
        let args = words(&[
            "-0Sx y",
            "-ix",
            "--un",
            "HOME",
            "--split=z",
            "cmd",
            "-S",
            "a",
        ]);
        assert_eq!(
            spec.scan(&args),
            vec![
                Arg::Short('0', None),
                Arg::Short('S', Some("x y")),
                Arg::Short('i', Some("x")),
                Arg::Long("un", Some("HOME")),
                Arg::Long("split", Some("z")),
                Arg::Operand(5),
            ]
        );
        assert_eq!(spec.first_operand(&args), Some(5));
    }
}
