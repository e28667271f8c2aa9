//! One parsed statement applied to the history, a helper per statement kind: databases,
//! CREATE TABLE (plain, LIKE), ALTER TABLE (a helper per operation), RENAME, TRUNCATE, DROP,
//! CREATE INDEX. Each reports what it did to the DDL event being built ([`Applied`]).

use super::columns::*;
use super::*;
use crate::charset::{AlterCharset, CharsetCollation};
use sluice_types::{ColumnDef, DdlInfluence, DdlKind, InfluenceScope};
use sqlparser::ast::{
    AlterTable, AlterTableOperation, ColumnOption, CreateIndex, CreateTable, CreateTableLikeKind,
    ObjectType, RenameTable, RenameTableNameKind, SchemaName, Statement, TableConstraint, Truncate,
};

/// What one statement's application adds to the DDL event: its influence and the tables it
/// changed.
pub(super) struct Applied {
    pub(super) influence: DdlInfluence,
    pub(super) touched: Vec<TableId>,
}

/// `Ok(None)`: not a tracked change; `Err`: the statement cannot be applied (the reason).
pub(super) type StmtResult = std::result::Result<Option<DdlKind>, String>;

/// Resolves the charset and collation of the columns one statement defines.
struct ColumnCharsets<'a> {
    charsets: &'a CharsetDefaults,
    table_default: Option<CharsetCollation>,
}

impl ColumnCharsets<'_> {
    fn resolve(&self, d: &mut ColumnDef, opts: &[ColumnOption]) {
        let (cs, coll) = column_charset_options(opts);
        self.charsets.resolve_column(
            d,
            cs.as_deref(),
            coll.as_deref(),
            self.table_default.as_ref(),
        );
    }
}

/// A column definition with its options applied and its charset resolved.
fn defined_column(
    name: &str,
    data_type: &sqlparser::ast::DataType,
    opts: &[ColumnOption],
    keys: &mut KeyNames,
    charsets: &ColumnCharsets<'_>,
) -> ColumnDef {
    let mut d = column_from_sql_type(name, &data_type.to_string());
    apply_column_options(&mut d, opts, &mut keys.pk, &mut keys.uniques);
    charsets.resolve(&mut d, opts);
    d
}

impl KeyNames {
    /// The keys of a table version, by column name.
    fn of(s: &TableSchema) -> KeyNames {
        KeyNames {
            pk: names_of(&s.columns, &s.key_columns),
            uniques: s
                .unique_keys
                .iter()
                .map(|u| names_of(&s.columns, u))
                .collect(),
        }
    }
}

/// The table an ALTER TABLE works on while its operations are applied.
struct AlterWork {
    s: TableSchema,
    keys: KeyNames,
    /// `RENAME [TO] t2`: the new `db.name`.
    renamed: Option<String>,
    /// Columns this statement renamed, under a stand-in name until it ends: `(stand-in,
    /// new name)`. Every column an ALTER names (CHANGE, MODIFY, DROP, RENAME COLUMN) is a
    /// column of the table as it was before the statement, so `CHANGE a b …, CHANGE b a …`
    /// swaps two columns; a renamed column is only found by its new name in `AFTER`.
    renames: Vec<(String, String)>,
}

impl AlterWork {
    /// The stand-in name of a column renamed to `new` by this statement.
    fn stand_in(&mut self, new: &str) -> String {
        let s = format!("\u{1}{}\u{1}{new}", self.renames.len());
        self.renames.push((s.clone(), new.to_string()));
        s
    }

    /// An `AFTER name` target: a column renamed to `name` by this statement, else `name`.
    fn after_target(&self, name: &str) -> String {
        self.renames
            .iter()
            .rev()
            .find(|(_, new)| new.eq_ignore_ascii_case(name))
            .map_or_else(|| name.to_string(), |(s, _)| s.clone())
    }

    /// Gives renamed columns (and their key entries) their new names: the statement is over.
    fn finish_renames(&mut self) {
        for (stand_in, new) in std::mem::take(&mut self.renames) {
            if let Some(c) = self.s.columns.iter_mut().find(|c| c.name == stand_in) {
                c.name = new.clone();
            }
            rename_key_column(&mut self.keys, &stand_in, &new);
        }
    }
}

