//! The upstream session a DDL ran under, as the QUERY event's status variables carry it, and the
//! `SET STATEMENT … FOR` prefix that sets part of it for one statement.
//!
//! Invariants:
//! - `sql_mode` is spelled with MariaDB's names for its bits, in bit order, so a sink can `SET`
//!   it on MariaDB or MySQL; a value with a bit this table does not know is kept whole as its
//!   decimal number (MariaDB accepts `SET sql_mode = <number>`), never dropped;
//! - only settings that change what a DDL does are read: `sql_mode`, the server and connection
//!   collations, the time zone when the statement used it, `foreign_key_checks = 0`. The client
//!   charset is used to read the statement text ([`statement_text`]: a latin1 session's bytes
//!   become their characters), which sinks then send as UTF-8;
//! - [`as_sql_mode_reads`] rewrites a statement only for the modes that change how the server
//!   reads a definition (`ANSI_QUOTES`, `MAXDB`), so the history sees what the server made;
//! - [`strip_set_statement`] returns the statement `SET STATEMENT` applies to, or the input
//!   unchanged; the statement keeps its prefix downstream (sinks run it as logged). MariaDB logs
//!   the prefix's values in the status variables but parses the statement under the session's
//!   own `sql_mode`, so a prefix that sets `sql_mode` leaves [`DdlSession::sql_mode`] unknown
//!   ([`of_statement`]): the history parses with no mode, a sink under its own.

use mysql_async::binlog::events::{StatusVarVal, StatusVars};
pub use sluice_types::DdlSession;
use std::borrow::Cow;

/// MariaDB's `sql_mode` bits (`sql_mode.h`), bit `i` named `SQL_MODE_NAMES[i]`.
const SQL_MODE_NAMES: [&str; 35] = [
    "REAL_AS_FLOAT",
    "PIPES_AS_CONCAT",
    "ANSI_QUOTES",
    "IGNORE_SPACE",
    "IGNORE_BAD_TABLE_OPTIONS",
    "ONLY_FULL_GROUP_BY",
    "NO_UNSIGNED_SUBTRACTION",
    "NO_DIR_IN_CREATE",
    "POSTGRESQL",
    "ORACLE",
    "MSSQL",
    "DB2",
    "MAXDB",
    "NO_KEY_OPTIONS",
    "NO_TABLE_OPTIONS",
    "NO_FIELD_OPTIONS",
    "MYSQL323",
    "MYSQL40",
    "ANSI",
    "NO_AUTO_VALUE_ON_ZERO",
    "NO_BACKSLASH_ESCAPES",
    "STRICT_TRANS_TABLES",
    "STRICT_ALL_TABLES",
    "NO_ZERO_IN_DATE",
    "NO_ZERO_DATE",
    "ALLOW_INVALID_DATES",
    "ERROR_FOR_DIVISION_BY_ZERO",
    "TRADITIONAL",
    "NO_AUTO_CREATE_USER",
    "HIGH_NOT_PRECEDENCE",
    "NO_ENGINE_SUBSTITUTION",
    "PAD_CHAR_TO_FULL_LENGTH",
    "EMPTY_STRING_IS_NULL",
    "SIMULTANEOUS_ASSIGNMENT",
    "TIME_ROUND_FRACTIONAL",
];

/// `OPTION_NO_FOREIGN_KEY_CHECKS` in the QUERY event's `flags2`.
const FLAGS2_NO_FOREIGN_KEY_CHECKS: u32 = 1 << 26;

/// `sql_mode` bits as MariaDB names them (see the module invariants).
pub fn sql_mode_names(bits: u64) -> String {
    if bits >> SQL_MODE_NAMES.len() != 0 {
        return bits.to_string();
    }
    SQL_MODE_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(",")
}

/// The DDL-relevant settings among a QUERY event's status variables.
pub fn from_status_vars(vars: &StatusVars<'_>) -> DdlSession {
    let mut s = DdlSession::default();
    for var in vars.iter() {
        match var.get_value() {
            Ok(StatusVarVal::SqlMode(m)) => s.sql_mode = Some(sql_mode_names(m.0)),
            Ok(StatusVarVal::Flags2(f)) => {
                s.no_foreign_key_checks = f.0 & FLAGS2_NO_FOREIGN_KEY_CHECKS != 0
            }
            Ok(StatusVarVal::Charset {
                collation_connection,
                collation_server,
                ..
            }) => {
                s.collation_connection = Some(collation_connection);
                s.collation_server = Some(collation_server);
            }
            Ok(StatusVarVal::TimeZone(tz)) if !tz.as_bytes().is_empty() => {
                s.time_zone = Some(tz.as_str().into_owned())
            }
            _ => {}
        }
    }
    s
}

