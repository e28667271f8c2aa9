//! Foreign keys of the schema history, and the child rows InnoDB changes without the binlog.
//!
//! InnoDB applies `ON DELETE` / `ON UPDATE` actions other than `RESTRICT` and `NO ACTION`
//! (`CASCADE`, `SET NULL`, `SET DEFAULT`) to child rows inside the storage engine: MariaDB
//! writes the parent's row change to the binlog, never the child's. The MySQL sink writes with
//! `foreign_key_checks = 0`, so a downstream does not cascade either. Capture therefore knows
//! every table's foreign keys ([`ForeignKeys`], kept by the [`crate::schema::SchemaHistory`]:
//! from `information_schema` at the snapshot, then from CREATE TABLE, ALTER TABLE ADD/DROP
//! FOREIGN KEY, RENAME and TRUNCATE), and turns a parent row change that can cascade into an
//! [`Unreplicable`] for each child table ([`cascades`]): that table stops loudly while every
//! other table goes on.
//!
//! Invariants:
//! - keys are versioned by commit ts like table versions: [`ForeignKeys::at`]`(id, ts)` is the
//!   state after every DDL with commit ts `<= ts`;
//! - a parent is named by `(database, table)`, as InnoDB keeps it: a RENAME of the parent
//!   renames the reference (a new version of every child), and a parent dropped and created
//!   again (under `foreign_key_checks=0`) is the parent of the old children again;
//! - unnamed keys get InnoDB's names (`<table>_ibfk_<n>`, `n` one above the highest in use),
//!   renamed with their table, so `DROP FOREIGN KEY <generated name>` finds them;
//! - a DELETE of a parent row with a child key whose `ON DELETE` changes children, or an
//!   UPDATE changing a referenced column with a child key whose `ON UPDATE` changes children,
//!   stops the child (and, transitively, the children the child's change cascades into), once
//!   per child table per transaction, even when no child row matched (capture cannot see
//!   the child rows). `RESTRICT` / `NO ACTION` children never stop.

use crate::schema::SchemaHistory;
use crate::unreplicable::Unreplicable;
use serde::{Deserialize, Serialize};
use sluice_types::{TableId, Ts};
use sqlparser::ast::{ColumnOption, ForeignKeyConstraint, ReferentialAction, TableConstraint};
use std::collections::{BTreeMap, BTreeSet};

/// What a foreign key does to child rows when their parent row is deleted or its referenced
/// columns are updated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FkAction {
    #[default]
    Restrict,
    NoAction,
    Cascade,
    SetNull,
    SetDefault,
}

impl FkAction {
    /// Whether InnoDB changes child rows (outside the binlog) for this action.
    pub fn changes_children(self) -> bool {
        matches!(
            self,
            FkAction::Cascade | FkAction::SetNull | FkAction::SetDefault
        )
    }

    /// From `information_schema.REFERENTIAL_CONSTRAINTS.UPDATE_RULE` / `DELETE_RULE`.
    pub fn from_rule(rule: &str) -> FkAction {
        match rule.to_ascii_uppercase().as_str() {
            "CASCADE" => FkAction::Cascade,
            "SET NULL" => FkAction::SetNull,
            "SET DEFAULT" => FkAction::SetDefault,
            "NO ACTION" => FkAction::NoAction,
            _ => FkAction::Restrict,
        }
    }

    fn from_ast(a: Option<ReferentialAction>) -> FkAction {
        match a {
            Some(ReferentialAction::Cascade) => FkAction::Cascade,
            Some(ReferentialAction::SetNull) => FkAction::SetNull,
            Some(ReferentialAction::SetDefault) => FkAction::SetDefault,
            Some(ReferentialAction::NoAction) => FkAction::NoAction,
            Some(ReferentialAction::Restrict) | None => FkAction::Restrict,
        }
    }

