//! The changefeed's snapshot copy as the maintainer keeps it: which key ranges of which tables
//! still have rows to copy, and how far each one is durable.
//!
//! The dispatchers copy (`dispatcher/copy.rs`); the maintainer only keeps the map of progress
//! by key range ([`CopyMap`]), fed by the dispatchers' reports, hands every new dispatcher the
//! progress of its span (a move, a split, a merge, a node lost: the copy resumes, it does not
//! start over), tells a working dispatcher that should copy and does not to start, and keeps the
//! map with the changefeed's requests record in the meta store (`requests.rs`), so a new
//! maintainer resumes it too.
//!
//! Invariants:
//! - **progress is by key range, never by dispatcher**: a report sets the progress of exactly
//!   its span; a new span's progress is that of the pieces it overlaps (all finished: nothing to
//!   copy; one cursor: from there; different cursors: from the start, which is harmless);
//! - **started once**: a changefeed with `snapshot = initial` gets its map at its first
//!   bootstrap (every table it covers, from the start) and the record keeps it, also once empty:
//!   a later maintainer never copies again unless a user asks (`changefeed snapshot`);
//! - a table leaves the map when all of its pieces are finished, or when it is dropped.

use super::{span_key, Maintainer, SpanState};
use crate::io::Effect;
use crate::msg::{CopyProgress, CopyReport, CopyStart, DispatcherReport, Message, SnapshotStatus};
use serde::{Deserialize, Serialize};
use sluice_types::{NodeId, Span, TableId};
use std::collections::BTreeMap;

/// What the meta store keeps of the copy (in the requests record): the pieces not finished yet.
/// Present (even empty) once the copy started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub pieces: Vec<(Span, CopyProgress)>,
}

/// Progress by key range, per table; a range not in the map has nothing (left) to copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyMap {
    tables: BTreeMap<TableId, Vec<(Span, CopyProgress)>>,
}

impl CopyMap {
    pub fn from_record(r: &SnapshotRecord) -> Self {
        let mut m = CopyMap::default();
        for (s, p) in &r.pieces {
            m.set(s, p.clone());
        }
        m
    }

