//! Chunk bounds: where the next chunks of a span's copy end, found ahead of the reads so that
//! several key ranges can be read at once.
//!
//! Any key is a valid bound between two chunks: a range that holds more rows than a chunk is
//! read on from the chunk's cursor, a range that holds fewer is a small chunk. So bounds are
//! estimates, never a consistent read, and only their cost matters:
//! - **spaced** (a table keyed by one integer column whose keys are not too sparse): the key
//!   range divided by the upstream's row estimate (`information_schema.TABLES.TABLE_ROWS`) gives
//!   the key distance of a chunk; two index lookups (`MIN`, `MAX`) and one estimate per probe,
//!   whatever the chunk size;
//! - **counted** (every other key, or no usable estimate): the key of every `rows`-th row
//!   (`ORDER BY key LIMIT 1 OFFSET rows - 1`), which scans the key's index as far as each bound
//!   (for InnoDB's clustered primary key that is the rows themselves: a second pass over the
//!   table on the upstream).
//!
//! Invariants: bounds strictly increase, each after `after`; none is at or past the span's end
//! (tables of [`exact_key_order`]); fewer than `count` only when the keys after the last one
//! are few (the copy then reads the rest as one range, chunk after chunk).

use super::{cursor_at, int_cursor, key_columns, parse_cursor, quote, range_where, CursorValue};
use crate::error::{CaptureError, Result};
use mysql_async::prelude::Queryable;
use mysql_async::Value as M;
use sluice_types::TableSchema;

/// Keys this many times sparser than the rows (or more) are not spaced evenly enough for
/// spaced bounds (one outlier key would make the first range hold the whole table): counted.
const MAX_SPARSENESS: f64 = 1000.0;

/// Where the next `count` chunks of `rows` rows of `table` after `after` end, as cursors (see
/// the module doc). `span` (of a table of [`exact_key_order`](super::exact_key_order)): no bound at or past its end.
pub async fn chunk_bounds(
    conn: &mut mysql_async::Conn,
    table: &TableSchema,
    span: &sluice_types::Span,
    after: Option<&[u8]>,
    (rows, count): (usize, usize),
) -> Result<Vec<Vec<u8>>> {
    let from = parse_cursor(after)?;
    let end = (span.end < sluice_types::Key::table_end(span.table))
        .then(|| cursor_at(table, &span.end))
        .flatten();
    let end = end.as_deref().and_then(int_cursor);
    let last = end.as_ref().and_then(|e| e.first().copied());
    if let Some(b) = spaced_bounds(conn, table, from.as_deref(), last, (rows, count)).await? {
        return Ok(b);
    }
    counted_bounds(conn, table, from, end, (rows, count)).await
}

/// The key of every `rows`-th row after `from`, one index scan each.
async fn counted_bounds(
    conn: &mut mysql_async::Conn,
    table: &TableSchema,
    mut from: Option<Vec<CursorValue>>,
    end: Option<Vec<i128>>,
    (rows, count): (usize, usize),
) -> Result<Vec<Vec<u8>>> {
    let keys = key_columns(table);
    let mut bounds = Vec::new();
    let order: Vec<String> = keys.iter().map(|k| quote(&k.name)).collect();
    while bounds.len() < count && !keys.is_empty() {
        let (w, params) = range_where(&keys, from.as_deref(), None);
        let q = format!(
            "SELECT {} FROM {}.{}{w} ORDER BY {} LIMIT 1 OFFSET {}",
            order.join(", "),
            quote(&table.database),
            quote(&table.name),
            order.join(", "),
            rows.max(1) - 1
        );
        let row: Option<mysql_async::Row> = conn
            .exec_first(q, params)
            .await
            .map_err(CaptureError::from_mysql)?;
        let Some(row) = row else { break };
        let vals: Vec<CursorValue> = (0..keys.len())
            .map(|j| row.as_ref(j).map_or(CursorValue::Null, CursorValue::of))
            .collect();
        let bound = serde_json::to_vec(&vals).unwrap_or_default();
        // Past the span's end (integer keys: `end` is its last key).
        if matches!((int_cursor(&bound), &end), (Some(b), Some(e)) if b > *e) {
            break;
        }
        bounds.push(bound);
        from = Some(vals);
    }
    Ok(bounds)
}

