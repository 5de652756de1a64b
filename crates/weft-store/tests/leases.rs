//! Turn leases on both databases: a turn starts with its lease, its owner renews it, nobody
//! else can take it until it expires, the first taker wins, and a fence keeps the old owner's
//! writes out once it is taken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::time::Duration;

use weft_store::testing::{is_connection_lost, new_thread, stalled_batch, TestDb};
use weft_store::{
    now_ms, ItemRow, LeaseRow, NewMessage, Store, StoreError, StoreSettings, WriteOp,
};

fn message(id: &str, status: &str) -> NewMessage {
    message_in("lt", id, status)
}

fn message_in(thread_id: &str, id: &str, status: &str) -> NewMessage {
    NewMessage {
        id: id.into(),
        thread_id: thread_id.into(),
        role: "assistant".into(),
        content: json!(""),
        execution_tree: None,
        permission_mode: None,
        status: status.into(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: now_ms(),
        position: 1,
        metadata: None,
    }
}

fn item(message_id: &str, position: i64) -> ItemRow {
    ItemRow {
        thread_id: "lt".into(),
        message_id: message_id.into(),
        position,
        kind: "assistant".into(),
        parent_id: None,
        depth: 0,
        body: "{}".into(),
        created_at: now_ms(),
    }
}

fn fence(message_id: &str, owner: &str) -> WriteOp {
    WriteOp::Fence {
        message_id: message_id.into(),
        owner: owner.into(),
    }
}

async fn leases(store: &Store) {
    store.put_api_key("k", "alice").await.unwrap();
    store
        .create_thread("lt", "alice", "default", "t")
        .await
        .unwrap();
    let now = now_ms();
    // A turn starts with its lease, in the same write.
    store
        .write(WriteOp::Many(vec![
            WriteOp::BeginTurn {
                thread: None,
                messages: vec![message("m1", "running")],
            },
            WriteOp::Lease(LeaseRow {
                message_id: "m1".into(),
                owner: "a".into(),
                lasts_ms: 60_000,
            }),
            fence("m1", "a"),
        ]))
        .await
        .unwrap();
    // A turn from before leases (none) is nobody's.
    store
        .create_thread("lt0", "alice", "default", "t")
        .await
        .unwrap();
    store
        .write(WriteOp::BeginTurn {
            thread: None,
            messages: vec![message_in("lt0", "m0", "running")],
        })
        .await
        .unwrap();
    let orphans = |now, former| async move {
        let rows = store.orphaned_turns(now, former).await.unwrap();
        rows.into_iter().map(|m| m.id).collect::<Vec<_>>()
    };
    assert_eq!(orphans(now, None).await, vec!["m0"]);
    // A replica restarting under the same id takes back what its former life held.
    assert_eq!(orphans(now, Some("a")).await, vec!["m1", "m0"]);

    // Its owner renews it; nobody else can take it meanwhile.
    assert_eq!(
        store
            .lease_renewer()
            .renew("a", now + 90_000)
            .await
            .unwrap(),
        vec!["m1"]
    );
    assert!(store
        .take_lease("m1", "b", now + 5_000, now, None)
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.lease("m1").await.unwrap().unwrap().owner, "a");

    // Once it expired it is an orphan; the first taker wins.
    assert_eq!(
        store.lease_renewer().renew("a", now - 1).await.unwrap(),
        vec!["m1"]
    );
    assert_eq!(orphans(now, None).await, vec!["m1", "m0"]);
    let (b, c) = tokio::join!(
        store.take_lease("m1", "b", now + 60_000, now, None),
        store.take_lease("m1", "c", now + 60_000, now, None)
    );
    assert!(
        b.unwrap().is_some() ^ c.unwrap().is_some(),
        "exactly one replica takes the lease"
    );
    let taker = store.lease("m1").await.unwrap().unwrap().owner;
    assert_eq!(
        store
            .take_lease("m0", "b", now + 60_000, now, None)
            .await
            .unwrap(),
        Some(1),
        "taken over once"
    );
    assert!(store
        .take_lease("m0", "c", now + 60_000, now, None)
        .await
        .unwrap()
        .is_none());

    // The old owner renews nothing, and its fenced writes fail alone: the taker's commit.
    assert!(store
        .lease_renewer()
        .renew("a", now + 90_000)
        .await
        .unwrap()
        .is_empty());
    let (lost, kept) = tokio::join!(
        store.write(WriteOp::Many(vec![
            fence("m1", "a"),
            WriteOp::Items(vec![item("m1", 0)])
        ])),
        store.write(WriteOp::Many(vec![
            fence("m1", &taker),
            WriteOp::Items(vec![item("m1", 1)])
        ]))
    );
    assert!(
        matches!(&lost, Err(StoreError::Write(e)) if e.contains("no longer holds the lease of turn m1")),
        "{lost:?}"
    );
    kept.unwrap();
    let positions: Vec<i64> = store
        .turn_items("lt", "m1")
        .await
        .unwrap()
        .iter()
        .map(|i| i.position)
        .collect();
    assert_eq!(positions, vec![1]);

    // The turn's end removes its lease; an ended turn is nobody's orphan and nobody's to take.
    store
        .write(WriteOp::Many(vec![
            fence("m1", &taker),
            WriteOp::FinishTurn {
                message: message("m1", "interrupted"),
            },
        ]))
        .await
        .unwrap();
    assert_eq!(store.lease("m1").await.unwrap(), None);
    assert!(store
        .take_lease("m1", "d", now + 60_000, now, None)
        .await
        .unwrap()
        .is_none());
    assert_eq!(orphans(now, None).await, Vec::<String>::new());
    // A fence on an ended turn fails.
    let late = store
        .write(WriteOp::Many(vec![
            fence("m1", &taker),
            WriteOp::Items(vec![item("m1", 2)]),
        ]))
        .await;
    assert!(late.is_err());
}

/// A thread runs one turn at a time, whichever replica starts it: a second running turn is
/// refused as "busy" (alone: the batch's other ops still commit), and once the first ends
/// the next may start, after it; a start whose place another turn took meanwhile (it read
/// the thread before that turn started) is refused as "busy" too.
async fn one_running_turn(store: &Store) {
    store
        .create_thread("lt", "alice", "default", "t")
        .await
        .unwrap();
    let begin = |id: &str, position: i64| WriteOp::BeginTurn {
        thread: None,
        messages: vec![NewMessage {
            position,
            ..message(id, "running")
        }],
    };
    store.write(begin("r1", 1)).await.unwrap();
    let (second, other) = tokio::join!(
        store.write(begin("r2", 2)),
        store.write(WriteOp::Items(vec![item("r1", 0)]))
    );
    let refused = second.expect_err("a second running turn in the thread");
    assert!(refused.is_thread_busy(), "{refused}");
    other.unwrap();
    assert!(store.message("lt", "r2").await.unwrap().is_none());
    store
        .write(WriteOp::FinishTurn {
            message: message("r1", "completed"),
        })
        .await
        .unwrap();
    // A start that read the thread before r1 began: its place is taken.
    let late = store
        .write(begin("r0", 1))
        .await
        .expect_err("r1 took its place");
    assert!(late.is_thread_busy(), "{late}");
    store.write(begin("r2", 2)).await.unwrap();
    // Any other failure is not "busy".
    let twice = store
        .write(WriteOp::BeginTurn {
            thread: None,
            messages: vec![NewMessage {
                position: 10,
                ..message("r1", "completed")
            }],
        })
        .await
        .expect_err("the same id again");
    assert!(!twice.is_thread_busy(), "{twice}");

    // A start that replaces earlier messages drops them only if it starts: refused as busy,
    // it drops nothing; and a running turn is never dropped.
    let replacing = |id: &str| {
        WriteOp::Many(vec![
            WriteOp::DropMessages {
                thread_id: "lt".into(),
                position: 0,
            },
            begin(id, 3),
        ])
    };
    let refused = store.write(replacing("r3")).await.expect_err("r2 runs");
    assert!(refused.is_thread_busy(), "{refused}");
    assert!(store.message("lt", "r1").await.unwrap().is_some());
    store
        .write(WriteOp::DropMessages {
            thread_id: "lt".into(),
            position: 0,
        })
        .await
        .unwrap();
    assert!(store.message("lt", "r1").await.unwrap().is_none());
    assert!(
        store.message("lt", "r2").await.unwrap().is_some(),
        "running"
    );
    store
        .write(WriteOp::FinishTurn {
            message: message("r2", "completed"),
        })
        .await
        .unwrap();
    store.write(replacing("r3")).await.unwrap();
    let ids: Vec<String> = store
        .messages("lt")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, vec!["r3".to_owned()]);
}

