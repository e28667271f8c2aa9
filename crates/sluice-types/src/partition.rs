//! Table partitioning as MariaDB/MySQL define it (`PARTITION BY RANGE|LIST|HASH|KEY …`): the
//! layout of one table version and the pure function that places a row in a partition.
//!
//! Capture keeps a [`Partitioning`] in each partitioned [`TableSchema`](crate::TableSchema)
//! version (parsed from the DDL in the binlog or from `SHOW CREATE TABLE` at the snapshot); the
//! storage sink uses [`Partitioning::partition_of`] for `enable-partition-separator`.
//!
//! How the server places a row (checked against a live MariaDB 10.11):
//! - `RANGE (expr)`: the first partition whose bound is above the value; NULL goes to the first
//!   partition. `LIST (expr)`: the partition listing the value (NULL: the one listing NULL), else
//!   the `DEFAULT` partition. `RANGE|LIST COLUMNS`: the same over tuples, values compared with
//!   the column's collation, NULL below every value and equal to NULL;
//! - `HASH (expr)`: `abs(v % n)` with `v` the expression as a signed 64-bit integer (a BIGINT
//!   UNSIGNED above 2^63-1 wraps to negative; NULL is `i64::MIN`, not 0); `LINEAR HASH`: `v & (V-1)`
//!   with `V` the next power of two ≥ n, then `v & (V/2-1)` when that is ≥ n;
//! - `KEY (cols)`: MariaDB's `nr1/nr2` hash over each column's stored bytes, chained, then `% n`
//!   (or the linear mask). With `ALGORITHM=2` (the default) integers and YEAR are hashed as
//!   latin1_swedish_ci text (`my_hash_sort_simple`: weights through the collation's sort order,
//!   trailing 0x20 bytes dropped), with `ALGORITHM=1` as binary; ENUM/SET the other way round;
//!   dates and times as binary (DATETIME/TIMESTAMP in the MySQL 5.6 format MariaDB writes by
//!   default); text with the column's collation. The fields are hashed in table order, whatever
//!   the order of the KEY list.
//!
//! Invariants:
//! - [`Partitioning::partition_of`] returns the partition the upstream server itself puts the row
//!   in (checked against a live MariaDB in `sluice-capture/tests/partition.rs`), or an error naming
//!   what is not supported; it never guesses (a string comparison whose outcome depends on
//!   collation weights Sluice does not know is an error, not an approximation);
//! - a layout is a pure value: the same clause text parses to the same value on every node.

use crate::event::{ColumnDef, ColumnType, TableSchema, Value};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// How rows are assigned to partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionMethod {
    /// `RANGE (expr)`.
    Range,
    /// `RANGE COLUMNS (c1, …)`.
    RangeColumns,
    /// `LIST (expr)`.
    List,
    /// `LIST COLUMNS (c1, …)`.
    ListColumns,
    /// `[LINEAR] HASH (expr)`.
    Hash,
    /// `[LINEAR] KEY [ALGORITHM=n] (c1, …)` (empty list: the primary key).
    Key,
    /// MariaDB `SYSTEM_TIME` (system-versioned tables).
    SystemTime,
    /// A layout Sluice could not model (see [`Partitioning::unsupported`]); rows cannot be placed.
    Unsupported,
}

/// A literal in a partition bound (`VALUES LESS THAN (…)` / `VALUES IN (…)`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BoundValue {
    Int(i128),
    Text(String),
    Null,
    MaxValue,
}

/// One partition definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDef {
    pub name: String,
    /// `VALUES LESS THAN (v1, …)`: one value per expression/column. Empty for HASH/KEY.
    pub less_than: Vec<BoundValue>,
    /// `VALUES IN ((v1, …), …)`: each entry one tuple (one value for `LIST (expr)`). Empty for
    /// other methods. MariaDB's `DEFAULT` partition of a LIST is marked by `default_list`.
    pub values_in: Vec<Vec<BoundValue>>,
    pub default_list: bool,
}

impl PartitionDef {
    fn named(name: impl Into<String>) -> PartitionDef {
        PartitionDef {
            name: name.into(),
            less_than: Vec::new(),
            values_in: Vec::new(),
            default_list: false,
        }
    }
}

/// The partitioning of one table version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitioning {
    pub method: PartitionMethod,
    /// `LINEAR HASH` / `LINEAR KEY`.
    pub linear: bool,
    /// The partitioning expression as written (RANGE/LIST/HASH), empty otherwise.
    pub expr: String,
    /// The column list (RANGE COLUMNS, LIST COLUMNS, KEY), as written.
    pub columns: Vec<String>,
    /// `ALGORITHM=n` of KEY partitioning (MariaDB/MySQL default 2).
    pub key_algorithm: u8,
    /// Partitions in definition order (HASH/KEY with only `PARTITIONS n`: `p0` … `p{n-1}`).
    pub partitions: Vec<PartitionDef>,
    /// Why this layout cannot be modelled ([`PartitionMethod::Unsupported`]): the clause text
    /// and the reason; [`Partitioning::partition_of`] returns it as its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
}

/// Why a partition clause cannot be parsed or a row cannot be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionError(pub String);

impl std::fmt::Display for PartitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartitionError {}

fn err<T>(msg: impl Into<String>) -> Result<T, PartitionError> {
    Err(PartitionError(msg.into()))
}

/// The suffix of every "this row cannot be placed" error.
const SEPARATOR_HINT: &str =
    "set enable-partition-separator=false to write the table without partition directories";

fn cannot_place<T>(what: impl std::fmt::Display) -> Result<T, PartitionError> {
    err(format!("{what}; {SEPARATOR_HINT}"))
}

// ---------------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// A bare word (keyword or identifier), as written.
    Word(String),
    /// A backticked identifier, unquoted.
    QIdent(String),
    /// A quoted string (`'…'` or `"…"`), unescaped.
    Str(String),
    /// A numeric literal, as written.
    Num(String),
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

