//! Applying one statement read from the binlog: recognising what it is (sequence, view,
//! database, table DDL, something else), parsing it, applying its statements to a copy of the
//! history and making the DDL event; DDLs the table trigger writes; unparseable statements.

use super::sql_text::*;
use super::statements::Applied;
use super::*;
use crate::charset::{AlterCharset, CharsetOptions};
use crate::error::Result;
use sluice_partition::{split_partition_options, Layout};
use sluice_types::{DdlInfluence, DdlKind, DdlSession, InfluenceScope, Partitioning};
use sqlparser::dialect::MySqlDialect;

/// One statement read from the binlog: its commit ts and time, the session's database and the
/// text as logged.
#[derive(Clone, Copy)]
struct BinlogStatement<'a> {
    ts: Ts,
    time_ms: u64,
    database: &'a str,
    query: &'a str,
}

impl BinlogStatement<'_> {
    /// The DDL event of this statement (its session is added by the caller).
    fn event(&self, kind: DdlKind, influence: DdlInfluence) -> DdlEvent {
        DdlEvent {
            session: None,
            object_database: None,
            commit_ts: self.ts,
            commit_time_ms: self.time_ms,
            kind,
            database: self.database.to_string(),
            query: self.query.to_string(),
            influence,
        }
    }
}

/// A statement parsed, or handled without statements to apply (the result to return).
enum Parsed {
    Statements(Vec<sqlparser::ast::Statement>),
    Done(Box<Result<Option<DdlEvent>>>),
}

/// The influence of a parsed DDL: the tables it changed are in scope, and a table it changes
/// (or creates) is no mere source (a self-referencing key).
fn finished_influence(out: Applied) -> DdlInfluence {
    let Applied {
        mut influence,
        touched,
    } = out;
    if let InfluenceScope::Tables(ref mut v) = influence.scope {
        v.extend(touched.iter().copied());
        v.sort();
        v.dedup();
    }
    let changed = |t: &TableId| match &influence.scope {
        InfluenceScope::Tables(v) => v.contains(t),
        _ => false,
    } || influence.added.iter().any(|(a, _)| a == t);
    let mut sources = std::mem::take(&mut influence.sources);
    sources.retain(|t| !changed(t));
    sources.sort();
    sources.dedup();
    influence.sources = sources;
    influence
}

impl SchemaHistory {
    /// Applies one statement read from the binlog at `commit_ts`. Returns the DDL event for
    /// table/database DDLs, `None` for statements that do not change the schema. See the module
    /// docs for idempotence and unparseable statements.
    pub fn apply(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
    ) -> Result<Option<DdlEvent>> {
        self.apply_in_session(
            commit_ts,
            commit_time_ms,
            database,
            query,
            &DdlSession::default(),
        )
    }

    /// [`SchemaHistory::apply`] of a statement read from the binlog, with the session it ran
    /// under: the history reads the statement as that `sql_mode` makes the server read it
    /// ([`crate::session::as_sql_mode_reads`]), and a new DDL event carries the session (a
    /// replayed one has it already).
    pub fn apply_in_session(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        session: &DdlSession,
    ) -> Result<Option<DdlEvent>> {
        let fresh = commit_ts > self.head;
        let mut ev = self.apply_statement(commit_ts, commit_time_ms, database, query, session)?;
        if let Some(ev) = ev.as_mut().filter(|_| fresh) {
            let session = (!session.is_empty()).then(|| Box::new(session.clone()));
            ev.session = session.clone();
            if let Some(last) = self.ddls.last_mut().filter(|d| d.commit_ts == commit_ts) {
                last.session = session;
            }
        }
        Ok(ev)
    }

    fn apply_statement(
        &mut self,
        commit_ts: Ts,
        commit_time_ms: u64,
        database: &str,
        query: &str,
        session: &DdlSession,
    ) -> Result<Option<DdlEvent>> {
        if commit_ts <= self.head {
            return Ok(self.ddls.iter().find(|d| d.commit_ts == commit_ts).cloned());
        }
        let st = BinlogStatement {
            ts: commit_ts,
            time_ms: commit_time_ms,
            database,
            query,
        };
        // Executable comments are executed by the server (`/*!50100 CREATE TABLE … */`,
        // `/*M!100500 ALTER … */`): their content is the statement. The event keeps `query`.
        let opened = expand_executable_comments(query);
        // `SET STATEMENT … FOR <DDL>`: the DDL (its settings are in the event's session).
        let moded = crate::session::as_sql_mode_reads(
            crate::session::strip_set_statement(opened.as_str()),
            session.sql_mode.as_deref(),
        );
        let failed = session
            .expected_error
            .and_then(|_| failed_replace_drops(moded.as_ref(), database));
        let text = failed.as_deref().unwrap_or(moded.as_ref());
        if let Some(ev) = self.apply_recognised(st, text) {
            return Ok(ev);
        }
        if !is_schema_statement(text) {
            return Ok(None);
        }
        self.apply_parsed(st, text)
    }

