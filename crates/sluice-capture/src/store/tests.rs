//! Cases the public surface cannot set up: blocks on disk written by hand.

use super::block::{at, block_key, Builder};
use super::{EventStore, StoreConfig, BLOCKS, META};
use sluice_types::{Key, RowEvent, RowKind, Span, TableId, Value};

/// An insert of `pk` into `table` (the store's unit tests' row).
pub(super) fn row_of(table: u64, pk: u64) -> RowEvent {
    RowEvent {
        table_id: TableId(table),
        schema_version: 0,
        commit_ts: 0,
        commit_time_ms: 0,
        kind: RowKind::Insert,
        key: Key::row_u64(TableId(table), pk),
        before: None,
        after: Some(vec![Value::UInt(pk)]),
        snapshot: false,
        gtid: None,
    }
}

fn row(pk: u64) -> RowEvent {
    row_of(1, pk)
}

/// A block that runs past the durable `resolved` (blocks written by a persist racing an append
/// on another thread) loses its rows above it when the store opens; the rows at or below it
/// stay.
#[test]
fn opening_trims_a_block_that_runs_past_resolved() {
    let dir = sluice_testkit::scratch::ScratchDir::new("sluice-store", "trim").expect("scratch");
    let path = dir.path().join("db");
    {
        let db = redb::Database::create(&path).expect("create");
        let w = db.begin_write().expect("write");
        {
            let mut b = Builder::new(at(10, 0));
            for (ts, seq, pk) in [(10, 0, 1), (10, 1, 2), (20, 0, 3), (30, 0, 4)] {
                b.push(at(ts, seq), &row(pk));
            }
            let mut t = w.open_table(BLOCKS).expect("blocks");
            let key = block_key(TableId(1), b.first);
            t.insert(key.as_slice(), b.seal().as_slice())
                .expect("insert");
            let mut t2 = Builder::new(at(25, 0));
            t2.push(at(25, 0), &row_of(2, 1));
            t.insert(
                block_key(TableId(2), at(25, 0)).as_slice(),
                t2.seal().as_slice(),
            )
            .expect("insert");
            let mut meta = w.open_table(META).expect("meta");
            meta.insert("resolved", 20).expect("resolved");
        }
        w.commit().expect("commit");
    }
    let s = EventStore::open(&path, StoreConfig::default()).expect("open");
    let got: Vec<(u64, Key)> = s
        .scan(&Span::whole_table(TableId(1)), 0, u64::MAX, usize::MAX)
        .expect("scan")
        .rows
        .into_iter()
        .map(|r| (r.commit_ts, r.key))
        .collect();
    let want: Vec<(u64, Key)> = [(10, 1), (10, 2), (20, 3)]
        .into_iter()
        .map(|(ts, pk)| (ts, Key::row_u64(TableId(1), pk)))
        .collect();
    assert_eq!(got, want);
    let t2 = s
        .scan(&Span::whole_table(TableId(2)), 0, u64::MAX, usize::MAX)
        .expect("scan");
    assert!(t2.rows.is_empty(), "a block wholly above resolved goes");
    // Appending the transactions again (the reader re-reads them) gives them once.
    s.append_txn(
        30,
        &[RowEvent {
            commit_ts: 30,
            ..row(4)
        }],
    )
    .expect("append");
    let n = s
        .scan(&Span::whole_table(TableId(1)), 0, u64::MAX, usize::MAX)
        .expect("scan")
        .rows
        .len();
    assert_eq!(n, 4);
}
