//! Knowledge collections on PostgreSQL and SQLite alike: ingest a small corpus of distinct
//! facts, find the right chunk first by full text, keep owners apart (shared ones visible),
//! and delete everything under a collection, its search index included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use weft_store::testing::TestDb;
use weft_store::{NewDocument, Store};

const PLACES: [&str; 30] = [
    "Aldoria",
    "Brennmark",
    "Caldera",
    "Dunmore",
    "Eskerfield",
    "Farrowgate",
    "Glimmerton",
    "Hollowmere",
    "Ironvale",
    "Juniper",
    "Kestrel",
    "Larkspur",
    "Moonfall",
    "Northwick",
    "Oakhaven",
    "Pinecrest",
    "Quarrytown",
    "Ravensholm",
    "Stonebridge",
    "Thornbury",
    "Umberlee",
    "Valewood",
    "Westmarch",
    "Yarrowby",
    "Zephyrine",
    "Ashcombe",
    "Briarwood",
    "Copperhill",
    "Driftmoor",
    "Emberlyn",
];
const FOODS: [&str; 30] = [
    "turnips",
    "lentils",
    "quinces",
    "barley",
    "walnuts",
    "parsnips",
    "apricots",
    "chestnuts",
    "mussels",
    "radishes",
    "figs",
    "oats",
    "plums",
    "herring",
    "pears",
    "cabbages",
    "dates",
    "almonds",
    "leeks",
    "cherries",
    "millet",
    "olives",
    "beets",
    "sorrel",
    "peas",
    "kale",
    "melons",
    "rye",
    "sardines",
    "gooseberries",
];

fn fact(i: usize) -> String {
    // One distinct fact, between two paragraphs every document shares in some form.
    format!(
        "An entry of the atlas, number {i}. Weaving towns keep records of trade.\n\n\
         The weavers of {place} eat {food} every winter, and they trade cloth for it with \
         their neighbours.\n\nWeavers eat well in winter everywhere; cloth is worth more \
         when the rivers freeze.",
        place = PLACES[i],
        food = FOODS[i]
    )
}

