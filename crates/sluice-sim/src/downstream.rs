//! The model downstream: what a real sink's target holds, table by table, so a replay's effect on
//! the data is the one a real downstream would show.
//!
//! - `mysql`: tables by **name**, as a MySQL server has them. A row lands in the table that has
//!   its name now, whichever upstream version it belongs to (a row of a truncated-away version
//!   written after the `TRUNCATE` was applied lands in the new, emptied table); a row for a name
//!   the downstream does not have (its `DROP TABLE` / `DROP DATABASE` applied) fails the whole
//!   write, as MySQL refuses it with error 1146. DDLs keep a progress record like
//!   `sluice_sink.ddl_ts`: recorded *started* when the statement runs, *finished* once it took
//!   effect (at its acknowledgement; a crash in between leaves it started), and a finished one is
//!   skipped when written again. DDLs run in their idempotent form (`IF [NOT] EXISTS`).
//! - `storage`: rows by **table version** (the upstream table id: a `TRUNCATE` starts a new one),
//!   as the layout keeps each version in its own directory; writes never fail; every DDL written
//!   is recorded finished at once (its schema file is written before the acknowledgement).
//! - `blackhole`: keeps nothing.
//!
//! Every write applies rows in order, last write wins per key (safe mode: `REPLACE` and delete
//! by key), so replaying a prefix of the stream again ends in the upstream state, and anything
//! else (a replay that skipped a `TRUNCATE`, rows of a dropped version) shows in
//! [`Downstream::compare`].

use crate::scenario::SinkKind;
use crate::upstream::Upstream;
use sluice_control::io::AppliedDdl;
use sluice_types::{DdlEvent, DdlKind, Key, TableId, Ts};
use std::collections::BTreeMap;

/// Where a table's rows live downstream.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// A MySQL table by `db.table`.
    Named(String),
    /// A storage table version.
    Version(TableId),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Named(n) => write!(f, "table {n}"),
            Place::Version(t) => write!(f, "version {t:?}"),
        }
    }
}

/// One downstream table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DTable {
    /// The upstream table (version) it was created as.
    pub version: Option<TableId>,
    /// key -> value.
    pub rows: BTreeMap<u64, u64>,
}

#[derive(Debug)]
pub struct Downstream {
    kind: SinkKind,
    pub tables: BTreeMap<Place, DTable>,
    /// The DDL progress record: commit ts -> finished.
    record: BTreeMap<Ts, bool>,
}

/// The error a write into a table the downstream does not have meets (MySQL's 1146).
pub fn missing_table_error(place: &Place) -> String {
    format!("model downstream: {place} doesn't exist (1146)")
}

fn key_u64(k: &Key) -> u64 {
    let b = &k.0;
    if b.len() < 17 {
        return 0;
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[9..17]);
    u64::from_be_bytes(a)
}

impl Downstream {
    /// A downstream whose tables were created from the upstream's definitions at `start` but
    /// hold no rows: where a snapshot copies them.
    pub fn empty_tables(kind: SinkKind, up: &Upstream, start: Ts) -> Self {
        let mut d = Downstream::baseline(kind, up, start);
        for t in d.tables.values_mut() {
            t.rows.clear();
        }
        d
    }

    /// A downstream restored from a dump of the upstream at `start`: every table live then, with
    /// its rows then.
    pub fn baseline(kind: SinkKind, up: &Upstream, start: Ts) -> Self {
        let mut d = Downstream {
            kind,
            tables: BTreeMap::new(),
            record: BTreeMap::new(),
        };
        if kind != SinkKind::Blackhole {
            d.tables = expected(kind, up, start);
        }
        d
    }

    fn keeps_state(&self) -> bool {
        self.kind != SinkKind::Blackhole
    }

    /// Where a row of `table` committed at `ts` goes.
    fn place(&self, up: &Upstream, table: TableId, ts: Ts) -> Place {
        place_of(self.kind, up, table, ts)
    }