/// The text of a QUERY event's statement, read in the session's `character_set_client`: latin1
/// bytes are their cp1252 characters (as MariaDB reads them), UTF-8 and ASCII are read as
/// UTF-8, and the bytes of any other client charset are read as UTF-8 where they are valid
/// (documented in docs/capture.md: such sessions' non-ASCII DDL text is not transcoded).
pub fn statement_text<'a>(vars: &StatusVars<'_>, raw: &'a [u8]) -> Cow<'a, str> {
    let client = vars.iter().find_map(|v| match v.get_value() {
        Ok(StatusVarVal::Charset { charset_client, .. }) => Some(charset_client),
        _ => None,
    });
    match client.map(crate::decode::charset_of) {
        Some(crate::decode::Charset::Latin1) if !raw.is_ascii() => Cow::Owned(
            raw.iter()
                .map(|&b| sluice_partition::collation::latin1_char(b))
                .collect(),
        ),
        _ => String::from_utf8_lossy(raw),
    }
}

/// The session of a statement read from the binlog: its status variables, except a `sql_mode`
/// the statement sets itself with `SET STATEMENT sql_mode = … FOR`. MariaDB logs that value, but
/// parses the statement under the session's own mode, which the event does not carry: the
/// sink's mode stands for it (the statement, run as logged, sets the rest).
pub fn of_statement(vars: &StatusVars<'_>, query: &str) -> DdlSession {
    let mut s = from_status_vars(vars);
    if let Some((assignments, _)) = split_set_statement(query) {
        if assignments.to_ascii_lowercase().contains("sql_mode") {
            s.sql_mode = None;
        }
    }
    s
}

/// The statement of `SET STATEMENT var = value [, …] FOR <statement>`; other text unchanged.
pub fn strip_set_statement(query: &str) -> &str {
    split_set_statement(query).map_or(query, |(_, statement)| statement)
}

/// `(assignments, statement)` of `SET STATEMENT <assignments> FOR <statement>`.
fn split_set_statement(query: &str) -> Option<(&str, &str)> {
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::tokenizer::{Token, Tokenizer};
    let head = query.trim_start();
    let word = |t: &Token, k: &str| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    let toks = Tokenizer::new(&MySqlDialect {}, head)
        .tokenize_with_location()
        .ok()?;
    let mut sig = toks
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)));
    if !sig.next().is_some_and(|t| word(&t.token, "SET")) {
        return None;
    }
    let statement_word = sig.next().filter(|t| word(&t.token, "STATEMENT"))?;
    let after_word = offset_of(
        head,
        statement_word.span.end.line,
        statement_word.span.end.column,
    )?;
    let mut depth = 0i32;
    for t in sig {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            tok if depth == 0 && word(tok, "FOR") => {
                let start = offset_of(head, t.span.start.line, t.span.start.column)?;
                let end = offset_of(head, t.span.end.line, t.span.end.column)?;
                return Some((head[after_word..start].trim(), head[end..].trim_start()));
            }
            _ => {}
        }
    }
    None
}

/// `statement` as the server reads it under `sql_mode`, in the syntax the history parses: with
/// `ANSI_QUOTES` a `"name"` is a name (written `` `name` ``); with `MAXDB` the type `TIMESTAMP`
/// is `DATETIME`. Other modes change nothing the history reads from a definition (see
/// docs/capture.md); the text is returned as is.
pub fn as_sql_mode_reads<'a>(statement: &'a str, sql_mode: Option<&str>) -> Cow<'a, str> {
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::tokenizer::{Token, Tokenizer};
    let has = |m: &str| sql_mode.is_some_and(|s| s.split(',').any(|x| x == m));
    let (ansi_quotes, maxdb) = (has("ANSI_QUOTES"), has("MAXDB"));
    if !ansi_quotes && !maxdb {
        return Cow::Borrowed(statement);
    }
    let Ok(toks) = Tokenizer::new(&MySqlDialect {}, statement).tokenize() else {
        return Cow::Borrowed(statement);
    };
    let mut out = String::with_capacity(statement.len() + 8);
    for (i, t) in toks.iter().enumerate() {
        match t {
            Token::DoubleQuotedString(s) if ansi_quotes => {
                out.push('`');
                out.push_str(&s.replace('`', "``"));
                out.push('`');
            }
            Token::Word(w)
                if maxdb
                    && w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("TIMESTAMP")
                    && !literal_follows(&toks[i + 1..]) =>
            {
                out.push_str("DATETIME")
            }
            other => out.push_str(&other.to_string()),
        }
    }
    Cow::Owned(out)
}

