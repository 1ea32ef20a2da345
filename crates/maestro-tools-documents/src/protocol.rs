//! What the tool and its reader child say to each other: the request (which reader, its
//! options, the limits) as the child's one argument, the file's bytes on its stdin, and the
//! answer as JSON on its stdout.

use serde::{Deserialize, Serialize};

/// The first bytes of a compound file (old binary Office files, and encrypted OOXML packages).
pub(crate) const CFB_MAGIC: &[u8] = &[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];

/// What the child is asked to read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Request {
    /// Which reader runs.
    pub(crate) kind: Kind,
    /// The file's name as the model gave it (for messages only; the bytes come on stdin).
    pub(crate) shown: String,
    /// `ReadExcel`'s sheet.
    #[serde(default)]
    pub(crate) sheet: Option<String>,
    /// `ReadExcel`'s cell range (`A1:D20`).
    #[serde(default)]
    pub(crate) range: Option<String>,
    /// The child's address-space limit, in MiB.
    pub(crate) memory_mb: u64,
    /// The child's CPU limit, in seconds.
    pub(crate) cpu_secs: u64,
    /// Bytes a package's parts may expand to in all.
    pub(crate) max_expanded_bytes: u64,
    /// Bytes of Markdown the answer may hold.
    pub(crate) max_chars: usize,
    /// What to do with an image ([`Kind::Image`]).
    #[serde(default)]
    pub(crate) image: Option<crate::image::ImageJob>,
}

/// The readers the child has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Docx,
    Pptx,
    /// xlsx, xlsm, xlsb, xls or ods (calamine decides by content).
    Spreadsheet,
    Csv,
    /// PNG or JPEG, for ReadImage and AnnotateImage ([`Request::image`] says which).
    Image,
}

/// Why a file could not be read, as the child reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum ReadFailure {
    /// Damaged, truncated or not what it claims to be.
    #[error("the file is corrupt: {0}")]
    Corrupt(String),
    /// Protected with a password.
    #[error("the file is encrypted: {0}")]
    Encrypted(String),
    /// Another type of file than the tool reads.
    #[error("the file is of the wrong type: {0}")]
    WrongType(String),
    /// Would expand past the limits.
    #[error("the file is too large: {0}")]
    TooLarge(String),
    /// The request names something the file does not have (a sheet, a range).
    #[error("{0}")]
    NotFound(String),
}

/// The child's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Response {
    /// The document as Markdown.
    Markdown(String),
    /// Why it could not be read.
    Failed(ReadFailure),
    /// The image made ([`Kind::Image`]).
    Image(Box<crate::image::ImageAnswer>),
}

/// Whether `bytes` is an encrypted Office Open XML package: a compound file holding an
/// `EncryptedPackage` stream (what Word, Excel and PowerPoint write for a password).
pub(crate) fn is_encrypted_office(bytes: &[u8]) -> bool {
    if !bytes.starts_with(CFB_MAGIC) {
        return false;
    }
    let needle: Vec<u8> = "EncryptedPackage"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    bytes.windows(needle.len()).any(|w| w == needle.as_slice())
}
