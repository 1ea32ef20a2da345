//! The knowledge base's use cases: ingest a document (a file's bytes or a URL fetched through
//! the SSRF guard), search (full text fused with embeddings when `knowledge.embedding_model`
//! is set), list and delete. The tools (`knowledge_tools.rs`), `maestro knowledge` and the
//! server all call these.

use std::sync::Arc;

use maestro_config::{Config, KnowledgeConfig};
use maestro_knowledge::{ChunkOptions, Extracted, Format};
use maestro_llm::{LlmError, ModelClient};
use maestro_store::{
    ChunkHit, KnowledgeScope, NewChunk, NewDocument, SHARED_OWNER, Store, StoreError,
    StoredDocument,
};
use maestro_tools_documents::DocumentsConfig;
use maestro_tools_web::{SystemLookup, WebClient, WebError};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// The collection a document goes in when none is named.
pub const DEFAULT_COLLECTION: &str = "default";
/// How many results a search gives when `k` is not said.
pub const DEFAULT_K: usize = 5;
/// The most results one search gives.
pub const MAX_K: usize = 50;
/// How many chunks each ranking (full text, vectors) hands to the fusion.
const CANDIDATES: usize = 50;

/// Why a knowledge base request failed. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    /// The store failed.
    #[error("the knowledge base's store failed")]
    Store(#[from] StoreError),
    /// The document is of a format the knowledge base does not read.
    #[error(
        "{source_name}: the knowledge base reads markdown (.md), text (.txt), HTML (.html), PDF, \
         Word (.docx), PowerPoint (.pptx) and spreadsheet (.xlsx, .xls, .ods, .csv) documents, \
         not {what}; convert it to one of those first"
    )]
    Format {
        /// The file or URL.
        source_name: String,
        /// What it is (its extension or content type).
        what: String,
    },
    /// The document is larger than `knowledge.max_document_mb` (or `web.max_bytes`).
    #[error(
        "{source_name} is larger than {limit_mb} MiB; raise `knowledge.max_document_mb` (and \
         for a URL `web.max_bytes`) in .maestro/config.yaml, or split the document"
    )]
    TooLarge {
        /// The file or URL.
        source_name: String,
        /// The limit, in MiB.
        limit_mb: u64,
    },
    /// The document's bytes cannot be read as its format.
    #[error("{source_name} cannot be read")]
    Extract {
        /// The file or URL.
        source_name: String,
        /// Why.
        #[source]
        source: maestro_knowledge::ExtractError,
    },
    /// A PDF or Office document could not be read (corrupt, encrypted, past the limits).
    #[error("{source_name} cannot be read")]
    Document {
        /// The file or URL.
        source_name: String,
        /// Why.
        #[source]
        source: maestro_tools_documents::DocError,
    },
    /// The document has no text.
    #[error("{0} has no text to ingest")]
    Empty(String),
    /// The URL could not be fetched.
    #[error("{url} cannot be fetched")]
    Web {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: WebError,
    },
    /// The embedding model failed.
    #[error(
        "the embeddings of model `{model}` (knowledge.embedding_model) could not be made; check \
         that the endpoint serves it at /v1/embeddings, or unset the key to search by text alone"
    )]
    Embeddings {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: LlmError,
    },
    /// The model client could not be built.
    #[error("the model client for the embeddings cannot be built")]
    Client(#[source] crate::models::ModelError),
    /// No document with this id is readable by the caller.
    #[error("no document {0} in your knowledge base; `maestro knowledge list` shows the ids")]
    NotFound(String),
    /// The caller may read the shared document but not delete it.
    #[error(
        "document {0} is in a shared collection: only the person who ingested it or an admin may \
         delete it"
    )]
    Forbidden(String),
    /// A collection name that cannot be used.
    #[error("collection name {0:?} must be 1 to 100 characters, without control characters")]
    Collection(String),
    /// The query is empty.
    #[error("the query is empty; say what to search for")]
    EmptyQuery,
}

