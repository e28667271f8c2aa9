//! TiCDC's cloud storage layout: every path the storage sink writes and `consume` reads.
//!
//! ```text
//! metadata                                             {"checkpoint-ts": N}
//! meta/schema_<ver>_<sum10>.json                       DDL naming no table version, no default db
//! <db>/meta/schema_<ver>_<sum10>.json                  database-level DDL
//! <db>/<table>/meta/schema_<ver>_<sum10>.json          table schema version (ver = DDL commit ts)
//! <db>/<table>/<ver>[/<part>][/<date>]/CDC<idx>.<ext>  data file (idx zero-padded)
//! <db>/<table>/<ver>[/<part>][/<date>]/meta/CDC.index  last data file name + "\n"
//! with dispatcher ids: CDC_<dispatcher>_<idx>.<ext> and meta/CDC_<dispatcher>.index
//! <db>/<table>/meta/claim_<dispatcher>.json            a fenced dispatcher's span and start ts
//! <part>: with enable-partition-separator, the 0-based position of the row's partition in the
//!         table version's layout (the schema file's SluiceSchema.partitioning names them)
//! ```
//!
//! Invariants: names are pure functions of their inputs; [`parse_data_name`] accepts exactly the
//! names [`data_name`] produces (so temporary files such as `CDC…csv#1` or `CDC…csv.tmp.x` are
//! never taken for data); the checksum of a schema file depends only on the column layout.

use crate::codec::civil_from_days;
use crate::uri::DateSeparator;
use serde::{Deserialize, Serialize};
use sluice_types::{DdlKind, DispatcherId, TableSchema, Ts};

pub const METADATA: &str = "metadata";

/// CRC-32 (IEEE), bitwise: schema checksums are short and rare.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One column as TiCDC's table definition file lists it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ColumnDefinition {
    #[serde(rename = "ColumnName")]
    pub name: String,
    #[serde(rename = "ColumnType")]
    pub ty: String,
    #[serde(
        rename = "ColumnNullable",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nullable: Option<String>,
    #[serde(
        rename = "ColumnIsPk",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub is_pk: Option<String>,
    #[serde(
        rename = "ColumnLength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub length: Option<String>,
    #[serde(
        rename = "ColumnScale",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub scale: Option<String>,
    /// Sluice's extension: `VIRTUAL` or `STORED` for a generated column (its values are in the
    /// data files as the upstream computed them; a database downstream computes them itself and
    /// refuses writes to them). Absent for other columns, so their checksums are TiCDC's.
    #[serde(
        rename = "ColumnGenerated",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub generated: Option<String>,
}

/// A schema file (`schema_<ver>_<sum>.json`): TiCDC's table definition plus Sluice's full schema
/// (so consumers can decode every type exactly).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TableDefinition {
    #[serde(rename = "Table")]
    pub table: String,
    #[serde(rename = "Schema")]
    pub schema: String,
    #[serde(rename = "Version")]
    pub version: u32,
    #[serde(rename = "TableVersion")]
    pub table_version: Ts,
    #[serde(rename = "Query")]
    pub query: String,
    #[serde(rename = "Type")]
    pub kind: String,
    #[serde(rename = "Columns")]
    pub columns: Vec<ColumnDefinition>,
    #[serde(rename = "TotalColumns")]
    pub total_columns: usize,
    #[serde(
        rename = "SluiceSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub sluice_schema: Option<TableSchema>,
}

impl TableDefinition {
    pub fn for_table(
        schema: &TableSchema,
        version: Ts,
        query: &str,
        kind: Option<DdlKind>,
    ) -> TableDefinition {
        let columns = schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| ColumnDefinition {
                name: c.name.clone(),
                ty: type_case(&c.sql_type, true),
                nullable: Some(c.nullable.to_string()),
                is_pk: schema.key_columns.contains(&i).then(|| "true".to_string()),
                length: (c.length > 0).then(|| c.length.to_string()),
                scale: (c.decimals > 0).then(|| c.decimals.to_string()),
                generated: c.generated.map(|g| g.as_sql().to_string()),
            })
            .collect::<Vec<_>>();
        TableDefinition {
            table: schema.name.clone(),
            schema: schema.database.clone(),
            version: 1,
            table_version: version,
            query: query.to_string(),
            kind: kind.map(|k| format!("{k:?}")).unwrap_or_default(),
            total_columns: columns.len(),
            columns,
            sluice_schema: Some(schema.clone()),
        }
    }

    pub fn for_database(db: &str, version: Ts, query: &str, kind: DdlKind) -> TableDefinition {
        TableDefinition {
            table: String::new(),
            schema: db.to_string(),
            version: 1,
            table_version: version,
            query: query.to_string(),
            kind: format!("{kind:?}"),
            columns: Vec::new(),
            total_columns: 0,
            sluice_schema: None,
        }
    }

    /// 10-digit checksum of the column layout (names, types, nullability, key).
    pub fn checksum(&self) -> u32 {
        let layout = serde_json::to_string(&self.columns).unwrap_or_default();
        crc32(layout.as_bytes())
    }

    /// Path of this definition's file.
    pub fn path(&self) -> String {
        if self.table.is_empty() {
            format!(
                "{}/meta/schema_{}_{:010}.json",
                self.schema,
                self.table_version,
                self.checksum()
            )
        } else {
            format!(
                "{}/{}/meta/schema_{}_{:010}.json",
                self.schema,
                self.table,
                self.table_version,
                self.checksum()
            )
        }
    }
}