    /// Statements recognised by their leading words and never parsed: sequences, `ALTER
    /// DATABASE`, views. `None`: not one of them.
    fn apply_recognised(
        &mut self,
        st: BinlogStatement<'_>,
        text: &str,
    ) -> Option<Option<DdlEvent>> {
        if let Some(seq) = sequence_statement(text) {
            return Some(self.sequence_ddl(st, seq));
        }
        if let Some((db, options)) = alter_database_statement(text, st.database) {
            return Some(Some(self.alter_database(st, db, &options)));
        }
        let (kind, view_db) = view_statement(text)?;
        let mut ev = self.trigger_ddl(st, kind);
        if let Some(last) = self.ddls.last_mut().filter(|_| view_db.is_some()) {
            last.object_database = view_db.as_deref().map(Box::from);
            ev.object_database = view_db.map(String::into_boxed_str);
        }
        Some(Some(ev))
    }

    /// `ALTER DATABASE`: only the defaults of tables created later change: no table version, an
    /// event the table trigger writes so the downstream database gets the same defaults.
    fn alter_database(
        &mut self,
        st: BinlogStatement<'_>,
        db: String,
        options: &CharsetOptions,
    ) -> DdlEvent {
        let server = self.charsets.server.clone();
        if let Some(cc) = self.charsets.resolve(
            options.charset.as_deref(),
            options.collation.as_deref(),
            server.as_ref(),
        ) {
            if !options.is_empty() {
                self.charsets.databases.insert(db, cc);
            }
        }
        self.trigger_ddl(st, DdlKind::AlterDatabase)
    }

    /// A table or database DDL: parsed, applied to a copy of the history statement by
    /// statement, then made the DDL event (or handled as unparseable, leaving `self` as it was).
    fn apply_parsed(&mut self, st: BinlogStatement<'_>, text: &str) -> Result<Option<DdlEvent>> {
        // Partition options are kept apart: sqlparser does not know MySQL's partition syntax,
        // and they change the layout of a table version, never its columns.
        let (sql, partition_text) = if is_create_or_alter_table(text) {
            split_partition_options(text)
        } else {
            (text.to_string(), None)
        };
        // MariaDB's syntax in the words sqlparser reads, with the same effect on columns.
        let sql = crate::mariadb_sql::prepare(&sql);
        // Charset options of an ALTER TABLE (sqlparser knows none of them): the table default
        // and CONVERT TO CHARACTER SET.
        let alter_cs = strip_alter_options(&sql)
            .map(|s| s.charset)
            .unwrap_or_default();
        let stmts = match self.parse(st, &sql, partition_text.as_deref(), &alter_cs) {
            Parsed::Statements(s) => s,
            Parsed::Done(result) => return *result,
        };
        let mut work = self.clone();
        let mut kind = DdlKind::Other;
        let mut out = Applied {
            influence: DdlInfluence::scoped(InfluenceScope::Tables(Vec::new()), true),
            touched: Vec::new(),
        };
        for stmt in &stmts {
            match work.apply_stmt(st.ts, st.database, stmt, &alter_cs, &mut out) {
                Ok(Some(k)) => kind = k,
                Ok(None) => {}
                Err(msg) => return self.unparseable(st, msg),
            }
        }
        if let Some(text) = &partition_text {
            let target = match kind {
                DdlKind::CreateTable => out.influence.added.last().map(|(id, _)| *id),
                _ => out.touched.last().copied(),
            };
            if let Some(id) = target {
                work.set_partitioning(id, st.ts, text, kind != DdlKind::CreateTable);
            }
        }
        let ev = st.event(kind, finished_influence(out));
        work.head = st.ts;
        work.ddls.push(ev.clone());
        *self = work;
        Ok(Some(ev))
    }

