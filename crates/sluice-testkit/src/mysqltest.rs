//! Statements out of MariaDB's regression suite (`mysql-test`, Debian's `mariadb-test-data`):
//! a reader of the mysqltest language that yields the SQL a `.test` file sends to the server,
//! and the classification of that SQL into what the replay runs and what it leaves out.
//!
//! Invariants:
//! - a statement ends at the current delimiter outside quotes and comments (`delimiter` /
//!   `--delimiter` change it), as mysqltest reads it; mysqltest commands (`--x` lines, `let`,
//!   `if (…) {`, `}`, `perl`/`write_file` blocks up to their terminator, …) are never sent;
//! - `eval` statements get the values of `let $v = …` variables read earlier in the file; one
//!   that still names an unknown variable is left out (never sent with a `$` in it);
//! - [`classify`] keeps only what a single autocommit session can run without touching the
//!   server's own state: table/database/index/view/sequence DDL, row DML, `USE`, and session
//!   `SET`s of the variables that change how DDL is read; anything on a system schema, any
//!   `GLOBAL` setting and anything that writes the binlog directly is left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where Debian's `mariadb-test-data` installs the suite (`SLUICE_MYSQL_TEST_DIR` overrides).
pub const SUITE_DIR: &str = "/usr/share/mysql/mysql-test";

/// The suite's root: `SLUICE_MYSQL_TEST_DIR`, else [`SUITE_DIR`].
pub fn suite_root() -> PathBuf {
    PathBuf::from(std::env::var("SLUICE_MYSQL_TEST_DIR").unwrap_or_else(|_| SUITE_DIR.into()))
}

/// Every `main/*.test`, `suite/*/t/*.test` and `suite/*/*.test` under `root`, sorted, as paths
/// relative to it.
pub fn full_corpus(root: &Path) -> Vec<String> {
    let mut dirs: Vec<PathBuf> = vec![root.join("main")];
    if let Ok(suites) = std::fs::read_dir(root.join("suite")) {
        for e in suites.flatten() {
            dirs.push(e.path().join("t"));
            dirs.push(e.path());
        }
    }
    let mut files = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "test") {
                if let Ok(rel) = p.strip_prefix(root) {
                    files.push(rel.to_string_lossy().into_owned());
                }
            }
        }
    }
    files.sort();
    files
}

/// How a `.test` file's bytes were read: most are UTF-8, some (`type_enum.test`, …) latin1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    /// Every byte is the char of the same number (U+0000..U+00FF).
    Latin1,
}

/// A file's text: UTF-8 when it is valid UTF-8, else its bytes one char each, so that
/// [`encoded`] gives the statements' bytes back exactly (a latin1 file's `'ä'` reaches the
/// server as the byte the test sends, not as U+FFFD).
pub fn read_text(bytes: &[u8]) -> (String, Encoding) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), Encoding::Utf8),
        Err(_) => (
            bytes.iter().map(|&b| char::from(b)).collect(),
            Encoding::Latin1,
        ),
    }
}

/// The bytes to send for `sql`, a statement of a file read as `encoding`.
pub fn encoded(sql: &str, encoding: Encoding) -> Vec<u8> {
    match encoding {
        Encoding::Utf8 => sql.as_bytes().to_vec(),
        Encoding::Latin1 => sql
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
            .collect(),
    }
}

/// The files a replay reads: `var` (e.g. `SLUICE_MARIADB_SUITE`) unset or empty gives
/// `default`, `full` gives [`full_corpus`], anything else is a comma-separated list.
pub fn selection(var: &str, root: &Path, default: &[&str]) -> Vec<String> {
    match std::env::var(var).ok().as_deref() {
        None | Some("") => default.iter().map(|s| s.to_string()).collect(),
        Some("full") => full_corpus(root),
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
    }
}

/// One statement of a `.test` file, with the line it starts on.
#[derive(Clone, Debug, PartialEq)]
pub struct SuiteStatement {
    pub line: usize,
    pub sql: String,
}

/// What the replay does with a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Table, database, index, view or sequence DDL: run, then the history is checked.
    Ddl,
    /// Row DML, `USE`, session `SET`: run so later DDL sees the state the test meant.
    Setup,
    /// Not run.
    Skip,
}