    /// A write of rows `(commit ts, key, history index)`: all of them land, in order, or (MySQL,
    /// a table it does not have) none, with the error the server returns.
    pub fn write_rows(&mut self, up: &Upstream, rows: &[(Ts, Key, u64)]) -> Result<(), String> {
        if !self.keeps_state() {
            return Ok(());
        }
        let mut changes = Vec::with_capacity(rows.len());
        for (ts, key, handle) in rows {
            let Some((table, _, value, _)) = up.row_at(*handle as usize) else {
                continue; // invented: the checker reports it
            };
            let (table, value) = (&table, &value);
            let place = self.place(up, *table, *ts);
            if self.kind == SinkKind::Mysql && !self.tables.contains_key(&place) {
                return Err(missing_table_error(&place));
            }
            changes.push((place, key_u64(key), *value));
        }
        for (place, k, v) in changes {
            let t = self.tables.entry(place).or_default();
            match v {
                Some(v) => {
                    t.rows.insert(k, v);
                }
                None => {
                    t.rows.remove(&k);
                }
            }
        }
        Ok(())
    }

    /// A DDL is written. Returns whether it ran (a DDL the MySQL record shows finished is
    /// skipped). MySQL records it started; storage records it finished.
    pub fn write_ddl(&mut self, up: &Upstream, ddl: &DdlEvent) -> bool {
        let ts = ddl.commit_ts;
        if self.kind == SinkKind::Blackhole {
            return true;
        }
        if self.record.get(&ts) == Some(&true) && self.kind == SinkKind::Mysql {
            return false;
        }
        // MySQL: `REPLACE INTO ddl_ts (…, finished) VALUES (…, 0)` before the statement runs.
        let finished = self.kind == SinkKind::Storage;
        *self.record.entry(ts).or_insert(false) |= finished;
        self.apply(up, ddl);
        true
    }

    /// The DDL at `ts` took effect (its acknowledgement): the record says finished.
    pub fn finish_ddl(&mut self, ts: Ts) {
        if let Some(f) = self.record.get_mut(&ts) {
            *f = true;
        }
    }

    /// What `Sink::applied_ddls(after)` reads.
    pub fn applied(&self, after: Ts) -> Vec<AppliedDdl> {
        if self.kind == SinkKind::Blackhole {
            return Vec::new();
        }
        self.record
            .range(after + 1..)
            .map(|(ts, finished)| AppliedDdl {
                commit_ts: *ts,
                finished: *finished,
            })
            .collect()
    }

    /// A DDL's effect on the tables, idempotent (a started DDL may run again).
    fn apply(&mut self, up: &Upstream, ddl: &DdlEvent) {
        let ts = ddl.commit_ts;
        let inf = &ddl.influence;
        match (self.kind, ddl.kind) {
            (SinkKind::Mysql, DdlKind::RenameTable) => {
                for (t, new) in &inf.renamed {
                    let old = self.place(up, *t, ts.saturating_sub(1));
                    let new = Place::Named(new.clone());
                    if old == new || self.tables.contains_key(&new) {
                        continue; // already done (or refused: the target exists)
                    }
                    if let Some(tb) = self.tables.remove(&old) {
                        self.tables.insert(new, tb);
                    }
                }
            }
            (SinkKind::Mysql, DdlKind::TruncateTable) => {
                for (t, name) in &inf.added {
                    let tb = self.tables.entry(Place::Named(name.clone())).or_default();
                    tb.rows.clear();
                    tb.version = Some(*t);
                }
            }
            (SinkKind::Mysql, _) => {
                for t in &inf.dropped {
                    let place = self.place(up, *t, ts.saturating_sub(1));
                    self.tables.remove(&place);
                }
                for (t, name) in &inf.added {
                    // CREATE TABLE IF NOT EXISTS
                    self.tables
                        .entry(Place::Named(name.clone()))
                        .or_insert_with(|| DTable {
                            version: Some(*t),
                            rows: BTreeMap::new(),
                        });
                }
            }
            _ => {
                // Storage: a new version gets its own directory; nothing is ever removed.
                for (t, _) in &inf.added {
                    self.tables
                        .entry(Place::Version(*t))
                        .or_insert_with(|| DTable {
                            version: Some(*t),
                            rows: BTreeMap::new(),
                        });
                }
            }
        }
    }

