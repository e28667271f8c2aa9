//! Statement text before sqlparser: executable comments opened, statements recognised by their
//! leading words (sequences, views, ALTER DATABASE, schema statements), ALTER TABLE options
//! sqlparser does not know stripped, and synonyms it does not know rewritten.

use crate::charset::{scan_charset_options, AlterCharset, CharsetOptions};
use sluice_types::DdlKind;
use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;

/// What a sequence DDL does to the history's set of sequences.
#[derive(Debug, PartialEq)]
pub(super) enum SequenceChange {
    Create,
    Alter,
    Drop,
}

/// A recognised `CREATE [OR REPLACE] [TEMPORARY] SEQUENCE [IF NOT EXISTS] name …`, `ALTER
/// SEQUENCE [IF EXISTS] name …` or `DROP [TEMPORARY] SEQUENCE [IF EXISTS] a[, b …]`.
#[derive(Debug, PartialEq)]
pub(super) struct SequenceDdl {
    pub(super) change: SequenceChange,
    pub(super) temporary: bool,
    /// The names as written (`db.s` or `s`), parsed by the caller.
    pub(super) names: Vec<String>,
}

pub(super) fn sequence_statement(query: &str) -> Option<SequenceDdl> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, query).tokenize().ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let up = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => String::new(),
    };
    let change = match up(sig.first()?).as_str() {
        "CREATE" => SequenceChange::Create,
        "ALTER" => SequenceChange::Alter,
        "DROP" => SequenceChange::Drop,
        _ => return None,
    };
    let mut k = 1;
    let mut temporary = false;
    while matches!(up(sig.get(k)?).as_str(), "OR" | "REPLACE" | "TEMPORARY") {
        temporary |= up(sig.get(k)?) == "TEMPORARY";
        k += 1;
    }
    if up(sig.get(k)?) != "SEQUENCE" {
        return None;
    }
    k += 1;
    while matches!(up(sig.get(k)?).as_str(), "IF" | "NOT" | "EXISTS") {
        k += 1;
    }
    let mut names = Vec::new();
    loop {
        let mut name = sig.get(k)?.to_string();
        if matches!(sig.get(k + 1), Some(Token::Period)) {
            name.push('.');
            name.push_str(&sig.get(k + 2)?.to_string());
            k += 2;
        }
        names.push(name);
        k += 1;
        // Only DROP names several sequences.
        if change != SequenceChange::Drop || !matches!(sig.get(k), Some(Token::Comma)) {
            break;
        }
        k += 1;
    }
    Some(SequenceDdl {
        change,
        temporary,
        names,
    })
}

/// An ALTER TABLE with its table-option specifications removed.
pub(super) struct StrippedAlter {
    pub(super) query: String,
    /// The table name as written.
    pub(super) table: String,
    pub(super) specs_left: bool,
    /// The charset options among the removed specs.
    pub(super) charset: AlterCharset,
}

/// Words that start an ALTER TABLE specification which sets a table option and changes no
/// column.
pub(super) const TABLE_OPTION_WORDS: &[&str] = &[
    "ENGINE",
    "CHARSET",
    "CHARACTER",
    "COLLATE",
    "COMMENT",
    "AUTO_INCREMENT",
    "ROW_FORMAT",
    "ALGORITHM",
    "LOCK",
    "FORCE",
    "KEY_BLOCK_SIZE",
    "STATS_PERSISTENT",
    "STATS_AUTO_RECALC",
    "STATS_SAMPLE_PAGES",
    "CONVERT",
    "ORDER",
    "PAGE_CHECKSUM",
    "TRANSACTIONAL",
    "CHECKSUM",
    "DELAY_KEY_WRITE",
    "PACK_KEYS",
    "AVG_ROW_LENGTH",
    "MAX_ROWS",
    "MIN_ROWS",
    "INSERT_METHOD",
    "ENCRYPTED",
    "ENCRYPTION_KEY_ID",
    "PAGE_COMPRESSED",
    "PAGE_COMPRESSION_LEVEL",
    "SEQUENCE",
    "UNION",
];