impl SchemaHistory {
    /// Applies one parsed statement to `self`.
    pub(super) fn apply_stmt(
        &mut self,
        ts: Ts,
        default_db: &str,
        stmt: &Statement,
        alter_cs: &AlterCharset,
        out: &mut Applied,
    ) -> StmtResult {
        match stmt {
            Statement::CreateDatabase {
                db_name,
                if_not_exists,
                default_charset,
                default_collation,
                ..
            } => {
                let db = split_name(db_name, default_db).1;
                let (cs, coll) = (default_charset.as_deref(), default_collation.as_deref());
                self.stmt_create_database(ts, &db, *if_not_exists, cs, coll)
            }
            Statement::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => {
                let db = match schema_name {
                    SchemaName::Simple(n) | SchemaName::NamedAuthorization(n, _) => {
                        split_name(n, default_db).1
                    }
                    SchemaName::UnnamedAuthorization(i) => i.value.clone(),
                };
                self.stmt_create_database(ts, &db, *if_not_exists, None, None)
            }
            Statement::Drop {
                object_type,
                names,
                temporary,
                ..
            } if !*temporary => self.stmt_drop(ts, default_db, *object_type, names, out),
            Statement::CreateTable(ct) => self.stmt_create_table(ts, default_db, ct, out),
            Statement::AlterTable(at) => self.stmt_alter_table(ts, default_db, at, alter_cs, out),
            Statement::RenameTable(renames) => self.stmt_rename(ts, default_db, renames, out),
            Statement::Truncate(tr) => self.stmt_truncate(ts, default_db, tr, out),
            Statement::CreateView(_) => {
                out.influence.scope = InfluenceScope::All;
                Ok(Some(DdlKind::CreateView))
            }
            Statement::CreateIndex(ci) => self.stmt_create_index(ts, default_db, ci, out),
            _ => Ok(None),
        }
    }

    /// `CREATE DATABASE|SCHEMA`: its default charset is its own, else the server's.
    fn stmt_create_database(
        &mut self,
        ts: Ts,
        db: &str,
        if_not_exists: bool,
        charset: Option<&str>,
        collation: Option<&str>,
    ) -> StmtResult {
        if self.create_database(db, ts, if_not_exists) {
            let server = self.charsets.server.clone();
            let cc = self.charsets.resolve(charset, collation, server.as_ref());
            self.set_database_default(db, cc);
        }
        Ok(Some(DdlKind::CreateDatabase))
    }

    /// `DROP DATABASE|TABLE|VIEW|INDEX` (a temporary table's DROP never reaches here).
    fn stmt_drop(
        &mut self,
        ts: Ts,
        default_db: &str,
        object_type: ObjectType,
        names: &[ObjectName],
        out: &mut Applied,
    ) -> StmtResult {
        match object_type {
            ObjectType::Schema | ObjectType::Database => {
                for n in names {
                    self.drop_database(ts, &split_name(n, default_db).1, out);
                }
                Ok(Some(DdlKind::DropDatabase))
            }
            ObjectType::Table => {
                for n in names {
                    let (db, t) = split_name(n, default_db);
                    if let Some(id) = self.find_id(&db, &t, ts - 1) {
                        self.close(id, ts);
                        self.charsets.tables.remove(&id);
                        out.influence.dropped.push(id);
                        out.touched.push(id);
                    }
                }
                Ok(Some(DdlKind::DropTable))
            }
            ObjectType::View => Ok(Some(DdlKind::DropView)),
            // MySQL: DROP INDEX i ON t — the history keeps no index names.
            _ => Ok(None),
        }
    }

    /// Every table of `db` stops existing, and the database with them.
    fn drop_database(&mut self, ts: Ts, db: &str, out: &mut Applied) {
        let ids: Vec<TableId> = self
            .tables_at(ts - 1)
            .iter()
            .filter(|t| t.database == db)
            .map(|t| t.table_id)
            .collect();
        for id in ids {
            self.close(id, ts);
            self.charsets.tables.remove(&id);
            out.influence.dropped.push(id);
        }
        self.charsets.databases.remove(db);
        if let Some(v) = self.databases.get_mut(db).and_then(|v| v.last_mut()) {
            if v.1.is_none() {
                v.1 = Some(ts);
            }
        }
        out.influence.scope = InfluenceScope::Database(db.to_string());
    }

