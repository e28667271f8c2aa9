//! The schedulers: balance, split and merge, run every `BALANCE_INTERVAL_MS`, and the placement
//! of absent spans. They only start operators (`operator.rs`): at most `add-table-batch-size`
//! adds and `MAX_OPERATORS_PER_ROUND` moves per round, never on a span that has one, never on a
//! table a user split (the merge scheduler). The placement reads the span map's queue of absent
//! spans and its loads per node (`spanmap.rs`), not the whole map.

use super::*;

impl Maintainer {
    // (user requests: `requests.rs`)

    /// Every node's load: the spans it serves (or whose progress counts there), kept by the
    /// span map's index, plus the adds and moves creating there (a node with none is absent).
    /// A scheduling round reads it once and keeps it up to date as it places spans.
    pub(super) fn loads(&self) -> BTreeMap<NodeId, usize> {
        let mut loads = self.spans.per_node().clone();
        for o in self.ops.values() {
            if o.kind != OpKind::Merge && o.phase == OpPhase::Creating {
                if let Some(n) = &o.dest {
                    match loads.get_mut(n) {
                        Some(c) => *c += 1,
                        None => {
                            loads.insert(n.clone(), 1);
                        }
                    }
                }
            }
        }
        loads
    }

    pub(super) fn least_loaded(&self, ctx: &Ctx) -> Option<NodeId> {
        self.least_loaded_in(ctx, &self.loads())
    }

    /// The schedulable node with the least load in `loads` (ties: the lowest id).
    pub(super) fn least_loaded_in(
        &self,
        ctx: &Ctx,
        loads: &BTreeMap<NodeId, usize>,
    ) -> Option<NodeId> {
        self.ready
            .keys()
            .filter(|n| self.schedulable(ctx, n))
            .min_by_key(|n| (loads.get(*n).copied().unwrap_or(0), *n))
            .cloned()
    }

    pub(super) fn schedule(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        self.place_absent(ctx);
        self.drain(ctx);
        if !self.config.scheduler.balance || ctx.now < self.last_balance + BALANCE_INTERVAL_MS {
            return;
        }
        self.last_balance = ctx.now;
        if !self.ops.is_empty() || !self.requests.is_empty() || !self.spans.all_replicating() {
            return;
        }
        if self.config.scheduler.enable_table_across_nodes
            && (self.split_by_regions(ctx)
                || self.split_by_write_rate(ctx, out)
                || self.merge_small(ctx))
        {
            return;
        }
        self.balance(ctx, out);
    }

    /// Basic: absent spans (at most `add-table-batch-size`, in key order) go to the least
    /// loaded schedulable node.
    pub(super) fn place_absent(&mut self, ctx: &Ctx) {
        let batch = self.config.scheduler.add_table_batch_size.max(1);
        let absent: Vec<SpanKey> = self.spans.queued().take(batch).cloned().collect();
        if absent.is_empty() {
            return;
        }
        // What `least_loaded_in` picks for each span in turn, with the schedulable nodes and
        // their loads found once per batch (per span they were four node lookups per node).
        // `ready` is in id order, so the lowest index wins a tie as the lowest id does. An add
        // counts on its destination while it creates: one more there per span placed.
        let loads = self.loads();
        let nodes: Vec<(usize, &NodeId)> = self
            .ready
            .keys()
            .filter(|n| self.schedulable(ctx, n))
            .map(|n| (loads.get(n).copied().unwrap_or(0), n))
            .collect();
        let mut picked = Vec::with_capacity(absent.len());
        let mut load: Vec<usize> = nodes.iter().map(|n| n.0).collect();
        for k in absent {
            let Some(i) = (0..load.len()).min_by_key(|&i| (load[i], i)) else {
                break;
            };
            load[i] += 1;
            picked.push((k, nodes[i].1.clone()));
        }
        for (k, dest) in picked {
            self.start_add(k, dest);
        }
    }

    /// Drain: move spans off draining nodes.
    fn drain(&mut self, ctx: &Ctx) {
        if ctx.draining.is_empty() {
            return;
        }
        let moves: Vec<SpanKey> = self
            .spans
            .iter()
            .filter(|(_, e)| {
                e.op.is_none()
                    && e.state == SpanState::Replicating
                    && e.node
                        .as_ref()
                        .map(|n| ctx.draining.contains(n))
                        .unwrap_or(false)
            })
            .map(|(k, _)| k.clone())
            .take(MAX_OPERATORS_PER_ROUND)
            .collect();
        // A move counts nowhere until its removal is done: the loads stay as they are.
        let loads = self.loads();
        for k in moves {
            if let Some(dest) = self.least_loaded_in(ctx, &loads) {
                self.start_move(k, dest);
            }
        }
    }