/// Splits `ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] name spec, spec, ...` and drops the
/// table-option specs. `None` when the statement is not such an ALTER TABLE.
pub(super) fn strip_alter_options(query: &str) -> Option<StrippedAlter> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, query)
        .with_unescape(false)
        .tokenize()
        .ok()?;
    let (name_start, name_end) = alter_table_name(&toks)?;
    let specs = alter_specs(&toks[name_end..]);
    let option_tokens: Vec<(Option<String>, String)> = specs
        .iter()
        .filter(|s| is_option_spec(s))
        .flat_map(|s| s.iter())
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .map(|t| option_token(t))
        .collect();
    let keep: Vec<String> = specs
        .iter()
        .filter(|s| !is_option_spec(s))
        .map(|s| {
            s.iter()
                .map(|t| t.to_string())
                .collect::<String>()
                .trim()
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .collect();
    let text = |ts: &[Token]| ts.iter().map(|t| t.to_string()).collect::<String>();
    let head = text(&toks[..name_end]);
    let table = text(&toks[name_start..name_end]);
    Some(StrippedAlter {
        query: format!("{} {}", head.trim_end(), keep.join(", ")),
        table: table.trim().to_string(),
        specs_left: !keep.is_empty(),
        charset: scan_charset_options(&option_tokens),
    })
}

/// Where the table name of `ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] name …` lies in
/// `toks`: `(first token, token after it)`.
fn alter_table_name(toks: &[sqlparser::tokenizer::Token]) -> Option<(usize, usize)> {
    use sqlparser::tokenizer::Token;
    let sig: Vec<usize> = toks
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect();
    let word = |k: usize| -> Option<String> {
        match toks.get(*sig.get(k)?)? {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    };
    let mut k = 0;
    if word(k)? != "ALTER" {
        return None;
    }
    k += 1;
    while matches!(word(k).as_deref(), Some("ONLINE" | "IGNORE")) {
        k += 1;
    }
    if word(k).as_deref() != Some("TABLE") {
        return None;
    }
    k += 1;
    if word(k).as_deref() == Some("IF") {
        k += 2;
    }
    let name_start = *sig.get(k)?;
    k += 1;
    if sig
        .get(k)
        .is_some_and(|i| matches!(toks[*i], Token::Period))
    {
        k += 2;
    }
    Some((name_start, sig.get(k).copied().unwrap_or(toks.len())))
}

/// The comma-separated specifications after an ALTER TABLE's name (commas inside parentheses
/// belong to their spec).
fn alter_specs(toks: &[sqlparser::tokenizer::Token]) -> Vec<Vec<&sqlparser::tokenizer::Token>> {
    use sqlparser::tokenizer::Token;
    let mut specs: Vec<Vec<&Token>> = vec![Vec::new()];
    let mut depth = 0i32;
    for t in toks {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                specs.push(Vec::new());
                continue;
            }
            Token::SemiColon | Token::EOF => continue,
            _ => {}
        }
        if let Some(last) = specs.last_mut() {
            last.push(t);
        }
    }
    specs
}

/// Whether an ALTER TABLE spec sets a table option (and changes no column).
fn is_option_spec(spec: &[&sqlparser::tokenizer::Token]) -> bool {
    use sqlparser::tokenizer::Token;
    let words: Vec<String> = spec
        .iter()
        .filter_map(|t| match t {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        })
        .take(2)
        .collect();
    match words.first().map(String::as_str) {
        Some("DEFAULT") => matches!(
            words.get(1).map(String::as_str),
            Some("CHARSET" | "CHARACTER" | "COLLATE")
        ),
        Some(w) => TABLE_OPTION_WORDS.contains(&w),
        None => true,
    }
}

