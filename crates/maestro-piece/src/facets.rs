//! Facet resolution: turning a persona, policy, knowledge, instruction or report-format name
//! into text.
//!
//! A name is looked up, in order:
//! 1. in the piece's section map (`personas: {coder: ../personas/coder.md}`);
//! 2. as a path relative to the piece file;
//! 3. in `<piece dir>/../facets/<kind>/<name>.md` (the layout takt's builtins use);
//! 4. in the project's `.maestro/facets/<kind>/`;
//! 5. in the user's `~/.maestro/facets/<kind>/`;
//! 6. in the project's `.takt/facets/<kind>/` (TAKT's project layer);
//! 7. in the user's `~/.takt/facets/<kind>/` (TAKT's user layer, `$TAKT_CONFIG_DIR/facets/`);
//! 8. in each extra `--facets-dir` (`<dir>/<kind>/<name>.md`);
//! 9. in TAKT v0.60's builtin facets, shipped inside Maestro (`takt_builtins`).
//!
//! A facet's text then has TAKT's directives expanded: `{{include:<kind>/<name>}}` inserts the
//! partial `partials/<kind>/<name>.md` (looked up in the facet's own facets directory, the
//! roots, then the builtins), and a standalone `{extends:<name>}` line inserts the text of the
//! same-kind facet `<name>` from the layers, the facet's own file excluded.
//!
//! A name found nowhere is the text itself (the maestro schema's inline `persona:` and
//! `instruction:` strings). When it looks like a name rather than prose, a warning says where
//! it was looked for.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::check::{Fields, Sink};
use crate::ir::Facet;
use crate::options::LoadOptions;
use crate::yaml::{Span, join_key};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FacetKind {
    Persona,
    Policy,
    Knowledge,
    Instruction,
    ReportFormat,
}

impl FacetKind {
    pub(crate) const ALL: [FacetKind; 5] = [
        FacetKind::Persona,
        FacetKind::Policy,
        FacetKind::Knowledge,
        FacetKind::Instruction,
        FacetKind::ReportFormat,
    ];

    /// The directory name under a facets root.
    pub(crate) fn dir(self) -> &'static str {
        match self {
            FacetKind::Persona => "personas",
            FacetKind::Policy => "policies",
            FacetKind::Knowledge => "knowledge",
            FacetKind::Instruction => "instructions",
            FacetKind::ReportFormat => "output-contracts",
        }
    }

    /// The top-level section map key in a takt piece.
    pub(crate) fn section(self) -> &'static str {
        match self {
            FacetKind::Persona => "personas",
            FacetKind::Policy => "policies",
            FacetKind::Knowledge => "knowledge",
            FacetKind::Instruction => "instructions",
            FacetKind::ReportFormat => "report_formats",
        }
    }

    fn label(self) -> &'static str {
        match self {
            FacetKind::Persona => "persona",
            FacetKind::Policy => "policy",
            FacetKind::Knowledge => "knowledge",
            FacetKind::Instruction => "instruction",
            FacetKind::ReportFormat => "report format",
        }
    }
}

/// Resolves facet names for one piece file.
#[derive(Debug)]
pub(crate) struct Resolver {
    piece_dir: PathBuf,
    /// Facet roots searched after the section map and the piece-relative path, in order.
    roots: Vec<PathBuf>,
    sections: BTreeMap<(FacetKind, String), PathBuf>,
    /// File contents read during this load (`None`: not there).
    cache: HashMap<PathBuf, Option<String>>,
    /// With `LoadOptions::confine_facets`: the only directories facet files may come from
    /// (canonical paths).
    confined_to: Option<Vec<PathBuf>>,
}

