//! Placing a row in a partition: [`Placer`] holds a layout with its expression parsed once
//! (per table version), and finds the partition the upstream stores a row in.

use crate::compare::{bound_text, cmp_tuple};
use crate::eval::{column_index, eval, row_value, EV};
use crate::key_hash::{key_hash_column, linear_part, KeyHasher};
use crate::parse::{Expr, Parser};
use crate::{cannot_place, err};
use sluice_types::partition::{BoundValue, PartitionError, PartitionMethod, Partitioning};
use sluice_types::{TableSchema, Value};
use std::cmp::Ordering;

/// A partition layout ready to place rows: the RANGE/LIST/HASH expression parsed once (its
/// parse error, if any, is every placement's error, as when it was parsed per row).
#[derive(Clone, Debug)]
pub struct Placer {
    layout: Partitioning,
    expr: Result<Option<Expr>, PartitionError>,
}

impl Placer {
    pub fn new(layout: &Partitioning) -> Placer {
        let expr = match layout.method {
            PartitionMethod::Range | PartitionMethod::List | PartitionMethod::Hash => {
                Parser::new(&layout.expr)
                    .and_then(|mut p| p.whole_expr())
                    .map(Some)
            }
            _ => Ok(None),
        };
        Placer {
            layout: layout.clone(),
            expr,
        }
    }

    /// The layout this placer places rows by.
    pub fn layout(&self) -> &Partitioning {
        &self.layout
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
        let p = &self.layout;
        if let Some(why) = &p.unsupported {
            return cannot_place(format!("partitioning of {table} is not supported: {why}"));
        }
        if p.partitions.is_empty() {
            return cannot_place(format!("partitioning of {table} has no partitions"));
        }
        match p.method {
            PartitionMethod::Range => self.place_range(schema, row),
            PartitionMethod::List => self.place_list(schema, row),
            PartitionMethod::RangeColumns => self.place_range_columns(schema, row),
            PartitionMethod::ListColumns => self.place_list_columns(schema, row),
            PartitionMethod::Hash => self.place_hash(schema, row),
            PartitionMethod::Key => self.place_key(schema, row),
            PartitionMethod::SystemTime => cannot_place(format!(
                "{table} is partitioned BY SYSTEM_TIME (system-versioned history), which Sluice does not support"
            )),
            PartitionMethod::Unsupported => {
                cannot_place(format!("partitioning of {table} is not supported"))
            }
        }
    }

    fn expr_value(&self, schema: &TableSchema, row: &[Value]) -> Result<EV, PartitionError> {
        match &self.expr {
            Ok(Some(e)) => eval(e, Some((schema, row))),
            Ok(None) => err("this partitioning has no expression"),
            Err(e) => Err(e.clone()),
        }
    }

    /// The expression's value as an integer (`None`: NULL).
    fn int_value(
        &self,
        schema: &TableSchema,
        row: &[Value],
    ) -> Result<Option<i128>, PartitionError> {
        match self.expr_value(schema, row)? {
            EV::Null => Ok(None),
            EV::Int(v) => Ok(Some(v)),
            other => cannot_place(format!(
                "partition expression of {} is {}, not an integer",
                schema.qualified_name(),
                other.kind()
            )),
        }
    }

    fn column_indexes(&self, schema: &TableSchema) -> Result<Vec<usize>, PartitionError> {
        self.layout
            .columns
            .iter()
            .map(|c| column_index(schema, c))
            .collect()
    }

    /// `RANGE (expr)`: the first partition whose bound is above the value; NULL: the first.
    fn place_range(&self, schema: &TableSchema, row: &[Value]) -> Result<usize, PartitionError> {
        let Some(v) = self.int_value(schema, row)? else {
            return Ok(0);
        };
        for (i, p) in self.layout.partitions.iter().enumerate() {
            match p.less_than.first() {
                Some(BoundValue::MaxValue) => return Ok(i),
                Some(BoundValue::Int(b)) if v < *b => return Ok(i),
                Some(BoundValue::Int(_)) => {}
                _ => {
                    return err(format!(
                        "RANGE partition `{}` of {} has no integer bound",
                        p.name,
                        schema.qualified_name()
                    ))
                }
            }
        }
        no_partition(schema, format!("value {v}"))
    }

