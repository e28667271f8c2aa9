//! The replay rule: where each table's replay starts when a maintainer bootstraps from a
//! checkpoint below DDLs the downstream has already applied.
//!
//! The changefeed checkpoint can lag behind what the downstream holds: a DDL is applied as soon
//! as every dispatcher of the tables it concerns has flushed what came before it, while the
//! checkpoint waits for every other table too. Replaying such a table from the checkpoint would
//! put back rows the DDL had already removed (a `TRUNCATE`) or write into a table the downstream
//! no longer has (a `DROP TABLE`). So the downstream's own record bounds the replay:
//!
//! - a table that took part in a recorded DDL at `T` (its dispatchers waited at its barrier, so
//!   every earlier row of it is durable) starts at `T` when the DDL finished (the DDL is behind it)
//!   and at `T - 1` when it was only started (the DDL runs again, nothing before it does);
//! - a table a finished DDL drops never gets a dispatcher again, and no later replay of an
//!   earlier DDL (its `CREATE`, a rename into the filter) brings it back.
//!
//! The same bound holds for every dispatcher started later, not only at bootstrap: a dispatcher
//! that replaces another (a move, split or merge, a node lost, a sink session recovered) may
//! start at a checkpoint below a DDL of its table the downstream already recorded (a
//! non-blocking DDL the maintainer never sees, an acknowledgement still on its way). Replaying
//! from there would write older versions of rows over newer ones, and a crash before the
//! replay caught up would leave them so, because the next bootstrap's floor trusts the record.
//! So such a dispatcher asks for its table's floor ([`table_floor`]) before it subscribes.
//!
//! Invariants: a floor never goes below the checkpoint's replay and only ever rises; what a
//! table took part in is computed over the table set as the DDLs after the checkpoint change it,
//! in commit order, exactly as the barrier decides participants.

use crate::io::{AppliedDdl, SchemaSnapshot};
use crate::msg::{BlockStage, DispatcherReport};
use sluice_types::{DdlEvent, InfluenceScope, NodeId, TableId, Ts};
use std::collections::{BTreeMap, BTreeSet};

/// Per-table bounds of a replay (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayBounds {
    /// The commit ts each table's dispatchers start after, at least.
    pub floors: BTreeMap<TableId, Ts>,
    /// Tables a finished DDL dropped downstream.
    pub gone: BTreeSet<TableId>,
}

impl ReplayBounds {
    /// The floor of `table` (0: none).
    pub fn floor(&self, table: TableId) -> Ts {
        self.floors.get(&table).copied().unwrap_or(0)
    }

    fn raise(&mut self, table: TableId, ts: Ts) {
        let f = self.floors.entry(table).or_insert(0);
        *f = (*f).max(ts);
    }
}

/// The bounds the downstream's record `applied` sets on a replay of `snapshot`'s DDLs.
pub fn replay_bounds(snapshot: &SchemaSnapshot, applied: &[AppliedDdl]) -> ReplayBounds {
    // The `replay-ignores-applied-ddls` mutation: every table replays from the checkpoint, as
    // before the replay rule (issue 9, reproductions 1 and 2).
    #[cfg(feature = "mutations")]
    if crate::mutations::on("replay-ignores-applied-ddls") {
        return ReplayBounds::default();
    }
    let mut recorded: BTreeMap<Ts, bool> = BTreeMap::new();
    for a in applied {
        // Recorded both ways (the sink and a report): finished.
        *recorded.entry(a.commit_ts).or_insert(false) |= a.finished;
    }
    let mut live: BTreeMap<TableId, String> = snapshot
        .tables
        .iter()
        .map(|t| (t.id, t.name.clone()))
        .collect();
    let mut bounds = ReplayBounds::default();
    for ddl in &snapshot.ddls_after {
        if let Some(finished) = recorded.get(&ddl.commit_ts) {
            let floor = if *finished {
                ddl.commit_ts
            } else {
                ddl.commit_ts.saturating_sub(1)
            };
            for t in participants(&live, ddl) {
                bounds.raise(t, floor);
            }
            if *finished {
                bounds.gone.extend(ddl.influence.dropped.iter().copied());
                for (t, _) in &ddl.influence.added {
                    bounds.raise(*t, ddl.commit_ts);
                }
            }
        }
        advance(&mut live, ddl);
    }
    bounds
}