    pub fn record(&self) -> SnapshotRecord {
        SnapshotRecord {
            pieces: self.tables.values().flatten().cloned().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    pub fn pending_tables(&self) -> usize {
        self.tables.len()
    }

    /// The whole table is to be copied from the start.
    pub fn start_table(&mut self, table: TableId) {
        self.set(&Span::whole_table(table), CopyProgress::start());
    }

    pub fn forget_table(&mut self, table: TableId) -> bool {
        self.tables.remove(&table).is_some()
    }

    pub fn tables(&self) -> Vec<TableId> {
        self.tables.keys().copied().collect()
    }

    /// The progress of `span` becomes `p` (the pieces it overlaps are cut around it). Returns
    /// whether anything changed.
    pub fn set(&mut self, span: &Span, p: CopyProgress) -> bool {
        let pieces = self.tables.entry(span.table).or_default();
        if pieces.iter().any(|(s, q)| s == span && *q == p) {
            return false;
        }
        let mut next = Vec::with_capacity(pieces.len() + 2);
        for (s, q) in pieces.drain(..) {
            if !s.overlaps(span) {
                next.push((s, q));
                continue;
            }
            if s.start < span.start {
                next.push((
                    Span::new(s.table, s.start.clone(), span.start.clone()),
                    q.clone(),
                ));
            }
            if span.end < s.end {
                next.push((Span::new(s.table, span.end.clone(), s.end.clone()), q));
            }
        }
        if !p.done {
            next.push((span.clone(), p));
        }
        next.sort_by(|a, b| a.0.start.cmp(&b.0.start));
        if next.is_empty() {
            self.tables.remove(&span.table);
        } else {
            *pieces = next;
        }
        true
    }

    /// Where a dispatcher of `span` starts copying (`None`: nothing to copy).
    pub fn copy_of(&self, span: &Span) -> Option<CopyProgress> {
        let pieces = self.tables.get(&span.table)?;
        let mut cursors = pieces
            .iter()
            .filter(|(s, _)| s.overlaps(span))
            .map(|(_, p)| p.cursor.clone());
        let first = cursors.next()?;
        Some(match cursors.all(|c| c == first) {
            true => CopyProgress {
                cursor: first,
                done: false,
            },
            false => CopyProgress::start(),
        })
    }
}

impl Maintainer {
    /// What a dispatcher of `span` is told to copy when it is created.
    pub(super) fn copy_start(&self, span: &Span) -> Option<CopyStart> {
        let from = self.copies.copy_of(span)?;
        Some(CopyStart {
            from,
            keyless: self.tables.get(&span.table).is_some_and(|t| !t.splittable),
            chunk_rows: self.config.snapshot.chunk_rows,
        })
    }

    /// At the end of the bootstrap: the copy the record kept, or (a changefeed that copies and
    /// never started) every table from the start.
    pub(super) fn restore_copy(&mut self, record: Option<SnapshotRecord>) {
        use crate::config::SnapshotMode;
        self.copy_started = record.is_some();
        self.copies = match record {
            Some(r) => CopyMap::from_record(&r),
            None if self.config.snapshot.mode != SnapshotMode::Never => {
                self.copy_started = true;
                self.copy_dirty = true;
                // The tables at the start point; one a later DDL creates is empty before it.
                let mut m = CopyMap::default();
                for (t, _) in self.tables.iter().filter(|(_, s)| s.created == 0) {
                    m.start_table(*t);
                }
                m
            }
            None => CopyMap::default(),
        };
        self.forget_dropped_copies();
    }

    /// A working dispatcher's report: its copy's durable progress is its span's; one that
    /// should copy and does not is told to.
    pub(super) fn on_copy_report(
        &mut self,
        from: &NodeId,
        r: &DispatcherReport,
        out: &mut Vec<Effect>,
    ) {
        // No copy reported and none to start (no range left to copy): nothing to do.
        if r.copy.is_none() && self.copies.is_empty() {
            return;
        }
        // The entry of the report's own span (a dispatcher is only ever set there; see
        // `note_span_report`): O(log spans) per report.
        let ours = self
            .spans
            .get(&span_key(&r.span))
            .is_some_and(|e| e.dispatcher == Some(r.id) && e.state == SpanState::Replicating);
        if !ours {
            return;
        }
        match &r.copy {
            Some(c) => {
                self.copy_rows.insert(r.id, c.clone());
                if self.copies.set(&r.span, c.durable.clone()) {
                    self.copy_dirty = true;
                    // The last piece finished: the coordinator hears of it at the next tick.
                    self.status_due |= self.copies.is_empty();
                }
            }
            None => {
                if let Some(copy) = self.copy_start(&r.span) {
                    let msg = Message::Copy {
                        cf: self.cf.clone(),
                        epoch: self.epoch,
                        id: r.id,
                        copy,
                        restart: false,
                    };
                    self.send(out, from, msg);
                }
            }
        }
    }

    /// Tables a DDL dropped have nothing left to copy.
    pub(super) fn forget_dropped_copies(&mut self) {
        for t in self.copies.tables() {
            if !self.tables.contains_key(&t) {
                self.copies.forget_table(t);
                self.copy_dirty = true;
            }
        }
    }

    /// A user asks for `table` to be copied again (`changefeed snapshot`): every working
    /// dispatcher of it starts its copy over.
    pub(super) fn recopy_table(&mut self, table: TableId, out: &mut Vec<Effect>) {
        self.copy_started = true;
        self.copies.start_table(table);
        self.copy_dirty = true;
        let targets: Vec<(NodeId, sluice_types::DispatcherId, Span)> = self
            .spans
            .values()
            .filter(|e| e.span.table == table && e.state == SpanState::Replicating)
            .filter_map(|e| Some((e.node.clone()?, e.dispatcher?, e.span.clone())))
            .collect();
        for (node, id, span) in targets {
            if let Some(copy) = self.copy_start(&span) {
                let msg = Message::Copy {
                    cf: self.cf.clone(),
                    epoch: self.epoch,
                    id,
                    copy,
                    restart: true,
                };
                self.send(out, &node, msg);
            }
        }
    }

    pub(super) fn snapshot_status(&self) -> Option<SnapshotStatus> {
        if !self.copy_started {
            return None;
        }
        let live: Vec<(TableId, &CopyReport)> = self
            .spans
            .iter()
            .filter_map(|(s, e)| Some((s.0, self.copy_rows.get(&e.dispatcher?)?)))
            .collect();
        Some(SnapshotStatus {
            tables_pending: self.copies.pending_tables() as u64,
            rows: live.iter().map(|(_, c)| c.rows).sum(),
            error: live.iter().find_map(|(_, c)| c.error.clone()),
            finished: self.copies.is_empty(),
            rows_left: self.rows_left(&live),
        })
    }

    /// The statistics' rows of every pending table less what its dispatchers copied (`None`
    /// while a pending table has no statistics yet).
    fn rows_left(&self, live: &[(TableId, &CopyReport)]) -> Option<u64> {
        let mut copied: BTreeMap<TableId, u64> = BTreeMap::new();
        for (t, c) in live {
            *copied.entry(*t).or_default() += c.rows;
        }
        let mut left = 0u64;
        for t in self.copies.tables() {
            let done = copied.get(&t).copied().unwrap_or(0);
            left += self.table_rows.get(&t)?.saturating_sub(done);
        }
        Some(left)
    }

    /// The node learnt the upstream's row estimate of a table.
    pub fn note_table_rows(&mut self, table: TableId, rows: u64) {
        self.table_rows.insert(table, rows);
    }
}
