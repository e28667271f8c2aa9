//! Row decoding: turns a TABLE_MAP event (with `binlog_row_metadata=FULL`) into a [`TableMeta`]
//! and each binlog value of a ROWS event into a typed [`sluice_types::Value`].
//!
//! Invariants:
//! - decoding depends only on the TABLE_MAP that precedes the rows in the same transaction,
//!   so old rows decode with the schema valid when they were written, on any node;
//! - character data is decoded from the column's charset (utf8mb3/utf8mb4, latin1 as the
//!   server's cp1252, ascii); data invalid in its charset, binary-collation columns and
//!   unknown charsets come out as [`Value::Bytes`], never as lossy text;
//! - DECIMAL stays exact text; TIMESTAMP is UTC microseconds (the binlog stores UTC seconds);
//!   DATETIME/DATE/TIME are the wall-clock values as written (no time zone applied);
//! - external data never panics here: malformed values become [`DecodeError`].

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType as MyType;
use sluice_types::{ColumnDef, ColumnType, Value};

/// Collation id of the `binary` pseudo-charset.
pub const BINARY_COLLATION: u16 = 63;

#[derive(Debug, thiserror::Error)]
#[error("column `{column}`: {message}")]
pub struct DecodeError {
    pub column: String,
    pub message: String,
}

/// One column as described by a TABLE_MAP event.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnMeta {
    pub name: String,
    /// The real MySQL type (ENUM/SET resolved from STRING metadata).
    pub my_type: MyType,
    pub meta: Vec<u8>,
    pub unsigned: bool,
    /// Collation id (0 when the column has none).
    pub collation: u16,
    pub nullable: bool,
    /// ENUM/SET member names.
    pub elements: Vec<String>,
    /// A MariaDB compressed column (TABLE_MAP type 141/140, read as VARCHAR/BLOB): its row
    /// values are inflated ([`crate::compression::column_value`]).
    pub compressed: bool,
}

/// A table as described by a TABLE_MAP event.
#[derive(Clone, Debug, PartialEq)]
pub struct TableMeta {
    pub database: String,
    pub table: String,
    pub columns: Vec<ColumnMeta>,
    /// Primary key column indexes (from the optional metadata).
    pub primary_key: Vec<usize>,
}

fn bad(column: &str, message: impl Into<String>) -> DecodeError {
    DecodeError {
        column: column.to_string(),
        message: message.into(),
    }
}

impl TableMeta {
    /// Reads a TABLE_MAP event. Fails when the optional metadata lacks column names (the upstream
    /// does not have `binlog_row_metadata=FULL`). `compressed` marks the columns that were
    /// compressed before [`crate::compression::plain_table_map`] (empty: none).
    pub fn from_tme(
        tme: &TableMapEvent<'_>,
        compressed: &[bool],
    ) -> Result<TableMeta, DecodeError> {
        let table = format!("{}.{}", tme.database_name(), tme.table_name());
        let mut columns = typed_columns(tme, compressed, &table)?;
        let optional = OptionalMeta::read(tme, &table)?;
        let n = columns.len();
        if optional.names.len() != n {
            return Err(bad(
                &table,
                format!(
                    "TABLE_MAP has {} column names for {n} columns: set binlog_row_metadata=FULL upstream",
                    optional.names.len()
                ),
            ));
        }
        let mut pk = optional.apply(&mut columns);
        pk.retain(|i| *i < n);
        Ok(TableMeta {
            database: tme.database_name().into_owned(),
            table: tme.table_name().into_owned(),
            columns,
            primary_key: pk,
        })
    }

    /// Column definitions as far as the TABLE_MAP tells them (used when the schema history has no
    /// better definition, e.g. for `sql_type`).
    pub fn column_defs(&self) -> Vec<ColumnDef> {
        self.columns.iter().map(|c| c.to_def()).collect()
    }
}

