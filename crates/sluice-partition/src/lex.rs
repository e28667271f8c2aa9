//! The lexer of partition clauses and the cut of partition options off a CREATE/ALTER TABLE
//! ([`split_partition_options`]).

use crate::err;
use sluice_types::partition::PartitionError;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
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
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Token {
    pub(crate) fn is_word(&self, kw: &str) -> bool {
        matches!(&self.tok, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }

    pub(crate) fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    pub(crate) fn describe(&self) -> String {
        match &self.tok {
            Tok::Word(w) => w.clone(),
            Tok::QIdent(w) => format!("`{w}`"),
            Tok::Str(s) => format!("'{s}'"),
            Tok::Num(n) => n.clone(),
            Tok::Punct(c) => c.to_string(),
        }
    }
}

pub(crate) fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Tokens of `sql`, skipping whitespace and comments (`/* … */`, `-- `, `#`). With `strict`,
/// an unterminated quote or comment is an error; otherwise lexing stops there (what follows is
/// inside the quote, so it holds no tokens).
pub(crate) fn lex(sql: &str, strict: bool) -> Result<Vec<Token>, PartitionError> {
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
            b'\'' | b'"' | b'`' => match quoted(b, i, strict)? {
                Some((tok, end)) => {
                    out.push(Token { tok, start, end });
                    i = end;
                }
                None => break,
            },
            b'0'..=b'9' => {
                let (tok, end) = number(sql, i);
                out.push(Token { tok, start, end });
                i = end;
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

/// The quoted string or identifier starting at `i` (its quote char) and where it ends; `None`
/// if it is not closed (an error with `strict`). Doubled quotes and backslash escapes (not in
/// backticks) are undone.
fn quoted(b: &[u8], i: usize, strict: bool) -> Result<Option<(Tok, usize)>, PartitionError> {
    let q = b[i];
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
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&s).into_owned();
    let tok = if q == b'`' {
        Tok::QIdent(text)
    } else {
        Tok::Str(text)
    };
    Ok(Some((tok, j)))
}

/// The number starting at `i` (decimal, `0x` hex, with an exponent) and where it ends; digits
/// followed by identifier bytes are an identifier (`1abc`), as in MySQL.
fn number(sql: &str, i: usize) -> (Tok, usize) {
    let b = sql.as_bytes();
    let mut j = i;
    if b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
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
        while j < b.len() && is_ident_byte(b[j]) {
            j += 1;
        }
        return (Tok::Word(sql[i..j].to_string()), j);
    }
    (Tok::Num(sql[i..j].to_string()), j)
}

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
