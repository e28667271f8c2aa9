//! The layout after an ALTER TABLE partition operation (ADD, DROP, REORGANIZE, COALESCE,
//! REMOVE PARTITIONING, …).

use crate::err;
use crate::parse::*;
use sluice_types::partition::{PartitionDef, PartitionError, PartitionMethod, Partitioning};

pub(crate) fn position_of(parts: &[PartitionDef], name: &str) -> Option<usize> {
    parts.iter().position(|p| p.name.eq_ignore_ascii_case(name))
}

impl Parser<'_> {
    /// `name, name, …`
    pub(crate) fn name_list(&mut self) -> Result<Vec<String>, PartitionError> {
        let mut names = vec![self.ident()?];
        while self.eat_punct(',') {
            names.push(self.ident()?);
        }
        Ok(names)
    }

    pub(crate) fn finish(&mut self) -> Result<(), PartitionError> {
        self.eat_punct(';');
        if self.at_end() {
            Ok(())
        } else {
            self.expected("the end of the partition operation")
        }
    }
}

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
pub(crate) fn apply_alter(
    current: Option<&Partitioning>,
    op: &str,
) -> Result<Option<Partitioning>, PartitionError> {
    let mut p = Parser::new(op)?;
    if p.at_word("PARTITION") && p.peek_at(1).is_some_and(|t| t.is_word("BY")) {
        return parse_clause(op).map(Some);
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
    match verb.as_str() {
        "ADD" => op_add(&mut p, cur, &mut next)?,
        "DROP" => op_drop(&mut p, &mut next)?,
        "COALESCE" => op_coalesce(&mut p, cur, &mut next)?,
        "REORGANIZE" => {
            if op_reorganize(&mut p, cur, &mut next)? {
                return Ok(Some(next));
            }
        }
        "TRUNCATE" | "EXCHANGE" | "ANALYZE" | "CHECK" | "OPTIMIZE" | "REBUILD" | "REPAIR"
        | "DISCARD" | "IMPORT" => {
            p.expect_word("PARTITION")?;
        }
        "CONVERT" => op_convert(&mut p, cur, &mut next)?,
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

fn is_hash_like(p: &Partitioning) -> bool {
    matches!(p.method, PartitionMethod::Hash | PartitionMethod::Key)
}

/// `ADD PARTITION [IF NOT EXISTS] (definitions)` or `ADD PARTITION PARTITIONS n` (HASH/KEY,
/// SYSTEM_TIME); a SYSTEM_TIME table's history partitions go before the current one.
fn op_add(
    p: &mut Parser<'_>,
    cur: &Partitioning,
    next: &mut Partitioning,
) -> Result<(), PartitionError> {
    p.expect_word("PARTITION")?;
    let if_not_exists = p.eat_word("IF");
    if if_not_exists {
        p.expect_word("NOT")?;
        p.expect_word("EXISTS")?;
    }
    let added = if p.eat_word("PARTITIONS") {
        let n = p.number()?;
        if !is_hash_like(cur) && cur.method != PartitionMethod::SystemTime {
            return err("ADD PARTITION PARTITIONS n applies to HASH/KEY partitioning only");
        }
        default_names(cur.partitions.len(), n)?
    } else {
        p.definitions(cur.method, cur.columns.len())?
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
            let at = next.partitions.len() - 1;
            next.partitions.insert(at, d);
        } else {
            next.partitions.push(d);
        }
    }
    Ok(())
}

/// `DROP PARTITION [IF EXISTS] a[, b …]`.
fn op_drop(p: &mut Parser<'_>, next: &mut Partitioning) -> Result<(), PartitionError> {
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
    Ok(())
}

/// `COALESCE PARTITION n` (HASH/KEY): the last `n` partitions go.
fn op_coalesce(
    p: &mut Parser<'_>,
    cur: &Partitioning,
    next: &mut Partitioning,
) -> Result<(), PartitionError> {
    p.expect_word("PARTITION")?;
    let n = p.number()?;
    p.finish()?;
    if !is_hash_like(cur) {
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
    Ok(())
}

/// `REORGANIZE PARTITION a[, b …] INTO (definitions)`; alone, it rebuilds a HASH/KEY table with
/// the default partition count: MariaDB 10.11 leaves one partition, `p0` (checked). True when
/// the layout is final (the alone form).
fn op_reorganize(
    p: &mut Parser<'_>,
    cur: &Partitioning,
    next: &mut Partitioning,
) -> Result<bool, PartitionError> {
    p.expect_word("PARTITION")?;
    if p.eat_punct(';') || p.at_end() {
        if !is_hash_like(cur) {
            return err(
                "REORGANIZE PARTITION without partitions applies to HASH/KEY partitioning only",
            );
        }
        next.partitions = default_names(0, 1)?;
        return Ok(true);
    }
    let names = p.name_list()?;
    p.expect_word("INTO")?;
    let defs = p.definitions(cur.method, cur.columns.len())?;
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
    Ok(false)
}

/// `CONVERT PARTITION p TO TABLE t` or `CONVERT TABLE t TO PARTITION p VALUES …` (MariaDB
/// 10.7+).
fn op_convert(
    p: &mut Parser<'_>,
    cur: &Partitioning,
    next: &mut Partitioning,
) -> Result<(), PartitionError> {
    if p.eat_word("PARTITION") {
        let name = p.ident()?;
        p.expect_word("TO")?;
        p.expect_word("TABLE")?;
        let i = position_of(&next.partitions, &name)
            .ok_or_else(|| PartitionError(format!("CONVERT PARTITION: no partition `{name}`")))?;
        next.partitions.remove(i);
        return Ok(());
    }
    p.expect_word("TABLE")?;
    p.ident()?;
    while p.eat_punct('.') {
        p.ident()?;
    }
    p.expect_word("TO")?;
    let d = p.definition(cur.method, cur.columns.len())?;
    p.finish()?;
    if position_of(&next.partitions, &d.name).is_some() {
        return err(format!(
            "CONVERT TABLE: partition `{}` already exists",
            d.name
        ));
    }
    next.partitions.push(d);
    Ok(())
}
