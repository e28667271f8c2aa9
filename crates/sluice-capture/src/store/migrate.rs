//! Stores written before blocks kept one redb value per row, in a table named `rows`: key
//! `(table id, commit ts, seq)`, value the row key's length (u32 BE), the row key and the
//! [`crate::codec`] record. Opening such a store converts its rows into blocks in the opening
//! write transaction and drops the old table, so the node resumes where it stopped.
//!
//! Invariant: every row at or below the durable `resolved` is carried over, in order, once;
//! rows above it are dropped as opening always does.

use super::block::{block_key, parse_block_key, Builder, BLOCK_BYTES};
use super::{db_err, StoreError, BLOCKS};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle, WriteTransaction};
use sluice_types::{TableId, Ts};

const ROWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("rows");

/// Converts the old `rows` table, if there is one, into blocks.
pub(super) fn rows_to_blocks(w: &WriteTransaction, resolved: Ts) -> Result<(), StoreError> {
    let exists = w
        .list_tables()
        .map_err(db_err)?
        .any(|t| t.name() == ROWS.name());
    if !exists {
        return Ok(());
    }
    {
        let old = w.open_table(ROWS).map_err(db_err)?;
        let mut blocks = w.open_table(BLOCKS).map_err(db_err)?;
        let mut open: Option<(TableId, Builder)> = None;
        let mut flush = |open: Option<(TableId, Builder)>| -> Result<(), StoreError> {
            if let Some((t, b)) = open {
                let key = block_key(t, b.first);
                blocks
                    .insert(key.as_slice(), b.seal().as_slice())
                    .map_err(db_err)?;
            }
            Ok(())
        };
        if old.len().map_err(db_err)? > 0 {
            for item in old.iter().map_err(db_err)? {
                let (k, v) = item.map_err(db_err)?;
                let (table, at) = parse_block_key(k.value())
                    .ok_or_else(|| StoreError::Corrupt("old row key".into()))?;
                if at.ts > resolved {
                    continue;
                }
                let ev = old_record(v.value())?;
                let full = open
                    .as_ref()
                    .is_some_and(|(t, b)| *t != table || b.len() >= BLOCK_BYTES);
                if full {
                    flush(open.take())?;
                }
                open.get_or_insert_with(|| (table, Builder::new(at)))
                    .1
                    .push(at, &ev);
            }
        }
        flush(open)?;
    }
    w.delete_table(ROWS).map_err(db_err)?;
    Ok(())
}

/// The row of an old value (its key prefix skipped).
fn old_record(v: &[u8]) -> Result<sluice_types::RowEvent, StoreError> {
    let n = v
        .get(..4)
        .and_then(|l| l.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| StoreError::Corrupt("short old value".into()))? as usize;
    let rec = v
        .get(4 + n..)
        .ok_or_else(|| StoreError::Corrupt("short old value".into()))?;
    crate::codec::decode(rec).map_err(StoreError::Corrupt)
}

#[cfg(test)]
mod tests {
    use super::super::tests::row_of;
    use super::super::{Cursor, EventStore, StoreConfig, META};
    use super::*;
    use sluice_types::{RowEvent, Span, Value};

    fn row(table: u64, pk: u64, ts: u64) -> RowEvent {
        RowEvent {
            commit_ts: ts,
            commit_time_ms: 7,
            after: Some(vec![Value::UInt(pk), Value::Text("x".repeat(200))]),
            ..row_of(table, pk)
        }
    }

    /// What a store of the old format held: `rows` with one value per row, and `resolved`.
    fn write_old_store(path: &std::path::Path, rows: &[(u32, RowEvent)], resolved: Ts) {
        let db = redb::Database::create(path).expect("create");
        let w = db.begin_write().expect("write");
        {
            let mut t = w.open_table(ROWS).expect("rows");
            for (seq, r) in rows {
                let mut v = Vec::new();
                v.extend_from_slice(&(r.key.0.len() as u32).to_be_bytes());
                v.extend_from_slice(&r.key.0);
                crate::codec::encode(r, &mut v);
                let at = Cursor {
                    ts: r.commit_ts,
                    seq: *seq,
                };
                t.insert(block_key(r.table_id, at).as_slice(), v.as_slice())
                    .expect("insert");
            }
            let mut meta = w.open_table(META).expect("meta");
            meta.insert("resolved", resolved).expect("resolved");
        }
        w.commit().expect("commit");
    }

    #[test]
    fn an_old_store_opens_with_every_row_up_to_resolved() {
        let dir = sluice_testkit::scratch::ScratchDir::new("sluice-store", "migrate")
            .expect("scratch dir");
        let path = dir.path().join("db");
        // Two tables, enough rows of one to fill several blocks, rows above resolved.
        let mut rows = Vec::new();
        for ts in 1..=400u64 {
            rows.push((0, row(1, ts, ts)));
            rows.push((1, row(2, ts, ts)));
        }
        rows.push((0, row(1, 9999, 500)));
        write_old_store(&path, &rows, 400);
        const { assert!(BLOCK_BYTES < 400 * 200, "the old rows fill several blocks") };
        let s = EventStore::open(&path, StoreConfig::default()).expect("open old store");
        assert_eq!(s.resolved(), 400);
        for t in 1..=2u64 {
            let got = s
                .scan(&Span::whole_table(TableId(t)), 0, u64::MAX, usize::MAX)
                .expect("scan")
                .rows;
            let want: Vec<RowEvent> = rows
                .iter()
                .filter(|(_, r)| r.table_id == TableId(t) && r.commit_ts <= 400)
                .map(|(_, r)| r.clone())
                .collect();
            assert_eq!(got, want, "table {t}");
        }
        drop(s);
        let s = EventStore::open(&path, StoreConfig::default()).expect("open again");
        let n = s
            .scan(&Span::whole_table(TableId(1)), 0, u64::MAX, usize::MAX)
            .expect("scan")
            .rows
            .len();
        assert_eq!(n, 400, "converted once, read the same after a second open");
    }
}