impl KnowledgeError {
    /// True when the URL given is not one to fetch at all (not http or https, no host, or an
    /// address the SSRF guard refuses): the request's fault, not the far side's.
    pub fn is_refused_url(&self) -> bool {
        matches!(
            self,
            KnowledgeError::Web {
                source: WebError::InvalidUrl { .. }
                    | WebError::UnsupportedScheme { .. }
                    | WebError::NoHost(_)
                    | WebError::Blocked(_),
                ..
            }
        )
    }
}

/// Where a document comes from.
#[derive(Debug, Clone)]
pub enum DocumentSource {
    /// Bytes already read (a workspace file, a local file, an upload), with the name shown as
    /// the document's source; its extension says the format.
    Bytes {
        /// The path or name.
        name: String,
        /// The content.
        bytes: Vec<u8>,
    },
    /// An `http(s)://` URL, fetched through the web tools' SSRF guard (`web.allow_private`,
    /// `web.allow_hosts`).
    Url(String),
}

/// A document to ingest.
#[derive(Debug, Clone)]
pub struct IngestRequest {
    /// Where it comes from.
    pub source: DocumentSource,
    /// The collection (default [`DEFAULT_COLLECTION`]).
    pub collection: Option<String>,
    /// The title (default: the document's own, else its file name or URL).
    pub title: Option<String>,
    /// The collection's owner: a user's email, or [`SHARED_OWNER`] for a shared collection.
    pub owner: String,
    /// Who ingests it.
    pub created_by: String,
}

/// What ingesting did.
#[derive(Debug, Clone, Serialize)]
pub struct IngestOutcome {
    /// The document as stored.
    pub document: DocumentInfo,
    /// False when the collection held this content already and nothing was done.
    pub created: bool,
}

/// A document as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocumentInfo {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Where it came from.
    pub source: String,
    /// Its collection.
    pub collection: String,
    /// Whether its collection is shared with everyone.
    pub shared: bool,
    /// How many chunks it has.
    pub chunk_count: i64,
    /// The SHA-256 of its content.
    pub hash: String,
    /// Who ingested it.
    pub created_by: String,
}

impl From<StoredDocument> for DocumentInfo {
    fn from(d: StoredDocument) -> Self {
        DocumentInfo {
            shared: d.owner == SHARED_OWNER,
            id: d.id,
            title: d.title,
            source: d.source,
            collection: d.collection,
            chunk_count: d.chunk_count,
            hash: d.hash,
            created_by: d.created_by,
        }
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The document's id.
    pub document_id: String,
    /// The document's title.
    pub title: String,
    /// The document's source.
    pub source: String,
    /// The collection.
    pub collection: String,
    /// Where in the document: its heading trail or page (empty when it has neither).
    pub location: String,
    /// The chunk's text.
    pub text: String,
    /// The score, higher is better: the reciprocal rank fusion of the full-text and vector
    /// rankings when embeddings are configured, else the full-text score.
    pub score: f64,
}

fn hit(chunk: ChunkHit, score: f64) -> SearchHit {
    SearchHit {
        document_id: chunk.document_id,
        title: chunk.title,
        source: chunk.source,
        collection: chunk.collection,
        location: chunk.location,
        text: chunk.text,
        score,
    }
}

/// The knowledge base of one store under one configuration.
#[derive(Clone)]
pub struct Knowledge {
    store: Store,
    settings: KnowledgeConfig,
    web: WebClient,
    max_web_bytes: u64,
    embedder: Option<(Arc<ModelClient>, String)>,
    /// How PDFs and Office documents are read: the document tools' readers and limits.
    documents: Arc<DocumentsConfig>,
}

/// How one document's bytes become text.
#[derive(Debug, Clone)]
enum Reader {
    /// Markdown, text or HTML, read here.
    Builtin(Format),
    /// A PDF or Office document, read by the document tools' readers outside this process;
    /// the string is its extension.
    Document(String),
}

/// The reader for a file named `name`, by its extension.
fn reader_for_path(name: &str) -> Option<Reader> {
    let path = std::path::Path::new(name);
    if let Some(format) = maestro_knowledge::format_for_path(path) {
        return Some(Reader::Builtin(format));
    }
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    maestro_tools_documents::INDEXABLE
        .contains(&ext.as_str())
        .then_some(Reader::Document(ext))
}

/// The reader for a web response's `Content-Type`.
fn reader_for_content_type(content_type: &str) -> Option<Reader> {
    if let Some(format) = Format::for_content_type(content_type) {
        return Some(Reader::Builtin(format));
    }
    let mime = content_type.split(';').next().unwrap_or("").trim();
    let ext = match mime {
        "application/pdf" => "pdf",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "docx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation" => "pptx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx",
        "application/vnd.ms-excel" => "xls",
        "application/vnd.oasis.opendocument.spreadsheet" => "ods",
        "text/csv" => "csv",
        _ => return None,
    };
    Some(Reader::Document(ext.to_string()))
}

impl std::fmt::Debug for Knowledge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Knowledge")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn check_collection(name: &str) -> Result<(), KnowledgeError> {
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(KnowledgeError::Collection(name.to_string()));
    }
    Ok(())
}

