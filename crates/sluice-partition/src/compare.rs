//! Comparing row values with partition bounds (`RANGE|LIST COLUMNS`), by column type and
//! collation.

use crate::collation::*;
use crate::eval::*;
use crate::{cannot_place, err};
use sluice_types::partition::{BoundValue, PartitionError};
use sluice_types::{ColumnDef, ColumnType, TableSchema, Value};
use std::cmp::Ordering;

pub(crate) fn is_integer_type(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::TinyInt
            | ColumnType::SmallInt
            | ColumnType::MediumInt
            | ColumnType::Int
            | ColumnType::BigInt
    )
}

pub(crate) fn bound_text(b: &BoundValue) -> String {
    match b {
        BoundValue::Int(v) => v.to_string(),
        BoundValue::Text(s) => s.clone(),
        BoundValue::Null => "NULL".to_string(),
        BoundValue::MaxValue => "MAXVALUE".to_string(),
    }
}

pub(crate) fn value_dt(v: &Value) -> Option<Dt> {
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
pub(crate) fn cmp_column(
    col: &ColumnDef,
    v: &Value,
    b: &BoundValue,
) -> Result<Ordering, PartitionError> {
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
pub(crate) fn cmp_tuple(
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
