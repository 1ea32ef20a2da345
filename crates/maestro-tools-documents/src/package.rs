//! An Office Open XML package (a zip of XML parts) opened from memory, with every part's
//! decompressed size capped, so a zip bomb is refused as too large instead of filling memory.

use std::io::{Cursor, Read};

use zip::ZipArchive;

use crate::protocol::ReadFailure;

/// The zip archive and what has been decompressed from it so far.
pub(crate) struct Package<'a> {
    zip: ZipArchive<Cursor<&'a [u8]>>,
    what: &'static str,
    max_expanded: u64,
    expanded: u64,
}

impl<'a> Package<'a> {
    /// Opens `bytes` as the zip package of a `what` ("a .docx file"); a file that is not a zip
    /// is named as corrupt, an encrypted Office file (a compound file) as encrypted.
    pub(crate) fn open(
        bytes: &'a [u8],
        what: &'static str,
        max_expanded: u64,
    ) -> Result<Package<'a>, ReadFailure> {
        if crate::protocol::is_encrypted_office(bytes) {
            return Err(ReadFailure::Encrypted(format!(
                "it is {what} protected with a password (an encrypted package); save an unprotected copy and read that"
            )));
        }
        if bytes.starts_with(crate::protocol::CFB_MAGIC) {
            return Err(ReadFailure::WrongType(format!(
                "it is an old binary Office file (a compound file), not {what}; save it as {what} first"
            )));
        }
        let zip = ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
            ReadFailure::Corrupt(format!(
                "it is not a readable zip package, as {what} must be ({e}); the file is damaged, truncated or of another type"
            ))
        })?;
        let declared = zip.decompressed_size().unwrap_or(0);
        if declared > u128::from(max_expanded) {
            return Err(ReadFailure::TooLarge(format!(
                "its parts would expand to {declared} bytes, more than the {max_expanded} bytes allowed (a zip bomb, or a document too large to read here)"
            )));
        }
        Ok(Package {
            zip,
            what,
            max_expanded,
            expanded: 0,
        })
    }

    /// Whether the package has a part named `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.zip.index_for_name(name).is_some()
    }

    /// The part `name` as text, or `None` when the package has no such part. Reading stops
    /// (too large) at the package's decompression cap, whatever the zip's headers claim.
    pub(crate) fn part(&mut self, name: &str) -> Result<Option<String>, ReadFailure> {
        let Some(index) = self.zip.index_for_name(name) else {
            return Ok(None);
        };
        let what = self.what;
        let entry = self.zip.by_index(index).map_err(|e| {
            ReadFailure::Corrupt(format!(
                "its part {name} cannot be read ({e}); {what} is damaged"
            ))
        })?;
        let room = self.max_expanded.saturating_sub(self.expanded);
        let mut bytes = Vec::new();
        entry
            .take(room.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| inflate_error(e, &format!("its part {name}"), what))?;
        self.expanded += bytes.len() as u64;
        if self.expanded > self.max_expanded {
            return Err(self.too_large());
        }
        String::from_utf8(bytes).map(Some).map_err(|_| {
            ReadFailure::Corrupt(format!(
                "its part {name} is not UTF-8 text; {what} is damaged"
            ))
        })
    }

    /// Decompresses every part through the cap and drops it: refuses a package whose parts
    /// expand past the cap whatever its headers claim, before another library inflates it.
    pub(crate) fn read_all(&mut self) -> Result<(), ReadFailure> {
        let what = self.what;
        for index in 0..self.zip.len() {
            let entry = self.zip.by_index(index).map_err(|e| {
                ReadFailure::Corrupt(format!(
                    "part {index} cannot be read ({e}); {what} is damaged"
                ))
            })?;
            let room = self.max_expanded.saturating_sub(self.expanded);
            let read = std::io::copy(
                &mut entry.take(room.saturating_add(1)),
                &mut std::io::sink(),
            )
            .map_err(|e| inflate_error(e, &format!("part {index}"), what))?;
            self.expanded += read;
            if self.expanded > self.max_expanded {
                return Err(self.too_large());
            }
        }
        self.expanded = 0;
        Ok(())
    }

    fn too_large(&self) -> ReadFailure {
        ReadFailure::TooLarge(format!(
            "its parts expand to more than the {} bytes allowed (a zip bomb, or a document too large to read here)",
            self.max_expanded
        ))
    }

    /// The part `name` parsed as XML (`None` when absent).
    pub(crate) fn xml(&mut self, name: &str) -> Result<Option<crate::xml::Element>, ReadFailure> {
        let what = self.what;
        match self.part(name)? {
            None => Ok(None),
            Some(text) => crate::xml::parse(&text).map(Some).map_err(|e| {
                ReadFailure::Corrupt(format!(
                    "its part {name} is not well-formed XML ({e}); {what} is damaged"
                ))
            }),
        }
    }

    /// The relationships of `part` (`word/document.xml` → `word/_rels/document.xml.rels`):
    /// id, type and target resolved against the part's folder.
    pub(crate) fn relationships(&mut self, part: &str) -> Result<Vec<Relationship>, ReadFailure> {
        let (folder, file) = part.rsplit_once('/').unwrap_or(("", part));
        let rels_name = if folder.is_empty() {
            format!("_rels/{file}.rels")
        } else {
            format!("{folder}/_rels/{file}.rels")
        };
        let Some(root) = self.xml(&rels_name)? else {
            return Ok(Vec::new());
        };
        Ok(root
            .elements()
            .filter(|e| e.name == "Relationship")
            .map(|e| Relationship {
                id: e.attr("Id").unwrap_or_default().to_string(),
                kind: e.attr("Type").unwrap_or_default().to_string(),
                target: resolve(folder, e.attr("Target").unwrap_or_default()),
            })
            .collect())
    }
}

/// A part that did not decompress: out of memory under the reader's limit (too large), or
/// damaged.
fn inflate_error(e: std::io::Error, part: &str, what: &str) -> ReadFailure {
    if e.kind() == std::io::ErrorKind::OutOfMemory {
        ReadFailure::TooLarge(format!(
            "{part} expands past the reader's memory limit (a zip bomb, or a document too large to read here)"
        ))
    } else {
        ReadFailure::Corrupt(format!(
            "{part} does not decompress ({e}); {what} is damaged or truncated"
        ))
    }
}

/// One relationship of a part.
#[derive(Debug, Clone)]
pub(crate) struct Relationship {
    pub(crate) id: String,
    pub(crate) kind: String,
    /// The target part's name in the package.
    pub(crate) target: String,
}

/// `target` relative to `folder` (or absolute from the package root), `..` resolved.
fn resolve(folder: &str, target: &str) -> String {
    let mut parts: Vec<&str> = if let Some(abs) = target.strip_prefix('/') {
        return abs.to_string();
    } else {
        folder.split('/').filter(|p| !p.is_empty()).collect()
    };
    for piece in target.split('/') {
        match piece {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            other => parts.push(other),
        }
    }
    parts.join("/")
}
