//! The dispatchers a maintainer knows of on every node ([`TrackedMap`]), with an index by table
//! so the one-writer check ([`Maintainer::can_create`]) looks only at the dispatchers of the
//! span's table, not at every dispatcher of the changefeed (which made placing n spans cost n²).
//!
//! Invariant: the index names exactly the tracked dispatchers, each under its span's table (a
//! tracked dispatcher's span never changes once tracked; checked where the index is read).

use super::*;
use std::ops::Deref;

/// Tracked dispatchers by id, indexed by table. Reads go through `Deref` to the map.
#[derive(Debug, Default)]
pub(super) struct TrackedMap {
    map: BTreeMap<DispatcherId, TrackedDispatcher>,
    by_table: BTreeMap<TableId, BTreeSet<DispatcherId>>,
}

impl Deref for TrackedMap {
    type Target = BTreeMap<DispatcherId, TrackedDispatcher>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl TrackedMap {
    pub(super) fn insert(&mut self, id: DispatcherId, t: TrackedDispatcher) {
        self.by_table.entry(t.span.table).or_default().insert(id);
        if let Some(old) = self.map.insert(id, t) {
            let table = self.map[&id].span.table;
            if old.span.table != table {
                self.unindex(old.span.table, id);
            }
        }
    }

    /// Tracks `id` unless it is tracked already.
    pub(super) fn insert_if_absent(&mut self, id: DispatcherId, t: TrackedDispatcher) {
        if !self.map.contains_key(&id) {
            self.insert(id, t);
        }
    }

    pub(super) fn remove(&mut self, id: &DispatcherId) -> Option<TrackedDispatcher> {
        let t = self.map.remove(id)?;
        self.unindex(t.span.table, *id);
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

    /// A tracked dispatcher to change: its node, phase or checkpoint, never its span (the
    /// index would no longer find it; `of_table` asserts it in debug builds).
    pub(super) fn get_mut(&mut self, id: &DispatcherId) -> Option<&mut TrackedDispatcher> {
        self.map.get_mut(id)
    }

    /// The tracked dispatchers of `table`.
    pub(super) fn of_table(
        &self,
        table: TableId,
    ) -> impl Iterator<Item = (&DispatcherId, &TrackedDispatcher)> {
        self.by_table
            .get(&table)
            .into_iter()
            .flatten()
            .filter_map(|id| self.map.get_key_value(id))
            .inspect(move |(_, t)| {
                debug_assert_eq!(t.span.table, table, "a tracked dispatcher's span changed")
            })
    }

    fn unindex(&mut self, table: TableId, id: DispatcherId) {
        if let Some(ids) = self.by_table.get_mut(&table) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_table.remove(&table);
            }
        }
    }
}