    /// Parses a prepared statement; an ALTER TABLE with table options sqlparser does not know
    /// (ENGINE=, CONVERT TO CHARACTER SET, LOCK=, ...) is parsed without them (they change no
    /// column), or, with nothing else, applied as an options-only ALTER.
    fn parse(
        &mut self,
        st: BinlogStatement<'_>,
        sql: &str,
        partition_text: Option<&str>,
        alter_cs: &AlterCharset,
    ) -> Parsed {
        let e = match parse_mysql(sql) {
            Ok(s) => return Parsed::Statements(s),
            Err(e) => e,
        };
        match strip_alter_options(sql) {
            Some(stripped) if stripped.specs_left => match parse_mysql(&stripped.query) {
                Ok(s) => Parsed::Statements(s),
                Err(e2) => {
                    let msg = format!("{e}; without table options: {e2}");
                    Parsed::Done(Box::new(self.unparseable(st, msg)))
                }
            },
            Some(stripped) => {
                let ev = self.options_only_alter(st, &stripped.table, partition_text, alter_cs);
                Parsed::Done(Box::new(Ok(ev)))
            }
            None => Parsed::Done(Box::new(self.unparseable(st, e.to_string()))),
        }
    }

    /// A sequence DDL: the history's set of sequences (whose NEXTVAL rows are not table data)
    /// follows it, and a non-temporary one becomes an event the table trigger writes (kind
    /// `Other`, run as logged), so the downstream has the sequence a table's `DEFAULT (NEXT VALUE
    /// FOR s)` names before that table's DDL. Temporary sequences are the session's own.
    fn sequence_ddl(&mut self, st: BinlogStatement<'_>, seq: SequenceDdl) -> Option<DdlEvent> {
        let database = st.database;
        let mut object_db = None;
        for name in &seq.names {
            let parsed = sqlparser::parser::Parser::new(&MySqlDialect {})
                .try_with_sql(name)
                .and_then(|mut p| p.parse_object_name(false));
            let Ok(n) = parsed else { continue };
            if n.0.len() > 1 {
                object_db.get_or_insert_with(|| split_name(&n, database).0);
            }
            let (db, t) = split_name(&n, database);
            match seq.change {
                _ if seq.temporary => {}
                SequenceChange::Create => {
                    self.sequences.insert(qualified(&db, &t));
                }
                SequenceChange::Drop => {
                    self.sequences.remove(&qualified(&db, &t));
                }
                SequenceChange::Alter => {}
            }
        }
        if seq.temporary {
            self.head = st.ts;
            return None;
        }
        let mut ev = self.trigger_ddl(st, DdlKind::Other);
        if let Some(last) = self.ddls.last_mut().filter(|_| object_db.is_some()) {
            last.object_database = object_db.as_deref().map(Box::from);
            ev.object_database = object_db.map(String::into_boxed_str);
        }
        Some(ev)
    }

    /// A DDL that changes no table (views, database defaults): the table trigger writes it. A
    /// view DDL waits for every table (a view reads their definitions, so each table's earlier
    /// DDLs must be downstream first); `DROP VIEW` and `ALTER DATABASE` wait for none.
    fn trigger_ddl(&mut self, st: BinlogStatement<'_>, kind: DdlKind) -> DdlEvent {
        let scope = match kind {
            DdlKind::CreateView => InfluenceScope::All,
            _ => InfluenceScope::Tables(Vec::new()),
        };
        let ev = st.event(kind, DdlInfluence::scoped(scope, true));
        self.head = st.ts;
        self.ddls.push(ev.clone());
        ev
    }

    /// An ALTER TABLE that only sets table options: a DDL event for the table, no new version
    /// (a new default charset is recorded for later columns); with a partition operation or
    /// `CONVERT TO CHARACTER SET`, a new version with the new layout or column charsets.
    fn options_only_alter(
        &mut self,
        st: BinlogStatement<'_>,
        table: &str,
        partition_text: Option<&str>,
        alter_cs: &AlterCharset,
    ) -> Option<DdlEvent> {
        let name = sqlparser::parser::Parser::new(&MySqlDialect {})
            .try_with_sql(table)
            .and_then(|mut p| p.parse_object_name(false))
            .ok()?;
        let (database, commit_ts) = (st.database, st.ts);
        let (db, t) = split_name(&name, database);
        let id = self.find_id(&db, &t, commit_ts - 1)?;
        let convert = self.alter_table_default(id, &db, alter_cs);
        if partition_text.is_some() || convert.is_some() {
            if let Some(mut s) = self.table_by_id_at(id, commit_ts - 1).cloned() {
                if let Some(to) = &convert {
                    self.charsets.convert_columns(&mut s.columns, to);
                }
                self.push_version(s, commit_ts);
                if let Some(text) = partition_text {
                    self.set_partitioning(id, commit_ts, text, true);
                }
            }
        }
        // EXCHANGE PARTITION moves rows between two tables without row events: both tables'
        // dispatchers stop at it (everything before it written downstream, nothing after).
        let mut ids = vec![id];
        if let Some(other) = partition_text.and_then(exchange_partner) {
            let other = sqlparser::parser::Parser::new(&MySqlDialect {})
                .try_with_sql(&other)
                .and_then(|mut p| p.parse_object_name(false))
                .ok()
                .map(|n| split_name(&n, database))
                .and_then(|(odb, ot)| self.find_id(&odb, &ot, commit_ts - 1));
            if let Some(o) = other.filter(|o| *o != id) {
                ids.push(o);
                ids.sort();
            }
        }
        let influence = DdlInfluence::scoped(InfluenceScope::Tables(ids), false);
        let ev = st.event(DdlKind::AlterTable, influence);
        self.head = commit_ts;
        self.ddls.push(ev.clone());
        Some(ev)
    }

