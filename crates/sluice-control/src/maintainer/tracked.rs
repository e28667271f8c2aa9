//! The dispatchers a maintainer knows of on every node ([`TrackedMap`]), with an index of their
//! spans by table and key (`span_index.rs`) so the one-writer check (`Maintainer::can_create`)
//! is a lookup among the dispatchers of the span's table, not a pass over every dispatcher of
//! the changefeed or of the table (either made placing n spans cost n²), and an index by node
//! so a complete heartbeat looks only at that node's dispatchers. The index keeps each one's
//! span, so the check reads no entry of the map.
//!
//! Invariant: each index names exactly the tracked dispatchers, each under its span's table
//! (with its span) and its node (a tracked dispatcher's span and node never change once
//! tracked; checked where the indexes are read in debug builds).

use super::*;
use crate::span_index::TableSpans;
use std::ops::Deref;

/// Tracked dispatchers by id, indexed by table. Reads go through `Deref` to the map.
#[derive(Debug, Default)]
pub(super) struct TrackedMap {
    map: BTreeMap<DispatcherId, TrackedDispatcher>,
    by_table: BTreeMap<TableId, TableSpans>,
    by_node: BTreeMap<NodeId, BTreeSet<DispatcherId>>,
    /// Every id inserted, removed or handed out to change since the last `take_touched`
    /// (what may wake a parked operator, `parked.rs`).
    touched: Vec<DispatcherId>,
}

impl Deref for TrackedMap {
    type Target = BTreeMap<DispatcherId, TrackedDispatcher>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl TrackedMap {
    pub(super) fn insert(&mut self, id: DispatcherId, t: TrackedDispatcher) {
        self.touched.push(id);
        if let Some(old) = self.map.remove(&id) {
            self.unindex(&old, id);
        }
        self.by_table
            .entry(t.span.table)
            .or_default()
            .insert(id, &t.span);
        match self.by_node.get_mut(&t.node) {
            Some(ids) => {
                ids.insert(id);
            }
            None => {
                self.by_node.insert(t.node.clone(), BTreeSet::from([id]));
            }
        }
        self.map.insert(id, t);
    }

    /// Tracks `id` unless it is tracked already.
    pub(super) fn insert_if_absent(&mut self, id: DispatcherId, t: TrackedDispatcher) {
        if !self.map.contains_key(&id) {
            self.insert(id, t);
        }
    }

    pub(super) fn remove(&mut self, id: &DispatcherId) -> Option<TrackedDispatcher> {
        let t = self.map.remove(id)?;
        self.touched.push(*id);
        self.unindex(&t, *id);
        Some(t)
    }

    pub(super) fn retain(
        &mut self,
        mut keep: impl FnMut(&DispatcherId, &TrackedDispatcher) -> bool,
    ) {
        let gone: Vec<DispatcherId> = self
            .map
            .iter()
            .filter(|(id, t)| !keep(id, t))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.remove(&id);
        }
    }

    /// A tracked dispatcher to change: its phase or checkpoint, never its span or node (the
    /// indexes would no longer find it; `of_table` and `of_node` assert it in debug builds).
    pub(super) fn get_mut(&mut self, id: &DispatcherId) -> Option<&mut TrackedDispatcher> {
        self.touched.push(*id);
        self.map.get_mut(id)
    }

    /// The ids touched since the last call (see `touched`).
    pub(super) fn take_touched(&mut self) -> Vec<DispatcherId> {
        std::mem::take(&mut self.touched)
    }

    /// Whether a tracked dispatcher other than those of `except` has a span that overlaps
    /// `span` (only those of its table are looked at, by key: `span_index.rs`).
    pub(super) fn any_overlaps(&self, span: &Span, except: &[DispatcherId]) -> bool {
        self.by_table
            .get(&span.table)
            .is_some_and(|t| t.any_overlaps(span, except))
    }

    /// The ids of the tracked dispatchers on `node`, in order (no entry of the map is read).
    pub(super) fn ids_of_node<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> impl Iterator<Item = &'a DispatcherId> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .inspect(move |id| {
                debug_assert!(
                    self.map.get(id).is_some_and(|t| &t.node == node),
                    "a tracked dispatcher's node changed, or the index lost it"
                )
            })
    }

    fn unindex(&mut self, t: &TrackedDispatcher, id: DispatcherId) {
        if let Some(spans) = self.by_table.get_mut(&t.span.table) {
            spans.remove(id, &t.span);
            if spans.is_empty() {
                self.by_table.remove(&t.span.table);
            }
        }
        if let Some(ids) = self.by_node.get_mut(&t.node) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_node.remove(&t.node);
            }
        }
    }
}