/// The columns of a TABLE_MAP with their types, type metadata and nullability (names,
/// signedness and charsets come from the optional metadata).
fn typed_columns(
    tme: &TableMapEvent<'_>,
    compressed: &[bool],
    table: &str,
) -> Result<Vec<ColumnMeta>, DecodeError> {
    let nulls = tme.null_bitmask();
    (0..tme.columns_count() as usize)
        .map(|i| {
            let my_type = tme
                .get_column_type(i)
                .map_err(|e| bad(table, format!("column {i}: {e}")))?
                .ok_or_else(|| bad(table, format!("column {i} has no type")))?;
            Ok(ColumnMeta {
                name: String::new(),
                my_type,
                meta: tme.get_column_metadata(i).unwrap_or(&[]).to_vec(),
                unsigned: false,
                collation: 0,
                nullable: nulls.get(i).map(|b| *b).unwrap_or(true),
                elements: Vec::new(),
                compressed: compressed.get(i).copied().unwrap_or(false),
            })
        })
        .collect()
}

/// A default charset and the columns that differ from it, by index among the columns it
/// covers.
type DefaultCharsets = (u16, Vec<(usize, u16)>);

/// What a TABLE_MAP's optional metadata (`binlog_row_metadata=FULL`) says, field by field.
#[derive(Default)]
struct OptionalMeta {
    names: Vec<String>,
    /// One flag per numeric column.
    signedness: Vec<bool>,
    /// Character columns (CHAR, VARCHAR, BLOB/TEXT): a default, or one charset each.
    default_charset: Option<DefaultCharsets>,
    column_charsets: Option<Vec<u16>>,
    /// ENUM and SET columns: a default, or one charset each.
    enum_set_default: Option<DefaultCharsets>,
    enum_set_charsets: Option<Vec<u16>>,
    /// Member names as the upstream's bytes, read in the column's charset by [`Self::apply`].
    enum_values: Vec<Vec<Vec<u8>>>,
    set_values: Vec<Vec<Vec<u8>>>,
    primary_key: Vec<usize>,
}