    /// `CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t (…)` or `… LIKE src`: a new table (id: the
    /// commit ts); OR REPLACE drops the old one.
    fn stmt_create_table(
        &mut self,
        ts: Ts,
        default_db: &str,
        ct: &CreateTable,
        out: &mut Applied,
    ) -> StmtResult {
        if ct.temporary {
            return Ok(None);
        }
        let (db, t) = split_name(&ct.name, default_db);
        let mut replaced = None;
        if let Some(old) = self.find_id(&db, &t, ts - 1) {
            if ct.if_not_exists {
                return Ok(None);
            }
            if !ct.or_replace {
                return Err(format!("table {db}.{t} already exists"));
            }
            // CREATE OR REPLACE: the old table is dropped, a new one (new id) made.
            self.close(old, ts);
            out.influence.dropped.push(old);
            out.touched.push(old);
            replaced = Some(old);
        }
        let id = TableId(ts);
        let (schema, table_default) = match &ct.like {
            Some(like) => self.created_like(ts, default_db, like, (&db, &t), out)?,
            None => self.created_from_columns(ts, ct, (&db, &t), out),
        };
        self.push_version(schema, ts);
        // CREATE TABLE … LIKE copies no foreign keys (as the server).
        if ct.like.is_none() {
            let keys = crate::foreign_keys::of_create(&ct.constraints, &ct.columns, &db, &t);
            self.foreign_keys.set(id, ts, keys);
        }
        if let Some(old) = replaced {
            self.charsets.tables.remove(&old);
        }
        self.set_table_default(id, table_default);
        out.influence.added.push((id, qualified(&db, &t)));
        Ok(Some(DdlKind::CreateTable))
    }

    /// `CREATE TABLE db.t LIKE src`: the source's definition and default, under a new id. The
    /// downstream copies the source's definition, so its earlier DDLs go first (a source).
    fn created_like(
        &self,
        ts: Ts,
        default_db: &str,
        like: &CreateTableLikeKind,
        (db, t): (&str, &str),
        out: &mut Applied,
    ) -> std::result::Result<(TableSchema, Option<CharsetCollation>), String> {
        let src = match like {
            CreateTableLikeKind::Parenthesized(l) | CreateTableLikeKind::Plain(l) => &l.name,
        };
        let (sdb, st) = split_name(src, default_db);
        let mut s = self
            .table_at(&sdb, &st, ts - 1)
            .cloned()
            .ok_or_else(|| format!("LIKE source {sdb}.{st} is unknown"))?;
        let table_default = self.charsets.tables.get(&s.table_id).cloned();
        out.influence.sources.push(s.table_id);
        s.table_id = TableId(ts);
        s.database = db.to_string();
        s.name = t.to_string();
        Ok((s, table_default))
    }

    /// `CREATE TABLE db.t (…)`: columns, keys and constraints; the table default is its own
    /// options, else the database's. The parents of its foreign keys are sources.
    fn created_from_columns(
        &self,
        ts: Ts,
        ct: &CreateTable,
        (db, t): (&str, &str),
        out: &mut Applied,
    ) -> (TableSchema, Option<CharsetCollation>) {
        let o = table_charset_options(&ct.table_options);
        let table_default = self.charsets.resolve(
            o.charset.as_deref(),
            o.collation.as_deref(),
            self.charsets.database(db),
        );
        let charsets = ColumnCharsets {
            charsets: &self.charsets,
            table_default: table_default.clone(),
        };
        let mut keys = KeyNames {
            pk: Vec::new(),
            uniques: Vec::new(),
        };
        let mut columns = Vec::new();
        for c in &ct.columns {
            let opts: Vec<ColumnOption> = c.options.iter().map(|o| o.option.clone()).collect();
            let d = defined_column(&c.name.value, &c.data_type, &opts, &mut keys, &charsets);
            columns.push(d);
        }
        for con in &ct.constraints {
            apply_constraint(con, &mut keys, &mut columns);
        }
        for parent in foreign_parents(&ct.constraints, &ct.columns) {
            let (pdb, pt) = split_name(parent, db);
            out.influence
                .sources
                .extend(self.find_id(&pdb, &pt, ts - 1));
        }
        let (key_columns, unique_keys) = choose_key(&columns, &keys.pk, &keys.uniques);
        let schema = TableSchema {
            table_id: TableId(ts),
            database: db.to_string(),
            name: t.to_string(),
            columns,
            key_columns,
            unique_keys,
            version: ts,
            partitioning: None,
        };
        (schema, table_default)
    }

