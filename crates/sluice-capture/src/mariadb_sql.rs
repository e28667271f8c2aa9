//! MariaDB's DDL syntax made readable to sqlparser: [`prepare`] rewrites a CREATE TABLE, ALTER
//! TABLE or CREATE INDEX (partition options already cut, executable comments already opened)
//! into the statement with the same effect on the columns and keys in the syntax sqlparser's
//! MySQL dialect parses.
//!
//! Invariants:
//! - a rewrite never changes a column's name, position, type, nullability, charset or a key:
//!   it only removes clauses that change none of them (DEFAULT and ON UPDATE expressions,
//!   INVISIBLE, COMPRESSED, non-unique indexes, index options, periods, table options other
//!   than the charset and collation, DISABLE/ENABLE KEYS, ORDER BY, ALTER COLUMN … DEFAULT,
//!   RENAME INDEX, DROP CHECK, WAIT/NOWAIT, ONLINE/IGNORE, IF EXISTS of DROP FOREIGN KEY and
//!   DROP CONSTRAINT) or spells the same thing as sqlparser expects
//!   (PERSISTENT is STORED, `RENAME t2` is `RENAME TO t2`, `ADD (a …, b …)` is two ADDs, ENUM
//!   values written `0x41` are `'A'`, `SERIAL DEFAULT VALUE` is NOT NULL UNIQUE);
//! - an explicit period column (`GENERATED ALWAYS AS ROW START/END`) is a NOT NULL STORED
//!   generated column whose expression is one of [`PERIOD_MARKERS`];
//! - system versioning becomes the columns it makes: MariaDB's implicit `row_start` and
//!   `row_end` (TIMESTAMP(6) NOT NULL, last in the row images) on `WITH SYSTEM VERSIONING` or
//!   `ADD SYSTEM VERSIONING` without explicit `AS ROW START/END` columns, and `DROP SYSTEM
//!   VERSIONING` drops them;
//! - a statement that is not one of those three is returned unchanged, and so is text inside
//!   quotes.

use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// The implicit system-versioning columns MariaDB adds, as a column list fragment.
const IMPLICIT_PERIOD: [&str; 2] = [
    "row_start TIMESTAMP(6) NOT NULL",
    "row_end TIMESTAMP(6) NOT NULL",
];

/// MariaDB's implicit system-versioning columns, as the row images carry them (last).
pub fn implicit_period_columns() -> [sluice_types::ColumnDef; 2] {
    ["row_start", "row_end"].map(|n| {
        let mut c = crate::schema::column_from_sql_type(n, "timestamp(6)");
        c.nullable = false;
        // GENERATED ALWAYS AS ROW START/END: the server sets them, a downstream computes its own.
        c.generated = Some(if n == "row_start" {
            sluice_types::Generation::RowStart
        } else {
            sluice_types::Generation::RowEnd
        });
        c
    })
}

/// The generation expressions a period column is rewritten with: `(row start, row end)`. No
/// user expression is a bare identifier of that name (a generated column cannot read itself).
pub const PERIOD_MARKERS: (&str, &str) = ("sluice_row_start", "sluice_row_end");

/// Names that begin with a digit (`2fa_codes`, `3d_model`, `1e`), which MariaDB accepts
/// unquoted and sqlparser reads as numbers, in backquotes. A name is a run of letters, digits,
/// `_` and `$` outside quotes and comments that starts with a digit and is not a number
/// (`12`, `1e3`, `1e+3`, `0x1F`, `0b101`).
pub fn quote_digit_led_names(sql: &str) -> String {
    let b = sql.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut i, mut last) = (0, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => i = quoted_end(b, i, q),
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].find("*/").map_or(b.len(), |e| i + e + 4)
            }
            b'#' => i = sql[i..].find('\n').map_or(b.len(), |e| i + e),
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(b.len(), |e| i + e)
            }
            c if word(c) => {
                let start = i;
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
                let run = &sql[start..i];
                let signed_exponent = matches!(b.get(i), Some(b'+' | b'-'))
                    && b.get(i + 1).is_some_and(u8::is_ascii_digit);
                if c.is_ascii_digit() && !is_number(run, signed_exponent) {
                    out.push_str(&sql[last..start]);
                    out.push('`');
                    out.push_str(run);
                    out.push('`');
                    last = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[last..]);
    out
}

