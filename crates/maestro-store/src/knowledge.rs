//! The knowledge base's tables: collections (a user's, or shared), documents stored once per
//! collection by content hash, and their chunks, searched by BM25 (SQLite FTS5) or PostgreSQL
//! full-text search, with optional embeddings kept beside each chunk. Chunking, hashing and
//! the fusion of rankings are the caller's (`maestro-knowledge`); this module stores and finds.

use sqlx::Any;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::rows::col;
use crate::store::{Backend, Store};

/// At most this many distinct words of a query are searched for.
pub const MAX_QUERY_TERMS: usize = 32;

/// The owner of a shared collection: collections with it are readable by everyone.
pub const SHARED_OWNER: &str = "";

/// A document to store, already cut into chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDocument {
    /// The collection's owner (a user's email), or [`SHARED_OWNER`].
    pub owner: String,
    /// The collection's name; it is made on first use.
    pub collection: String,
    /// The document's title.
    pub title: String,
    /// Where it came from: a workspace path or a URL.
    pub source: String,
    /// The SHA-256 of its content (lowercase hex): stored once per collection under it.
    pub hash: String,
    /// Who ingested it.
    pub created_by: String,
    /// Its chunks, in order.
    pub chunks: Vec<NewChunk>,
}

/// One chunk of a [`NewDocument`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewChunk {
    /// Its heading trail or page, empty when the document has no structure.
    pub location: String,
    /// Its text.
    pub text: String,
    /// Its embedding (each f32 in little-endian order) and the model that made it.
    pub embedding: Option<(Vec<u8>, String)>,
}

/// A stored document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredDocument {
    /// Its id (a UUIDv7).
    pub id: String,
    /// Its collection's name.
    pub collection: String,
    /// Its collection's owner, [`SHARED_OWNER`] for a shared one.
    pub owner: String,
    /// Its title.
    pub title: String,
    /// Where it came from.
    pub source: String,
    /// The SHA-256 of its content.
    pub hash: String,
    /// How many chunks it was cut into.
    pub chunk_count: i64,
    /// When it was stored (Unix milliseconds).
    pub created_at_ms: i64,
    /// Who ingested it.
    pub created_by: String,
}

/// What [`Store::ingest_document`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingested {
    /// The document as stored (the one stored before, when `created` is false).
    pub document: StoredDocument,
    /// False when the collection held this content already: nothing was written.
    pub created: bool,
}

/// Which collections a reader searches or lists: their own and the shared ones, only those
/// named `collection` when it is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnowledgeScope {
    /// The reader (a user's email).
    pub reader: String,
    /// Only the collections of this name.
    pub collection: Option<String>,
}

/// A chunk found by a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChunkHit {
    /// The chunk's id.
    pub chunk_id: i64,
    /// Its document's id.
    pub document_id: String,
    /// Its document's title.
    pub title: String,
    /// Its document's source.
    pub source: String,
    /// Its collection's name.
    pub collection: String,
    /// Its heading trail or page.
    pub location: String,
    /// Its text.
    pub text: String,
    /// The full-text score (higher is better); 0 for a chunk read by id.
    pub score: f64,
}

const DOCUMENT_COLUMNS: &str = "d.id, k.name AS collection, k.owner, d.title, d.source, d.hash, \
    d.chunk_count, d.created_at, d.created_by";

const HIT_COLUMNS: &str = "c.id AS chunk_id, d.id AS document_id, d.title, d.source, \
    k.name AS collection, c.location, c.text";

const FROM_CHUNKS: &str = "knowledge_chunks c \
    JOIN knowledge_documents d ON d.id = c.document_id \
    JOIN knowledge_collections k ON k.id = d.collection_id";

fn document_from_row(row: &AnyRow) -> StoreResult<StoredDocument> {
    Ok(StoredDocument {
        id: col(row, "id")?,
        collection: col(row, "collection")?,
        owner: col(row, "owner")?,
        title: col(row, "title")?,
        source: col(row, "source")?,
        hash: col(row, "hash")?,
        chunk_count: col(row, "chunk_count")?,
        created_at_ms: col(row, "created_at")?,
        created_by: col(row, "created_by")?,
    })
}