/// mysqltest commands that may be written without `--` and end with the delimiter.
const COMMANDS: &[&str] = &[
    "append_file",
    "cat_file",
    "change_user",
    "character_set",
    "chmod",
    "connect",
    "connection",
    "copy_file",
    "copy_files_wildcard",
    "dec",
    "die",
    "diff_files",
    "dirty_close",
    "disable_abort_on_error",
    "disable_connect_log",
    "disable_info",
    "disable_metadata",
    "disable_parsing",
    "disable_ps_protocol",
    "disable_query_log",
    "disable_reconnect",
    "disable_result_log",
    "disable_rpl_parse",
    "disable_session_track_info",
    "disable_warnings",
    "disconnect",
    "echo",
    "enable_abort_on_error",
    "enable_connect_log",
    "enable_info",
    "enable_metadata",
    "enable_parsing",
    "enable_ps_protocol",
    "enable_query_log",
    "enable_reconnect",
    "enable_result_log",
    "enable_rpl_parse",
    "enable_session_track_info",
    "enable_warnings",
    "end",
    "end_timer",
    "error",
    "exec",
    "exec_in_background",
    "execw",
    "exit",
    "file_exists",
    "horizontal_results",
    "inc",
    "let",
    "list_files",
    "list_files_append_file",
    "list_files_write_file",
    "lowercase_result",
    "mkdir",
    "move_file",
    "output",
    "perl",
    "ping",
    "query_attributes",
    "query_get_value",
    "query_horizontal",
    "query_vertical",
    "real_sleep",
    "reap",
    "remove_file",
    "remove_files_wildcard",
    "replace_column",
    "replace_numeric_round",
    "replace_regex",
    "replace_result",
    "require",
    "reset_connection",
    "result",
    "result_format",
    "rmdir",
    "save_master_pos",
    "send_quit",
    "send_shutdown",
    "shutdown_server",
    "skip",
    "sleep",
    "sorted_result",
    "source",
    "start_timer",
    "sync_slave_with_master",
    "sync_with_master",
    "system",
    "vertical_results",
    "wait_for_slave_to_stop",
    "write_file",
    "write_line",
    "disable_prepare_warnings",
    "enable_prepare_warnings",
    "disable_view_protocol",
    "enable_view_protocol",
    "disable_cursor_protocol",
    "enable_cursor_protocol",
    "disable_service_connection",
    "enable_service_connection",
    "disable_non_blocking_api",
    "enable_non_blocking_api",
    "sync_with_master_gtid",
];

/// Commands followed by lines up to a terminator (`EOF` unless given).
const BLOCK_COMMANDS: &[&str] = &["perl", "write_file", "append_file"];

/// Session variables whose `SET` the replay runs: they change what DDL means.
const SESSION_VARIABLES: &[&str] = &[
    "sql_mode",
    "default_storage_engine",
    "storage_engine",
    "default_tmp_storage_engine",
    "character_set_client",
    "character_set_connection",
    "character_set_database",
    "character_set_server",
    "character_set_results",
    "collation_connection",
    "collation_database",
    "collation_server",
    "foreign_key_checks",
    "unique_checks",
    "explicit_defaults_for_timestamp",
    "old_mode",
    "alter_algorithm",
    "system_versioning_alter_history",
    "innodb_strict_mode",
    "time_zone",
    "auto_increment_increment",
    "auto_increment_offset",
    "names",
    "character",
    "check_constraint_checks",
    "big_tables",
    "column_compression_threshold",
];

/// Reads a `.test` file's text into the statements it sends.
pub fn statements(text: &str) -> Vec<SuiteStatement> {
    let mut r = Reader {
        delimiter: ";".into(),
        vars: BTreeMap::new(),
        out: Vec::new(),
    };
    let mut buf = String::new();
    let mut start = 0;
    let mut block_end: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        if let Some(end) = &block_end {
            if line.trim() == end {
                block_end = None;
            }
            continue;
        }
        if buf.trim().is_empty() {
            buf.clear();
            start = n + 1;
            if let Some(end) = r.line_command(line.trim()) {
                block_end = end;
                continue;
            }
        }
        buf.push_str(line);
        buf.push('\n');
        while let Some(end) = find_delimiter(&buf, &r.delimiter) {
            let stmt = buf[..end].trim().to_string();
            let rest = buf[end + r.delimiter.len()..].to_string();
            block_end = r.statement(start, &stmt);
            buf = rest;
            start = n + 1;
            if block_end.is_some() {
                buf.clear();
                break;
            }
        }
    }
    r.out
}