    pub fn sql(self) -> &'static str {
        match self {
            FkAction::Restrict => "RESTRICT",
            FkAction::NoAction => "NO ACTION",
            FkAction::Cascade => "CASCADE",
            FkAction::SetNull => "SET NULL",
            FkAction::SetDefault => "SET DEFAULT",
        }
    }
}

/// One foreign key of a child table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignKey {
    /// The constraint name (InnoDB's generated one for an unnamed key).
    pub name: String,
    /// The child's columns.
    pub columns: Vec<String>,
    pub parent_database: String,
    pub parent_table: String,
    /// The parent's referenced columns.
    pub parent_columns: Vec<String>,
    pub on_delete: FkAction,
    pub on_update: FkAction,
}

impl ForeignKey {
    /// Whether a parent change can change child rows through this key.
    pub fn cascades(&self) -> bool {
        self.on_delete.changes_children() || self.on_update.changes_children()
    }
}

/// The keys of one table from commit ts `from` on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FkVersion {
    pub from: Ts,
    pub keys: Vec<ForeignKey>,
}

/// Every table's foreign keys over time (see the module docs). Empty in histories persisted
/// before it existed: their tables then have no known keys until a DDL defines some.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignKeys {
    pub tables: BTreeMap<TableId, Vec<FkVersion>>,
}

impl ForeignKeys {
    /// The keys of table `id` at `ts`.
    pub fn at(&self, id: TableId, ts: Ts) -> &[ForeignKey] {
        self.tables
            .get(&id)
            .and_then(|v| v.iter().rev().find(|v| v.from <= ts))
            .map(|v| v.keys.as_slice())
            .unwrap_or(&[])
    }

    /// Table `id` has `keys` from `ts` on (a second change at the same ts replaces the first).
    pub fn set(&mut self, id: TableId, ts: Ts, keys: Vec<ForeignKey>) {
        if keys.is_empty() && self.at(id, ts).is_empty() {
            return;
        }
        let versions = self.tables.entry(id).or_default();
        assert!(
            versions.last().is_none_or(|v| v.from <= ts),
            "foreign keys of {id:?} set at {ts} below their last version"
        );
        match versions.last_mut() {
            Some(v) if v.from == ts => v.keys = keys,
            _ => versions.push(FkVersion { from: ts, keys }),
        }
    }

    /// Table `old` becomes table `new` (TRUNCATE): it keeps its keys.
    pub fn carry(&mut self, old: TableId, new: TableId, ts: Ts) {
        let keys = self.at(old, ts).to_vec();
        self.set(new, ts, keys);
    }

    /// Table `id` was renamed from `from` to `to` at `ts`: its generated key names follow, and
    /// every key referencing `from` references `to`.
    pub fn renamed(&mut self, id: TableId, from: (&str, &str), to: (&str, &str), ts: Ts) {
        let old_prefix = format!("{}_ibfk_", from.1);
        let own: Vec<ForeignKey> = self
            .at(id, ts)
            .iter()
            .cloned()
            .map(|mut k| {
                if let Some(n) = k.name.strip_prefix(&old_prefix) {
                    k.name = format!("{}_ibfk_{n}", to.1);
                }
                k
            })
            .collect();
        self.set(id, ts, own);
        let ids: Vec<TableId> = self.tables.keys().copied().collect();
        for child in ids {
            let keys = self.at(child, ts);
            if !keys.iter().any(|k| references(k, from)) {
                continue;
            }
            let keys = keys
                .iter()
                .cloned()
                .map(|mut k| {
                    if references(&k, from) {
                        k.parent_database = to.0.to_string();
                        k.parent_table = to.1.to_string();
                    }
                    k
                })
                .collect();
            self.set(child, ts, keys);
        }
    }

