//! Changes the binlog shows happened but does not carry as full rows: they cannot be replicated,
//! and are never skipped silently.
//!
//! - **Statement-format DML**: a session with `binlog_format=STATEMENT` (or `MIXED`, for the
//!   statements it deems safe) logs `INSERT`/`UPDATE`/`DELETE`/`REPLACE`/`LOAD DATA` as QUERY
//!   events, without row events. The global setting the upstream check reads cannot see it.
//! - **Incomplete row images**: a session with `binlog_row_image=MINIMAL` or `NOBLOB` logs only
//!   some columns of a row.
//! - **Rows capture cannot decode** (a type or value it does not support).
//! - **Foreign-key cascades**: child rows InnoDB changes for a parent's DELETE or UPDATE
//!   ([`crate::foreign_keys`]).
//!
//! Each becomes an [`Unreplicable`] for the tables it touches; capture turns a transaction's
//! into one [`sluice_types::DdlKind::Unreplicable`] event at the transaction's position, which
//! every dispatcher of those tables stops at (their changefeeds read `warning` with the
//! reason), while every other table goes on. Invariant: the rows of a table after such an event
//! are never written before the user has acted (see docs/capture.md).

use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// One change that cannot be replicated, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreplicable {
    /// The tables it touches (`(db, table)`); empty when they cannot be told (every table of
    /// the changefeed then stops).
    pub tables: Vec<(String, String)>,
    pub reason: String,
}

/// At most this many unreplicable changes are kept per transaction (the rest are counted).
pub const MAX_PER_TRANSACTION: usize = 64;

fn tokens(query: &str) -> Vec<Token> {
    let mut t = Tokenizer::new(&MySqlDialect {}, query)
        .tokenize()
        .unwrap_or_default();
    t.retain(|t| !matches!(t, Token::Whitespace(_)));
    t
}

fn is_word(t: Option<&Token>, kw: &str) -> bool {
    matches!(t, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw))
}

const DML_WORDS: [&str; 5] = ["INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"];
/// Words between a DML keyword and its table that name no table.
const MODIFIERS: [&str; 7] = [
    "LOW_PRIORITY",
    "DELAYED",
    "HIGH_PRIORITY",
    "IGNORE",
    "QUICK",
    "CONCURRENT",
    "LOCAL",
];

/// Where the statement proper starts: after `SET STATEMENT … FOR`.
fn statement_start(toks: &[Token]) -> usize {
    if is_word(toks.first(), "SET") && is_word(toks.get(1), "STATEMENT") {
        if let Some(i) = toks.iter().position(|t| is_word(Some(t), "FOR")) {
            return i + 1;
        }
    }
    0
}

