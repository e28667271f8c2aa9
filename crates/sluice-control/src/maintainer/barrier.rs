//! The maintainer's side of the DDL barrier. A blocking DDL at `ddl_ts` is an event: the
//! dispatchers it concerns (those of the tables it changes and of the tables it only reads,
//! [`DdlInfluence::sources`]) report `Waiting` (each only once everything before the DDL is durable);
//! when their reports cover every span of every table it concerns (and the table trigger, if it
//! takes part), exactly one writer is told to write; only after the writer reports `Written`
//! (the DDL is durable) are the DDL's effects on the span map applied (tables added at the DDL's
//! commit ts, dropped tables removed) and the others told to pass.
//!
//! Reports count only from a span's current dispatcher on the node it is bound to. Resends are
//! driven by the dispatchers (a waiting dispatcher reports again until told what to do), so a
//! lost Write, Pass or Proceed heals by itself.

use sluice_types::{DdlInfluence, DispatcherId, NodeId, Ts};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub struct BarrierEvent {
    pub ddl_ts: Ts,
    pub influence: DdlInfluence,
    /// Current reporters waiting at this event.
    pub waiting: BTreeMap<DispatcherId, NodeId>,
    /// The chosen writer.
    pub writer: Option<(DispatcherId, NodeId)>,
    /// The DDL is durable in the sink (the writer reported `Written`, or a participant is
    /// already past it).
    pub written: bool,
    /// The span-map effects of the DDL were applied.
    pub applied: bool,
    pub passed: BTreeSet<DispatcherId>,
}

impl BarrierEvent {
    pub fn new(ddl_ts: Ts, influence: DdlInfluence) -> Self {
        BarrierEvent {
            ddl_ts,
            influence,
            waiting: BTreeMap::new(),
            writer: None,
            written: false,
            applied: false,
            passed: BTreeSet::new(),
        }
    }
}

/// All events still pending, by commit ts.
#[derive(Clone, Debug, Default)]
pub struct Barrier {
    pub events: BTreeMap<Ts, BarrierEvent>,
}

impl Barrier {
    /// Forget events at or below the changefeed checkpoint: every dispatcher is past them.
    pub fn gc(&mut self, checkpoint: Ts) {
        self.events.retain(|ts, _| *ts > checkpoint);
    }

    /// The oldest event not yet finished, with its writer's node if one was chosen.
    pub fn oldest_pending(&self) -> Option<&BarrierEvent> {
        self.events.values().next()
    }
}

use super::*;

/// Driving the barrier.
impl Maintainer {
    /// The tables a DDL at `d` concerns: those it names (or of its database, or all) and those
    /// whose definition it reads ([`DdlInfluence::sources`]), among the tables that existed
    /// before it.
    pub(super) fn participant_tables(&self, influence: &DdlInfluence, d: Ts) -> Vec<TableId> {
        let before = |s: &TableState| s.created < d;
        let existed = |t: &TableId| self.tables.get(t).map(before).unwrap_or(false);
        let mut tables: Vec<TableId> = match &influence.scope {
            InfluenceScope::Tables(ts) => ts.iter().copied().filter(existed).collect(),
            InfluenceScope::Database(db) => {
                let prefix = format!("{db}.");
                self.tables
                    .iter()
                    .filter(|(_, s)| before(s) && s.name.starts_with(&prefix))
                    .map(|(t, _)| *t)
                    .collect()
            }
            InfluenceScope::All => self
                .tables
                .iter()
                .filter(|(_, s)| before(s))
                .map(|(t, _)| *t)
                .collect(),
        };
        tables.extend(influence.sources.iter().copied().filter(existed));
        tables.sort();
        tables.dedup();
        tables
    }

    /// Is `id` on `from` the current dispatcher of a span of a table this event concerns (or the
    /// trigger)?
    pub(super) fn is_participant(
        &self,
        from: &NodeId,
        id: DispatcherId,
        influence: &DdlInfluence,
        d: Ts,
    ) -> bool {
        if id == self.trigger {
            return *from == self.node && influence.trigger;
        }
        let tables = self.participant_tables(influence, d);
        self.spans.values().any(|e| {
            e.dispatcher == Some(id)
                && e.node.as_ref() == Some(from)
                && e.state == SpanState::Replicating
                && tables.contains(&e.span.table)
        })
    }