async fn collections(store: &Store) {
    let col = store
        .create_collection("alice", "atlas", "facts about places", false)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .create_collection("alice", "atlas", "", false)
        .await
        .unwrap()
        .is_none());
    for (i, place) in PLACES.iter().enumerate() {
        let text = fact(i);
        let chunks = text.split("\n\n").map(|c| (c.to_owned(), None)).collect();
        store
            .add_document(
                &col.id,
                NewDocument {
                    title: place,
                    source: "",
                    metadata: "{}",
                    chunks,
                },
            )
            .await
            .unwrap();
    }
    let docs = store.documents(&col.id).await.unwrap();
    assert_eq!(docs.len(), 30);
    assert!(docs.iter().all(|d| d.chunks == 3));

    // The right chunk comes first, with stemming (weaver/weavers, eats/eat).
    for (i, place) in PLACES.iter().enumerate() {
        let query = format!("What does a weaver in {place} eat?");
        let hits = store
            .search_chunks(std::slice::from_ref(&col.id), &query, 5)
            .await
            .unwrap();
        assert!(!hits.is_empty(), "{query}");
        assert_eq!(hits[0].title, *place, "{query}: {hits:?}");
        assert!(hits[0].text.contains(FOODS[i]), "{:?}", hits[0]);
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    }
    let by_food = store
        .search_chunks(std::slice::from_ref(&col.id), "who eats gooseberries", 3)
        .await
        .unwrap();
    assert_eq!(by_food[0].title, "Emberlyn");
    assert!(store
        .search_chunks(
            std::slice::from_ref(&col.id),
            "\"); DROP TABLE chunks; --",
            3
        )
        .await
        .unwrap()
        .is_empty());

    // Owners are kept apart; a shared collection is visible to everyone, own names first.
    assert!(store
        .own_collection("bob", "atlas")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .visible_collection("bob", "atlas")
        .await
        .unwrap()
        .is_none());
    let shared = store
        .create_collection("carol", "atlas", "carol's", true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .visible_collection("bob", "atlas")
            .await
            .unwrap()
            .unwrap()
            .id,
        shared.id
    );
    assert_eq!(
        store
            .visible_collection("alice", "atlas")
            .await
            .unwrap()
            .unwrap()
            .id,
        col.id
    );
    let names: Vec<(String, String)> = store
        .visible_collections("alice")
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.owner, c.name))
        .collect();
    assert_eq!(
        names,
        [
            ("alice".into(), "atlas".into()),
            ("carol".into(), "atlas".into())
        ]
    );

    // Embeddings are kept as given.
    let other = store
        .create_collection("alice", "vectors", "", false)
        .await
        .unwrap()
        .unwrap();
    store
        .add_document(
            &other.id,
            NewDocument {
                title: "v",
                source: "https://example.org/v",
                metadata: "{\"lang\":\"en\"}",
                chunks: vec![("one".into(), Some(vec![1.0])), ("two".into(), None)],
            },
        )
        .await
        .unwrap();
    let vectors = store
        .chunk_embeddings(std::slice::from_ref(&other.id))
        .await
        .unwrap();
    assert_eq!(vectors.len(), 1);
    assert_eq!(vectors[0].1, "AACAPw==");
    let chunks = store.chunks_by_id(&[vectors[0].0]).await.unwrap();
    assert_eq!(
        (chunks[0].text.as_str(), chunks[0].title.as_str()),
        ("one", "v")
    );

    // Deleting a collection takes its documents, chunks and index entries with it.
    assert!(store.delete_collection("alice", "atlas").await.unwrap());
    assert!(!store.delete_collection("alice", "atlas").await.unwrap());
    assert!(store.documents(&col.id).await.unwrap().is_empty());
    assert!(store
        .search_chunks(std::slice::from_ref(&col.id), "weavers Aldoria winter", 5)
        .await
        .unwrap()
        .is_empty());
    let left: i64 = sqlx_count(store).await;
    assert_eq!(left, 2, "only the other collection's chunks are left");
}

async fn sqlx_count(store: &Store) -> i64 {
    store.count_chunks().await.unwrap()
}

#[tokio::test]
async fn collections_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    collections(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn collections_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    collections(&db.store).await;
    db.drop_database().await.unwrap();
}

/// A word in most chunks does not drown a rare one: the chunk holding the rare word comes
/// first, a query whose rare word matches nothing still finds the common word's chunks, and
/// (on PostgreSQL, once the table is analysed) the common word is known as such.
async fn common_words(store: &Store, postgres: bool) {
    let collection = store
        .create_collection("ada", "looms", "", false)
        .await
        .unwrap()
        .unwrap();
    for i in 0..60 {
        let text = if i == 41 {
            format!("Entry {i}: the loom was dyed with saffron.")
        } else {
            format!("Entry {i}: a loom, another loom, the loom of house {i}.")
        };
        let document = NewDocument {
            title: &format!("entry {i}"),
            source: "",
            metadata: "{}",
            chunks: vec![(text, None)],
        };
        store.add_document(&collection.id, document).await.unwrap();
    }
    store.analyze_chunks().await.unwrap();
    let common = store.common_terms().await;
    if postgres {
        assert!(common.split(' ').any(|w| w == "loom"), "{common}");
    } else {
        assert_eq!(&*common, "");
    }
    let ids = [collection.id.clone()];
    let hits = store.search_chunks(&ids, "loom saffron", 5).await.unwrap();
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[0].title, "entry 41", "{hits:?}");
    let hits = store
        .search_chunks(&ids, "loom unheardof", 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 5, "{hits:?}");
    let hits = store.search_chunks(&ids, "saffron", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
}

#[tokio::test]
async fn common_words_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    common_words(&db.store, true).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn common_words_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    common_words(&db.store, false).await;
    db.drop_database().await.unwrap();
}