impl OptionalMeta {
    fn read(tme: &TableMapEvent<'_>, table: &str) -> Result<OptionalMeta, DecodeError> {
        let e = |x: std::io::Error| bad(table, format!("optional metadata: {x}"));
        let mut m = OptionalMeta::default();
        for field in tme.iter_optional_meta() {
            match field.map_err(e)? {
                OptionalMetadataField::Signedness(bits) => {
                    m.signedness = bits.iter().map(|b| *b).collect()
                }
                OptionalMetadataField::DefaultCharset(d) => {
                    m.default_charset = Some(default_charsets(&d).map_err(e)?)
                }
                OptionalMetadataField::ColumnCharset(c) => {
                    m.column_charsets =
                        Some(c.iter_charsets().collect::<Result<_, _>>().map_err(e)?)
                }
                OptionalMetadataField::EnumAndSetDefaultCharset(d) => {
                    m.enum_set_default = Some(default_charsets(&d).map_err(e)?)
                }
                OptionalMetadataField::EnumAndSetColumnCharset(c) => {
                    m.enum_set_charsets =
                        Some(c.iter_charsets().collect::<Result<_, _>>().map_err(e)?)
                }
                OptionalMetadataField::ColumnName(c) => {
                    for x in c.iter_names() {
                        m.names.push(x.map_err(e)?.name().into_owned());
                    }
                }
                OptionalMetadataField::EnumStrValue(v) => {
                    for x in v.iter_values() {
                        m.enum_values.push(member_names(x.map_err(e)?.values()));
                    }
                }
                OptionalMetadataField::SetStrValue(v) => {
                    for x in v.iter_values() {
                        m.set_values.push(member_names(x.map_err(e)?.values()));
                    }
                }
                OptionalMetadataField::SimplePrimaryKey(k) => {
                    for x in k.iter_indexes() {
                        m.primary_key.push(x.map_err(e)? as usize);
                    }
                }
                OptionalMetadataField::PrimaryKeyWithPrefix(k) => {
                    for x in k.iter_keys() {
                        m.primary_key.push(x.map_err(e)?.column_index() as usize);
                    }
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// Gives each column its name, signedness, collation and ENUM/SET members (each list is
    /// indexed among the columns of its kind, in table order). Returns the primary key.
    fn apply(mut self, columns: &mut [ColumnMeta]) -> Vec<usize> {
        let (mut num_i, mut chr_i, mut es_i, mut enum_i, mut set_i) = (0, 0, 0, 0, 0);
        for (i, c) in columns.iter_mut().enumerate() {
            c.name = std::mem::take(&mut self.names[i]);
            if c.my_type.is_numeric_type() {
                c.unsigned = self.signedness.get(num_i).copied().unwrap_or(false);
                num_i += 1;
            }
            if c.my_type.is_character_type() {
                c.collation = charset_at(&self.column_charsets, &self.default_charset, chr_i);
                chr_i += 1;
            } else if c.my_type.is_enum_or_set_type() {
                c.collation = charset_at(&self.enum_set_charsets, &self.enum_set_default, es_i);
                es_i += 1;
                let (list, at) = if c.my_type == MyType::MYSQL_TYPE_ENUM {
                    (&self.enum_values, &mut enum_i)
                } else {
                    (&self.set_values, &mut set_i)
                };
                c.elements = list
                    .get(*at)
                    .map(|names| member_texts(c.collation, names))
                    .unwrap_or_default();
                *at += 1;
            }
        }
        self.primary_key
    }
}

fn default_charsets(
    d: &mysql_async::binlog::events::DefaultCharset<'_>,
) -> Result<DefaultCharsets, std::io::Error> {
    let mut non_default = Vec::new();
    for x in d.iter_non_default() {
        let x = x?;
        non_default.push((x.column_index() as usize, x.charset()));
    }
    Ok((d.default_charset(), non_default))
}

fn member_names<T: MemberName>(values: &[T]) -> Vec<Vec<u8>> {
    values.iter().map(|v| v.member().to_vec()).collect()
}

/// ENUM/SET member names read in the column's charset (a latin1 column's `ä` is the byte E4
/// in the TABLE_MAP), as the history has them; bytes no charset reading gives are kept lossy.
fn member_texts(collation: u16, names: &[Vec<u8>]) -> Vec<String> {
    names
        .iter()
        .map(|b| match decode_text(collation, b.clone()) {
            Value::Text(t) => t,
            _ => String::from_utf8_lossy(b).into_owned(),
        })
        .collect()
}

/// An ENUM or SET member's name as bytes (mysql_common has a type for each).
trait MemberName {
    fn member(&self) -> &[u8];
}

impl MemberName for mysql_async::binlog::events::EnumStrValue<'_> {
    fn member(&self) -> &[u8] {
        self.value_raw()
    }
}

impl MemberName for mysql_async::binlog::events::SetStrValue<'_> {
    fn member(&self) -> &[u8] {
        self.value_raw()
    }
}

/// The charset of the `i`-th column of a kind: from the per-column list, else the default
/// unless listed as different, else 0 (none known).
fn charset_at(per_column: &Option<Vec<u16>>, default: &Option<DefaultCharsets>, i: usize) -> u16 {
    match (per_column, default) {
        (Some(v), _) => v.get(i).copied().unwrap_or(0),
        (None, Some((d, non_default))) => non_default
            .iter()
            .find(|(ci, _)| *ci == i)
            .map(|x| x.1)
            .unwrap_or(*d),
        _ => 0,
    }
}

/// The ENUM value of a 1-based index into `elements` (0: the empty error value), as the binlog
/// decoder and snapshot reads both give it.
pub(crate) fn enum_value(elements: &[String], index: u16) -> Value {
    let name = match index {
        0 => String::new(),
        i => elements.get(i as usize - 1).cloned().unwrap_or_default(),
    };
    Value::Enum { index, name }
}

/// The SET value of a member bitmap over `elements`.
pub(crate) fn set_value(elements: &[String], bits: u64) -> Value {
    let names = elements
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 64 && bits & (1u64 << i) != 0)
        .map(|(_, n)| n.clone())
        .collect();
    Value::Set { bits, names }
}

impl ColumnMeta {
    pub fn is_binary(&self) -> bool {
        self.collation == BINARY_COLLATION
    }

