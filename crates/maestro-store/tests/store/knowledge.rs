//! The knowledge base on both backends: 200 generated documents and 50 queries found by
//! full-text search alone (recall@5 at least 0.9), re-ingesting as a no-op, queries with
//! quotes, colons and operators, who reads which collection, listing and deleting.

use crate::common;

use std::collections::HashSet;

use maestro_knowledge::{ChunkOptions, Format, chunk, content_hash, extract};
use maestro_store::{KnowledgeScope, NewChunk, NewDocument, SHARED_OWNER, Store};
use pretty_assertions::assert_eq;

use common::Db;

/// A small deterministic generator (xorshift), so every run sees the same corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, from: &'a [String]) -> &'a str {
        &from[self.below(from.len())]
    }
}

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ne", "tu", "ra", "vo", "si", "pe", "du", "ga", "zo", "fi", "be", "xu", "ho",
    "ty", "qa", "we", "jo",
];

fn word(rng: &mut Rng, syllables: usize) -> String {
    (0..syllables)
        .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
        .collect()
}

/// The corpus: each document has words of its own (its topic), words a few documents share,
/// and filler common to all; a query asks with two topic words, two shared and two filler
/// words, in a random order with punctuation around them.
struct Corpus {
    documents: Vec<(String, String)>,
    queries: Vec<(usize, String)>,
}

fn corpus(documents: usize, queries: usize) -> Corpus {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seen = HashSet::new();
    let mut unique = |rng: &mut Rng, syllables: usize| loop {
        let w = word(rng, syllables);
        if seen.insert(w.clone()) {
            return w;
        }
    };
    let filler: Vec<String> = (0..150).map(|_| unique(&mut rng, 2)).collect();
    let shared: Vec<String> = (0..120).map(|_| unique(&mut rng, 3)).collect();
    let mut docs = Vec::new();
    let mut topics = Vec::new();
    for n in 0..documents {
        let topic: Vec<String> = (0..4).map(|_| unique(&mut rng, 4)).collect();
        let mut text = format!("# Report {n} on {}\n\n", topic[0]);
        for section in 0..3 {
            text.push_str(&format!("## Part {section}\n\n"));
            for sentence in 0..6 {
                let mut words: Vec<String> =
                    (0..10).map(|_| rng.pick(&filler).to_string()).collect();
                words.push(rng.pick(&shared).to_string());
                if (section * 6 + sentence) % 4 == 0 {
                    words.push(topic[rng.below(4)].clone());
                }
                text.push_str(&words.join(" "));
                text.push_str(". ");
            }
            text.push_str("\n\n");
        }
        topics.push(topic);
        docs.push((format!("Report {n}"), text));
    }
    let mut asked = Vec::new();
    for _ in 0..queries {
        let target = rng.below(documents);
        let text = &docs[target].1;
        let own_shared: Vec<String> = shared
            .iter()
            .filter(|w| text.contains(w.as_str()))
            .cloned()
            .collect();
        let mut words = [
            topics[target][rng.below(4)].clone(),
            topics[target][rng.below(4)].clone(),
            rng.pick(&own_shared).to_string(),
            rng.pick(&own_shared).to_string(),
            rng.pick(&filler).to_string(),
            rng.pick(&filler).to_string(),
        ];
        for i in (1..words.len()).rev() {
            words.swap(i, rng.below(i + 1));
        }
        asked.push((target, format!("{}?", words.join(", "))));
    }
    Corpus {
        documents: docs,
        queries: asked,
    }
}

fn new_document(owner: &str, collection: &str, title: &str, text: &str) -> NewDocument {
    let extracted = extract(Format::Markdown, text.as_bytes()).unwrap();
    let chunks = chunk(
        &extracted.sections,
        ChunkOptions {
            max_chars: 400,
            overlap_chars: 60,
        },
    );
    NewDocument {
        owner: owner.into(),
        collection: collection.into(),
        title: title.into(),
        source: format!("docs/{title}.md"),
        hash: content_hash(text.as_bytes()),
        created_by: owner.into(),
        chunks: chunks
            .into_iter()
            .map(|c| NewChunk {
                location: c.location,
                text: c.text,
                embedding: None,
            })
            .collect(),
    }
}

fn scope(reader: &str, collection: Option<&str>) -> KnowledgeScope {
    KnowledgeScope {
        reader: reader.into(),
        collection: collection.map(str::to_string),
    }
}

/// The first `k` distinct documents of a search, best first.
async fn top_documents(
    store: &Store,
    scope: &KnowledgeScope,
    query: &str,
    k: usize,
) -> Vec<String> {
    let hits = store.search_knowledge_text(scope, query, 50).await.unwrap();
    let mut documents: Vec<String> = Vec::new();
    for hit in hits {
        if !documents.contains(&hit.document_id) {
            documents.push(hit.document_id);
        }
    }
    documents.truncate(k);
    documents
}