    /// `ALTER TABLE t …`: a new version of `t` after each operation; with `RENAME` it is a
    /// rename (the table trigger takes part), else a table-only DDL.
    fn stmt_alter_table(
        &mut self,
        ts: Ts,
        default_db: &str,
        at: &AlterTable,
        alter_cs: &AlterCharset,
        out: &mut Applied,
    ) -> StmtResult {
        let before = ts - 1;
        let (db, t) = split_name(&at.name, default_db);
        let Some(id) = self.find_id(&db, &t, before) else {
            return if at.if_exists {
                Ok(None)
            } else {
                Err(format!("ALTER of unknown table {db}.{t}"))
            };
        };
        let Some(s) = self.table_by_id_at(id, before).cloned() else {
            return Ok(None);
        };
        // The key chosen may have been a unique key rather than the PK; a PK drop below clears
        // it either way.
        let keys = KeyNames::of(&s);
        let mut work = AlterWork {
            s,
            keys,
            renamed: None,
            renames: Vec::new(),
        };
        // A new table default applies to the columns this statement defines; CONVERT TO
        // CHARACTER SET applies to every column, after them.
        let convert = self.alter_table_default(id, &db, alter_cs);
        let charsets = ColumnCharsets {
            charsets: &self.charsets,
            table_default: self.charsets.tables.get(&id).cloned(),
        };
        for op in &at.operations {
            self.alter_operation(before, (&db, default_db), op, &charsets, &mut work, out);
        }
        if let Some(to) = &convert {
            self.charsets.convert_columns(&mut work.s.columns, to);
        }
        self.finish_alter(ts, id, (&db, &t), &at.operations, work, out)
    }

    /// The new version an ALTER TABLE made, its foreign keys and its event kind.
    fn finish_alter(
        &mut self,
        ts: Ts,
        id: TableId,
        (db, t): (&str, &str),
        operations: &[AlterTableOperation],
        work: AlterWork,
        out: &mut Applied,
    ) -> StmtResult {
        let mut work = work;
        work.finish_renames();
        let AlterWork {
            mut s,
            mut keys,
            renamed,
            ..
        } = work;
        drop_missing_key_parts(&s, &mut keys);
        let (key_columns, unique_keys) = choose_key(&s.columns, &keys.pk, &keys.uniques);
        s.key_columns = key_columns;
        s.unique_keys = unique_keys;
        let (ndb, nt) = (s.database.clone(), s.name.clone());
        self.push_version(s, ts);
        let fks = crate::foreign_keys::of_alter(operations, db);
        if !fks.is_empty() {
            self.foreign_keys.alter(id, ts, t, fks);
        }
        out.touched.push(id);
        if let Some(n) = renamed {
            self.foreign_keys.renamed(id, (db, t), (&ndb, &nt), ts);
            out.influence.renamed.push((id, n));
            return Ok(Some(DdlKind::RenameTable));
        }
        out.influence.trigger = false;
        Ok(Some(DdlKind::AlterTable))
    }

    /// One operation of an ALTER TABLE on `work` (`db`: the table's database, `default_db`:
    /// the session's). Operations that change no column or key are ignored.
    fn alter_operation(
        &self,
        before: Ts,
        (db, default_db): (&str, &str),
        op: &AlterTableOperation,
        charsets: &ColumnCharsets<'_>,
        work: &mut AlterWork,
        out: &mut Applied,
    ) {
        match op {
            AlterTableOperation::AddColumn {
                column_def,
                column_position,
                ..
            } => alter_add_column(work, column_def, column_position.as_ref(), charsets),
            AlterTableOperation::DropColumn { column_names, .. } => {
                for n in column_names {
                    alter_drop_column(work, &n.value);
                }
            }
            AlterTableOperation::ModifyColumn {
                col_name,
                data_type,
                options,
                column_position,
            } => {
                let d = defined_column(
                    &col_name.value,
                    data_type,
                    options,
                    &mut work.keys,
                    charsets,
                );
                alter_replace_column(work, d, column_position.as_ref(), &col_name.value, None);
            }
            AlterTableOperation::ChangeColumn {
                old_name,
                new_name,
                data_type,
                options,
                column_position,
            } => {
                let d = defined_column(
                    &new_name.value,
                    data_type,
                    options,
                    &mut work.keys,
                    charsets,
                );
                let pos = column_position.as_ref();
                alter_replace_column(work, d, pos, &old_name.value, Some(&new_name.value));
            }
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => alter_rename_column(work, &old_column_name.value, &new_column_name.value),
            AlterTableOperation::AddConstraint { constraint, .. } => {
                if let TableConstraint::ForeignKey(fk) = constraint {
                    let (pdb, pt) = split_name(&fk.foreign_table, db);
                    let parent = self.find_id(&pdb, &pt, before);
                    out.influence.sources.extend(parent);
                }
                apply_constraint(constraint, &mut work.keys, &mut work.s.columns)
            }
            AlterTableOperation::DropPrimaryKey { .. } => work.keys.pk.clear(),
            AlterTableOperation::RenameTable { table_name } => {
                alter_rename_table(work, table_name, default_db)
            }
            _ => {}
        }
    }

