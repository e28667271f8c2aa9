//! The end of a maintainer's bootstrap: the span map built from the schema history, the replay
//! rule's bounds and what every node runs (reconcile by span, never by id).
//!
//! Invariants kept here: every reported dispatcher is tracked, then adopted (working or held
//! creates, non-overlapping, working first), kept with its operator's intent (closing for a move,
//! a split, a merge), or removed; a table that no longer exists (dropped before the start point,
//! or by a DDL the downstream applied) only ever gets cleanups; uncovered ranges of live tables
//! become absent spans, never below the table's replay floor.

use super::operator::{span_key, OpKind};
use super::{Maintainer, SpanEntry, SpanState, TableState, Tracked, TrackedDispatcher};
use crate::io::{Effect, SchemaSnapshot, TraceEvent};
use crate::maintainer::Ctx;
use crate::msg::{ClosePurpose, DispatcherPhase, DispatcherReport};
use sluice_types::{NodeId, Span, TableId, Ts};
use std::collections::{BTreeMap, BTreeSet};

/// Reported dispatchers of one table, with their nodes.
type Reported = Vec<(NodeId, DispatcherReport)>;

/// The tables a bootstrap knows of, from the schema history (filtered).
struct TableSet {
    /// Live at the start point.
    at_cp: BTreeSet<TableId>,
    /// Created by a DDL after it: commit ts and name.
    created_after: BTreeMap<TableId, (Ts, String)>,
}

impl Maintainer {
    /// Build the span map from the schema history and what every node runs.
    pub(super) fn finish_bootstrap(
        &mut self,
        ctx: &Ctx,
        responses: BTreeMap<NodeId, Vec<DispatcherReport>>,
        schema: SchemaSnapshot,
        out: &mut Vec<Effect>,
    ) {
        let set = self.table_set(&schema);
        let mut by_table = self.track_reported(responses, &set, out);
        let mut all_tables: BTreeSet<TableId> = set.at_cp.clone();
        all_tables.extend(set.created_after.keys().copied());
        all_tables.extend(by_table.keys().copied());
        for table in all_tables {
            let list = by_table.remove(&table).unwrap_or_default();
            self.reconcile_table(ctx, table, &list, &set, out);
        }
        let cp = self.start_checkpoint;
        self.tracked.insert(
            self.trigger,
            TrackedDispatcher {
                node: self.node.clone(),
                span: crate::dispatcher::trigger_span(),
                phase: Tracked::Requested,
                checkpoint: cp,
            },
        );
        out.push(Effect::Trace(TraceEvent::MaintainerBootstrapped {
            cf: self.cf.clone(),
            epoch: self.epoch,
        }));
        let summary = format!(
            "bootstrapped at checkpoint {cp}: {} tables, {} spans, {} operators restored",
            self.tables.len(),
            self.spans.len(),
            self.ops.len()
        );
        self.log(out, summary);
        // The barrier rebuilds itself: dispatchers re-report their block states.
        self.restore_requests(ctx, &schema, out);
        self.drive(ctx, out);
    }

    /// Tables live at the start point (now in `self.tables`), and those the DDLs after it create.
    fn table_set(&mut self, schema: &SchemaSnapshot) -> TableSet {
        let mut at_cp = BTreeSet::new();
        for t in schema
            .tables
            .iter()
            .filter(|t| self.filter.matches_name(&t.name))
        {
            at_cp.insert(t.id);
            let state = TableState {
                name: t.name.clone(),
                created: 0,
                splittable: t.splittable,
                user_split: false,
            };
            self.tables.insert(t.id, state);
        }
        let mut created_after = BTreeMap::new();
        for ddl in &schema.ddls_after {
            for (t, name) in &ddl.influence.added {
                if self.filter.matches_name(name) {
                    created_after
                        .entry(*t)
                        .or_insert((ddl.commit_ts, name.clone()));
                }
            }
        }
        TableSet {
            at_cp,
            created_after,
        }
    }