    /// The downstream equals the upstream at `cp`: every table live then holds exactly its rows
    /// then, and (MySQL) no other table is left (a dropped table's name stays gone).
    pub fn compare(&self, up: &Upstream, cp: Ts) -> Result<(), String> {
        if !self.keeps_state() {
            return Ok(());
        }
        let want = expected(self.kind, up, cp);
        for (place, w) in &want {
            let Some(got) = self.tables.get(place) else {
                return Err(format!(
                    "sink-state: the downstream has no {place} at checkpoint {cp} (upstream has {} rows)",
                    w.rows.len()
                ));
            };
            if let Some(diff) = first_difference(&w.rows, &got.rows) {
                return Err(format!(
                    "sink-state: {place} at checkpoint {cp}: {diff} ({} rows upstream, {} downstream, downstream version {:?}, upstream {:?})",
                    w.rows.len(),
                    got.rows.len(),
                    got.version,
                    w.version
                ));
            }
        }
        if self.kind == SinkKind::Mysql {
            if let Some((place, t)) = self.tables.iter().find(|(p, _)| !want.contains_key(p)) {
                return Err(format!(
                    "sink-state: the downstream still has {place} ({} rows, version {:?}), which no table upstream has at checkpoint {cp}",
                    t.rows.len(),
                    t.version
                ));
            }
        }
        Ok(())
    }
}

fn place_of(kind: SinkKind, up: &Upstream, table: TableId, ts: Ts) -> Place {
    match kind {
        SinkKind::Mysql => Place::Named(
            up.tables
                .get(&table)
                .map(|t| t.name_at(ts).to_string())
                .unwrap_or_default(),
        ),
        _ => Place::Version(table),
    }
}

/// The upstream's tables and rows at `at`, placed as a downstream of `kind` keeps them.
fn expected(kind: SinkKind, up: &Upstream, at: Ts) -> BTreeMap<Place, DTable> {
    let mut out: BTreeMap<Place, DTable> = BTreeMap::new();
    for t in up.tables.values().filter(|t| t.live_at(at)) {
        out.insert(
            place_of(kind, up, t.id, at),
            DTable {
                version: Some(t.id),
                rows: BTreeMap::new(),
            },
        );
    }
    for ((table, k), versions) in &up.versions {
        let Some(t) = up.tables.get(table) else {
            continue;
        };
        if !t.live_at(at) {
            continue;
        }
        let last = versions.iter().rev().find(|v| v.0 <= at).and_then(|v| v.1);
        if let Some(v) = last {
            if let Some(d) = out.get_mut(&place_of(kind, up, *table, at)) {
                d.rows.insert(*k, v);
            }
        }
    }
    out
}

