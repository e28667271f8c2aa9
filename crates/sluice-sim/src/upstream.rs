//! The model upstream: tables with regions, rows keyed by one unsigned integer, transactions
//! (of one table or several) and DDLs with strictly increasing commit ts. It is the oracle:
//! every check compares the sink with this state, never with the event stream being checked.
//!
//! It is also the feed's event source ([`EventSource`]): capture is complete up to
//! [`Upstream::captured`], which catches up with the head at every node tick (writes in between
//! are not captured yet), so a feed that resolved past it would be seen.

use crate::rng::Rng;
use sluice_control::feed::{EventSource, FeedRow, Pos, Scan};
use sluice_control::io::{SchemaSnapshot, TableInfo};
use sluice_types::{
    DdlEvent, DdlInfluence, DdlKind, InfluenceScope, Key, RowKind, Span, TableId, Ts,
};
use std::collections::{BTreeMap, BTreeSet};

/// Row keys are drawn from `[0, KEYSPACE)`; regions split it evenly.
pub const KEYSPACE: u64 = 1 << 32;
/// What one model row costs against the memory quota.
pub const ROW_BYTES: usize = 100;

/// A row as the feed carries it: its upstream event (`idx` into the history).
#[derive(Clone, Debug, PartialEq)]
pub struct SimRow {
    pub ts: Ts,
    pub key: Key,
    pub idx: usize,
    pub kind: RowKind,
}

impl FeedRow for SimRow {
    fn commit_ts(&self) -> Ts {
        self.ts
    }
    fn at_ts(mut self, ts: Ts) -> Self {
        self.ts = ts;
        self
    }
    fn key(&self) -> &Key {
        &self.key
    }
    fn kind(&self) -> RowKind {
        self.kind
    }
    fn size(&self) -> usize {
        ROW_BYTES
    }
    #[cfg(feature = "mutations")]
    fn shifted(&self) -> Self {
        let mut r = self.clone();
        if let Some(b) = r.key.0.last_mut() {
            *b = b.wrapping_add(1);
        }
        r
    }
}

#[derive(Clone, Debug)]
pub struct UTable {
    pub id: TableId,
    /// (from ts, `db.table`)
    pub names: Vec<(Ts, String)>,
    pub regions: u64,
    pub created: Ts,
    pub dropped: Option<Ts>,
    /// Current rows: key -> value.
    pub rows: BTreeMap<u64, u64>,
}

impl UTable {
    pub fn name_at(&self, ts: Ts) -> &str {
        self.names
            .iter()
            .rev()
            .find(|(t, _)| *t <= ts)
            .or(self.names.first())
            .map(|(_, n)| n.as_str())
            .unwrap_or("")
    }
    pub fn live_at(&self, ts: Ts) -> bool {
        self.created <= ts && self.dropped.map(|d| d > ts).unwrap_or(true)
    }
    pub fn boundaries(&self) -> Vec<Key> {
        region_boundaries(self.id, self.regions)
    }
}

pub fn region_boundaries(table: TableId, regions: u64) -> Vec<Key> {
    (1..regions.max(1))
        .map(|i| Key::row_u64(table, i * (KEYSPACE / regions.max(1))))
        .collect()
}

/// One version of a key: (commit ts, value or `None` for a delete, history index).
pub type Version = (Ts, Option<u64>, usize);

#[derive(Clone, Debug)]
pub enum UEvent {
    Row {
        ts: Ts,
        table: TableId,
        key: u64,
        value: Option<u64>,
    },
    Ddl {
        ddl: Box<DdlEvent>,
        affected: Vec<TableId>,
    },
}