    /// `RENAME TABLE a TO b[, c TO d …]`: renames apply in sequence (a TO tmp, b TO a, tmp TO
    /// b), each a new version under the same id.
    fn stmt_rename(
        &mut self,
        ts: Ts,
        default_db: &str,
        renames: &[RenameTable],
        out: &mut Applied,
    ) -> StmtResult {
        let mut at = ts - 1;
        for r in renames {
            let (odb, ot) = split_name(&r.old_name, default_db);
            let (ndb, nt) = split_name(&r.new_name, default_db);
            let id = self
                .find_id(&odb, &ot, at)
                .ok_or_else(|| format!("RENAME of unknown table {odb}.{ot}"))?;
            let mut s = self.table_by_id_at(id, at).cloned().ok_or("no version")?;
            s.database = ndb.clone();
            s.name = nt.clone();
            self.push_version(s, ts);
            self.foreign_keys.renamed(id, (&odb, &ot), (&ndb, &nt), ts);
            at = ts;
            out.touched.push(id);
            out.influence.renamed.retain(|(i, _)| *i != id);
            out.influence.renamed.push((id, qualified(&ndb, &nt)));
        }
        Ok(Some(DdlKind::RenameTable))
    }

    /// `TRUNCATE [TABLE] t[, …]`: a new table (new id, as in TiDB) with the same definition.
    fn stmt_truncate(
        &mut self,
        ts: Ts,
        default_db: &str,
        tr: &Truncate,
        out: &mut Applied,
    ) -> StmtResult {
        let before = ts - 1;
        for target in &tr.table_names {
            let (db, t) = split_name(&target.name, default_db);
            let Some(old) = self.find_id(&db, &t, before) else {
                continue;
            };
            let mut s = self
                .table_by_id_at(old, before)
                .cloned()
                .ok_or("no version")?;
            self.close(old, ts);
            s.table_id = TableId(ts);
            self.push_version(s, ts);
            self.foreign_keys.carry(old, TableId(ts), ts);
            if let Some(cc) = self.charsets.tables.remove(&old) {
                self.charsets.tables.insert(TableId(ts), cc);
            }
            out.influence.dropped.push(old);
            out.influence.added.push((TableId(ts), qualified(&db, &t)));
            out.touched.push(old);
        }
        Ok(Some(DdlKind::TruncateTable))
    }

    /// `CREATE [UNIQUE] INDEX … ON t`: a new version of `t` (a unique index may become its
    /// routing key).
    fn stmt_create_index(
        &mut self,
        ts: Ts,
        default_db: &str,
        ci: &CreateIndex,
        out: &mut Applied,
    ) -> StmtResult {
        let before = ts - 1;
        let (db, t) = split_name(&ci.table_name, default_db);
        let Some(id) = self.find_id(&db, &t, before) else {
            return Ok(None);
        };
        let Some(mut s) = self.table_by_id_at(id, before).cloned() else {
            return Ok(None);
        };
        if ci.unique {
            let cols: Vec<String> = ci
                .columns
                .iter()
                .map(|c| ident_of_index_expr(&c.column.expr))
                .collect();
            let mut keys = KeyNames::of(&s);
            keys.uniques.push(cols);
            let (k, u) = choose_key(&s.columns, &keys.pk, &keys.uniques);
            s.key_columns = k;
            s.unique_keys = u;
        }
        self.push_version(s, ts);
        out.touched.push(id);
        out.influence.trigger = false;
        Ok(Some(DdlKind::AlterTable))
    }

    /// Records a new database; false when it already exists.
    fn create_database(&mut self, db: &str, ts: Ts, _if_not_exists: bool) -> bool {
        // At `ts`, not before: `CREATE OR REPLACE DATABASE` dropped it at `ts` first.
        if self.database_exists(db, ts) {
            return false;
        }
        self.databases
            .entry(db.to_string())
            .or_default()
            .push((ts, None));
        true
    }