    pub(super) fn on_block_status(
        &mut self,
        ctx: &Ctx,
        from: &NodeId,
        id: DispatcherId,
        span: &Span,
        report: &BlockReport,
        out: &mut Vec<Effect>,
    ) {
        let d = report.ddl_ts;
        if d <= self.committed {
            // Already below the checkpoint: every participant passed it, so it was written.
            if report.stage == BlockStage::Waiting {
                self.barrier_cmd(out, from, id, d, BarrierCommand::Pass);
            } else if report.stage == BlockStage::Written {
                self.barrier_cmd(out, from, id, d, BarrierCommand::Proceed);
            }
            return;
        }
        if let std::collections::btree_map::Entry::Vacant(v) = self.barrier.events.entry(d) {
            let Some(influence) = report.ddl.clone() else {
                return;
            };
            v.insert(BarrierEvent::new(d, influence));
        }
        let influence = match self.barrier.events.get(&d) {
            Some(e) => e.influence.clone(),
            None => return,
        };
        if !self.is_participant(from, id, &influence, d) {
            self.stale_dropped += 1;
            return;
        }
        match report.stage {
            BlockStage::Passed => {
                if let Some(e) = self.barrier.events.get_mut(&d) {
                    e.passed.insert(id);
                    e.waiting.remove(&id);
                }
            }
            BlockStage::Written => {
                self.mark_written(ctx, d, out);
                self.barrier_cmd(out, from, id, d, BarrierCommand::Proceed);
            }
            BlockStage::Writing => {
                if let Some(e) = self.barrier.events.get_mut(&d) {
                    if e.writer.is_none() {
                        e.writer = Some((id, from.clone()));
                    }
                }
            }
            BlockStage::Waiting => self.on_waiting(ctx, (from, id, span), d, &influence, out),
        }
    }

    /// A participant waits at the DDL: proof that it was written answers at once; otherwise it
    /// joins the waiters, and a writer is chosen once coverage is complete.
    fn on_waiting(
        &mut self,
        ctx: &Ctx,
        (from, id, span): (&NodeId, DispatcherId, &Span),
        d: Ts,
        influence: &DdlInfluence,
        out: &mut Vec<Effect>,
    ) {
        self.raise_to_waiting(id, from, d);
        if let Some(past) = self.someone_past(id, d, influence) {
            self.log(
                out,
                format!("DDL at {d} already passed by {past:?}: it was written"),
            );
            self.mark_written(ctx, d, out);
        }
        // A writer that is no longer a span's current dispatcher (moved, merged, its node
        // gone) can write nothing more: choose again once coverage is complete.
        let stale_writer = match self.barrier.events.get(&d).and_then(|e| e.writer.clone()) {
            Some((w, wn)) => !self.is_participant(&wn, w, influence, d),
            None => false,
        };
        let Some(e) = self.barrier.events.get_mut(&d) else {
            return;
        };
        if stale_writer && !e.written {
            e.writer = None;
        }
        if e.written && influence.dropped.contains(&span.table) {
            // Its table ends at this DDL: it stays blocked until it is removed.
            return;
        }
        if e.written {
            let cmd = if e.writer.as_ref().map(|w| w.0) == Some(id) {
                BarrierCommand::Write
            } else {
                BarrierCommand::Pass
            };
            return self.barrier_cmd(out, from, id, d, cmd);
        }
        e.waiting.insert(id, from.clone());
        if let Some((w, wn)) = e.writer.clone() {
            if w == id {
                self.barrier_cmd(out, &wn, w, d, BarrierCommand::Write);
            }
            return;
        }
        self.try_select_writer(ctx, d, out);
    }

    /// A participant span already past the DDL proves it was written. For a DDL the table
    /// trigger takes part in, only once the trigger waits at it too: by then every earlier DDL
    /// that adds, drops or renames tables was applied, so the set of tables it concerns is the
    /// right one (a database's members change with renames).
    fn someone_past(
        &self,
        id: DispatcherId,
        d: Ts,
        influence: &DdlInfluence,
    ) -> Option<(Span, Ts, Option<DispatcherId>)> {
        let trigger_there = !influence.trigger
            || id == self.trigger
            || self
                .barrier
                .events
                .get(&d)
                .map(|e| e.waiting.contains_key(&self.trigger))
                .unwrap_or(false);
        if !trigger_there {
            return None;
        }
        let tables = self.participant_tables(influence, d);
        self.spans
            .values()
            .find(|e| {
                tables.contains(&e.span.table)
                    && e.checkpoint >= d
                    && e.state == SpanState::Replicating
            })
            .map(|e| (e.span.clone(), e.checkpoint, e.dispatcher))
    }