/// The index after the quoted text opening at `i` with quote `q` (a doubled quote or, outside
/// backquotes, a backslash escapes).
fn quoted_end(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() {
        if b[i] == b'\\' && q != b'`' {
            i += 2;
            continue;
        }
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// A numeric literal's word: digits, a hex or binary literal, or digits with an exponent
/// (`1e3`; `1e` when a signed exponent follows, as in `1e+3`).
fn is_number(run: &str, signed_exponent: bool) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if digits(run) {
        return true;
    }
    if let Some(h) = run.strip_prefix("0x") {
        return !h.is_empty() && h.bytes().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(bits) = run.strip_prefix("0b") {
        return !bits.is_empty() && bits.bytes().all(|c| c == b'0' || c == b'1');
    }
    match run.split_once(['e', 'E']) {
        Some((m, "")) => digits(m) && signed_exponent,
        Some((m, e)) => digits(m) && digits(e),
        None => false,
    }
}

/// `NOT NULL GENERATED ALWAYS AS (marker) STORED` for an explicit period column.
fn period_column(end: bool, out: &mut Vec<Token>) {
    let marker = if end {
        PERIOD_MARKERS.1
    } else {
        PERIOD_MARKERS.0
    };
    let word = |s: &str| Token::make_keyword(s);
    out.extend([
        word("NOT"),
        word("NULL"),
        word("GENERATED"),
        word("ALWAYS"),
        word("AS"),
    ]);
    out.extend([Token::LParen, word(marker), Token::RParen, word("STORED")]);
}

/// `(database, table)` of every system-versioned table without explicit `AS ROW START/END`
/// columns: information_schema does not list its implicit `row_start`/`row_end`, the binlog
/// row images do.
pub async fn tables_with_implicit_period(
    conn: &mut mysql_async::Conn,
) -> crate::error::Result<std::collections::BTreeSet<(String, String)>> {
    use mysql_async::prelude::Queryable;
    let rows: Vec<(String, String)> = conn
        .query(
            "SELECT t.TABLE_SCHEMA, t.TABLE_NAME FROM information_schema.TABLES t \
             WHERE t.TABLE_TYPE = 'SYSTEM VERSIONED' AND NOT EXISTS (SELECT 1 FROM \
             information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND \
             c.TABLE_NAME = t.TABLE_NAME AND c.GENERATION_EXPRESSION = 'ROW START')",
        )
        .await
        .map_err(crate::error::CaptureError::from_mysql)?;
    Ok(rows.into_iter().collect())
}

/// See the module docs.
pub fn prepare(sql: &str) -> String {
    let quoted = quote_digit_led_names(sql);
    let sql = quoted.as_str();
    let Ok(toks) = Tokenizer::new(&MySqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
    else {
        return sql.to_string();
    };
    let sig: Vec<Token> = toks
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF | Token::SemiColon))
        .collect();
    let out = match words_upper(&sig, 3).as_slice() {
        [a, ..] if a == "ALTER" => prepare_alter(&sig),
        [a, ..] if a == "CREATE" => {
            let object = sig.iter().skip(1).map(upper).find(|w| {
                !matches!(
                    w.as_str(),
                    "OR" | "REPLACE" | "TEMPORARY" | "UNIQUE" | "FULLTEXT" | "SPATIAL"
                )
            });
            match object.as_deref() {
                Some("TABLE") => prepare_create(&sig),
                Some("INDEX") => prepare_create_index(&sig),
                Some("DATABASE" | "SCHEMA") => prepare_create_database(&sig),
                _ => None,
            }
        }
        _ => None,
    };
    out.unwrap_or_else(|| sql.to_string())
}

fn upper(t: &Token) -> String {
    match t {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => String::new(),
    }
}

fn is_kw(t: Option<&Token>, k: &str) -> bool {
    t.is_some_and(|t| upper(t) == k)
}

fn words_upper(sig: &[Token], n: usize) -> Vec<String> {
    sig.iter().take(n).map(upper).collect()
}

fn join(toks: &[Token]) -> String {
    let mut out = String::new();
    for t in toks {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&t.to_string());
    }
    out
}

/// Index just past the balanced group opening at `i` (an `(`).
fn group_end(sig: &[Token], i: usize) -> usize {
    let mut depth = 0i32;
    for (k, t) in sig.iter().enumerate().skip(i) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    sig.len()
}

