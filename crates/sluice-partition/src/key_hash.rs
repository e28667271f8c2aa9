//! MariaDB's KEY partitioning hash over each column's stored bytes, and LINEAR masks.

use crate::cannot_place;
use crate::collation::*;
use sluice_types::partition::PartitionError;
use sluice_types::{ColumnDef, ColumnType, Value};

/// MariaDB's `nr1/nr2` hash state (`MY_HASH_ADD`), as `Hasher` in the server.
pub(crate) struct KeyHasher {
    pub(crate) nr1: u64,
    pub(crate) nr2: u64,
}

impl KeyHasher {
    pub(crate) fn add(&mut self, v: u8) {
        let (nr1, nr2) = (self.nr1, self.nr2);
        self.nr1 ^= ((nr1 & 63).wrapping_add(nr2))
            .wrapping_mul(u64::from(v))
            .wrapping_add(nr1 << 8);
        self.nr2 = nr2.wrapping_add(3);
    }

    pub(crate) fn null(&mut self) {
        self.nr1 ^= (self.nr1 << 1) | 1;
    }

    /// `my_hash_sort_bin`.
    pub(crate) fn bin(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(b);
        }
    }

    /// `my_hash_sort_8bit_bin` / `my_hash_sort_mb_bin`: trailing spaces dropped.
    pub(crate) fn bin_pad(&mut self, bytes: &[u8]) {
        let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        self.bin(&bytes[..end]);
    }

    /// `my_hash_sort_utf8mb4`/`my_hash_sort_utf8mb3` (general_ci): trailing spaces dropped,
    /// then each character's 16-bit weight, low byte first.
    pub(crate) fn general_ci(
        &mut self,
        col: &ColumnDef,
        utf8: &[u8],
    ) -> Result<(), PartitionError> {
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
    pub(crate) fn latin1_simple(&mut self, bytes: &[u8]) {
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
pub(crate) fn frac_bytes(micros: u32, decimals: u8) -> Vec<u8> {
    match decimals {
        1 | 2 => vec![(micros / 10_000) as u8],
        3 | 4 => ((micros / 100) as u16).to_be_bytes().to_vec(),
        5 | 6 => micros.to_be_bytes()[1..].to_vec(),
        _ => Vec::new(),
    }
}

/// Adds one column of a KEY partitioning to the hash, as the server's `Field::hash` does.
pub(crate) fn key_hash_column(
    h: &mut KeyHasher,
    col: &ColumnDef,
    v: &Value,
    algorithm: u8,
) -> Result<(), PartitionError> {
    if *v == Value::Null {
        h.null();
        return Ok(());
    }
    match col.ty {
        ColumnType::TinyInt
        | ColumnType::SmallInt
        | ColumnType::MediumInt
        | ColumnType::Int
        | ColumnType::BigInt => hash_integer(h, col, v, algorithm),
        ColumnType::Year => hash_year(h, col, v, algorithm),
        ColumnType::Enum | ColumnType::Set => hash_enum_set(h, col, v, algorithm),
        ColumnType::Date => hash_date(h, col, v),
        ColumnType::DateTime => hash_datetime(h, col, v),
        ColumnType::Timestamp => hash_timestamp(h, col, v),
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob => hash_binary(h, col, v),
        ColumnType::Char | ColumnType::VarChar | ColumnType::Text => hash_text(h, col, v),
        _ => cannot_place(format!(
            "KEY partitioning on column `{}` of type {} is not supported by Sluice",
            col.name, col.sql_type
        )),
    }
}

fn bad_value(col: &ColumnDef, v: &Value) -> Result<(), PartitionError> {
    cannot_place(format!(
        "value {v:?} of column `{}` ({}) does not fit its type",
        col.name, col.sql_type
    ))
}

/// Numbers (and YEAR) are latin1 text to the server's hash since 5.5 (ALGORITHM=2); binary
/// with ALGORITHM=1.
fn hash_number(h: &mut KeyHasher, bytes: &[u8], algorithm: u8) {
    if algorithm == 1 {
        h.bin(bytes)
    } else {
        h.latin1_simple(bytes)
    }
}

/// An integer's stored little-endian bytes (1, 2, 3, 4 or 8).
fn hash_integer(
    h: &mut KeyHasher,
    col: &ColumnDef,
    v: &Value,
    algorithm: u8,
) -> Result<(), PartitionError> {
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
        _ => return bad_value(col, v),
    };
    hash_number(h, &raw.to_le_bytes()[..len], algorithm);
    Ok(())
}

/// YEAR: one byte, the year minus 1900 (0 for year 0).
fn hash_year(
    h: &mut KeyHasher,
    col: &ColumnDef,
    v: &Value,
    algorithm: u8,
) -> Result<(), PartitionError> {
    let b = match v {
        Value::Year(0) => 0,
        Value::Year(y) if (1901..=2155).contains(y) => (y - 1900) as u8,
        _ => return bad_value(col, v),
    };
    hash_number(h, &[b], algorithm);
    Ok(())
}

/// ENUM and SET: their index/bits, binary (ALGORITHM=1: latin1 text).
fn hash_enum_set(
    h: &mut KeyHasher,
    col: &ColumnDef,
    v: &Value,
    algorithm: u8,
) -> Result<(), PartitionError> {
    let (raw, len) = match v {
        Value::Enum { index, .. } => (
            u64::from(*index),
            if col.elements.len() < 256 { 1 } else { 2 },
        ),
        Value::Set { bits, .. } => {
            let n = col.elements.len().div_ceil(8).max(1);
            (*bits, if n > 4 { 8 } else { n })
        }
        _ => return bad_value(col, v),
    };
    let bytes = &raw.to_le_bytes()[..len];
    if algorithm == 1 {
        h.latin1_simple(bytes)
    } else {
        h.bin(bytes)
    }
    Ok(())
}

/// DATE: 3 bytes, `day | month << 5 | year << 9`.
fn hash_date(h: &mut KeyHasher, col: &ColumnDef, v: &Value) -> Result<(), PartitionError> {
    let Value::Date { year, month, day } = v else {
        return bad_value(col, v);
    };
    let packed = u32::from(*day) | (u32::from(*month) << 5) | (u32::from(*year) << 9);
    h.bin(&packed.to_le_bytes()[..3]);
    Ok(())
}

/// MariaDB's default (MySQL 5.6) DATETIME format: 5 bytes big-endian + fraction.
fn hash_datetime(h: &mut KeyHasher, col: &ColumnDef, v: &Value) -> Result<(), PartitionError> {
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
        return bad_value(col, v);
    };
    let ym = u64::from(*year) * 13 + u64::from(*month);
    let ymd = (ym << 5) | u64::from(*day);
    let hms = (u64::from(*hour) << 12) | (u64::from(*minute) << 6) | u64::from(*second);
    let int_part = ((ymd << 17) | hms) + 0x80_0000_0000;
    let mut bytes = int_part.to_be_bytes()[3..].to_vec();
    bytes.extend(frac_bytes(*micros, col.decimals));
    h.bin(&bytes);
    Ok(())
}