    /// `LIST (expr)`: the partition listing the value, else the DEFAULT partition.
    fn place_list(&self, schema: &TableSchema, row: &[Value]) -> Result<usize, PartitionError> {
        let v = match self.int_value(schema, row)? {
            None => BoundValue::Null,
            Some(v) => BoundValue::Int(v),
        };
        let parts = &self.layout.partitions;
        if let Some(i) = parts
            .iter()
            .position(|p| p.values_in.iter().any(|t| t.first() == Some(&v)))
        {
            return Ok(i);
        }
        match parts.iter().position(|p| p.default_list) {
            Some(i) => Ok(i),
            None => no_partition(schema, format!("value {}", bound_text(&v))),
        }
    }

    fn place_range_columns(
        &self,
        schema: &TableSchema,
        row: &[Value],
    ) -> Result<usize, PartitionError> {
        let cols = self.column_indexes(schema)?;
        for (i, p) in self.layout.partitions.iter().enumerate() {
            if cmp_tuple(schema, row, &cols, &p.less_than)? == Ordering::Less {
                return Ok(i);
            }
        }
        no_partition(schema, "this row's values".to_string())
    }

    fn place_list_columns(
        &self,
        schema: &TableSchema,
        row: &[Value],
    ) -> Result<usize, PartitionError> {
        let cols = self.column_indexes(schema)?;
        for (i, p) in self.layout.partitions.iter().enumerate() {
            for t in &p.values_in {
                if cmp_tuple(schema, row, &cols, t)? == Ordering::Equal {
                    return Ok(i);
                }
            }
        }
        match self.layout.partitions.iter().position(|p| p.default_list) {
            Some(i) => Ok(i),
            None => no_partition(schema, "this row's values".to_string()),
        }
    }

    /// `[LINEAR] HASH (expr)`: the server takes the value as a signed 64-bit integer (NULL:
    /// LONGLONG_MIN).
    fn place_hash(&self, schema: &TableSchema, row: &[Value]) -> Result<usize, PartitionError> {
        let n = self.layout.partitions.len();
        let v: i64 = match self.int_value(schema, row)? {
            None => i64::MIN,
            Some(v) if (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&v) => v as i64,
            Some(v) => {
                return cannot_place(format!(
                    "HASH value {v} of {} is out of the BIGINT range",
                    schema.qualified_name()
                ))
            }
        };
        Ok(if self.layout.linear {
            linear_part(v as u64, n)
        } else {
            (v % n as i64).unsigned_abs() as usize
        })
    }

    /// `[LINEAR] KEY (cols)`: the server hashes the fields in table order, whatever the order
    /// of the KEY list or of the primary key (checked: KEY (s, a) hashes a, then s).
    fn place_key(&self, schema: &TableSchema, row: &[Value]) -> Result<usize, PartitionError> {
        let table = schema.qualified_name();
        let n = self.layout.partitions.len();
        let mut cols = if self.layout.columns.is_empty() {
            if schema.key_columns.is_empty() {
                return cannot_place(format!(
                    "KEY () partitioning of {table}: the schema records no primary key"
                ));
            }
            schema.key_columns.clone()
        } else {
            self.column_indexes(schema)?
        };
        cols.sort_unstable();
        cols.dedup();
        let mut h = KeyHasher { nr1: 1, nr2: 4 };
        for idx in cols {
            let v = row_value(schema, row, idx)?;
            let col = schema.columns.get(idx).ok_or_else(|| {
                PartitionError(format!("key column {idx} of {table} does not exist"))
            })?;
            key_hash_column(&mut h, col, v, self.layout.key_algorithm)?;
        }
        let hash = h.nr1 & 0xFFFF_FFFF;
        Ok(if self.layout.linear {
            linear_part(hash, n)
        } else {
            (hash % n as u64) as usize
        })
    }
}

fn no_partition<T>(schema: &TableSchema, what: String) -> Result<T, PartitionError> {
    cannot_place(format!(
        "no partition of {} holds {what} (the server would have refused this row)",
        schema.qualified_name()
    ))
}