/// Where a dispatcher of `table` about to start at `snapshot.at_ts` starts at the earliest: just
/// below the latest DDL of the table the downstream's record `applied` holds (`snapshot.at_ts`
/// when it holds none). Every row of the table below that DDL is durable downstream (its
/// participants all flushed before it was recorded); the DDL itself comes again, finished or
/// not, so the dispatcher still takes part in its barrier (a table it drops is left through
/// the barrier, as ever) and replays no row the predecessor may have passed.
pub fn table_floor(snapshot: &SchemaSnapshot, applied: &[AppliedDdl], table: TableId) -> Ts {
    // The `replacement-ignores-floor` mutation: a replacement starts where it was told, below
    // what the downstream applied (seed 7681 of the 02b631d soak).
    #[cfg(feature = "mutations")]
    if crate::mutations::on("replacement-ignores-floor") {
        return snapshot.at_ts;
    }
    // Read as only started, each recorded DDL bounds its participants at `T - 1`.
    let started: Vec<AppliedDdl> = applied
        .iter()
        .map(|a| AppliedDdl {
            commit_ts: a.commit_ts,
            finished: false,
        })
        .collect();
    replay_bounds(snapshot, &started)
        .floor(table)
        .max(snapshot.at_ts)
}

/// The downstream's record completed by what the nodes report at bootstrap: a dispatcher told
/// to write a DDL (`Writing`) may have got it through after the record was read, and one that
/// reports it written or passed proves it finished.
pub fn with_reported(
    mut applied: Vec<AppliedDdl>,
    responses: &BTreeMap<NodeId, Vec<DispatcherReport>>,
) -> Vec<AppliedDdl> {
    for r in responses.values().flatten() {
        let Some(b) = &r.block else { continue };
        let finished = match b.stage {
            BlockStage::Waiting => continue,
            BlockStage::Writing => false,
            BlockStage::Written | BlockStage::Passed => true,
        };
        applied.push(AppliedDdl {
            commit_ts: b.ddl_ts,
            finished,
        });
    }
    applied.sort();
    applied.dedup();
    applied
}

/// The tables (alive just before it) whose dispatchers take part in `ddl`'s barrier.
fn participants(live: &BTreeMap<TableId, String>, ddl: &DdlEvent) -> BTreeSet<TableId> {
    let inf = &ddl.influence;
    let mut out: BTreeSet<TableId> = match &inf.scope {
        InfluenceScope::Tables(ts) => ts.iter().copied().collect(),
        InfluenceScope::Database(db) => {
            let prefix = format!("{db}.");
            live.iter()
                .filter(|(_, n)| n.starts_with(&prefix))
                .map(|(t, _)| *t)
                .collect()
        }
        InfluenceScope::All => live.keys().copied().collect(),
    };
    out.extend(inf.sources.iter().copied());
    out.extend(inf.dropped.iter().copied());
    out.extend(inf.renamed.iter().map(|(t, _)| *t));
    out.retain(|t| live.contains_key(t));
    out
}

