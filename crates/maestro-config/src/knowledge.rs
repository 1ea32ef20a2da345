//! `knowledge:` — the knowledge base: how documents are cut into chunks, the embedding model
//! that makes search hybrid, and the limits of a search.

use serde::{Deserialize, Serialize};

/// `knowledge:` — the knowledge base (`IngestDocument`, `SearchKnowledge`, `maestro
/// knowledge`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KnowledgeConfig {
    /// The model the endpoint's `/v1/embeddings` is asked for vectors with; unset: search is by
    /// full text alone.
    pub embedding_model: Option<String>,
    /// The longest chunk, in characters.
    pub chunk_chars: usize,
    /// How much of a chunk's end the next chunk repeats, in characters.
    pub overlap_chars: usize,
    /// The most chunks whose embeddings one search compares with the query's.
    pub max_vector_chunks: usize,
    /// The largest document ingested, in MiB.
    pub max_document_mb: u64,
}

impl Default for KnowledgeConfig {
    fn default() -> Self {
        KnowledgeConfig {
            embedding_model: None,
            chunk_chars: 1200,
            overlap_chars: 200,
            max_vector_chunks: 5000,
            max_document_mb: 20,
        }
    }
}