/// A token as [`scan_charset_options`] reads it: `(upper-cased keyword, text)`; quoted names and
/// strings lose their quotes.
pub(super) fn option_token(t: &sqlparser::tokenizer::Token) -> (Option<String>, String) {
    use sqlparser::tokenizer::Token;
    match t {
        Token::Word(w) if w.quote_style.is_none() => {
            (Some(w.value.to_ascii_uppercase()), w.value.clone())
        }
        Token::Word(w) => (None, w.value.clone()),
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => (None, s.clone()),
        t => (None, t.to_string()),
    }
}

/// `ALTER {DATABASE|SCHEMA} [name] [DEFAULT] CHARACTER SET … [DEFAULT] COLLATE …` → the
/// database (the session's when unnamed) and its charset options. `None` for other statements.
pub(super) fn alter_database_statement(
    query: &str,
    default_db: &str,
) -> Option<(String, CharsetOptions)> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let q = expand_executable_comments(query);
    let toks = Tokenizer::new(&MySqlDialect {}, &q).tokenize().ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF))
        .collect();
    let keyword = |k: usize| match sig.get(k) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    if keyword(0).as_deref() != Some("ALTER")
        || !matches!(keyword(1).as_deref(), Some("DATABASE" | "SCHEMA"))
    {
        return None;
    }
    let options_start = matches!(
        keyword(2).as_deref(),
        Some("DEFAULT" | "CHARACTER" | "CHARSET" | "COLLATE" | "COMMENT" | "UPGRADE" | "READ")
    );
    let (db, rest) = match sig.get(2) {
        Some(Token::Word(w)) if !options_start => (w.value.clone(), 3),
        _ => (default_db.to_string(), 2),
    };
    let words: Vec<(Option<String>, String)> =
        sig.iter().skip(rest).map(|t| option_token(t)).collect();
    Some((db, scan_charset_options(&words).default))
}

/// `CREATE [OR REPLACE] [ALGORITHM = …] [DEFINER = …] [SQL SECURITY …] VIEW`, `ALTER … VIEW`
/// (both [`DdlKind::CreateView`]) and `DROP VIEW` ([`DdlKind::DropView`]), with the database
/// the (first) view's name gives; `None` for anything else. Views are not parsed: they change no
/// table the history tracks.
pub(super) fn view_statement(query: &str) -> Option<(DdlKind, Option<String>)> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, query).tokenize().ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    // Unquoted words upper-cased; quoted names and the values of the clauses before VIEW
    // (`DEFINER = 'u'@'h'`) are "?".
    let word = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => String::from("?"),
    };
    let kind = match word(sig.first()?).as_str() {
        "CREATE" | "ALTER" => DdlKind::CreateView,
        "DROP" => DdlKind::DropView,
        _ => return None,
    };
    // A DEFINER's value: a user name and a host, unquoted words too (`root@localhost`).
    let mut definer_words = 0;
    let mut view_at = None;
    for (i, t) in sig.iter().enumerate().take(32).skip(1) {
        match word(t).as_str() {
            "VIEW" => {
                view_at = Some(i);
                break;
            }
            "DEFINER" => definer_words = 2,
            "OR" | "REPLACE" | "ALGORITHM" | "UNDEFINED" | "MERGE" | "TEMPTABLE" | "SQL"
            | "SECURITY" | "INVOKER" | "?" => {}
            _ if definer_words > 0 => definer_words -= 1,
            _ => return None,
        }
    }
    let mut k = view_at? + 1;
    while matches!(
        sig.get(k).map(|t| word(t)).as_deref(),
        Some("IF" | "NOT" | "EXISTS")
    ) {
        k += 1;
    }
    let db = match (sig.get(k), sig.get(k + 1), sig.get(k + 2)) {
        (Some(Token::Word(d)), Some(Token::Period), Some(Token::Word(_))) => Some(d.value.clone()),
        _ => None,
    };
    Some((kind, db))
}