fn hit_from_row(row: &AnyRow, with_score: bool) -> StoreResult<ChunkHit> {
    Ok(ChunkHit {
        chunk_id: col(row, "chunk_id")?,
        document_id: col(row, "document_id")?,
        title: col(row, "title")?,
        source: col(row, "source")?,
        collection: col(row, "collection")?,
        location: col(row, "location")?,
        text: col(row, "text")?,
        score: if with_score { col(row, "score")? } else { 0.0 },
    })
}

/// The words of `query` (letters and digits), each safe to put in an FTS5 or a tsquery
/// expression: quotes, colons, parentheses and operators are never passed on.
pub fn query_terms(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The SQL that limits a query to `scope`, its parameters numbered from `first`.
fn scope_clause(scope: &KnowledgeScope, first: usize) -> String {
    let mut clause = format!("(k.owner = ${first} OR k.owner = '')");
    if scope.collection.is_some() {
        clause.push_str(&format!(" AND k.name = ${}", first + 1));
    }
    clause
}

impl Store {
    /// Stores `document` in its collection (made on first use), with its chunks, in one
    /// transaction; when the collection already holds a document with its hash, nothing is
    /// written and that document is returned with `created: false`.
    pub async fn ingest_document(&self, document: &NewDocument) -> StoreResult<Ingested> {
        let mut tx = self.begin_write().await?;
        let now = self.now_ms();
        sqlx::query::<Any>(
            "INSERT INTO knowledge_collections (id, owner, name, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (owner, name) DO NOTHING",
        )
        .bind(Uuid::now_v7().to_string())
        .bind(document.owner.clone())
        .bind(document.collection.clone())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("make a knowledge collection"))?;
        let row = sqlx::query::<Any>(
            "SELECT id FROM knowledge_collections WHERE owner = $1 AND name = $2",
        )
        .bind(document.owner.clone())
        .bind(document.collection.clone())
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::query("read a knowledge collection"))?;
        let collection_id: String = col(&row, "id")?;
        let id = Uuid::now_v7().to_string();
        let inserted = sqlx::query::<Any>(
            "INSERT INTO knowledge_documents \
             (id, collection_id, title, source, hash, chunk_count, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (collection_id, hash) DO NOTHING",
        )
        .bind(id.clone())
        .bind(collection_id.clone())
        .bind(document.title.clone())
        .bind(document.source.clone())
        .bind(document.hash.clone())
        .bind(document.chunks.len() as i64)
        .bind(now)
        .bind(document.created_by.clone())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("store a knowledge document"))?;
        let created = inserted.rows_affected() > 0;
        if created {
            for (ordinal, chunk) in document.chunks.iter().enumerate() {
                let (embedding, model) = match &chunk.embedding {
                    Some((bytes, model)) => (Some(bytes.clone()), Some(model.clone())),
                    None => (None, None),
                };
                sqlx::query::<Any>(
                    "INSERT INTO knowledge_chunks (document_id, collection_id, ordinal, \
                     location, text, embedding, embedding_model) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(id.clone())
                .bind(collection_id.clone())
                .bind(ordinal as i64)
                .bind(chunk.location.clone())
                .bind(chunk.text.clone())
                .bind(embedding)
                .bind(model)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::query("store a knowledge chunk"))?;
            }
        }
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents d \
             JOIN knowledge_collections k ON k.id = d.collection_id \
             WHERE d.collection_id = $1 AND d.hash = $2"
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(collection_id)
            .bind(document.hash.clone())
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::query("read a knowledge document back"))?;
        let stored = document_from_row(&row)?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a knowledge document"))?;
        Ok(Ingested {
            document: stored,
            created,
        })
    }

    /// The document of `owner`'s collection `collection` whose content hash is `hash`.
    pub async fn knowledge_document_by_hash(
        &self,
        owner: &str,
        collection: &str,
        hash: &str,
    ) -> StoreResult<Option<StoredDocument>> {
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents d \
             JOIN knowledge_collections k ON k.id = d.collection_id \
             WHERE k.owner = $1 AND k.name = $2 AND d.hash = $3"
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(owner.to_string())
            .bind(collection.to_string())
            .bind(hash.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("look a knowledge document up by hash"))?;
        row.as_ref().map(document_from_row).transpose()
    }

    /// The document `id`, whoever owns it.
    pub async fn knowledge_document(&self, id: &str) -> StoreResult<Option<StoredDocument>> {
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents d \
             JOIN knowledge_collections k ON k.id = d.collection_id WHERE d.id = $1"
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a knowledge document"))?;
        row.as_ref().map(document_from_row).transpose()
    }

    /// The documents `scope` reads, by collection then age.
    pub async fn knowledge_documents(
        &self,
        scope: &KnowledgeScope,
    ) -> StoreResult<Vec<StoredDocument>> {
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents d \
             JOIN knowledge_collections k ON k.id = d.collection_id WHERE {} \
             ORDER BY k.owner, k.name, d.created_at, d.id",
            scope_clause(scope, 1)
        );
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql)).bind(scope.reader.clone());
        if let Some(name) = &scope.collection {
            query = query.bind(name.clone());
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list knowledge documents"))?;
        rows.iter().map(document_from_row).collect()
    }

    /// Deletes the document `id` with its chunks (and their full-text entries); false when
    /// there is no such document.
    pub async fn delete_knowledge_document(&self, id: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        // The chunks first: their full-text entries go with them on every backend.
        sqlx::query::<Any>("DELETE FROM knowledge_chunks WHERE document_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("delete a knowledge document's chunks"))?;
        let done = sqlx::query::<Any>("DELETE FROM knowledge_documents WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("delete a knowledge document"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a knowledge document's deletion"))?;
        Ok(done.rows_affected() > 0)
    }

    /// The `limit` chunks of `scope` that match the words of `query` best by full-text search,
    /// best first: BM25 over FTS5 on SQLite, `ts_rank` over the `english` configuration on
    /// PostgreSQL. A chunk matches when it has any of the words; the query's punctuation and
    /// operators are ignored, so no query is a syntax error.
    pub async fn search_knowledge_text(
        &self,
        scope: &KnowledgeScope,
        query: &str,
        limit: usize,
    ) -> StoreResult<Vec<ChunkHit>> {
        let mut terms = query_terms(query);
        let mut seen = std::collections::HashSet::new();
        terms.retain(|t| seen.insert(t.clone()));
        terms.truncate(MAX_QUERY_TERMS);
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let rows = match self.backend() {
            Backend::Sqlite => {
                let expression = terms
                    .iter()
                    .map(|t| format!("\"{t}\""))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                let sql = format!(
                    "SELECT {HIT_COLUMNS}, -bm25(knowledge_fts, 1.0, 0.5) AS score \
                     FROM knowledge_fts \
                     JOIN knowledge_chunks c ON c.id = knowledge_fts.rowid \
                     JOIN knowledge_documents d ON d.id = c.document_id \
                     JOIN knowledge_collections k ON k.id = d.collection_id \
                     WHERE knowledge_fts MATCH $1 AND {} ORDER BY score DESC, c.id LIMIT {limit}",
                    scope_clause(scope, 2)
                );
                let mut q = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
                    .bind(expression)
                    .bind(scope.reader.clone());
                if let Some(name) = &scope.collection {
                    q = q.bind(name.clone());
                }
                q.fetch_all(&self.pool).await
            }
            Backend::Postgres => {
                let idf = self.postgres_idf(scope, &terms).await?;
                // BM25's weighting over PostgreSQL's ranking: each word's `ts_rank` (which grows
                // with how often the chunk has it, over the chunk's length) times the word's
                // inverse document frequency, so rare words count for more than common ones.
                let params = 1 + usize::from(scope.collection.is_some());
                let mut score = Vec::new();
                for (i, _) in terms.iter().enumerate() {
                    score.push(format!(
                        "{:.6} * ts_rank(c.tsv, to_tsquery('english', ${}), 1)",
                        idf[i],
                        params + 2 + i
                    ));
                }
                let sql = format!(
                    "SELECT {HIT_COLUMNS}, ({})::float8 AS score FROM {FROM_CHUNKS} \
                     WHERE c.tsv @@ to_tsquery('english', ${}) AND {} \
                     ORDER BY score DESC, c.id LIMIT {limit}",
                    score.join(" + "),
                    params + 1,
                    scope_clause(scope, 1)
                );
                let mut q = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql)).bind(scope.reader.clone());
                if let Some(name) = &scope.collection {
                    q = q.bind(name.clone());
                }
                q = q.bind(terms.join(" | "));
                for term in &terms {
                    q = q.bind(term.clone());
                }
                q.fetch_all(&self.pool).await
            }
        }
        .map_err(StoreError::query("search the knowledge base"))?;
        rows.iter().map(|row| hit_from_row(row, true)).collect()
    }

    /// BM25's inverse document frequency of each of `terms` among the chunks of `scope`:
    /// `ln(1 + (N - n + 0.5) / (n + 0.5))`, N chunks of which n have the word.
    async fn postgres_idf(
        &self,
        scope: &KnowledgeScope,
        terms: &[String],
    ) -> StoreResult<Vec<f64>> {
        let params = 1 + usize::from(scope.collection.is_some());
        let clause = scope_clause(scope, 1);
        // Each word's count is its own subquery, so that it is answered from the GIN index (a
        // bitmap of the chunks with the word), and N comes from the documents' chunk counts: a
        // filter evaluated on every chunk's `tsv` would read the whole table for each search.
        let counts: Vec<String> = (0..terms.len())
            .map(|i| {
                format!(
                    "(SELECT COUNT(*) FROM {FROM_CHUNKS} \
                      WHERE c.tsv @@ to_tsquery('english', ${}) AND {clause}) AS t{i}",
                    params + 1 + i
                )
            })
            .collect();
        let sql = format!(
            "SELECT (SELECT COALESCE(SUM(d.chunk_count), 0) FROM knowledge_documents d \
                     JOIN knowledge_collections k ON k.id = d.collection_id WHERE {clause})::BIGINT \
                     AS n, {}",
            counts.join(", "),
        );
        let mut q = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql)).bind(scope.reader.clone());
        if let Some(name) = &scope.collection {
            q = q.bind(name.clone());
        }
        for term in terms {
            q = q.bind(term.clone());
        }
        let row = q
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::query("count the knowledge base's words"))?;
        let total = col::<i64>(&row, "n")? as f64;
        (0..terms.len())
            .map(|i| {
                let n = col::<i64>(&row, &format!("t{i}"))? as f64;
                Ok((1.0 + (total - n + 0.5) / (n + 0.5)).ln())
            })
            .collect()
    }

    /// The embeddings by `model` of the chunks `scope` reads, at most `cap` of them (the
    /// oldest), as `(chunk id, bytes)`.
    pub async fn knowledge_embeddings(
        &self,
        scope: &KnowledgeScope,
        model: &str,
        cap: usize,
    ) -> StoreResult<Vec<(i64, Vec<u8>)>> {
        let sql = format!(
            "SELECT c.id AS chunk_id, c.embedding FROM {FROM_CHUNKS} \
             WHERE c.embedding_model = $1 AND c.embedding IS NOT NULL AND {} \
             ORDER BY c.id LIMIT {cap}",
            scope_clause(scope, 2)
        );
        let mut q = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(model.to_string())
            .bind(scope.reader.clone());
        if let Some(name) = &scope.collection {
            q = q.bind(name.clone());
        }
        let rows = q
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("read the knowledge base's embeddings"))?;
        rows.iter()
            .map(|row| Ok((col(row, "chunk_id")?, col(row, "embedding")?)))
            .collect()
    }

    /// The chunks `ids`, with their documents (score 0), in no particular order.
    pub async fn knowledge_chunks(&self, ids: &[i64]) -> StoreResult<Vec<ChunkHit>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!("SELECT {HIT_COLUMNS} FROM {FROM_CHUNKS} WHERE c.id IN ({list})");
        let rows = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("read knowledge chunks"))?;
        rows.iter().map(|row| hit_from_row(row, false)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_terms_keep_only_words() {
        assert_eq!(
            query_terms("\"quoted\" col:on (a OR b*) NEAR/2 -x ^y É"),
            [
                "quoted", "col", "on", "a", "or", "b", "near", "2", "x", "y", "é"
            ]
        );
        assert!(query_terms("\" : * ( )").is_empty());
    }
}