/// Splits at commas outside parentheses.
fn split_commas(sig: &[Token]) -> Vec<&[Token]> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (k, t) in sig.iter().enumerate() {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                out.push(&sig[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    out.push(&sig[start..]);
    out
}

/// The end of a table name starting at `i` (`t`, `db.t`).
fn name_end(sig: &[Token], i: usize) -> usize {
    let end = if matches!(sig.get(i + 1), Some(Token::Period)) {
        i + 3
    } else {
        i + 1
    };
    end.min(sig.len())
}

/// The tokens inside the group `sig[open..end]` (`end` from [`group_end`]; an unclosed group
/// runs to the end).
fn inside(sig: &[Token], open: usize, end: usize) -> &[Token] {
    let close = if matches!(sig.get(end.wrapping_sub(1)), Some(Token::RParen)) && end > open + 1 {
        end - 1
    } else {
        end
    };
    sig.get(open + 1..close).unwrap_or(&[])
}

/// Index after `IF [NOT] EXISTS` at `i`, or `i`.
fn skip_if_exists(sig: &[Token], i: usize) -> usize {
    if !is_kw(sig.get(i), "IF") {
        return i;
    }
    let mut k = i + 1;
    if is_kw(sig.get(k), "NOT") {
        k += 1;
    }
    if is_kw(sig.get(k), "EXISTS") {
        k + 1
    } else {
        i
    }
}

/// The end of one value term starting at `i`: a signed literal, a word with an optional
/// argument list (`CURRENT_TIMESTAMP(6)`, `NEXTVAL(s)`), an introducer and its string
/// (`_utf8'x'`), `NEXT VALUE FOR s`, or a parenthesized expression.
fn term_end(sig: &[Token], i: usize) -> usize {
    let mut k = i;
    while matches!(sig.get(k), Some(Token::Minus | Token::Plus)) {
        k += 1;
    }
    match sig.get(k) {
        Some(Token::LParen) => group_end(sig, k),
        Some(Token::Word(w)) if w.quote_style.is_none() => {
            let word = w.value.to_ascii_uppercase();
            if word == "CASE" {
                let end = sig[k..].iter().position(|t| upper(t) == "END");
                return end.map_or(sig.len(), |e| k + e + 1);
            }
            if word == "NEXT" && is_kw(sig.get(k + 1), "VALUE") && is_kw(sig.get(k + 2), "FOR") {
                return name_end(sig, k + 3);
            }
            if matches!(sig.get(k + 1), Some(Token::LParen)) {
                return group_end(sig, k + 1);
            }
            if word.starts_with('_')
                && matches!(
                    sig.get(k + 1),
                    Some(Token::SingleQuotedString(_) | Token::HexStringLiteral(_))
                )
            {
                return k + 2;
            }
            if matches!(word.as_str(), "DATE" | "TIME" | "TIMESTAMP")
                && matches!(sig.get(k + 1), Some(Token::SingleQuotedString(_)))
            {
                return k + 2;
            }
            k + 1
        }
        Some(_) => k + 1,
        None => k,
    }
}

/// What a column definition said about system versioning.
#[derive(Default)]
struct ColumnFacts {
    row_period: bool,
}

/// One column definition (`name type attributes…`) with MariaDB's attributes rewritten.
fn column_def(def: &[Token], facts: &mut ColumnFacts) -> String {
    let mut out: Vec<Token> = Vec::with_capacity(def.len());
    let mut k = 0;
    // Name and type: the name, the type words, their argument list.
    if let Some(name) = def.first() {
        out.push(name.clone());
        k = 1;
    }
    let mut type_word = def.get(k).map(upper).unwrap_or_default();
    if type_word == "NATIONAL" {
        // `NATIONAL CHAR|CHARACTER [VARYING]`, `NATIONAL VARCHAR`: NCHAR and NVARCHAR.
        let varying = is_kw(def.get(k + 2), "VARYING") || is_kw(def.get(k + 1), "VARCHAR");
        out.push(Token::make_word(
            if varying { "NVARCHAR" } else { "NCHAR" },
            None,
        ));
        k += if is_kw(def.get(k + 2), "VARYING") {
            3
        } else {
            2
        };
        type_word = String::new();
    }
    while k < def.len() {
        let t = &def[k];
        match t {
            Token::LParen => {
                let end = group_end(def, k);
                if matches!(type_word.as_str(), "ENUM" | "SET") {
                    out.extend(def[k..end].iter().map(enum_value));
                } else {
                    out.extend_from_slice(&def[k..end]);
                }
                k = end;
            }
            Token::Word(w) if w.quote_style.is_none() && out.len() > 1 => {
                let next = attribute(def, k, &mut out, facts);
                if next == k {
                    out.push(t.clone());
                    k += 1;
                } else {
                    k = next;
                }
            }
            _ => {
                out.push(t.clone());
                k += 1;
            }
        }
    }
    join(&out)
}

/// Handles the column attribute at `k`: pushes its replacement and returns the index after
/// it, or returns `k` when it is kept as written.
fn attribute(def: &[Token], k: usize, out: &mut Vec<Token>, facts: &mut ColumnFacts) -> usize {
    let w = upper(&def[k]);
    let word = |s: &str| Token::make_keyword(s);
    match w.as_str() {
        "PERSISTENT" => {
            out.push(word("STORED"));
            k + 1
        }
        // ZEROFILL implies UNSIGNED (and only pads the display): one UNSIGNED, wherever written.
        "ZEROFILL" | "UNSIGNED" => {
            if !out.iter().any(|t| upper(t) == "UNSIGNED") {
                out.push(word("UNSIGNED"));
            }
            k + 1
        }
        // `COLLATE DEFAULT`: the default collation of the column's charset (not the table's
        // collation), spelled so that sqlparser reads it (`CharsetDefaults::resolve`).
        "COLLATE" if is_kw(def.get(k + 1), "DEFAULT") => {
            out.extend([word("COLLATE"), Token::make_word("default", Some('`'))]);
            k + 2
        }
        // MariaDB's shorthands for a charset.
        "UNICODE" | "ASCII" if !after_charset_word(def, k) => {
            let cs = if w == "UNICODE" { "ucs2" } else { "latin1" };
            out.extend([word("CHARACTER"), word("SET"), Token::make_word(cs, None)]);
            k + 1
        }
        "INVISIBLE" => k + 1,
        "COMMENT" => term_end(def, k + 1),
        // AUTO_INCREMENT makes the column NOT NULL, whatever it says.
        "AUTO_INCREMENT" => {
            out.extend([word("NOT"), word("NULL")]);
            k + 1
        }
        "CHECK" if matches!(def.get(k + 1), Some(Token::LParen)) => {
            let end = group_end(def, k + 1);
            if join(&def[k..end])
                .to_ascii_lowercase()
                .contains("json_valid")
            {
                out.extend_from_slice(&def[k..end]);
            }
            end
        }
        "CONSTRAINT" if is_kw(def.get(k + 2), "CHECK") => attribute(def, k + 2, out, facts),
        "COMPRESSED" => {
            if matches!(def.get(k + 1), Some(Token::Eq)) {
                k + 3
            } else {
                k + 1
            }
        }
        "DEFAULT" => term_end(def, k + 1),
        "ON" if is_kw(def.get(k + 1), "UPDATE") => term_end(def, k + 2),
        "REF_SYSTEM_ID" => term_end(def, k + 2),
        "SERIAL" if is_kw(def.get(k + 1), "DEFAULT") && is_kw(def.get(k + 2), "VALUE") => {
            out.extend([word("NOT"), word("NULL"), word("UNIQUE")]);
            k + 3
        }
        "WITH" | "WITHOUT" if is_kw(def.get(k + 1), "SYSTEM") => k + 3,
        // A period column is NOT NULL, and generated: `AS (sluice_row_start) STORED` (or
        // `_end`) carries which one it is to the history ([`PERIOD_MARKERS`]).
        "GENERATED" if is_kw(def.get(k + 3), "ROW") => {
            facts.row_period = true;
            period_column(is_kw(def.get(k + 4), "END"), out);
            k + 5
        }
        "AS" if is_kw(def.get(k + 1), "ROW") => {
            facts.row_period = true;
            period_column(is_kw(def.get(k + 2), "END"), out);
            k + 3
        }
        "BINARY" if !after_charset_word(def, k) => {
            // The BINARY attribute: the `_bin` collation of the column's charset. With an
            // explicit charset it is spelled out; otherwise it is `COLLATE bin`, a collation
            // named without its charset, which the history gives the charset of its context
            // (the table's, else the database's: `CharsetDefaults::resolve`).
            let cs = def.windows(3).find_map(|w| {
                let (a, b) = (upper(&w[0]), upper(&w[1]));
                ((a == "CHARACTER" && b == "SET") || b == "CHARSET").then(|| w[2].to_string())
            });
            match cs {
                Some(cs) if cs.eq_ignore_ascii_case("binary") => {}
                Some(cs) => out.extend([
                    word("COLLATE"),
                    Token::make_word(&format!("{}_bin", cs.trim_matches('`')), None),
                ]),
                None => out.extend([word("COLLATE"), word("bin")]),
            }
            k + 1
        }
        _ => k,
    }
}

/// True when the word at `k` is the value of `CHARACTER SET`, `CHARSET` or `COLLATE`.
fn after_charset_word(def: &[Token], k: usize) -> bool {
    k > 0 && matches!(upper(&def[k - 1]).as_str(), "SET" | "CHARSET" | "COLLATE")
}

/// An ENUM/SET value as the server stores it: hex written as text, trailing spaces removed.
fn enum_value(t: &Token) -> Token {
    match hex_to_string(t) {
        Token::SingleQuotedString(s) => {
            Token::SingleQuotedString(s.trim_end_matches(' ').to_string())
        }
        other => other,
    }
}

/// `0x41` / `X'41'` → `'A'` (ENUM and SET values), other tokens unchanged.
fn hex_to_string(t: &Token) -> Token {
    let hex = match t {
        Token::HexStringLiteral(h) => Some(h.as_str()),
        Token::Number(n, _) => n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")),
        Token::Word(w) if w.quote_style.is_none() => w.value.strip_prefix("0x"),
        _ => None,
    };
    let Some(h) = hex.filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit())) else {
        return t.clone();
    };
    let bytes: Option<Vec<u8>> = (0..h.len() / 2 * 2)
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).ok())
        .collect();
    match bytes.and_then(|b| String::from_utf8(b).ok()) {
        Some(s) => Token::SingleQuotedString(s.replace('\'', "''")),
        None => t.clone(),
    }
}