    /// The Sluice column type family.
    pub fn column_type(&self) -> ColumnType {
        use MyType::*;
        match self.my_type {
            MYSQL_TYPE_TINY => ColumnType::TinyInt,
            MYSQL_TYPE_SHORT => ColumnType::SmallInt,
            MYSQL_TYPE_INT24 => ColumnType::MediumInt,
            MYSQL_TYPE_LONG => ColumnType::Int,
            MYSQL_TYPE_LONGLONG => ColumnType::BigInt,
            MYSQL_TYPE_DECIMAL | MYSQL_TYPE_NEWDECIMAL => ColumnType::Decimal,
            MYSQL_TYPE_FLOAT => ColumnType::Float,
            MYSQL_TYPE_DOUBLE => ColumnType::Double,
            MYSQL_TYPE_STRING if self.is_binary() => ColumnType::Binary,
            MYSQL_TYPE_STRING => ColumnType::Char,
            MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING if self.is_binary() => ColumnType::VarBinary,
            MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => ColumnType::VarChar,
            MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB
                if self.is_binary() =>
            {
                ColumnType::Blob
            }
            MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB => ColumnType::Text,
            MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => ColumnType::Date,
            MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2 => ColumnType::Time,
            MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2 => ColumnType::DateTime,
            MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2 => ColumnType::Timestamp,
            MYSQL_TYPE_YEAR => ColumnType::Year,
            MYSQL_TYPE_ENUM => ColumnType::Enum,
            MYSQL_TYPE_SET => ColumnType::Set,
            MYSQL_TYPE_BIT => ColumnType::Bit,
            MYSQL_TYPE_JSON => ColumnType::Json,
            MYSQL_TYPE_GEOMETRY => ColumnType::Geometry,
            _ => ColumnType::Blob,
        }
    }

    /// Fractional-seconds precision (TIME2/DATETIME2/TIMESTAMP2) or DECIMAL scale.
    pub fn decimals(&self) -> u8 {
        use MyType::*;
        match self.my_type {
            MYSQL_TYPE_TIME2 | MYSQL_TYPE_DATETIME2 | MYSQL_TYPE_TIMESTAMP2 => {
                self.meta.first().copied().unwrap_or(0)
            }
            MYSQL_TYPE_NEWDECIMAL => self.meta.get(1).copied().unwrap_or(0),
            _ => 0,
        }
    }

    /// The declared byte length of a CHAR/BINARY column (from the TABLE_MAP metadata).
    pub fn string_length(&self) -> usize {
        let (b0, b1) = (
            self.meta.first().copied().unwrap_or(0) as usize,
            self.meta.get(1).copied().unwrap_or(0) as usize,
        );
        if (b0 & 0x30) != 0x30 {
            b1 | (((b0 & 0x30) ^ 0x30) << 4)
        } else {
            b1
        }
    }

    /// The column as a [`ColumnDef`]. Charset and collation are *names*, as in the schema
    /// history (`information_schema`), for the collation ids Sluice knows
    /// ([`collation_name`]); `None` otherwise, and for the binary types (no charset, as
    /// `information_schema.COLUMNS` shows them).
    pub fn to_def(&self) -> ColumnDef {
        let ty = self.column_type();
        let name = match ty {
            ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob => None,
            _ => collation_name(self.collation),
        };
        ColumnDef {
            name: self.name.clone(),
            ty,
            sql_type: format!("{ty:?}").to_ascii_lowercase(),
            unsigned: self.unsigned,
            nullable: self.nullable,
            charset: name.map(|n| crate::charset::charset_prefix(n).to_string()),
            collation: name.map(str::to_string),
            elements: self.elements.clone(),
            decimals: self.decimals(),
            length: 0,
            generated: None,
        }
    }