    /// Applies an ALTER TABLE's key changes to table `id` (`table` is its name before a rename).
    pub fn alter(&mut self, id: TableId, ts: Ts, table: &str, change: AlterKeys) {
        let mut keys = self.at(id, ts).to_vec();
        keys.retain(|k| {
            !change
                .dropped
                .iter()
                .any(|d| d.eq_ignore_ascii_case(&k.name))
        });
        for (old, new) in &change.renamed_columns {
            for c in keys.iter_mut().flat_map(|k| k.columns.iter_mut()) {
                if c.eq_ignore_ascii_case(old) {
                    c.clone_from(new);
                }
            }
        }
        for k in change.added {
            push_named(&mut keys, k, table);
        }
        self.set(id, ts, keys);
    }
}

fn references(k: &ForeignKey, parent: (&str, &str)) -> bool {
    k.parent_database == parent.0 && k.parent_table == parent.1
}

/// Adds `k` to `keys`, giving it InnoDB's generated name when it has none.
fn push_named(keys: &mut Vec<ForeignKey>, mut k: ForeignKey, table: &str) {
    if k.name.is_empty() {
        let prefix = format!("{table}_ibfk_");
        let n = keys
            .iter()
            .filter_map(|k| k.name.strip_prefix(&prefix)?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        k.name = format!("{prefix}{}", n + 1);
    }
    keys.push(k);
}

/// The key changes of one ALTER TABLE.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AlterKeys {
    /// Keys added (unnamed ones get generated names).
    pub added: Vec<ForeignKey>,
    /// Names of constraints dropped (`DROP FOREIGN KEY`, `DROP CONSTRAINT`).
    pub dropped: Vec<String>,
    /// Own columns renamed (`CHANGE`, `RENAME COLUMN`): InnoDB renames them in the key.
    pub renamed_columns: Vec<(String, String)>,
}

impl AlterKeys {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.dropped.is_empty() && self.renamed_columns.is_empty()
    }
}

/// A key from its parsed clause; `column` is the column of an inline `REFERENCES` (the key's
/// own column list is then empty). `child_db` qualifies an unqualified parent.
pub fn from_ast(fk: &ForeignKeyConstraint, column: Option<&str>, child_db: &str) -> ForeignKey {
    let parts: Vec<String> = fk
        .foreign_table
        .0
        .iter()
        .map(|p| p.to_string().trim_matches('`').to_string())
        .collect();
    let (parent_database, parent_table) = match parts.as_slice() {
        [db, t] => (db.clone(), t.clone()),
        [.., t] => (child_db.to_string(), t.clone()),
        [] => (child_db.to_string(), String::new()),
    };
    let mut columns: Vec<String> = fk.columns.iter().map(|c| c.value.clone()).collect();
    if columns.is_empty() {
        columns.extend(column.map(str::to_string));
    }
    // MariaDB names the constraint after `CONSTRAINT name`, else after `FOREIGN KEY name`.
    let name = fk.name.as_ref().or(fk.index_name.as_ref());
    ForeignKey {
        name: name.map(|n| n.value.clone()).unwrap_or_default(),
        columns,
        parent_database,
        parent_table,
        parent_columns: fk
            .referred_columns
            .iter()
            .map(|c| c.value.clone())
            .collect(),
        on_delete: FkAction::from_ast(fk.on_delete),
        on_update: FkAction::from_ast(fk.on_update),
    }
}

/// The keys a CREATE TABLE defines (table constraints and inline column `REFERENCES`, which
/// MariaDB honours), in the order InnoDB numbers them.
pub fn of_create(
    constraints: &[TableConstraint],
    columns: &[sqlparser::ast::ColumnDef],
    db: &str,
    table: &str,
) -> Vec<ForeignKey> {
    let mut keys = Vec::new();
    let inline = columns.iter().flat_map(|c| {
        c.options.iter().filter_map(move |o| match &o.option {
            ColumnOption::ForeignKey(fk) => Some(from_ast(fk, Some(&c.name.value), db)),
            _ => None,
        })
    });
    let tabled = constraints.iter().filter_map(|c| match c {
        TableConstraint::ForeignKey(fk) => Some(from_ast(fk, None, db)),
        _ => None,
    });
    for k in inline.chain(tabled).collect::<Vec<_>>() {
        push_named(&mut keys, k, table);
    }
    keys
}