/// A column type with its words in upper (or lower) case and its quoted parts as written:
/// `enum('new','paid')` becomes `ENUM('new','paid')`, never `ENUM('NEW','PAID')` (the values
/// are data). A quote is doubled (`''`) or backslash-escaped inside a literal, as MariaDB
/// writes it.
pub fn type_case(sql: &str, upper: bool) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for ch in sql.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if ch == '\\' => escaped = true,
            // A doubled quote closes and reopens: the same text either way.
            Some(q) if ch == q => quote = None,
            Some(_) => {}
            None if ch == '\'' || ch == '"' || ch == '`' => quote = Some(ch),
            None => {}
        }
        let inside = quote.is_some() || ch == '\'' || ch == '"' || ch == '`';
        out.push(match (inside, upper) {
            (true, _) => ch,
            (false, true) => ch.to_ascii_uppercase(),
            (false, false) => ch.to_ascii_lowercase(),
        });
    }
    out
}

/// The date directory of a commit time, per separator (UTC).
pub fn date_dir(sep: DateSeparator, commit_time_ms: u64) -> Option<String> {
    let days = (commit_time_ms / 86_400_000) as i64;
    let (y, m, d) = civil_from_days(days);
    match sep {
        DateSeparator::None => None,
        DateSeparator::Year => Some(format!("{y:04}")),
        DateSeparator::Month => Some(format!("{y:04}-{m:02}")),
        DateSeparator::Day => Some(format!("{y:04}-{m:02}-{d:02}")),
    }
}

/// True when `dir` has the shape of a date directory of `sep` (`2006`, `2006-01`, `2006-01-02`).
pub fn is_date_dir(sep: DateSeparator, dir: &str) -> bool {
    let shape: &[usize] = match sep {
        DateSeparator::None => return false,
        DateSeparator::Year => &[4],
        DateSeparator::Month => &[4, 2],
        DateSeparator::Day => &[4, 2, 2],
    };
    let fields: Vec<&str> = dir.split('-').collect();
    fields.len() == shape.len()
        && fields
            .iter()
            .zip(shape)
            .all(|(f, n)| f.len() == *n && f.bytes().all(|b| b.is_ascii_digit()))
}

/// `<db>/<table>/<ver>[/<partition>][/<date>]` (`partition`: the 0-based position of the
/// partition in the table version's layout, with `enable-partition-separator`).
pub fn data_dir(schema: &TableSchema, partition: Option<usize>, date: Option<&str>) -> String {
    let mut dir = format!("{}/{}/{}", schema.database, schema.name, schema.version);
    if let Some(p) = partition {
        dir.push_str(&format!("/{p}"));
    }
    if let Some(d) = date {
        dir.push('/');
        dir.push_str(d);
    }
    dir
}

pub fn data_name(dispatcher: Option<DispatcherId>, index: u64, width: usize, ext: &str) -> String {
    match dispatcher {
        Some(d) => format!("CDC_{d}_{index:0width$}.{ext}"),
        None => format!("CDC{index:0width$}.{ext}"),
    }
}

pub fn index_path(dir: &str, dispatcher: Option<DispatcherId>) -> String {
    match dispatcher {
        Some(d) => format!("{dir}/meta/CDC_{d}.index"),
        None => format!("{dir}/meta/CDC.index"),
    }
}

/// A dispatcher's claim of its span (Sluice's extension, written by a sink with a write fence,
/// that is in a cluster, before the dispatcher's first data file of the table): who wrote the
/// files `CDC_<dispatcher>_…` of the table, over which keys, from which start point. A
/// consumer ignores a dispatcher's rows above the start ts of a later dispatcher whose span
/// overlaps its own: the later one replays them, and a paused process's write that landed after
/// it took over is not applied (`sluice consume`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claim {
    /// The dispatcher id as in file names (32 hex digits: epoch, then sequence).
    pub dispatcher: String,
    pub table_id: u64,
    /// The span's bounds, hex.
    pub span_start: String,
    pub span_end: String,
    pub start_ts: Ts,
}

impl Claim {
    pub fn new(dispatcher: DispatcherId, span: &sluice_types::Span, start_ts: Ts) -> Claim {
        Claim {
            dispatcher: dispatcher.to_string(),
            table_id: span.table.0,
            span_start: hex(&span.start.0),
            span_end: hex(&span.end.0),
            start_ts,
        }
    }

