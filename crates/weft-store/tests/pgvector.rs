//! The pgvector branch, against a real PostgreSQL with the extension (`scripts/pgvector.sh`):
//! migrating creates the extension and the vector column, fills it from embeddings kept before,
//! new documents' embeddings land in it, and the database ranks chunks by cosine distance
//! (only within the asked collections, only vectors of the query's dimensions). On a server
//! without the extension the store says so and the caller compares in process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use weft_store::testing::{pgvector_admin_url, TestDb};
use weft_store::{NewDocument, Store};

fn document<'a>(title: &'a str, vectors: &[Vec<f32>]) -> NewDocument<'a> {
    NewDocument {
        title,
        source: "",
        metadata: "{}",
        chunks: vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("{title} chunk {i}"), Some(v.clone())))
            .collect(),
    }
}

async fn texts(store: &Store, seqs: &[i64]) -> Vec<String> {
    let hits = store.chunks_by_id(seqs).await.unwrap();
    seqs.iter()
        .map(|s| hits.iter().find(|h| h.chunk == *s).unwrap().text.clone())
        .collect()
}

#[tokio::test]
async fn the_database_ranks_chunks_by_cosine_distance() {
    let db = TestDb::postgres_at(&pgvector_admin_url()).await.unwrap();
    let store = &db.store;
    assert!(store.vectors_in_database().await.unwrap());
    let mine = store
        .create_collection("ada", "shapes", "", false)
        .await
        .unwrap()
        .unwrap();
    let other = store
        .create_collection("bob", "shapes", "", false)
        .await
        .unwrap()
        .unwrap();
    store
        .add_document(
            &mine.id,
            document(
                "axes",
                &[
                    vec![1.0, 0.0, 0.0],
                    vec![0.0, 1.0, 0.0],
                    vec![0.7, 0.7, 0.0],
                ],
            ),
        )
        .await
        .unwrap();
    // Nearer than anything of mine, but another collection's.
    store
        .add_document(&other.id, document("theirs", &[vec![0.0, 0.0, 1.0]]))
        .await
        .unwrap();
    // Another model's vectors (other dimensions) are left out, not an error.
    store
        .add_document(&mine.id, document("old model", &[vec![0.0, 0.0, 1.0, 0.0]]))
        .await
        .unwrap();

    let query = [0.1, 0.0, 0.9];
    let near = store
        .nearest_chunks(std::slice::from_ref(&mine.id), &query, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        texts(store, &near).await,
        ["axes chunk 0", "axes chunk 2", "axes chunk 1"]
    );
    let near = store
        .nearest_chunks(&[mine.id.clone(), other.id.clone()], &query, 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(texts(store, &near).await, ["theirs chunk 0"]);
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn embeddings_kept_before_pgvector_are_copied_into_the_vector_column() {
    let db = TestDb::postgres_at(&pgvector_admin_url()).await.unwrap();
    let collection = db
        .store
        .create_collection("ada", "old", "", false)
        .await
        .unwrap()
        .unwrap();
    db.store
        .add_document(
            &collection.id,
            document("before", &[vec![0.0, 1.0], vec![1.0, 0.0]]),
        )
        .await
        .unwrap();
    // As if they were written before the extension existed: the column emptied.
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    sqlx::query("UPDATE chunks SET embedding_vector = NULL")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let raw = Store::connect(&db.url).await.unwrap();
    raw.migrate().await.unwrap();
    let near = raw
        .nearest_chunks(std::slice::from_ref(&collection.id), &[1.0, 0.1], 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        texts(&raw, &near).await,
        ["before chunk 1", "before chunk 0"]
    );
    raw.close().await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn without_the_extension_the_caller_compares_in_process() {
    let db = TestDb::postgres().await.unwrap();
    assert!(!db.store.vectors_in_database().await.unwrap());
    assert_eq!(
        db.store
            .nearest_chunks(&["c".to_owned()], &[1.0], 3)
            .await
            .unwrap(),
        None
    );
    db.drop_database().await.unwrap();
}