/// One row of the snapshot's key query ([`SNAPSHOT_QUERY`]).
pub type SnapshotRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
);

/// Every foreign key's columns, in order, with its rules.
pub const SNAPSHOT_QUERY: &str = "SELECT k.TABLE_SCHEMA, k.TABLE_NAME, k.CONSTRAINT_NAME, \
     k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME, \
     r.DELETE_RULE, r.UPDATE_RULE FROM information_schema.KEY_COLUMN_USAGE k \
     JOIN information_schema.REFERENTIAL_CONSTRAINTS r ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA \
     AND r.TABLE_NAME = k.TABLE_NAME AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME \
     WHERE k.REFERENCED_TABLE_NAME IS NOT NULL \
     ORDER BY k.TABLE_SCHEMA, k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION";

/// The snapshot's rows grouped into keys per `(database, table)`.
pub fn group_snapshot(rows: Vec<SnapshotRow>) -> BTreeMap<(String, String), Vec<ForeignKey>> {
    let mut out: BTreeMap<(String, String), Vec<ForeignKey>> = BTreeMap::new();
    for (db, t, name, col, pdb, pt, pcol, del, upd) in rows {
        let keys = out.entry((db, t)).or_default();
        match keys.last_mut().filter(|k| k.name == name) {
            Some(k) => {
                k.columns.push(col);
                k.parent_columns.push(pcol);
            }
            None => keys.push(ForeignKey {
                name,
                columns: vec![col],
                parent_database: pdb,
                parent_table: pt,
                parent_columns: vec![pcol],
                on_delete: FkAction::from_rule(&del),
                on_update: FkAction::from_rule(&upd),
            }),
        }
    }
    out
}

/// What a transaction's rows did to one table, as far as its children care.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParentChange {
    /// Some row was deleted.
    pub deleted: bool,
    /// Columns (as the binlog names them) some UPDATE changed the value of.
    pub updated: BTreeSet<String>,
}

impl ParentChange {
    /// Merges `other` in; true when something was new.
    fn merge(&mut self, other: &ParentChange) -> bool {
        let before = (self.deleted, self.updated.len());
        self.deleted |= other.deleted;
        self.updated.extend(other.updated.iter().cloned());
        before != (self.deleted, self.updated.len())
    }
}

/// Per `(database, table)`, what one transaction's rows did (recorded by the binlog reader for
/// every DELETE and UPDATE, chunked rows included).
pub type ParentChanges = BTreeMap<(String, String), ParentChange>;

/// Records one ROWS event of `table` (columns named `names`): `deleted` for a DELETE, the
/// `(before, after)` images of an UPDATE's rows in `updates`.
pub fn note_rows<'a, T: PartialEq + 'a>(
    changes: &mut ParentChanges,
    table: (&str, &str),
    names: &[String],
    deleted: bool,
    updates: impl Iterator<Item = (&'a [T], &'a [T])>,
) {
    let entry = changes
        .entry((table.0.to_string(), table.1.to_string()))
        .or_default();
    entry.deleted |= deleted;
    for (b, a) in updates {
        for (i, n) in names.iter().enumerate() {
            if b.get(i) != a.get(i) && !entry.updated.contains(n.as_str()) {
                entry.updated.insert(n.clone());
            }
        }
    }
}

