//! One `[[step]]`: its `op` and the fields each op takes, read into an [`Op`] (the `ddl` kinds,
//! `partition` groups, `faults`, the `x-` extensions; `expect` is read by `expect.rs`).
//!
//! Invariant: a node or table a step names exists (a table: in the world or declared by an
//! earlier `ddl` step), and a field the op does not take is an error.

use std::collections::BTreeSet;

use sluice_types::TableId;
use toml::{Table, Value};

use super::fields::{Fields, Validator};
use super::parse::{qualified, Ctx, Parser};
use super::{
    Ddl, Faults, MessageKind, Op, PartitionGroup, ScenarioError, World, DEFAULT_CHANGEFEED,
    DEFAULT_SETTLE_MAX_MS,
};

impl Parser {
    pub(super) fn step(
        &self,
        number: usize,
        tbl: Table,
        world: &World,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Op, ScenarioError> {
        let op_name = match tbl.get("op") {
            None => return Err(self.err(Ctx::Step(number, ""), "missing field `op`")),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(self.err(Ctx::Step(number, ""), "`op` must be a string")),
        };
        let ctx = Ctx::Step(number, &op_name);
        let mut f = Fields::new(self, ctx, tbl);
        f.take("op");
        let v = Validator {
            parser: self,
            ctx,
            world,
        };

        let op = match op_name.as_str() {
            "create_changefeed" => Op::CreateChangefeed {
                changefeed: f
                    .opt_str("changefeed")?
                    .unwrap_or_else(|| DEFAULT_CHANGEFEED.to_string()),
            },
            "run" => Op::Run {
                ms: f.req_u64("ms")?,
            },
            "settle" => Op::Settle {
                max_ms: f.opt_u64("max-ms")?.unwrap_or(DEFAULT_SETTLE_MAX_MS),
            },
            "write" => self.write_op(&mut f, &v, known)?,
            "ddl" => Op::Ddl(self.ddl(&mut f, &v, known)?),
            "split_table" => {
                let table = v.table(known, f.req_u64("table")?, "table")?;
                let spans = f.req_u64("spans")?;
                if spans == 0 {
                    return Err(self.err(ctx, "`spans` must be at least 1"));
                }
                Op::SplitTable { table, spans }
            }
            "merge_table" => Op::MergeTable {
                table: v.table(known, f.req_u64("table")?, "table")?,
            },
            "move_table" => Op::MoveTable {
                table: v.table(known, f.req_u64("table")?, "table")?,
                to: v.node(&f.req_str("to")?, "to")?,
            },
            "cordon" => Op::Cordon {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "uncordon" => Op::Uncordon {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "hold" | "release" => {
                let point = v.hold_point(&f.req_str("point")?, "point")?;
                let node = v.opt_node(f.opt_str("node")?, "node")?;
                if op_name == "hold" {
                    Op::Hold { point, node }
                } else {
                    Op::Release { point, node }
                }
            }
            "crash" => Op::Crash {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "restart" => Op::Restart {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            "partition" => Op::Partition {
                groups: self.partition(&mut f, &v)?,
            },
            "heal" => Op::Heal,
            "faults" => Op::Faults(self.faults(&mut f, ctx)?),
            "expect" => self.expect(&mut f, &v, known)?,
            "x-move_maintainer" => Op::XMoveMaintainer {
                to: v.node(&f.req_str("to")?, "to")?,
            },
            x if x.starts_with("x-") => match self.x_op(x, &mut f, &v, known)? {
                Some(op) => op,
                None => {
                    return Err(self.err(Ctx::Step(number, ""), format!("unknown op {x:?}")));
                }
            },
            other => {
                return Err(self.err(Ctx::Step(number, ""), format!("unknown op {other:?}")));
            }
        };
        f.finish()?;
        Ok(op)
    }

    /// `write`: rows into a table, in transactions of `txn-rows`, some of them deletes.
    fn write_op(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Op, ScenarioError> {
        let table = v.table(known, f.req_u64("table")?, "table")?;
        let rows = f.req_u64("rows")?;
        let txn_rows = f.opt_u64("txn-rows")?.unwrap_or(1);
        if txn_rows == 0 {
            return Err(self.err(v.ctx, "`txn-rows` must be at least 1"));
        }
        let deletes = f.opt_u64("deletes")?.unwrap_or(0);
        Ok(Op::Write {
            table,
            rows,
            txn_rows,
            deletes,
        })
    }

    /// The extension ops (`x-…`); `None` for an unknown one.
    fn x_op(
        &self,
        name: &str,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Option<Op>, ScenarioError> {
        let ctx = v.ctx;
        let op = match name {
            "x-sink_error" => {
                let node = v.opt_node(f.opt_str("node")?, "node")?;
                let table = match f.opt_u64("table")? {
                    Some(t) => Some(v.table(known, t, "table")?),
                    None => None,
                };
                let count = f.opt_u64("count")?.unwrap_or(1);
                if count == 0 {
                    return Err(self.err(ctx, "`count` must be at least 1"));
                }
                let retryable = f.opt_bool("retryable")?.unwrap_or(true);
                Op::XSinkError {
                    node,
                    table,
                    count,
                    retryable,
                }
            }
            "x-write_txn" => {
                let mut tables = Vec::new();
                for t in f.req_u64_list("tables")? {
                    tables.push(v.table(known, t, "tables")?);
                }
                let txns = f.opt_u64("txns")?.unwrap_or(1);
                let rows = f.req_u64("rows")?;
                if tables.is_empty() || txns == 0 || rows == 0 {
                    return Err(self.err(
                        ctx,
                        "`x-write_txn` needs at least one table, one transaction and one row",
                    ));
                }
                Op::XWriteTxn { tables, txns, rows }
            }
            "x-sink_latency" => Op::XSinkLatency {
                node: v.opt_node(f.opt_str("node")?, "node")?,
                table: v.table(known, f.req_u64("table")?, "table")?,
                ms: f.req_u64("ms")?,
            },
            "x-drop" => {
                let m = f.req_str("message")?;
                let message = MessageKind::parse(&m).ok_or_else(|| {
                    let names: Vec<&str> = MessageKind::ALL.iter().map(|(_, n)| *n).collect();
                    self.err(
                        ctx,
                        format!("unknown `message` kind {m:?} (one of {})", names.join(", ")),
                    )
                })?;
                let from = v.opt_node(f.opt_str("from")?, "from")?;
                let to = v.opt_node(f.opt_str("to")?, "to")?;
                let count = f.opt_u64("count")?.unwrap_or(1);
                if count == 0 {
                    return Err(self.err(ctx, "`count` must be at least 1"));
                }
                Op::XDrop {
                    message,
                    from,
                    to,
                    count,
                }
            }
            "x-pause" => Op::XPause {
                node: v.node(&f.req_str("node")?, "node")?,
                ms: f.req_u64("ms")?,
            },
            "x-pause_changefeed" => Op::XPauseChangefeed {
                changefeed: f
                    .opt_str("changefeed")?
                    .unwrap_or_else(|| DEFAULT_CHANGEFEED.to_string()),
            },
            "x-resume_changefeed" => Op::XResumeChangefeed {
                changefeed: f
                    .opt_str("changefeed")?
                    .unwrap_or_else(|| DEFAULT_CHANGEFEED.to_string()),
            },
            "x-drain" => Op::XDrain {
                node: v.node(&f.req_str("node")?, "node")?,
            },
            _ => return Ok(None),
        };
        Ok(Some(op))
    }

    fn ddl(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &mut BTreeSet<TableId>,
    ) -> Result<Ddl, ScenarioError> {
        let ctx = v.ctx;
        let kind = f.req_str("kind")?;
        let ddl = match kind.as_str() {
            "create_table" => {
                let id = f.req_u64("table")?;
                if id == 0 {
                    return Err(self.err(ctx, "`table` must be a positive table id"));
                }
                let table = TableId(id);
                if known.contains(&table) {
                    return Err(self.err(ctx, format!("table id {id} is already declared")));
                }
                let name = f.req_str("name")?;
                let name = qualified(&name).ok_or_else(|| {
                    self.err(ctx, format!("`name` must be \"schema.table\", not {name:?}"))
                })?;
                let regions = f.opt_u64("regions")?.unwrap_or(1);
                if regions == 0 {
                    return Err(self.err(ctx, "`regions` must be at least 1"));
                }
                known.insert(table);
                Ddl::CreateTable { table, name, regions }
            }
            "drop_table" => Ddl::DropTable { table: v.table(known, f.req_u64("table")?, "table")? },
            "truncate_table" => {
                let table = v.table(known, f.req_u64("table")?, "table")?;
                let id = f.req_u64("new-table")?;
                if id == 0 {
                    return Err(self.err(ctx, "`new-table` must be a positive table id"));
                }
                let new_table = TableId(id);
                if known.contains(&new_table) {
                    return Err(self.err(ctx, format!("`new-table` id {id} is already declared")));
                }
                known.insert(new_table);
                Ddl::TruncateTable { table, new_table }
            }
            "rename_table" => {
                let table = v.table(known, f.req_u64("table")?, "table")?;
                let n = f.req_str("new-name")?;
                let new_name = qualified(&n).ok_or_else(|| {
                    self.err(ctx, format!("`new-name` must be \"schema.table\", not {n:?}"))
                })?;
                Ddl::RenameTable { table, new_name }
            }
            "add_column" => Ddl::AddColumn { table: v.table(known, f.req_u64("table")?, "table")? },
            "create_database" => Ddl::CreateDatabase { database: database(self, ctx, f)? },
            "drop_database" => Ddl::DropDatabase { database: database(self, ctx, f)? },
            "x-create_view" => Ddl::XCreateView { database: database(self, ctx, f)? },
            other => {
                return Err(self.err(
                    ctx,
                    format!(
                        "unknown ddl `kind` {other:?} (one of create_table, drop_table, truncate_table, \
                         rename_table, add_column, create_database, drop_database, x-create_view)"
                    ),
                ))
            }
        };
        Ok(ddl)
    }

    fn partition(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
    ) -> Result<Vec<PartitionGroup>, ScenarioError> {
        let ctx = v.ctx;
        let bad = || self.err(ctx, "`groups` must be a list of lists of node names");
        let groups_val = f
            .take("groups")
            .ok_or_else(|| self.err(ctx, "missing field `groups`"))?;
        let Value::Array(outer) = groups_val else {
            return Err(bad());
        };
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut meta_seen = false;
        let mut groups = Vec::new();
        for g in outer {
            let Value::Array(inner) = g else {
                return Err(bad());
            };
            let mut group = PartitionGroup {
                nodes: Vec::new(),
                meta: false,
            };
            for m in inner {
                let Value::String(name) = m else {
                    return Err(bad());
                };
                if name == "meta" {
                    if meta_seen {
                        return Err(self.err(ctx, "\"meta\" may appear in only one group"));
                    }
                    meta_seen = true;
                    group.meta = true;
                    continue;
                }
                if !v.world.nodes.contains(&name) {
                    return Err(self.err(
                        ctx,
                        format!("`groups` names node {name:?}, which is not in the world"),
                    ));
                }
                if !seen.insert(name.clone()) {
                    return Err(self.err(
                        ctx,
                        format!("node {name:?} appears in more than one place in `groups`"),
                    ));
                }
                group.nodes.push(name);
            }
            groups.push(group);
        }
        Ok(groups)
    }

    fn faults(&self, f: &mut Fields<'_>, ctx: Ctx<'_>) -> Result<Faults, ScenarioError> {
        let drop = f.opt_ratio("drop")?.unwrap_or(0.0);
        let duplicate = f.opt_ratio("duplicate")?.unwrap_or(0.0);
        let reorder = f.opt_bool("reorder")?.unwrap_or(false);
        let delay_ms = match f.take("delay-ms") {
            None => (0, 0),
            Some(Value::Array(a)) => {
                let nums: Vec<u64> = a
                    .iter()
                    .filter_map(|x| match x {
                        Value::Integer(i) if *i >= 0 => u64::try_from(*i).ok(),
                        _ => None,
                    })
                    .collect();
                if nums.len() != 2 || a.len() != 2 {
                    return Err(self.err(
                        ctx,
                        "`delay-ms` must be [min, max] with non-negative integers",
                    ));
                }
                if nums[0] > nums[1] {
                    return Err(self.err(ctx, "`delay-ms` must be [min, max] with min <= max"));
                }
                (nums[0], nums[1])
            }
            Some(_) => {
                return Err(self.err(
                    ctx,
                    "`delay-ms` must be [min, max] with non-negative integers",
                ))
            }
        };
        Ok(Faults {
            drop,
            duplicate,
            reorder,
            delay_ms,
        })
    }
}

fn database(p: &Parser, ctx: Ctx<'_>, f: &mut Fields<'_>) -> Result<String, ScenarioError> {
    let d = f.req_str("database")?;
    if d.is_empty() || d.contains('.') {
        return Err(p.err(
            ctx,
            format!("`database` must be a non-empty name without '.', not {d:?}"),
        ));
    }
    Ok(d)
}