/// Parses with sqlparser's MySQL dialect; a statement it rejects is tried again with the
/// synonyms it does not know rewritten ([`normalize_for_parser`]), so a statement that parses as
/// written is never rewritten (a column may be named `charset`).
pub(super) fn parse_mysql(
    sql: &str,
) -> std::result::Result<Vec<Statement>, sqlparser::parser::ParserError> {
    let parse = |q: &str| sqlparser::parser::Parser::parse_sql(&MySqlDialect {}, q);
    parse(sql).or_else(|e| {
        let n = normalize_for_parser(sql);
        if n == sql {
            Err(e)
        } else {
            parse(&n).map_err(|_| e)
        }
    })
}

/// Rewrites what MariaDB accepts and sqlparser does not, where the meaning is the same:
/// `CHARSET` (a synonym of `CHARACTER SET`, also on columns) in CREATE/ALTER TABLE,
/// `PERSISTENT` right after a generated column's `AS (expr)` (MariaDB's word for `STORED`), and
/// `CREATE SCHEMA … CHARACTER SET …` (a synonym of CREATE DATABASE).
pub(super) fn normalize_for_parser(sql: &str) -> String {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let words = leading_words(sql, 2);
    let create_schema =
        words.first().is_some_and(|w| w == "CREATE") && words.get(1).is_some_and(|w| w == "SCHEMA");
    if !create_schema && !is_create_or_alter_table(sql) {
        return sql.to_string();
    }
    let Ok(toks) = Tokenizer::new(&MySqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
    else {
        return sql.to_string();
    };
    let mut changed = false;
    let mut out = String::with_capacity(sql.len() + 16);
    let mut schema_done = !create_schema;
    let mut prev_paren = false;
    for t in &toks {
        let follows_paren = prev_paren;
        if !matches!(t, Token::Whitespace(_)) {
            prev_paren = matches!(t, Token::RParen);
        }
        match t {
            Token::Word(w) if w.quote_style.is_none() => {
                let up = w.value.to_ascii_uppercase();
                if up == "CHARSET" && !create_schema {
                    out.push_str("CHARACTER SET");
                    changed = true;
                    continue;
                }
                if up == "PERSISTENT" && follows_paren && !create_schema {
                    out.push_str("STORED");
                    changed = true;
                    continue;
                }
                if up == "SCHEMA" && !schema_done {
                    out.push_str("DATABASE");
                    schema_done = true;
                    changed = true;
                    continue;
                }
                out.push_str(&t.to_string());
            }
            t => out.push_str(&t.to_string()),
        }
    }
    if changed {
        out
    } else {
        sql.to_string()
    }
}

/// The other table of `EXCHANGE PARTITION p WITH TABLE other [WITH|WITHOUT VALIDATION]`, as
/// written (possibly `db`.`t`).
pub(super) fn exchange_partner(op: &str) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&MySqlDialect {}, op)
        .with_unescape(false)
        .tokenize()
        .ok()?;
    let sig: Vec<&Token> = toks
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let kw = |t: &Token, k: &str| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    if !sig.first().is_some_and(|t| kw(t, "EXCHANGE")) {
        return None;
    }
    let at = sig
        .windows(2)
        .position(|w| kw(w[0], "WITH") && kw(w[1], "TABLE"))?;
    let mut name = String::new();
    for t in &sig[at + 2..] {
        match t {
            Token::Word(w)
                if w.quote_style.is_none()
                    && (w.value.eq_ignore_ascii_case("WITH")
                        || w.value.eq_ignore_ascii_case("WITHOUT")) =>
            {
                break
            }
            Token::Word(_) | Token::Period => name.push_str(&t.to_string()),
            _ => break,
        }
    }
    (!name.is_empty()).then_some(name)
}