#[tokio::test]
async fn one_running_turn_per_thread_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    one_running_turn(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn one_running_turn_per_thread_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    one_running_turn(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn leases_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    leases(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn leases_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    leases(&db.store).await;
    db.drop_database().await.unwrap();
}

/// A replica frozen mid-batch (`SIGSTOP`, a paused VM) holds its turn's lease locked until
/// its batch commits. Deleting the thread through another replica waits for that lock only
/// until PostgreSQL ends the stalled session; the frozen replica, when it wakes, finds its
/// connection lost (its writer writes the batch again, and the lease's fence keeps it out).
#[tokio::test]
async fn a_replica_frozen_mid_batch_holds_a_thread_delete_up_only_until_its_session_ends() {
    let db = TestDb::postgres().await.unwrap();
    let settings = StoreSettings {
        stalled_transaction_ms: 300,
        ..StoreSettings::default()
    };
    let frozen = Store::connect_with(&db.url, settings).await.unwrap();
    db.store.ensure_user("alice").await.unwrap();
    db.store
        .write(WriteOp::Many(vec![
            WriteOp::BeginTurn {
                thread: Some(new_thread("lt", "alice")),
                messages: vec![message("m1", "running")],
            },
            WriteOp::Lease(LeaseRow {
                message_id: "m1".into(),
                owner: "a".into(),
                lasts_ms: 600_000,
            }),
        ]))
        .await
        .unwrap();
    let batch = stalled_batch(&frozen, "m1", "a").await.unwrap();

    // Without the limit this would wait for as long as the replica stays frozen.
    let deleted = tokio::time::timeout(Duration::from_secs(30), db.store.delete_thread("lt"))
        .await
        .expect("the delete still waits for the frozen replica's batch")
        .unwrap();
    assert!(deleted);
    assert!(db.store.thread("lt").await.unwrap().is_none());
    assert!(db.store.lease("m1").await.unwrap().is_none());

    let woke = batch.commit().await.unwrap_err();
    assert!(is_connection_lost(&StoreError::from(woke)));
    frozen.close().await;
    db.drop_database().await.unwrap();
}

/// A replica's heartbeat renews its leases while its writer commits batches that fence and
/// end its turns: neither may wait for the other in a way that deadlocks (PostgreSQL then
/// fails one of them after a second), and every renewal still reports every live turn held.
#[tokio::test]
async fn renewals_and_fenced_batches_do_not_deadlock_on_postgres() {
    const TURNS: usize = 2000;
    const ROUNDS: usize = 30;
    let db = TestDb::postgres().await.unwrap();
    let store = db.store.clone();
    store.ensure_user("alice").await.unwrap();
    // Ids in another order than the rows' (as random ids are): the order rows are locked in
    // then differs between statements that find them by id and by owner.
    let id = |i: usize| format!("d{:08x}", (i as u64 * 2_654_435_761) % (1 << 32));
    let starts: Vec<WriteOp> = (0..TURNS)
        .flat_map(|i| {
            [
                WriteOp::BeginTurn {
                    thread: Some(new_thread(&format!("dt{i}"), "alice")),
                    messages: vec![message_in(&format!("dt{i}"), &id(i), "running")],
                },
                WriteOp::Lease(LeaseRow {
                    message_id: id(i),
                    owner: "a".into(),
                    lasts_ms: 600_000,
                }),
            ]
        })
        .collect();
    store.write(WriteOp::Many(starts)).await.unwrap();

    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewing = {
        let store = store.clone();
        let writing = writing.clone();
        tokio::spawn(async move {
            let mut renewer = store.lease_renewer();
            let mut held = Vec::new();
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                let renewed = renewer.renew("a", now_ms() + 600_000).await;
                held.push(renewed.map(|ids| ids.len()));
            }
            held
        })
    };
    // Each round writes an item of a third of the live turns and ends some, all over the
    // table: turn `i` ends in round `i % ROUNDS`.
    for round in 0..ROUNDS {
        let mut ops = Vec::new();
        for i in (0..TURNS).filter(|i| i % ROUNDS >= round) {
            let ends = i % ROUNDS == round;
            if !ends && (i + round) % 3 != 0 {
                continue;
            }
            let mut item = item(&id(i), round as i64);
            item.thread_id = format!("dt{i}").into();
            ops.extend([fence(&id(i), "a"), WriteOp::Items(vec![item])]);
            if ends {
                let mut done = message_in(&format!("dt{i}"), &id(i), "completed");
                done.content = json!("done");
                ops.push(WriteOp::FinishTurn { message: done });
            }
        }
        store.write(WriteOp::Many(ops)).await.unwrap();
    }
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    let held = renewing.await.unwrap();
    for renewed in &held {
        renewed.as_ref().expect("every renewal succeeds");
    }
    db.drop_database().await.unwrap();
}
