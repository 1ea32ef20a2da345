//! The knowledge base's tools: `IngestDocument`, `SearchKnowledge`, `ListDocuments`,
//! `DeleteDocument`. They need the store and the model client, so they are built here, per run,
//! for the job's owner: a run reads its owner's collections and the shared ones, and ingests
//! into its owner's.

use std::sync::Arc;

use maestro_tools::{Registry, Tool, ToolContext, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::access::LOCAL_ACTOR;
use crate::knowledge::{DocumentSource, IngestRequest, Knowledge, KnowledgeError};

/// The names of the knowledge base's tools.
pub const KNOWLEDGE_TOOLS: &[&str] = &[
    "IngestDocument",
    "SearchKnowledge",
    "ListDocuments",
    "DeleteDocument",
];

/// Registers the knowledge tools in `registry`, acting for `owner` (a job without an owner acts
/// for [`LOCAL_ACTOR`]).
pub(crate) fn register(registry: &mut Registry, knowledge: Arc<Knowledge>, owner: Option<&str>) {
    for tool in knowledge_tools(knowledge, owner) {
        registry.register(tool);
    }
}

/// The knowledge tools over `knowledge`, acting for `owner` (a job without an owner acts for
/// [`LOCAL_ACTOR`]): they read `owner`'s and the shared collections and ingest into `owner`'s.
pub fn knowledge_tools(
    knowledge: impl Into<Arc<Knowledge>>,
    owner: Option<&str>,
) -> Vec<Arc<dyn Tool>> {
    let shared = Arc::new(Bound {
        knowledge: knowledge.into(),
        owner: owner.unwrap_or(LOCAL_ACTOR).to_string(),
    });
    vec![
        Arc::new(IngestDocument(Arc::clone(&shared))),
        Arc::new(SearchKnowledge(Arc::clone(&shared))),
        Arc::new(ListDocuments(Arc::clone(&shared))),
        Arc::new(DeleteDocument(shared)),
    ]
}

/// The knowledge tools' specs (name, description, input schema), for listings made without a
/// store (`maestro tools list`).
pub fn knowledge_tool_specs() -> Vec<maestro_protocol::ToolSpec> {
    fn spec<T: TypedTool>() -> maestro_protocol::ToolSpec {
        maestro_tools::input::spec_for::<T::Input>(T::NAME, T::DESCRIPTION)
    }
    vec![
        spec::<IngestDocument>(),
        spec::<SearchKnowledge>(),
        spec::<ListDocuments>(),
        spec::<DeleteDocument>(),
    ]
}

/// The knowledge base and whom the tools act for.
#[derive(Debug)]
struct Bound {
    knowledge: Arc<Knowledge>,
    owner: String,
}

fn failed(error: KnowledgeError) -> ToolOutput {
    ToolOutput::error(crate::errors::error_chain(&error))
}

fn json(value: &impl serde::Serialize) -> ToolOutput {
    match serde_json::to_string_pretty(value) {
        Ok(text) => ToolOutput::ok(text),
        Err(e) => ToolOutput::error(format!("the answer cannot be written as JSON: {e}")),
    }
}

/// `IngestDocument`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct IngestInput {
    /// A workspace file (markdown `.md`, text `.txt`, HTML `.html`) or an `http(s)://` URL.
    source: String,
    /// The collection to put it in (default `default`).
    #[serde(default)]
    collection: Option<String>,
    /// Its title (default: the document's own heading or title, else its file name).
    #[serde(default)]
    title: Option<String>,
}

#[derive(Debug)]
struct IngestDocument(Arc<Bound>);

impl TypedTool for IngestDocument {
    type Input = IngestInput;
    const NAME: &'static str = "IngestDocument";
    const DESCRIPTION: &'static str = "Add a workspace file (md, txt, html, pdf, docx, pptx, xlsx, xls, ods, csv) or a URL to the knowledge base, cut into chunks on its headings or pages; the same content again is a no-op.";