/// An index definition inside a table (`PRIMARY KEY …`, `UNIQUE …`, `CONSTRAINT c UNIQUE …`)
/// without index options (USING, COMMENT, KEY_BLOCK_SIZE, IGNORED, …) after its columns.
fn unique_key(def: &[Token]) -> String {
    let mut out: Vec<Token> = Vec::new();
    let mut k = 0;
    while k < def.len() {
        if is_kw(def.get(k), "USING") {
            k += 2;
            continue;
        }
        if is_kw(def.get(k), "IF") {
            k = skip_if_exists(def, k).max(k + 1);
            continue;
        }
        if matches!(def[k], Token::LParen) {
            let end = group_end(def, k);
            out.extend_from_slice(&def[k..end]);
            break;
        }
        out.push(def[k].clone());
        k += 1;
    }
    join(&out)
}

/// A FOREIGN KEY or CHECK element: kept when it is a `json_valid()` CHECK (which makes the
/// column MariaDB's JSON) or a FOREIGN KEY (its parent is a table the DDL depends on: the
/// barrier waits for it); any other CHECK changes no column, and its expression may be MariaDB
/// syntax sqlparser does not know.
fn keep_constraint(def: &[Token], prefix: &str, out: &mut Vec<String>) {
    let text = join(def);
    let foreign = def.iter().take(3).any(|t| is_kw(Some(t), "FOREIGN"));
    if foreign || text.to_ascii_lowercase().contains("json_valid") {
        let toks: Vec<Token> = def
            .iter()
            .enumerate()
            .filter(|(i, _)| !if_exists_at(def, *i))
            .map(|(_, t)| t.clone())
            .collect();
        out.push(format!("{prefix}{}", join(&toks)));
    }
}

/// True when token `i` is part of an `IF [NOT] EXISTS`.
fn if_exists_at(def: &[Token], i: usize) -> bool {
    (0..3).any(|back| i >= back && skip_if_exists(def, i - back) > i)
}

