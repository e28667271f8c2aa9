//! csv encoding in TiCDC's column layout: `op, table, schema, [commit-ts,] values…`, one row per
//! line ended by `\r\n`. `op` is `I`, `U` or `D`; a delete carries the old values; with
//! `output-old-value` an update is written as a `D` row (old values) then an `I` row (new).
//!
//! Invariants:
//! - strings (op, names, character, temporal, enum/set/json and binary columns) are quoted with
//!   `quote` and an inner quote is doubled; numbers are bare; NULL is the bare `null` string, so a
//!   quoted `\N` is the two-character string, never NULL;
//! - with an empty `quote`, the delimiter, `\r`, `\n` and `\` inside values are backslash-escaped;
//! - binary values are base64 (or hex) text.

use super::{is_binary, value_bytes, value_from_text, value_str, value_text, DecodedRow};
use crate::error::{Result, SinkError};
use crate::uri::{BinaryEncoding, CsvConfig};
use sluice_types::{ColumnType, RowEvent, RowKind, TableSchema, Value};

/// The line terminator (TiCDC's default `terminator`).
pub const TERMINATOR: &str = "\r\n";

fn is_bare(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::TinyInt
            | ColumnType::SmallInt
            | ColumnType::MediumInt
            | ColumnType::Int
            | ColumnType::BigInt
            | ColumnType::Decimal
            | ColumnType::Float
            | ColumnType::Double
            | ColumnType::Bit
            | ColumnType::Year
    )
}

fn push_field(out: &mut String, cfg: &CsvConfig, text: &str, quoted: bool) {
    if quoted && !cfg.quote.is_empty() {
        // Each quote inside is doubled; written in place (the hot path of a csv file). A
        // one-byte quote (the usual `"`) is looked for bytewise, and a field without one (most
        // fields) is copied whole.
        out.push_str(&cfg.quote);
        match cfg.quote.as_bytes() {
            [q] if memchr::memchr(*q, text.as_bytes()).is_none() => out.push_str(text),
            _ => {
                for (i, part) in text.split(cfg.quote.as_str()).enumerate() {
                    if i > 0 {
                        out.push_str(&cfg.quote);
                        out.push_str(&cfg.quote);
                    }
                    out.push_str(part);
                }
            }
        }
        out.push_str(&cfg.quote);
    } else if quoted {
        let mut s = text.replace('\\', "\\\\");
        s = s.replace(&cfg.delimiter, &format!("\\{}", cfg.delimiter));
        s = s.replace('\r', "\\r").replace('\n', "\\n");
        out.push_str(&s);
    } else {
        out.push_str(text);
    }
}

fn push_row(
    out: &mut String,
    cfg: &CsvConfig,
    op: &str,
    schema: &TableSchema,
    commit_ts: u64,
    values: &[Value],
) -> Result<()> {
    if values.len() != schema.columns.len() {
        return Err(SinkError::Codec(format!(
            "{}: row has {} values for {} columns",
            schema.qualified_name(),
            values.len(),
            schema.columns.len()
        )));
    }
    push_field(out, cfg, op, true);
    out.push_str(&cfg.delimiter);
    push_field(out, cfg, &schema.name, true);
    out.push_str(&cfg.delimiter);
    push_field(out, cfg, &schema.database, true);
    if cfg.include_commit_ts {
        out.push_str(&cfg.delimiter);
        super::json::push_int(out, commit_ts);
    }
    for (v, col) in values.iter().zip(&schema.columns) {
        out.push_str(&cfg.delimiter);
        if matches!(v, Value::Null) {
            out.push_str(&cfg.null);
        } else if is_binary(col.ty) {
            let b = value_bytes(v, col).unwrap_or_default();
            let text = match cfg.binary_encoding {
                BinaryEncoding::Base64 => super::base64_encode(&b),
                BinaryEncoding::Hex => super::hex_encode(&b),
            };
            push_field(out, cfg, &text, true);
        } else if let Some(text) = value_str(v) {
            // Text, decimals and JSON as they are (no copy).
            push_field(out, cfg, text, !is_bare(col.ty));
        } else if let (Value::Int(i), true) = (v, is_bare(col.ty)) {
            super::json::push_int(out, *i);
        } else if let (Value::UInt(u), true) = (v, is_bare(col.ty)) {
            super::json::push_int(out, *u);
        } else {
            let text = value_text(v, col).unwrap_or_default();
            push_field(out, cfg, &text, !is_bare(col.ty));
        }
    }
    out.push_str(TERMINATOR);
    Ok(())
}

