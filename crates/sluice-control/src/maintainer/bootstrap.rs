//! The end of a maintainer's bootstrap: the span map built from the schema history, the replay
//! rule's bounds and what every node runs (reconcile by span, never by id).
//!
//! Invariants kept here: every reported dispatcher is tracked, then adopted (working or held
//! creates, non-overlapping, working first), kept with its operator's intent (closing for a move,
//! a split, a merge), or removed; a table that no longer exists (dropped before the start point,
//! or by a DDL the downstream applied) only ever gets cleanups; uncovered ranges of live tables
//! become absent spans, never below the table's replay floor.

use super::operator::{span_key, OpKind};
use super::*;
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
        self.restore_requests(ctx, out);
        // Spans nobody serves are placed now, not at the next tick: a new changefeed's tables
        // start (and their snapshot copies with them) as soon as the maintainer is ready.
        self.place_absent(ctx);
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
                placed_by_user: None,
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
                placed_by_user: None,
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

/// The bootstrap's inputs: node responses, the downstream's record, finishing.
impl Maintainer {
    pub(super) fn on_bootstrap_response(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        inc: u64,
        dispatchers: Vec<DispatcherReport>,
        out: &mut Vec<Effect>,
    ) {
        if !self.bootstrapping.contains_key(from) {
            return;
        }
        // The incarnation that answered is the one that runs there now, even if this
        // maintainer's membership view has not caught up yet; an answer from an incarnation the
        // membership already knows is gone is stale.
        if ctx.alive.get(from).map(|a| *a > inc).unwrap_or(true) {
            return;
        }
        self.bootstrapping.remove(from);
        self.ready.insert(from.clone(), inc);
        match &mut self.phase {
            Phase::Bootstrapping { responses, .. } => {
                responses.insert(from.clone(), dispatchers);
                self.try_finish_bootstrap(ctx, out);
            }
            Phase::Working => {
                // A node that joined (or restarted) after the bootstrap: reconcile what it runs.
                self.on_reports(ctx, from, &dispatchers, true, None, out);
            }
            _ => {}
        }
    }

    pub(super) fn try_finish_bootstrap(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) {
        let ready = match &self.phase {
            Phase::Bootstrapping {
                responses,
                schema: Some(_),
                ..
            } => {
                // The `bootstrap-without-all-nodes` mutation finishes once the own node answered.
                #[cfg(feature = "mutations")]
                let early = crate::mutations::on("bootstrap-without-all-nodes");
                #[cfg(not(feature = "mutations"))]
                let early = false;
                (early && responses.contains_key(&self.node))
                    || ctx.alive.keys().all(|n| {
                        responses.contains_key(n)
                            || !self.bootstrapping.contains_key(n) && self.ready.contains_key(n)
                    }) && self
                        .bootstrapping
                        .keys()
                        .all(|n| !ctx.alive.contains_key(n))
                        && responses.contains_key(&self.node)
            }
            _ => false,
        };
        // Also the persisted table requests and user-split marks must be read (`requests.rs`).
        if !ready
            || !self.applied_known(ctx, out)
            || !self.store.loaded()
            || !self.schema_knows_record(out)
        {
            return;
        }
        let Phase::Bootstrapping {
            responses,
            schema: Some(schema),
            applied: Some(applied),
        } = std::mem::replace(&mut self.phase, Phase::Working)
        else {
            unreachable!("bootstrap finishes only with the schema and the sink's record");
        };
        self.replay = replay::replay_bounds(&schema, &replay::with_reported(applied, &responses));
        self.finish_bootstrap(ctx, responses, schema, out);
    }

    /// Whether the schema snapshot has every DDL the downstream recorded (or the nodes report).
    /// The snapshot was loaded when this maintainer started, and an older maintainer may have
    /// written DDLs after that, until this one's bootstrap fenced it; the replay rule needs what
    /// they did (a table they dropped stays gone), so a newer snapshot is loaded first, once (a
    /// recorded DDL the history does not have then bounds nothing).
    pub(super) fn schema_knows_record(&mut self, out: &mut Vec<Effect>) -> bool {
        let Phase::Bootstrapping {
            responses,
            schema: Some(schema),
            applied: Some(applied),
        } = &self.phase
        else {
            return false;
        };
        if self.schema_refresh == SchemaRefresh::Done {
            return true;
        }
        let known: BTreeSet<Ts> = schema.ddls_after.iter().map(|d| d.commit_ts).collect();
        let unknown = replay::with_reported(applied.clone(), responses)
            .into_iter()
            .find(|a| !known.contains(&a.commit_ts));
        let Some(a) = unknown else {
            return true;
        };
        if self.schema_refresh == SchemaRefresh::No {
            self.schema_refresh = SchemaRefresh::Asked;
            self.log(
                out,
                format!(
                    "the downstream applied the DDL at {} after the schema was loaded: loading it again",
                    a.commit_ts
                ),
            );
            out.push(Effect::LoadSchema {
                cf: self.cf.clone(),
                epoch: self.epoch,
                at_ts: self.start_checkpoint,
            });
        }
        false
    }

    /// Whether the downstream's record of applied DDLs is known; asks for it (once every
    /// `APPLIED_RETRY_MS`) when it is not.
    pub(super) fn applied_known(&mut self, ctx: &Ctx, out: &mut Vec<Effect>) -> bool {
        if matches!(
            self.phase,
            Phase::Bootstrapping {
                applied: Some(_),
                ..
            }
        ) {
            return true;
        }
        if self.applied_asked.is_none() {
            self.applied_asked = Some(ctx.now);
            out.push(Effect::LoadApplied {
                cf: self.cf.clone(),
                epoch: self.epoch,
                sink_uri: self.config.sink_uri.clone(),
                after: self.start_checkpoint,
            });
        }
        false
    }

    /// The answer to `LoadApplied`. An error keeps the bootstrap waiting (with a warning) and
    /// is asked again: bootstrapping without it could replay rows a DDL already removed.
    pub fn on_applied(
        &mut self,
        ctx: &Ctx,
        result: Result<Vec<AppliedDdl>, String>,
        out: &mut Vec<Effect>,
    ) {
        let Phase::Bootstrapping { applied, .. } = &mut self.phase else {
            return;
        };
        if applied.is_some() {
            return;
        }
        match result {
            Ok(list) => {
                *applied = Some(list);
                self.applied_asked = None;
                self.sink_warning = None;
                self.try_finish_bootstrap(ctx, out);
            }
            Err(e) => {
                let w = truncate_error(format!(
                    "waiting for the sink: cannot read which DDLs it applied ({e}); check that the downstream is up and reachable (retrying every 2 s)"
                ));
                self.log(out, w.clone());
                self.sink_warning = Some(w);
            }
        }
    }
}