    /// Tracks every dispatcher reported anywhere (the table trigger aside), grouped by table.
    fn track_reported(
        &mut self,
        responses: BTreeMap<NodeId, Vec<DispatcherReport>>,
        set: &TableSet,
        out: &mut Vec<Effect>,
    ) -> BTreeMap<TableId, Reported> {
        #[cfg(feature = "mutations")]
        let ignore_unknown = crate::mutations::on("bootstrap-ignores-unknown-tables");
        #[cfg(not(feature = "mutations"))]
        let ignore_unknown = false;
        let mut by_table: BTreeMap<TableId, Reported> = BTreeMap::new();
        for (node, list) in responses {
            for r in list {
                if r.is_trigger || r.phase == DispatcherPhase::Stopped {
                    continue;
                }
                if ignore_unknown && !set.at_cp.contains(&r.span.table) {
                    self.log(out, format!("found a working table that is not in initial table map, just ignore it: {:?}", r.span.table));
                    self.ignored.insert(r.id);
                    continue;
                }
                let phase = match r.phase {
                    DispatcherPhase::Creating => Tracked::Requested,
                    DispatcherPhase::Working => Tracked::Working,
                    _ => Tracked::Removing,
                };
                let tracked = TrackedDispatcher {
                    node: node.clone(),
                    span: r.span.clone(),
                    phase,
                    checkpoint: r.checkpoint,
                };
                self.tracked.insert(r.id, tracked);
                by_table
                    .entry(r.span.table)
                    .or_default()
                    .push((node.clone(), r));
            }
        }
        by_table
    }

    /// One table: adopt, restore or clean up what runs of it; cover the rest.
    fn reconcile_table(
        &mut self,
        ctx: &Ctx,
        table: TableId,
        list: &Reported,
        set: &TableSet,
        out: &mut Vec<Effect>,
    ) {
        let known = (set.at_cp.contains(&table) || set.created_after.contains_key(&table))
            && !self.replay.gone.contains(&table);
        if !known {
            // Dropped before the start point (or never existed), or by a DDL the downstream
            // already applied: clean up, never re-create.
            for (n, r) in list {
                self.start_cleanup(table, vec![(r.id, n.clone())], None);
            }
            return;
        }
        self.tables.entry(table).or_insert_with(|| {
            let (created, name) = set.created_after.get(&table).cloned().unwrap_or_default();
            TableState {
                name,
                created,
                splittable: true,
                user_split: false,
            }
        });
        let mut covered = self.adopt_live(table, list, out);
        self.restore_closing(table, list, &mut covered);
        self.fill_holes(ctx, table, &covered, set);
    }

    /// Working dispatchers first, then held creates and merge targets: each adopted unless it
    /// overlaps one adopted before it (then removed). Returns the adopted spans.
    fn adopt_live(&mut self, table: TableId, list: &Reported, out: &mut Vec<Effect>) -> Vec<Span> {
        let mut cands: Vec<&(NodeId, DispatcherReport)> = list
            .iter()
            .filter(|(_, r)| {
                matches!(
                    r.phase,
                    DispatcherPhase::Working | DispatcherPhase::Creating
                )
            })
            .collect();
        let rank = |r: &DispatcherReport| u8::from(r.phase != DispatcherPhase::Working);
        cands.sort_by(|a, b| {
            (rank(&a.1), &a.1.span.start, a.1.id).cmp(&(rank(&b.1), &b.1.span.start, b.1.id))
        });
        let mut covered: Vec<Span> = Vec::new();
        for (n, r) in cands {
            if covered.iter().any(|c| c.overlaps(&r.span)) {
                let why = format!(
                    "bootstrap: {:?} on {n} overlaps an adopted dispatcher; removing it",
                    r.id
                );
                self.log(out, why);
                self.start_cleanup(table, vec![(r.id, n.clone())], None);
                continue;
            }
            covered.push(r.span.clone());
            self.adopt_one(table, n, r);
        }
        covered
    }

