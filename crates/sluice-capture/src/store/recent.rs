//! What the store wrote since it was opened, in memory, so reads that can only come back empty
//! need no read transaction.
//!
//! Invariant: everything above `opened` was written by this process (opening drops what lies
//! above the durable `resolved`), and the maps are updated after rows are visible to scans and
//! before `resolved` passes them, so a range at or above `opened` holds exactly what they say.

use super::Cursor;
use sluice_types::{TableId, Ts};

/// See the module docs.
pub(super) struct Recent {
    /// `resolved` when the store was opened.
    pub opened: Ts,
    /// Each table's greatest row commit ts written since then.
    pub tables: std::collections::BTreeMap<TableId, Ts>,
    /// The commit ts of every DDL written since then (pruned by `gc`).
    pub ddls: std::collections::BTreeSet<Ts>,
}

impl Recent {
    /// No row of `table` lies after `from` (within the range the maps cover).
    pub fn no_rows_after(&self, table: TableId, from: Cursor) -> bool {
        // Rows at `opened` itself may be on disk from before: covered only from after them.
        let covered = from.ts > self.opened || (from.ts == self.opened && from.seq == u32::MAX);
        if !covered {
            return false;
        }
        match self.tables.get(&table) {
            None => true,
            Some(&last) => last < from.ts || (last == from.ts && from.seq == u32::MAX),
        }
    }

    /// No DDL lies in `(after, upto]` (within the range the set covers).
    pub fn no_ddls(&self, after: Ts, upto: Ts) -> bool {
        after >= self.opened
            && self
                .ddls
                .range(after.saturating_add(1)..=upto)
                .next()
                .is_none()
    }

    pub fn note_rows(&mut self, table: TableId, ts: Ts) {
        let last = self.tables.entry(table).or_insert(ts);
        *last = (*last).max(ts);
    }
}