/// Appends the csv lines of one row change.
pub fn encode_row(
    out: &mut String,
    cfg: &CsvConfig,
    schema: &TableSchema,
    row: &RowEvent,
) -> Result<()> {
    let missing = || {
        SinkError::Codec(format!(
            "{}: {:?} row without its image",
            schema.qualified_name(),
            row.kind
        ))
    };
    match row.kind {
        RowKind::Insert => push_row(
            out,
            cfg,
            "I",
            schema,
            row.commit_ts,
            row.after.as_deref().ok_or_else(missing)?,
        ),
        RowKind::Delete => push_row(
            out,
            cfg,
            "D",
            schema,
            row.commit_ts,
            row.before.as_deref().ok_or_else(missing)?,
        ),
        RowKind::Update => {
            let after = row.after.as_deref().ok_or_else(missing)?;
            if cfg.output_old_value {
                push_row(
                    out,
                    cfg,
                    "D",
                    schema,
                    row.commit_ts,
                    row.before.as_deref().ok_or_else(missing)?,
                )?;
                push_row(out, cfg, "I", schema, row.commit_ts, after)
            } else {
                push_row(out, cfg, "U", schema, row.commit_ts, after)
            }
        }
    }
}

/// One parsed field: its text and whether it was quoted.
#[derive(Debug)]
struct Field {
    text: String,
    quoted: bool,
}

/// Splits a csv file into records of fields.
fn parse_records(data: &str, cfg: &CsvConfig) -> Result<Vec<Vec<Field>>> {
    let mut records = Vec::new();
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut field_started = false;
    let q = cfg.quote.chars().next();
    let delim = cfg.delimiter.as_str();
    let mut rest = data;
    while !rest.is_empty() {
        if !field_started && q.is_some_and(|q| rest.starts_with(q)) {
            // Quoted field: read to the closing quote, "" is an escaped quote.
            let q = q.unwrap_or('"');
            let mut it = rest[q.len_utf8()..].char_indices();
            let mut consumed = None;
            while let Some((i, c)) = it.next() {
                if c == q {
                    let after = &rest[q.len_utf8() + i + q.len_utf8()..];
                    if after.starts_with(q) {
                        cur.push(q);
                        it.next();
                        continue;
                    }
                    consumed = Some(q.len_utf8() + i + q.len_utf8());
                    break;
                }
                cur.push(c);
            }
            let Some(n) = consumed else {
                return Err(SinkError::Codec("csv: unterminated quoted field".into()));
            };
            rest = &rest[n..];
            quoted = true;
            field_started = true;
            continue;
        }
        if !field_started
            && q.is_none()
            && !cfg.null.is_empty()
            && rest.starts_with(cfg.null.as_str())
        {
            // Unquoted mode: the null string is matched before escapes (it may start with '\').
            let after = &rest[cfg.null.len()..];
            if after.is_empty()
                || after.starts_with(delim)
                || after.starts_with('\r')
                || after.starts_with('\n')
            {
                cur.push_str(&cfg.null);
                rest = after;
                field_started = true;
                continue;
            }
        }
        if rest.starts_with(delim) {
            fields.push(Field {
                text: std::mem::take(&mut cur),
                quoted,
            });
            quoted = false;
            field_started = false;
            rest = &rest[delim.len()..];
            continue;
        }
        if rest.starts_with("\r\n") || rest.starts_with('\n') {
            fields.push(Field {
                text: std::mem::take(&mut cur),
                quoted,
            });
            records.push(std::mem::take(&mut fields));
            quoted = false;
            field_started = false;
            rest = &rest[if rest.starts_with("\r\n") { 2 } else { 1 }..];
            continue;
        }
        let mut chars = rest.chars();
        let c = chars.next().unwrap_or_default();
        if c == '\\' && q.is_none() {
            let e = chars
                .next()
                .ok_or_else(|| SinkError::Codec("csv: dangling escape".into()))?;
            match e {
                'r' => cur.push('\r'),
                'n' => cur.push('\n'),
                other => cur.push(other),
            }
            rest = &rest[1 + e.len_utf8()..];
            quoted = true;
        } else {
            cur.push(c);
            rest = &rest[c.len_utf8()..];
        }
        field_started = true;
    }
    if field_started || !fields.is_empty() {
        fields.push(Field { text: cur, quoted });
        records.push(fields);
    }
    Ok(records)
}