impl Token {
    fn is_word(&self, kw: &str) -> bool {
        matches!(&self.tok, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn describe(&self) -> String {
        match &self.tok {
            Tok::Word(w) => w.clone(),
            Tok::QIdent(w) => format!("`{w}`"),
            Tok::Str(s) => format!("'{s}'"),
            Tok::Num(n) => n.clone(),
            Tok::Punct(c) => c.to_string(),
        }
    }
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Tokens of `sql`, skipping whitespace and comments (`/* … */`, `-- `, `#`). With `strict`,
/// an unterminated quote or comment is an error; otherwise lexing stops there (what follows is
/// inside the quote, so it holds no tokens).
fn lex(sql: &str, strict: bool) -> Result<Vec<Token>, PartitionError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => i += 1,
            b'/' if b.get(i + 1) == Some(&b'*') => match sql[i + 2..].find("*/") {
                Some(e) => i += e + 4,
                None if strict => return err("unterminated /* comment in partition options"),
                None => break,
            },
            b'-' if b.get(i + 1) == Some(&b'-')
                && b.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) =>
            {
                i = sql[i..].find('\n').map_or(b.len(), |e| i + e + 1);
            }
            b'#' => i = sql[i..].find('\n').map_or(b.len(), |e| i + e + 1),
            b'\'' | b'"' | b'`' => {
                let q = c;
                let mut s = Vec::new();
                let mut j = i + 1;
                let mut closed = false;
                while j < b.len() {
                    let d = b[j];
                    if d == q {
                        if b.get(j + 1) == Some(&q) {
                            s.push(q);
                            j += 2;
                            continue;
                        }
                        closed = true;
                        j += 1;
                        break;
                    }
                    if d == b'\\' && q != b'`' && j + 1 < b.len() {
                        let e = b[j + 1];
                        if matches!(e, b'%' | b'_') {
                            // `\%` and `\_` keep the backslash (LIKE patterns).
                            s.push(b'\\');
                        }
                        s.push(match e {
                            b'n' => b'\n',
                            b't' => b'\t',
                            b'r' => b'\r',
                            b'0' => 0,
                            b'b' => 8,
                            b'Z' => 26,
                            _ => e,
                        });
                        j += 2;
                        continue;
                    }
                    s.push(d);
                    j += 1;
                }
                if !closed {
                    if strict {
                        return err(format!(
                            "unterminated {} in partition options",
                            if q == b'`' { "backtick" } else { "quote" }
                        ));
                    }
                    break;
                }
                let text = String::from_utf8_lossy(&s).into_owned();
                let tok = if q == b'`' {
                    Tok::QIdent(text)
                } else {
                    Tok::Str(text)
                };
                out.push(Token { tok, start, end: j });
                i = j;
            }
            b'0'..=b'9' => {
                let mut j = i;
                if c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
                    j += 2;
                    while j < b.len() && b[j].is_ascii_hexdigit() {
                        j += 1;
                    }
                } else {
                    while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                        j += 1;
                    }
                    if matches!(b.get(j), Some(b'e' | b'E'))
                        && b.get(j + 1)
                            .is_some_and(|d| d.is_ascii_digit() || *d == b'+' || *d == b'-')
                    {
                        j += 2;
                        while j < b.len() && b[j].is_ascii_digit() {
                            j += 1;
                        }
                    }
                }
                if j < b.len() && is_ident_byte(b[j]) {
                    // `1abc` is an identifier in MySQL.
                    while j < b.len() && is_ident_byte(b[j]) {
                        j += 1;
                    }
                    out.push(Token {
                        tok: Tok::Word(sql[i..j].to_string()),
                        start,
                        end: j,
                    });
                } else {
                    out.push(Token {
                        tok: Tok::Num(sql[i..j].to_string()),
                        start,
                        end: j,
                    });
                }
                i = j;
            }
            _ if is_ident_byte(c) => {
                let mut j = i;
                while j < b.len() && is_ident_byte(b[j]) {
                    j += 1;
                }
                out.push(Token {
                    tok: Tok::Word(sql[i..j].to_string()),
                    start,
                    end: j,
                });
                i = j;
            }
            _ => {
                // ASCII punctuation (non-ASCII bytes are identifier bytes above).
                out.push(Token {
                    tok: Tok::Punct(c as char),
                    start,
                    end: i + 1,
                });
                i += 1;
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Splitting a CREATE/ALTER TABLE statement
// ---------------------------------------------------------------------------------------------

/// Splits a `CREATE TABLE` or `ALTER TABLE` statement at its top-level partition options
/// (`PARTITION BY …`, or for ALTER one of `ADD|DROP|COALESCE|REORGANIZE|TRUNCATE|EXCHANGE|…
/// PARTITION`, `REMOVE PARTITIONING`): returns the statement without them (trailing comma
/// trimmed) and the partition text, if any. Keywords inside quotes, backticks, comments or
/// parentheses are not partition options.
pub fn split_partition_options(sql: &str) -> (String, Option<String>) {
    let unchanged = || (sql.to_string(), None);
    let Ok(toks) = lex(sql, false) else {
        return unchanged();
    };
    let alter = match toks.first() {
        Some(t) if t.is_word("CREATE") => false,
        Some(t) if t.is_word("ALTER") => true,
        _ => return unchanged(),
    };
    let mut depth = 0usize;
    let mut start = None;
    let mut end = sql.len();
    for (i, t) in toks.iter().enumerate() {
        match &t.tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => depth = depth.saturating_sub(1),
            Tok::Punct(';') if depth == 0 => {
                end = t.start;
                break;
            }
            Tok::Word(w) if depth == 0 => {
                let next = toks.get(i + 1);
                let next_is = |kw: &str| next.is_some_and(|n| n.is_word(kw));
                let w = w.to_ascii_uppercase();
                if start.is_some() {
                    // CREATE … PARTITION BY … [AS] SELECT: the query is not partition text.
                    if !alter
                        && matches!(
                            w.as_str(),
                            "AS" | "SELECT" | "IGNORE" | "REPLACE" | "WITH" | "TABLE"
                        )
                    {
                        end = t.start;
                        break;
                    }
                    continue;
                }
                let found = match w.as_str() {
                    "PARTITION" => next_is("BY"),
                    "SELECT" if !alter => {
                        // CREATE TABLE … SELECT without partition options before the query.
                        break;
                    }
                    "ADD" | "DROP" | "COALESCE" | "REORGANIZE" | "TRUNCATE" | "EXCHANGE"
                    | "ANALYZE" | "CHECK" | "OPTIMIZE" | "REBUILD" | "REPAIR" | "DISCARD"
                    | "IMPORT"
                        if alter =>
                    {
                        next_is("PARTITION")
                    }
                    "REMOVE" if alter => next_is("PARTITIONING"),
                    "CONVERT" if alter => next_is("PARTITION") || next_is("TABLE"),
                    _ => false,
                };
                if found {
                    start = Some(t.start);
                }
            }
            _ => {}
        }
    }
    let Some(start) = start else {
        return unchanged();
    };
    let text = sql[start..end].trim_end().to_string();
    let mut rest = sql[..start].trim_end();
    while let Some(r) = rest.strip_suffix(',') {
        rest = r.trim_end();
    }
    let mut stmt = rest.to_string();
    let tail = sql[end..].trim();
    if !tail.is_empty() && tail != ";" {
        stmt.push(' ');
        stmt.push_str(tail);
    }
    (stmt, Some(text))
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

/// Nesting deeper than this is refused (no stack overflow on hostile input).
const MAX_DEPTH: usize = 64;
/// Expressions with more terms than this are refused (evaluation recurses over the tree).
const MAX_TERMS: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// A partition expression or bound.
#[derive(Clone, Debug, PartialEq)]
enum Expr {
    Col(String),
    Int(i128),
    Str(String),
    Null,
    MaxValue,
    Neg(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
    Extract(String, Box<Expr>),
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    depth: usize,
    terms: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Result<Parser<'a>, PartitionError> {
        Ok(Parser {
            src,
            toks: lex(src, true)?,
            pos: 0,
            depth: 0,
            terms: 0,
        })
    }

    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn peek_at(&self, k: usize) -> Option<&Token> {
        self.toks.get(self.pos + k)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn at_word(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_word(kw))
    }

    fn eat_word(&mut self, kw: &str) -> bool {
        let yes = self.at_word(kw);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn at_punct(&self, c: char) -> bool {
        self.peek().is_some_and(|t| t.is_punct(c))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let yes = self.at_punct(c);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn found(&self) -> String {
        match self.peek() {
            Some(t) => format!("`{}`", t.describe()),
            None => "the end of the clause".to_string(),
        }
    }

    fn expected<T>(&self, what: &str) -> Result<T, PartitionError> {
        err(format!(
            "partition options: expected {what}, found {}",
            self.found()
        ))
    }

    fn expect_word(&mut self, kw: &str) -> Result<(), PartitionError> {
        if self.eat_word(kw) {
            Ok(())
        } else {
            self.expected(kw)
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), PartitionError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.expected(&format!("`{c}`"))
        }
    }

    /// A name: a bare word or a backticked identifier.
    fn ident(&mut self) -> Result<String, PartitionError> {
        match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Word(w)) | Some(Tok::QIdent(w)) => {
                self.pos += 1;
                Ok(w)
            }
            _ => self.expected("a name"),
        }
    }

    fn number(&mut self) -> Result<u64, PartitionError> {
        match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Num(n)) => match n.parse::<u64>() {
                Ok(v) => {
                    self.pos += 1;
                    Ok(v)
                }
                Err(_) => err(format!("partition options: `{n}` is not a count")),
            },
            _ => self.expected("a number"),
        }
    }

    /// At `(`: skips to the matching `)` and returns the text in between.
    fn group_text(&mut self) -> Result<String, PartitionError> {
        let open = match self.peek() {
            Some(t) if t.is_punct('(') => t.end,
            _ => return self.expected("`(`"),
        };
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            let close = t.start;
            match t.tok {
                Tok::Punct('(') => depth += 1,
                Tok::Punct(')') => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos += 1;
                        return Ok(self.src[open..close].trim().to_string());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        err("partition options: unbalanced parentheses")
    }

    /// `( name, … )`, possibly empty.
    fn column_list(&mut self) -> Result<Vec<String>, PartitionError> {
        self.expect_punct('(')?;
        let mut cols = Vec::new();
        if self.eat_punct(')') {
            return Ok(cols);
        }
        loop {
            cols.push(self.ident()?);
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            return Ok(cols);
        }
    }

    fn expr(&mut self, min_prec: u8) -> Result<Expr, PartitionError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err("partition expression nested too deeply");
        }
        let mut lhs = self.unary()?;
        loop {
            let (op, prec) = match self.peek().map(|t| &t.tok) {
                Some(Tok::Punct('+')) => (BinOp::Add, 1),
                Some(Tok::Punct('-')) => (BinOp::Sub, 1),
                Some(Tok::Punct('*')) => (BinOp::Mul, 2),
                Some(Tok::Punct('%')) => (BinOp::Mod, 2),
                Some(Tok::Word(w)) if w.eq_ignore_ascii_case("DIV") => (BinOp::Div, 2),
                Some(Tok::Word(w)) if w.eq_ignore_ascii_case("MOD") => (BinOp::Mod, 2),
                Some(Tok::Punct('/')) => {
                    return err(
                        "partition expression: `/` is not supported (it yields a DECIMAL; the \
                         server accepts only integer partition expressions, use DIV)",
                    )
                }
                _ => break,
            };
            if prec < min_prec {
                break;
            }
            self.pos += 1;
            let rhs = self.expr(prec + 1)?;
            lhs = Expr::Bin(op, Box::new(lhs), Box::new(rhs));
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, PartitionError> {
        if self.eat_punct('-') {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return err("partition expression nested too deeply");
            }
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(match e {
                Expr::Int(v) => Expr::Int(-v),
                e => Expr::Neg(Box::new(e)),
            });
        }
        while self.eat_punct('+') {}
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return err("partition expression has too many terms");
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, PartitionError> {
        let Some(t) = self.peek().cloned() else {
            return self.expected("an expression");
        };
        self.pos += 1;
        match t.tok {
            Tok::Num(n) => parse_int_literal(&n).map(Expr::Int),
            Tok::Str(s) => Ok(Expr::Str(s)),
            Tok::QIdent(c) => self.column_ref(c),
            Tok::Punct('(') => {
                let e = self.expr(0)?;
                self.expect_punct(')')?;
                Ok(e)
            }
            Tok::Word(w) => {
                let upper = w.to_ascii_uppercase();
                let next_str = matches!(self.peek().map(|t| &t.tok), Some(Tok::Str(_)));
                match upper.as_str() {
                    "NULL" => return Ok(Expr::Null),
                    "MAXVALUE" => return Ok(Expr::MaxValue),
                    "TRUE" => return Ok(Expr::Int(1)),
                    "FALSE" => return Ok(Expr::Int(0)),
                    // Charset introducers: _utf8mb4'…', N'…'.
                    _ if next_str && (upper.starts_with('_') || upper == "N") => {
                        return self.primary();
                    }
                    "X" | "B" if next_str => {
                        return err(format!(
                            "partition options: {upper}'…' literals are not supported"
                        ))
                    }
                    _ => {}
                }
                if !self.at_punct('(') {
                    return self.column_ref(w);
                }
                self.pos += 1;
                if upper == "EXTRACT" {
                    let unit = self.ident()?.to_ascii_uppercase();
                    self.expect_word("FROM")?;
                    let arg = self.expr(0)?;
                    self.expect_punct(')')?;
                    return Ok(Expr::Extract(unit, Box::new(arg)));
                }
                let mut args = Vec::new();
                if !self.eat_punct(')') {
                    loop {
                        args.push(self.expr(0)?);
                        if self.eat_punct(',') {
                            continue;
                        }
                        self.expect_punct(')')?;
                        break;
                    }
                }
                Ok(Expr::Call(upper, args))
            }
            Tok::Punct(c) => err(format!(
                "partition options: unexpected `{c}` in an expression"
            )),
        }
    }

    /// A column, possibly qualified (`t.c`, `db.t.c`): the last part names it.
    fn column_ref(&mut self, first: String) -> Result<Expr, PartitionError> {
        let mut name = first;
        while self.at_punct('.') {
            self.pos += 1;
            name = self.ident()?;
        }
        Ok(Expr::Col(name))
    }

    /// Skips partition options (`ENGINE = …`, `COMMENT …`, `(SUBPARTITION …)`) up to the `,`
    /// or `)` that ends a partition definition (or the end: the caller checks what must follow).
    fn skip_options(&mut self) -> Result<(), PartitionError> {
        loop {
            match self.peek().map(|t| &t.tok) {
                None | Some(Tok::Punct(',')) | Some(Tok::Punct(')')) => return Ok(()),
                Some(Tok::Punct('(')) => {
                    self.group_text()?;
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// A constant bound: `MAXVALUE`, NULL, a literal or a constant expression.
    fn bound(&mut self) -> Result<BoundValue, PartitionError> {
        let e = self.expr(0)?;
        const_bound(&e)
    }

    /// `( PARTITION name [VALUES …] [options] [(subpartitions)], … )`.
    fn definitions(
        &mut self,
        method: PartitionMethod,
        ncols: usize,
    ) -> Result<Vec<PartitionDef>, PartitionError> {
        self.expect_punct('(')?;
        let mut defs = Vec::new();
        loop {
            defs.push(self.definition(method, ncols)?);
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            return Ok(defs);
        }
    }

    fn definition(
        &mut self,
        method: PartitionMethod,
        ncols: usize,
    ) -> Result<PartitionDef, PartitionError> {
        self.expect_word("PARTITION")?;
        let mut d = PartitionDef::named(self.ident()?);
        if self.eat_word("VALUES") {
            if self.eat_word("LESS") {
                self.expect_word("THAN")?;
                if !matches!(
                    method,
                    PartitionMethod::Range | PartitionMethod::RangeColumns
                ) {
                    return err(format!(
                        "partition options: VALUES LESS THAN in partition `{}` of a non-RANGE layout",
                        d.name
                    ));
                }
                if self.eat_word("MAXVALUE") {
                    d.less_than = vec![BoundValue::MaxValue; ncols.max(1)];
                } else {
                    self.expect_punct('(')?;
                    loop {
                        d.less_than.push(self.bound()?);
                        if self.eat_punct(',') {
                            continue;
                        }
                        self.expect_punct(')')?;
                        break;
                    }
                }
                let want = if method == PartitionMethod::Range {
                    1
                } else {
                    ncols
                };
                if d.less_than.len() != want {
                    return err(format!(
                        "partition options: partition `{}` has {} bound values, the layout has {want} columns",
                        d.name,
                        d.less_than.len()
                    ));
                }
            } else if self.eat_word("IN") {
                if !matches!(method, PartitionMethod::List | PartitionMethod::ListColumns) {
                    return err(format!(
                        "partition options: VALUES IN in partition `{}` of a non-LIST layout",
                        d.name
                    ));
                }
                self.expect_punct('(')?;
                let tuple = method == PartitionMethod::ListColumns && ncols > 1;
                loop {
                    if tuple {
                        self.expect_punct('(')?;
                        let mut t = Vec::new();
                        loop {
                            t.push(self.bound()?);
                            if self.eat_punct(',') {
                                continue;
                            }
                            self.expect_punct(')')?;
                            break;
                        }
                        if t.len() != ncols {
                            return err(format!(
                                "partition options: a value of partition `{}` has {} columns, the layout has {ncols}",
                                d.name,
                                t.len()
                            ));
                        }
                        d.values_in.push(t);
                    } else {
                        d.values_in.push(vec![self.bound()?]);
                    }
                    if self.eat_punct(',') {
                        continue;
                    }
                    self.expect_punct(')')?;
                    break;
                }
            } else {
                return self.expected("LESS THAN or IN");
            }
        } else if self.eat_word("DEFAULT") {
            if !matches!(method, PartitionMethod::List | PartitionMethod::ListColumns) {
                return err(format!(
                    "partition options: DEFAULT partition `{}` in a non-LIST layout",
                    d.name
                ));
            }
            d.default_list = true;
        } else if self.eat_word("HISTORY") || self.eat_word("CURRENT") {
            // SYSTEM_TIME partitions.
        }
        match method {
            PartitionMethod::Range | PartitionMethod::RangeColumns if d.less_than.is_empty() => {
                return err(format!(
                    "partition options: RANGE partition `{}` has no VALUES LESS THAN",
                    d.name
                ))
            }
            PartitionMethod::List | PartitionMethod::ListColumns
                if d.values_in.is_empty() && !d.default_list =>
            {
                return err(format!(
                    "partition options: LIST partition `{}` has no VALUES IN",
                    d.name
                ))
            }
            _ => {}
        }
        self.skip_options()?;
        Ok(d)
    }
}

fn parse_int_literal(n: &str) -> Result<i128, PartitionError> {
    let parsed = match n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
        Some(hex) => i128::from_str_radix(hex, 16).ok(),
        None => n.parse::<i128>().ok(),
    };
    match parsed {
        Some(v) if (-(1i128 << 64)..(1i128 << 64)).contains(&v) => Ok(v),
        _ => err(format!(
            "partition options: `{n}` is not an integer literal (partition functions and bounds are integers)"
        )),
    }
}

fn const_bound(e: &Expr) -> Result<BoundValue, PartitionError> {
    Ok(match e {
        Expr::MaxValue => BoundValue::MaxValue,
        Expr::Null => BoundValue::Null,
        Expr::Int(v) => BoundValue::Int(*v),
        Expr::Str(s) => BoundValue::Text(s.clone()),
        e => match eval(e, None)? {
            EV::Null => BoundValue::Null,
            EV::Int(v) => BoundValue::Int(v),
            EV::Str(s) => BoundValue::Text(s),
            other => {
                return err(format!(
                    "partition bound evaluates to {}, not an integer or a string",
                    other.kind()
                ))
            }
        },
    })
}

/// Parses `PARTITION BY …` with the tokens of `clause`.
fn parse_clause(clause: &str) -> Result<Partitioning, PartitionError> {
    let mut p = Parser::new(clause)?;
    p.expect_word("PARTITION")?;
    p.expect_word("BY")?;
    let linear = p.eat_word("LINEAR");
    let mut part = Partitioning {
        method: PartitionMethod::Hash,
        linear,
        expr: String::new(),
        columns: Vec::new(),
        key_algorithm: 2,
        partitions: Vec::new(),
        unsupported: None,
    };
    if p.eat_word("HASH") {
        part.expr = p.group_text()?;
        // Refuse now what could never be evaluated (syntax); functions are checked per row.
        Parser::new(&part.expr)?.whole_expr()?;
    } else if p.eat_word("KEY") {
        part.method = PartitionMethod::Key;
        if p.eat_word("ALGORITHM") {
            p.eat_punct('=');
            part.key_algorithm = match p.number()? {
                1 => 1,
                2 => 2,
                n => {
                    return err(format!(
                        "partition options: KEY ALGORITHM={n} is not 1 or 2"
                    ))
                }
            };
        }
        part.columns = p.column_list()?;
    } else if p.at_word("RANGE") || p.at_word("LIST") {
        let range = p.eat_word("RANGE");
        if !range {
            p.expect_word("LIST")?;
        }
        if linear {
            return err("partition options: LINEAR applies to HASH and KEY only");
        }
        if p.eat_word("COLUMNS") {
            part.method = if range {
                PartitionMethod::RangeColumns
            } else {
                PartitionMethod::ListColumns
            };
            part.columns = p.column_list()?;
            if part.columns.is_empty() {
                return err("partition options: COLUMNS partitioning needs at least one column");
            }
        } else {
            part.method = if range {
                PartitionMethod::Range
            } else {
                PartitionMethod::List
            };
            part.expr = p.group_text()?;
            Parser::new(&part.expr)?.whole_expr()?;
        }
    } else if p.eat_word("SYSTEM_TIME") {
        if linear {
            return err("partition options: LINEAR applies to HASH and KEY only");
        }
        part.method = PartitionMethod::SystemTime;
        // [INTERVAL n unit [STARTS ts] | LIMIT n] [AUTO]
        while !p.at_end()
            && !p.at_word("PARTITIONS")
            && !p.at_word("SUBPARTITION")
            && !p.at_punct('(')
        {
            p.pos += 1;
        }
    } else {
        return p.expected("HASH, KEY, RANGE, LIST or SYSTEM_TIME");
    }
    let mut count = None;
    if p.eat_word("PARTITIONS") {
        count = Some(p.number()?);
    }
    if p.eat_word("SUBPARTITION") {
        // Rows are placed at the partition level only: the subpartitioning is skipped.
        p.expect_word("BY")?;
        p.eat_word("LINEAR");
        if p.eat_word("HASH") {
            p.group_text()?;
        } else if p.eat_word("KEY") {
            if p.eat_word("ALGORITHM") {
                p.eat_punct('=');
                p.number()?;
            }
            p.group_text()?;
        } else {
            return p.expected("HASH or KEY after SUBPARTITION BY");
        }
        if p.eat_word("SUBPARTITIONS") {
            p.number()?;
        }
    }
    if p.at_punct('(') {
        part.partitions = p.definitions(part.method, part.columns.len())?;
    } else {
        match part.method {
            PartitionMethod::Hash | PartitionMethod::Key => {
                let n = count.unwrap_or(1);
                part.partitions = default_names(0, n)?;
            }
            PartitionMethod::SystemTime => {
                // MariaDB names history partitions p0, p1, … and the current one pn.
                let n = count.unwrap_or(2).max(2);
                part.partitions = default_names(0, n - 1)?;
                part.partitions.push(PartitionDef::named("pn"));
            }
            _ => return err(
                "partition options: RANGE and LIST partitioning need a partition definition list",
            ),
        }
    }
    p.eat_punct(';');
    if !p.at_end() {
        return p.expected("the end of the partition options");
    }
    if part.partitions.is_empty() {
        return err("partition options: no partitions");
    }
    Ok(part)
}

/// Partitions `p{from}` … `p{from+n-1}` (the names the server gives HASH/KEY partitions).
fn default_names(from: usize, n: u64) -> Result<Vec<PartitionDef>, PartitionError> {
    // The server allows at most 8192 partitions.
    if n == 0 || n > 8192 {
        return err(format!(
            "partition options: {n} partitions (the server allows 1 to 8192)"
        ));
    }
    Ok((0..n as usize)
        .map(|i| PartitionDef::named(format!("p{}", from + i)))
        .collect())
}

impl Parser<'_> {
    /// The whole input as one expression.
    fn whole_expr(&mut self) -> Result<Expr, PartitionError> {
        let e = self.expr(0)?;
        if !self.at_end() {
            return self.expected("the end of the expression");
        }
        Ok(e)
    }
}

// ---------------------------------------------------------------------------------------------
// Expression evaluation (integers, as the server evaluates partition functions)
// ---------------------------------------------------------------------------------------------

/// A date and time of day (a DATE has a zero time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Dt {
    y: i64,
    m: i64,
    d: i64,
    h: i64,
    mi: i64,
    s: i64,
    us: i64,
}

/// A TIME value (hours may exceed 24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TimeV {
    neg: bool,
    h: i64,
    mi: i64,
    s: i64,
    us: i64,
}

/// An evaluated value.
#[derive(Clone, Debug, PartialEq)]
enum EV {
    Null,
    Int(i128),
    Str(String),
    Date(Dt),
    /// A TIMESTAMP column: microseconds since the epoch, UTC.
    Ts(i64),
    Time(TimeV),
}

impl EV {
    fn kind(&self) -> &'static str {
        match self {
            EV::Null => "NULL",
            EV::Int(_) => "an integer",
            EV::Str(_) => "a string",
            EV::Date(_) => "a date",
            EV::Ts(_) => "a timestamp",
            EV::Time(_) => "a time",
        }
    }
}

/// The row an expression is evaluated against.
type Row<'a> = Option<(&'a TableSchema, &'a [Value])>;

