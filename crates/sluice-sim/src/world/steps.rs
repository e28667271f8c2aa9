//! Running one scenario step: each operation of the scenario format turned into what the world
//! does (requests to the control plane, upstream writes and DDLs, faults, expectations).
//!
//! Invariant: a step's failure names the step; an `expect` under random faults (explore) is
//! skipped but its time window still passes, so the file's timing is kept.

use super::*;

impl Sim {
    pub(super) fn run_step_inner(&mut self, idx: usize) -> Result<(), Failure> {
        let step = self.sc.steps[idx].clone();
        let number = step.number;
        let fail = |m: String| Failure {
            step: Some(number),
            message: m,
        };
        let now = self.now;
        self.note(format!("{now} step {}: {}", step.number, step.op.name()));
        match &step.op {
            Op::CreateChangefeed { changefeed } => self.create_changefeed(changefeed, now),
            Op::Run { ms } => self.advance(now + ms).map_err(|f| at_step(number, f))?,
            Op::Settle { max_ms } => self.settle(*max_ms).map_err(fail)?,
            Op::Write {
                table,
                rows,
                txn_rows,
                deletes,
            } => {
                self.upstream
                    .write(&mut self.rng, *table, *rows, *txn_rows, *deletes);
                self.checker.register(&self.upstream);
            }
            Op::XWriteTxn { tables, txns, rows } => {
                self.upstream
                    .write_txns(&mut self.rng, tables, *txns, *rows);
                self.checker.register(&self.upstream);
            }
            Op::Ddl(d) => self.upstream_ddl(d),
            Op::SplitTable { .. } | Op::MergeTable { .. } | Op::MoveTable { .. } => {
                self.table_request(&step.op).map_err(fail)?
            }
            Op::Cordon { node } | Op::Uncordon { node } | Op::XDrain { node } => {
                self.cordon_step(&step.op, node, now).map_err(fail)?
            }
            Op::Hold { point, node } => self.hold(*point, node, true).map_err(fail)?,
            Op::Release { point, node } => self.hold(*point, node, false).map_err(fail)?,
            Op::Crash { node } => {
                let n = self.resolve(node).map_err(fail)?;
                self.cover("crash");
                *self.fault_counts.entry("crash").or_default() += 1;
                self.kill_node(&n, "crashed");
            }
            Op::Restart { node } => {
                let n = self.resolve(node).map_err(fail)?;
                if !self.alive(&n) {
                    if let Some(x) = self.nodes.get_mut(&n) {
                        x.fenced = false;
                    }
                    self.start_node(&n, 5);
                }
            }
            Op::Partition { groups } => self.partition_step(groups),
            Op::Heal => self.partition = None,
            Op::Faults(f) => {
                self.faults = FaultConfig {
                    drop: f.drop,
                    duplicate: f.duplicate,
                    reorder: f.reorder,
                    delay: f.delay_ms,
                };
            }
            Op::Expect {
                condition,
                within_ms,
            } => self.expect_step(condition, *within_ms, now, number)?,
            Op::XMoveMaintainer { to } => {
                let to = self.resolve(to).map_err(fail)?;
                self.request(UserRequest::MoveMaintainer {
                    cf: self.cf.clone(),
                    to: NodeId::new(to),
                });
            }
            Op::XSinkError { .. } | Op::XSinkLatency { .. } | Op::XDrop { .. } => {
                self.sink_rule(&step.op).map_err(fail)?
            }
            Op::XPause { node, ms } => {
                let n = self.resolve(node).map_err(fail)?;
                *self.fault_counts.entry("pause").or_default() += 1;
                if let Some(x) = self.nodes.get_mut(&n) {
                    x.paused_until = now + ms;
                }
            }
            Op::XPauseChangefeed { changefeed } => {
                self.checker.restarted = true;
                self.request(UserRequest::PauseChangefeed {
                    cf: ChangefeedId::new(changefeed.as_str()),
                });
            }
            Op::XResumeChangefeed { changefeed } => self.request(UserRequest::ResumeChangefeed {
                cf: ChangefeedId::new(changefeed.as_str()),
            }),
        }
        Ok(())
    }