    async fn run(&self, ctx: &ToolContext, input: IngestInput) -> ToolOutput {
        let is_url = input.source.starts_with("http://") || input.source.starts_with("https://");
        let source = if is_url {
            DocumentSource::Url(input.source.clone())
        } else {
            match read_workspace_file(ctx, &input.source, self.0.knowledge.max_document_bytes())
                .await
            {
                Ok(bytes) => DocumentSource::Bytes {
                    name: input.source.clone(),
                    bytes,
                },
                Err(message) => return ToolOutput::error(message),
            }
        };
        let request = IngestRequest {
            source,
            collection: input.collection,
            title: input.title,
            owner: self.0.owner.clone(),
            created_by: self.0.owner.clone(),
        };
        match self.0.knowledge.ingest(request, &ctx.cancel).await {
            Ok(outcome) => json(&outcome),
            Err(e) => failed(e),
        }
    }
}

/// Reads a workspace file of at most `limit` bytes.
async fn read_workspace_file(ctx: &ToolContext, rel: &str, limit: u64) -> Result<Vec<u8>, String> {
    let file = maestro_tools::workspace_file::existing_file(&ctx.workspace, rel, "IngestDocument")
        .await
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    let read = file
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("{rel} cannot be read: {e}"))?;
    if read as u64 > limit {
        return Err(format!(
            "{rel} is larger than {} MiB (knowledge.max_document_mb); split it or raise the limit",
            limit / (1024 * 1024)
        ));
    }
    Ok(bytes)
}

/// `SearchKnowledge`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchInput {
    /// What to look for, in plain words.
    query: String,
    /// Only this collection (default: every collection you can read).
    #[serde(default)]
    collection: Option<String>,
    /// How many results (default 5, at most 50).
    #[serde(default)]
    k: Option<usize>,
}

#[derive(Debug)]
struct SearchKnowledge(Arc<Bound>);

impl TypedTool for SearchKnowledge {
    type Input = SearchInput;
    const NAME: &'static str = "SearchKnowledge";
    const DESCRIPTION: &'static str = "Search the knowledge base (full text, fused with embeddings when configured): each result gives the document, the chunk's text, its heading or page, and the score.";

    async fn run(&self, _ctx: &ToolContext, input: SearchInput) -> ToolOutput {
        match self
            .0
            .knowledge
            .search(
                &self.0.owner,
                &input.query,
                input.collection.as_deref(),
                input.k,
            )
            .await
        {
            Ok(hits) => json(&hits),
            Err(e) => failed(e),
        }
    }
}

/// `ListDocuments`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListInput {
    /// Only this collection (default: every collection you can read).
    #[serde(default)]
    collection: Option<String>,
}

#[derive(Debug)]
struct ListDocuments(Arc<Bound>);

impl TypedTool for ListDocuments {
    type Input = ListInput;
    const NAME: &'static str = "ListDocuments";
    const DESCRIPTION: &'static str =
        "List the knowledge base's documents: id, title, source, collection and chunk count.";

    async fn run(&self, _ctx: &ToolContext, input: ListInput) -> ToolOutput {
        match self
            .0
            .knowledge
            .list(&self.0.owner, input.collection.as_deref())
            .await
        {
            Ok(documents) => json(&documents),
            Err(e) => failed(e),
        }
    }
}

/// `DeleteDocument`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeleteInput {
    /// The document's id, as `ListDocuments` gives it.
    id: String,
}

#[derive(Debug)]
struct DeleteDocument(Arc<Bound>);

impl TypedTool for DeleteDocument {
    type Input = DeleteInput;
    const NAME: &'static str = "DeleteDocument";
    const DESCRIPTION: &'static str =
        "Delete a document (and its chunks) from the knowledge base by its id.";

    async fn run(&self, _ctx: &ToolContext, input: DeleteInput) -> ToolOutput {
        match self
            .0
            .knowledge
            .delete(&self.0.owner, false, &input.id)
            .await
        {
            Ok(document) => json(&serde_json::json!({"deleted": document})),
            Err(e) => failed(e),
        }
    }
}