    /// Decodes one value of this column.
    pub fn decode(&self, v: BinlogValue<'_>) -> Result<Value, DecodeError> {
        use mysql_async::Value as V;
        use MyType::*;
        let v = match v {
            BinlogValue::Value(v) => v,
            BinlogValue::Jsonb(_) => {
                let v =
                    mysql_async::Value::try_from(v).map_err(|e| bad(&self.name, e.to_string()))?;
                return match v {
                    V::Bytes(b) => Ok(Value::Json(
                        String::from_utf8(b).map_err(|e| bad(&self.name, e.to_string()))?,
                    )),
                    _ => Err(bad(&self.name, "JSON did not convert to text")),
                };
            }
            BinlogValue::JsonDiff(_) => {
                return Err(bad(
                    &self.name,
                    "partial JSON update (set binlog_row_value_options='' upstream)",
                ))
            }
        };
        if v == V::NULL {
            return Ok(Value::Null);
        }
        let name = &self.name;
        let out = match (self.my_type, v) {
            (
                MYSQL_TYPE_TINY | MYSQL_TYPE_SHORT | MYSQL_TYPE_INT24 | MYSQL_TYPE_LONG
                | MYSQL_TYPE_LONGLONG,
                v,
            ) => self.integer(v)?,
            (MYSQL_TYPE_FLOAT, V::Float(f)) => Value::Float(f),
            (MYSQL_TYPE_FLOAT, V::Double(f)) => Value::Float(f as f32),
            (MYSQL_TYPE_DOUBLE, V::Double(f)) => Value::Double(f),
            (MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL, V::Bytes(b)) => {
                Value::Decimal(String::from_utf8(b).map_err(|e| bad(name, e.to_string()))?)
            }
            (MYSQL_TYPE_YEAR, V::Bytes(b)) => {
                let y: u16 = std::str::from_utf8(&b)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad(name, "bad YEAR"))?;
                // The binlog stores YEAR as (year - 1900); 0 is the zero year 0000.
                Value::Year(if y == 1900 { 0 } else { y })
            }
            (MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE, V::Date(year, month, day, ..)) => {
                Value::Date { year, month, day }
            }
            (
                MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2,
                V::Date(year, month, day, hour, minute, second, micros),
            ) => Value::DateTime {
                year,
                month,
                day,
                hour,
                minute,
                second,
                micros,
            },
            (
                MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2,
                V::Time(negative, days, h, minutes, seconds, micros),
            ) => Value::Time {
                negative,
                hours: days * 24 + h as u32,
                minutes,
                seconds,
                micros,
            },
            (MYSQL_TYPE_TIMESTAMP, V::Int(sec)) => Value::Timestamp {
                micros: sec * 1_000_000,
            },
            (MYSQL_TYPE_TIMESTAMP2, V::Bytes(b)) => self.timestamp2(&b)?,
            (MYSQL_TYPE_ENUM, V::Int(i)) => self.enum_member(i)?,
            (MYSQL_TYPE_SET, V::Bytes(b)) => self.set_members(&b),
            (MYSQL_TYPE_BIT, V::Bytes(b)) => self.bits(&b),
            (MYSQL_TYPE_GEOMETRY, V::Bytes(b)) => Value::Geometry(b),
            (MYSQL_TYPE_JSON, V::Bytes(b)) => {
                Value::Json(String::from_utf8(b).map_err(|e| bad(name, e.to_string()))?)
            }
            (
                MYSQL_TYPE_STRING
                | MYSQL_TYPE_VARCHAR
                | MYSQL_TYPE_VAR_STRING
                | MYSQL_TYPE_BLOB
                | MYSQL_TYPE_TINY_BLOB
                | MYSQL_TYPE_MEDIUM_BLOB
                | MYSQL_TYPE_LONG_BLOB,
                V::Bytes(b),
            ) => self.string(b)?,
            (t, v) => return Err(bad(name, format!("unexpected value {v:?} for type {t:?}"))),
        };
        Ok(out)
    }

    fn integer(&self, v: mysql_async::Value) -> Result<Value, DecodeError> {
        use mysql_async::Value as V;
        use MyType::*;
        let width = match self.my_type {
            MYSQL_TYPE_TINY => 8,
            MYSQL_TYPE_SHORT => 16,
            MYSQL_TYPE_INT24 => 24,
            MYSQL_TYPE_LONG => 32,
            _ => 64,
        };
        Ok(match v {
            V::Int(i) if self.unsigned => {
                // Narrow unsigned values may arrive sign-extended: mask to the width.
                let u = if width == 64 {
                    i as u64
                } else {
                    (i as u64) & ((1u64 << width) - 1)
                };
                Value::UInt(u)
            }
            V::UInt(u) if self.unsigned => Value::UInt(u),
            // mysql_common does not sign-extend 24-bit values: do it here.
            V::Int(i) if width == 24 => Value::Int(((i & 0xff_ffff) << 40) >> 40),
            V::Int(i) => Value::Int(i),
            V::UInt(u) => Value::Int(u as i64),
            other => {
                return Err(bad(
                    &self.name,
                    format!("unexpected integer value {other:?}"),
                ))
            }
        })
    }