impl UEvent {
    pub fn ts(&self) -> Ts {
        match self {
            UEvent::Row { ts, .. } => *ts,
            UEvent::Ddl { ddl, .. } => ddl.commit_ts,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Upstream {
    pub head: Ts,
    pub tables: BTreeMap<TableId, UTable>,
    pub history: Vec<UEvent>,
    /// Indexes into `history` of each table's rows (the feed routes DDLs by their influence).
    pub by_table: BTreeMap<TableId, Vec<usize>>,
    /// Every version of every key: (table, key) -> [(ts, value, history index)], in commit
    /// order (one transaction may change a key more than once; the index tells them apart).
    /// Baseline rows have the index `usize::MAX`.
    pub versions: BTreeMap<(TableId, u64), Vec<Version>>,
    /// Capture is complete up to here (the feed's source reads nothing newer).
    pub captured: Ts,
    /// Rows of the largest transaction so far, in one table.
    pub max_txn_rows: u64,
    /// Rows served by snapshot chunk reads: (table, key, value, position read at); a feed row
    /// of one has the index [`SNAP_BASE`] + its place here.
    pub snap_rows: Vec<(TableId, u64, u64, Ts)>,
    /// Positions snapshot chunks were read at.
    pub chunk_positions: BTreeSet<Ts>,
    /// Rows of the largest snapshot chunk read so far.
    pub max_chunk_rows: u64,
}

/// The key a model cursor or chunk bound names (its 8 big-endian bytes).
fn cursor_key(c: Option<&[u8]>) -> Option<u64> {
    c.and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
}

/// How far apart consecutive commit ts are.
pub const TS_STEP: Ts = 2 * sluice_control::feed::CHUNK_TS_SLOTS;

/// Feed rows of snapshot chunks have indexes from here (history indexes stay below).
pub const SNAP_BASE: usize = 1 << 40;

impl Upstream {
    pub fn new() -> Self {
        Upstream {
            head: 1000,
            captured: 1000,
            ..Default::default()
        }
    }

    /// Commit ts advance like binlog positions, by more than a transaction's events: the
    /// [`sluice_control::feed::CHUNK_TS_SLOTS`] ts after one are never a commit ts, and snapshot
    /// chunks read there go into the stream at them.
    fn next_ts(&mut self) -> Ts {
        self.head += TS_STEP;
        self.head
    }

    /// One snapshot chunk of `span`: a consistent read of the table as it is now (at the head),
    /// at most `limit` rows in key order after the cursor `range.0` and up to the bound
    /// `range.1` (included; `None`: to the end), kept to the span (the server reads the table in
    /// key order and keeps its span's rows too). With `as_of`, a window read: the table as it
    /// was at that earlier ts, reported at the head.
    pub fn read_chunk(
        &mut self,
        span: &Span,
        range: (Option<&[u8]>, Option<&[u8]>),
        limit: usize,
        as_of: Option<Ts>,
    ) -> sluice_control::feed::ChunkRead<SimRow> {
        let position = self.head;
        self.chunk_positions.insert(position);
        let ts = sluice_control::feed::chunk_ts(position);
        let from = cursor_key(range.0).map_or(0, |k| k.saturating_add(1));
        let upto = cursor_key(range.1).unwrap_or(u64::MAX);
        let table = span.table;
        let live = self.tables.get(&table).is_some_and(|t| t.live_at(position));
        let keys: Vec<(u64, u64)> = match (live, as_of) {
            _ if from > upto => Vec::new(),
            (false, _) => Vec::new(),
            (true, None) => self.tables[&table]
                .rows
                .range(from..=upto)
                .take(limit.saturating_add(1))
                .map(|(k, v)| (*k, *v))
                .collect(),
            (true, Some(at)) => self.rows_at(table, (from, upto), limit.saturating_add(1), at),
        };
        let more = keys.len() > limit;
        let read = &keys[..keys.len().min(limit)];
        let cursor = read.last().map(|(k, _)| k.to_be_bytes().to_vec());
        let mut rows = Vec::new();
        for (k, v) in read {
            let key = Key::row_u64(table, *k);
            if !span.contains(&key) {
                continue;
            }
            rows.push(SimRow {
                ts,
                key,
                idx: SNAP_BASE + self.snap_rows.len(),
                kind: RowKind::Insert,
            });
            self.snap_rows.push((table, *k, *v, position));
        }
        self.max_chunk_rows = self.max_chunk_rows.max(rows.len() as u64);
        sluice_control::feed::ChunkRead {
            position,
            consistency: match as_of {
                Some(_) => sluice_control::feed::ChunkConsistency::Window,
                None => sluice_control::feed::ChunkConsistency::AtPosition,
            },
            rows,
            cursor,
            more,
        }
    }

    /// Where the next `count` chunks of `rows` rows of `span` after the cursor `after` end: the
    /// key of every `rows`-th row of the span after it, as it is now (fewer near its end).
    pub fn chunk_bounds(
        &self,
        span: &Span,
        after: Option<&[u8]>,
        rows: usize,
        count: usize,
    ) -> Vec<Vec<u8>> {
        let from = cursor_key(after).map_or(0, |k| k.saturating_add(1));
        let Some(t) = self.tables.get(&span.table) else {
            return Vec::new();
        };
        t.rows
            .range(from..)
            .map(|(k, _)| *k)
            .filter(|k| span.contains(&Key::row_u64(span.table, *k)))
            .skip(rows.max(1) - 1)
            .step_by(rows.max(1))
            .take(count)
            .map(|k| k.to_be_bytes().to_vec())
            .collect()
    }

    /// At most `n` rows of `table` with keys in `from..=upto`, as they were at `at`.
    fn rows_at(
        &self,
        table: TableId,
        (from, upto): (u64, u64),
        n: usize,
        at: Ts,
    ) -> Vec<(u64, u64)> {
        self.versions
            .range((table, from)..=(table, upto))
            .filter_map(|((_, k), vs)| {
                let v = vs.iter().rev().find(|v| v.0 <= at)?.1?;
                Some((*k, v))
            })
            .take(n)
            .collect()
    }

    /// The value of a key at `at` (`None`: absent).
    pub fn value_at(&self, table: TableId, key: u64, at: Ts) -> Option<u64> {
        let vs = self.versions.get(&(table, key))?;
        vs.iter().rev().find(|v| v.0 <= at)?.1
    }

    /// A heartbeat write (the server's `sluice.heartbeat` row): a transaction of no captured
    /// table, so only the position moves.
    pub fn heartbeat(&mut self) {
        self.next_ts();
    }

    /// The row a feed row index names: (table, key, value or `None` for a delete, commit ts; a
    /// snapshot row: the position it was read at).
    pub fn row_at(&self, idx: usize) -> Option<(TableId, u64, Option<u64>, Ts)> {
        if idx >= SNAP_BASE {
            let (t, k, v, p) = *self.snap_rows.get(idx - SNAP_BASE)?;
            return Some((t, k, Some(v), p));
        }
        match self.history.get(idx)? {
            UEvent::Row {
                ts,
                table,
                key,
                value,
            } => Some((*table, *key, *value, *ts)),
            UEvent::Ddl { .. } => None,
        }
    }

    pub fn add_initial_table(
        &mut self,
        rng: &mut Rng,
        id: TableId,
        name: &str,
        regions: u64,
        rows: u64,
    ) {
        let mut t = UTable {
            id,
            names: vec![(0, name.to_string())],
            regions: regions.max(1),
            created: 0,
            dropped: None,
            rows: BTreeMap::new(),
        };
        while (t.rows.len() as u64) < rows {
            let k = rng.next_u64() % KEYSPACE;
            let v = rng.next_u64();
            t.rows.insert(k, v);
        }
        for (k, v) in &t.rows {
            self.versions
                .insert((id, *k), vec![(0, Some(*v), usize::MAX)]);
        }
        self.tables.insert(id, t);
        self.by_table.entry(id).or_default();
    }

    fn push(&mut self, ev: UEvent) {
        let idx = self.history.len();
        if let UEvent::Row { table, .. } = &ev {
            self.by_table.entry(*table).or_default().push(idx);
        }
        self.history.push(ev);
    }

    /// `rows` inserts/updates then `deletes` deletes on `table`, `txn_rows` per transaction.
    /// Returns the commit ts used.
    pub fn write(
        &mut self,
        rng: &mut Rng,
        table: TableId,
        rows: u64,
        txn_rows: u64,
        deletes: u64,
    ) -> Vec<Ts> {
        let mut changes: Vec<(u64, Option<u64>)> = Vec::new();
        // A dropped table takes no more writes (the upstream refuses them).
        let Some(t) = self.tables.get(&table).filter(|t| t.dropped.is_none()) else {
            return Vec::new();
        };
        let mut keys: Vec<u64> = t.rows.keys().copied().collect();
        let mut deleted: BTreeSet<u64> = BTreeSet::new();
        for _ in 0..rows {
            let update = !keys.is_empty() && rng.chance(0.5);
            let k = if update {
                keys[(rng.next_u64() % keys.len() as u64) as usize]
            } else {
                rng.next_u64() % KEYSPACE
            };
            if !update {
                keys.push(k);
            }
            changes.push((k, Some(rng.next_u64())));
        }
        for _ in 0..deletes {
            let live: Vec<u64> = keys
                .iter()
                .copied()
                .filter(|k| !deleted.contains(k))
                .collect();
            let Some(k) = rng.pick(&live).copied() else {
                break;
            };
            deleted.insert(k);
            changes.push((k, None));
        }
        let mut used = Vec::new();
        for chunk in changes.chunks(txn_rows.max(1) as usize) {
            let ts = self.next_ts();
            used.push(ts);
            for (k, v) in chunk {
                self.change(ts, table, *k, *v);
            }
            self.max_txn_rows = self.max_txn_rows.max(chunk.len() as u64);
        }
        used
    }

    /// One row change at `ts` (of the transaction being written).
    fn change(&mut self, ts: Ts, table: TableId, k: u64, v: Option<u64>) {
        if let Some(t) = self.tables.get_mut(&table) {
            match v {
                Some(v) => {
                    t.rows.insert(k, v);
                }
                None => {
                    t.rows.remove(&k);
                }
            }
        }
        let idx = self.history.len();
        self.versions
            .entry((table, k))
            .or_default()
            .push((ts, v, idx));
        self.push(UEvent::Row {
            ts,
            table,
            key: k,
            value: v,
        });
    }

    /// `txns` transactions, each changing `rows` rows (inserts or updates) of every live table
    /// of `tables`. Returns the commit ts used.
    pub fn write_txns(
        &mut self,
        rng: &mut Rng,
        tables: &[TableId],
        txns: u64,
        rows: u64,
    ) -> Vec<Ts> {
        let live: Vec<TableId> = tables
            .iter()
            .copied()
            .filter(|t| self.tables.get(t).is_some_and(|x| x.dropped.is_none()))
            .collect();
        let mut used = Vec::new();
        if live.is_empty() {
            return used;
        }
        for _ in 0..txns {
            let ts = self.next_ts();
            used.push(ts);
            for &table in &live {
                let keys: Vec<u64> = self
                    .tables
                    .get(&table)
                    .map(|t| t.rows.keys().copied().collect())
                    .unwrap_or_default();
                for _ in 0..rows {
                    let k = match rng.pick(&keys) {
                        Some(k) if rng.chance(0.3) => *k,
                        _ => rng.next_u64() % KEYSPACE,
                    };
                    let v = rng.next_u64();
                    self.change(ts, table, k, Some(v));
                }
            }
            self.max_txn_rows = self.max_txn_rows.max(rows);
        }
        used
    }

    /// Capture catches up with the head.
    pub fn capture(&mut self) {
        self.captured = self.head;
    }

    /// The history index of the DDL committed at `ts`.
    pub fn ddl_index(&self, ts: Ts) -> Option<usize> {
        let start = self.history.partition_point(|e| e.ts() < ts);
        self.history[start..]
            .iter()
            .take_while(|e| e.ts() == ts)
            .position(|e| matches!(e, UEvent::Ddl { .. }))
            .map(|i| start + i)
    }

    /// How many rows of `span` the transaction at `ts` changed.
    pub fn txn_rows_in(&self, span: &Span, ts: Ts) -> usize {
        let start = self.history.partition_point(|e| e.ts() < ts);
        self.history[start..]
            .iter()
            .take_while(|e| e.ts() == ts)
            .filter(|e| matches!(e, UEvent::Row { table, key, .. } if span.contains(&Key::row_u64(*table, *key))))
            .count()
    }

    fn live_tables_in(&self, db: &str, ts: Ts) -> Vec<TableId> {
        let prefix = format!("{db}.");
        self.tables
            .values()
            .filter(|t| t.live_at(ts) && t.name_at(ts).starts_with(&prefix))
            .map(|t| t.id)
            .collect()
    }

    fn ddl_event(
        ts: Ts,
        kind: DdlKind,
        database: &str,
        query: String,
        influence: DdlInfluence,
    ) -> DdlEvent {
        DdlEvent {
            session: Default::default(),
            object_database: None,
            commit_ts: ts,
            commit_time_ms: 0,
            kind,
            database: database.to_string(),
            query,
            influence,
        }
    }

    /// Apply a DDL; returns (commit ts, tables created with their regions).
    #[allow(clippy::too_many_arguments)]
    pub fn ddl(
        &mut self,
        kind: &str,
        table: Option<TableId>,
        new_table: Option<TableId>,
        name: Option<String>,
        regions: u64,
        database: Option<String>,
    ) -> (Ts, Vec<(TableId, u64)>) {
        let ts = self.next_ts();
        let mut created = Vec::new();
        let made = match kind {
            "create_table" => self.create_table(ts, table, name, regions, &mut created),
            "drop_table" => table.map(|t| self.drop_table(ts, t)),
            "truncate_table" => self.truncate_table(ts, table, new_table, &mut created),
            "rename_table" => self.rename_table(ts, table, name),
            "add_column" => table.map(|t| self.add_column(ts, t)),
            "create_database" => Some(self.database_ddl(ts, database.unwrap_or_default(), false)),
            "drop_database" => Some(self.database_ddl(ts, database.unwrap_or_default(), true)),
            // x-create_view: an All-tables DDL.
            _ => Some(self.create_view(ts, database.unwrap_or_default())),
        };
        if let Some((ev, affected)) = made {
            self.push(UEvent::Ddl {
                ddl: Box::new(ev),
                affected,
            });
        }
        (ts, created)
    }

    /// Table `t`'s name at `ts` ("" if unknown).
    fn name_at(&self, t: TableId, ts: Ts) -> String {
        self.tables
            .get(&t)
            .map(|x| x.name_at(ts).to_string())
            .unwrap_or_default()
    }

    /// A new table `t` named `n` from `ts`.
    fn add_table(&mut self, t: TableId, n: &str, regions: u64, ts: Ts) {
        self.tables.insert(
            t,
            UTable {
                id: t,
                names: vec![(ts, n.to_string())],
                regions,
                created: ts,
                dropped: None,
                rows: BTreeMap::new(),
            },
        );
    }

    fn create_table(
        &mut self,
        ts: Ts,
        table: Option<TableId>,
        name: Option<String>,
        regions: u64,
        created: &mut Vec<(TableId, u64)>,
    ) -> Option<(DdlEvent, Vec<TableId>)> {
        let (t, n) = (table?, name?);
        self.add_table(t, &n, regions.max(1), ts);
        created.push((t, regions.max(1)));
        let inf = DdlInfluence {
            added: vec![(t, n.clone())],
            ..DdlInfluence::scoped(InfluenceScope::Tables(vec![]), true)
        };
        let query = format!("CREATE TABLE {n}");
        Some((
            Self::ddl_event(ts, DdlKind::CreateTable, &db_of(&n), query, inf),
            vec![],
        ))
    }

    fn drop_table(&mut self, ts: Ts, t: TableId) -> (DdlEvent, Vec<TableId>) {
        let n = self.name_at(t, ts);
        if let Some(x) = self.tables.get_mut(&t) {
            x.dropped = Some(ts);
        }
        let inf = DdlInfluence {
            dropped: vec![t],
            ..DdlInfluence::scoped(InfluenceScope::Tables(vec![t]), true)
        };
        let query = format!("DROP TABLE {n}");
        (
            Self::ddl_event(ts, DdlKind::DropTable, &db_of(&n), query, inf),
            vec![t],
        )
    }

    /// TRUNCATE: table `t` ends and `nt` (same name and regions) begins.
    fn truncate_table(
        &mut self,
        ts: Ts,
        table: Option<TableId>,
        new_table: Option<TableId>,
        created: &mut Vec<(TableId, u64)>,
    ) -> Option<(DdlEvent, Vec<TableId>)> {
        let (t, nt) = (table?, new_table?);
        let n = self.name_at(t, ts);
        let regions = self.tables.get(&t).map(|x| x.regions).unwrap_or(1);
        if let Some(x) = self.tables.get_mut(&t) {
            x.dropped = Some(ts);
        }
        self.add_table(nt, &n, regions, ts);
        created.push((nt, regions));
        let inf = DdlInfluence {
            dropped: vec![t],
            added: vec![(nt, n.clone())],
            ..DdlInfluence::scoped(InfluenceScope::Tables(vec![t]), true)
        };
        let query = format!("TRUNCATE TABLE {n}");
        Some((
            Self::ddl_event(ts, DdlKind::TruncateTable, &db_of(&n), query, inf),
            vec![t],
        ))
    }

    /// RENAME; refused upstream (no event) when the new name exists (1050).
    fn rename_table(
        &mut self,
        ts: Ts,
        table: Option<TableId>,
        name: Option<String>,
    ) -> Option<(DdlEvent, Vec<TableId>)> {
        let (t, nn) = (table?, name?);
        let n = self.name_at(t, ts);
        let taken = self
            .tables
            .values()
            .any(|x| x.live_at(ts) && x.name_at(ts) == nn);
        if taken {
            return None;
        }
        if let Some(x) = self.tables.get_mut(&t) {
            x.names.push((ts, nn.clone()));
        }
        let inf = DdlInfluence {
            renamed: vec![(t, nn.clone())],
            ..DdlInfluence::scoped(InfluenceScope::Tables(vec![t]), true)
        };
        let query = format!("RENAME TABLE {n} TO {nn}");
        Some((
            Self::ddl_event(ts, DdlKind::RenameTable, &db_of(&n), query, inf),
            vec![t],
        ))
    }

    fn add_column(&mut self, ts: Ts, t: TableId) -> (DdlEvent, Vec<TableId>) {
        let n = self.name_at(t, ts);
        let inf = DdlInfluence::scoped(InfluenceScope::Tables(vec![t]), false);
        let query = format!("ALTER TABLE {n} ADD COLUMN c{ts} INT");
        (
            Self::ddl_event(ts, DdlKind::AlterTable, &db_of(&n), query, inf),
            vec![t],
        )
    }

    /// CREATE or DROP DATABASE `db` (a drop ends every live table in it).
    fn database_ddl(&mut self, ts: Ts, db: String, drop: bool) -> (DdlEvent, Vec<TableId>) {
        let affected = self.live_tables_in(&db, ts);
        let mut inf = DdlInfluence::scoped(InfluenceScope::Database(db.clone()), true);
        let (kind, query) = if drop {
            for t in &affected {
                if let Some(x) = self.tables.get_mut(t) {
                    x.dropped = Some(ts);
                }
            }
            inf.dropped = affected.clone();
            (DdlKind::DropDatabase, format!("DROP DATABASE {db}"))
        } else {
            (DdlKind::CreateDatabase, format!("CREATE DATABASE {db}"))
        };
        (Self::ddl_event(ts, kind, &db, query, inf), affected)
    }

    fn create_view(&mut self, ts: Ts, db: String) -> (DdlEvent, Vec<TableId>) {
        let affected: Vec<TableId> = self
            .tables
            .values()
            .filter(|t| t.live_at(ts))
            .map(|t| t.id)
            .collect();
        let inf = DdlInfluence::scoped(InfluenceScope::All, true);
        let query = format!("CREATE VIEW {db}.v{ts} AS SELECT 1");
        (
            Self::ddl_event(ts, DdlKind::CreateView, &db, query, inf),
            affected,
        )
    }

    pub fn snapshot(&self, at: Ts) -> SchemaSnapshot {
        let tables = self
            .tables
            .values()
            .filter(|t| t.live_at(at))
            .map(|t| TableInfo {
                id: t.id,
                name: t.name_at(at).to_string(),
                regions: t.boundaries(),
                splittable: true,
            })
            .collect();
        let start = self.history.partition_point(|e| e.ts() <= at);
        let ddls_after = self.history[start..]
            .iter()
            .filter_map(|e| match e {
                UEvent::Ddl { ddl, .. } => Some((**ddl).clone()),
                _ => None,
            })
            .collect();
        SchemaSnapshot {
            at_ts: at,
            tables,
            ddls_after,
        }
    }
}

impl EventSource for Upstream {
    type Row = SimRow;

    /// A row's place in its transaction is its index in the history; a scan cut by the limit
    /// resumes at the first row left out (inside its transaction, or after the ts before it).
    fn scan(&self, span: &Span, from: Pos, upto: Ts, limit: usize) -> Result<Scan<SimRow>, String> {
        let idxs = self
            .by_table
            .get(&span.table)
            .map_or(&[][..], |v| v.as_slice());
        let start = idxs.partition_point(|i| {
            let ts = self.history[*i].ts();
            ts < from.ts || (ts == from.ts && (!from.inside() || *i as u64 <= from.seq as u64))
        });
        let mut rows: Vec<SimRow> = Vec::new();
        for &i in &idxs[start..] {
            let UEvent::Row {
                ts,
                table,
                key,
                value,
            } = &self.history[i]
            else {
                continue;
            };
            if *ts > upto {
                break;
            }
            let k = Key::row_u64(*table, *key);
            if !span.contains(&k) {
                continue;
            }
            if rows.len() >= limit {
                let next = match rows.last() {
                    Some(last) if last.ts == *ts => Pos {
                        ts: *ts,
                        seq: last.idx as u32,
                    },
                    _ => Pos::after(*ts - 1),
                };
                return Ok(Scan {
                    rows,
                    next: Some(next),
                });
            }
            rows.push(SimRow {
                ts: *ts,
                key: k,
                idx: i,
                kind: if value.is_some() {
                    RowKind::Update
                } else {
                    RowKind::Delete
                },
            });
        }
        Ok(Scan { rows, next: None })
    }

    fn ddls(&self, after: Ts, upto: Ts) -> Result<Vec<DdlEvent>, String> {
        let start = self.history.partition_point(|e| e.ts() <= after);
        Ok(self.history[start..]
            .iter()
            .take_while(|e| e.ts() <= upto)
            .filter_map(|e| match e {
                UEvent::Ddl { ddl, .. } => Some((**ddl).clone()),
                UEvent::Row { .. } => None,
            })
            .collect())
    }

    fn complete(&self) -> Ts {
        self.captured
    }

    fn floor(&self) -> Ts {
        0
    }

    fn database_of(&self, table: TableId, at: Ts) -> Option<String> {
        let t = self.tables.get(&table)?;
        let name = t.name_at(at);
        name.split('.').next().map(str::to_string)
    }
}

/// The database part of a qualified name.
fn db_of(n: &str) -> String {
    n.split('.').next().unwrap_or("").to_string()
}