    /// The claimed span, `None` if the record is not one this version wrote.
    pub fn span(&self) -> Option<sluice_types::Span> {
        Some(sluice_types::Span::new(
            sluice_types::TableId(self.table_id),
            sluice_types::Key(unhex(&self.span_start)?),
            sluice_types::Key(unhex(&self.span_end)?),
        ))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Where dispatcher `d` claims its span of `schema`'s table.
pub fn claim_path(schema: &TableSchema, d: DispatcherId) -> String {
    format!("{}/{}/meta/claim_{d}.json", schema.database, schema.name)
}

/// Parses `claim_<dispatcher>.json`: the dispatcher id text.
pub fn parse_claim_name(name: &str) -> Option<&str> {
    let d = name.strip_prefix("claim_")?.strip_suffix(".json")?;
    (d.len() == 32 && d.bytes().all(|b| b.is_ascii_hexdigit())).then_some(d)
}

/// A parsed data file name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DataName {
    /// The dispatcher id text (32 hex digits), if any.
    pub dispatcher: Option<String>,
    pub index: u64,
    pub ext: String,
}

/// Parses a data file name, or `None` for anything else (temporary files, index files).
pub fn parse_data_name(name: &str) -> Option<DataName> {
    let rest = name.strip_prefix("CDC")?;
    let (stem, ext) = rest.rsplit_once('.')?;
    if ext != "csv" && ext != "json" {
        return None;
    }
    let (dispatcher, digits) = match stem.strip_prefix('_') {
        Some(s) => {
            let (d, i) = s.split_once('_')?;
            if d.len() != 32 || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            (Some(d.to_string()), i)
        }
        None => (None, stem),
    };
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(DataName {
        dispatcher,
        index: digits.parse().ok()?,
        ext: ext.to_string(),
    })
}

/// Parses `schema_<ver>_<sum>.json`.
pub fn parse_schema_name(name: &str) -> Option<(Ts, u32)> {
    let s = name.strip_prefix("schema_")?.strip_suffix(".json")?;
    let (v, sum) = s.split_once('_')?;
    Some((v.parse().ok()?, sum.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_name_their_dispatcher_and_keep_their_span() {
        let t = sluice_types::TableId(7);
        let span = sluice_types::Span::new(
            t,
            sluice_types::Key::row_u64(t, 3),
            sluice_types::Key::row_u64(t, 9),
        );
        let d = DispatcherId { epoch: 2, seq: 5 };
        let c = Claim::new(d, &span, 42);
        assert_eq!(c.span(), Some(span));
        let schema = TableSchema {
            database: "db".into(),
            name: "t".into(),
            ..crate::testing::simple_schema("db", "t", 7, 1)
        };
        let path = claim_path(&schema, d);
        let name = path.rsplit('/').next().unwrap_or_default();
        assert_eq!(parse_claim_name(name), Some(c.dispatcher.as_str()));
        assert_eq!(parse_claim_name("claim_zz.json"), None);
        assert_eq!(parse_data_name(name), None);
    }

    #[test]
    fn type_case_keeps_quoted_values() {
        assert_eq!(type_case("enum('new','paid')", true), "ENUM('new','paid')");
        assert_eq!(
            type_case("set('It''s','a\\'b','Up') character set utf8mb4", true),
            "SET('It''s','a\\'b','Up') CHARACTER SET UTF8MB4"
        );
        assert_eq!(type_case("ENUM('New','PAID')", false), "enum('New','PAID')");
        assert_eq!(
            type_case("decimal(10,2) unsigned", true),
            "DECIMAL(10,2) UNSIGNED"
        );
    }

    #[test]
    fn names_roundtrip_and_temp_files_are_not_data() {
        let d = DispatcherId { epoch: 3, seq: 9 };
        let n = data_name(Some(d), 7, 6, "csv");
        assert_eq!(n, "CDC_00000000000000030000000000000009_000007.csv");
        assert_eq!(
            parse_data_name(&n),
            Some(DataName {
                dispatcher: Some(d.to_string()),
                index: 7,
                ext: "csv".into()
            })
        );
        assert_eq!(
            data_name(None, 12, 20, "json"),
            "CDC00000000000000000012.json"
        );
        assert_eq!(
            parse_data_name("CDC00000000000000000012.json").map(|d| d.index),
            Some(12)
        );
        for bad in [
            "CDC000001.csv#1",
            "CDC000001.csv.tmp.abc",
            "CDC.index",
            "CDC_x_000001.csv",
            "CDC01.csv",
            "schema_1_2.json",
        ] {
            assert_eq!(parse_data_name(bad), None, "{bad}");
        }
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            parse_schema_name("schema_42_0123456789.json"),
            Some((42, 123_456_789))
        );
    }
}