impl Resolver {
    pub(crate) fn new(origin: &Path, opts: &LoadOptions) -> Self {
        let piece_dir = origin.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut roots = vec![piece_dir.join("..").join("facets")];
        if let Some(project) = &opts.project_dir {
            roots.push(project.join(".maestro").join("facets"));
        }
        if let Some(user) = &opts.user_dir {
            roots.push(user.join("facets"));
        }
        // TAKT's own layers (`.takt/facets/<kind>/`, `~/.takt/facets/<kind>/`), after ours.
        if let Some(project) = &opts.project_dir {
            roots.push(project.join(".takt").join("facets"));
        }
        if let Some(takt_user) = &opts.takt_user_dir {
            roots.push(takt_user.join("facets"));
        }
        roots.extend(opts.facet_dirs.iter().cloned());
        let confined_to = opts.confine_facets.then(|| {
            std::iter::once(&piece_dir)
                .chain(&roots)
                .filter_map(|dir| dir.canonicalize().ok())
                .collect()
        });
        Resolver {
            confined_to,
            piece_dir,
            roots,
            sections: BTreeMap::new(),
            cache: HashMap::new(),
        }
    }

    /// Reads the takt section maps (`personas:`, `policies:`, …) from the top level. Every
    /// entry must name a readable file relative to the piece.
    pub(crate) fn read_sections(&mut self, sink: &mut Sink, top: &Fields<'_>) {
        for kind in FacetKind::ALL {
            let Some((node, path)) = top.get(kind.section()) else {
                continue;
            };
            let Some(entries) = node.as_map() else {
                sink.error(
                    &path,
                    node.span,
                    format!(
                        "expected a mapping of {} names to file paths, found {}",
                        kind.label(),
                        node.kind_name()
                    ),
                );
                continue;
            };
            for (key, value) in entries {
                let entry_path = join_key(&path, &key.text);
                let Some(rel) = crate::check::string(sink, value, &entry_path) else {
                    continue;
                };
                let file = self.piece_dir.join(rel);
                if file.is_file() {
                    self.sections.insert((kind, key.text.clone()), file);
                } else {
                    sink.error(
                        &entry_path,
                        value.span,
                        format!(
                            "{} file `{rel}` not found (looked for {}); paths are relative to the piece file",
                            kind.label(),
                            file.display()
                        ),
                    );
                }
            }
        }
    }

