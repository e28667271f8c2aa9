//! Regions: split points of a table's key space from the upstream's statistics, for the split
//! scheduler. A table of `DATA_LENGTH` bytes gets `ceil(DATA_LENGTH / region_size)` regions
//! (at most [`RegionConfig::max_regions`]), cut at evenly spaced rows of its key order, found
//! with one index scan (`ROW_NUMBER() OVER (ORDER BY key)`).
//!
//! Invariants: boundaries are row keys of the table ([`crate::keys::row_key`] over the routing
//! key, same encoding as captured rows), strictly increasing and strictly inside
//! `Span::whole_table`, so `Span::whole_table(t).split_at(&boundaries)` partitions the table
//! whatever the statistics say; a table without a routing key has no boundaries (one span).
//! Statistics only steer balance, never correctness.

use crate::error::{CaptureError, Result};
use crate::keys::row_key;
use mysql_async::prelude::Queryable;
use sluice_types::{ColumnType, Key, TableSchema, Value};

#[derive(Clone, Debug)]
pub struct RegionConfig {
    /// Target bytes per region (`region-size`).
    pub region_size: u64,
    /// Upper bound on regions per table.
    pub max_regions: u64,
}

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig {
            region_size: 96 << 20,
            max_regions: 4096,
        }
    }
}

fn quote(id: &str) -> String {
    format!("`{}`", id.replace('`', "``"))
}

/// The upstream's estimate of the rows of `table` (`TABLE_ROWS` of its statistics; 0 when it
/// has none).
pub async fn table_rows(conn: &mut mysql_async::Conn, table: &TableSchema) -> Result<u64> {
    let rows: Option<Option<u64>> = conn
        .exec_first(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (table.database.clone(), table.name.clone()),
        )
        .await
        .map_err(CaptureError::from_mysql)?;
    Ok(rows.flatten().unwrap_or(0))
}

/// The upstream's statistics of `table`: `DATA_LENGTH` and `TABLE_ROWS` (0 where it has none).
pub async fn table_stats(conn: &mut mysql_async::Conn, table: &TableSchema) -> Result<(u64, u64)> {
    let stats: Option<(Option<u64>, Option<u64>)> = conn
        .exec_first(
            "SELECT DATA_LENGTH, TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (table.database.clone(), table.name.clone()),
        )
        .await
        .map_err(CaptureError::from_mysql)?;
    Ok(stats
        .map(|(b, r)| (b.unwrap_or(0), r.unwrap_or(0)))
        .unwrap_or((0, 0)))
}

/// How many regions a table of `bytes` (`DATA_LENGTH`) is cut into.
pub fn region_count(bytes: u64, cfg: &RegionConfig) -> u64 {
    bytes
        .div_ceil(cfg.region_size.max(1))
        .clamp(1, cfg.max_regions.max(1))
}

/// Interior region boundaries of `table` (sorted, deduplicated).
pub async fn table_regions(
    conn: &mut mysql_async::Conn,
    table: &TableSchema,
    cfg: &RegionConfig,
) -> Result<Vec<Key>> {
    if table.key_columns.is_empty() {
        return Ok(Vec::new());
    }
    let (bytes, rows) = table_stats(conn, table).await?;
    regions_at(conn, table, region_count(bytes, cfg), rows).await
}

/// Interior boundaries of `regions` regions of `table` (of about `rows` rows): one scan of its
/// key in order (a window function over the whole table: costly on a large one, so the caller
/// scans again only when the statistics moved).
pub async fn regions_at(
    conn: &mut mysql_async::Conn,
    table: &TableSchema,
    regions: u64,
    rows: u64,
) -> Result<Vec<Key>> {
    let e = CaptureError::from_mysql;
    if table.key_columns.is_empty() || regions <= 1 || rows == 0 {
        return Ok(Vec::new());
    }
    // Collation ids of the key columns (key weights use ids, the schema has names).
    let mut spec = Vec::new();
    for i in &table.key_columns {
        let c = &table.columns[*i];
        let id: u16 = match &c.collation {
            Some(name) => conn
                .exec_first(
                    "SELECT ID FROM information_schema.COLLATIONS WHERE COLLATION_NAME = ?",
                    (name.clone(),),
                )
                .await
                .map_err(e)?
                .unwrap_or(0),
            None => 0,
        };
        spec.push((*i, id));
    }
    let cols: Vec<String> = table
        .key_columns
        .iter()
        .map(|i| quote(&table.columns[*i].name))
        .collect();
    let cols = cols.join(", ");
    // Row `rn` (1-based) of `cnt` starts region `floor((rn - 1) * regions / cnt)`; keep the
    // first row of every region but the first. Exact counts come from the same scan.
    let q = format!(
        "SELECT {cols} FROM (SELECT {cols}, ROW_NUMBER() OVER (ORDER BY {cols}) AS sluice_rn, \
         COUNT(*) OVER () AS sluice_cnt FROM {}.{}) x \
         WHERE sluice_rn > 1 AND FLOOR((sluice_rn - 1) * {regions} / sluice_cnt) > FLOOR((sluice_rn - 2) * {regions} / sluice_cnt) \
         ORDER BY sluice_rn",
        quote(&table.database),
        quote(&table.name)
    );
    let rows: Vec<mysql_async::Row> = conn.query(q).await.map_err(e)?;
    let mut out: Vec<Key> = Vec::with_capacity(rows.len());
    let start = Key::table_start(table.table_id);
    for r in rows {
        let mut vals = vec![Value::Null; table.columns.len()];
        let mut ok = true;
        for (j, (i, _)) in spec.iter().enumerate() {
            match to_value(&table.columns[*i], r.as_ref(j)) {
                Some(v) => vals[*i] = v,
                None => ok = false,
            }
        }
        if !ok {
            // A key type this sampler cannot convert: no split points rather than wrong ones.
            return Ok(Vec::new());
        }
        let k = row_key(table.table_id, &vals, &spec);
        if k > start && out.last().is_none_or(|l| *l < k) {
            out.push(k);
        }
    }
    Ok(out)
}

/// Converts a sampled key value into the [`Value`] the binlog decoder produces for the column.
fn to_value(c: &sluice_types::ColumnDef, v: Option<&mysql_async::Value>) -> Option<Value> {
    use mysql_async::Value as V;
    let v = v?;
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
    Some(match (c.ty, v) {
        (_, V::NULL) => Value::Null,
        (
            ColumnType::TinyInt
            | ColumnType::SmallInt
            | ColumnType::MediumInt
            | ColumnType::Int
            | ColumnType::BigInt,
            v,
        ) => {
            let s = match v {
                V::Int(i) => i.to_string(),
                V::UInt(u) => u.to_string(),
                V::Bytes(b) => text(b)?,
                _ => return None,
            };
            if c.unsigned {
                Value::UInt(s.parse().ok()?)
            } else {
                Value::Int(s.parse().ok()?)
            }
        }
        (ColumnType::Decimal, V::Bytes(b)) => Value::Decimal(text(b)?),
        (ColumnType::Char | ColumnType::VarChar | ColumnType::Text, V::Bytes(b)) => {
            Value::Text(text(b)?)
        }
        (ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob, V::Bytes(b)) => {
            Value::Bytes(b.clone())
        }
        _ => return None,
    })
}
