//! The downstream's own word on which columns it computes.
//!
//! The schema history marks generated columns (VIRTUAL, STORED/PERSISTENT, a system-versioned
//! table's period columns) from the DDL; a table version rebuilt from the binlog (a DDL the
//! history could not parse, a repair) cannot know them, because the binlog does not say. Writing
//! such a column is refused by the downstream (1906) and would stop the changefeed, so before the
//! first rows of a table version are applied the sink asks the downstream which of the table's
//! columns it generates (read as the snapshot reads them, [`Generation::from_extra`]: MySQL's
//! `DEFAULT_GENERATED`, a DEFAULT expression, is not generated) and writes none of them.
//!
//! Invariants: a column is only ever removed from the written ones, never added (the history's
//! marks stand); a column the downstream does not list as generated is written as before (a
//! column missing downstream stays an error that names it, it is never dropped silently); the
//! answer is kept per table version (table id and version ts), at most [`MAX_KNOWN`] of them.

use super::Mysql;
use crate::error::Result;
use crate::fence::BoundFence;
use mysql_async::prelude::Queryable;
use sluice_types::{Generation, TableId, TableSchema, Ts};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Table versions whose downstream answer is kept (then the record starts afresh).
pub const MAX_KNOWN: usize = 4096;

/// The schemas as written, per table version.
#[derive(Default)]
pub(super) struct DownstreamGenerated {
    known: Mutex<BTreeMap<(TableId, Ts), Arc<TableSchema>>>,
}

impl DownstreamGenerated {
    fn get(&self, key: (TableId, Ts)) -> Option<Arc<TableSchema>> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(&key).cloned()
    }

    fn put(&self, key: (TableId, Ts), schema: Arc<TableSchema>) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert(key, schema);
    }
}

impl Mysql {
    /// `schema` with every column the downstream generates marked generated (the same `Arc`
    /// when the history already knew them all). A read: not fenced (it writes nothing).
    pub(super) async fn as_written(&self, schema: &Arc<TableSchema>) -> Result<Arc<TableSchema>> {
        let key = (schema.table_id, schema.version);
        if let Some(s) = self.generated.get(key) {
            return Ok(s);
        }
        let (db, table) = (schema.database.clone(), schema.name.clone());
        let listed: Vec<(String, String)> = self
            .with_retry(
                "read the downstream's generated columns",
                &BoundFence::none(),
                |mut c| {
                    let (db, table) = (db.clone(), table.clone());
                    async move {
                        c.exec(
                            format!(
                                "SELECT COLUMN_NAME, {} FROM information_schema.COLUMNS \
                             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                                Generation::EXTRA_SQL
                            ),
                            (db, table),
                        )
                        .await
                    }
                },
            )
            .await?;
        let marked = mark(schema, &listed);
        self.generated.put(key, marked.clone());
        Ok(marked)
    }
}

/// The schema with the listed `(name, EXTRA_SQL)` columns that are generated
/// ([`Generation::from_extra`]) marked so.
fn mark(schema: &Arc<TableSchema>, listed: &[(String, String)]) -> Arc<TableSchema> {
    let found: Vec<(usize, Generation)> = listed
        .iter()
        .filter_map(|(name, extra)| {
            let g = Generation::from_extra(extra)?;
            let i = schema
                .columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(name))?;
            schema.columns[i].generated.is_none().then_some((i, g))
        })
        .collect();
    if found.is_empty() {
        return schema.clone();
    }
    let mut s = (**schema).clone();
    for (i, g) in found {
        s.columns[i].generated = Some(g);
    }
    Arc::new(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_types::ColumnType;

    #[test]
    fn listed_columns_are_marked_and_others_kept() {
        let mut s = crate::testing::simple_schema("d", "t", 1, 1);
        for name in ["s", "w", "rs"] {
            let mut c = s.columns[1].clone();
            c.name = name.into();
            s.columns.push(c);
        }
        s.columns[3].generated = Some(Generation::Stored);
        let s = Arc::new(s);
        let listed = vec![
            ("id".to_string(), String::new()),
            ("v".to_string(), "DEFAULT_GENERATED".to_string()),
            ("S".to_string(), "VIRTUAL GENERATED".to_string()),
            ("w".to_string(), "VIRTUAL GENERATED".to_string()),
            ("rs".to_string(), "STORED GENERATED ROW_START".to_string()),
            ("not_here".to_string(), "STORED GENERATED".to_string()),
        ];
        let m = mark(&s, &listed);
        let g: Vec<Option<Generation>> = m.columns.iter().map(|c| c.generated).collect();
        assert_eq!(
            g,
            [
                None,
                None,
                Some(Generation::Virtual),
                Some(Generation::Stored),
                Some(Generation::RowStart)
            ],
            "the history's own mark (w: Stored) stands"
        );
        assert_eq!(m.columns[0].ty, ColumnType::BigInt);
        assert!(
            Arc::ptr_eq(&mark(&s, &[]), &s),
            "nothing listed: the same schema"
        );
    }
}
