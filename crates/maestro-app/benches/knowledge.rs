//! Knowledge-base search over 10,000 chunks: 1,000 generated documents of 10 sections each are
//! ingested, then 500 queries (three words of one section each) go through
//! `Knowledge::search`, the path `SearchKnowledge`, `maestro knowledge search` and the API take,
//! with full-text search alone (no embedding model). Each query is timed on its own; p50, p99
//! and the largest are printed, with the process's peak resident set. On SQLite, and on
//! PostgreSQL when `initdb` is installed (a throwaway cluster, as the tests start).
//!
//! ```text
//! cargo bench -p maestro-app --bench knowledge
//! ```
//!
//! Results: docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use maestro_app::{DocumentSource, IngestRequest, Knowledge};
use maestro_config::Config;
use maestro_store::{Store, StoreUrl};
use tokio_util::sync::CancellationToken;

const DOCUMENTS: usize = 1_000;
const SECTIONS: usize = 10;
const QUERIES: usize = 500;
const OWNER: &str = "bench@example.com";

/// A small deterministic generator (xorshift), so every run has the same corpus.
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
}

/// A vocabulary of 5,000 pronounceable words.
fn vocabulary() -> Vec<String> {
    const SYLLABLES: &[&str] = &[
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "qua", "ter", "lin", "dor",
        "fen", "gar", "hol", "jus", "mar", "nor",
    ];
    let mut words = Vec::new();
    for a in SYLLABLES {
        for b in SYLLABLES {
            for c in SYLLABLES {
                words.push(format!("{a}{b}{c}"));
                if words.len() == 5_000 {
                    return words;
                }
            }
        }
    }
    words
}

fn section_text(rng: &mut Rng, words: &[String]) -> Vec<String> {
    (0..90)
        .map(|_| words[rng.below(words.len())].clone())
        .collect()
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

async fn run(label: &str, store: Store) {
    let knowledge = Knowledge::with_client(store, &Config::default(), None);
    let words = vocabulary();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut sections: Vec<Vec<String>> = Vec::new();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let mut chunks = 0;
    for d in 0..DOCUMENTS {
        let mut text = format!("# Document {d}\n\n");
        for s in 0..SECTIONS {
            let body = section_text(&mut rng, &words);
            text.push_str(&format!("## Part {s}\n\n{}\n\n", body.join(" ")));
            sections.push(body);
        }
        let outcome = knowledge
            .ingest(
                IngestRequest {
                    source: DocumentSource::Bytes {
                        name: format!("doc-{d}.md"),
                        bytes: text.into_bytes(),
                    },
                    collection: None,
                    title: None,
                    owner: OWNER.into(),
                    created_by: OWNER.into(),
                },
                &cancel,
            )
            .await
            .unwrap();
        chunks += outcome.document.chunk_count;
    }
    let ingest = started.elapsed();
    let mut times: Vec<Duration> = Vec::with_capacity(QUERIES);
    let mut hits = 0;
    for _ in 0..QUERIES {
        let section = &sections[rng.below(sections.len())];
        let query = (0..3)
            .map(|_| section[rng.below(section.len())].as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let start = Instant::now();
        let found = knowledge
            .search(OWNER, &query, None, Some(5))
            .await
            .unwrap();
        times.push(start.elapsed());
        hits += usize::from(!found.is_empty());
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{label}: {chunks} chunks ingested in {:.1} s; {QUERIES} searches (k = 5, {hits} with hits): \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; peak RSS {:.1} MiB",
        ingest.as_secs_f64(),
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        peak_rss_mib()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreUrl::Sqlite {
        path: dir.path().join("maestro.db"),
    })
    .await
    .unwrap();
    run("SQLite", store).await;
    if maestro_testkit::PgCluster::bin_dir().is_some() {
        let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
            .await
            .unwrap();
        let store = Store::open(&StoreUrl::Postgres { url: cluster.url() })
            .await
            .unwrap();
        run("PostgreSQL", store).await;
        cluster.stop();
    } else {
        println!("PostgreSQL: skipped (no initdb; scripts/prerequisites.sh installs it)");
    }
}