    pub(super) fn try_select_writer(&mut self, ctx: &Ctx, d: Ts, out: &mut Vec<Effect>) {
        let Some(e) = self.barrier.events.get(&d) else {
            return;
        };
        let influence = e.influence.clone();
        // Drop reporters that are no longer participants (moved, split, merged away).
        let stale: Vec<DispatcherId> = e
            .waiting
            .iter()
            .filter(|(id, n)| !self.is_participant(n, **id, &influence, d))
            .map(|(id, _)| *id)
            .collect();
        let tables = self.participant_tables(&influence, d);
        // With the table each dispatcher serves, to prefer a table the DDL changes as writer.
        let mut participants: Vec<(DispatcherId, NodeId, TableId)> = Vec::new();
        let mut complete = true;
        for entry in self
            .spans
            .values()
            .filter(|en| tables.contains(&en.span.table))
        {
            match (&entry.state, entry.dispatcher, &entry.node) {
                (SpanState::Replicating, Some(id), Some(n)) if e.waiting.contains_key(&id) => {
                    participants.push((id, n.clone(), entry.span.table))
                }
                _ => complete = false,
            }
        }
        if influence.trigger && !e.waiting.contains_key(&self.trigger) {
            complete = false;
        }
        let writer = if influence.trigger {
            Some((self.trigger, self.node.clone()))
        } else {
            participants
                .iter()
                .find(|p| !influence.sources.contains(&p.2))
                .or(participants.first())
                .map(|(id, n, _)| (*id, n.clone()))
        };
        let concerns = self.ddl_concerns_changefeed(&influence);
        let Some(e) = self.barrier.events.get_mut(&d) else {
            return;
        };
        for id in stale {
            e.waiting.remove(&id);
        }
        if !complete {
            return;
        }
        if !concerns {
            // Only tables this changefeed does not replicate: pass it without writing it.
            self.mark_written(ctx, d, out);
            return;
        }
        let Some((w, wn)) = writer else {
            // Nobody takes part (every table concerned is gone): nothing to write.
            e.written = true;
            return;
        };
        e.writer = Some((w, wn.clone()));
        #[cfg(feature = "mutations")]
        if crate::mutations::on("pass-before-write") {
            let others: Vec<(DispatcherId, NodeId)> = e
                .waiting
                .iter()
                .filter(|(i, _)| **i != w)
                .map(|(i, n)| (*i, n.clone()))
                .collect();
            for (i, n) in others {
                self.barrier_cmd(out, &n, i, d, BarrierCommand::Pass);
            }
        }
        self.barrier_cmd(out, &wn, w, d, BarrierCommand::Write);
    }

    pub(super) fn barrier_cmd(
        &self,
        out: &mut Vec<Effect>,
        to: &NodeId,
        id: DispatcherId,
        ddl_ts: Ts,
        command: BarrierCommand,
    ) {
        self.send(
            out,
            to,
            Message::Barrier {
                cf: self.cf.clone(),
                epoch: self.epoch,
                id,
                ddl_ts,
                command,
            },
        );
    }

    /// The DDL at `d` is durable: apply its effects once and let every waiting participant pass.
    pub(super) fn mark_written(&mut self, ctx: &Ctx, d: Ts, out: &mut Vec<Effect>) {
        let Some(e) = self.barrier.events.get_mut(&d) else {
            return;
        };
        e.written = true;
        if !e.applied {
            e.applied = true;
            let influence = e.influence.clone();
            let took_part = self.participant_tables(&influence, d);
            self.apply_ddl(ctx, d, &influence, out);
            self.raise_past_written(&took_part, d);
        }
        let Some(e) = self.barrier.events.get(&d) else {
            return;
        };
        let writer = e.writer.as_ref().map(|w| w.0);
        // Dispatchers of tables this DDL drops never pass it: they wait there until removed, so
        // their progress never suggests anything about later DDLs.
        let ends = |id: &DispatcherId| {
            self.tracked
                .get(id)
                .map(|t| e.influence.dropped.contains(&t.span.table))
                .unwrap_or(false)
        };
        let waiting: Vec<(DispatcherId, NodeId)> = e
            .waiting
            .iter()
            .filter(|(id, _)| Some(**id) != writer && !ends(id))
            .map(|(i, n)| (*i, n.clone()))
            .collect();
        for (id, n) in waiting {
            self.barrier_cmd(out, &n, id, d, BarrierCommand::Pass);
        }
    }

    /// A span's dispatcher waits at the DDL at `d`: everything of the span before it is durable,
    /// so whatever replaces that dispatcher (its node died, an operator moves or splits it)
    /// starts at `d - 1` at least, not at an older heartbeat's checkpoint: it must not write the
    /// span's rows again once the DDL may have taken effect (rows before a RENAME under the old
    /// name, rows of a version a TRUNCATE replaced).
    pub(super) fn raise_to_waiting(&mut self, id: DispatcherId, from: &NodeId, d: Ts) {
        self.spans.update_where(
            |e| e.dispatcher == Some(id) && e.node.as_ref() == Some(from),
            |e| e.checkpoint = e.checkpoint.max(d.saturating_sub(1)),
        );
    }

