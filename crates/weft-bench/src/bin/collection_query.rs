//! `query_collection` latency without embeddings: a collection of 10 000 chunks (1000
//! documents × 10 chunks of ~60 words from a 5000-word vocabulary), then 500 queries of 4
//! words, each the collection lookup and the ranked full-text search for the top 5, on
//! SQLite (a file) and PostgreSQL (a fresh database). Prints p50 / p99 / max per database.
#![allow(clippy::expect_used)]

use std::time::Instant;

use clap::Parser;
use weft_store::testing::TestDb;
use weft_store::{NewDocument, Store};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// `sqlite`, `postgres` or `both`.
    #[arg(long, default_value = "both")]
    db: String,
    #[arg(long, default_value_t = 1000)]
    documents: usize,
    #[arg(long, default_value_t = 500)]
    queries: usize,
}

const CHUNKS_PER_DOCUMENT: usize = 10;
const WORDS_PER_CHUNK: usize = 60;
const VOCABULARY: u64 = 5000;

/// A deterministic pseudo-random word stream.
struct Words(u64);

impl Words {
    fn next(&mut self) -> String {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Skewed towards common words, like text.
        let r = (self.0 >> 33) % VOCABULARY;
        let skewed = r * r / VOCABULARY;
        format!("w{skewed}x")
    }
}

async fn run(name: &str, store: &Store, args: &Args) {
    let collection = store
        .create_collection("bench", "corpus", "", false)
        .await
        .expect("create")
        .expect("new");
    let mut words = Words(42);
    let started = Instant::now();
    for d in 0..args.documents {
        let chunks = (0..CHUNKS_PER_DOCUMENT)
            .map(|_| {
                let text: Vec<String> = (0..WORDS_PER_CHUNK).map(|_| words.next()).collect();
                (text.join(" "), None)
            })
            .collect();
        store
            .add_document(
                &collection.id,
                NewDocument {
                    title: &format!("doc {d}"),
                    source: "",
                    metadata: "{}",
                    chunks,
                },
            )
            .await
            .expect("add");
    }
    // What autovacuum does soon after a bulk ingest: fresh statistics (PostgreSQL's search
    // reads the corpus's common words from them).
    store.analyze_chunks().await.expect("analyze");
    let ingest = started.elapsed();
    let mut times = Vec::with_capacity(args.queries);
    let mut found = 0usize;
    for _ in 0..args.queries {
        let query: Vec<String> = (0..4).map(|_| words.next()).collect();
        let query = query.join(" ");
        let t = Instant::now();
        let row = store
            .visible_collection("bench", "corpus")
            .await
            .expect("lookup")
            .expect("exists");
        let hits = store
            .search_chunks(std::slice::from_ref(&row.id), &query, 5)
            .await
            .expect("search");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        found += hits.len();
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name}: {} chunks ingested in {:.1} s; {} queries: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({:.1} hits each)",
        args.documents * CHUNKS_PER_DOCUMENT,
        ingest.as_secs_f64(),
        args.queries,
        at(0.5),
        at(0.99),
        times.last().copied().unwrap_or_default(),
        found as f64 / args.queries as f64
    );
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.db == "sqlite" || args.db == "both" {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = TestDb::sqlite(dir.path()).await.expect("sqlite");
        run("SQLite", &db.store, &args).await;
        db.drop_database().await.expect("drop");
    }
    if args.db == "postgres" || args.db == "both" {
        let db = TestDb::postgres()
            .await
            .expect("PostgreSQL must be running (127.0.0.1:5432, or WEFT_TEST_PG_URL)");
        run("PostgreSQL", &db.store, &args).await;
        db.drop_database().await.expect("drop");
    }
}