fn column_index(schema: &TableSchema, name: &str) -> Result<usize, PartitionError> {
    schema
        .columns
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            PartitionError(format!(
                "partitioning column `{name}` is not a column of {}",
                schema.qualified_name()
            ))
        })
}

fn row_value<'a>(
    schema: &TableSchema,
    row: &'a [Value],
    idx: usize,
) -> Result<&'a Value, PartitionError> {
    if row.len() != schema.columns.len() {
        return err(format!(
            "row of {} has {} values for {} columns",
            schema.qualified_name(),
            row.len(),
            schema.columns.len()
        ));
    }
    row.get(idx).ok_or_else(|| {
        PartitionError(format!(
            "row of {} has no column {idx}",
            schema.qualified_name()
        ))
    })
}

fn column_ev(schema: &TableSchema, row: &[Value], name: &str) -> Result<EV, PartitionError> {
    let idx = column_index(schema, name)?;
    let col = &schema.columns[idx];
    Ok(match row_value(schema, row, idx)? {
        Value::Null => EV::Null,
        Value::Int(v) => EV::Int(*v as i128),
        Value::UInt(v) => EV::Int(*v as i128),
        Value::Year(y) => EV::Int(*y as i128),
        Value::Bit { bits, .. } => EV::Int(*bits as i128),
        v @ (Value::Date { .. } | Value::DateTime { .. }) => match value_dt(v) {
            Some(d) => EV::Date(d),
            None => return cannot_place(format!("column `{}`: not a date", col.name)),
        },
        Value::Timestamp { micros } => EV::Ts(*micros),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => EV::Time(TimeV {
            neg: *negative,
            h: *hours as i64,
            mi: *minutes as i64,
            s: *seconds as i64,
            us: *micros as i64,
        }),
        _ => {
            return cannot_place(format!(
                "column `{}` ({}) in a partition expression is not supported",
                col.name, col.sql_type
            ))
        }
    })
}

/// Evaluates `e` (a partition expression over `row`, or a constant bound when `row` is None).
fn eval(e: &Expr, row: Row<'_>) -> Result<EV, PartitionError> {
    Ok(match e {
        Expr::Int(v) => EV::Int(*v),
        Expr::Str(s) => EV::Str(s.clone()),
        Expr::Null => EV::Null,
        Expr::MaxValue => return err("MAXVALUE inside an expression"),
        Expr::Col(name) => match row {
            Some((schema, values)) => column_ev(schema, values, name)?,
            None => return err(format!("partition bound refers to column `{name}`")),
        },
        Expr::Neg(x) => match int_arg(&eval(x, row)?, "-")? {
            None => EV::Null,
            Some(v) => EV::Int(-v),
        },
        Expr::Bin(op, a, b) => {
            let (a, b) = (
                int_arg(&eval(a, row)?, op_name(*op))?,
                int_arg(&eval(b, row)?, op_name(*op))?,
            );
            let (Some(a), Some(b)) = (a, b) else {
                return Ok(EV::Null);
            };
            let r = match op {
                BinOp::Add => a.checked_add(b),
                BinOp::Sub => a.checked_sub(b),
                BinOp::Mul => a.checked_mul(b),
                // Division by zero is NULL; DIV truncates toward zero, MOD takes the dividend's
                // sign (C semantics, as the server).
                BinOp::Div if b == 0 => return Ok(EV::Null),
                BinOp::Mod if b == 0 => return Ok(EV::Null),
                BinOp::Div => a.checked_div(b),
                BinOp::Mod => a.checked_rem(b),
            };
            match r {
                Some(v) if (-(1i128 << 64)..(1i128 << 64)).contains(&v) => EV::Int(v),
                _ => return cannot_place(
                    "partition expression overflows BIGINT (the server would have refused the row)",
                ),
            }
        }
        Expr::Extract(unit, x) => {
            let v = eval(x, row)?;
            extract(unit, &v)?
        }
        Expr::Call(name, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, row))
                .collect::<Result<Vec<_>, _>>()?;
            call(name, &vals)?
        }
    })
}

fn op_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "DIV",
        BinOp::Mod => "MOD",
    }
}

fn int_arg(v: &EV, what: &str) -> Result<Option<i128>, PartitionError> {
    match v {
        EV::Null => Ok(None),
        EV::Int(i) => Ok(Some(*i)),
        other => cannot_place(format!(
            "`{what}` of {} in a partition expression is not supported",
            other.kind()
        )),
    }
}

/// A date/time argument: DATE/DATETIME values and date strings (in bounds such as
/// `TO_DAYS('2020-01-01')`).
fn date_arg(v: &EV, f: &str) -> Result<Option<Dt>, PartitionError> {
    match v {
        EV::Null => Ok(None),
        EV::Date(d) => Ok(Some(*d)),
        EV::Str(s) => parse_datetime(s).map(Some).ok_or_else(|| {
            PartitionError(format!("{f}('{s}'): not a date/datetime literal Sluice can read"))
        }),
        EV::Ts(_) => cannot_place(format!(
            "{f}() of a TIMESTAMP depends on the session time zone (the server refuses it in partition functions)"
        )),
        other => cannot_place(format!("{f}() of {} is not supported", other.kind())),
    }
}

/// `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` (any punctuation between the parts, as the server accepts).
fn parse_datetime(s: &str) -> Option<Dt> {
    let s = s.trim();
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    let dp: Vec<&str> = date.split(|c: char| !c.is_ascii_digit()).collect();
    if dp.len() != 3 || dp.iter().any(|p| p.is_empty() || p.len() > 4) {
        return None;
    }
    let num = |p: &str| p.parse::<i64>().ok();
    let mut dt = Dt {
        y: num(dp[0])?,
        m: num(dp[1])?,
        d: num(dp[2])?,
        h: 0,
        mi: 0,
        s: 0,
        us: 0,
    };
    if dp[0].len() <= 2 {
        // Two-digit years: 70-99 are 19xx, 00-69 20xx.
        dt.y += if dt.y < 70 { 2000 } else { 1900 };
    }
    if !time.is_empty() {
        let (hms, frac) = match time.find('.') {
            Some(i) => (&time[..i], &time[i + 1..]),
            None => (time, ""),
        };
        let tp: Vec<&str> = hms.split(|c: char| !c.is_ascii_digit()).collect();
        if tp.len() != 3 || tp.iter().any(|p| p.is_empty() || p.len() > 2) {
            return None;
        }
        dt.h = num(tp[0])?;
        dt.mi = num(tp[1])?;
        dt.s = num(tp[2])?;
        if !frac.is_empty() {
            if !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let digits: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
            dt.us = num(&digits)?;
        }
    }
    let valid = (0..=9999).contains(&dt.y)
        && (0..=12).contains(&dt.m)
        && (0..=31).contains(&dt.d)
        && (0..=23).contains(&dt.h)
        && (0..=59).contains(&dt.mi)
        && (0..=59).contains(&dt.s);
    valid.then_some(dt)
}

/// MySQL's `calc_daynr`: days since year 0 (TO_DAYS).
fn daynr(y: i64, m: i64, d: i64) -> i64 {
    if y == 0 && m == 0 {
        return 0;
    }
    let mut y = y;
    let mut delsum = 365 * y + 31 * (m - 1) + d;
    if m <= 2 {
        y -= 1;
    } else {
        delsum -= (m * 4 + 23) / 10;
    }
    let temp = ((y / 100 + 1) * 3) / 4;
    delsum + y / 4 - temp
}

fn days_in_year(y: i64) -> i64 {
    if (y & 3) == 0 && (y % 100 != 0 || (y % 400 == 0 && y != 0)) {
        366
    } else {
        365
    }
}

/// MySQL's `calc_weekday`: 0 = Monday (or Sunday when `sunday_first`).
fn weekday(daynr: i64, sunday_first: bool) -> i64 {
    (daynr + 5 + i64::from(sunday_first)).rem_euclid(7)
}

/// MySQL's `calc_week` (the flags of `WEEK()`/`YEARWEEK()` modes): (week, year).
fn calc_week(dt: &Dt, monday_first: bool, mut week_year: bool, first_weekday: bool) -> (i64, i64) {
    let day = daynr(dt.y, dt.m, dt.d);
    let mut first = daynr(dt.y, 1, 1);
    let mut wd = weekday(first, !monday_first);
    let mut year = dt.y;
    if dt.m == 1 && dt.d <= 7 - wd {
        if !week_year && ((first_weekday && wd != 0) || (!first_weekday && wd >= 4)) {
            return (0, year);
        }
        week_year = true;
        year -= 1;
        let days = days_in_year(year);
        first -= days;
        wd = (wd + 53 * 7 - days) % 7;
    }
    let days = if (first_weekday && wd != 0) || (!first_weekday && wd >= 4) {
        day - (first + (7 - wd))
    } else {
        day - (first - wd)
    };
    if week_year && days >= 52 * 7 {
        let wd2 = (wd + days_in_year(year)) % 7;
        if (!first_weekday && wd2 < 4) || (first_weekday && wd2 == 0) {
            return (1, year + 1);
        }
    }
    (days / 7 + 1, year)
}

/// True for a date with a zero month or day (the server's day-number functions return NULL).
fn zero_in_date(d: &Dt) -> bool {
    d.m == 0 || d.d == 0
}

fn one_arg<'v>(name: &str, args: &'v [EV]) -> Result<&'v EV, PartitionError> {
    match args {
        [a] => Ok(a),
        _ => err(format!(
            "{name}() takes one argument here, got {}",
            args.len()
        )),
    }
}

fn call(name: &str, args: &[EV]) -> Result<EV, PartitionError> {
    let date1 = |f: &str| -> Result<Option<Dt>, PartitionError> { date_arg(one_arg(f, args)?, f) };
    let int = |v: i64| EV::Int(v as i128);
    Ok(match name {
        "YEAR" => date1(name)?.map_or(EV::Null, |d| int(d.y)),
        "MONTH" => date1(name)?.map_or(EV::Null, |d| int(d.m)),
        "DAY" | "DAYOFMONTH" => date1(name)?.map_or(EV::Null, |d| int(d.d)),
        "QUARTER" => date1(name)?.map_or(EV::Null, |d| int((d.m + 2) / 3)),
        "TO_DAYS" => match date1(name)? {
            Some(d) if !zero_in_date(&d) => int(daynr(d.y, d.m, d.d)),
            _ => EV::Null,
        },
        "TO_SECONDS" => match date1(name)? {
            Some(d) if !zero_in_date(&d) => int(daynr(d.y, d.m, d.d) * 86400 + d.h * 3600 + d.mi * 60 + d.s),
            _ => EV::Null,
        },
        "DAYOFYEAR" => match date1(name)? {
            Some(d) if !zero_in_date(&d) => int(daynr(d.y, d.m, d.d) - daynr(d.y, 1, 1) + 1),
            _ => EV::Null,
        },
        "DAYOFWEEK" => match date1(name)? {
            Some(d) if !zero_in_date(&d) => int(weekday(daynr(d.y, d.m, d.d), true) + 1),
            _ => EV::Null,
        },
        "WEEKDAY" => match date1(name)? {
            Some(d) if !zero_in_date(&d) => int(weekday(daynr(d.y, d.m, d.d), false)),
            _ => EV::Null,
        },
        "YEARWEEK" => {
            if args.len() != 1 {
                return cannot_place("YEARWEEK() with a mode argument is not supported");
            }
            match date1(name)? {
                Some(d) if !zero_in_date(&d) => {
                    // Mode 0: Sunday first, weeks 1-53 of the week's own year.
                    let (week, year) = calc_week(&d, false, true, true);
                    int(year * 100 + week)
                }
                _ => EV::Null,
            }
        }
        "DATEDIFF" => {
            let [a, b] = args else {
                return err(format!("DATEDIFF() takes two arguments, got {}", args.len()));
            };
            match (date_arg(a, name)?, date_arg(b, name)?) {
                (Some(a), Some(b)) if !zero_in_date(&a) && !zero_in_date(&b) => {
                    int(daynr(a.y, a.m, a.d) - daynr(b.y, b.m, b.d))
                }
                _ => EV::Null,
            }
        }
        "HOUR" | "MINUTE" | "SECOND" | "MICROSECOND" | "TIME_TO_SEC" => {
            let a = one_arg(name, args)?;
            let (neg, h, mi, s, us) = match a {
                EV::Null => return Ok(EV::Null),
                EV::Time(t) => (t.neg, t.h, t.mi, t.s, t.us),
                other => match date_arg(other, name)? {
                    Some(d) => (false, d.h, d.mi, d.s, d.us),
                    None => return Ok(EV::Null),
                },
            };
            match name {
                "HOUR" => int(h),
                "MINUTE" => int(mi),
                "SECOND" => int(s),
                "MICROSECOND" => int(us),
                _ => {
                    // The integer value of a fractional TIME_TO_SEC is its floor (checked:
                    // '-10:00:01.4' → -36002, '10:00:01.6' → 36001).
                    let secs = h * 3600 + mi * 60 + s;
                    int(match (neg, us) {
                        (false, _) => secs,
                        (true, 0) => -secs,
                        (true, _) => -secs - 1,
                    })
                }
            }
        }
        "UNIX_TIMESTAMP" => match one_arg(name, args)? {
            EV::Null => EV::Null,
            // The integer value of UNIX_TIMESTAMP(ts) drops the fraction (checked: 8.6 s → 8).
            EV::Ts(us) => int(us.div_euclid(1_000_000)),
            other => {
                return cannot_place(format!(
                    "UNIX_TIMESTAMP() of {} depends on the session time zone (only a TIMESTAMP column is supported)",
                    other.kind()
                ))
            }
        },
        "ABS" => match int_arg(one_arg(name, args)?, name)? {
            None => EV::Null,
            Some(v) => EV::Int(v.abs()),
        },
        "CEILING" | "CEIL" | "FLOOR" => match int_arg(one_arg(name, args)?, name)? {
            None => EV::Null,
            Some(v) => EV::Int(v),
        },
        "MOD" => {
            let [a, b] = args else {
                return err(format!("MOD() takes two arguments, got {}", args.len()));
            };
            match (int_arg(a, name)?, int_arg(b, name)?) {
                (Some(_), Some(0)) => EV::Null,
                (Some(a), Some(b)) => EV::Int(a % b),
                _ => EV::Null,
            }
        }
        _ => {
            return cannot_place(format!(
                "function {name}() in a partition expression is not supported by Sluice"
            ))
        }
    })
}

fn extract(unit: &str, v: &EV) -> Result<EV, PartitionError> {
    let d = match v {
        EV::Null => return Ok(EV::Null),
        EV::Time(_) => {
            return cannot_place(
                "EXTRACT(… FROM a TIME) in a partition expression is not supported by Sluice",
            )
        }
        other => match date_arg(other, "EXTRACT")? {
            Some(d) => d,
            None => return Ok(EV::Null),
        },
    };
    let r = match unit {
        "YEAR" => d.y,
        "QUARTER" => (d.m + 2) / 3,
        "MONTH" => d.m,
        "DAY" => d.d,
        "HOUR" => d.h,
        "MINUTE" => d.mi,
        "SECOND" => d.s,
        "MICROSECOND" => d.us,
        "YEAR_MONTH" => d.y * 100 + d.m,
        "DAY_HOUR" => d.d * 100 + d.h,
        "DAY_MINUTE" => (d.d * 100 + d.h) * 100 + d.mi,
        "DAY_SECOND" => ((d.d * 100 + d.h) * 100 + d.mi) * 100 + d.s,
        "HOUR_MINUTE" => d.h * 100 + d.mi,
        "HOUR_SECOND" => (d.h * 100 + d.mi) * 100 + d.s,
        "MINUTE_SECOND" => d.mi * 100 + d.s,
        _ => {
            return cannot_place(format!(
                "EXTRACT({unit} FROM …) in a partition expression is not supported by Sluice"
            ))
        }
    };
    Ok(EV::Int(r as i128))
}