    fn timestamp2(&self, b: &[u8]) -> Result<Value, DecodeError> {
        let name = &self.name;
        let s = std::str::from_utf8(b).map_err(|e| bad(name, e.to_string()))?;
        let (sec, frac) = s.split_once('.').unwrap_or((s, "0"));
        let sec: i64 = sec
            .parse()
            .map_err(|_| bad(name, format!("bad TIMESTAMP {s}")))?;
        let us: i64 = frac
            .parse()
            .map_err(|_| bad(name, format!("bad TIMESTAMP {s}")))?;
        Ok(Value::Timestamp {
            micros: sec * 1_000_000 + us,
        })
    }

    fn enum_member(&self, i: i64) -> Result<Value, DecodeError> {
        let index = u16::try_from(i).map_err(|_| bad(&self.name, format!("ENUM index {i}")))?;
        Ok(self.enum_value(index))
    }

    /// The ENUM value of a 1-based member index (0: the empty error value).
    pub(crate) fn enum_value(&self, index: u16) -> Value {
        enum_value(&self.elements, index)
    }

    fn set_members(&self, b: &[u8]) -> Value {
        let mut bits = 0u64;
        for (i, byte) in b.iter().enumerate().take(8) {
            bits |= (*byte as u64) << (8 * i);
        }
        self.set_value(bits)
    }

    /// The SET value of a member bitmap.
    pub(crate) fn set_value(&self, bits: u64) -> Value {
        set_value(&self.elements, bits)
    }

    fn bits(&self, b: &[u8]) -> Value {
        let width = self.meta.get(1).copied().unwrap_or(0) as u16 * 8
            + self.meta.first().copied().unwrap_or(0) as u16;
        let mut bits = 0u64;
        for byte in b.iter().rev().take(8).rev() {
            bits = (bits << 8) | *byte as u64;
        }
        Value::Bit { bits, width }
    }

    /// CHAR/VARCHAR/BINARY/BLOB/TEXT bytes (inflated for a compressed column).
    fn string(&self, b: Vec<u8>) -> Result<Value, DecodeError> {
        let b = if self.compressed {
            crate::compression::column_value(&b, None).map_err(|e| bad(&self.name, e))?
        } else {
            b
        };
        if self.my_type == MyType::MYSQL_TYPE_STRING && self.is_binary() {
            // BINARY(n) is logged without its trailing 0x00 padding: restore it.
            let mut b = b;
            let n = self.string_length();
            if b.len() < n {
                b.resize(n, 0);
            }
            Ok(Value::Bytes(b))
        } else {
            Ok(decode_text(self.collation, b))
        }
    }
}

/// A character set family, as far as decoding and key weights need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charset {
    Binary,
    Latin1,
    Ascii,
    Utf8,
    /// Any other charset: values that are valid UTF-8 decode as such, others stay bytes.
    Other,
}

impl Charset {
    pub fn name(&self) -> &'static str {
        match self {
            Charset::Binary => "binary",
            Charset::Latin1 => "latin1",
            Charset::Ascii => "ascii",
            Charset::Utf8 => "utf8mb4",
            Charset::Other => "other",
        }
    }
}

/// The charset of a collation id (MariaDB/MySQL numbering; MariaDB NO PAD collations are the
/// base id + 1024).
pub fn charset_of(collation: u16) -> Charset {
    let base = if (1024..2048).contains(&collation) {
        collation - 1024
    } else {
        collation
    };
    match base {
        63 => Charset::Binary,
        5 | 8 | 15 | 31 | 47 | 48 | 49 | 94 => Charset::Latin1,
        11 | 65 => Charset::Ascii,
        33 | 45 | 46 | 76 | 83 | 192..=215 | 223..=247 | 255..=323 => Charset::Utf8,
        // MariaDB 10.10+ UCA 14.0.0 collations (utf8mb3/utf8mb4 ids 2048..).
        c if c >= 2048 => Charset::Utf8,
        _ => Charset::Other,
    }
}