/// What one element of a column list or one ALTER spec is.
enum Element {
    Column,
    /// A non-unique index or a period: changes no column.
    Drop,
    UniqueKey,
    /// CHECK, FOREIGN KEY: kept as written.
    Keep,
}

fn element_kind(def: &[Token]) -> Element {
    let first = def.first().map(upper).unwrap_or_default();
    let second = def.get(1).map(upper).unwrap_or_default();
    match first.as_str() {
        "KEY" | "INDEX" | "FULLTEXT" | "SPATIAL" | "PERIOD" => Element::Drop,
        "PRIMARY" | "UNIQUE" => Element::UniqueKey,
        "CHECK" | "FOREIGN" => Element::Keep,
        "CONSTRAINT" => {
            let after = if matches!(second.as_str(), "PRIMARY" | "UNIQUE" | "CHECK" | "FOREIGN") {
                second
            } else {
                def.get(2).map(upper).unwrap_or_default()
            };
            match after.as_str() {
                "PRIMARY" | "UNIQUE" => Element::UniqueKey,
                _ => Element::Keep,
            }
        }
        "" if def.is_empty() => Element::Drop,
        _ => Element::Column,
    }
}

/// An application-time period `PERIOD FOR name (start, end)` (not SYSTEM_TIME): its columns
/// are NOT NULL, and `name WITHOUT OVERLAPS` in a key stands for `end, start`.
struct Period {
    name: String,
    start: Token,
    end: Token,
}

impl Period {
    /// True when `column` (a column definition's name) is one of the period's bounds.
    fn bounds(&self, column: Option<&Token>) -> bool {
        column.is_some_and(|c| same_name(c, &self.start) || same_name(c, &self.end))
    }
}

fn name_of(t: &Token) -> Option<&str> {
    match t {
        Token::Word(w) => Some(w.value.as_str()),
        _ => None,
    }
}

fn same_name(a: &Token, b: &Token) -> bool {
    matches!((name_of(a), name_of(b)), (Some(x), Some(y)) if x.eq_ignore_ascii_case(y))
}

fn application_periods(defs: &[&[Token]]) -> Vec<Period> {
    defs.iter()
        .filter_map(|d| match d {
            [p, f, name, Token::LParen, start, Token::Comma, end, Token::RParen, ..]
                if upper(p) == "PERIOD" && upper(f) == "FOR" && upper(name) != "SYSTEM_TIME" =>
            {
                Some(Period {
                    name: name_of(name)?.to_string(),
                    start: start.clone(),
                    end: end.clone(),
                })
            }
            _ => None,
        })
        .collect()
}

/// A key's `period WITHOUT OVERLAPS` as the period's end and start columns (what the server
/// keys by).
fn without_overlaps(def: &[Token], periods: &[Period]) -> Vec<Token> {
    let mut out = Vec::with_capacity(def.len());
    let mut k = 0;
    while k < def.len() {
        let period = periods
            .iter()
            .find(|p| name_of(&def[k]).is_some_and(|n| n.eq_ignore_ascii_case(&p.name)));
        match period {
            Some(p) if is_kw(def.get(k + 1), "WITHOUT") && is_kw(def.get(k + 2), "OVERLAPS") => {
                out.extend([p.end.clone(), Token::Comma, p.start.clone()]);
                k += 3;
            }
            _ => {
                out.push(def[k].clone());
                k += 1;
            }
        }
    }
    out
}

/// CREATE TABLE: the column list's elements rewritten, table options other than the charset
/// and collation removed, implicit system-versioning columns added.
fn prepare_create(sig: &[Token]) -> Option<String> {
    let table = sig.iter().position(|t| upper(t) == "TABLE")?;
    let name = skip_if_exists(sig, table + 1);
    let after_name = name_end(sig, name);
    let mut out = join(&sig[..after_name]);
    let mut k = after_name;
    let mut facts = ColumnFacts::default();
    let mut elements: Vec<String> = Vec::new();
    if matches!(sig.get(k), Some(Token::LParen)) && is_kw(sig.get(k + 1), "LIKE") {
        // `CREATE TABLE t (LIKE src)`: the same as `CREATE TABLE t LIKE src`.
        let end = group_end(sig, k);
        return Some(format!("{out} {}", join(inside(sig, k, end))));
    }
    let has_list = matches!(sig.get(k), Some(Token::LParen)) && !is_kw(sig.get(k + 1), "SELECT");
    if has_list {
        let end = group_end(sig, k);
        let defs = split_commas(inside(sig, k, end));
        let periods = application_periods(&defs);
        for def in defs {
            match element_kind(def) {
                Element::Column => {
                    let mut c = column_def(def, &mut facts);
                    if periods.iter().any(|p| p.bounds(def.first())) {
                        c.push_str(" NOT NULL");
                    }
                    elements.push(c)
                }
                Element::UniqueKey => elements.push(unique_key(&without_overlaps(def, &periods))),
                Element::Keep => {
                    let mut kept = Vec::new();
                    keep_constraint(def, "", &mut kept);
                    elements.extend(kept);
                }
                Element::Drop => {}
            }
        }
        k = end;
    }
    let (options, versioned, rest) = table_options(&sig[k..]);
    if versioned && !facts.row_period {
        elements.extend(IMPLICIT_PERIOD.iter().map(|s| s.to_string()));
    }
    if has_list {
        out.push_str(&format!(" ({})", elements.join(", ")));
    }
    for o in [options, rest] {
        if !o.is_empty() {
            out.push(' ');
            out.push_str(&o);
        }
    }
    Some(out)
}