struct Reader {
    delimiter: String,
    vars: BTreeMap<String, String>,
    out: Vec<SuiteStatement>,
}

impl Reader {
    /// Handles a line read at a statement start when it is a mysqltest line (`#`, `--x`,
    /// `if (…)`, braces). `Some(terminator)` when it consumed the line (a block follows when
    /// the terminator is `Some`), `None` when the line starts a statement.
    fn line_command(&mut self, t: &str) -> Option<Option<String>> {
        if t.is_empty() || t.starts_with('#') {
            return Some(None);
        }
        if let Some(cmd) = t.strip_prefix("--") {
            return Some(self.dash_command(cmd.trim()));
        }
        let first = t
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let lower = first.to_ascii_lowercase();
        if matches!(lower.as_str(), "if" | "while")
            && t[first.len()..].trim_start().starts_with('(')
        {
            return Some(None);
        }
        if t.starts_with('{') || t.starts_with('}') {
            return Some(None);
        }
        None
    }

    /// A `--command args` line (no delimiter).
    fn dash_command(&mut self, cmd: &str) -> Option<String> {
        let (word, rest) = split_word(cmd);
        match word.to_ascii_lowercase().as_str() {
            "delimiter" => {
                if !rest.is_empty() {
                    self.delimiter = rest.to_string();
                }
                None
            }
            "let" => {
                self.let_var(rest);
                None
            }
            "eval" | "send_eval" | "query" | "send" => {
                self.push_sql(
                    0,
                    rest,
                    word.eq_ignore_ascii_case("eval") || word.eq_ignore_ascii_case("send_eval"),
                );
                None
            }
            w if BLOCK_COMMANDS.contains(&w) => Some(block_terminator(w, rest)),
            _ => None,
        }
    }

    /// A complete statement (delimiter removed). Returns a block terminator for `perl;` etc.
    fn statement(&mut self, line: usize, stmt: &str) -> Option<String> {
        let (word, rest) = split_word(stmt);
        let lower = word.to_ascii_lowercase();
        match lower.as_str() {
            "delimiter" => {
                self.delimiter = rest.trim().to_string();
                None
            }
            "let" => {
                self.let_var(rest);
                None
            }
            "eval" | "send_eval" => {
                self.push_sql(line, rest, true);
                None
            }
            "send" | "query" => {
                self.push_sql(line, rest, false);
                None
            }
            w if BLOCK_COMMANDS.contains(&w) => Some(block_terminator(w, rest)),
            w if COMMANDS.contains(&w) => None,
            _ if stmt.starts_with("--") || stmt.starts_with('#') => None,
            _ => {
                self.push_sql(line, stmt, false);
                None
            }
        }
    }

    fn push_sql(&mut self, line: usize, sql: &str, eval: bool) {
        let sql = if eval {
            self.substitute(sql)
        } else {
            Some(sql.to_string())
        };
        if let Some(sql) = sql.filter(|s| !s.trim().is_empty()) {
            self.out.push(SuiteStatement {
                line,
                sql: sql.trim().to_string(),
            });
        }
    }

    /// `$name = value` (quotes kept as written, a trailing delimiter removed).
    fn let_var(&mut self, rest: &str) {
        let rest = rest.trim().trim_end_matches(self.delimiter.as_str());
        if let Some((name, value)) = rest.split_once('=') {
            let name = name.trim().trim_start_matches('$').to_string();
            let value = value.trim();
            match self.substitute(value) {
                Some(v) if !v.starts_with('`') => {
                    self.vars.insert(name, v);
                }
                _ => {
                    self.vars.remove(&name);
                }
            }
        }
    }

    /// Replaces `$name` by its value; `None` when a name is unknown.
    fn substitute(&self, sql: &str) -> Option<String> {
        let mut out = String::with_capacity(sql.len());
        let mut chars = sql.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c != '$' {
                out.push(c);
                continue;
            }
            let name: String = sql[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                out.push(c);
                continue;
            }
            out.push_str(self.vars.get(&name)?);
            for _ in 0..name.chars().count() {
                chars.next();
            }
        }
        Some(out)
    }
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

/// The terminator of a `perl [term]` / `write_file path [term]` block (`EOF` by default).
fn block_terminator(command: &str, rest: &str) -> String {
    let rest = rest.trim().trim_end_matches(';');
    let skip = usize::from(!command.eq_ignore_ascii_case("perl"));
    rest.split_whitespace()
        .nth(skip)
        .map(str::to_string)
        .unwrap_or_else(|| "EOF".into())
}

