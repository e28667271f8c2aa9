//! The rows appended since their table's last block was written: one open block per table, in
//! memory, until it is full (sealed and written), the store persists (every open block
//! written), or all of them together pass [`TAILS_BYTES`] (every open block written).
//!
//! Invariants:
//! - every row of a table in its open block comes after every row of that table on disk (a
//!   block is written whole and leaves the tails in the same locked step), so a scan reads the
//!   disk, then the tail;
//! - memory: the open blocks hold at most [`TAILS_BYTES`] plus one block between writes.

use super::block::{self, Builder, BLOCK_BYTES};
use super::Cursor;
use sluice_types::{RowEvent, TableId};
use std::collections::BTreeMap;

/// The open blocks of all tables are written when they hold more than this together.
pub(super) const TAILS_BYTES: usize = 8 << 20;

/// A block ready to be written: its table, its first row's position, its value.
pub(super) type Sealed = (TableId, Cursor, Vec<u8>);

#[derive(Debug, Default)]
pub(super) struct Tails {
    open: BTreeMap<TableId, Builder>,
    bytes: usize,
}

impl Tails {
    /// Appends a row to its table's open block; a block it would take past [`BLOCK_BYTES`] is
    /// sealed first (into `sealed`) and the row starts the next one.
    pub fn push(&mut self, table: TableId, at: Cursor, ev: &RowEvent, sealed: &mut Vec<Sealed>) {
        let b = self.open.entry(table).or_insert_with(|| Builder::new(at));
        let held = b.entries().len();
        let before = (b.len(), (b.last, b.rows));
        b.push(at, ev);
        if b.len() > BLOCK_BYTES && b.rows > 1 {
            // The row starts the next block (encoded again: once per sealed block).
            b.truncate(before.0, before.1);
            let full = std::mem::replace(b, Builder::new(at));
            sealed.push((table, full.first, full.seal()));
            b.push(at, ev);
        }
        self.bytes = self.bytes - held + b.entries().len();
    }

    /// Seals every open block when together they hold [`TAILS_BYTES`] or more.
    pub fn drain_if_full(&mut self) -> Vec<Sealed> {
        if self.bytes >= TAILS_BYTES {
            self.drain()
        } else {
            Vec::new()
        }
    }

    /// Seals every open block (the store writes them all).
    pub fn drain(&mut self) -> Vec<Sealed> {
        self.bytes = 0;
        std::mem::take(&mut self.open)
            .into_iter()
            .map(|(t, b)| (t, b.first, b.seal()))
            .collect()
    }

    /// The position of `table`'s first row in memory.
    pub fn first(&self, table: TableId) -> Option<Cursor> {
        self.open.get(&table).map(|b| b.first)
    }

    /// The entries of `table`'s open block.
    pub fn entries(&self, table: TableId) -> Option<&[u8]> {
        self.open.get(&table).map(|b| b.entries())
    }

    /// Drops the rows with commit ts `<= upto`; returns how many.
    pub fn gc(&mut self, upto: u64) -> u64 {
        let mut removed = 0u64;
        let tables: Vec<TableId> = self
            .open
            .iter()
            .filter(|(_, b)| b.first.ts <= upto)
            .map(|(t, _)| *t)
            .collect();
        for t in tables {
            let Some(b) = self.open.remove(&t) else {
                continue;
            };
            self.bytes -= b.entries().len();
            let kept = block::rebuild(b.entries(), |at| at.ts > upto)
                .expect("the open blocks were encoded by this process");
            let left = kept.as_ref().map_or(0, |k| k.rows);
            removed += u64::from(b.rows - left);
            if let Some(k) = kept {
                self.bytes += k.entries().len();
                self.open.insert(t, k);
            }
        }
        removed
    }
}