    /// The changefeed starts at the upstream's head, with the world's sink and scheduler.
    fn create_changefeed(&mut self, changefeed: &str, now: Millis) {
        self.cf = ChangefeedId::new(changefeed);
        let start = self.upstream.head;
        let copies = self.sc.world.x_snapshot != sluice_control::config::SnapshotMode::Never;
        if self.checker.start_ts.is_none() {
            self.downstream = match copies {
                true => Downstream::empty_tables(self.sc.world.sink, &self.upstream, start),
                false => Downstream::baseline(self.sc.world.sink, &self.upstream, start),
            };
        }
        self.checker.set_start(start, &self.upstream);
        self.created = true;
        let w = &self.sc.world;
        let config = ChangefeedConfig {
            sink_dispatchers: Vec::new(),
            snapshot: sluice_control::config::SnapshotConfig {
                mode: w.x_snapshot,
                chunk_rows: w
                    .x_snapshot_chunk_rows
                    .map_or(sluice_control::config::DEFAULT_SNAPSHOT_CHUNK_ROWS, |n| {
                        n as usize
                    }),
            },
            sink_uri: format!("model://{:?}", w.sink).to_lowercase(),
            start_ts: start,
            scheduler: SchedulerConfig {
                enable_table_across_nodes: w.scheduler.enable_table_across_nodes,
                region_threshold: w.scheduler.region_threshold,
                region_count_per_span: w.scheduler.region_count_per_span,
                balance: w.scheduler.balance,
                write_key_threshold: w.scheduler.x_write_key_threshold,
                add_table_batch_size: w.scheduler.add_table_batch_size as usize,
            },
            preferred_node: w.maintainer.as_ref().map(|m| NodeId::new(m.as_str())),
            filter: Default::default(),
        };
        let req = UserRequest::CreateChangefeed {
            cf: self.cf.clone(),
            config,
        };
        self.create = Some((req.clone(), now));
        self.request(req);
    }

    /// A DDL upstream; tables it creates get their regions at every node.
    fn upstream_ddl(&mut self, d: &scenario::Ddl) {
        let (kind, table, new_table, name, regions, db) = ddl_parts(d);
        let (_, created) = self.upstream.ddl(kind, table, new_table, name, regions, db);
        for (t, r) in created {
            let names: Vec<String> = self.nodes.keys().cloned().collect();
            for n in names {
                self.deliver_now(
                    &n,
                    Input::Regions {
                        table: t,
                        regions: region_boundaries(t, r),
                        rows: 0,
                    },
                );
            }
        }
        self.checker.register(&self.upstream);
    }

    /// `split_table`, `merge_table`, `move_table`.
    fn table_request(&mut self, op: &Op) -> Result<(), String> {
        let req = match op {
            Op::SplitTable { table, spans } => {
                let req = TableRequest::Split {
                    table: *table,
                    spans: *spans as usize,
                };
                self.table_requests_in_flight.push(req.clone());
                req
            }
            Op::MergeTable { table } => {
                self.checker.on_user_merge(*table);
                TableRequest::Merge { table: *table }
            }
            Op::MoveTable { table, to } => TableRequest::Move {
                table: *table,
                to: NodeId::new(self.resolve(to)?),
            },
            _ => return Ok(()),
        };
        self.request(UserRequest::Table {
            cf: self.cf.clone(),
            req,
        });
        Ok(())
    }

    /// `cordon`, `uncordon` and `x-drain` of `node`.
    fn cordon_step(&mut self, op: &Op, node: &NodeRef, now: Millis) -> Result<(), String> {
        let n = self.resolve(node)?;
        if matches!(op, Op::XDrain { .. }) {
            self.cordons.insert(n.clone(), (Some("drain"), now));
            self.request(UserRequest::Drain {
                node: NodeId::new(n),
            });
            return Ok(());
        }
        let on = matches!(op, Op::Cordon { .. });
        self.cordons
            .insert(n.clone(), (on.then_some("cordon"), now));
        self.request(UserRequest::Cordon {
            node: NodeId::new(n),
            on,
        });
        Ok(())
    }

    /// A network partition into `groups` (nodes named in no group form one more group).
    fn partition_step(&mut self, groups: &[scenario::PartitionGroup]) {
        let mut gs = Vec::new();
        let mut meta = None;
        for (i, g) in groups.iter().enumerate() {
            gs.push(g.nodes.iter().cloned().collect::<BTreeSet<String>>());
            if g.meta {
                meta = Some(i);
            }
        }
        self.partition = Some((gs, meta));
        self.cover("partition");
        *self.fault_counts.entry("partition").or_default() += 1;
    }