/// Why `child` changed outside the binlog: its key `k` has `clause action`.
fn reason(k: &ForeignKey, child: &(String, String), clause: &str, action: FkAction) -> String {
    let what = if clause == "ON DELETE" {
        "a DELETE on"
    } else {
        "an UPDATE of a referenced column of"
    };
    format!(
        "foreign-key cascade: {what} `{}`.`{}`, and the key `{}` of `{}`.`{}` has {clause} {}: \
         InnoDB changes the child rows without writing them to the binlog, so Sluice cannot \
         replicate them, and the downstream (written with foreign_key_checks=0) does not \
         cascade. The parent change may have matched no child row: capture cannot tell. Fix: \
         re-copy the table downstream, then let it go on with [filter] ignore-event = \
         [\"unreplicable\"]; to stop this for good, make the key ON DELETE/ON UPDATE RESTRICT \
         upstream and delete or update the child rows in the application (docs/capture.md, \
         'Foreign-key cascades')",
        k.parent_database,
        k.parent_table,
        k.name,
        child.0,
        child.1,
        action.sql(),
    )
}

/// What `k`'s action does to its child for `parent`'s change: the child's own change (which
/// may cascade further), the clause and the action, or `None` when the child does not change.
fn child_change(
    k: &ForeignKey,
    parent: &ParentChange,
) -> Option<(ParentChange, &'static str, FkAction)> {
    // SET NULL, SET DEFAULT and ON UPDATE CASCADE write the child's key columns.
    let writes_key = ParentChange {
        deleted: false,
        updated: k.columns.iter().cloned().collect(),
    };
    if parent.deleted && k.on_delete.changes_children() {
        let change = if k.on_delete == FkAction::Cascade {
            ParentChange {
                deleted: true,
                updated: BTreeSet::new(),
            }
        } else {
            writes_key
        };
        return Some((change, "ON DELETE", k.on_delete));
    }
    let referenced = k
        .parent_columns
        .iter()
        .any(|c| parent.updated.iter().any(|u| u.eq_ignore_ascii_case(c)));
    if referenced && k.on_update.changes_children() {
        return Some((writes_key, "ON UPDATE", k.on_update));
    }
    None
}

/// The children `changes` cascade into at `ts` (transitively), one [`Unreplicable`] per child
/// table, in `(database, table)` order.
pub fn cascades(history: &SchemaHistory, ts: Ts, changes: &ParentChanges) -> Vec<Unreplicable> {
    // Every child key that can change rows, with its child's name.
    let mut edges: Vec<((String, String), &ForeignKey)> = Vec::new();
    for id in history.foreign_keys.tables.keys() {
        let Some(child) = history.table_by_id_at(*id, ts) else {
            continue;
        };
        for k in history
            .foreign_keys
            .at(*id, ts)
            .iter()
            .filter(|k| k.cascades())
        {
            edges.push(((child.database.clone(), child.name.clone()), k));
        }
    }
    if edges.is_empty() {
        return Vec::new();
    }
    let mut state: ParentChanges = changes.clone();
    let mut work: Vec<(String, String)> = state.keys().cloned().collect();
    let mut reasons: BTreeMap<(String, String), String> = BTreeMap::new();
    while let Some(parent) = work.pop() {
        let Some(pc) = state.get(&parent).cloned() else {
            continue;
        };
        let from = (parent.0.as_str(), parent.1.as_str());
        for (child, k) in edges.iter().filter(|(_, k)| references(k, from)) {
            let Some((cc, clause, action)) = child_change(k, &pc) else {
                continue;
            };
            reasons
                .entry(child.clone())
                .or_insert_with(|| reason(k, child, clause, action));
            if state.entry(child.clone()).or_default().merge(&cc) {
                work.push(child.clone());
            }
        }
    }
    reasons
        .into_iter()
        .map(|(t, reason)| Unreplicable {
            tables: vec![t],
            reason,
        })
        .collect()
}