/// Bounds a chunk's key distance apart, for a table keyed by one integer column whose keys are
/// dense enough; `None` where that does not apply (counted bounds then).
async fn spaced_bounds(
    conn: &mut mysql_async::Conn,
    table: &TableSchema,
    from: Option<&[CursorValue]>,
    end: Option<i128>,
    (rows, count): (usize, usize),
) -> Result<Option<Vec<Vec<u8>>>> {
    let [key] = table.key_columns[..] else {
        return Ok(None);
    };
    if !super::exact_key_order(table) {
        return Ok(None);
    }
    let e = CaptureError::from_mysql;
    let k = quote(&table.columns[key].name);
    let (db, t) = (quote(&table.database), quote(&table.name));
    let q = format!("SELECT MIN({k}), MAX({k}) FROM {db}.{t}");
    let row: Option<mysql_async::Row> = conn.query_first(q).await.map_err(e)?;
    let key_at = |j: usize| row.as_ref().and_then(|r| r.as_ref(j)).and_then(int_value);
    let (Some(min), Some(max)) = (key_at(0), key_at(1)) else {
        return Ok(Some(Vec::new())); // an empty table: the rest is one (empty) range
    };
    let estimate: Option<u64> = conn
        .exec_first(
            "SELECT TABLE_ROWS FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (table.database.clone(), table.name.clone()),
        )
        .await
        .map_err(e)?
        .flatten();
    let Some(step) = key_step(min, max, estimate, rows) else {
        return Ok(None);
    };
    let start = match from {
        Some([v]) => match int_value(&v.param()) {
            Some(v) => v,
            None => return Ok(None),
        },
        Some(_) => return Ok(None),
        None => min - 1,
    };
    let unsigned = table.columns[key].unsigned;
    Ok(Some(spaced(
        start,
        max.min(end.unwrap_or(max)),
        step,
        count,
        unsigned,
    )))
}

/// The key distance of a chunk of `rows` rows, from the keys' range and the upstream's row
/// estimate; `None` without a usable estimate or for keys too sparse (see
/// [`MAX_SPARSENESS`]). Never below `rows`: integer keys hold at most one row each.
fn key_step(min: i128, max: i128, estimate: Option<u64>, rows: usize) -> Option<i128> {
    let estimate = estimate.filter(|n| *n > 0)? as f64;
    let sparseness = (max - min + 1) as f64 / estimate;
    if sparseness > MAX_SPARSENESS {
        return None;
    }
    let step = (rows.max(1) as f64 * sparseness.max(1.0)).round() as i128;
    Some(step.max(rows.max(1) as i128))
}

/// Up to `count` bounds `step` apart after `start`, each below `last` (the range after the last
/// bound runs to the span's end whatever it holds).
fn spaced(start: i128, last: i128, step: i128, count: usize, unsigned: bool) -> Vec<Vec<u8>> {
    (1..=count as i128)
        .map(|i| start + i * step)
        .take_while(|b| *b < last)
        .map(|b| {
            let v = match unsigned {
                true => CursorValue::UInt(b as u64),
                false => CursorValue::Int(b as i64),
            };
            serde_json::to_vec(&[v]).unwrap_or_default()
        })
        .collect()
}

fn int_value(v: &M) -> Option<i128> {
    match v {
        M::Int(i) => Some(i128::from(*i)),
        M::UInt(u) => Some(i128::from(*u)),
        M::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(bounds: &[Vec<u8>]) -> Vec<i128> {
        bounds
            .iter()
            .map(|b| int_cursor(b).expect("an integer cursor")[0])
            .collect()
    }

    #[test]
    fn dense_keys_are_cut_a_chunk_apart() {
        let step = key_step(1, 1_000_000, Some(1_000_000), 8192).expect("dense keys");
        assert_eq!(step, 8192);
        assert_eq!(
            ints(&spaced(0, 1_000_000, step, 4, false)),
            [8192, 16384, 24576, 32768]
        );
    }

    #[test]
    fn sparser_keys_are_cut_further_apart_and_too_sparse_ones_are_counted() {
        assert_eq!(key_step(1, 100_000, Some(10_000), 100), Some(1000));
        assert_eq!(
            key_step(0, 1 << 40, Some(1_000), 100),
            None,
            "one outlier key"
        );
        assert_eq!(key_step(1, 10, None, 100), None, "no estimate");
        assert_eq!(
            key_step(1, 10, Some(0), 100),
            None,
            "an estimate of nothing"
        );
    }

    #[test]
    fn a_stale_estimate_above_the_keys_never_cuts_below_a_chunk() {
        assert_eq!(key_step(1, 1_000, Some(1_000_000), 100), Some(100));
    }

    #[test]
    fn bounds_stop_before_the_last_key_and_the_spans_end() {
        assert_eq!(ints(&spaced(0, 250, 100, 4, false)), [100, 200]);
        assert_eq!(
            ints(&spaced(0, 200, 100, 4, false)),
            [100],
            "none at the last key"
        );
        assert!(
            spaced(500, 250, 100, 4, false).is_empty(),
            "after the last key: the rest"
        );
        assert_eq!(ints(&spaced(-1_000, 0, 300, 9, false)), [-700, -400, -100]);
        assert_eq!(
            ints(&spaced(0, 1 << 62, 1 << 60, 2, true)),
            [1 << 60, 1 << 61]
        );
    }
}