/// True for `CREATE [OR REPLACE] [TEMPORARY] TABLE …` and `ALTER [ONLINE|IGNORE] TABLE …`, the
/// statements that may carry partition options.
pub(super) fn is_create_or_alter_table(query: &str) -> bool {
    let words = leading_words(query, 5);
    let first = words.first().map(String::as_str).unwrap_or("");
    matches!(first, "CREATE" | "ALTER")
        && words
            .iter()
            .skip(1)
            .find(|w| {
                !matches!(
                    w.as_str(),
                    "OR" | "REPLACE" | "TEMPORARY" | "ONLINE" | "IGNORE"
                )
            })
            .is_some_and(|w| w == "TABLE")
}

/// The statement with MySQL's executable comments opened: `/*!50100 PARTITION BY … */` (and
/// MariaDB's `/*M!100100 … */`) is executed by the server, so its content is part of the
/// statement (as `mysqldump` and MySQL's `SHOW CREATE TABLE` write partition options). Quoted
/// text and ordinary comments are left as they are.
pub fn expand_executable_comments(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut open = 0usize; // executable comments currently open
    let mut last = 0;
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
            }
            b'/' if b.get(i + 1) == Some(&b'*') && matches!(b.get(i + 2), Some(b'!' | b'M')) => {
                let mut j = i + 2;
                if b[j] == b'M' {
                    if b.get(j + 1) != Some(&b'!') {
                        i += 2;
                        continue;
                    }
                    j += 1;
                }
                j += 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                out.push_str(&sql[last..i]);
                out.push(' ');
                last = j;
                i = j;
                open += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => match sql[i + 2..].find("*/") {
                Some(e) => i += e + 4,
                None => break,
            },
            b'*' if open > 0 && b.get(i + 1) == Some(&b'/') => {
                out.push_str(&sql[last..i]);
                out.push(' ');
                i += 2;
                last = i;
                open -= 1;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[last.min(sql.len())..]);
    out
}

/// The first `n` whitespace-separated words of a statement, upper-cased, after leading comments.
pub(super) fn leading_words(query: &str, n: usize) -> Vec<String> {
    let mut q = query.trim_start();
    loop {
        if let Some(rest) = q.strip_prefix("/*") {
            match rest.find("*/") {
                Some(e) => q = rest[e + 2..].trim_start(),
                None => return Vec::new(),
            }
        } else if q.starts_with("--") || q.starts_with('#') {
            match q.find('\n') {
                Some(e) => q = q[e + 1..].trim_start(),
                None => return Vec::new(),
            }
        } else {
            break;
        }
    }
    q.split_whitespace()
        .take(n)
        .map(|w| w.to_ascii_uppercase())
        .collect()
}

/// True when a statement may change the tracked schema (table or database DDL). Everything
/// else in a QUERY event (GRANT, CREATE USER, FLUSH, procedures, ...) is ignored without
/// parsing, so an unparseable statement of that kind cannot stop capture.
pub fn is_schema_statement(query: &str) -> bool {
    let words = leading_words(query, 6);
    let first = words.first().map(String::as_str).unwrap_or("");
    let rest: Vec<&str> = words
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|w| {
            !matches!(
                *w,
                "OR" | "REPLACE"
                    | "IF"
                    | "NOT"
                    | "EXISTS"
                    | "ONLINE"
                    | "OFFLINE"
                    | "IGNORE"
                    | "UNIQUE"
                    | "FULLTEXT"
                    | "SPATIAL"
            )
        })
        .collect();
    let object = rest.first().copied().unwrap_or("");
    match first {
        "RENAME" | "TRUNCATE" => object == "TABLE" || first == "TRUNCATE",
        // ALTER DATABASE is handled before parsing (`alter_database_statement`).
        "ALTER" if matches!(object, "DATABASE" | "SCHEMA") => false,
        "CREATE" | "DROP" | "ALTER" => {
            matches!(object, "TABLE" | "DATABASE" | "SCHEMA" | "VIEW" | "INDEX")
                || (object.starts_with("ALGORITHM")
                    || object.starts_with("DEFINER")
                    || object.starts_with("SQL"))
                    && words.iter().any(|w| w == "VIEW")
        }
        _ => false,
    }
}