fn first_difference(want: &BTreeMap<u64, u64>, got: &BTreeMap<u64, u64>) -> Option<String> {
    for (k, v) in want {
        match got.get(k) {
            None => return Some(format!("key {k} missing (upstream {v})")),
            Some(g) if g != v => return Some(format!("key {k} is {g}, upstream {v}")),
            _ => {}
        }
    }
    got.keys().find(|k| !want.contains_key(k)).map(|k| {
        format!("key {k} is there but not upstream (a row of an earlier version or a deleted one)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::upstream::UEvent;

    fn upstream() -> (Upstream, Rng) {
        let mut rng = Rng::new(1);
        let mut up = Upstream::new();
        up.add_initial_table(&mut rng, TableId(1), "r.tt", 1, 0);
        up.add_initial_table(&mut rng, TableId(2), "r.t5", 1, 0);
        (up, rng)
    }

    fn rows_of(up: &Upstream, table: TableId) -> Vec<(Ts, Key, u64)> {
        up.history
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                UEvent::Row {
                    ts, table: t, key, ..
                } if *t == table => Some((*ts, Key::row_u64(*t, *key), i as u64)),
                _ => None,
            })
            .collect()
    }

    fn ddl_at(up: &Upstream, ts: Ts) -> DdlEvent {
        up.history
            .iter()
            .find_map(|e| match e {
                UEvent::Ddl { ddl, .. } if ddl.commit_ts == ts => Some((**ddl).clone()),
                _ => None,
            })
            .expect("ddl")
    }

    #[test]
    fn mysql_rows_of_a_truncated_away_version_land_in_the_new_table() {
        let (mut up, mut rng) = upstream();
        let mut d = Downstream::baseline(SinkKind::Mysql, &up, up.head);
        up.write(&mut rng, TableId(1), 3, 1, 0);
        let old = rows_of(&up, TableId(1));
        let (t, _) = up.ddl(
            "truncate_table",
            Some(TableId(1)),
            Some(TableId(3)),
            None,
            1,
            None,
        );
        d.write_rows(&up, &old).expect("rows");
        assert!(d.write_ddl(&up, &ddl_at(&up, t)));
        d.finish_ddl(t);
        d.compare(&up, up.head).expect("in step");
        // The replay: the old rows again, then the TRUNCATE, already finished, is skipped.
        d.write_rows(&up, &old).expect("the name exists");
        assert!(!d.write_ddl(&up, &ddl_at(&up, t)));
        let e = d.compare(&up, up.head).expect_err("rows came back");
        assert!(e.starts_with("sink-state: table r.tt"), "{e}");
    }

    #[test]
    fn mysql_refuses_rows_of_a_dropped_table_and_records_started_then_finished() {
        let (mut up, mut rng) = upstream();
        let mut d = Downstream::baseline(SinkKind::Mysql, &up, up.head);
        up.write(&mut rng, TableId(2), 2, 1, 0);
        let rows = rows_of(&up, TableId(2));
        let (t, _) = up.ddl("drop_table", Some(TableId(2)), None, None, 1, None);
        d.write_rows(&up, &rows).expect("rows");
        assert!(d.write_ddl(&up, &ddl_at(&up, t)));
        assert_eq!(
            d.applied(0),
            vec![AppliedDdl {
                commit_ts: t,
                finished: false
            }]
        );
        // Started, not finished: it runs again (idempotent).
        assert!(d.write_ddl(&up, &ddl_at(&up, t)));
        d.finish_ddl(t);
        assert_eq!(
            d.applied(0),
            vec![AppliedDdl {
                commit_ts: t,
                finished: true
            }]
        );
        assert!(d.applied(t).is_empty());
        let e = d.write_rows(&up, &rows).expect_err("the table is gone");
        assert!(e.contains("1146") && e.contains("r.t5"), "{e}");
        d.compare(&up, up.head).expect("nothing landed");
    }

    #[test]
    fn storage_keeps_versions_apart_and_never_refuses() {
        let (mut up, mut rng) = upstream();
        let mut d = Downstream::baseline(SinkKind::Storage, &up, up.head);
        up.write(&mut rng, TableId(1), 3, 1, 0);
        let old = rows_of(&up, TableId(1));
        let (t, _) = up.ddl(
            "truncate_table",
            Some(TableId(1)),
            Some(TableId(3)),
            None,
            1,
            None,
        );
        d.write_rows(&up, &old).expect("rows");
        assert!(d.write_ddl(&up, &ddl_at(&up, t)));
        assert_eq!(
            d.applied(0),
            vec![AppliedDdl {
                commit_ts: t,
                finished: true
            }]
        );
        d.write_rows(&up, &old).expect("an old version's directory");
        assert!(
            d.write_ddl(&up, &ddl_at(&up, t)),
            "storage accepts repeated DDLs"
        );
        d.compare(&up, up.head)
            .expect("the new version is untouched");
    }

    #[test]
    fn a_rename_moves_the_rows_and_a_left_over_table_is_a_difference() {
        let (mut up, mut rng) = upstream();
        let mut d = Downstream::baseline(SinkKind::Mysql, &up, up.head);
        up.write(&mut rng, TableId(1), 3, 1, 0);
        d.write_rows(&up, &rows_of(&up, TableId(1))).expect("rows");
        let (t, _) = up.ddl(
            "rename_table",
            Some(TableId(1)),
            None,
            Some("s.tt".into()),
            1,
            None,
        );
        assert!(d.write_ddl(&up, &ddl_at(&up, t)));
        d.compare(&up, up.head).expect("renamed");
        let (t, _) = up.ddl("drop_table", Some(TableId(2)), None, None, 1, None);
        let e = d
            .compare(&up, up.head)
            .expect_err("the drop is not applied yet");
        assert!(e.contains("still has table r.t5"), "{e}");
        assert!(d.write_ddl(&up, &ddl_at(&up, t)));
        d.compare(&up, up.head).expect("dropped");
    }
}