// ---------------------------------------------------------------------------------------------
// Collations (COLUMNS partitioning compares strings as the column's collation does)
// ---------------------------------------------------------------------------------------------

/// MariaDB latin1 bytes 0x80-0x9F as Unicode (cp1252, with the five undefined bytes mapped to
/// the C1 controls), as the server converts them.
const LATIN1_80_9F: [u16; 32] = [
    0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039,
    0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
    0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
];

/// The sort order of latin1_swedish_ci (byte → weight), as the server reports it with
/// `WEIGHT_STRING`.
const LATIN1_SWEDISH_CI: [u8; 256] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F,
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F,
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x3B, 0x3C, 0x3D, 0x3E, 0x3F,
    0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F,
    0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x5B, 0x5C, 0x5D, 0x5E, 0x5F,
    0x60, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F,
    0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x7B, 0x7C, 0x7D, 0x7E, 0x7F,
    0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F,
    0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F,
    0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF,
    0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBD, 0xBE, 0xBF,
    0x41, 0x41, 0x41, 0x41, 0x5C, 0x5B, 0x5C, 0x43, 0x45, 0x45, 0x45, 0x45, 0x49, 0x49, 0x49, 0x49,
    0x44, 0x4E, 0x4F, 0x4F, 0x4F, 0x4F, 0x5D, 0xD7, 0xD8, 0x55, 0x55, 0x55, 0x59, 0x59, 0xDE, 0xDF,
    0x41, 0x41, 0x41, 0x41, 0x5C, 0x5B, 0x5C, 0x43, 0x45, 0x45, 0x45, 0x45, 0x49, 0x49, 0x49, 0x49,
    0x44, 0x4E, 0x4F, 0x4F, 0x4F, 0x4F, 0x5D, 0xF7, 0xD8, 0x55, 0x55, 0x55, 0x59, 0x59, 0xDE, 0xFF,
];

/// utf8mb4_general_ci weights of U+0080…U+017F (Latin-1 Supplement and Latin Extended-A), as
/// the server reports them with `WEIGHT_STRING`; below U+0080 the weight is the ASCII upper case.
const GENERAL_CI_80_17F: [u16; 256] = [
    0x0080, 0x0081, 0x0082, 0x0083, 0x0084, 0x0085, 0x0086, 0x0087, 0x0088, 0x0089, 0x008A, 0x008B,
    0x008C, 0x008D, 0x008E, 0x008F, 0x0090, 0x0091, 0x0092, 0x0093, 0x0094, 0x0095, 0x0096, 0x0097,
    0x0098, 0x0099, 0x009A, 0x009B, 0x009C, 0x009D, 0x009E, 0x009F, 0x00A0, 0x00A1, 0x00A2, 0x00A3,
    0x00A4, 0x00A5, 0x00A6, 0x00A7, 0x00A8, 0x00A9, 0x00AA, 0x00AB, 0x00AC, 0x00AD, 0x00AE, 0x00AF,
    0x00B0, 0x00B1, 0x00B2, 0x00B3, 0x00B4, 0x039C, 0x00B6, 0x00B7, 0x00B8, 0x00B9, 0x00BA, 0x00BB,
    0x00BC, 0x00BD, 0x00BE, 0x00BF, 0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x00C6, 0x0043,
    0x0045, 0x0045, 0x0045, 0x0045, 0x0049, 0x0049, 0x0049, 0x0049, 0x00D0, 0x004E, 0x004F, 0x004F,
    0x004F, 0x004F, 0x004F, 0x00D7, 0x00D8, 0x0055, 0x0055, 0x0055, 0x0055, 0x0059, 0x00DE, 0x0053,
    0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x00C6, 0x0043, 0x0045, 0x0045, 0x0045, 0x0045,
    0x0049, 0x0049, 0x0049, 0x0049, 0x00D0, 0x004E, 0x004F, 0x004F, 0x004F, 0x004F, 0x004F, 0x00F7,
    0x00D8, 0x0055, 0x0055, 0x0055, 0x0055, 0x0059, 0x00DE, 0x0059, 0x0041, 0x0041, 0x0041, 0x0041,
    0x0041, 0x0041, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0044, 0x0044,
    0x0110, 0x0110, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045,
    0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0048, 0x0048, 0x0126, 0x0126,
    0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0132, 0x0132,
    0x004A, 0x004A, 0x004B, 0x004B, 0x0138, 0x004C, 0x004C, 0x004C, 0x004C, 0x004C, 0x004C, 0x013F,
    0x013F, 0x0141, 0x0141, 0x004E, 0x004E, 0x004E, 0x004E, 0x004E, 0x004E, 0x0149, 0x014A, 0x014A,
    0x004F, 0x004F, 0x004F, 0x004F, 0x004F, 0x004F, 0x0152, 0x0152, 0x0052, 0x0052, 0x0052, 0x0052,
    0x0052, 0x0052, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0054, 0x0054,
    0x0054, 0x0054, 0x0166, 0x0166, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055,
    0x0055, 0x0055, 0x0055, 0x0055, 0x0057, 0x0057, 0x0059, 0x0059, 0x0059, 0x005A, 0x005A, 0x005A,
    0x005A, 0x005A, 0x005A, 0x0053,
];

/// The latin1 byte of a character (MariaDB's latin1 is cp1252 in 0x80-0x9F).
fn latin1_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 0x80 || (0xA0..=0xFF).contains(&u) {
        return Some(u as u8);
    }
    LATIN1_80_9F
        .iter()
        .position(|&x| u32::from(x) == u)
        .map(|i| 0x80 + i as u8)
}

fn latin1_bytes(col: &ColumnDef, s: &str) -> Result<Vec<u8>, PartitionError> {
    s.chars()
        .map(|c| {
            latin1_byte(c).ok_or_else(|| {
                PartitionError(format!(
                    "value of latin1 column `{}` has {c:?}, not a latin1 character",
                    col.name
                ))
            })
        })
        .collect()
}

/// How a column's strings compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coll {
    /// `binary`: bytes, no padding.
    Binary,
    /// `*_bin`: code points (latin1: its bytes); trailing spaces ignored unless NO PAD.
    Bin { latin1: bool, pad: bool },
    /// latin1_swedish_ci.
    Latin1SwedishCi { pad: bool },
    /// `*_general_ci` of the Unicode charsets and ascii.
    GeneralCi { pad: bool },
    /// UCA `_ci` collations without language tailoring (unicode_ci, unicode_520_ci,
    /// uca1400_ai_ci, uca1400_as_ci): known for ASCII letters, digits and space only.
    UcaCi { pad: bool },
    /// Not recorded in the schema: a comparison must come out the same under every collation
    /// the column may have.
    Unknown,
}

impl Coll {
    /// The weight of `c` (None: not known to Sluice).
    fn weight(self, c: char) -> Option<u32> {
        let u = c as u32;
        match self {
            Coll::Binary | Coll::Unknown => None,
            Coll::Bin { latin1: true, .. } => latin1_byte(c).map(u32::from),
            Coll::Bin { latin1: false, .. } => Some(u),
            Coll::Latin1SwedishCi { .. } => {
                latin1_byte(c).map(|b| u32::from(LATIN1_SWEDISH_CI[b as usize]))
            }
            Coll::GeneralCi { .. } => match u {
                0..=0x7F => Some(u32::from((u as u8).to_ascii_uppercase())),
                0x80..=0x17F => Some(u32::from(GENERAL_CI_80_17F[(u - 0x80) as usize])),
                _ => None,
            },
            Coll::UcaCi { .. } => match c {
                ' ' => Some(1),
                '0'..='9' => Some(10 + (u - '0' as u32)),
                'a'..='z' => Some(100 + (u - 'a' as u32)),
                'A'..='Z' => Some(100 + (u - 'A' as u32)),
                _ => None,
            },
        }
    }

    fn pad(self) -> bool {
        match self {
            Coll::Binary | Coll::Unknown => false,
            Coll::Bin { pad, .. }
            | Coll::Latin1SwedishCi { pad }
            | Coll::GeneralCi { pad }
            | Coll::UcaCi { pad } => pad,
        }
    }
}

/// The collation of a string column, from its schema.
fn collation_of(col: &ColumnDef) -> Result<Coll, PartitionError> {
    if matches!(
        col.ty,
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob
    ) {
        return Ok(Coll::Binary);
    }
    let name = match (&col.collation, &col.charset) {
        (Some(c), _) => c.to_ascii_lowercase(),
        (None, Some(cs)) => match cs.to_ascii_lowercase().as_str() {
            "latin1" => "latin1_swedish_ci".to_string(),
            "ascii" => "ascii_general_ci".to_string(),
            "binary" => "binary".to_string(),
            "utf8" | "utf8mb3" => "utf8mb3_general_ci".to_string(),
            _ => return Ok(Coll::Unknown),
        },
        (None, None) => return Ok(Coll::Unknown),
    };
    if name == "binary" {
        return Ok(Coll::Binary);
    }
    let (cs, rest) = name.split_once('_').unwrap_or((name.as_str(), ""));
    let pad = !rest.contains("nopad");
    let unicode = matches!(
        cs,
        "utf8mb4" | "utf8mb3" | "utf8" | "ucs2" | "utf16" | "utf16le" | "utf32"
    );
    Ok(match rest.replace("nopad_", "").as_str() {
        "bin" => Coll::Bin {
            latin1: cs == "latin1",
            pad,
        },
        "swedish_ci" if cs == "latin1" => Coll::Latin1SwedishCi { pad },
        "general_ci" if unicode || cs == "ascii" => Coll::GeneralCi { pad },
        "unicode_ci" | "unicode_520_ci" | "uca1400_ai_ci" | "uca1400_as_ci" if unicode => {
            Coll::UcaCi { pad }
        }
        _ => {
            return cannot_place(format!(
                "collation {name} of column `{}` is not supported by Sluice for partition bounds",
                col.name
            ))
        }
    })
}

/// Compares two strings by per-character weights, the shorter padded with spaces when the
/// collation pads. Identical characters compare equal whatever their weight; a differing
/// character without a known weight is returned as the error.
fn cmp_weights(a: &str, b: &str, coll: Coll) -> Result<Ordering, char> {
    let pad = coll.pad();
    let (mut ia, mut ib) = (a.chars(), b.chars());
    loop {
        let (ca, cb) = match (ia.next(), ib.next()) {
            (None, None) => return Ok(Ordering::Equal),
            (Some(x), Some(y)) => (x, y),
            (Some(x), None) if pad => (x, ' '),
            (None, Some(y)) if pad => (' ', y),
            (Some(_), None) => return Ok(Ordering::Greater),
            (None, Some(_)) => return Ok(Ordering::Less),
        };
        if ca == cb {
            continue;
        }
        let wa = coll.weight(ca).ok_or(ca)?;
        let wb = coll.weight(cb).ok_or(cb)?;
        match wa.cmp(&wb) {
            Ordering::Equal => {}
            o => return Ok(o),
        }
    }
}