/// Decodes a csv data file of `schema`'s table version. The commit-ts column is detected by the
/// field count.
pub fn decode_file(data: &str, cfg: &CsvConfig, schema: &TableSchema) -> Result<Vec<DecodedRow>> {
    let n = schema.columns.len();
    let mut out = Vec::new();
    for rec in parse_records(data, cfg)? {
        let has_ts = match rec.len() {
            l if l == n + 3 => false,
            l if l == n + 4 => true,
            l => {
                return Err(SinkError::Codec(format!(
                    "csv: record with {l} fields for {} columns of {}",
                    n,
                    schema.qualified_name()
                )))
            }
        };
        let commit_ts =
            if has_ts {
                Some(rec[3].text.parse::<u64>().map_err(|_| {
                    SinkError::Codec(format!("csv: bad commit ts {:?}", rec[3].text))
                })?)
            } else {
                None
            };
        let start = if has_ts { 4 } else { 3 };
        let mut values = Vec::with_capacity(n);
        for (f, col) in rec[start..].iter().zip(&schema.columns) {
            let v = if !f.quoted && f.text == cfg.null {
                Value::Null
            } else if is_binary(col.ty) {
                let b = match cfg.binary_encoding {
                    BinaryEncoding::Base64 => super::base64_decode(&f.text)?,
                    BinaryEncoding::Hex => super::hex_decode(&f.text)?,
                };
                value_from_text(col, None, Some(b))?
            } else {
                value_from_text(col, Some(f.text.clone()), None)?
            };
            values.push(v);
        }
        let (kind, before, after) = match rec[0].text.as_str() {
            "I" => (RowKind::Insert, None, Some(values)),
            "U" => (RowKind::Update, None, Some(values)),
            "D" => (RowKind::Delete, Some(values), None),
            other => return Err(SinkError::Codec(format!("csv: unknown op {other:?}"))),
        };
        out.push(DecodedRow {
            kind,
            commit_ts,
            before,
            after,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(cfg: &CsvConfig, text: &str) -> String {
        let mut out = String::new();
        push_field(&mut out, cfg, text, true);
        out
    }

    #[test]
    fn quotes_inside_a_quoted_field_are_doubled() {
        let cfg = CsvConfig::default();
        assert_eq!(field(&cfg, "plain"), "\"plain\"");
        assert_eq!(field(&cfg, ""), "\"\"");
        assert_eq!(field(&cfg, "\""), "\"\"\"\"");
        assert_eq!(field(&cfg, "a\"b\"\"c\""), "\"a\"\"b\"\"\"\"c\"\"\"");
        let two = CsvConfig {
            quote: "''".into(),
            ..CsvConfig::default()
        };
        assert_eq!(field(&two, "x''y'"), "''x''''y'''");
    }
}
