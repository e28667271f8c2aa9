//! The node's event store as the feed's [`EventSource`]: one consistent view per use, taken
//! with [`StoreSource::now`].
//!
//! Invariant: the completeness bound is read before the schema history, and capture publishes
//! `captured` only after the history covering it, so every row and DDL at or below
//! [`EventSource::complete`] has its schema in the history this view holds.

use crate::upstream::CaptureShared;
use sluice_capture::schema::SchemaHistory;
use sluice_capture::store::{Cursor, EventStore};
use sluice_control::feed::{EventSource, Pos, Scan};
use sluice_types::{DdlEvent, RowEvent, Span, TableId, Ts};
use std::sync::Arc;

pub struct StoreSource {
    store: Arc<EventStore>,
    history: Arc<SchemaHistory>,
    captured: Ts,
}

impl StoreSource {
    pub fn now(capture: &CaptureShared) -> Self {
        let captured = capture.captured();
        StoreSource {
            store: capture.store.clone(),
            history: capture.history(),
            captured,
        }
    }
}

impl EventSource for StoreSource {
    type Row = RowEvent;

    /// A row's place in its transaction is the store's sequence number (its order in the
    /// binlog), so a transaction in parts resumes exactly where its last part ended.
    fn scan(
        &self,
        span: &Span,
        from: Pos,
        upto: Ts,
        limit: usize,
    ) -> Result<Scan<RowEvent>, String> {
        let from = Cursor {
            ts: from.ts,
            seq: from.seq,
        };
        let b = self
            .store
            .scan_from(span, from, upto, limit)
            .map_err(|e| e.to_string())?;
        Ok(Scan {
            rows: b.rows,
            next: b.next.map(|c| Pos {
                ts: c.ts,
                seq: c.seq,
            }),
        })
    }

    fn ddls(&self, after: Ts, upto: Ts) -> Result<Vec<DdlEvent>, String> {
        self.store.ddls(after, upto).map_err(|e| e.to_string())
    }

    fn complete(&self) -> Ts {
        self.captured
    }

    fn floor(&self) -> Ts {
        self.history.snapshot_ts.max(self.store.gc_ts())
    }

    fn database_of(&self, table: TableId, at: Ts) -> Option<String> {
        self.history
            .table_by_id_at(table, at)
            .map(|t| t.database.clone())
    }
}