/// The table set after `ddl`.
fn advance(live: &mut BTreeMap<TableId, String>, ddl: &DdlEvent) {
    let inf = &ddl.influence;
    for t in &inf.dropped {
        live.remove(t);
    }
    for (t, name) in inf.added.iter().chain(inf.renamed.iter()) {
        live.insert(*t, name.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::TableInfo;
    use sluice_types::{DdlInfluence, DdlKind};

    fn table(id: u64, name: &str) -> TableInfo {
        TableInfo {
            id: TableId(id),
            name: name.into(),
            regions: vec![],
            splittable: true,
        }
    }

    fn ddl(ts: Ts, kind: DdlKind, influence: DdlInfluence) -> DdlEvent {
        DdlEvent {
            commit_ts: ts,
            commit_time_ms: 0,
            kind,
            database: "r".into(),
            query: format!("{kind:?}"),
            influence,
            session: None,
            object_database: None,
        }
    }

    fn truncate(ts: Ts, old: u64, name: &str) -> DdlEvent {
        let mut inf = DdlInfluence::scoped(InfluenceScope::Tables(vec![TableId(old)]), true);
        inf.dropped = vec![TableId(old)];
        inf.added = vec![(TableId(ts), name.into())];
        ddl(ts, DdlKind::TruncateTable, inf)
    }

    fn drop_table(ts: Ts, id: u64) -> DdlEvent {
        let mut inf = DdlInfluence::scoped(InfluenceScope::Tables(vec![TableId(id)]), true);
        inf.dropped = vec![TableId(id)];
        ddl(ts, DdlKind::DropTable, inf)
    }

    fn snapshot(ddls: Vec<DdlEvent>) -> SchemaSnapshot {
        SchemaSnapshot {
            at_ts: 10,
            tables: vec![table(1, "r.hold"), table(2, "r.tt"), table(3, "r.t5")],
            ddls_after: ddls,
        }
    }

    fn done(ts: Ts) -> AppliedDdl {
        AppliedDdl {
            commit_ts: ts,
            finished: true,
        }
    }

    #[test]
    fn a_finished_truncate_ends_the_old_table_and_starts_the_new_one_at_it() {
        let s = snapshot(vec![truncate(20, 2, "r.tt")]);
        let b = replay_bounds(&s, &[done(20)]);
        assert!(b.gone.contains(&TableId(2)));
        assert_eq!(b.floor(TableId(20)), 20);
        assert_eq!(
            b.floor(TableId(1)),
            0,
            "a table the DDL does not concern keeps the checkpoint"
        );
    }

    #[test]
    fn an_unrecorded_ddl_bounds_nothing() {
        let s = snapshot(vec![truncate(20, 2, "r.tt"), drop_table(30, 3)]);
        let b = replay_bounds(&s, &[]);
        assert_eq!(b, ReplayBounds::default());
    }

    #[test]
    fn a_started_ddl_replays_itself_but_nothing_before_it() {
        let s = snapshot(vec![drop_table(30, 3)]);
        let b = replay_bounds(
            &s,
            &[AppliedDdl {
                commit_ts: 30,
                finished: false,
            }],
        );
        assert!(
            b.gone.is_empty(),
            "an unfinished drop may not have happened"
        );
        assert_eq!(b.floor(TableId(3)), 29);
    }

    #[test]
    fn database_scope_is_decided_over_the_names_at_that_point() {
        // r.hold is renamed into database `s`, then `DROP DATABASE r` drops what is left in `r`.
        let mut rename = DdlInfluence::scoped(InfluenceScope::Tables(vec![TableId(1)]), true);
        rename.renamed = vec![(TableId(1), "s.hold".into())];
        let mut dropdb = DdlInfluence::scoped(InfluenceScope::Database("r".into()), true);
        dropdb.dropped = vec![TableId(2), TableId(3)];
        let s = snapshot(vec![
            ddl(20, DdlKind::RenameTable, rename),
            ddl(30, DdlKind::DropDatabase, dropdb),
        ]);
        let b = replay_bounds(&s, &[done(30)]);
        assert_eq!(b.floor(TableId(1)), 0, "s.hold was no longer in `r`");
        assert_eq!(b.gone, [TableId(2), TableId(3)].into_iter().collect());
    }

    #[test]
    fn floors_only_rise_over_several_recorded_ddls() {
        let alter = |ts| {
            ddl(
                ts,
                DdlKind::AlterTable,
                DdlInfluence::scoped(InfluenceScope::Tables(vec![TableId(1)]), false),
            )
        };
        let s = snapshot(vec![alter(20), alter(30)]);
        let b = replay_bounds(&s, &[done(30), done(20)]);
        assert_eq!(b.floor(TableId(1)), 30);
    }

    #[test]
    fn a_replacement_starts_just_below_its_tables_latest_recorded_ddl() {
        let alter = |ts, t| {
            ddl(
                ts,
                DdlKind::AlterTable,
                DdlInfluence::scoped(InfluenceScope::Tables(vec![TableId(t)]), false),
            )
        };
        let s = snapshot(vec![
            alter(20, 1),
            alter(30, 1),
            alter(40, 2),
            drop_table(50, 3),
        ]);
        let applied = [done(20), done(30), done(40), done(50)];
        // Rows below 30 are durable; the DDL at 30 comes again, no row the predecessor passed.
        assert_eq!(table_floor(&s, &applied, TableId(1)), 29);
        assert_eq!(table_floor(&s, &applied, TableId(2)), 39);
        // A dropped table's replacement still meets its DROP (and leaves through the barrier).
        assert_eq!(table_floor(&s, &applied, TableId(3)), 49);
        // Nothing recorded for the table, or nothing above the start: the start itself.
        assert_eq!(table_floor(&s, &[done(40)], TableId(1)), 10);
        let later = SchemaSnapshot {
            at_ts: 45,
            ..s.clone()
        };
        assert_eq!(table_floor(&later, &applied, TableId(2)), 45);
    }
}