async fn full_text_search_finds_generated_documents(db: Db) {
    let store = db.open().await;
    let corpus = corpus(200, 50);
    let mut ids = Vec::new();
    for (title, text) in &corpus.documents {
        let ingested = store
            .ingest_document(&new_document("ana@example.com", "reports", title, text))
            .await
            .unwrap();
        assert!(ingested.created);
        assert!(
            ingested.document.chunk_count >= 2,
            "{:?}",
            ingested.document
        );
        ids.push(ingested.document.id);
    }
    let reader = scope("ana@example.com", Some("reports"));
    let mut found = 0;
    for (target, query) in &corpus.queries {
        if top_documents(&store, &reader, query, 5)
            .await
            .contains(&ids[*target])
        {
            found += 1;
        }
    }
    let recall = f64::from(found) / corpus.queries.len() as f64;
    eprintln!("recall@5 by full-text search alone: {recall} ({found} of 50)");
    assert!(recall >= 0.9, "recall@5 is {recall} ({found} of 50)");

    // Ingesting the same content again stores nothing and gives the first document back.
    let (title, text) = &corpus.documents[7];
    let again = store
        .ingest_document(&new_document("ana@example.com", "reports", title, text))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.document.id, ids[7]);
    let listed = store.knowledge_documents(&reader).await.unwrap();
    assert_eq!(listed.len(), 200);
    assert_eq!(listed[7].chunk_count, again.document.chunk_count);
}

async fn queries_with_syntax_characters_never_fail(db: Db) {
    let store = db.open().await;
    store
        .ingest_document(&new_document(
            "ana@example.com",
            "notes",
            "colons",
            "# Ports\n\nThe proxy listens on port 8080: see NEAR the \"gateway\" config.\n",
        ))
        .await
        .unwrap();
    let reader = scope("ana@example.com", None);
    for query in [
        "\"gateway",
        "port:8080",
        "proxy AND (NEAR",
        "config* OR -listens ^see",
        "'; DROP TABLE knowledge_chunks; --",
        "\" : ( ) * ",
        "NOT",
    ] {
        let hits = store.search_knowledge_text(&reader, query, 5).await;
        assert!(hits.is_ok(), "{query:?}: {hits:?}");
    }
    let hits = store
        .search_knowledge_text(&reader, "\"gateway\": port?", 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].location, "Ports");
    assert!(hits[0].score > 0.0, "{hits:?}");
    assert!(
        store
            .search_knowledge_text(&reader, "\" : ( ) *", 5)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn collections_are_their_owners_or_shared(db: Db) {
    let store = db.open().await;
    let text = "# Runbook\n\nRestart the quokka service when it stalls.\n";
    let own = store
        .ingest_document(&new_document("ana@example.com", "ops", "runbook", text))
        .await
        .unwrap();
    let shared = store
        .ingest_document(&new_document(SHARED_OWNER, "ops", "runbook", text))
        .await
        .unwrap();
    // The same content in another collection is another document.
    assert!(shared.created);
    assert_ne!(own.document.id, shared.document.id);

    let ana = scope("ana@example.com", None);
    let bob = scope("bob@example.com", None);
    let ana_docs: Vec<String> = top_documents(&store, &ana, "quokka", 5).await;
    assert_eq!(ana_docs.len(), 2);
    let bob_docs = top_documents(&store, &bob, "quokka", 5).await;
    assert_eq!(bob_docs, vec![shared.document.id.clone()]);
    let bob_listed = store.knowledge_documents(&bob).await.unwrap();
    assert_eq!(bob_listed.len(), 1);
    assert_eq!(bob_listed[0].owner, SHARED_OWNER);
    assert_eq!(
        store
            .knowledge_documents(&scope("ana@example.com", Some("other")))
            .await
            .unwrap(),
        vec![]
    );

    // Deleting takes the document out of searches and lists.
    assert!(
        store
            .delete_knowledge_document(&own.document.id)
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete_knowledge_document(&own.document.id)
            .await
            .unwrap()
    );
    assert_eq!(
        top_documents(&store, &ana, "quokka", 5).await,
        vec![shared.document.id.clone()]
    );
    assert_eq!(
        store.knowledge_document(&own.document.id).await.unwrap(),
        None
    );
    // And it can be ingested again.
    let back = store
        .ingest_document(&new_document("ana@example.com", "ops", "runbook", text))
        .await
        .unwrap();
    assert!(back.created);
    assert_eq!(top_documents(&store, &ana, "quokka", 5).await.len(), 2);
}

async fn embeddings_are_kept_with_their_model(db: Db) {
    let store = db.open().await;
    let mut document = new_document(
        "ana@example.com",
        "v",
        "vectors",
        "# A\n\none\n\n# B\n\ntwo\n",
    );
    for (n, chunk) in document.chunks.iter_mut().enumerate() {
        let vector = [n as f32, 0.5, -1.25];
        chunk.embedding = Some((
            maestro_knowledge::encode_embedding(&vector),
            "embedder".into(),
        ));
    }
    store.ingest_document(&document).await.unwrap();
    let reader = scope("ana@example.com", Some("v"));
    let kept = store
        .knowledge_embeddings(&reader, "embedder", 100)
        .await
        .unwrap();
    assert_eq!(kept.len(), 2);
    assert_eq!(
        maestro_knowledge::decode_embedding(&kept[1].1).unwrap(),
        [1.0, 0.5, -1.25]
    );
    assert!(
        store
            .knowledge_embeddings(&reader, "other-model", 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .knowledge_embeddings(&reader, "embedder", 1)
            .await
            .unwrap()
            .len(),
        1
    );
    let chunks = store.knowledge_chunks(&[kept[1].0]).await.unwrap();
    assert_eq!(chunks[0].location, "B");
    assert_eq!(chunks[0].text, "two");
}

on_both_backends!(
    full_text_search_finds_generated_documents,
    queries_with_syntax_characters_never_fail,
    collections_are_their_owners_or_shared,
    embeddings_are_kept_with_their_model,
);
