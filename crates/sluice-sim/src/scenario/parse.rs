//! The parser of a file's top level: the document, `[world]` with its scheduler and tables, the
//! `[[step]]` array (each step read by `step.rs`), and where an error is reported (`Ctx`).
//!
//! Invariant: every error names the file, and the step (1-based) or section it is in.

use std::collections::BTreeSet;

use sluice_types::TableId;
use toml::{Table, Value};

use super::fields::Fields;
use super::{
    QualifiedName, Scenario, ScenarioError, SchedulerConfig, SinkKind, Step, TableDef, World,
};

pub(super) struct Parser {
    pub(super) file: String,
}

/// Where an error is reported: the file's top level, `[world]`, or a step.
#[derive(Clone, Copy)]
pub(super) enum Ctx<'a> {
    Top,
    Section(&'a str),
    Step(usize, &'a str),
}

impl Parser {
    pub(super) fn err(&self, ctx: Ctx<'_>, message: impl Into<String>) -> ScenarioError {
        let message = message.into();
        match ctx {
            Ctx::Top => ScenarioError {
                file: self.file.clone(),
                step: None,
                message,
            },
            Ctx::Section(s) => ScenarioError {
                file: self.file.clone(),
                step: None,
                message: format!("{s}: {message}"),
            },
            Ctx::Step(n, op) => ScenarioError {
                file: self.file.clone(),
                step: Some(n),
                message: if op.is_empty() {
                    message
                } else {
                    format!("op \"{op}\": {message}")
                },
            },
        }
    }

    pub(super) fn scenario(&self, text: &str) -> Result<Scenario, ScenarioError> {
        let root: Table = toml::from_str(text).map_err(|e| {
            self.err(
                Ctx::Top,
                format!("not valid TOML: {}", e.to_string().trim()),
            )
        })?;
        let mut top = Fields::new(self, Ctx::Top, root);
        let name = top.req_str("name")?;
        let description = top.opt_str("description")?;
        let world_tbl = top.req_table("world")?;
        let steps_val = top.take("step");
        top.finish()?;

        let world = self.world(world_tbl)?;
        let mut known: BTreeSet<TableId> = world.tables.iter().map(|t| t.id).collect();
        let mut steps = Vec::new();
        if let Some(v) = steps_val {
            let Value::Array(items) = v else {
                return Err(self.err(Ctx::Top, "`step` must be an array of tables ([[step]])"));
            };
            for (i, item) in items.into_iter().enumerate() {
                let number = i + 1;
                let Value::Table(t) = item else {
                    return Err(
                        self.err(Ctx::Step(number, ""), "a step must be a table ([[step]])")
                    );
                };
                let op = self.step(number, t, &world, &mut known)?;
                steps.push(Step { number, op });
            }
        }
        Ok(Scenario {
            file: self.file.clone(),
            name,
            description,
            world,
            steps,
        })
    }

    fn world(&self, tbl: Table) -> Result<World, ScenarioError> {
        let ctx = Ctx::Section("[world]");
        let mut w = Fields::new(self, ctx, tbl);
        let nodes_val = w
            .take("nodes")
            .ok_or_else(|| self.err(ctx, "missing field `nodes`"))?;
        let Value::Array(items) = nodes_val else {
            return Err(self.err(ctx, "`nodes` must be an array of node names"));
        };
        let mut nodes: Vec<String> = Vec::new();
        for item in items {
            let Value::String(n) = item else {
                return Err(self.err(ctx, "`nodes` must be an array of node names (strings)"));
            };
            if n.is_empty() || n.starts_with('@') || n == "meta" {
                return Err(self.err(
                    ctx,
                    format!("invalid node name {n:?} (empty, starting with '@', or the reserved \"meta\")"),
                ));
            }
            if nodes.contains(&n) {
                return Err(self.err(ctx, format!("node {n:?} is listed twice")));
            }
            nodes.push(n);
        }
        if nodes.is_empty() {
            return Err(self.err(ctx, "`nodes` must name at least one node"));
        }
        let maintainer = w.opt_str("maintainer")?;
        if let Some(m) = &maintainer {
            if !nodes.contains(m) {
                return Err(self.err(
                    ctx,
                    format!("`maintainer` names {m:?}, which is not in `nodes`"),
                ));
            }
        }
        let sink = match w.req_str("sink")?.as_str() {
            "storage" => SinkKind::Storage,
            "mysql" => SinkKind::Mysql,
            "blackhole" => SinkKind::Blackhole,
            other => {
                return Err(self.err(
                    ctx,
                    format!(
                        "`sink` must be \"storage\", \"mysql\" or \"blackhole\", not {other:?}"
                    ),
                ))
            }
        };
        let seed = w.opt_u64("seed")?.unwrap_or(0);
        let x_lease_ms = w.opt_u64("x-lease-ms")?;
        if x_lease_ms == Some(0) {
            return Err(self.err(ctx, "`x-lease-ms` must be positive"));
        }
        let x_memory_quota_bytes = w.opt_u64("x-memory-quota-bytes")?;
        let (x_snapshot, x_snapshot_chunk_rows, x_snapshot_read_window) =
            self.snapshot_fields(&mut w, ctx)?;
        let scheduler = match w.take("scheduler") {
            None => SchedulerConfig::default(),
            Some(Value::Table(t)) => self.scheduler(t)?,
            Some(_) => return Err(self.err(ctx, "`scheduler` must be a table ([world.scheduler])")),
        };
        let tables = self.world_tables(w.take("tables"), ctx)?;
        w.finish()?;
        Ok(World {
            nodes,
            maintainer,
            sink,
            seed,
            scheduler,
            tables,
            x_lease_ms,
            x_memory_quota_bytes,
            x_snapshot,
            x_snapshot_chunk_rows,
            x_snapshot_read_window,
        })
    }

    /// `[[world.tables]]`.
    fn world_tables(
        &self,
        tables: Option<Value>,
        ctx: Ctx,
    ) -> Result<Vec<TableDef>, ScenarioError> {
        Ok(match tables {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out: Vec<TableDef> = Vec::new();
                for (i, item) in items.into_iter().enumerate() {
                    let Value::Table(t) = item else {
                        return Err(self.err(
                            ctx,
                            "`tables` must be an array of tables ([[world.tables]])",
                        ));
                    };
                    let def = self.table_def(i + 1, t)?;
                    if out.iter().any(|o| o.id == def.id) {
                        return Err(self.err(
                            Ctx::Section("[[world.tables]]"),
                            format!("table id {} is declared twice", def.id),
                        ));
                    }
                    out.push(def);
                }
                out
            }
            Some(_) => {
                return Err(self.err(
                    ctx,
                    "`tables` must be an array of tables ([[world.tables]])",
                ))
            }
        })
    }

    /// `x-snapshot`, `x-snapshot-chunk-rows` and `x-snapshot-read` of `[world]`.
    fn snapshot_fields(
        &self,
        w: &mut Fields,
        ctx: Ctx,
    ) -> Result<(sluice_control::config::SnapshotMode, Option<u64>, bool), ScenarioError> {
        let mode = match w.opt_str("x-snapshot")? {
            None => sluice_control::config::SnapshotMode::Never,
            Some(m) => sluice_control::config::SnapshotMode::parse(&m)
                .map_err(|e| self.err(ctx, format!("`x-snapshot`: {e}")))?,
        };
        let rows = w.opt_u64("x-snapshot-chunk-rows")?;
        if rows == Some(0) {
            return Err(self.err(ctx, "`x-snapshot-chunk-rows` must be positive"));
        }
        let window = match w.opt_str("x-snapshot-read")?.as_deref() {
            None | Some("position") => false,
            Some("window") => true,
            Some(other) => {
                return Err(self.err(
                    ctx,
                    format!("`x-snapshot-read` is \"position\" or \"window\", not {other:?}"),
                ))
            }
        };
        Ok((mode, rows, window))
    }

    fn scheduler(&self, tbl: Table) -> Result<SchedulerConfig, ScenarioError> {
        let ctx = Ctx::Section("[world.scheduler]");
        let mut s = Fields::new(self, ctx, tbl);
        let d = SchedulerConfig::default();
        let cfg = SchedulerConfig {
            enable_table_across_nodes: s
                .opt_bool("enable-table-across-nodes")?
                .unwrap_or(d.enable_table_across_nodes),
            region_threshold: s.opt_u64("region-threshold")?.unwrap_or(d.region_threshold),
            region_count_per_span: s
                .opt_u64("region-count-per-span")?
                .unwrap_or(d.region_count_per_span),
            balance: s.opt_bool("balance")?.unwrap_or(d.balance),
            x_write_key_threshold: s
                .opt_u64("x-write-key-threshold")?
                .unwrap_or(d.x_write_key_threshold),
            add_table_batch_size: s
                .opt_u64("add-table-batch-size")?
                .unwrap_or(d.add_table_batch_size),
        };
        if cfg.add_table_batch_size == 0 {
            return Err(self.err(ctx, "`add-table-batch-size` must be positive"));
        }
        if cfg.region_count_per_span == 0 {
            return Err(self.err(ctx, "`region-count-per-span` must be positive"));
        }
        s.finish()?;
        Ok(cfg)
    }

    fn table_def(&self, index: usize, tbl: Table) -> Result<TableDef, ScenarioError> {
        let label = format!("[[world.tables]] #{index}");
        let ctx = Ctx::Section(&label);
        let mut t = Fields::new(self, ctx, tbl);
        let id = t.req_u64("id")?;
        if id == 0 {
            return Err(self.err(ctx, "`id` must be positive"));
        }
        let name = t.req_str("name")?;
        let name = qualified(&name).ok_or_else(|| {
            self.err(
                ctx,
                format!("`name` must be \"schema.table\", not {name:?}"),
            )
        })?;
        let regions = t.opt_u64("regions")?.unwrap_or(1);
        if regions == 0 {
            return Err(self.err(ctx, "`regions` must be at least 1"));
        }
        let rows = t.opt_u64("rows")?.unwrap_or(0);
        t.finish()?;
        Ok(TableDef {
            id: TableId(id),
            name,
            regions,
            rows,
        })
    }
}

pub(super) fn qualified(s: &str) -> Option<QualifiedName> {
    let (schema, table) = s.split_once('.')?;
    if schema.is_empty() || table.is_empty() || table.contains('.') {
        return None;
    }
    Some(QualifiedName {
        schema: schema.to_string(),
        table: table.to_string(),
    })
}