/// Table options: `(kept charset/collation options, WITH SYSTEM VERSIONING seen, the rest
/// from LIKE/SELECT/AS on)`.
fn table_options(sig: &[Token]) -> (String, bool, String) {
    let mut kept: Vec<String> = Vec::new();
    let mut versioned = false;
    let mut k = 0;
    while k < sig.len() {
        let w = upper(&sig[k]);
        match w.as_str() {
            _ if matches!(sig[k], Token::Comma) => k += 1,
            "SELECT" | "AS" | "IGNORE" | "REPLACE" | "LIKE" => break,
            _ if matches!(sig[k], Token::LParen) => break,
            "WITH" if is_kw(sig.get(k + 1), "SYSTEM") => {
                versioned = true;
                k += 3;
            }
            _ => {
                let start = k;
                let mut j = k;
                if w == "DEFAULT" {
                    j += 1;
                }
                let name = sig.get(j).map(upper).unwrap_or_default();
                let charset = matches!(name.as_str(), "CHARSET" | "COLLATE" | "CHARACTER");
                if name == "CHARACTER" || matches!(name.as_str(), "DATA" | "INDEX") {
                    j += 1;
                }
                j += 1;
                if matches!(sig.get(j), Some(Token::Eq)) {
                    j += 1;
                }
                j = match sig.get(j) {
                    Some(Token::LParen) => group_end(sig, j),
                    Some(_) => j + 1,
                    None => j,
                };
                if charset {
                    kept.push(join(&sig[start..j.min(sig.len())]));
                }
                k = j.max(k + 1);
            }
        }
    }
    (kept.join(" "), versioned, join(&sig[k.min(sig.len())..]))
}

/// `CREATE [OR REPLACE] DATABASE|SCHEMA [IF NOT EXISTS] d [options]`: `COMMENT [=] '…'` and
/// options set to `DEFAULT` (the server's) removed; OR REPLACE is `DROP DATABASE IF EXISTS d`
/// (with its tables) then `CREATE DATABASE d`.
fn prepare_create_database(sig: &[Token]) -> Option<String> {
    let object = sig
        .iter()
        .position(|t| matches!(upper(t).as_str(), "DATABASE" | "SCHEMA"))?;
    let or_replace = sig[..object].iter().any(|t| upper(t) == "REPLACE");
    let name_at = skip_if_exists(sig, object + 1);
    let name = sig.get(name_at)?;
    let mut out: Vec<Token> = vec![
        Token::make_keyword("CREATE"),
        Token::make_keyword("DATABASE"),
    ];
    out.extend_from_slice(&sig[object + 1..=name_at]);
    let mut k = name_at + 1;
    while k < sig.len() {
        let skip = database_option_to_drop(sig, k);
        if skip > k {
            k = skip;
        } else {
            out.push(sig[k].clone());
            k += 1;
        }
    }
    let create = join(&out);
    Some(if or_replace {
        format!("DROP DATABASE IF EXISTS {name}; {create}")
    } else {
        create
    })
}

/// The end of a database option at `k` that sets nothing Sluice follows (`COMMENT [=] '…'`,
/// `[DEFAULT] CHARACTER SET|CHARSET|COLLATE [=] DEFAULT`), or `k`.
fn database_option_to_drop(sig: &[Token], k: usize) -> usize {
    let mut i = k;
    if is_kw(sig.get(i), "DEFAULT") {
        i += 1;
    }
    let value_at = |i: usize| {
        if matches!(sig.get(i), Some(Token::Eq)) {
            i + 1
        } else {
            i
        }
    };
    match upper(sig.get(i).unwrap_or(&Token::EOF)).as_str() {
        "COMMENT" if i == k => term_end(sig, value_at(i + 1)),
        "CHARACTER"
            if is_kw(sig.get(i + 1), "SET") && is_kw(sig.get(value_at(i + 2)), "DEFAULT") =>
        {
            value_at(i + 2) + 1
        }
        "CHARSET" | "COLLATE" if is_kw(sig.get(value_at(i + 1)), "DEFAULT") => value_at(i + 1) + 1,
        _ => k,
    }
}

/// `CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX …`: FULLTEXT/SPATIAL (non-unique) and index options
/// after the column list removed.
fn prepare_create_index(sig: &[Token]) -> Option<String> {
    let mut out: Vec<Token> = Vec::new();
    let mut k = 0;
    while k < sig.len() {
        let w = upper(&sig[k]);
        // OR REPLACE: the index replaces one of the same name (the history keeps key columns,
        // not index names); FULLTEXT and SPATIAL indexes are not unique.
        if matches!(w.as_str(), "FULLTEXT" | "SPATIAL")
            || (k < 3 && matches!(w.as_str(), "OR" | "REPLACE"))
        {
            k += 1;
            continue;
        }
        if w == "USING" {
            k += 2;
            continue;
        }
        if matches!(sig[k], Token::LParen) {
            let end = group_end(sig, k);
            out.extend_from_slice(&sig[k..end]);
            return Some(join(&out));
        }
        out.push(sig[k].clone());
        k += 1;
    }
    None
}