    /// `expect`: the condition holds now, or within the window; skipped under random faults
    /// (explore) except checks, the window still passing until it holds.
    fn expect_step(
        &mut self,
        condition: &Condition,
        within_ms: Option<Millis>,
        now: Millis,
        number: usize,
    ) -> Result<(), Failure> {
        let fail = |m: String| Failure {
            step: Some(number),
            message: m,
        };
        if self.explore && !matches!(condition, Condition::Check(_)) {
            self.skipped_expects += 1;
            if let Some(ms) = within_ms {
                let deadline = now + ms;
                while self.now < deadline && self.condition(condition).is_err() {
                    let next = (self.now + TICK_MS / 2).min(deadline);
                    self.advance(next).map_err(|f| at_step(number, f))?;
                }
            }
            return Ok(());
        }
        let Some(ms) = within_ms else {
            return self
                .condition(condition)
                .map_err(|m| fail(format!("expect failed: {m}")));
        };
        let deadline = now + ms;
        loop {
            match self.condition(condition) {
                Ok(()) => return Ok(()),
                Err(m) if self.now >= deadline => {
                    return Err(fail(format!("expect not met within {ms} ms: {m}")))
                }
                Err(_) => {
                    let next = (self.now + TICK_MS / 2).min(deadline);
                    self.advance(next).map_err(|f| at_step(number, f))?;
                }
            }
        }
    }

    /// `x-sink-error`, `x-sink-latency`, `x-drop`: rules the world applies from now on.
    fn sink_rule(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::XSinkError {
                node,
                table,
                count,
                retryable,
            } => {
                let node = self.resolve_opt(node.as_ref())?;
                self.sink_errors.push(SinkErrorRule {
                    node,
                    table: *table,
                    left: *count,
                    retryable: *retryable,
                });
            }
            Op::XSinkLatency { node, table, ms } => {
                let node = self.resolve_opt(node.as_ref())?;
                if *ms == 0 {
                    self.sink_latency.remove(&(node, *table));
                } else {
                    self.sink_latency.insert((node, *table), *ms);
                }
            }
            Op::XDrop {
                message,
                from,
                to,
                count,
            } => {
                let from = self.resolve_opt(from.as_ref())?;
                let to = self.resolve_opt(to.as_ref())?;
                self.drops.push(DropRule {
                    kind: message.name(),
                    from,
                    to,
                    left: *count,
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn resolve_opt(&self, r: Option<&NodeRef>) -> Result<Option<String>, String> {
        r.map(|r| self.resolve(r)).transpose()
    }
}

fn at_step(number: usize, f: Failure) -> Failure {
    Failure {
        step: Some(number),
        ..f
    }
}

type DdlParts = (
    &'static str,
    Option<TableId>,
    Option<TableId>,
    Option<String>,
    u64,
    Option<String>,
);

/// What the model upstream's `ddl` takes: (kind, table, new table, name, regions, database).
fn ddl_parts(d: &scenario::Ddl) -> DdlParts {
    use scenario::Ddl;
    match d {
        Ddl::CreateTable {
            table,
            name,
            regions,
        } => (
            "create_table",
            Some(*table),
            None,
            Some(name.to_string()),
            *regions,
            None,
        ),
        Ddl::DropTable { table } => ("drop_table", Some(*table), None, None, 1, None),
        Ddl::TruncateTable { table, new_table } => (
            "truncate_table",
            Some(*table),
            Some(*new_table),
            None,
            1,
            None,
        ),
        Ddl::RenameTable { table, new_name } => (
            "rename_table",
            Some(*table),
            None,
            Some(new_name.to_string()),
            1,
            None,
        ),
        Ddl::AddColumn { table } => ("add_column", Some(*table), None, None, 1, None),
        Ddl::CreateDatabase { database } => (
            "create_database",
            None,
            None,
            None,
            1,
            Some(database.clone()),
        ),
        Ddl::DropDatabase { database } => {
            ("drop_database", None, None, None, 1, Some(database.clone()))
        }
        Ddl::XCreateView { database } => {
            ("x-create_view", None, None, None, 1, Some(database.clone()))
        }
    }
}