/// A string literal comes next (`TIMESTAMP '2020-01-01 00:00:00'` is a value, not a type).
fn literal_follows(rest: &[sqlparser::tokenizer::Token]) -> bool {
    use sqlparser::tokenizer::Token;
    rest.iter()
        .find(|t| !matches!(t, Token::Whitespace(_)))
        .is_some_and(|t| matches!(t, Token::SingleQuotedString(_)))
}

/// Byte offset of a 1-based (line, column in characters) location in `text`.
fn offset_of(text: &str, line: u64, column: u64) -> Option<usize> {
    let mut cur_line = 1u64;
    let mut cur_col = 1u64;
    for (i, ch) in text.char_indices() {
        if cur_line == line && cur_col == column {
            return Some(i);
        }
        if ch == '\n' {
            cur_line += 1;
            cur_col = 1;
        } else {
            cur_col += 1;
        }
    }
    (cur_line == line && cur_col == column).then_some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_mode_bits_are_named_in_order() {
        assert_eq!(sql_mode_names(0), "");
        assert_eq!(
            sql_mode_names((1 << 1) | (1 << 2) | (1 << 12)),
            "PIPES_AS_CONCAT,ANSI_QUOTES,MAXDB"
        );
        assert_eq!(
            sql_mode_names((1 << 21) | (1 << 30)),
            "STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION"
        );
        // An unknown bit keeps the whole value.
        assert_eq!(
            sql_mode_names((1 << 40) | 1),
            ((1u64 << 40) | 1).to_string()
        );
    }

    #[test]
    fn sql_mode_changes_what_a_definition_says() {
        let q = "CREATE TABLE \"t\" (\"a\" TIMESTAMP(3) DEFAULT TIMESTAMP '2020-01-01 00:00:00', b CHAR(2) DEFAULT 'x')";
        assert_eq!(as_sql_mode_reads(q, None), q);
        assert_eq!(as_sql_mode_reads(q, Some("STRICT_TRANS_TABLES")), q);
        assert_eq!(
            as_sql_mode_reads(q, Some("PIPES_AS_CONCAT,ANSI_QUOTES,IGNORE_SPACE,MAXDB")),
            "CREATE TABLE `t` (`a` DATETIME(3) DEFAULT TIMESTAMP '2020-01-01 00:00:00', b CHAR(2) DEFAULT 'x')"
        );
        assert_eq!(
            as_sql_mode_reads("ALTER TABLE t ADD c TIMESTAMP", Some("MAXDB")),
            "ALTER TABLE t ADD c DATETIME"
        );
    }

    #[test]
    fn set_statement_prefix_is_stripped() {
        assert_eq!(
            strip_set_statement("SET STATEMENT sql_mode='MAXDB' FOR CREATE TABLE t (a TIMESTAMP)"),
            "CREATE TABLE t (a TIMESTAMP)"
        );
        assert_eq!(
            strip_set_statement(
                "set statement max_statement_time=(1+2), sql_mode = 'a,b'\n for\n ALTER TABLE t ADD c INT"
            ),
            "ALTER TABLE t ADD c INT"
        );
        assert_eq!(
            strip_set_statement("CREATE TABLE `for` (a INT)"),
            "CREATE TABLE `for` (a INT)"
        );
        assert_eq!(
            strip_set_statement("SET sql_mode = ''"),
            "SET sql_mode = ''"
        );
        assert_eq!(
            strip_set_statement("SET STATEMENT x=1"),
            "SET STATEMENT x=1"
        );
    }
}