/// ALTER TABLE: ONLINE/IGNORE and WAIT/NOWAIT removed, every spec rewritten.
fn prepare_alter(sig: &[Token]) -> Option<String> {
    let table = sig.iter().take(4).position(|t| upper(t) == "TABLE")?;
    let name = skip_if_exists(sig, table + 1);
    let mut k = name_end(sig, name);
    let head = format!("ALTER {}", join(sig.get(table..k).unwrap_or(&[])));
    if is_kw(sig.get(k), "WAIT") {
        k += 2;
    } else if is_kw(sig.get(k), "NOWAIT") {
        k += 1;
    }
    let whole = sig.get(k..).unwrap_or(&[]);
    let explicit_period = whole
        .windows(2)
        .any(|w| upper(&w[0]) == "AS" && upper(&w[1]) == "ROW")
        || whole
            .windows(2)
            .any(|w| upper(&w[0]) == "ALWAYS" && upper(&w[1]) == "AS");
    let mut specs: Vec<String> = Vec::new();
    for spec in split_commas(whole) {
        // ORDER BY's column list is the rest of the statement.
        if is_kw(spec.first(), "ORDER") && is_kw(spec.get(1), "BY") {
            break;
        }
        alter_spec(spec, explicit_period, &mut specs);
    }
    if specs.is_empty() {
        return Some(head);
    }
    Some(format!("{head} {}", specs.join(", ")))
}

/// One ALTER spec, rewritten into `out` (none, one or several specs).
fn alter_spec(spec: &[Token], explicit_period: bool, out: &mut Vec<String>) {
    let w: Vec<String> = spec.iter().take(4).map(upper).collect();
    let at = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    match at(0) {
        "" => {}
        "DISABLE" | "ENABLE" if at(1) == "KEYS" => {}
        "DISCARD" | "IMPORT" if at(1) == "TABLESPACE" => {}
        // DROP KEY/INDEX: the history keeps no index names (as for DROP INDEX … ON).
        "DROP" if matches!(at(1), "KEY" | "INDEX") => {}
        "ADD" if at(1) == "SYSTEM" => {
            if !explicit_period {
                out.extend(IMPLICIT_PERIOD.iter().map(|c| format!("ADD COLUMN {c}")));
            }
        }
        "DROP" if at(1) == "SYSTEM" => {
            out.extend([
                "DROP COLUMN IF EXISTS row_start".into(),
                "DROP COLUMN IF EXISTS row_end".into(),
            ]);
        }
        "ADD" | "DROP" if at(1) == "PERIOD" => {}
        "ADD" => alter_add(spec, out),
        "MODIFY" | "CHANGE" => {
            let mut k = 1;
            if at(1) == "COLUMN" {
                k += 1;
            }
            k = skip_if_exists(spec, k);
            let names = if at(0) == "CHANGE" { 2 } else { 1 };
            let mut facts = ColumnFacts::default();
            let def = column_def(spec.get(k + names - 1..).unwrap_or(&[]), &mut facts);
            let lead = join(spec.get(k..k + names - 1).unwrap_or(&[]));
            out.push(format!(
                "{} COLUMN {}{}",
                at(0),
                if lead.is_empty() {
                    String::new()
                } else {
                    format!("{lead} ")
                },
                def
            ));
        }
        // ALTER COLUMN … SET/DROP DEFAULT, [IN]VISIBLE; ALTER INDEX … [NOT] IGNORED.
        "ALTER" => {}
        "RENAME" => match at(1) {
            "INDEX" | "KEY" => {}
            // IF EXISTS: the history renames only a column it has.
            "COLUMN" => out.push(format!(
                "RENAME COLUMN {}",
                join(&spec[skip_if_exists(spec, 2)..])
            )),
            "TO" | "AS" => out.push(format!("RENAME TO {}", join(&spec[2..]))),
            _ => out.push(format!("RENAME TO {}", join(&spec[1..]))),
        },
        // The history keeps foreign keys by name (a CHECK changes no column).
        "DROP" if at(1) == "FOREIGN" && at(2) == "KEY" => drop_named(spec, 3, "FOREIGN KEY", out),
        "DROP" if at(1) == "CONSTRAINT" => drop_named(spec, 2, "CONSTRAINT", out),
        "DROP" if at(1) == "CHECK" => {}
        _ => out.push(join(spec)),
    }
}

/// `DROP FOREIGN KEY [IF EXISTS] name` / `DROP CONSTRAINT [IF EXISTS] name` (the name at
/// `k`), without IF EXISTS (the history drops only keys it has).
fn drop_named(spec: &[Token], k: usize, what: &str, out: &mut Vec<String>) {
    let k = skip_if_exists(spec, k);
    if let Some(name) = spec.get(k) {
        out.push(format!("DROP {what} {}", join(std::slice::from_ref(name))));
    }
}