impl Knowledge {
    /// The knowledge base in `store` under `config` (`knowledge:` and `web:`); with
    /// `knowledge.embedding_model` set, embeddings come from `client`, or from a client built
    /// from `config.llm` when `client` is `None`.
    pub fn new(
        store: Store,
        config: &Config,
        client: Option<Arc<ModelClient>>,
    ) -> Result<Knowledge, KnowledgeError> {
        let client = match (&config.knowledge.embedding_model, client) {
            (Some(_), None) => Some(Arc::new(
                crate::models::client(config).map_err(KnowledgeError::Client)?,
            )),
            (_, client) => client,
        };
        Ok(Knowledge::with_client(store, config, client))
    }

    /// [`Knowledge::new`] with the model client given: without one, search is by full text
    /// alone whatever `knowledge.embedding_model` says.
    pub fn with_client(
        store: Store,
        config: &Config,
        client: Option<Arc<ModelClient>>,
    ) -> Knowledge {
        let embedder = match (&config.knowledge.embedding_model, client) {
            (Some(model), Some(client)) => Some((client, model.clone())),
            _ => None,
        };
        Knowledge {
            store,
            settings: config.knowledge.clone(),
            web: WebClient::new(&config.web, Arc::new(SystemLookup)),
            max_web_bytes: config.web.max_bytes,
            embedder,
            documents: Arc::new(DocumentsConfig::from_tools(
                &config.tools,
                maestro_tools_documents::ReaderCommand::current_exe(),
            )),
        }
    }

    /// Uses `web` for URLs (tests resolve names to loopback with it).
    pub fn with_web_client(mut self, web: WebClient) -> Knowledge {
        self.web = web;
        self
    }

    /// The largest document, in bytes (`knowledge.max_document_mb`).
    pub fn max_document_bytes(&self) -> u64 {
        self.settings.max_document_mb.saturating_mul(1024 * 1024)
    }