/// The key changes of an ALTER TABLE's operations on a table of database `db`.
pub fn of_alter(ops: &[sqlparser::ast::AlterTableOperation], db: &str) -> AlterKeys {
    use sqlparser::ast::AlterTableOperation as Op;
    let mut out = AlterKeys::default();
    for op in ops {
        match op {
            Op::AddConstraint {
                constraint: TableConstraint::ForeignKey(fk),
                ..
            } => out.added.push(from_ast(fk, None, db)),
            Op::AddColumn { column_def, .. } => {
                out.added
                    .extend(column_def.options.iter().filter_map(|o| match &o.option {
                        ColumnOption::ForeignKey(fk) => {
                            Some(from_ast(fk, Some(&column_def.name.value), db))
                        }
                        _ => None,
                    }))
            }
            Op::DropForeignKey { name, .. } | Op::DropConstraint { name, .. } => {
                out.dropped.push(name.value.clone())
            }
            Op::ChangeColumn {
                old_name, new_name, ..
            } if old_name.value != new_name.value => out
                .renamed_columns
                .push((old_name.value.clone(), new_name.value.clone())),
            Op::RenameColumn {
                old_column_name,
                new_column_name,
            } => out
                .renamed_columns
                .push((old_column_name.value.clone(), new_column_name.value.clone())),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pos::BinlogPos;

    const F: u64 = (1 << 32) + 100;

    fn h() -> SchemaHistory {
        let mut h = SchemaHistory::empty(BinlogPos::new("mysql-bin.000001", 4));
        apply(&mut h, 1, "CREATE DATABASE d");
        apply(
            &mut h,
            2,
            "CREATE TABLE p (id INT PRIMARY KEY, k INT UNIQUE, v INT)",
        );
        h
    }

    fn apply(h: &mut SchemaHistory, ts: u64, q: &str) {
        h.apply(F + ts, 0, "d", q)
            .expect("apply")
            .unwrap_or_else(|| panic!("no ddl event for {q}"));
    }

    /// `(name, columns, parent, parent columns, on delete, on update)` of `d.t`'s keys at `ts`.
    fn keys(
        h: &SchemaHistory,
        t: &str,
        ts: u64,
    ) -> Vec<(String, String, String, String, FkAction, FkAction)> {
        let id = h.table_at("d", t, F + ts).expect("table").table_id;
        h.foreign_keys
            .at(id, F + ts)
            .iter()
            .map(|k| {
                (
                    k.name.clone(),
                    k.columns.join(","),
                    format!("{}.{}", k.parent_database, k.parent_table),
                    k.parent_columns.join(","),
                    k.on_delete,
                    k.on_update,
                )
            })
            .collect()
    }

    fn k(
        name: &str,
        cols: &str,
        parent: &str,
        pcols: &str,
        del: FkAction,
        upd: FkAction,
    ) -> (String, String, String, String, FkAction, FkAction) {
        (
            name.into(),
            cols.into(),
            parent.into(),
            pcols.into(),
            del,
            upd,
        )
    }

    use FkAction::*;

    #[test]
    fn create_table_keys_with_actions_and_generated_names() {
        let mut h = h();
        apply(
            &mut h,
            3,
            "CREATE TABLE c (id INT PRIMARY KEY, pid INT REFERENCES p (id) ON DELETE CASCADE, \
             pk INT, a INT, CONSTRAINT fk_k FOREIGN KEY (pk) REFERENCES d.p (k) ON DELETE SET NULL \
             ON UPDATE CASCADE, FOREIGN KEY (a) REFERENCES e.q (x) ON DELETE NO ACTION ON UPDATE \
             SET DEFAULT, FOREIGN KEY ix (a, pk) REFERENCES p (id, k) ON DELETE RESTRICT)",
        );
        assert_eq!(
            keys(&h, "c", 3),
            vec![
                k("c_ibfk_1", "pid", "d.p", "id", Cascade, Restrict),
                k("fk_k", "pk", "d.p", "k", SetNull, Cascade),
                k("c_ibfk_2", "a", "e.q", "x", NoAction, SetDefault),
                k("ix", "a,pk", "d.p", "id,k", Restrict, Restrict),
            ]
        );
        // LIKE copies no keys; TRUNCATE keeps them on the new id.
        apply(&mut h, 4, "CREATE TABLE c2 LIKE c");
        assert!(keys(&h, "c2", 4).is_empty());
        apply(&mut h, 5, "TRUNCATE TABLE c");
        assert_eq!(keys(&h, "c", 5).len(), 4);
    }

    #[test]
    fn alter_adds_and_drops_keys_and_renames_follow() {
        let mut h = h();
        apply(
            &mut h,
            3,
            "CREATE TABLE c (id INT PRIMARY KEY, pid INT, q INT)",
        );
        apply(
            &mut h,
            4,
            "ALTER TABLE c ADD FOREIGN KEY IF NOT EXISTS (pid) REFERENCES p (id) ON DELETE CASCADE, \
             ADD CONSTRAINT named FOREIGN KEY (q) REFERENCES p (k) ON UPDATE SET NULL, ALGORITHM=INPLACE",
        );
        apply(
            &mut h,
            5,
            "ALTER TABLE c ADD FOREIGN KEY (q) REFERENCES p (id)",
        );
        assert_eq!(
            keys(&h, "c", 5),
            vec![
                k("c_ibfk_1", "pid", "d.p", "id", Cascade, Restrict),
                k("named", "q", "d.p", "k", Restrict, SetNull),
                k("c_ibfk_2", "q", "d.p", "id", Restrict, Restrict),
            ]
        );
        // Versioned: the state before the ALTER is still there.
        assert!(keys(&h, "c", 3).is_empty());
        apply(
            &mut h,
            6,
            "ALTER TABLE c DROP FOREIGN KEY c_ibfk_1, DROP CONSTRAINT IF EXISTS named",
        );
        assert_eq!(
            keys(&h, "c", 6),
            vec![k("c_ibfk_2", "q", "d.p", "id", Restrict, Restrict)]
        );
        apply(&mut h, 7, "ALTER TABLE c DROP FOREIGN KEY IF EXISTS nosuch, ADD FOREIGN KEY (pid) REFERENCES p (id) ON DELETE SET NULL");
        assert_eq!(
            keys(&h, "c", 7)[1],
            k("c_ibfk_3", "pid", "d.p", "id", SetNull, Restrict)
        );
        // The child renamed: generated names follow; a column renamed: the key follows.
        apply(&mut h, 8, "RENAME TABLE c TO c9");
        apply(&mut h, 9, "ALTER TABLE c9 CHANGE pid parent INT");
        assert_eq!(
            keys(&h, "c9", 9),
            vec![
                k("c9_ibfk_2", "q", "d.p", "id", Restrict, Restrict),
                k("c9_ibfk_3", "parent", "d.p", "id", SetNull, Restrict),
            ]
        );
        // The parent renamed: its children reference the new name.
        apply(&mut h, 10, "ALTER TABLE p RENAME TO p2");
        assert!(keys(&h, "c9", 10).iter().all(|k| k.2 == "d.p2"));
        assert!(keys(&h, "c9", 9).iter().all(|k| k.2 == "d.p"));
    }

    #[test]
    fn snapshot_rows_group_into_keys() {
        let row = |t: &str, n: &str, c: &str, pc: &str, del: &str, upd: &str| -> SnapshotRow {
            let s = |x: &str| x.to_string();
            (
                s("d"),
                s(t),
                s(n),
                s(c),
                s("d"),
                s("p"),
                s(pc),
                s(del),
                s(upd),
            )
        };
        let g = group_snapshot(vec![
            row("c", "c_ibfk_1", "a", "x", "CASCADE", "RESTRICT"),
            row("c", "c_ibfk_1", "b", "y", "CASCADE", "RESTRICT"),
            row("c", "f2", "b", "y", "SET NULL", "NO ACTION"),
            row("e", "e_ibfk_1", "a", "x", "RESTRICT", "SET DEFAULT"),
        ]);
        let c = &g[&("d".to_string(), "c".to_string())];
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].columns.clone(), c[0].parent_columns.clone()),
            (vec!["a".into(), "b".into()], vec!["x".into(), "y".into()])
        );
        assert_eq!(
            (c[0].on_delete, c[1].on_delete, c[1].on_update),
            (Cascade, SetNull, NoAction)
        );
        let e = &g[&("d".to_string(), "e".to_string())];
        assert_eq!((e[0].on_delete, e[0].on_update), (Restrict, SetDefault));
        assert!(e[0].cascades() && c[0].cascades());
    }

    fn deleted(t: &str) -> ParentChanges {
        let mut c = ParentChanges::new();
        note_rows::<i32>(&mut c, ("d", t), &[], true, std::iter::empty());
        c
    }

    fn tables_of(u: &[Unreplicable]) -> Vec<String> {
        u.iter()
            .map(|u| format!("{}.{}", u.tables[0].0, u.tables[0].1))
            .collect()
    }

    #[test]
    fn cascades_follow_actions_transitively() {
        let mut h = h();
        apply(&mut h, 3, "CREATE TABLE del (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE)");
        apply(&mut h, 4, "CREATE TABLE rst (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES p (id) ON DELETE RESTRICT ON UPDATE NO ACTION)");
        apply(&mut h, 5, "CREATE TABLE upd (id INT PRIMARY KEY, pk INT, FOREIGN KEY (pk) REFERENCES p (k) ON UPDATE CASCADE)");
        apply(&mut h, 6, "CREATE TABLE grand (id INT PRIMARY KEY, did INT, FOREIGN KEY (did) REFERENCES del (id) ON DELETE SET NULL)");
        let at = F + 6;
        let u = cascades(&h, at, &deleted("p"));
        assert_eq!(tables_of(&u), vec!["d.del", "d.grand"]);
        assert!(
            u[0].reason.contains("a DELETE on `d`.`p`")
                && u[0].reason.contains("ON DELETE CASCADE"),
            "{}",
            u[0].reason
        );
        assert!(
            u[1].reason.contains("`d`.`del`") && u[1].reason.contains("ON DELETE SET NULL"),
            "{}",
            u[1].reason
        );
        // An UPDATE: only a changed referenced column cascades.
        let upd = |before: [i32; 3], after: [i32; 3]| {
            let mut c = ParentChanges::new();
            let names = ["id".to_string(), "K".to_string(), "v".to_string()];
            note_rows(
                &mut c,
                ("d", "p"),
                &names,
                false,
                std::iter::once((&before[..], &after[..])),
            );
            cascades(&h, at, &c)
        };
        assert!(upd([1, 1, 1], [1, 1, 2]).is_empty());
        assert_eq!(tables_of(&upd([1, 1, 1], [1, 2, 1])), vec!["d.upd"]);
        // ON UPDATE of `del`'s referenced `id`: only RESTRICT (no key cascades on update).
        assert!(upd([1, 1, 1], [2, 1, 1]).is_empty());
        // No children, unrelated tables, a dropped child, or before the child existed: nothing.
        assert!(cascades(&h, at, &deleted("rst")).is_empty());
        assert!(cascades(&h, F + 2, &deleted("p")).is_empty());
        apply(&mut h, 7, "DROP TABLE grand");
        assert_eq!(
            tables_of(&cascades(&h, F + 7, &deleted("p"))),
            vec!["d.del"]
        );
        apply(&mut h, 8, "ALTER TABLE del DROP FOREIGN KEY del_ibfk_1");
        assert!(cascades(&h, F + 8, &deleted("p")).is_empty());
    }

    #[test]
    fn old_histories_load_without_keys() {
        let h = h();
        let json = h.to_json().expect("json");
        let mut v: serde_json::Value = serde_json::from_slice(&json).expect("value");
        v.as_object_mut().expect("object").remove("foreign_keys");
        let old = serde_json::to_vec(&v).expect("old json");
        let back = SchemaHistory::from_json(&old).expect("an old history loads");
        assert!(back.foreign_keys.tables.is_empty());
        assert_eq!(back.tables, h.tables);
    }
}