fn cmp_text(col: &ColumnDef, a: &str, b: &str) -> Result<Ordering, PartitionError> {
    let coll = collation_of(col)?;
    let unknown = |c: char, name: &str| {
        cannot_place(format!(
            "comparing {a:?} with partition bound {b:?} of column `{}` depends on the {name} weight of {c:?} (U+{:04X}), which Sluice does not know",
            col.name, c as u32
        ))
    };
    match coll {
        Coll::Binary => Ok(a.as_bytes().cmp(b.as_bytes())),
        Coll::Unknown => {
            // The schema does not say: every collation the column may have must agree.
            let candidates = [
                Coll::Bin {
                    latin1: false,
                    pad: true,
                },
                Coll::GeneralCi { pad: true },
                Coll::UcaCi { pad: true },
            ];
            let mut result = None;
            for c in candidates {
                match cmp_weights(a, b, c) {
                    Ok(o) if result.is_none() || result == Some(o) => result = Some(o),
                    _ => {
                        return cannot_place(format!(
                            "comparing {a:?} with partition bound {b:?} depends on the collation of column `{}`, which the schema does not record",
                            col.name
                        ))
                    }
                }
            }
            Ok(result.unwrap_or(Ordering::Equal))
        }
        c => cmp_weights(a, b, c).or_else(|ch| {
            let name = col.collation.clone().unwrap_or_else(|| format!("{c:?}"));
            unknown(ch, &name)
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Placing rows
// ---------------------------------------------------------------------------------------------

fn is_integer_type(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::TinyInt
            | ColumnType::SmallInt
            | ColumnType::MediumInt
            | ColumnType::Int
            | ColumnType::BigInt
    )
}

fn bound_text(b: &BoundValue) -> String {
    match b {
        BoundValue::Int(v) => v.to_string(),
        BoundValue::Text(s) => s.clone(),
        BoundValue::Null => "NULL".to_string(),
        BoundValue::MaxValue => "MAXVALUE".to_string(),
    }
}

fn value_dt(v: &Value) -> Option<Dt> {
    match v {
        Value::Date { year, month, day } => Some(Dt {
            y: *year as i64,
            m: *month as i64,
            d: *day as i64,
            h: 0,
            mi: 0,
            s: 0,
            us: 0,
        }),
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => Some(Dt {
            y: *year as i64,
            m: *month as i64,
            d: *day as i64,
            h: *hour as i64,
            mi: *minute as i64,
            s: *second as i64,
            us: *micros as i64,
        }),
        _ => None,
    }
}

/// Compares a (non-NULL) column value with a (non-NULL, non-MAXVALUE) bound of COLUMNS
/// partitioning.
fn cmp_column(col: &ColumnDef, v: &Value, b: &BoundValue) -> Result<Ordering, PartitionError> {
    let mismatch = || {
        cannot_place(format!(
            "value {v:?} of column `{}` ({}) cannot be compared with partition bound {}",
            col.name,
            col.sql_type,
            bound_text(b)
        ))
    };
    if is_integer_type(col.ty) {
        let x = match v {
            Value::Int(i) => *i as i128,
            Value::UInt(u) => *u as i128,
            _ => return mismatch(),
        };
        let y = match b {
            BoundValue::Int(i) => *i,
            BoundValue::Text(t) => match t.trim().parse::<i128>() {
                Ok(i) => i,
                Err(_) => return mismatch(),
            },
            _ => return mismatch(),
        };
        return Ok(x.cmp(&y));
    }
    match col.ty {
        ColumnType::Char | ColumnType::VarChar | ColumnType::Text => match v {
            Value::Text(s) => cmp_text(col, s, &bound_text(b)),
            _ => cannot_place(format!(
                "value of column `{}` is not valid text in its charset and cannot be compared with a partition bound",
                col.name
            )),
        },
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob => {
            let x: &[u8] = match v {
                Value::Bytes(x) => x,
                Value::Text(s) => s.as_bytes(),
                _ => return mismatch(),
            };
            let mut y = bound_text(b).into_bytes();
            if col.ty == ColumnType::Binary {
                // The server stores the bound converted to BINARY(n): zero-padded.
                let n = usize::try_from(col.length).unwrap_or(usize::MAX);
                if y.len() < n && n <= 255 {
                    y.resize(n, 0);
                }
            }
            Ok(x.cmp(&y[..]))
        }
        ColumnType::Date | ColumnType::DateTime => {
            let Some(x) = value_dt(v) else {
                return mismatch();
            };
            let Some(mut y) = (match b {
                BoundValue::Text(t) => parse_datetime(t),
                _ => None,
            }) else {
                return mismatch();
            };
            if col.ty == ColumnType::Date {
                (y.h, y.mi, y.s, y.us) = (0, 0, 0, 0);
            }
            Ok(x.cmp(&y))
        }
        _ => cannot_place(format!(
            "COLUMNS partitioning on column `{}` of type {} is not supported by Sluice",
            col.name, col.sql_type
        )),
    }
}

/// The server's `cmp_rec_and_tuple`: MAXVALUE is above every value, NULL below every value
/// and equal to NULL.
fn cmp_tuple(
    schema: &TableSchema,
    row: &[Value],
    cols: &[usize],
    bound: &[BoundValue],
) -> Result<Ordering, PartitionError> {
    if bound.len() != cols.len() {
        return err(format!(
            "partition bound has {} values for {} columns",
            bound.len(),
            cols.len()
        ));
    }
    for (&idx, b) in cols.iter().zip(bound) {
        let v = row_value(schema, row, idx)?;
        let o = match (v, b) {
            (_, BoundValue::MaxValue) => return Ok(Ordering::Less),
            (Value::Null, BoundValue::Null) => Ordering::Equal,
            (Value::Null, _) => return Ok(Ordering::Less),
            (_, BoundValue::Null) => return Ok(Ordering::Greater),
            (v, b) => cmp_column(&schema.columns[idx], v, b)?,
        };
        if o != Ordering::Equal {
            return Ok(o);
        }
    }
    Ok(Ordering::Equal)
}

/// MariaDB's `nr1/nr2` hash state (`MY_HASH_ADD`), as `Hasher` in the server.
struct KeyHasher {
    nr1: u64,
    nr2: u64,
}

impl KeyHasher {
    fn add(&mut self, v: u8) {
        let (nr1, nr2) = (self.nr1, self.nr2);
        self.nr1 ^= ((nr1 & 63).wrapping_add(nr2))
            .wrapping_mul(u64::from(v))
            .wrapping_add(nr1 << 8);
        self.nr2 = nr2.wrapping_add(3);
    }

    fn null(&mut self) {
        self.nr1 ^= (self.nr1 << 1) | 1;
    }

    /// `my_hash_sort_bin`.
    fn bin(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(b);
        }
    }

    /// `my_hash_sort_8bit_bin` / `my_hash_sort_mb_bin`: trailing spaces dropped.
    fn bin_pad(&mut self, bytes: &[u8]) {
        let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        self.bin(&bytes[..end]);
    }

    /// `my_hash_sort_utf8mb4`/`my_hash_sort_utf8mb3` (general_ci): trailing spaces dropped,
    /// then each character's 16-bit weight, low byte first.
    fn general_ci(&mut self, col: &ColumnDef, utf8: &[u8]) -> Result<(), PartitionError> {
        let end = utf8.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        let Ok(text) = std::str::from_utf8(&utf8[..end]) else {
            return cannot_place(format!("value of column `{}` is not valid UTF-8", col.name));
        };
        for c in text.chars() {
            let Some(w) = Coll::GeneralCi { pad: true }.weight(c) else {
                return cannot_place(format!(
                    "KEY partitioning on column `{}`: the general_ci weight of {c:?} (U+{:04X}) is not known to Sluice",
                    col.name, c as u32
                ));
            };
            self.add((w & 0xFF) as u8);
            self.add((w >> 8) as u8);
        }
        Ok(())
    }

    /// `my_hash_sort_simple` with latin1_swedish_ci: trailing bytes weighing as a space
    /// dropped, then the weights hashed.
    fn latin1_simple(&mut self, bytes: &[u8]) {
        let space = LATIN1_SWEDISH_CI[b' ' as usize];
        let end = bytes
            .iter()
            .rposition(|&b| LATIN1_SWEDISH_CI[b as usize] != space)
            .map_or(0, |i| i + 1);
        for &b in &bytes[..end] {
            self.add(LATIN1_SWEDISH_CI[b as usize]);
        }
    }
}

/// The stored bytes of fractional seconds (`decimals` digits) as the server packs them.
fn frac_bytes(micros: u32, decimals: u8) -> Vec<u8> {
    match decimals {
        1 | 2 => vec![(micros / 10_000) as u8],
        3 | 4 => ((micros / 100) as u16).to_be_bytes().to_vec(),
        5 | 6 => micros.to_be_bytes()[1..].to_vec(),
        _ => Vec::new(),
    }
}

/// Adds one column of a KEY partitioning to the hash, as the server's `Field::hash` does.
fn key_hash_column(
    h: &mut KeyHasher,
    col: &ColumnDef,
    v: &Value,
    algorithm: u8,
) -> Result<(), PartitionError> {
    let unsupported = || {
        cannot_place(format!(
            "KEY partitioning on column `{}` of type {} is not supported by Sluice",
            col.name, col.sql_type
        ))
    };
    let bad_value = || {
        cannot_place(format!(
            "value {v:?} of column `{}` ({}) does not fit its type",
            col.name, col.sql_type
        ))
    };
    if *v == Value::Null {
        h.null();
        return Ok(());
    }
    // Numbers (and YEAR) are latin1 text to the server's hash since 5.5 (ALGORITHM=2); binary
    // with ALGORITHM=1.
    let number = |h: &mut KeyHasher, bytes: &[u8]| {
        if algorithm == 1 {
            h.bin(bytes)
        } else {
            h.latin1_simple(bytes)
        }
    };
    match col.ty {
        ColumnType::TinyInt
        | ColumnType::SmallInt
        | ColumnType::MediumInt
        | ColumnType::Int
        | ColumnType::BigInt => {
            let len = match col.ty {
                ColumnType::TinyInt => 1,
                ColumnType::SmallInt => 2,
                ColumnType::MediumInt => 3,
                ColumnType::Int => 4,
                _ => 8,
            };
            let raw = match v {
                Value::Int(i) => *i as u64,
                Value::UInt(u) => *u,
                _ => return bad_value(),
            };
            number(h, &raw.to_le_bytes()[..len]);
        }
        ColumnType::Year => {
            let b = match v {
                Value::Year(0) => 0,
                Value::Year(y) if (1901..=2155).contains(y) => (y - 1900) as u8,
                _ => return bad_value(),
            };
            number(h, &[b]);
        }
        // ENUM and SET: their index/bits, binary (ALGORITHM=1: latin1 text).
        ColumnType::Enum | ColumnType::Set => {
            let (raw, len) = match v {
                Value::Enum { index, .. } => (
                    u64::from(*index),
                    if col.elements.len() < 256 { 1 } else { 2 },
                ),
                Value::Set { bits, .. } => {
                    let n = col.elements.len().div_ceil(8).max(1);
                    (*bits, if n > 4 { 8 } else { n })
                }
                _ => return bad_value(),
            };
            let bytes = &raw.to_le_bytes()[..len];
            if algorithm == 1 {
                h.latin1_simple(bytes)
            } else {
                h.bin(bytes)
            }
        }
        ColumnType::Date => {
            let Value::Date { year, month, day } = v else {
                return bad_value();
            };
            let packed = u32::from(*day) | (u32::from(*month) << 5) | (u32::from(*year) << 9);
            h.bin(&packed.to_le_bytes()[..3]);
        }
        ColumnType::DateTime => {
            // MariaDB's default (MySQL 5.6) DATETIME format: 5 bytes big-endian + fraction.
            let Value::DateTime {
                year,
                month,
                day,
                hour,
                minute,
                second,
                micros,
            } = v
            else {
                return bad_value();
            };
            let ym = u64::from(*year) * 13 + u64::from(*month);
            let ymd = (ym << 5) | u64::from(*day);
            let hms = (u64::from(*hour) << 12) | (u64::from(*minute) << 6) | u64::from(*second);
            let int_part = ((ymd << 17) | hms) + 0x80_0000_0000;
            let mut bytes = int_part.to_be_bytes()[3..].to_vec();
            bytes.extend(frac_bytes(*micros, col.decimals));
            h.bin(&bytes);
        }
        ColumnType::Timestamp => {
            let Value::Timestamp { micros } = v else {
                return bad_value();
            };
            let Ok(secs) = u32::try_from(micros.div_euclid(1_000_000)) else {
                return bad_value();
            };
            let mut bytes = secs.to_be_bytes().to_vec();
            bytes.extend(frac_bytes(
                micros.rem_euclid(1_000_000) as u32,
                col.decimals,
            ));
            h.bin(&bytes);
        }
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob => {
            let mut bytes = match v {
                Value::Bytes(b) => b.clone(),
                Value::Text(s) => s.as_bytes().to_vec(),
                _ => return bad_value(),
            };
            if col.ty == ColumnType::Binary {
                let n = usize::try_from(col.length).unwrap_or(0);
                if bytes.len() < n && n <= 255 {
                    bytes.resize(n, 0);
                }
            }
            h.bin(&bytes);
        }
        ColumnType::Char | ColumnType::VarChar | ColumnType::Text => {
            let coll = match (&col.collation, &col.charset) {
                (Some(c), _) => c.to_ascii_lowercase(),
                (None, Some(cs)) if cs.eq_ignore_ascii_case("latin1") => {
                    "latin1_swedish_ci".to_string()
                }
                (None, Some(cs)) if cs.eq_ignore_ascii_case("ascii") => {
                    "ascii_general_ci".to_string()
                }
                (None, Some(cs)) if cs.eq_ignore_ascii_case("binary") => "binary".to_string(),
                _ => {
                    return cannot_place(format!(
                    "KEY partitioning on column `{}`: its collation is not recorded in the schema",
                    col.name
                ))
                }
            };
            let text: Vec<u8> = match v {
                Value::Text(s) if coll.starts_with("latin1") => latin1_bytes(col, s)?,
                Value::Text(s) => s.as_bytes().to_vec(),
                Value::Bytes(b) if coll == "binary" => b.clone(),
                _ => return bad_value(),
            };
            match coll.as_str() {
                "binary" => h.bin(&text),
                "latin1_swedish_ci" => h.latin1_simple(&text),
                "ascii_general_ci" if text.is_ascii() => h.latin1_simple(&text),
                "latin1_bin" | "ascii_bin" | "utf8mb4_bin" | "utf8mb3_bin" | "utf8_bin" => h.bin_pad(&text),
                "utf8mb4_general_ci" | "utf8mb3_general_ci" | "utf8_general_ci" => {
                    h.general_ci(col, &text)?
                }
                _ => {
                    return cannot_place(format!(
                        "KEY partitioning on column `{}` with collation {coll} is not supported by Sluice",
                        col.name
                    ))
                }
            }
        }
        _ => return unsupported(),
    }
    Ok(())
}

/// LINEAR HASH/KEY: `v & (V-1)` with V the next power of two ≥ n, then `v & (V/2-1)` if ≥ n.
fn linear_part(v: u64, n: usize) -> usize {
    let mut mask: u64 = 1;
    while mask < n as u64 {
        mask <<= 1;
    }
    mask -= 1;
    let mut p = v & mask;
    if p >= n as u64 {
        p = v & (((mask + 1) >> 1).saturating_sub(1));
    }
    p as usize
}

impl Partitioning {
    /// A layout Sluice cannot model (`clause` as written, `reason` why): capture records it and
    /// goes on; [`Partitioning::partition_of`] reports `reason` for every row.
    pub fn unsupported(clause: &str, reason: &str) -> Partitioning {
        Partitioning {
            method: PartitionMethod::Unsupported,
            linear: false,
            expr: clause.trim().to_string(),
            columns: Vec::new(),
            key_algorithm: 2,
            partitions: Vec::new(),
            unsupported: Some(reason.to_string()),
        }
    }

    /// Parses a `PARTITION BY …` clause (as a DDL or `SHOW CREATE TABLE` prints it).
    pub fn parse(clause: &str) -> Result<Partitioning, PartitionError> {
        parse_clause(clause)
    }

    fn column_indexes(&self, schema: &TableSchema) -> Result<Vec<usize>, PartitionError> {
        self.columns
            .iter()
            .map(|c| column_index(schema, c))
            .collect()
    }

    fn expr_value(&self, schema: &TableSchema, row: &[Value]) -> Result<EV, PartitionError> {
        let e = Parser::new(&self.expr)?.whole_expr()?;
        eval(&e, Some((schema, row)))
    }

    /// Index into `partitions` of the partition the upstream stores `row` in (`row` holds one
    /// value per column of `schema`, the table version this layout belongs to; `KEY ()` uses
    /// `schema.key_columns`).
    pub fn partition_of(
        &self,
        schema: &TableSchema,
        row: &[Value],
    ) -> Result<usize, PartitionError> {
        let table = schema.qualified_name();
        let no_partition = |what: String| {
            cannot_place(format!(
                "no partition of {table} holds {what} (the server would have refused this row)"
            ))
        };
        if let Some(why) = &self.unsupported {
            return cannot_place(format!("partitioning of {table} is not supported: {why}"));
        }
        if self.partitions.is_empty() {
            return cannot_place(format!("partitioning of {table} has no partitions"));
        }
        let n = self.partitions.len();
        match self.method {
            PartitionMethod::Range => {
                let v = match self.expr_value(schema, row)? {
                    EV::Null => return Ok(0),
                    EV::Int(v) => v,
                    other => return cannot_place(format!("partition expression of {table} is {}, not an integer", other.kind())),
                };
                for (i, p) in self.partitions.iter().enumerate() {
                    match p.less_than.first() {
                        Some(BoundValue::MaxValue) => return Ok(i),
                        Some(BoundValue::Int(b)) if v < *b => return Ok(i),
                        Some(BoundValue::Int(_)) => {}
                        _ => return err(format!("RANGE partition `{}` of {table} has no integer bound", p.name)),
                    }
                }
                no_partition(format!("value {v}"))
            }
            PartitionMethod::List => {
                let v = match self.expr_value(schema, row)? {
                    EV::Null => BoundValue::Null,
                    EV::Int(v) => BoundValue::Int(v),
                    other => return cannot_place(format!("partition expression of {table} is {}, not an integer", other.kind())),
                };
                if let Some(i) = self.partitions.iter().position(|p| p.values_in.iter().any(|t| t.first() == Some(&v))) {
                    return Ok(i);
                }
                match self.partitions.iter().position(|p| p.default_list) {
                    Some(i) => Ok(i),
                    None => no_partition(format!("value {}", bound_text(&v))),
                }
            }
            PartitionMethod::RangeColumns => {
                let cols = self.column_indexes(schema)?;
                for (i, p) in self.partitions.iter().enumerate() {
                    if cmp_tuple(schema, row, &cols, &p.less_than)? == Ordering::Less {
                        return Ok(i);
                    }
                }
                no_partition("this row's values".to_string())
            }
            PartitionMethod::ListColumns => {
                let cols = self.column_indexes(schema)?;
                for (i, p) in self.partitions.iter().enumerate() {
                    for t in &p.values_in {
                        if cmp_tuple(schema, row, &cols, t)? == Ordering::Equal {
                            return Ok(i);
                        }
                    }
                }
                match self.partitions.iter().position(|p| p.default_list) {
                    Some(i) => Ok(i),
                    None => no_partition("this row's values".to_string()),
                }
            }
            PartitionMethod::Hash => {
                // The server takes the value as a signed 64-bit integer (NULL: LONGLONG_MIN).
                let v: i64 = match self.expr_value(schema, row)? {
                    EV::Null => i64::MIN,
                    EV::Int(v) if (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&v) => v as i64,
                    EV::Int(v) => return cannot_place(format!("HASH value {v} of {table} is out of the BIGINT range")),
                    other => return cannot_place(format!("partition expression of {table} is {}, not an integer", other.kind())),
                };
                Ok(if self.linear {
                    linear_part(v as u64, n)
                } else {
                    (v % n as i64).unsigned_abs() as usize
                })
            }
            PartitionMethod::Key => {
                let mut cols = if self.columns.is_empty() {
                    if schema.key_columns.is_empty() {
                        return cannot_place(format!(
                            "KEY () partitioning of {table}: the schema records no primary key"
                        ));
                    }
                    schema.key_columns.clone()
                } else {
                    self.column_indexes(schema)?
                };
                // The server hashes the fields in table order, whatever the order of the KEY
                // list or of the primary key (checked: KEY (s, a) hashes a, then s).
                cols.sort_unstable();
                cols.dedup();
                let mut h = KeyHasher { nr1: 1, nr2: 4 };
                for idx in cols {
                    let v = row_value(schema, row, idx)?;
                    let col = schema.columns.get(idx).ok_or_else(|| PartitionError(format!("key column {idx} of {table} does not exist")))?;
                    key_hash_column(&mut h, col, v, self.key_algorithm)?;
                }
                let hash = h.nr1 & 0xFFFF_FFFF;
                Ok(if self.linear { linear_part(hash, n) } else { (hash % n as u64) as usize })
            }
            PartitionMethod::SystemTime => cannot_place(format!(
                "{table} is partitioned BY SYSTEM_TIME (system-versioned history), which Sluice does not support"
            )),
            PartitionMethod::Unsupported => cannot_place(format!("partitioning of {table} is not supported")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ALTER TABLE partition operations
// ---------------------------------------------------------------------------------------------

fn position_of(parts: &[PartitionDef], name: &str) -> Option<usize> {
    parts.iter().position(|p| p.name.eq_ignore_ascii_case(name))
}

impl Parser<'_> {
    /// `name, name, …`
    fn name_list(&mut self) -> Result<Vec<String>, PartitionError> {
        let mut names = vec![self.ident()?];
        while self.eat_punct(',') {
            names.push(self.ident()?);
        }
        Ok(names)
    }

    fn finish(&mut self) -> Result<(), PartitionError> {
        self.eat_punct(';');
        if self.at_end() {
            Ok(())
        } else {
            self.expected("the end of the partition operation")
        }
    }
}

impl Partitioning {
    /// The layout after an `ALTER TABLE` partition operation (the text `split_partition_options`
    /// returned for an ALTER): `Ok(None)` when the table is no longer partitioned
    /// (`REMOVE PARTITIONING`); operations that do not change the layout (TRUNCATE, EXCHANGE,
    /// ANALYZE, CHECK, OPTIMIZE, REBUILD, REPAIR, DISCARD, IMPORT PARTITION) return it unchanged.
    /// `REORGANIZE PARTITION` without a partition list leaves a HASH/KEY table with one
    /// partition, as MariaDB does.
    ///
    /// MariaDB leaves rows in a LIST's DEFAULT partition when `ADD PARTITION` or `REORGANIZE`
    /// (of other partitions) lists their value (a server bug: `CHECK TABLE` then reports them
    /// misplaced, `REPAIR` moves them). The layout returned is the server's own definition, so
    /// such rows are placed where the server's partition function puts them, not where the bug
    /// left them.
    pub fn apply_alter(
        current: Option<&Partitioning>,
        op: &str,
    ) -> Result<Option<Partitioning>, PartitionError> {
        let mut p = Parser::new(op)?;
        if p.at_word("PARTITION") && p.peek_at(1).is_some_and(|t| t.is_word("BY")) {
            return Partitioning::parse(op).map(Some);
        }
        if p.eat_word("REMOVE") {
            p.expect_word("PARTITIONING")?;
            p.finish()?;
            return Ok(None);
        }
        let verb = p.ident()?.to_ascii_uppercase();
        let Some(cur) = current else {
            return err(format!(
                "partition operation {verb} on a table Sluice does not know as partitioned"
            ));
        };
        if cur.method == PartitionMethod::Unsupported {
            // The layout stays unknown until a new PARTITION BY.
            return Ok(Some(cur.clone()));
        }
        let mut next = cur.clone();
        let hash_like = matches!(cur.method, PartitionMethod::Hash | PartitionMethod::Key);
        let ncols = cur.columns.len();
        match verb.as_str() {
            "ADD" => {
                p.expect_word("PARTITION")?;
                let if_not_exists = p.eat_word("IF");
                if if_not_exists {
                    p.expect_word("NOT")?;
                    p.expect_word("EXISTS")?;
                }
                let added = if p.eat_word("PARTITIONS") {
                    let n = p.number()?;
                    if !hash_like && cur.method != PartitionMethod::SystemTime {
                        return err(
                            "ADD PARTITION PARTITIONS n applies to HASH/KEY partitioning only",
                        );
                    }
                    default_names(cur.partitions.len(), n)?
                } else {
                    p.definitions(cur.method, ncols)?
                };
                p.finish()?;
                for d in added {
                    if position_of(&next.partitions, &d.name).is_some() {
                        if if_not_exists {
                            continue;
                        }
                        return err(format!(
                            "ADD PARTITION: partition `{}` already exists",
                            d.name
                        ));
                    }
                    if cur.method == PartitionMethod::SystemTime && !next.partitions.is_empty() {
                        // History partitions go before the current one, which stays last.
                        let at = next.partitions.len() - 1;
                        next.partitions.insert(at, d);
                    } else {
                        next.partitions.push(d);
                    }
                }
            }
            "DROP" => {
                p.expect_word("PARTITION")?;
                let if_exists = p.eat_word("IF");
                if if_exists {
                    p.expect_word("EXISTS")?;
                }
                let names = p.name_list()?;
                p.finish()?;
                for name in names {
                    match position_of(&next.partitions, &name) {
                        Some(i) => {
                            next.partitions.remove(i);
                        }
                        None if if_exists => {}
                        None => return err(format!("DROP PARTITION: no partition `{name}`")),
                    }
                }
            }
            "COALESCE" => {
                p.expect_word("PARTITION")?;
                let n = p.number()?;
                p.finish()?;
                if !hash_like {
                    return err("COALESCE PARTITION applies to HASH/KEY partitioning only");
                }
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n >= next.partitions.len() {
                    return err(format!(
                        "COALESCE PARTITION {n} of {} partitions leaves none",
                        next.partitions.len()
                    ));
                }
                let keep = next.partitions.len() - n;
                next.partitions.truncate(keep);
            }
            "REORGANIZE" => {
                p.expect_word("PARTITION")?;
                if p.eat_punct(';') || p.at_end() {
                    // REORGANIZE PARTITION alone rebuilds a HASH/KEY table with the default
                    // partition count: MariaDB 10.11 leaves one partition, `p0` (checked).
                    if !hash_like {
                        return err("REORGANIZE PARTITION without partitions applies to HASH/KEY partitioning only");
                    }
                    next.partitions = default_names(0, 1)?;
                    return Ok(Some(next));
                }
                let names = p.name_list()?;
                p.expect_word("INTO")?;
                let defs = p.definitions(cur.method, ncols)?;
                p.finish()?;
                let mut at = usize::MAX;
                for name in &names {
                    let i = position_of(&next.partitions, name).ok_or_else(|| {
                        PartitionError(format!("REORGANIZE PARTITION: no partition `{name}`"))
                    })?;
                    at = at.min(i);
                    next.partitions.remove(i);
                }
                let at = at.min(next.partitions.len());
                for (k, d) in defs.into_iter().enumerate() {
                    next.partitions.insert(at + k, d);
                }
            }
            "TRUNCATE" | "EXCHANGE" | "ANALYZE" | "CHECK" | "OPTIMIZE" | "REBUILD" | "REPAIR"
            | "DISCARD" | "IMPORT" => {
                p.expect_word("PARTITION")?;
            }
            "CONVERT" => {
                if p.eat_word("PARTITION") {
                    // CONVERT PARTITION p TO TABLE t (MariaDB 10.7+).
                    let name = p.ident()?;
                    p.expect_word("TO")?;
                    p.expect_word("TABLE")?;
                    let i = position_of(&next.partitions, &name).ok_or_else(|| {
                        PartitionError(format!("CONVERT PARTITION: no partition `{name}`"))
                    })?;
                    next.partitions.remove(i);
                } else {
                    // CONVERT TABLE t TO PARTITION p VALUES … (MariaDB 10.7+).
                    p.expect_word("TABLE")?;
                    p.ident()?;
                    while p.eat_punct('.') {
                        p.ident()?;
                    }
                    p.expect_word("TO")?;
                    let d = p.definition(cur.method, ncols)?;
                    p.finish()?;
                    if position_of(&next.partitions, &d.name).is_some() {
                        return err(format!(
                            "CONVERT TABLE: partition `{}` already exists",
                            d.name
                        ));
                    }
                    next.partitions.push(d);
                }
            }
            _ => {
                return err(format!(
                    "partition operation `{}` is not supported by Sluice",
                    op.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
                ))
            }
        }
        if next.partitions.is_empty() {
            return err("partition operation leaves the table without partitions");
        }
        Ok(Some(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TableId;

    fn col(name: &str, ty: ColumnType, sql_type: &str) -> ColumnDef {
        ColumnDef {
            name: name.to_string(),
            ty,
            sql_type: sql_type.to_string(),
            unsigned: sql_type.contains("unsigned"),
            nullable: true,
            charset: None,
            collation: None,
            elements: Vec::new(),
            decimals: 0,
            length: 0,
            generated: None,
        }
    }

    fn schema(columns: Vec<ColumnDef>) -> TableSchema {
        TableSchema {
            table_id: TableId(1),
            database: "d".into(),
            name: "t".into(),
            columns,
            key_columns: vec![0],
            unique_keys: Vec::new(),
            version: 0,
            partitioning: None,
        }
    }

    fn p(clause: &str) -> Partitioning {
        match Partitioning::parse(clause) {
            Ok(p) => p,
            Err(e) => panic!("parse {clause:?}: {e}"),
        }
    }

    fn names(p: &Partitioning) -> Vec<&str> {
        p.partitions.iter().map(|d| d.name.as_str()).collect()
    }

    fn split(sql: &str) -> (String, Option<String>) {
        split_partition_options(sql)
    }

    // --- splitting -----------------------------------------------------------------------

    #[test]
    fn split_create_and_alter() {
        let (s, t) =
            split("CREATE TABLE t (id INT) ENGINE=InnoDB\n PARTITION BY HASH (id)\nPARTITIONS 4");
        assert_eq!(s, "CREATE TABLE t (id INT) ENGINE=InnoDB");
        assert_eq!(t.as_deref(), Some("PARTITION BY HASH (id)\nPARTITIONS 4"));
        let (s, t) = split(
            "create table t (a int) partition\n\tby range(a) (partition p0 values less than (1))",
        );
        assert_eq!(s, "create table t (a int)");
        assert!(t.is_some_and(|t| t.starts_with("partition\n\tby range")));
        let (s, t) = split("ALTER TABLE t ENGINE=InnoDB, PARTITION BY KEY() PARTITIONS 2;");
        assert_eq!(s, "ALTER TABLE t ENGINE=InnoDB");
        assert_eq!(t.as_deref(), Some("PARTITION BY KEY() PARTITIONS 2"));
        for op in [
            "ADD PARTITION (PARTITION p3 VALUES LESS THAN (30))",
            "DROP PARTITION p0, p1",
            "COALESCE PARTITION 2",
            "REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))",
            "TRUNCATE PARTITION ALL",
            "EXCHANGE PARTITION p0 WITH TABLE t2",
            "ANALYZE PARTITION p0",
            "CHECK PARTITION p0",
            "OPTIMIZE PARTITION p0",
            "REBUILD PARTITION p0",
            "REPAIR PARTITION p0",
            "REMOVE PARTITIONING",
            "DISCARD PARTITION p0 TABLESPACE",
            "IMPORT PARTITION p0 TABLESPACE",
            "CONVERT PARTITION p0 TO TABLE t0",
            "CONVERT TABLE t0 TO PARTITION p0 VALUES LESS THAN (10)",
        ] {
            let (s, t) = split(&format!("ALTER TABLE `db`.`t` {op}"));
            assert_eq!(s, "ALTER TABLE `db`.`t`", "{op}");
            assert_eq!(t.as_deref(), Some(op));
        }
        // CREATE … SELECT keeps the query.
        let (s, t) =
            split("CREATE TABLE t (a INT) PARTITION BY HASH(a) PARTITIONS 2 SELECT 1 AS a");
        assert_eq!(s, "CREATE TABLE t (a INT) SELECT 1 AS a");
        assert_eq!(t.as_deref(), Some("PARTITION BY HASH(a) PARTITIONS 2"));
    }

    #[test]
    fn split_is_not_fooled() {
        for sql in [
            "CREATE TABLE t (`partition` INT, `by` INT)",
            "CREATE TABLE t (a INT COMMENT 'partition by x') COMMENT='PARTITION BY HASH(a)'",
            "CREATE TABLE t (a INT) COMMENT=\"partition by hash(a)\"",
            "CREATE TABLE t (a INT) /* PARTITION BY HASH(a) */",
            "CREATE TABLE t (a INT) -- PARTITION BY HASH(a)\n ENGINE=InnoDB",
            "CREATE TABLE t (a INT) # PARTITION BY HASH(a)\n",
            "CREATE TABLE t (a INT CHECK (a > 0), CONSTRAINT c CHECK (a < 9))",
            "CREATE TABLE t AS SELECT ROW_NUMBER() OVER (PARTITION BY a) AS n FROM s",
            "ALTER TABLE t ADD COLUMN `partition` INT, DROP COLUMN b",
            "ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0)",
            "ALTER TABLE t COMMENT 'drop partition p0', CONVERT TO CHARACTER SET utf8mb4",
            "ALTER TABLE `partition` ADD COLUMN x INT",
            "ALTER TABLE t ADD COLUMN c INT DEFAULT 'it''s -- partition by'",
            "INSERT INTO t VALUES (1) PARTITION BY",
            "CREATE TABLE t (a INT) COMMENT 'unterminated PARTITION BY HASH(a)",
            "",
        ] {
            let (s, t) = split(sql);
            assert_eq!(t, None, "{sql}");
            assert_eq!(s, sql);
        }
        // A comment before the partition options and inside them.
        let (s, t) = split("CREATE TABLE t (a INT) /* c */ PARTITION /* x */ BY HASH(a)");
        assert_eq!(s, "CREATE TABLE t (a INT) /* c */");
        assert_eq!(t.as_deref(), Some("PARTITION /* x */ BY HASH(a)"));
        assert_eq!(
            p("PARTITION /* x */ BY HASH(a) -- c\n PARTITIONS 3")
                .partitions
                .len(),
            3
        );
    }

    // --- parsing -------------------------------------------------------------------------

    #[test]
    fn parse_show_create_output() {
        let r = p(" PARTITION BY RANGE (`id`)\n(PARTITION `p0` VALUES LESS THAN (10) ENGINE = InnoDB,\n PARTITION `p1` VALUES LESS THAN (20) COMMENT = 'a, (b)' ENGINE = InnoDB,\n PARTITION `p2` VALUES LESS THAN MAXVALUE ENGINE = InnoDB)");
        assert_eq!(r.method, PartitionMethod::Range);
        assert_eq!(r.expr, "`id`");
        assert_eq!(names(&r), ["p0", "p1", "p2"]);
        assert_eq!(r.partitions[1].less_than, [BoundValue::Int(20)]);
        assert_eq!(r.partitions[2].less_than, [BoundValue::MaxValue]);
        let r = p("PARTITION BY RANGE (`a`) (PARTITION p0 VALUES LESS THAN (-5), PARTITION p1 VALUES LESS THAN (MAXVALUE))");
        assert_eq!(r.partitions[0].less_than, [BoundValue::Int(-5)]);
        assert_eq!(r.partitions[1].less_than, [BoundValue::MaxValue]);

        let rc = p(" PARTITION BY RANGE  COLUMNS(`a`,`b`)\n(PARTITION `p0` VALUES LESS THAN (10,'m') ENGINE = InnoDB,\n PARTITION `p1` VALUES LESS THAN (20,MAXVALUE) ENGINE = InnoDB,\n PARTITION `p2` VALUES LESS THAN (MAXVALUE,MAXVALUE) ENGINE = InnoDB)");
        assert_eq!(rc.method, PartitionMethod::RangeColumns);
        assert_eq!(rc.columns, ["a", "b"]);
        assert_eq!(
            rc.partitions[0].less_than,
            [BoundValue::Int(10), BoundValue::Text("m".into())]
        );

        let l = p(" PARTITION BY LIST (`a`)\n(PARTITION `p0` VALUES IN (NULL,1,2) ENGINE = InnoDB,\n PARTITION `p1` VALUES IN (3) ENGINE = InnoDB,\n PARTITION `pd` DEFAULT ENGINE = InnoDB)");
        assert_eq!(
            l.partitions[0].values_in,
            [
                vec![BoundValue::Null],
                vec![BoundValue::Int(1)],
                vec![BoundValue::Int(2)]
            ]
        );
        assert!(l.partitions[2].default_list);

        let lc = p(" PARTITION BY LIST  COLUMNS(`a`,`b`)\n(PARTITION `p0` VALUES IN ((1,'a'),(2,'b')) ENGINE = InnoDB,\n PARTITION `p1` VALUES IN ((NULL,'c')) ENGINE = InnoDB)");
        assert_eq!(
            lc.partitions[1].values_in,
            [vec![BoundValue::Null, BoundValue::Text("c".into())]]
        );
        let lc1 = p("PARTITION BY LIST COLUMNS(s) (PARTITION a VALUES IN ('x', _utf8mb4'y'), PARTITION b VALUES IN (('z')))");
        assert_eq!(
            lc1.partitions[0].values_in,
            [
                vec![BoundValue::Text("x".into())],
                vec![BoundValue::Text("y".into())]
            ]
        );
        assert_eq!(
            lc1.partitions[1].values_in,
            [vec![BoundValue::Text("z".into())]]
        );

        let h = p(" PARTITION BY HASH (`a`)\nPARTITIONS 3");
        assert_eq!(
            (h.method, h.linear, names(&h)),
            (PartitionMethod::Hash, false, vec!["p0", "p1", "p2"])
        );
        let k = p(" PARTITION BY LINEAR KEY ALGORITHM = 1 (`a`)\nPARTITIONS 5");
        assert_eq!(
            (k.method, k.linear, k.key_algorithm, k.columns.clone()),
            (PartitionMethod::Key, true, 1, vec!["a".to_string()])
        );
        assert_eq!(k.partitions.len(), 5);
        let k0 = p(" PARTITION BY KEY ()\nPARTITIONS 4");
        assert!(k0.columns.is_empty());
        assert_eq!(k0.key_algorithm, 2);
        assert_eq!(names(&p("PARTITION BY HASH(a)")), ["p0"]);
        assert_eq!(
            names(&p("PARTITION BY KEY(a) (PARTITION x, PARTITION y)")),
            ["x", "y"]
        );

        // Subpartitions are skipped.
        let s = p(" PARTITION BY RANGE (`a`)\nSUBPARTITION BY KEY (`b`)\n(PARTITION `p0` VALUES LESS THAN (10)\n (SUBPARTITION `s0` ENGINE = InnoDB,\n  SUBPARTITION `s1` ENGINE = InnoDB),\n PARTITION `p1` VALUES LESS THAN MAXVALUE\n (SUBPARTITION `s2` ENGINE = InnoDB,\n  SUBPARTITION `s3` ENGINE = InnoDB))");
        assert_eq!(names(&s), ["p0", "p1"]);
        let s = p("PARTITION BY RANGE (`a`)\nSUBPARTITION BY LINEAR HASH (`b`)\nSUBPARTITIONS 2\n(PARTITION `p0` VALUES LESS THAN (10) ENGINE = InnoDB,\n PARTITION `p1` VALUES LESS THAN MAXVALUE ENGINE = InnoDB)");
        assert_eq!(names(&s), ["p0", "p1"]);
    }

    #[test]
    fn parse_ddl_forms() {
        let r = p("partition by range (to_days(d)) (partition p0 values less than (to_days('2020-01-01')) engine innodb data directory = '/x' comment 'c', partition p1 values less than maxvalue)");
        assert_eq!(r.expr, "to_days(d)");
        assert_eq!(r.partitions[0].less_than, [BoundValue::Int(737790)]);
        let r = p("PARTITION BY RANGE (YEAR(d)) (PARTITION p0 VALUES LESS THAN (1990 + 10), PARTITION p1 VALUES LESS THAN (-(-3000)))");
        assert_eq!(r.partitions[0].less_than, [BoundValue::Int(2000)]);
        assert_eq!(r.partitions[1].less_than, [BoundValue::Int(3000)]);
        let r = p("PARTITION BY RANGE COLUMNS(d) (PARTITION p0 VALUES LESS THAN ('2020-01-01'), PARTITION p1 VALUES LESS THAN (MAXVALUE))");
        assert_eq!(
            r.partitions[0].less_than,
            [BoundValue::Text("2020-01-01".into())]
        );
        let st = p("PARTITION BY SYSTEM_TIME INTERVAL 1 MONTH STARTS '2020-01-01 00:00:00' AUTO PARTITIONS 3");
        assert_eq!(
            (st.method, names(&st)),
            (PartitionMethod::SystemTime, vec!["p0", "p1", "pn"])
        );
        let st = p("PARTITION BY SYSTEM_TIME (PARTITION p0 HISTORY, PARTITION pn CURRENT)");
        assert_eq!(names(&st), ["p0", "pn"]);
        assert_eq!(
            p("PARTITION BY KEY ALGORITHM=2 (a, `b c`) PARTITIONS 2;").columns,
            ["a", "b c"]
        );
    }

    #[test]
    fn parse_errors() {
        for bad in [
            "",
            "PARTITION BY",
            "PARTITION BY FOO(a)",
            "PARTITION BY HASH a",
            "PARTITION BY HASH (a",
            "PARTITION BY HASH (a) PARTITIONS 0",
            "PARTITION BY HASH (a) PARTITIONS x",
            "PARTITION BY RANGE (a)",
            "PARTITION BY LINEAR RANGE (a) (PARTITION p VALUES LESS THAN (1))",
            "PARTITION BY RANGE (a) (PARTITION p VALUES IN (1))",
            "PARTITION BY LIST (a) (PARTITION p VALUES LESS THAN (1))",
            "PARTITION BY RANGE (a) (PARTITION p)",
            "PARTITION BY RANGE COLUMNS(a, b) (PARTITION p VALUES LESS THAN (1))",
            "PARTITION BY LIST COLUMNS(a, b) (PARTITION p VALUES IN ((1)))",
            "PARTITION BY KEY ALGORITHM=3 (a)",
            "PARTITION BY HASH (a / 2)",
            "PARTITION BY HASH (a) PARTITIONS 2 garbage",
            "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN ('x",
            "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (1.5))",
            "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (99999999999999999999999999))",
            "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (b))",
            "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (1)",
        ] {
            match Partitioning::parse(bad) {
                Err(e) => assert!(!e.0.is_empty()),
                Ok(p) => panic!("{bad:?} parsed: {p:?}"),
            }
        }
        // Hostile nesting is an error, not a stack overflow.
        let deep = format!(
            "PARTITION BY HASH ({}a{})",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        assert!(Partitioning::parse(&deep).is_err());
        let neg = format!("PARTITION BY HASH ({}a)", "-".repeat(10_000));
        assert!(Partitioning::parse(&neg).is_err());
        let plus = format!("PARTITION BY HASH ({}a)", "+".repeat(100_000));
        // Unary plus is a no-op: parsed without recursion.
        assert!(Partitioning::parse(&plus).is_ok());
        let long = format!("PARTITION BY HASH (a{})", "+1".repeat(100_000));
        assert!(Partitioning::parse(&long).is_err());
        let bound = format!(
            "PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (1{}))",
            "*1".repeat(100_000)
        );
        assert!(Partitioning::parse(&bound).is_err());
    }

    // --- ALTER ---------------------------------------------------------------------------

    fn alter(cur: &Partitioning, op: &str) -> Partitioning {
        match Partitioning::apply_alter(Some(cur), op) {
            Ok(Some(p)) => p,
            other => panic!("{op}: {other:?}"),
        }
    }

    #[test]
    fn alter_operations() {
        let r = p("PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))");
        let added = alter(&r, "ADD PARTITION (PARTITION p2 VALUES LESS THAN (30), PARTITION p3 VALUES LESS THAN MAXVALUE)");
        assert_eq!(names(&added), ["p0", "p1", "p2", "p3"]);
        assert_eq!(added.partitions[2].less_than, [BoundValue::Int(30)]);
        assert_eq!(names(&alter(&added, "DROP PARTITION p0, P2")), ["p1", "p3"]);
        assert!(Partitioning::apply_alter(Some(&added), "DROP PARTITION nope").is_err());
        assert_eq!(
            names(&alter(&added, "DROP PARTITION IF EXISTS nope, p1")),
            ["p0", "p2", "p3"]
        );
        assert!(Partitioning::apply_alter(
            Some(&added),
            "ADD PARTITION (PARTITION p1 VALUES LESS THAN (40))"
        )
        .is_err());
        assert_eq!(
            alter(
                &added,
                "ADD PARTITION IF NOT EXISTS (PARTITION p1 VALUES LESS THAN (40))"
            ),
            added
        );
        let re = alter(
            &added,
            "REORGANIZE PARTITION p1, p2 INTO (PARTITION a VALUES LESS THAN (15), PARTITION b VALUES LESS THAN (25), PARTITION c VALUES LESS THAN (30))",
        );
        assert_eq!(names(&re), ["p0", "a", "b", "c", "p3"]);
        assert_eq!(re.partitions[2].less_than, [BoundValue::Int(25)]);
        for same in [
            "TRUNCATE PARTITION p0",
            "TRUNCATE PARTITION ALL",
            "EXCHANGE PARTITION p0 WITH TABLE t2 WITHOUT VALIDATION",
            "ANALYZE PARTITION p0, p1",
            "CHECK PARTITION ALL",
            "OPTIMIZE PARTITION p0",
            "REBUILD PARTITION p0",
            "REPAIR PARTITION p0",
            "DISCARD PARTITION p0 TABLESPACE",
            "IMPORT PARTITION p0 TABLESPACE",
        ] {
            assert_eq!(alter(&added, same), added, "{same}");
        }
        assert_eq!(
            names(&alter(&added, "CONVERT PARTITION p0 TO TABLE t0")),
            ["p1", "p2", "p3"]
        );
        let conv = alter(
            &r,
            "CONVERT TABLE db.t9 TO PARTITION p9 VALUES LESS THAN (90)",
        );
        assert_eq!(names(&conv), ["p0", "p1", "p9"]);
        assert_eq!(conv.partitions[2].less_than, [BoundValue::Int(90)]);
        assert_eq!(
            Partitioning::apply_alter(Some(&r), "REMOVE PARTITIONING"),
            Ok(None)
        );
        let h = alter(&r, "PARTITION BY HASH(a) PARTITIONS 3");
        assert_eq!((h.method, h.partitions.len()), (PartitionMethod::Hash, 3));

        // HASH/KEY.
        let k = p("PARTITION BY KEY(a) PARTITIONS 4");
        assert_eq!(
            names(&alter(&k, "ADD PARTITION PARTITIONS 2")),
            ["p0", "p1", "p2", "p3", "p4", "p5"]
        );
        assert_eq!(
            names(&alter(&k, "ADD PARTITION (PARTITION x)")),
            ["p0", "p1", "p2", "p3", "x"]
        );
        assert_eq!(names(&alter(&k, "COALESCE PARTITION 3")), ["p0"]);
        assert!(Partitioning::apply_alter(Some(&k), "COALESCE PARTITION 4").is_err());
        assert!(Partitioning::apply_alter(Some(&r), "COALESCE PARTITION 1").is_err());
        // The server rebuilds HASH/KEY with one partition (MariaDB 10.11).
        assert_eq!(names(&alter(&k, "REORGANIZE PARTITION")), ["p0"]);
        assert!(Partitioning::apply_alter(Some(&r), "REORGANIZE PARTITION").is_err());
        assert!(Partitioning::apply_alter(Some(&r), "ADD PARTITION PARTITIONS 2").is_err());

        // LIST.
        let l = p("PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1, 2))");
        let l2 = alter(
            &l,
            "ADD PARTITION (PARTITION p1 VALUES IN (NULL, 3), PARTITION pd DEFAULT)",
        );
        assert_eq!(
            l2.partitions[1].values_in,
            [vec![BoundValue::Null], vec![BoundValue::Int(3)]]
        );
        assert!(l2.partitions[2].default_list);

        // Not partitioned / unknown operations / unsupported layouts.
        assert!(Partitioning::apply_alter(None, "DROP PARTITION p0").is_err());
        assert!(Partitioning::apply_alter(None, "TRUNCATE PARTITION p0").is_err());
        assert_eq!(
            Partitioning::apply_alter(None, "REMOVE PARTITIONING"),
            Ok(None)
        );
        assert!(Partitioning::apply_alter(None, "PARTITION BY HASH(a)").is_ok_and(|p| p.is_some()));
        assert!(Partitioning::apply_alter(Some(&r), "FROB PARTITION p0").is_err());
        assert!(Partitioning::apply_alter(Some(&r), "").is_err());
        let u = Partitioning::unsupported("PARTITION BY HASH(weird())", "why");
        assert_eq!(alter(&u, "ADD PARTITION PARTITIONS 2"), u);
        assert_eq!(
            alter(&u, "PARTITION BY HASH(a)").method,
            PartitionMethod::Hash
        );
    }

    // --- placing rows --------------------------------------------------------------------

    fn ints() -> TableSchema {
        schema(vec![
            col("a", ColumnType::Int, "int(11)"),
            col("u", ColumnType::BigInt, "bigint(20) unsigned"),
        ])
    }

    fn place(p: &Partitioning, s: &TableSchema, row: Vec<Value>) -> Result<usize, PartitionError> {
        p.partition_of(s, &row)
    }

    #[test]
    fn range_and_list() {
        let s = ints();
        let r = p("PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (-5), PARTITION p1 VALUES LESS THAN (10), PARTITION p2 VALUES LESS THAN (20))");
        let at = |a: Value| place(&r, &s, vec![a, Value::Null]);
        assert_eq!(at(Value::Int(-6)), Ok(0));
        assert_eq!(at(Value::Int(-5)), Ok(1));
        assert_eq!(at(Value::Int(9)), Ok(1));
        assert_eq!(at(Value::Int(10)), Ok(2));
        assert_eq!(at(Value::Null), Ok(0));
        let e = at(Value::Int(20)).expect_err("an error");
        assert!(
            e.0.contains("refused") && e.0.contains("enable-partition-separator=false"),
            "{e}"
        );

        let ru = p("PARTITION BY RANGE (u) (PARTITION p0 VALUES LESS THAN (9223372036854775808), PARTITION p1 VALUES LESS THAN MAXVALUE)");
        assert_eq!(
            place(&ru, &s, vec![Value::Null, Value::UInt(u64::MAX)]),
            Ok(1)
        );
        assert_eq!(
            place(&ru, &s, vec![Value::Null, Value::UInt(1 << 63)]),
            Ok(1)
        );
        assert_eq!(
            place(&ru, &s, vec![Value::Null, Value::UInt((1 << 63) - 1)]),
            Ok(0)
        );

        let l = p("PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1, 2), PARTITION p1 VALUES IN (NULL, -3))");
        let at = |a: Value| place(&l, &s, vec![a, Value::Null]);
        assert_eq!(at(Value::Int(2)), Ok(0));
        assert_eq!(at(Value::Int(-3)), Ok(1));
        assert_eq!(at(Value::Null), Ok(1));
        assert!(at(Value::Int(7)).is_err());
        let ld = p("PARTITION BY LIST (a) (PARTITION p0 VALUES IN (1), PARTITION pd DEFAULT)");
        assert_eq!(place(&ld, &s, vec![Value::Int(7), Value::Null]), Ok(1));
        // NULL without a NULL partition goes to DEFAULT (checked against the server).
        assert_eq!(place(&ld, &s, vec![Value::Null, Value::Null]), Ok(1));
        // Malformed rows are errors, not panics.
        assert!(place(&ld, &s, vec![Value::Int(1)]).is_err());
        assert!(place(&ld, &s, vec![]).is_err());
    }

    #[test]
    fn hash_sign_null_and_linear() {
        let s = ints();
        let h = p("PARTITION BY HASH (a) PARTITIONS 3");
        let at = |a: Value| place(&h, &s, vec![a, Value::Null]);
        assert_eq!(at(Value::Int(-1)), Ok(1));
        assert_eq!(at(Value::Int(-5)), Ok(2));
        assert_eq!(at(Value::Int(7)), Ok(1));
        // NULL is LONGLONG_MIN to the server: -9223372036854775808 % 3 = -2.
        assert_eq!(at(Value::Null), Ok(2));
        let hu = p("PARTITION BY HASH (u) PARTITIONS 3");
        // u64::MAX is -1 as a signed 64-bit value.
        assert_eq!(
            place(&hu, &s, vec![Value::Null, Value::UInt(u64::MAX)]),
            Ok(1)
        );
        let lh = p("PARTITION BY LINEAR HASH (a) PARTITIONS 6");
        let at = |a: i64| place(&lh, &s, vec![Value::Int(a), Value::Null]);
        // V = 8: 5 & 7 = 5; 6 & 7 = 6 ≥ 6 → 6 & 3 = 2; 7 → 3; -1 & 7 = 7 → 3.
        assert_eq!((at(5), at(6), at(7), at(-1)), (Ok(5), Ok(2), Ok(3), Ok(3)));
        assert_eq!(place(&lh, &s, vec![Value::Null, Value::Null]), Ok(0));
        let one = p("PARTITION BY LINEAR HASH (a)");
        assert_eq!(place(&one, &s, vec![Value::Int(12345), Value::Null]), Ok(0));
    }

    #[test]
    fn key_hash_known_values() {
        // Values checked against MariaDB 10.11 (PARTITION BY KEY (a) PARTITIONS 7 / 5).
        let s = ints();
        let k = p("PARTITION BY KEY (a) PARTITIONS 7");
        let alg1 = p("PARTITION BY KEY ALGORITHM=1 (a) PARTITIONS 7");
        let h = |v: i64, alg: u8| {
            let mut h = KeyHasher { nr1: 1, nr2: 4 };
            let c = col("a", ColumnType::Int, "int");
            key_hash_column(&mut h, &c, &Value::Int(v), alg).map(|_| h.nr1 & 0xFFFF_FFFF)
        };
        // 0x20 in the last byte is dropped by latin1 hashing (trailing space), not by binary.
        let (a, b) = (h(0x2000_0000, 2), h(0, 2));
        assert!(a.is_ok() && b.is_ok());
        assert_ne!(h(0x2000_0000, 2), h(0x2000_0000, 1));
        // 'a' and 'A' weigh the same in latin1_swedish_ci: 0x61 and 0x41 hash alike.
        assert_eq!(h(0x61, 2), h(0x41, 2));
        assert_ne!(h(0x61, 1), h(0x41, 1));
        for v in [0i64, 1, -1, 97, 65] {
            assert!(place(&k, &s, vec![Value::Int(v), Value::Null]).is_ok_and(|i| i < 7));
            assert!(place(&alg1, &s, vec![Value::Int(v), Value::Null]).is_ok_and(|i| i < 7));
        }
        // KEY () uses the schema's key; unsupported types are errors.
        let k0 = p("PARTITION BY KEY () PARTITIONS 4");
        assert_eq!(
            place(&k0, &s, vec![Value::Int(5), Value::Null]),
            place(
                &p("PARTITION BY KEY (a) PARTITIONS 4"),
                &s,
                vec![Value::Int(5), Value::Null]
            )
        );
        let f = schema(vec![col("f", ColumnType::Double, "double")]);
        let e = place(
            &p("PARTITION BY KEY (f) PARTITIONS 2"),
            &f,
            vec![Value::Double(1.5)],
        )
        .expect_err("an error");
        assert!(e.0.contains("not supported") && e.0.contains("`f`"), "{e}");
        let mut nokey = ints();
        nokey.key_columns.clear();
        assert!(place(&k0, &nokey, vec![Value::Int(5), Value::Null]).is_err());
    }

    fn date(y: u16, m: u8, d: u8) -> Value {
        Value::Date {
            year: y,
            month: m,
            day: d,
        }
    }

    fn dtv(y: u16, mo: u8, d: u8, h: u8, mi: u8, s: u8, us: u32) -> Value {
        Value::DateTime {
            year: y,
            month: mo,
            day: d,
            hour: h,
            minute: mi,
            second: s,
            micros: us,
        }
    }

    /// Evaluates a partition expression over one row of (d DATE, dt DATETIME(6), ts TIMESTAMP, a INT).
    fn ev(expr: &str, row: Vec<Value>) -> Result<EV, PartitionError> {
        let s = schema(vec![
            col("d", ColumnType::Date, "date"),
            col("dt", ColumnType::DateTime, "datetime(6)"),
            col("ts", ColumnType::Timestamp, "timestamp"),
            col("a", ColumnType::Int, "int"),
        ]);
        let e = Parser::new(expr)?.whole_expr()?;
        eval(&e, Some((&s, &row)))
    }

    fn ev_int(expr: &str, row: Vec<Value>) -> Option<i128> {
        match ev(expr, row) {
            Ok(EV::Int(v)) => Some(v),
            Ok(EV::Null) => None,
            other => panic!("{expr}: {other:?}"),
        }
    }

    #[test]
    fn evaluator() {
        let row = || {
            vec![
                date(2020, 2, 29),
                dtv(2021, 1, 1, 13, 4, 5, 600_000),
                Value::Timestamp { micros: 8_600_000 },
                Value::Int(-7),
            ]
        };
        let cases: &[(&str, Option<i128>)] = &[
            ("YEAR(d)", Some(2020)),
            ("month(`D`)", Some(2)),
            ("DAY(d) + DAYOFMONTH(d)", Some(58)),
            ("TO_DAYS(d)", Some(737849)),
            ("TO_DAYS('2020-01-01')", Some(737790)),
            ("TO_SECONDS(dt)", Some(63_776_725_445)),
            ("UNIX_TIMESTAMP(ts)", Some(8)),
            ("DAYOFYEAR(d)", Some(60)),
            ("DAYOFWEEK(d)", Some(7)),
            ("WEEKDAY(d)", Some(5)),
            ("QUARTER(dt)", Some(1)),
            ("HOUR(dt) * 100 + MINUTE(dt)", Some(1304)),
            ("SECOND(dt)", Some(5)),
            ("MICROSECOND(dt)", Some(600_000)),
            ("EXTRACT(YEAR_MONTH FROM d)", Some(202002)),
            ("EXTRACT(DAY_SECOND FROM dt)", Some(1_130_405)),
            ("YEARWEEK(dt)", Some(202052)),
            ("YEARWEEK('0000-01-01')", Some(1)),
            ("DATEDIFF('2020-01-01', '2019-01-01')", Some(365)),
            ("a DIV 2", Some(-3)),
            ("a MOD 4", Some(-3)),
            ("a % 4", Some(-3)),
            ("MOD(a, 4)", Some(-3)),
            ("ABS(a)", Some(7)),
            ("CEILING(a) + FLOOR(a)", Some(-14)),
            ("-a * 2 - 1", Some(13)),
            ("2 + 3 * 4", Some(14)),
            ("(2 + 3) * 4", Some(20)),
            ("10 - 2 - 3", Some(5)),
            ("a DIV 0", None),
            ("a MOD 0", None),
            ("NULL + 1", None),
            ("TO_DAYS('0000-00-00')", None),
            ("TO_DAYS('2020-00-10')", None),
            ("YEAR('0000-00-00')", Some(0)),
        ];
        for (expr, want) in cases {
            assert_eq!(ev_int(expr, row()), *want, "{expr}");
        }
        let nulls = vec![Value::Null, Value::Null, Value::Null, Value::Null];
        assert_eq!(ev_int("TO_DAYS(d)", nulls.clone()), None);
        assert_eq!(ev_int("UNIX_TIMESTAMP(ts)", nulls), None);
        for bad in [
            "SOUNDEX(d)",
            "YEAR(ts)",
            "UNIX_TIMESTAMP(d)",
            "YEAR(a)",
            "EXTRACT(WEEK FROM d)",
            "nosuch",
            "YEAR('junk')",
            "a + d",
        ] {
            let e = ev(bad, row()).expect_err("an error");
            assert!(!e.0.is_empty(), "{bad}");
        }
        let e = ev("SOUNDEX(d)", row()).expect_err("an error");
        assert!(e.0.contains("SOUNDEX"), "{e}");
        // Big unsigned values keep their value.
        let s = ints();
        let big = [Value::Null, Value::UInt(u64::MAX)];
        let e = Parser::new("u - 1 + a")
            .and_then(|mut p| p.whole_expr())
            .unwrap_or(Expr::Null);
        assert_eq!(
            eval(&e, Some((&s, &[Value::Int(-1), Value::UInt(u64::MAX)]))),
            Ok(EV::Int(u64::MAX as i128 - 2))
        );
        // Beyond BIGINT UNSIGNED the server refuses the row.
        let e = Parser::new("u + 1")
            .and_then(|mut p| p.whole_expr())
            .unwrap_or(Expr::Null);
        assert!(eval(&e, Some((&s, &big))).is_err());
    }

    #[test]
    fn daynr_and_weeks() {
        assert_eq!(daynr(0, 1, 1), 1);
        assert_eq!(daynr(1970, 1, 1), 719528);
        assert_eq!(daynr(9999, 12, 31), 3652424);
        // YEARWEEK around the turn of the year (mode 0).
        let yw = |y, m, d| {
            let (w, yr) = calc_week(
                &Dt {
                    y,
                    m,
                    d,
                    h: 0,
                    mi: 0,
                    s: 0,
                    us: 0,
                },
                false,
                true,
                true,
            );
            yr * 100 + w
        };
        assert_eq!(yw(2021, 1, 1), 202052);
        assert_eq!(yw(2021, 1, 3), 202101);
        assert_eq!(yw(2017, 1, 1), 201701);
        assert_eq!(yw(2019, 12, 31), 201952);
    }

    #[test]
    fn columns_and_collations() {
        let mut name = col("s", ColumnType::VarChar, "varchar(10)");
        name.collation = Some("utf8mb4_general_ci".into());
        let s = schema(vec![col("a", ColumnType::Int, "int"), name]);
        let rc = p("PARTITION BY RANGE COLUMNS(a, s) (PARTITION p0 VALUES LESS THAN (0, 'b'), PARTITION p1 VALUES LESS THAN (10, MAXVALUE), PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE))");
        let at = |a: Value, t: &str| place(&rc, &s, vec![a, Value::Text(t.into())]);
        assert_eq!(at(Value::Int(0), "a"), Ok(0));
        assert_eq!(at(Value::Int(0), "B"), Ok(1));
        assert_eq!(at(Value::Int(0), "b   "), Ok(1));
        assert_eq!(at(Value::Int(0), "Á"), Ok(0));
        assert_eq!(at(Value::Int(-1), "zzz"), Ok(0));
        assert_eq!(at(Value::Null, "zzz"), Ok(0));
        assert_eq!(at(Value::Int(10), ""), Ok(1));
        assert_eq!(at(Value::Int(11), ""), Ok(2));
        assert_eq!(place(&rc, &s, vec![Value::Int(0), Value::Null]), Ok(0));
        // A character whose weight Sluice does not know is an error when it decides.
        assert!(at(Value::Int(0), "€").is_err());

        let weights = |c: Coll, a: &str, b: &str| cmp_weights(a, b, c);
        let ci = Coll::GeneralCi { pad: true };
        assert_eq!(weights(ci, "abc", "ABC "), Ok(Ordering::Equal));
        assert_eq!(weights(ci, "a\t", "a"), Ok(Ordering::Less));
        assert_eq!(weights(ci, "_", "a"), Ok(Ordering::Greater));
        assert_eq!(weights(ci, "straße", "STRASSE"), Ok(Ordering::Less));
        let nopad = Coll::GeneralCi { pad: false };
        assert_eq!(weights(nopad, "a", "a "), Ok(Ordering::Less));
        let bin = Coll::Bin {
            latin1: false,
            pad: true,
        };
        assert_eq!(weights(bin, "B", "a"), Ok(Ordering::Less));
        assert_eq!(weights(bin, "a ", "a"), Ok(Ordering::Equal));
        let uca = Coll::UcaCi { pad: true };
        assert_eq!(weights(uca, "9", "a"), Ok(Ordering::Less));
        assert_eq!(weights(uca, "b", "A"), Ok(Ordering::Greater));
        assert_eq!(weights(uca, "_", "a"), Err('_'));
        let sw = Coll::Latin1SwedishCi { pad: true };
        assert_eq!(weights(sw, "Ä", "\\"), Ok(Ordering::Equal));
        assert_eq!(weights(sw, "é", "E"), Ok(Ordering::Equal));
        // Unknown collation: only comparisons every candidate agrees on.
        let mut unknown = col("s", ColumnType::VarChar, "varchar(10)");
        unknown.charset = Some("utf8mb4".into());
        assert_eq!(cmp_text(&unknown, "abc", "abd"), Ok(Ordering::Less));
        assert!(cmp_text(&unknown, "abc", "ABD").is_err());
        let mut tailored = col("s", ColumnType::VarChar, "varchar(10)");
        tailored.collation = Some("utf8mb4_czech_ci".into());
        assert!(cmp_text(&tailored, "a", "b").is_err());

        let mut dcol = col("d", ColumnType::Date, "date");
        dcol.nullable = false;
        let ds = schema(vec![dcol]);
        let rd = p("PARTITION BY RANGE COLUMNS(d) (PARTITION p0 VALUES LESS THAN ('2020-01-01'), PARTITION p1 VALUES LESS THAN (MAXVALUE))");
        assert_eq!(place(&rd, &ds, vec![date(2019, 12, 31)]), Ok(0));
        assert_eq!(place(&rd, &ds, vec![date(2020, 1, 1)]), Ok(1));

        let lc = p("PARTITION BY LIST COLUMNS(a, s) (PARTITION p0 VALUES IN ((NULL, 'a'), (1, NULL)), PARTITION p1 VALUES IN ((2, 'x')))");
        let at = |a: Value, t: Value| place(&lc, &s, vec![a, t]);
        assert_eq!(at(Value::Null, Value::Text("A".into())), Ok(0));
        assert_eq!(at(Value::Int(1), Value::Null), Ok(0));
        assert_eq!(at(Value::Int(2), Value::Text("X ".into())), Ok(1));
        assert!(at(Value::Int(2), Value::Text("y".into())).is_err());
    }

    #[test]
    fn unsupported_layouts() {
        let s = ints();
        let st = p("PARTITION BY SYSTEM_TIME (PARTITION p0 HISTORY, PARTITION pn CURRENT)");
        let e = place(&st, &s, vec![Value::Int(1), Value::Null]).expect_err("an error");
        assert!(
            e.0.contains("SYSTEM_TIME") && e.0.contains("enable-partition-separator=false"),
            "{e}"
        );
        let u = Partitioning::unsupported("PARTITION BY X", "no idea");
        assert!(place(&u, &s, vec![Value::Int(1), Value::Null])
            .expect_err("an error")
            .0
            .contains("no idea"));
        let f = p("PARTITION BY HASH (SOUNDEX(a)) PARTITIONS 2");
        assert!(place(&f, &s, vec![Value::Int(1), Value::Null])
            .expect_err("an error")
            .0
            .contains("SOUNDEX"));
        let missing = p("PARTITION BY HASH (nosuch) PARTITIONS 2");
        assert!(place(&missing, &s, vec![Value::Int(1), Value::Null]).is_err());
    }

    #[test]
    fn serde_round_trip() {
        let r = p("PARTITION BY RANGE COLUMNS(a, s) (PARTITION p0 VALUES LESS THAN (0, 'b'), PARTITION p1 VALUES LESS THAN (MAXVALUE, MAXVALUE))");
        let _ = format!("{r:?}");
        assert_eq!(r.clone(), r);
    }
}