    /// Resolves `name` to a facet; see the module doc for the search order.
    pub(crate) fn resolve(
        &mut self,
        sink: &mut Sink,
        kind: FacetKind,
        name: &str,
        path: &str,
        span: Span,
    ) -> Facet {
        let mut looked = Vec::new();
        if let Some(file) = self.sections.get(&(kind, name.to_owned())).cloned()
            && let Some(facet) = self.read(sink, name, &file, path, span)
        {
            return self.expand(sink, kind, facet, path, span);
        }
        if looks_like_path(name) {
            let file = self.piece_dir.join(name);
            if let Some(facet) = self.read(sink, name, &file, path, span) {
                return self.expand(sink, kind, facet, path, span);
            }
            if !is_simple_name(name) && !name.contains(char::is_whitespace) {
                // `./personas/coder.md` with no such file: a path mistyped or a file moved, not
                // prose to send the model.
                sink.warn(
                    path,
                    span,
                    format!(
                        "{} `{name}` looks like a file path, but {} does not exist, so the text \
                         `{name}` itself is used; paths are relative to the piece file",
                        kind.label(),
                        file.display()
                    ),
                );
            }
            looked.push(file);
        }
        if is_simple_name(name) {
            let file_name = format!("{name}.md");
            for i in 0..self.roots.len() {
                let file = self.roots[i].join(kind.dir()).join(&file_name);
                if let Some(facet) = self.read(sink, name, &file, path, span) {
                    return self.expand(sink, kind, facet, path, span);
                }
                looked.push(file);
            }
            let rel = format!("facets/{}/{file_name}", kind.dir());
            if let Some(text) = crate::takt_builtins::file(&rel) {
                return self.expand(
                    sink,
                    kind,
                    Facet {
                        name: name.to_owned(),
                        text: text.to_owned(),
                        path: Some(crate::takt_builtins::origin(&rel)),
                    },
                    path,
                    span,
                );
            }
            looked.push(crate::takt_builtins::origin(&rel));
            sink.warn(
                path,
                span,
                format!(
                    "{} `{name}` names no facet file, so the text `{name}` itself is used; looked in: {}",
                    kind.label(),
                    looked
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        Facet {
            name: name.lines().next().unwrap_or_default().trim().to_owned(),
            text: name.to_owned(),
            path: None,
        }
    }

    /// Expands TAKT's `{{include:…}}` and `{extends:…}` directives in a resolved facet (see the
    /// module doc). A directive that names nothing is an error at the field that chose the facet.
    fn expand(
        &mut self,
        sink: &mut Sink,
        kind: FacetKind,
        mut facet: Facet,
        path: &str,
        span: Span,
    ) -> Facet {
        if !facet.text.contains("{{include:") && !facet.text.contains("{extends:") {
            return facet;
        }
        let own = facet.path.clone();
        let mut depth = 0;
        while depth < MAX_DIRECTIVE_DEPTH
            && (facet.text.contains("{{include:") || facet.text.contains("{extends:"))
        {
            depth += 1;
            let mut out = String::with_capacity(facet.text.len());
            let mut rest = facet.text.as_str();
            let mut changed = false;
            while let Some(at) = rest.find("{{include:") {
                let Some(end) = rest[at..].find("}}") else {
                    break;
                };
                let target = rest[at + "{{include:".len()..at + end].trim();
                out.push_str(&rest[..at]);
                match self.partial(own.as_deref(), target) {
                    Some(text) => out.push_str(text.trim_end_matches('\n')),
                    None => sink.error(
                        path,
                        span,
                        format!(
                            "{} `{}` includes `{{{{include:{target}}}}}`, but no partial `partials/{target}.md` exists in its facets directory, the facet roots or the builtin facets; add the partial or remove the line",
                            kind.label(),
                            facet.name
                        ),
                    ),
                }
                rest = &rest[at + end + 2..];
                changed = true;
            }
            out.push_str(rest);
            let mut lines = Vec::new();
            for line in out.lines() {
                let trimmed = line.trim();
                if let Some(parent) = trimmed
                    .strip_prefix("{extends:")
                    .and_then(|p| p.strip_suffix('}'))
                {
                    let parent = parent.trim();
                    changed = true;
                    match self.parent(kind, parent, own.as_deref()) {
                        Some(text) => lines.push(text.trim_end_matches('\n').to_owned()),
                        None => sink.error(
                            path,
                            span,
                            format!(
                                "{} `{}` extends `{parent}`, but no other {} facet `{parent}` exists in the facet roots or the builtin facets; add it or remove the `{{extends:{parent}}}` line",
                                kind.label(),
                                facet.name,
                                kind.label()
                            ),
                        ),
                    }
                } else {
                    lines.push(line.to_owned());
                }
            }
            let mut text = lines.join("\n");
            if out.ends_with('\n') {
                text.push('\n');
            }
            facet.text = text;
            if !changed {
                break;
            }
        }
        facet
    }

    /// The text of the partial `partials/<target>.md` (`target` is `<kind>/<name>`).
    fn partial(&mut self, own: Option<&Path>, target: &str) -> Option<String> {
        if target.is_empty() || target.contains("..") || target.starts_with('/') {
            return None;
        }
        let rel = format!("partials/{target}.md");
        // The facets directory the including facet lives in (`<root>/<kind>/<name>.md`).
        let own_root = own
            .filter(|p| !p.starts_with(crate::takt_builtins::ORIGIN))
            .and_then(|p| p.parent()?.parent().map(Path::to_path_buf));
        let mut dirs: Vec<PathBuf> = own_root.into_iter().collect();
        dirs.extend(self.roots.iter().cloned());
        for dir in dirs {
            let file = dir.join(&rel);
            if let Some(text) = self.cached_text(&file) {
                return Some(text);
            }
        }
        crate::takt_builtins::file(&format!("facets/{rel}")).map(str::to_owned)
    }

    /// The text of the facet `name` of `kind` in the roots, then the builtins, leaving out
    /// the file the extending facet came from.
    fn parent(&mut self, kind: FacetKind, name: &str, own: Option<&Path>) -> Option<String> {
        if !is_simple_name(name) {
            return None;
        }
        let file_name = format!("{name}.md");
        for i in 0..self.roots.len() {
            let file = self.roots[i].join(kind.dir()).join(&file_name);
            if own.is_some_and(|own| same_file(own, &file)) {
                continue;
            }
            if let Some(text) = self.cached_text(&file) {
                return Some(text);
            }
        }
        let rel = format!("facets/{}/{file_name}", kind.dir());
        if own.is_some_and(|own| own == crate::takt_builtins::origin(&rel)) {
            return None;
        }
        crate::takt_builtins::file(&rel).map(str::to_owned)
    }

    fn cached_text(&mut self, file: &Path) -> Option<String> {
        if let Some(cached) = self.cache.get(file) {
            return cached.clone();
        }
        let text = std::fs::read_to_string(file).ok();
        self.cache.insert(file.to_owned(), text.clone());
        text
    }

    /// Reads a facet file, once per load however often the piece names it. A missing file
    /// (or a directory) is `None`; an unreadable one is an error.
    fn read(
        &mut self,
        sink: &mut Sink,
        name: &str,
        file: &Path,
        path: &str,
        span: Span,
    ) -> Option<Facet> {
        if let Some(allowed) = &self.confined_to {
            // A file that does not exist is "not there", as below; one that resolves outside
            // the allowed directories (through `..` or a symlink) is refused.
            let real = file.canonicalize().ok()?;
            if !allowed.iter().any(|dir| real.starts_with(dir)) {
                sink.error(
                    path,
                    span,
                    format!(
                        "facet file `{name}` lies outside the directories this piece may read facets from (its own directory and the facet roots); move it there or name a facet by its key"
                    ),
                );
                return None;
            }
        }
        let text = match self.cache.get(file) {
            Some(cached) => cached.clone()?,
            None => {
                let text = match std::fs::read_to_string(file) {
                    Ok(text) => Some(text),
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound
                                | std::io::ErrorKind::IsADirectory
                                | std::io::ErrorKind::NotADirectory
                        ) =>
                    {
                        None
                    }
                    Err(e) => {
                        sink.error(
                            path,
                            span,
                            format!("cannot read facet file {}: {e}", file.display()),
                        );
                        None
                    }
                };
                self.cache.insert(file.to_owned(), text.clone());
                text?
            }
        };
        Some(Facet {
            name: name.to_owned(),
            text,
            path: Some(file.to_owned()),
        })
    }
}

/// How often a facet's directives are expanded in turn (an include of an include …).
const MAX_DIRECTIVE_DEPTH: usize = 16;

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// One word of name characters: a facet name rather than inline prose.
fn is_simple_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.contains("..")
        // `Done.` is a sentence, not a file name
        && !name.ends_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn looks_like_path(name: &str) -> bool {
    name.len() <= 4096 && !name.contains('\n') && (name.contains('/') || name.ends_with(".md"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Every one of TAKT v0.60's 324 builtin facets resolves from the embedded set alone (no
    /// facet directory exists), with its `{{include:}}` and `{extends:}` directives expanded.
    #[test]
    fn every_builtin_takt_facet_resolves_by_name() {
        let origin = Path::new("/nonexistent/project/.takt/workflows/w.yaml");
        let mut sink = Sink::new(origin);
        let mut resolver = Resolver::new(origin, &LoadOptions::default());
        let mut count = 0;
        for (rel, text) in crate::takt_builtins::facets() {
            count += 1;
            let parts: Vec<&str> = rel.trim_end_matches(".md").split('/').collect();
            match parts.as_slice() {
                ["facets", "partials", kind, name] => {
                    let got = resolver.partial(None, &format!("{kind}/{name}"));
                    assert_eq!(got.as_deref(), Some(text), "{rel}");
                }
                ["facets", "instructions", "_system", _] => {
                    // TAKT's own notice, read by path: it is there.
                    assert!(crate::takt_builtins::file(rel).is_some(), "{rel}");
                }
                ["facets", dir, name] => {
                    let kind = FacetKind::ALL
                        .into_iter()
                        .find(|k| k.dir() == *dir)
                        .unwrap_or_else(|| panic!("{rel}: unknown facet kind"));
                    let facet = resolver.resolve(&mut sink, kind, name, "x", Span::default());
                    assert_eq!(facet.path, Some(crate::takt_builtins::origin(rel)), "{rel}");
                    assert!(!facet.text.contains("{{include:"), "{rel}");
                    assert!(!facet.text.contains("{extends:"), "{rel}");
                    assert!(!facet.text.trim().is_empty(), "{rel}");
                }
                _ => panic!("{rel}: unexpected place"),
            }
        }
        assert_eq!(count, 324);
        let (errors, warnings) = sink.finish();
        assert!(
            errors.is_empty() && warnings.is_empty(),
            "{errors:?} {warnings:?}"
        );
    }

    #[test]
    fn includes_and_extends_expand_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let facets = dir.path().join("facets");
        std::fs::create_dir_all(facets.join("instructions")).unwrap();
        std::fs::create_dir_all(facets.join("partials/instructions")).unwrap();
        std::fs::write(
            facets.join("instructions/fix.md"),
            "{extends:fix}\n\nAlso run the linter.\n{{include:instructions/tail}}\n",
        )
        .unwrap();
        std::fs::write(facets.join("partials/instructions/tail.md"), "Tail.\n").unwrap();
        std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
        let origin = dir.path().join("workflows/w.yaml");
        let mut sink = Sink::new(&origin);
        let mut resolver = Resolver::new(&origin, &LoadOptions::default());
        let facet = resolver.resolve(
            &mut sink,
            FacetKind::Instruction,
            "fix",
            "x",
            Span::default(),
        );
        // The parent is the builtin `fix`, its own includes expanded.
        let nowhere = Path::new("/nonexistent/w.yaml");
        let builtin_fix = Resolver::new(nowhere, &LoadOptions::default())
            .resolve(
                &mut Sink::new(nowhere),
                FacetKind::Instruction,
                "fix",
                "x",
                Span::default(),
            )
            .text;
        assert!(!builtin_fix.contains("{{include:"));
        assert_eq!(
            facet.text,
            format!(
                "{}\n\nAlso run the linter.\nTail.\n",
                builtin_fix.trim_end_matches('\n')
            )
        );
        // A missing partial is an error naming it.
        std::fs::write(
            facets.join("instructions/fix.md"),
            "{{include:instructions/nowhere}}\n",
        )
        .unwrap();
        let mut resolver = Resolver::new(&origin, &LoadOptions::default());
        resolver.resolve(
            &mut sink,
            FacetKind::Instruction,
            "fix",
            "x",
            Span::default(),
        );
        let (errors, _) = sink.finish();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .message
                .contains("`{{include:instructions/nowhere}}`")
        );
    }

    #[test]
    fn simple_names_exclude_prose_and_traversal() {
        assert!(is_simple_name("coder"));
        assert!(is_simple_name("ai-antipattern_2"));
        assert!(!is_simple_name("Run health checks."));
        assert!(!is_simple_name("../etc"));
        assert!(!is_simple_name("a/b"));
    }
}