/// The name of a collation id, for the collations of the charsets Sluice decodes as text
/// (MariaDB 10.6+ names; MySQL 8's `utf8mb4_0900_*`). `None` for other ids.
pub fn collation_name(id: u16) -> Option<&'static str> {
    Some(match id {
        5 => "latin1_german1_ci",
        8 => "latin1_swedish_ci",
        11 => "ascii_general_ci",
        15 => "latin1_danish_ci",
        31 => "latin1_german2_ci",
        33 => "utf8mb3_general_ci",
        45 => "utf8mb4_general_ci",
        46 => "utf8mb4_bin",
        47 => "latin1_bin",
        48 => "latin1_general_ci",
        49 => "latin1_general_cs",
        63 => "binary",
        65 => "ascii_bin",
        83 => "utf8mb3_bin",
        94 => "latin1_spanish_ci",
        192 => "utf8mb3_unicode_ci",
        214 => "utf8mb3_unicode_520_ci",
        224 => "utf8mb4_unicode_ci",
        246 => "utf8mb4_unicode_520_ci",
        255 => "utf8mb4_0900_ai_ci",
        278 => "utf8mb4_0900_as_cs",
        309 => "utf8mb4_0900_bin",
        1032 => "latin1_swedish_nopad_ci",
        1035 => "ascii_general_nopad_ci",
        1057 => "utf8mb3_general_nopad_ci",
        1069 => "utf8mb4_general_nopad_ci",
        1070 => "utf8mb4_nopad_bin",
        1071 => "latin1_nopad_bin",
        1089 => "ascii_nopad_bin",
        1107 => "utf8mb3_nopad_bin",
        1216 => "utf8mb3_unicode_nopad_ci",
        1238 => "utf8mb3_unicode_520_nopad_ci",
        1248 => "utf8mb4_unicode_nopad_ci",
        1270 => "utf8mb4_unicode_520_nopad_ci",
        _ => return None,
    })
}

/// Whether a collation compares case- and accent-sensitively (binary and `_bin`/`_cs`
/// collations); everything else is treated as case-insensitive.
pub fn is_case_sensitive(collation: u16) -> bool {
    let base = if (1024..2048).contains(&collation) {
        collation - 1024
    } else {
        collation
    };
    matches!(base, 0 | 46 | 47 | 49 | 63 | 65 | 83 | 278 | 309)
}

/// Whether a collation ignores trailing spaces (PAD SPACE): every MariaDB collation except the
/// NO PAD ones (ids 1024..2047) and MySQL 8's `_0900_` collations (255..=323); never binary.
pub fn is_pad_space(collation: u16) -> bool {
    !(collation == BINARY_COLLATION
        || (1024..2048).contains(&collation)
        || (255..=323).contains(&collation))
}

/// Decodes character data in the given collation's charset.
pub fn decode_text(collation: u16, b: Vec<u8>) -> Value {
    match charset_of(collation) {
        Charset::Binary => Value::Bytes(b),
        // MySQL's latin1 is Windows-1252 (one table: `sluice_partition::collation`).
        Charset::Latin1 => Value::Text(
            b.iter()
                .map(|&c| sluice_partition::collation::latin1_char(c))
                .collect(),
        ),
        Charset::Ascii if b.is_ascii() => Value::Text(String::from_utf8_lossy(&b).into_owned()),
        Charset::Ascii => Value::Bytes(b),
        Charset::Utf8 | Charset::Other => match String::from_utf8(b) {
            Ok(s) => Value::Text(s),
            Err(e) => Value::Bytes(e.into_bytes()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(my_type: MyType, collation: u16) -> ColumnMeta {
        ColumnMeta {
            name: "c".into(),
            my_type,
            meta: vec![],
            unsigned: false,
            collation,
            nullable: true,
            elements: vec![],
            compressed: false,
        }
    }

    #[test]
    fn table_map_defs_carry_collation_names_like_the_history() {
        let d = col(MyType::MYSQL_TYPE_VARCHAR, 45).to_def();
        assert_eq!(
            (d.charset.as_deref(), d.collation.as_deref()),
            (Some("utf8mb4"), Some("utf8mb4_general_ci"))
        );
        let d = col(MyType::MYSQL_TYPE_STRING, 1032).to_def();
        assert_eq!(d.collation.as_deref(), Some("latin1_swedish_nopad_ci"));
        // Binary types have no charset (as information_schema shows them); unknown ids no name.
        let d = col(MyType::MYSQL_TYPE_BLOB, BINARY_COLLATION).to_def();
        assert_eq!((d.charset, d.collation), (None, None));
        let d = col(MyType::MYSQL_TYPE_VARCHAR, 2048).to_def();
        assert_eq!((d.charset, d.collation), (None, None));
        let d = col(MyType::MYSQL_TYPE_LONG, 0).to_def();
        assert_eq!((d.charset, d.collation), (None, None));
    }
}