/// The tables a statement-format DML statement writes or reads, or `None` when the statement
/// is not DML. Every name after `INSERT`, `REPLACE`, `DELETE`, `INTO`, `UPDATE`, `FROM`, `JOIN`
/// or `TABLE` (modifiers skipped; and after the
/// commas of a table list there) counts: a table only read is stopped too, which is the safe
/// side. `Some(vec![])`: DML whose tables cannot be told.
pub fn dml_tables(query: &str, default_db: &str) -> Option<Vec<(String, String)>> {
    let toks = tokens(query);
    let start = statement_start(&toks);
    if !DML_WORDS.iter().any(|w| is_word(toks.get(start), w)) {
        return None;
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let mut i = start;
    while i < toks.len() {
        let introduces = [
            "INSERT", "REPLACE", "DELETE", "INTO", "UPDATE", "FROM", "JOIN", "TABLE",
        ]
        .iter()
        .any(|w| is_word(toks.get(i), w));
        i += 1;
        if !introduces {
            continue;
        }
        while MODIFIERS.iter().any(|m| is_word(toks.get(i), m)) {
            i += 1;
        }
        while let Some((name, next)) = table_name(&toks, i, default_db) {
            if !out.contains(&name) {
                out.push(name);
            }
            i = next;
            if !matches!(toks.get(i), Some(Token::Comma)) {
                break;
            }
            i += 1;
        }
    }
    Some(out)
}

fn table_name(toks: &[Token], i: usize, default_db: &str) -> Option<((String, String), usize)> {
    let Some(Token::Word(a)) = toks.get(i) else {
        return None;
    };
    if a.quote_style.is_none() && a.keyword != sqlparser::keywords::Keyword::NoKeyword {
        return None;
    }
    if matches!(toks.get(i + 1), Some(Token::Period)) {
        if let Some(Token::Word(b)) = toks.get(i + 2) {
            return Some(((a.value.clone(), b.value.clone()), i + 3));
        }
        return None;
    }
    Some(((default_db.to_string(), a.value.clone()), i + 1))
}

/// The reason recorded for statement-format DML.
pub fn statement_reason(query: &str) -> String {
    let mut q: String = query.chars().take(200).collect();
    if q.len() < query.len() {
        q.push('…');
    }
    format!(
        "statement-format DML in the binlog (the writing session has binlog_format=STATEMENT or \
         MIXED): its rows are not in the binlog, so Sluice cannot replicate them; statement: {q}. \
         Fix: set binlog_format=ROW globally and in every session that writes, re-copy the table \
         downstream, then let the table go on (docs/capture.md, 'Unreplicable changes')"
    )
}

/// The reason recorded for an incomplete row image.
pub fn image_reason(present: usize, of: usize) -> String {
    format!(
        "a row image with {present} of {of} columns (the writing session has binlog_row_image=\
         MINIMAL or NOBLOB): the full rows are not in the binlog. Fix: set binlog_row_image=FULL \
         globally and in every session that writes, re-copy the table downstream, then let the \
         table go on (docs/capture.md, 'Unreplicable changes')"
    )
}

/// The change recorded for the rows of a table whose TABLE_MAP cannot be read (a column type
/// Sluice does not decode, optional metadata missing): only that table stops.
pub fn table_map_problem(table: (String, String), e: &impl std::fmt::Display) -> Unreplicable {
    Unreplicable {
        tables: vec![table],
        reason: format!(
            "its TABLE_MAP cannot be read ({e}), so its rows cannot be decoded. Fix: change \
             what the message names upstream (or report the column type to the Sluice team), \
             re-copy the table downstream, then let the table go on (docs/capture.md, \
             'Unreplicable changes')"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(db: &str, name: &str) -> (String, String) {
        (db.into(), name.into())
    }

    #[test]
    fn tables_of_dml_statements() {
        assert_eq!(
            dml_tables("INSERT INTO t VALUES (1)", "d"),
            Some(vec![t("d", "t")])
        );
        assert_eq!(
            dml_tables(
                "insert low_priority ignore into `x`.`a b` (c) select * from y",
                "d"
            ),
            Some(vec![t("x", "a b"), t("d", "y")])
        );
        assert_eq!(
            dml_tables("UPDATE a JOIN e.b ON a.id = b.id SET a.v = b.v", "d"),
            Some(vec![t("d", "a"), t("e", "b")])
        );
        assert_eq!(
            dml_tables(
                "DELETE QUICK FROM t1, t2 USING t1 JOIN t2 WHERE t1.id = t2.id",
                "d"
            ),
            Some(vec![t("d", "t1"), t("d", "t2")])
        );
        assert_eq!(
            dml_tables("REPLACE t SET a = 1", "d"),
            Some(vec![t("d", "t")])
        );
        assert_eq!(dml_tables("INSERT INTO", "d"), Some(vec![]));
        assert_eq!(
            dml_tables("LOAD DATA LOCAL INFILE '/x' REPLACE INTO TABLE t", "d"),
            Some(vec![t("d", "t")])
        );
        assert_eq!(
            dml_tables(
                "SET STATEMENT max_statement_time=5 FOR UPDATE t SET a = 1",
                "d"
            ),
            Some(vec![t("d", "t")])
        );
        assert_eq!(dml_tables("CREATE TABLE t (a INT)", "d"), None);
        assert_eq!(dml_tables("GRANT ALL ON *.* TO u", "d"), None);
    }
}