/// Byte offset of the first `delimiter` outside quotes and comments.
fn find_delimiter(buf: &str, delimiter: &str) -> Option<usize> {
    let b = buf.as_bytes();
    let d = delimiter.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' && q != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') && !matches!(b.get(i + 2), Some(b'!' | b'M')) => {
                match buf[i + 2..].find("*/") {
                    Some(e) => i += e + 4,
                    None => return None,
                }
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') && matches!(b.get(i + 2), Some(b' ' | b'\t')) => {
                match buf[i..].find('\n') {
                    Some(e) => i += e + 1,
                    None => return None,
                }
                continue;
            }
            _ => {}
        }
        if b[i..].starts_with(d) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The upper-cased words of a statement up to the first that is not a modifier, after
/// leading comments (not executable ones: `/*!… CREATE …*/` counts as its content).
pub fn words(sql: &str, n: usize) -> Vec<String> {
    let mut q = sql.trim_start();
    loop {
        if let Some(body) = executable_comment_body(q) {
            q = body.trim_start();
        } else if let Some(rest) = q.strip_prefix("/*") {
            match rest.find("*/") {
                Some(e) => q = rest[e + 2..].trim_start(),
                None => return Vec::new(),
            }
        } else {
            break;
        }
    }
    q.split(|c: char| c.is_whitespace() || c == '(' || c == ';' || c == '=')
        .filter(|w| !w.is_empty())
        .take(n)
        .map(|w| w.to_ascii_uppercase())
        .collect()
}

/// The text after an opening `/*!NNNNN` or `/*M!NNNNN` (the server runs a comment's content;
/// only the words at its start matter here, so the closing `*/` is left in place).
fn executable_comment_body(q: &str) -> Option<&str> {
    let rest = q.strip_prefix("/*M!").or_else(|| q.strip_prefix("/*!"))?;
    Some(rest.trim_start_matches(|c: char| c.is_ascii_digit()))
}

const DDL_OBJECTS: &[&str] = &["TABLE", "DATABASE", "SCHEMA", "INDEX", "VIEW", "SEQUENCE"];
const DDL_MODIFIERS: &[&str] = &[
    "OR",
    "REPLACE",
    "TEMPORARY",
    "IF",
    "NOT",
    "EXISTS",
    "ONLINE",
    "OFFLINE",
    "IGNORE",
    "UNIQUE",
    "FULLTEXT",
    "SPATIAL",
    "ALGORITHM",
    "DEFINER",
    "SQL",
    "SECURITY",
    "INVOKER",
    "MERGE",
    "UNDEFINED",
    "TEMPTABLE",
];

/// What the replay does with `sql` (see the module docs).
pub fn classify(sql: &str) -> Class {
    if touches_system_schema(sql) {
        return Class::Skip;
    }
    let w = words(sql, 8);
    let first = w.first().map(String::as_str).unwrap_or("");
    match first {
        "CREATE" | "ALTER" | "DROP" => {
            let object = w
                .iter()
                .skip(1)
                .map(String::as_str)
                .find(|x| !DDL_MODIFIERS.contains(x) && !x.contains('='));
            match object {
                Some(o) if DDL_OBJECTS.contains(&o) => Class::Ddl,
                _ => Class::Skip,
            }
        }
        "RENAME" if w.get(1).is_some_and(|x| x == "TABLE" || x == "TABLES") => Class::Ddl,
        "TRUNCATE" => Class::Ddl,
        "INSERT" | "REPLACE" | "UPDATE" | "DELETE" | "USE" => Class::Setup,
        "SET" => classify_set(sql, &w),
        _ => Class::Skip,
    }
}