    /// Applies the charset options of an ALTER TABLE to the default of table `id` (in database
    /// `db`): `[DEFAULT] CHARSET/COLLATE` set it; `CONVERT TO CHARACTER SET` sets it too (unless
    /// the statement also has the former) and is returned, for the caller to convert the
    /// columns (after any column changes of the same statement, as the server does).
    pub(super) fn alter_table_default(
        &mut self,
        id: TableId,
        db: &str,
        alter_cs: &AlterCharset,
    ) -> Option<crate::charset::CharsetCollation> {
        let db_default = self.charsets.database(db).cloned();
        let resolve = |o: &CharsetOptions| {
            self.charsets.resolve(
                o.charset.as_deref(),
                o.collation.as_deref(),
                db_default.as_ref(),
            )
        };
        let default = (!alter_cs.default.is_empty()).then(|| resolve(&alter_cs.default));
        let convert = alter_cs.convert.as_ref().and_then(resolve);
        // With both, the columns take CONVERT TO and the table default the explicit option.
        if let Some(c) = &convert {
            self.set_table_default(id, Some(c.clone()));
        }
        if let Some(d) = default {
            self.set_table_default(id, d);
        }
        convert
    }

    pub(super) fn set_table_default(
        &mut self,
        id: TableId,
        cc: Option<crate::charset::CharsetCollation>,
    ) {
        match cc {
            Some(cc) => self.charsets.tables.insert(id, cc),
            None => self.charsets.tables.remove(&id),
        };
    }

    /// Sets the partition layout of `id`'s version created at `ts` from a `PARTITION BY` clause
    /// (CREATE) or a partition operation applied to the previous layout (ALTER). A layout
    /// Sluice cannot model is recorded as such ([`Partitioning::unsupported`]): capture never
    /// stops for it; only a sink that must place rows in partitions reports it.
    pub(super) fn set_partitioning(&mut self, id: TableId, ts: Ts, text: &str, alter: bool) {
        let Some(v) = self
            .tables
            .get_mut(&id)
            .and_then(|v| v.last_mut())
            .filter(|v| v.from == ts)
        else {
            return;
        };
        let result = if alter {
            Partitioning::apply_alter(v.schema.partitioning.as_ref(), text)
        } else {
            Partitioning::parse(text).map(Some)
        };
        v.schema.partitioning = match result {
            Ok(p) => p,
            Err(e) => Some(Partitioning::unsupported(text, &e.to_string())),
        };
    }

    /// A statement the history cannot parse or apply: skipped when configured so, else
    /// followed from the binlog ([`crate::binlog_schema`]).
    fn unparseable(
        &mut self,
        st: BinlogStatement<'_>,
        message: String,
    ) -> Result<Option<DdlEvent>> {
        if self.skip_unparseable_ddl {
            self.skipped.push(SkippedDdl {
                commit_ts: st.ts,
                database: st.database.into(),
                query: st.query.into(),
                error: message,
            });
            self.head = st.ts;
            return Ok(None);
        }
        Ok(self.follow_unparsed(st.ts, st.time_ms, st.database, st.query, message))
    }

    pub(super) fn find_id(&self, db: &str, name: &str, ts: Ts) -> Option<TableId> {
        self.table_at(db, name, ts).map(|s| s.table_id)
    }
}

/// A `CREATE OR REPLACE TABLE t …` that failed upstream after dropping the old `t` (MariaDB
/// logs it with its error): what it did is `DROP TABLE IF EXISTS t`. `None` for any other
/// statement (it is read as it is; a sink accepts the same error downstream).
fn failed_replace_drops(text: &str, database: &str) -> Option<String> {
    match crate::binlog_schema::ddl_target(text, database)? {
        crate::binlog_schema::Target::Create {
            db,
            table,
            or_replace: true,
        } => Some(format!(
            "DROP TABLE IF EXISTS `{}`.`{}`",
            db.replace('`', "``"),
            table.replace('`', "``")
        )),
        _ => None,
    }
}