    /// A live dispatcher's span entry: replicating, or scheduling with its restored operator
    /// (a merge target waits for its sources; a held create finishes on its node).
    fn adopt_one(&mut self, table: TableId, n: &NodeId, r: &DispatcherReport) {
        let key = span_key(&r.span);
        let mut entry = SpanEntry {
            span: r.span.clone(),
            state: SpanState::Replicating,
            node: Some(n.clone()),
            dispatcher: Some(r.id),
            checkpoint: r.checkpoint,
            op: None,
            write_rate: 0,
            resolved: 0,
            floored: false,
        };
        if r.phase == DispatcherPhase::Working {
            self.spans.insert(key, entry);
            return;
        }
        entry.state = SpanState::Scheduling;
        self.spans.insert(key.clone(), entry);
        let kind = if r.merge_sources.is_empty() {
            OpKind::Add
        } else {
            OpKind::Merge
        };
        let mut op = self.new_op(kind, table, Some(key));
        op.dest = Some(n.clone());
        op.creating = Some(r.id);
        op.restored = true;
        if kind == OpKind::Merge {
            op.target = Some(r.span.clone());
            for s in &r.merge_sources {
                if let Some(t) = self.tracked.get(s) {
                    op.sources.push((*s, t.span.clone(), t.checkpoint));
                }
            }
        }
        self.insert_op(op);
    }

    /// Closing dispatchers keep their intent (a move its destination, a split its points) when
    /// their range is not otherwise covered; a merge source waits for its restored target; the
    /// rest are removed.
    fn restore_closing(&mut self, table: TableId, list: &Reported, covered: &mut Vec<Span>) {
        for (n, r) in list {
            let DispatcherPhase::Closing(purpose) = &r.phase else {
                continue;
            };
            let free = !covered.iter().any(|c| c.overlaps(&r.span));
            match purpose {
                ClosePurpose::MergeInto { target } if self.tracked.contains_key(target) => {}
                ClosePurpose::Move { .. } | ClosePurpose::Split { .. } if free => {
                    covered.push(r.span.clone());
                    self.restore_intent(table, n, r, purpose);
                }
                _ => self.start_cleanup(table, vec![(r.id, n.clone())], None),
            }
        }
    }

    fn restore_intent(
        &mut self,
        table: TableId,
        n: &NodeId,
        r: &DispatcherReport,
        purpose: &ClosePurpose,
    ) {
        let key = span_key(&r.span);
        let entry = SpanEntry {
            span: r.span.clone(),
            state: SpanState::Scheduling,
            node: Some(n.clone()),
            dispatcher: Some(r.id),
            checkpoint: r.checkpoint,
            op: None,
            write_rate: 0,
            resolved: 0,
            floored: false,
        };
        self.spans.insert(key.clone(), entry);
        let kind = match purpose {
            ClosePurpose::Move { .. } => OpKind::Move,
            _ => OpKind::Split,
        };
        let mut op = self.new_op(kind, table, Some(key));
        op.removing = vec![(r.id, n.clone())];
        match purpose {
            ClosePurpose::Move { dest } => op.dest = Some(dest.clone()),
            ClosePurpose::Split { points } => op.points = points.clone(),
            _ => {}
        }
        op.restored = true;
        self.insert_op(op);
    }

    /// A table live at the start point is covered from the start point; a table created after
    /// it only if something of it already runs (else the trigger's replay of its CREATE adds
    /// it). Either way never below its replay floor (`add_hole_spans`).
    fn fill_holes(&mut self, ctx: &Ctx, table: TableId, covered: &[Span], set: &TableSet) {
        let cp = self.start_checkpoint;
        let holes = Self::holes(table, covered);
        if set.at_cp.contains(&table) {
            let whole = covered.is_empty();
            for h in holes {
                self.add_hole_spans(ctx, &h, cp, whole);
            }
        } else if let Some((created_ts, _)) = set.created_after.get(&table) {
            if !covered.is_empty() {
                for h in holes {
                    self.add_hole_spans(ctx, &h, (*created_ts).max(cp), false);
                }
            }
        }
    }
}