fn classify_set(sql: &str, w: &[String]) -> Class {
    let upper = sql.to_ascii_uppercase();
    if upper.contains("GLOBAL")
        || upper.contains("SQL_LOG_BIN")
        || upper.contains("BINLOG")
        || upper.contains("GTID")
        || upper.contains("DEBUG")
        || upper.contains("PSEUDO")
        || upper.contains("PASSWORD")
        || upper.contains("ROLE")
        || upper.contains("TRANSACTION")
    {
        return Class::Skip;
    }
    if w.get(1).is_some_and(|x| x == "STATEMENT") {
        // SET STATEMENT var=value[, …] FOR <statement>: what the inner statement is.
        return match upper.find(" FOR ") {
            Some(i) => match classify(&sql[i + 5..]) {
                Class::Ddl => Class::Ddl,
                _ => Class::Skip,
            },
            None => Class::Skip,
        };
    }
    let var = w
        .iter()
        .skip(1)
        .find(|x| !matches!(x.as_str(), "SESSION" | "LOCAL"))
        .map(|x| {
            x.trim_start_matches("@@SESSION.")
                .trim_start_matches("@@LOCAL.")
                .trim_start_matches("@@")
        })
        .unwrap_or("");
    if var.starts_with('@')
        || SESSION_VARIABLES
            .iter()
            .any(|v| v.eq_ignore_ascii_case(var))
    {
        Class::Setup
    } else {
        Class::Skip
    }
}

/// True when a statement names a system schema (`mysql.user`, `USE mysql`, `DROP DATABASE sys`)
/// or writes files or the binlog directly.
fn touches_system_schema(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    if lower.contains("binlog ")
        || lower.contains("into outfile")
        || lower.contains("into dumpfile")
        || lower.contains("load_file")
    {
        return true;
    }
    let idents: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter(|s| !s.is_empty())
        .collect();
    let system = |s: &str| {
        matches!(
            s,
            "mysql" | "performance_schema" | "information_schema" | "sys" | "mtr"
        )
    };
    let words = words(sql, 4);
    let db_stmt = words.first().is_some_and(|f| f == "USE")
        || words.iter().any(|w| w == "DATABASE" || w == "SCHEMA");
    idents
        .iter()
        .any(|s| s.split_once('.').is_some_and(|(db, _)| system(db)) || (db_stmt && system(s)))
        || lower.contains("`mysql`.")
        || lower.contains("`performance_schema`")
        || lower.contains("`information_schema`")
        || lower.contains("`sys`.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_mysqltest_language() {
        let text = "--source include/have_innodb.inc\n# comment\nlet $e= InnoDB;\n\
                    CREATE TABLE t1 (a INT);\n--error ER_DUP\nCREATE TABLE t1\n  (b INT);\n\
                    eval CREATE TABLE t2 (a INT) ENGINE=$e;\neval CREATE TABLE t3 ENGINE=$unknown;\n\
                    delimiter |;\nCREATE PROCEDURE p() BEGIN SELECT 1; END|\ndelimiter ;|\n\
                    if ($x)\n{\n  DROP TABLE t1; DROP TABLE t2;\n}\nperl;\nprint \"x;\";\nEOF\n\
                    --eval ALTER TABLE t1 ENGINE=$e\nSELECT ';' AS a;\n";
        let got: Vec<String> = statements(text).into_iter().map(|s| s.sql).collect();
        assert_eq!(
            got,
            [
                "CREATE TABLE t1 (a INT)",
                "CREATE TABLE t1\n  (b INT)",
                "CREATE TABLE t2 (a INT) ENGINE=InnoDB",
                "CREATE PROCEDURE p() BEGIN SELECT 1; END",
                "DROP TABLE t1",
                "DROP TABLE t2",
                "ALTER TABLE t1 ENGINE=InnoDB",
                "SELECT ';' AS a",
            ]
        );
    }

    #[test]
    fn classifies() {
        assert_eq!(classify("CREATE OR REPLACE TABLE t (a INT)"), Class::Ddl);
        assert_eq!(classify("create unique index i on t(a)"), Class::Ddl);
        assert_eq!(classify("/*!40101 CREATE TABLE t (a INT) */"), Class::Ddl);
        assert_eq!(classify("CREATE PROCEDURE p() SELECT 1"), Class::Skip);
        assert_eq!(classify("DROP TABLE mysql.user"), Class::Skip);
        assert_eq!(classify("USE mysql"), Class::Skip);
        assert_eq!(classify("SET GLOBAL sql_mode=''"), Class::Skip);
        assert_eq!(classify("SET sql_mode='maxdb'"), Class::Setup);
        assert_eq!(
            classify("SET STATEMENT sql_mode='' FOR ALTER TABLE t ADD b INT"),
            Class::Ddl
        );
        assert_eq!(classify("INSERT INTO t VALUES (1)"), Class::Setup);
        assert_eq!(classify("SELECT 1"), Class::Skip);
        assert_eq!(
            classify("CREATE ALGORITHM=MERGE VIEW v AS SELECT 1"),
            Class::Ddl
        );
    }
}