    fn set_database_default(&mut self, db: &str, cc: Option<CharsetCollation>) {
        match cc {
            Some(cc) => self.charsets.databases.insert(db.to_string(), cc),
            None => self.charsets.databases.remove(db),
        };
    }
}

/// `ADD [COLUMN] c …`: the server adds an existing column only under IF NOT EXISTS (which
/// MariaDB's syntax may have carried): then nothing changes.
fn alter_add_column(
    work: &mut AlterWork,
    def: &sqlparser::ast::ColumnDef,
    position: Option<&sqlparser::ast::MySQLColumnPosition>,
    charsets: &ColumnCharsets<'_>,
) {
    let name = &def.name.value;
    if work
        .s
        .columns
        .iter()
        .any(|c| c.name.eq_ignore_ascii_case(name))
    {
        return;
    }
    let opts: Vec<ColumnOption> = def.options.iter().map(|o| o.option.clone()).collect();
    let d = defined_column(name, &def.data_type, &opts, &mut work.keys, charsets);
    let position = position.map(|p| after_stand_in(work, p));
    place_column(&mut work.s.columns, d, position.as_ref(), None);
}

/// `DROP [COLUMN] c`: the column and every key that has it.
/// `DROP [COLUMN] name`: the column goes; its keys are settled when the statement ends
/// ([`drop_missing_key_parts`]), as MariaDB resolves key parts by name against the table the
/// whole ALTER makes (`DROP i, ADD i … AUTO_INCREMENT` keeps `PRIMARY KEY (i)`).
fn alter_drop_column(work: &mut AlterWork, name: &str) {
    work.s
        .columns
        .retain(|c| !c.name.eq_ignore_ascii_case(name));
}

/// Key parts naming no column of the finished table are dropped from the primary key (which
/// keeps its other parts); a unique key with such a part is dropped.
fn drop_missing_key_parts(s: &TableSchema, keys: &mut KeyNames) {
    let exists = |n: &String| s.columns.iter().any(|c| c.name.eq_ignore_ascii_case(n));
    keys.pk.retain(exists);
    keys.uniques.retain(|u| u.iter().all(exists));
}

/// `MODIFY old …` (`new` None) or `CHANGE old new …`: the column redefined in place or at its
/// new position; a primary-key column stays NOT NULL, a renamed one stays in its keys.
fn alter_replace_column(
    work: &mut AlterWork,
    mut d: ColumnDef,
    position: Option<&sqlparser::ast::MySQLColumnPosition>,
    old: &str,
    new: Option<&str>,
) {
    let exists = work
        .s
        .columns
        .iter()
        .any(|c| c.name.eq_ignore_ascii_case(old));
    if let Some(new) = new.filter(|n| !n.eq_ignore_ascii_case(old) && exists) {
        let stand_in = work.stand_in(new);
        rename_key_column(&mut work.keys, old, &stand_in);
        d.name = stand_in;
    }
    keep_key_nullability(&mut d, &work.keys);
    let position = position.map(|p| after_stand_in(work, p));
    place_column(&mut work.s.columns, d, position.as_ref(), Some(old));
}

/// A column position with its `AFTER` target resolved among this statement's renames.
fn after_stand_in(
    work: &AlterWork,
    p: &sqlparser::ast::MySQLColumnPosition,
) -> sqlparser::ast::MySQLColumnPosition {
    use sqlparser::ast::MySQLColumnPosition as P;
    match p {
        P::After(name) => {
            let mut name = name.clone();
            name.value = work.after_target(&name.value);
            P::After(name)
        }
        P::First => P::First,
    }
}

/// `RENAME COLUMN old TO new`.
fn alter_rename_column(work: &mut AlterWork, old: &str, new: &str) {
    let Some(i) = work
        .s
        .columns
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case(old))
    else {
        return;
    };
    let stand_in = work.stand_in(new);
    work.s.columns[i].name = stand_in.clone();
    rename_key_column(&mut work.keys, old, &stand_in);
}

/// `RENAME [TO|AS] t2`: an unqualified new name is in the session's database.
fn alter_rename_table(work: &mut AlterWork, to: &RenameTableNameKind, default_db: &str) {
    let n = match to {
        RenameTableNameKind::As(n) | RenameTableNameKind::To(n) => n,
    };
    let (ndb, nt) = split_name(n, default_db);
    work.s.database = ndb.clone();
    work.s.name = nt.clone();
    work.renamed = Some(qualified(&ndb, &nt));
}
