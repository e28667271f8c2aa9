//! A dispatcher manager's dispatchers ([`DispatcherSet`]): by id, with an index by table, so the
//! one-writer check on every create ([`DispatcherSet::overlapping`]) looks only at the
//! dispatchers of the span's table, not at every dispatcher of the node (which made creating n
//! dispatchers cost n²: 68% of a 100,000-span `sluice-sim scale` run).
//!
//! Invariant: the index names exactly the dispatchers of the set, each under its span's table (a
//! dispatcher's span never changes; checked where the index is read in debug builds). Reads go
//! through `Deref` to the map; `insert`, `remove`, `get_mut` and `values_mut` are the only
//! writes, and neither of the last two may change a span.

use super::*;
use std::ops::Deref;

#[derive(Debug, Default)]
pub(super) struct DispatcherSet {
    map: BTreeMap<DispatcherId, Dispatcher>,
    by_table: BTreeMap<TableId, BTreeSet<DispatcherId>>,
}

impl Deref for DispatcherSet {
    type Target = BTreeMap<DispatcherId, Dispatcher>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl DispatcherSet {
    pub(super) fn insert(&mut self, id: DispatcherId, d: Dispatcher) -> Option<Dispatcher> {
        let old = self.remove(&id);
        self.by_table.entry(d.span.table).or_default().insert(id);
        self.map.insert(id, d);
        old
    }

    pub(super) fn remove(&mut self, id: &DispatcherId) -> Option<Dispatcher> {
        let d = self.map.remove(id)?;
        if let Some(ids) = self.by_table.get_mut(&d.span.table) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_table.remove(&d.span.table);
            }
        }
        Some(d)
    }

    /// A dispatcher to change, never its span.
    pub(super) fn get_mut(&mut self, id: &DispatcherId) -> Option<&mut Dispatcher> {
        self.map.get_mut(id)
    }

    /// Every dispatcher, to change, never a span.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Dispatcher> {
        self.map.values_mut()
    }

    /// The span dispatcher (not a table trigger) with the lowest id, other than `except`,
    /// whose span overlaps `span`.
    pub(super) fn overlapping(&self, span: &Span, except: &[DispatcherId]) -> Option<DispatcherId> {
        self.by_table
            .get(&span.table)
            .into_iter()
            .flatten()
            .filter_map(|id| self.map.get(id))
            .inspect(|d| debug_assert_eq!(d.span.table, span.table, "a dispatcher's span changed"))
            .find(|d| !d.is_trigger && !except.contains(&d.id) && d.span.overlaps(span))
            .map(|d| d.id)
    }
}