/// `ADD …`: columns (also a parenthesized list of them), unique keys without index options;
/// non-unique indexes and periods dropped.
fn alter_add(spec: &[Token], out: &mut Vec<String>) {
    let mut k = 1;
    let column_word = is_kw(spec.get(k), "COLUMN");
    if column_word {
        k += 1;
    }
    // IF NOT EXISTS: the history never adds a column it has (the server accepts that only
    // with IF NOT EXISTS), so the guard is implied.
    let guard = "";
    k = skip_if_exists(spec, k);
    let rest = &spec[k..];
    if matches!(rest.first(), Some(Token::LParen)) {
        let end = group_end(rest, 0);
        for def in split_commas(inside(rest, 0, end)) {
            match element_kind(def) {
                Element::Column => out.push(format!(
                    "ADD COLUMN {guard}{}",
                    column_def(def, &mut ColumnFacts::default())
                )),
                Element::UniqueKey => out.push(format!("ADD {}", unique_key(def))),
                Element::Keep => keep_constraint(def, "ADD ", out),
                Element::Drop => {}
            }
        }
        return;
    }
    let kind = if column_word {
        Element::Column
    } else {
        element_kind(rest)
    };
    match kind {
        Element::Column => out.push(format!(
            "ADD COLUMN {guard}{}",
            column_def(rest, &mut ColumnFacts::default())
        )),
        Element::UniqueKey => out.push(format!("ADD {}", unique_key(rest))),
        Element::Keep => keep_constraint(rest, "ADD ", out),
        Element::Drop => {}
    }
}

#[cfg(test)]
mod tests {
    use super::prepare;

    /// Every prefix of real statements (cut anywhere, as a truncated or odd statement would
    /// be) is rewritten without a panic.
    #[test]
    fn no_statement_prefix_panics() {
        let statements = [
            "CREATE OR REPLACE TABLE db.t (a INT DEFAULT (NEXT VALUE FOR db.s) COMPRESSED=zlib, \
             b ENUM(0x41, 'b ') BINARY CHARACTER SET latin1, PERIOD FOR p (a, b), \
             UNIQUE KEY IF NOT EXISTS u USING HASH (b(3))) WITH SYSTEM VERSIONING",
            "ALTER ONLINE IGNORE TABLE t WAIT 1 ADD COLUMN IF NOT EXISTS (x INT, y INT AS (x) \
             PERSISTENT), MODIFY IF EXISTS a INT, CHANGE b c INT, RENAME t2, ORDER BY a, b",
            "CREATE UNIQUE INDEX IF NOT EXISTS i USING BTREE ON t (a(2), b) COMMENT 'x'",
        ];
        for sql in statements {
            for (i, _) in sql.char_indices() {
                let _ = prepare(&sql[..i]);
            }
        }
    }

    #[test]
    fn rewrites_mariadb_syntax() {
        let cases = [
            (
                "CREATE TABLE g (id INT PRIMARY KEY, v INT, s INT AS (v+1) PERSISTENT INVISIBLE)",
                "CREATE TABLE g (id INT PRIMARY KEY, v INT, s INT AS (v + 1) STORED)",
            ),
            (
                "create table t (a varchar(3) character set latin1 binary default 'x' compressed, \
                 e enum(0x41,'b') default 0x41, key (a), spatial key (b)) engine=myisam charset=utf8 with system versioning",
                "create table t (a varchar (3) character set latin1 COLLATE latin1_bin, e enum ('A' , 'b'), \
                 row_start TIMESTAMP(6) NOT NULL, row_end TIMESTAMP(6) NOT NULL) charset = utf8",
            ),
            (
                "ALTER ONLINE TABLE t ADD (a INT DEFAULT (NEXT VALUE FOR s), b INT), DISABLE KEYS, RENAME t2",
                "ALTER TABLE t ADD COLUMN a INT, ADD COLUMN b INT, RENAME TO t2",
            ),
            ("ALTER TABLE t ADD SYSTEM VERSIONING", "ALTER TABLE t ADD COLUMN row_start TIMESTAMP(6) NOT NULL, ADD COLUMN row_end TIMESTAMP(6) NOT NULL"),
            ("ALTER TABLE t MODIFY IF EXISTS a INT DEFAULT 1, ORDER BY a", "ALTER TABLE t MODIFY COLUMN a INT"),
            ("CREATE UNIQUE INDEX i USING HASH ON t (a) COMMENT 'x'", "CREATE UNIQUE INDEX i ON t (a)"),
            ("GRANT ALL ON *.* TO u", "GRANT ALL ON *.* TO u"),
            ("CREATE TABLE", "CREATE TABLE"),
            (
                "ALTER TABLE t ADD COLUMN IF NOT EXISTS a INT AUTO_INCREMENT COMMENT \"c\", DROP KEY IF EXISTS k, \
                 ADD FOREIGN KEY IF NOT EXISTS f (a) REFERENCES p (a), ORDER BY a, b",
                "ALTER TABLE t ADD COLUMN a INT NOT NULL, ADD FOREIGN KEY f (a) REFERENCES p (a)",
            ),
            (
                "CREATE TABLE t (a ENUM('x ', 'y') CHECK (a <> 'y'), j TEXT CHECK (json_valid(j)), \
                 CONSTRAINT c CHECK (a mod 2), INDEX (a))",
                "CREATE TABLE t (a ENUM ('x', 'y'), j TEXT CHECK (json_valid (j)))",
            ),
        ];
        for (sql, want) in cases {
            let squeeze = |s: &str| s.split_whitespace().collect::<String>();
            assert_eq!(squeeze(&prepare(sql)), squeeze(want), "{sql}");
        }
    }
}