    /// Split: a table in one span with more regions than the threshold. `true`: one started.
    fn split_by_regions(&mut self, ctx: &Ctx) -> bool {
        let threshold = self.config.scheduler.region_threshold;
        let single: Vec<(TableId, SpanKey, Span)> = self
            .tables
            .iter()
            .filter(|(_, s)| s.splittable)
            .filter_map(|(t, _)| {
                let es: Vec<&SpanEntry> =
                    self.spans.values().filter(|e| e.span.table == *t).collect();
                (es.len() == 1).then(|| (*t, span_key(&es[0].span), es[0].span.clone()))
            })
            .collect();
        for (t, k, span) in single {
            let regions = ctx.regions.get(&t).map(|r| r.len() as u64 + 1).unwrap_or(1);
            if regions > threshold {
                let points = self.split_points(ctx, &span, None);
                if self.start_split(k, points) {
                    return true;
                }
            }
        }
        false
    }

    /// Split by write rate: a span written faster than the threshold is split into pieces of
    /// about the threshold each (as its regions allow). `true`: one started.
    fn split_by_write_rate(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) -> bool {
        let threshold = self.config.scheduler.write_key_threshold;
        if threshold == 0 {
            return false;
        }
        let hot: Vec<(SpanKey, Span, u64)> = self
            .spans
            .iter()
            .filter(|(_, e)| {
                e.write_rate > threshold
                    && self
                        .tables
                        .get(&e.span.table)
                        .map(|t| t.splittable)
                        .unwrap_or(false)
            })
            .map(|(k, e)| (k.clone(), e.span.clone(), e.write_rate))
            .collect();
        for (k, span, rate) in hot {
            let pieces = (rate.div_ceil(threshold) as usize).max(2);
            let inner = ctx
                .regions
                .get(&span.table)
                .map(|r| {
                    r.iter()
                        .filter(|b| **b > span.start && **b < span.end)
                        .count()
                })
                .unwrap_or(0);
            let points = self.split_points(ctx, &span, Some(pieces.min(inner + 1)));
            if self.start_split(k, points) {
                self.log(out, format!("split {span:?}: written at {rate} rows/s"));
                return true;
            }
        }
        false
    }

    /// Merge (hysteresis: only at or below half the split thresholds), never a table a user
    /// split. `true`: a merge request was queued.
    fn merge_small(&mut self, ctx: &Ctx) -> bool {
        let sched = &self.config.scheduler;
        let merge: Vec<TableId> = self
            .tables
            .iter()
            .filter(|(t, s)| {
                !s.user_split
                    && self.spans.values().filter(|e| e.span.table == **t).count() > 1
                    && ctx.regions.get(t).map(|r| r.len() as u64 + 1).unwrap_or(1) * 2
                        <= sched.region_threshold
                    && (sched.write_key_threshold == 0
                        || self
                            .spans
                            .values()
                            .filter(|e| e.span.table == **t)
                            .map(|e| e.write_rate)
                            .sum::<u64>()
                            * 2
                            <= sched.write_key_threshold)
            })
            .map(|(t, _)| *t)
            .collect();
        let Some(t) = merge.first() else {
            return false;
        };
        self.queue_scheduler_request(TableRequest::Merge { table: *t }, ctx.now);
        true
    }

    /// Balance: move one span from the most to the least loaded node when they differ by 2+,
    /// never a span of a table a user moved while it is still on the node the user chose.
    fn balance(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        let nodes: Vec<NodeId> = self
            .ready
            .keys()
            .filter(|n| self.schedulable(ctx, n))
            .cloned()
            .collect();
        if nodes.len() < 2 {
            return;
        }
        let loads = self.loads();
        let load = |n: &NodeId| loads.get(n).copied().unwrap_or(0);
        let max = nodes
            .iter()
            .max_by_key(|n| (load(n), std::cmp::Reverse(*n)))
            .cloned();
        let min = nodes.iter().min_by_key(|n| (load(n), *n)).cloned();
        let (Some(max), Some(min)) = (max, min) else {
            return;
        };
        if load(&max) < load(&min) + 2 {
            return;
        }
        // A span a user moved stays where the user put it (another span of that node moves).
        let placed_by_user = |e: &SpanEntry| {
            self.tables
                .get(&e.span.table)
                .is_some_and(|t| t.placed_by_user.is_some() && t.placed_by_user == e.node)
        };
        let k = self
            .spans
            .iter()
            .find(|(_, e)| e.node.as_ref() == Some(&max) && e.op.is_none() && !placed_by_user(e))
            .map(|(k, _)| k.clone());
        if let Some(k) = k {
            self.start_move(k, min);
            self.log(out, format!("balance: moving a span from {max}"));
        }
    }
}