    /// The DDL at `d` is durable and every span of the tables that took part in it had flushed
    /// everything before it: their replacements start after the DDL.
    pub(super) fn raise_past_written(&mut self, tables: &[TableId], d: Ts) {
        self.spans.update_where(
            |e| tables.contains(&e.span.table),
            |e| e.checkpoint = e.checkpoint.max(d),
        );
    }

    /// A DDL's effects on the table set and span map, applied once it is durable.
    pub(super) fn apply_ddl(
        &mut self,
        ctx: &Ctx,
        d: Ts,
        influence: &DdlInfluence,
        out: &mut Vec<Effect>,
    ) {
        #[cfg(feature = "mutations")]
        let buggy = crate::mutations::on("create-dropped-table");
        #[cfg(not(feature = "mutations"))]
        let buggy = false;
        for t in &influence.dropped {
            self.drop_table(*t, out);
            if buggy {
                // The bug: the dropped table comes back, starting at the drop.
                let name = format!("dropped.{t:?}");
                self.tables.insert(
                    *t,
                    TableState {
                        name,
                        created: d,
                        splittable: true,
                        user_split: false,
                        placed_by_user: None,
                    },
                );
                self.add_table_spans(ctx, *t, d);
            }
        }
        for (t, name) in &influence.added {
            if !self.filter.matches_name(name) || self.replay.gone.contains(t) {
                continue;
            }
            let exists = self.spans.keys().any(|(tt, _)| tt == t);
            if exists && !buggy {
                self.log(
                    out,
                    format!("table {t:?} created at {d} is already covered by adopted dispatchers"),
                );
                continue;
            }
            self.tables.insert(
                *t,
                TableState {
                    name: name.clone(),
                    created: d,
                    splittable: true,
                    user_split: false,
                    placed_by_user: None,
                },
            );
            self.add_table_spans(ctx, *t, d);
        }
        for (t, name) in &influence.renamed {
            let keep = self.filter.matches_name(name);
            match self.tables.get_mut(t) {
                // Renamed out of the filter: no longer replicated.
                Some(_) if !keep => self.drop_table(*t, out),
                Some(s) => s.name = name.clone(),
                // Renamed into the filter: replicated from the rename on (unless a DDL the
                // downstream already applied drops it later).
                None if keep
                    && !self.replay.gone.contains(t)
                    && !self.spans.keys().any(|(tt, _)| tt == t) =>
                {
                    self.tables.insert(
                        *t,
                        TableState {
                            name: name.clone(),
                            created: d,
                            splittable: true,
                            user_split: false,
                            placed_by_user: None,
                        },
                    );
                    self.add_table_spans(ctx, *t, d);
                }
                None => {}
            }
        }
    }

    /// Whether a DDL concerns what this changefeed replicates (a DDL only on filtered-out tables
    /// is passed without being written).
    pub(super) fn ddl_concerns_changefeed(&self, influence: &DdlInfluence) -> bool {
        if self.config.filter.ignores("ddl") {
            return false;
        }
        match &influence.scope {
            InfluenceScope::Tables(ts) => {
                ts.iter().any(|t| self.tables.contains_key(t))
                    || influence
                        .added
                        .iter()
                        .any(|(_, n)| self.filter.matches_name(n))
                    || influence
                        .renamed
                        .iter()
                        .any(|(t, n)| self.tables.contains_key(t) || self.filter.matches_name(n))
                    || (ts.is_empty() && influence.added.is_empty() && influence.renamed.is_empty())
            }
            InfluenceScope::Database(_) | InfluenceScope::All => true,
        }
    }

    pub(super) fn drop_table(&mut self, table: TableId, out: &mut Vec<Effect>) {
        self.tables.remove(&table);
        // Cancel its operators; every dispatcher of the table that may exist gets removed.
        let ops: Vec<u64> = self
            .ops
            .values()
            .filter(|o| o.table == table)
            .map(|o| o.id)
            .collect();
        for id in ops {
            if let Some(mut op) = self.ops.remove(&id) {
                if op.kind.legal(op.phase, OpPhase::Aborted) {
                    op.transition(OpPhase::Aborted);
                }
            }
        }
        self.spans.retain(|(t, _), _| *t != table);
        let ids: Vec<(DispatcherId, NodeId)> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.span.table == table)
            .map(|(id, t)| (*id, t.node.clone()))
            .collect();
        if !ids.is_empty() {
            self.start_cleanup(table, ids, None);
        }
        self.reject_requests_of(table, "rejected: the table was dropped", out);
    }
}
