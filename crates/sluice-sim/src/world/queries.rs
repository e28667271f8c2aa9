//! Views of the world for steps, expectations and the explorer: the coordinator and the current
//! maintainer, the persisted checkpoint, the node aliases (`@maintainer`, `@coordinator`,
//! `@ddl-writer`), the dispatchers on every live node, `converged`, and the `expect` conditions.
//!
//! Invariants: a query draws no random number and changes nothing (but `checkpoint-advanced`,
//! which remembers the checkpoint it last saw), so asking does not change a trace; an alias
//! without a value is an error saying so (`has no value now`), which explore skips.

use super::*;

impl Sim {
    pub(super) fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.get(name).and_then(|n| n.state.as_ref())
    }

    pub fn coordinator_node(&self) -> Option<String> {
        self.meta
            .leader
            .as_ref()
            .map(|l| l.0.clone())
            .filter(|n| self.alive(n))
    }

    /// The node where the coordinator last placed the maintainer, and whether it is ready.
    pub(super) fn current_maintainer(&self) -> Option<(String, bool)> {
        let c = self.coordinator_node()?;
        let (node, epoch) = self.node(&c)?.coordinator()?.maintainer_of(&self.cf)?;
        let ready = self
            .node(node.as_str())
            .and_then(|s| s.maintainer(&self.cf))
            .map(|m| m.epoch() == epoch && m.is_bootstrapped())
            .unwrap_or(false);
        Some((node.as_str().to_string(), ready))
    }

    pub(super) fn current_maintainer_state(
        &self,
    ) -> Option<&sluice_control::maintainer::Maintainer> {
        let (n, ready) = self.current_maintainer()?;
        if !ready {
            return None;
        }
        self.node(&n)?.maintainer(&self.cf)
    }

    pub fn persisted_checkpoint(&self) -> Ts {
        self.checker
            .persisted_cp
            .get(self.cf.as_str())
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn resolve(&self, r: &NodeRef) -> Result<String, String> {
        match r {
            NodeRef::Name(n) => Ok(n.clone()),
            NodeRef::Maintainer => self
                .current_maintainer()
                .map(|m| m.0)
                .ok_or_else(|| "@maintainer has no value now".to_string()),
            NodeRef::Coordinator => self
                .coordinator_node()
                .ok_or_else(|| "@coordinator has no value now".to_string()),
            NodeRef::DdlWriter => self
                .current_maintainer_state()
                .and_then(|m| m.pending_ddl_writer())
                .map(|n| n.as_str().to_string())
                .ok_or_else(|| {
                    "@ddl-writer has no value now (no pending blocking DDL with a chosen writer)"
                        .to_string()
                }),
        }
    }

    /// The ready maintainer's span map as (spans, replicating ones), if there is one.
    pub fn span_counts(&self) -> Option<(usize, usize)> {
        Some(self.current_maintainer_state()?.span_counts())
    }

    /// How many operators the ready maintainer has in flight, if there is one.
    pub fn operators_in_flight(&self) -> Option<usize> {
        Some(self.current_maintainer_state()?.operators().len())
    }

    /// How many dispatchers (any state, the table trigger included) run on all live nodes.
    pub fn dispatcher_count(&self) -> usize {
        self.dispatchers_everywhere().len()
    }

    fn dispatchers_everywhere(&self) -> Vec<(String, sluice_control::dispatcher::DispatcherView)> {
        let mut out = Vec::new();
        for (name, n) in &self.nodes {
            if let Some(s) = &n.state {
                for (_, dm) in s.dispatcher_managers() {
                    for d in dm.dispatchers() {
                        out.push((name.clone(), d));
                    }
                }
            }
        }
        out
    }

    fn live_tables(&self) -> Vec<TableId> {
        let cp = self
            .persisted_checkpoint()
            .max(self.checker.start_ts.unwrap_or(0));
        self.upstream
            .tables
            .values()
            .filter(|t| t.live_at(cp))
            .map(|t| t.id)
            .collect()
    }

    /// `converged`: every live table covered exactly once by working dispatchers, nothing for
    /// dropped tables, no operator in flight.
    pub fn converged(&self) -> Result<(), String> {
        let Some(m) = self.current_maintainer_state() else {
            return Err("no ready maintainer".into());
        };
        if !m.operators().is_empty() {
            return Err(format!("operators in flight: {:?}", m.operators()));
        }
        let ds = self.dispatchers_everywhere();
        let live: BTreeSet<TableId> = self.live_tables().into_iter().collect();
        let mut by_table: BTreeMap<TableId, Vec<Span>> = BTreeMap::new();
        for (node, d) in &ds {
            if d.is_trigger {
                continue;
            }
            if !live.contains(&d.span.table) {
                if self
                    .upstream
                    .tables
                    .get(&d.span.table)
                    .map(|t| t.dropped.is_some())
                    .unwrap_or(true)
                {
                    return Err(format!(
                        "dispatcher {:?} on {node} for dropped table {:?}",
                        d.id, d.span.table
                    ));
                }
                continue; // created after the checkpoint: not live yet
            }
            if d.state != "working" {
                return Err(format!("dispatcher {:?} on {node} is {}", d.id, d.state));
            }
            by_table
                .entry(d.span.table)
                .or_default()
                .push(d.span.clone());
        }
        for t in &live {
            let spans = by_table.remove(t).unwrap_or_default();
            let refs: Vec<&Span> = spans.iter().collect();
            if !spans_partition(&Span::whole_table(*t), &refs) {
                return Err(format!(
                    "table {t:?} is not covered exactly once: {spans:?}"
                ));
            }
        }
        let triggers = ds.iter().filter(|(_, d)| d.is_trigger).count();
        if triggers != 1 {
            return Err(format!("{triggers} table triggers"));
        }
        Ok(())
    }

    fn table_spans(
        &self,
        table: TableId,
    ) -> Option<(Vec<sluice_control::maintainer::SpanView>, bool)> {
        let m = self.current_maintainer_state()?;
        let spans: Vec<_> = m
            .spans()
            .into_iter()
            .filter(|s| s.span.table == table)
            .collect();
        Some((spans, m.table_busy(table)))
    }

    pub(super) fn condition(&mut self, c: &Condition) -> Result<(), String> {
        match c {
            Condition::Spans { table, count } => self.spans_condition(*table, count),
            Condition::On { table, node } => self.on_condition(*table, node),
            Condition::Absent { table } => self.absent_condition(*table),
            Condition::Check(Check::Converged) => self.converged(),
            Condition::Check(Check::SinkMatchesUpstream) => {
                if self.sc.world.sink == SinkKind::Blackhole {
                    return Ok(());
                }
                let cp = self.persisted_checkpoint();
                self.checker.sink_matches_upstream(&self.upstream, cp)?;
                // Caught up (nothing above the checkpoint yet): the downstream's tables too.
                if cp >= self.upstream.head {
                    self.downstream.compare(&self.upstream, cp)?;
                }
                Ok(())
            }
            Condition::Check(Check::ChangefeedNormal) => {
                if self.checker.restarted {
                    return Err("the changefeed was stopped or restarted as a whole".into());
                }
                Ok(())
            }
            Condition::MaintainerNotOn(r) => {
                let node = self.resolve(r)?;
                match self.current_maintainer() {
                    Some((m, _)) if m != node => Ok(()),
                    other => Err(format!("maintainer is on {other:?}")),
                }
            }
            Condition::MaintainerReady => match self.current_maintainer() {
                Some((_, true)) => Ok(()),
                other => Err(format!("maintainer not ready: {other:?}")),
            },
            Condition::Held { point, node, table } => self.held_condition(*point, node, *table),
            Condition::CheckpointAdvanced => {
                let cp = self.persisted_checkpoint();
                if cp > self.last_cp_advanced {
                    self.last_cp_advanced = cp;
                    Ok(())
                } else {
                    Err(format!("checkpoint still {cp}"))
                }
            }
        }
    }

    /// `spans`: the table's span count in the maintainer (exactly: with nothing in flight).
    fn spans_condition(&mut self, table: TableId, count: &SpanCount) -> Result<(), String> {
        let Some((spans, busy)) = self.table_spans(table) else {
            return Err("no ready maintainer".into());
        };
        let n = spans.len() as u64;
        match count {
            SpanCount::Exactly(want) => {
                if busy {
                    return Err(format!(
                        "table {table:?} has an operator or request in flight ({n} spans now)"
                    ));
                }
                if n != *want {
                    return Err(format!("table {table:?} has {n} spans, expected {want}"));
                }
            }
            SpanCount::AtLeast(want) if n < *want => {
                return Err(format!(
                    "table {table:?} has {n} spans, expected at least {want}"
                ))
            }
            SpanCount::AtMost(want) if n > *want => {
                return Err(format!(
                    "table {table:?} has {n} spans, expected at most {want}"
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// `on`: every span of the table replicates on `node`.
    fn on_condition(&mut self, table: TableId, node: &NodeRef) -> Result<(), String> {
        let node = self.resolve(node)?;
        let Some((spans, _)) = self.table_spans(table) else {
            return Err("no ready maintainer".into());
        };
        if spans.is_empty()
            || spans.iter().any(|s| {
                s.node.as_ref().map(|n| n.as_str()) != Some(node.as_str())
                    || s.state != "replicating"
            })
        {
            return Err(format!(
                "table {table:?} spans: {:?}",
                spans
                    .iter()
                    .map(|s| (s.node.clone(), s.state))
                    .collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// `absent`: no span in the maintainer and no dispatcher anywhere for the table.
    fn absent_condition(&mut self, table: TableId) -> Result<(), String> {
        let Some((spans, _)) = self.table_spans(table) else {
            return Err("no ready maintainer".into());
        };
        if !spans.is_empty() {
            return Err(format!(
                "table {table:?} still has {} spans in the maintainer",
                spans.len()
            ));
        }
        if let Some((n, d)) = self
            .dispatchers_everywhere()
            .into_iter()
            .find(|(_, d)| d.span.table == table)
        {
            return Err(format!(
                "table {table:?} still has dispatcher {:?} on {n}",
                d.id
            ));
        }
        Ok(())
    }

    /// `held`: some node (or `node`) has work waiting at the hold point (of `table`).
    fn held_condition(
        &mut self,
        point: scenario::HoldPoint,
        node: &Option<NodeRef>,
        table: Option<TableId>,
    ) -> Result<(), String> {
        let node = match node {
            Some(r) => Some(self.resolve(r)?),
            None => None,
        };
        let p = to_hold(point);
        for (name, n) in &self.nodes {
            if node.as_ref().map(|x| x != name).unwrap_or(false) {
                continue;
            }
            let Some(s) = &n.state else { continue };
            for (_, dm) in s.dispatcher_managers() {
                if dm
                    .held(s.holds())
                    .iter()
                    .any(|h| h.point == p && table.map(|t| t == h.table).unwrap_or(true))
                {
                    return Ok(());
                }
            }
        }
        Err(format!("nothing held at {}", p.name()))
    }

    /// The changefeed's info as the meta store has it.
    pub fn changefeed_info(&self, cf: &str) -> Option<sluice_control::coordinator::ChangefeedInfo> {
        self.meta
            .kv
            .get(&keys::info(cf))
            .and_then(|(v, _)| serde_json::from_slice(v).ok())
    }
}