    /// Ingests a document: reads it, and unless its collection holds the same content already
    /// (then nothing is done), cuts it into chunks on its structure, embeds them when an
    /// embedding model is configured and stores it.
    pub async fn ingest(
        &self,
        request: IngestRequest,
        cancel: &CancellationToken,
    ) -> Result<IngestOutcome, KnowledgeError> {
        let collection = request
            .collection
            .clone()
            .unwrap_or_else(|| DEFAULT_COLLECTION.to_string());
        check_collection(&collection)?;
        let limit = self.max_document_bytes();
        let (name, bytes, format) = match request.source {
            DocumentSource::Bytes { name, bytes } => {
                if bytes.len() as u64 > limit {
                    return Err(KnowledgeError::TooLarge {
                        source_name: name,
                        limit_mb: self.settings.max_document_mb,
                    });
                }
                let format = reader_for_path(&name).ok_or_else(|| KnowledgeError::Format {
                    what: match std::path::Path::new(&name).extension() {
                        Some(ext) => format!(".{} files", ext.to_string_lossy()),
                        None => "files without an extension".to_string(),
                    },
                    source_name: name.clone(),
                })?;
                (name, bytes, format)
            }
            DocumentSource::Url(url) => {
                let fetched = self
                    .web
                    .get_bytes(&url, limit, cancel)
                    .await
                    .map_err(|source| KnowledgeError::Web {
                        url: url.clone(),
                        source,
                    })?;
                let Some(body) = fetched.body else {
                    return Err(KnowledgeError::TooLarge {
                        source_name: url,
                        limit_mb: self
                            .settings
                            .max_document_mb
                            .min(self.max_web_bytes / (1024 * 1024)),
                    });
                };
                let by_type = fetched
                    .content_type
                    .as_deref()
                    .and_then(reader_for_content_type);
                let by_path = url::Url::parse(&fetched.final_url)
                    .ok()
                    .and_then(|u| reader_for_path(u.path()));
                let format = by_type.or(by_path).ok_or_else(|| KnowledgeError::Format {
                    source_name: url.clone(),
                    what: fetched
                        .content_type
                        .clone()
                        .unwrap_or_else(|| "a response without a content type".into()),
                })?;
                (url, body, format)
            }
        };
        let hash = maestro_knowledge::content_hash(&bytes);
        if let Some(existing) = self
            .store
            .knowledge_document_by_hash(&request.owner, &collection, &hash)
            .await?
        {
            return Ok(IngestOutcome {
                document: existing.into(),
                created: false,
            });
        }
        let extracted: Extracted = match format {
            Reader::Builtin(format) => maestro_knowledge::extract(format, &bytes),
            Reader::Document(ext) => {
                let markdown = maestro_tools_documents::markdown_for_index(
                    &self.documents,
                    &format!("document.{ext}"),
                    bytes,
                    cancel,
                )
                .await
                .map_err(|source| KnowledgeError::Document {
                    source_name: name.clone(),
                    source,
                })?
                .unwrap_or_default();
                maestro_knowledge::extract(Format::Markdown, markdown.as_bytes())
            }
        }
        .map_err(|source| KnowledgeError::Extract {
            source_name: name.clone(),
            source,
        })?;
        let chunks = maestro_knowledge::chunk(
            &extracted.sections,
            ChunkOptions {
                max_chars: self.settings.chunk_chars,
                overlap_chars: self.settings.overlap_chars,
            },
        );
        if chunks.is_empty() {
            return Err(KnowledgeError::Empty(name));
        }
        let mut embeddings: Vec<Option<(Vec<u8>, String)>> = vec![None; chunks.len()];
        if let Some((client, model)) = &self.embedder {
            let texts: Vec<String> = chunks
                .iter()
                .map(|c| {
                    if c.location.is_empty() {
                        c.text.clone()
                    } else {
                        format!("{}\n\n{}", c.location, c.text)
                    }
                })
                .collect();
            let vectors = client.embeddings(model, &texts).await.map_err(|source| {
                KnowledgeError::Embeddings {
                    model: model.clone(),
                    source,
                }
            })?;
            for (slot, vector) in embeddings.iter_mut().zip(vectors) {
                *slot = Some((maestro_knowledge::encode_embedding(&vector), model.clone()));
            }
        }
        let title = request
            .title
            .filter(|t| !t.trim().is_empty())
            .or(extracted.title)
            .unwrap_or_else(|| default_title(&name));
        let document = NewDocument {
            owner: request.owner,
            collection,
            title,
            source: name,
            hash,
            created_by: request.created_by,
            chunks: chunks
                .into_iter()
                .zip(embeddings)
                .map(|(c, embedding)| NewChunk {
                    location: c.location,
                    text: c.text,
                    embedding,
                })
                .collect(),
        };
        let ingested = self.store.ingest_document(&document).await?;
        Ok(IngestOutcome {
            document: ingested.document.into(),
            created: ingested.created,
        })
    }

