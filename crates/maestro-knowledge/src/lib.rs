//! The knowledge base's parts that need neither the store nor a model: turning a document into
//! text with its structure ([`extract`]: markdown, plain text, HTML; PDFs and Office documents
//! arrive as markdown from the document tools' readers), cutting it into overlapping chunks on that structure ([`chunk`]), the
//! content hash that makes re-ingesting a no-op ([`content_hash`]), and the scoring helpers of
//! the hybrid search: reciprocal rank fusion ([`rrf`]), cosine similarity ([`cosine`]) and the
//! little-endian `f32` encoding embeddings are stored in ([`encode_embedding`]).

mod chunk;
mod extract;
mod score;

pub use chunk::{Chunk, ChunkOptions, chunk};
pub use extract::{
    ExtractError, Extracted, Format, Section, extract, format_for_path, html_to_markdown,
};
pub use score::{RRF_K, content_hash, cosine, decode_embedding, encode_embedding, rrf};
