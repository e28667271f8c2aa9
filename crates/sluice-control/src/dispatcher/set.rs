//! A dispatcher manager's dispatchers ([`DispatcherSet`]): by id, with an index of their spans by
//! table and key (`span_index.rs`), so the one-writer check on every create
//! ([`DispatcherSet::overlapping`]) is a lookup among the dispatchers of the span's table, not a
//! pass over every dispatcher of the node, nor over every one of the table (either made
//! creating n dispatchers cost n²).
//!
//! It also keeps the quiet dispatchers apart: resting ones a heartbeat between complete ones
//! would only count in its rest ts (see `pump.rs`), with the checkpoint each had, so such a
//! heartbeat visits only the others (100,000 resting dispatchers cost it a lookup of the least
//! checkpoint, not a pass over them).
//!
//! Invariants: the index names exactly the dispatchers of the set, each under its span's table
//! (a dispatcher's span never changes; checked where the index is read in debug builds). Every
//! dispatcher is either quiet or loud, never both; a quiet one has not been handed out to change
//! since it was marked quiet, so it and its checkpoint are as they were then (checked by
//! `debug_check_quiet`). Reads go through `Deref` to the map; `insert`, `remove`, `get_mut` and
//! `values_mut` are the only writes (the last two make what they hand out loud), and neither
//! of the last two may change a span.

use super::*;
use crate::span_index::TableSpans;
use std::ops::Deref;

#[derive(Debug, Default)]
pub(super) struct DispatcherSet {
    map: BTreeMap<DispatcherId, Dispatcher>,
    /// The spans of the span dispatchers (not table triggers) by table, ordered by key.
    by_table: BTreeMap<TableId, TableSpans>,
    /// Quiet dispatchers with the checkpoint each had when marked, and how many had each one.
    quiet: BTreeMap<DispatcherId, Ts>,
    quiet_cps: BTreeMap<Ts, usize>,
    /// Every other dispatcher of the set.
    loud: BTreeSet<DispatcherId>,
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
        if !d.is_trigger {
            self.by_table
                .entry(d.span.table)
                .or_default()
                .insert(id, &d.span);
        }
        self.map.insert(id, d);
        self.loud.insert(id);
        old
    }

    pub(super) fn remove(&mut self, id: &DispatcherId) -> Option<Dispatcher> {
        let d = self.map.remove(id)?;
        self.make_loud(id);
        self.loud.remove(id);
        if let (false, Some(spans)) = (d.is_trigger, self.by_table.get_mut(&d.span.table)) {
            spans.remove(*id, &d.span);
            if spans.is_empty() {
                self.by_table.remove(&d.span.table);
            }
        }
        Some(d)
    }

    /// A dispatcher to change, never its span (it is loud from now on).
    pub(super) fn get_mut(&mut self, id: &DispatcherId) -> Option<&mut Dispatcher> {
        self.make_loud(id);
        self.map.get_mut(id)
    }

    /// Every dispatcher, to change, never a span (every one is loud from now on).
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Dispatcher> {
        if !self.quiet.is_empty() {
            self.loud
                .extend(std::mem::take(&mut self.quiet).into_keys());
            self.quiet_cps.clear();
        }
        self.map.values_mut()
    }

    fn make_loud(&mut self, id: &DispatcherId) {
        if let Some(cp) = self.quiet.remove(id) {
            let n = self
                .quiet_cps
                .get_mut(&cp)
                .expect("quiet checkpoint counted");
            *n -= 1;
            if *n == 0 {
                self.quiet_cps.remove(&cp);
            }
            self.loud.insert(*id);
        }
    }

    /// `id` (in the set, loud) is quiet from now on, at checkpoint `cp`.
    pub(super) fn make_quiet(&mut self, id: DispatcherId, cp: Ts) {
        assert!(
            self.loud.remove(&id),
            "only a loud dispatcher of the set turns quiet"
        );
        self.quiet.insert(id, cp);
        *self.quiet_cps.entry(cp).or_default() += 1;
    }

    /// The loud dispatchers, in id order.
    pub(super) fn loud(&self) -> Vec<DispatcherId> {
        self.loud.iter().copied().collect()
    }

    /// How many dispatchers are quiet, and the least checkpoint among them.
    pub(super) fn quiet(&self) -> (usize, Option<Ts>) {
        (self.quiet.len(), self.quiet_cps.keys().next().copied())
    }

    /// Debug builds: quiet and loud split the set, and a quiet one is as it was marked.
    pub(super) fn debug_check_quiet(&self, is_quiet: impl Fn(&Dispatcher) -> bool) {
        #[cfg(debug_assertions)]
        {
            assert_eq!(self.quiet.len() + self.loud.len(), self.map.len());
            for (id, cp) in &self.quiet {
                let d = self.map.get(id).expect("a quiet dispatcher is in the set");
                assert!(!self.loud.contains(id) && is_quiet(d) && d.checkpoint() == *cp);
            }
        }
        let _ = is_quiet;
    }

    /// The span dispatcher (not a table trigger) with the lowest id, other than `except`,
    /// whose span overlaps `span`.
    pub(super) fn overlapping(&self, span: &Span, except: &[DispatcherId]) -> Option<DispatcherId> {
        self.by_table
            .get(&span.table)
            .and_then(|spans| spans.lowest_overlapping(span, except))
    }
}