/// TIMESTAMP: seconds big-endian + fraction.
fn hash_timestamp(h: &mut KeyHasher, col: &ColumnDef, v: &Value) -> Result<(), PartitionError> {
    let Value::Timestamp { micros } = v else {
        return bad_value(col, v);
    };
    let Ok(secs) = u32::try_from(micros.div_euclid(1_000_000)) else {
        return bad_value(col, v);
    };
    let mut bytes = secs.to_be_bytes().to_vec();
    bytes.extend(frac_bytes(
        micros.rem_euclid(1_000_000) as u32,
        col.decimals,
    ));
    h.bin(&bytes);
    Ok(())
}

/// BINARY (zero-padded to its length), VARBINARY, BLOB: their bytes.
fn hash_binary(h: &mut KeyHasher, col: &ColumnDef, v: &Value) -> Result<(), PartitionError> {
    let mut bytes = match v {
        Value::Bytes(b) => b.clone(),
        Value::Text(s) => s.as_bytes().to_vec(),
        _ => return bad_value(col, v),
    };
    if col.ty == ColumnType::Binary {
        let n = usize::try_from(col.length).unwrap_or(0);
        if bytes.len() < n && n <= 255 {
            bytes.resize(n, 0);
        }
    }
    h.bin(&bytes);
    Ok(())
}

/// Text with the column's collation (a charset alone: its default collation, for the charsets
/// whose default never changed).
fn hash_text(h: &mut KeyHasher, col: &ColumnDef, v: &Value) -> Result<(), PartitionError> {
    let stable = |cs: &str| {
        let cs = cs.to_ascii_lowercase();
        matches!(cs.as_str(), "latin1" | "ascii" | "binary")
            .then(|| builtin_default_collation(&cs))
            .flatten()
    };
    let coll = match (&col.collation, &col.charset) {
        (Some(c), _) => c.to_ascii_lowercase(),
        (None, Some(cs)) if stable(cs).is_some() => stable(cs).unwrap_or_default().to_string(),
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
        _ => return bad_value(col, v),
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
    Ok(())
}

/// LINEAR HASH/KEY: `v & (V-1)` with V the next power of two ≥ n, then `v & (V/2-1)` if ≥ n.
pub(crate) fn linear_part(v: u64, n: usize) -> usize {
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