    /// The `k` best chunks for `query` among `reader`'s and the shared collections (only those
    /// named `collection` when given): full-text ranking, fused by reciprocal rank with cosine
    /// similarity when an embedding model is configured.
    pub async fn search(
        &self,
        reader: &str,
        query: &str,
        collection: Option<&str>,
        k: Option<usize>,
    ) -> Result<Vec<SearchHit>, KnowledgeError> {
        if query.trim().is_empty() {
            return Err(KnowledgeError::EmptyQuery);
        }
        let k = k.unwrap_or(DEFAULT_K).clamp(1, MAX_K);
        let scope = KnowledgeScope {
            reader: reader.to_string(),
            collection: collection.map(str::to_string),
        };
        let text_hits = self
            .store
            .search_knowledge_text(&scope, query, CANDIDATES.max(k))
            .await?;
        let Some((client, model)) = &self.embedder else {
            return Ok(text_hits
                .into_iter()
                .take(k)
                .map(|c| {
                    let score = c.score;
                    hit(c, score)
                })
                .collect());
        };
        let query_vector = client
            .embeddings(model, &[query.to_string()])
            .await
            .map_err(|source| KnowledgeError::Embeddings {
                model: model.clone(),
                source,
            })?
            .into_iter()
            .next()
            .unwrap_or_default();
        let stored = self
            .store
            .knowledge_embeddings(&scope, model, self.settings.max_vector_chunks)
            .await?;
        let mut similar: Vec<(i64, f32)> = stored
            .into_iter()
            .filter_map(|(id, bytes)| {
                let vector = maestro_knowledge::decode_embedding(&bytes)?;
                Some((id, maestro_knowledge::cosine(&query_vector, &vector)?))
            })
            .collect();
        similar.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        similar.truncate(CANDIDATES.max(k));
        let text_ids: Vec<i64> = text_hits.iter().map(|h| h.chunk_id).collect();
        let vector_ids: Vec<i64> = similar.iter().map(|(id, _)| *id).collect();
        let fused = maestro_knowledge::rrf(&[text_ids, vector_ids]);
        let mut known: std::collections::HashMap<i64, ChunkHit> =
            text_hits.into_iter().map(|h| (h.chunk_id, h)).collect();
        let missing: Vec<i64> = fused
            .iter()
            .take(k)
            .map(|(id, _)| *id)
            .filter(|id| !known.contains_key(id))
            .collect();
        for chunk in self.store.knowledge_chunks(&missing).await? {
            known.insert(chunk.chunk_id, chunk);
        }
        Ok(fused
            .into_iter()
            .take(k)
            .filter_map(|(id, score)| known.remove(&id).map(|c| hit(c, score)))
            .collect())
    }

    /// The documents of `reader`'s and the shared collections (only those named `collection`
    /// when given).
    pub async fn list(
        &self,
        reader: &str,
        collection: Option<&str>,
    ) -> Result<Vec<DocumentInfo>, KnowledgeError> {
        let scope = KnowledgeScope {
            reader: reader.to_string(),
            collection: collection.map(str::to_string),
        };
        Ok(self
            .store
            .knowledge_documents(&scope)
            .await?
            .into_iter()
            .map(DocumentInfo::from)
            .collect())
    }

    /// Deletes the document `id` with its chunks. A document of `actor`'s own collection may
    /// be deleted by them; a shared one by whoever ingested it, or by an admin (`admin`).
    /// Another user's document is not found.
    pub async fn delete(
        &self,
        actor: &str,
        admin: bool,
        id: &str,
    ) -> Result<DocumentInfo, KnowledgeError> {
        let Some(document) = self.store.knowledge_document(id).await? else {
            return Err(KnowledgeError::NotFound(id.to_string()));
        };
        let shared = document.owner == SHARED_OWNER;
        if !shared && document.owner != actor && !admin {
            return Err(KnowledgeError::NotFound(id.to_string()));
        }
        if shared && document.created_by != actor && !admin {
            return Err(KnowledgeError::Forbidden(id.to_string()));
        }
        self.store.delete_knowledge_document(id).await?;
        Ok(document.into())
    }
}

/// A title from a path or URL: its last segment.
fn default_title(name: &str) -> String {
    name.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(name)
        .to_string()
}
