//! `maestro knowledge ingest|search|list|rm`: the knowledge base from the shell, through the
//! same use cases as the tools and the server.

use anyhow::{Context, anyhow};
use maestro_app::{DocumentSource, IngestRequest, Knowledge, LOCAL_ACTOR, SHARED_OWNER};
use tokio_util::sync::CancellationToken;

use crate::common::block_on;
use crate::flags::StoreArgs;
use crate::term::printable;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Add a file (md, txt, html, pdf, docx, pptx, xlsx, xls, ods, csv) or an http(s) URL to
    /// the knowledge base; the same content again is a no-op. Prints the document's id (and `unchanged` when it was there already).
    Ingest {
        /// A file path or an `http://` / `https://` URL.
        source: String,
        /// The collection (default `default`).
        #[arg(long)]
        collection: Option<String>,
        /// The title (default: the document's own, else its file name).
        #[arg(long)]
        title: Option<String>,
        /// Put it in a shared collection, readable by everyone.
        #[arg(long)]
        shared: bool,
        #[command(flatten)]
        who: Who,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Search the collections you can read: full text, fused with embeddings when
    /// `knowledge.embedding_model` is set.
    Search {
        /// What to look for.
        query: String,
        /// Only this collection.
        #[arg(long)]
        collection: Option<String>,
        /// How many results (default 5, at most 50).
        #[arg(short, long)]
        k: Option<usize>,
        #[command(flatten)]
        who: Who,
        /// One JSON object per result per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the documents you can read: id, collection, chunks, title, source.
    List {
        /// Only this collection.
        #[arg(long)]
        collection: Option<String>,
        #[command(flatten)]
        who: Who,
        /// One JSON object per document per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete a document and its chunks.
    Rm {
        /// The document's id.
        id: String,
        #[command(flatten)]
        who: Who,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Whom the command acts for.
#[derive(Debug, clap::Args)]
pub(crate) struct Who {
    /// Act for this user (an email): their collections and the shared ones. Default: `local`,
    /// the owner of what the CLI and jobs without an owner keep.
    #[arg(long)]
    owner: Option<String>,
}

impl Who {
    fn owner(&self) -> String {
        self.owner
            .clone()
            .unwrap_or_else(|| LOCAL_ACTOR.to_string())
    }
}

fn source_of(source: &str, limit: u64) -> anyhow::Result<DocumentSource> {
    if source.starts_with("http://") || source.starts_with("https://") {
        return Ok(DocumentSource::Url(source.to_string()));
    }
    let size = std::fs::metadata(source)
        .with_context(|| format!("{source} cannot be read"))?
        .len();
    if size > limit {
        return Err(anyhow!(
            "{source} is larger than {} MiB; raise `knowledge.max_document_mb` in \
             .maestro/config.yaml, or split the document",
            limit / (1024 * 1024)
        ));
    }
    let bytes = std::fs::read(source).with_context(|| format!("{source} cannot be read"))?;
    Ok(DocumentSource::Bytes {
        name: source.to_string(),
        bytes,
    })
}

pub(crate) fn run(command: Command) -> anyhow::Result<u8> {
    block_on(async move {
        match command {
            Command::Ingest {
                source,
                collection,
                title,
                shared,
                who,
                json,
                store,
            } => {
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                let knowledge = Knowledge::new(store, &config, None)?;
                let source = source_of(&source, knowledge.max_document_bytes())?;
                let owner = who.owner();
                let outcome = knowledge
                    .ingest(
                        IngestRequest {
                            source,
                            collection,
                            title,
                            owner: if shared {
                                SHARED_OWNER.to_string()
                            } else {
                                owner.clone()
                            },
                            created_by: owner,
                        },
                        &CancellationToken::new(),
                    )
                    .await?;
                if json {
                    println!("{}", serde_json::to_string(&outcome)?);
                } else if outcome.created {
                    println!(
                        "{}  {} chunks",
                        outcome.document.id, outcome.document.chunk_count
                    );
                } else {
                    println!("{}  unchanged", outcome.document.id);
                }
                Ok(0)
            }
            Command::Search {
                query,
                collection,
                k,
                who,
                json,
                store,
            } => {
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let knowledge = Knowledge::new(store, &config, None)?;
                let hits = knowledge
                    .search(&who.owner(), &query, collection.as_deref(), k)
                    .await?;
                for hit in &hits {
                    if json {
                        println!("{}", serde_json::to_string(hit)?);
                    } else {
                        let place = if hit.location.is_empty() {
                            String::new()
                        } else {
                            format!(" § {}", hit.location)
                        };
                        println!(
                            "{:.4}  {}{}  ({}, {})",
                            hit.score,
                            printable(&hit.title),
                            printable(&place),
                            printable(&hit.source),
                            hit.document_id
                        );
                        for line in hit.text.lines().filter(|l| !l.trim().is_empty()).take(3) {
                            println!("    {}", printable(line));
                        }
                    }
                }
                Ok(0)
            }
            Command::List {
                collection,
                who,
                json,
                store,
            } => {
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let knowledge = Knowledge::new(store, &config, None)?;
                let documents = knowledge.list(&who.owner(), collection.as_deref()).await?;
                if json {
                    for d in &documents {
                        println!("{}", serde_json::to_string(d)?);
                    }
                } else if !documents.is_empty() {
                    println!("ID  COLLECTION  CHUNKS  TITLE  SOURCE");
                    for d in &documents {
                        let collection = if d.shared {
                            format!("{} (shared)", d.collection)
                        } else {
                            d.collection.clone()
                        };
                        println!(
                            "{}  {}  {}  {}  {}",
                            d.id,
                            printable(&collection),
                            d.chunk_count,
                            printable(&d.title),
                            printable(&d.source)
                        );
                    }
                }
                Ok(0)
            }
            Command::Rm { id, who, store } => {
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                let knowledge = Knowledge::new(store, &config, None)?;
                // Whoever holds the store on this machine administers it, as `maestro users` does.
                let deleted = knowledge.delete(&who.owner(), true, &id).await?;
                println!("deleted {}  {}", deleted.id, printable(&deleted.title));
                Ok(0)
            }
        }
    })
}
