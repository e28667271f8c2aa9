//! The maintainer's span map ([`SpanMap`]): every span entry by (table, start key), with the
//! indexes the per-tick work reads instead of a pass over every span: the absent spans without
//! an operator (the placement's queue, in key order), the spans per node (the loads), how many
//! entries do not replicate, and the multisets of the entries' checkpoints and resolved ts
//! (the changefeed checkpoint and resolved ts are their least). So a tick of a maintainer of
//! 1,000,000 spans costs what changed, not a pass over the map (`sluice-sim scale`).
//!
//! Invariant: the indexes describe exactly the entries of the map. Reads go through `Deref` to
//! the map; every change goes through [`SpanMap::get_mut`] (a guard that indexes the entry
//! again when it is dropped), [`SpanMap::update_where`], `insert`, `remove` or `retain`.
//! Debug builds recount everything and compare at every checkpoint computation
//! ([`SpanMap::debug_check`]).

use super::*;
use std::ops::{Bound, Deref, DerefMut};

/// What the indexes know of one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sig {
    queued: bool,
    node: Option<NodeId>,
    replicating: bool,
    checkpoint: Ts,
    resolved: Ts,
}

impl Sig {
    fn of(e: &SpanEntry) -> Sig {
        Sig {
            queued: e.state == SpanState::Absent && e.op.is_none(),
            node: e.node.clone(),
            replicating: e.state == SpanState::Replicating,
            checkpoint: e.checkpoint,
            resolved: e.resolved.max(e.checkpoint),
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Index {
    queued: BTreeSet<SpanKey>,
    per_node: BTreeMap<NodeId, usize>,
    not_replicating: usize,
    checkpoints: BTreeMap<Ts, usize>,
    resolved: BTreeMap<Ts, usize>,
}

fn count_up<K: Ord + Clone>(m: &mut BTreeMap<K, usize>, k: &K) {
    match m.get_mut(k) {
        Some(c) => *c += 1,
        None => {
            m.insert(k.clone(), 1);
        }
    }
}

fn count_down<K: Ord>(m: &mut BTreeMap<K, usize>, k: &K) {
    let c = m.get_mut(k).expect("span index: counted entry missing");
    *c -= 1;
    if *c == 0 {
        m.remove(k);
    }
}

impl Index {
    fn add(&mut self, k: &SpanKey, s: &Sig) {
        if s.queued {
            self.queued.insert(k.clone());
        }
        if let Some(n) = &s.node {
            count_up(&mut self.per_node, n);
        }
        self.not_replicating += usize::from(!s.replicating);
        count_up(&mut self.checkpoints, &s.checkpoint);
        count_up(&mut self.resolved, &s.resolved);
    }

    fn sub(&mut self, k: &SpanKey, s: &Sig) {
        if s.queued {
            self.queued.remove(k);
        }
        if let Some(n) = &s.node {
            count_down(&mut self.per_node, n);
        }
        self.not_replicating -= usize::from(!s.replicating);
        count_down(&mut self.checkpoints, &s.checkpoint);
        count_down(&mut self.resolved, &s.resolved);
    }

    /// The entry at `k` was `old` and is now `e`: only what differs is touched.
    fn change(&mut self, k: &SpanKey, old: &Sig, e: &SpanEntry) {
        let queued = e.state == SpanState::Absent && e.op.is_none();
        if queued != old.queued {
            if queued {
                self.queued.insert(k.clone());
            } else {
                self.queued.remove(k);
            }
        }
        if e.node != old.node {
            if let Some(n) = &old.node {
                count_down(&mut self.per_node, n);
            }
            if let Some(n) = &e.node {
                count_up(&mut self.per_node, n);
            }
        }
        let replicating = e.state == SpanState::Replicating;
        if replicating != old.replicating {
            if replicating {
                self.not_replicating -= 1;
            } else {
                self.not_replicating += 1;
            }
        }
        if e.checkpoint != old.checkpoint {
            count_down(&mut self.checkpoints, &old.checkpoint);
            count_up(&mut self.checkpoints, &e.checkpoint);
        }
        let resolved = e.resolved.max(e.checkpoint);
        if resolved != old.resolved {
            count_down(&mut self.resolved, &old.resolved);
            count_up(&mut self.resolved, &resolved);
        }
    }
}

/// Span entries by [`SpanKey`], indexed (see the module's comment).
#[derive(Debug, Default)]
pub(super) struct SpanMap {
    map: BTreeMap<SpanKey, SpanEntry>,
    index: Index,
    /// The operators of entries removed since the last `take_dropped_ops` (a parked operator
    /// whose entry went is woken, `parked.rs`).
    dropped_ops: Vec<u64>,
}

impl Deref for SpanMap {
    type Target = BTreeMap<SpanKey, SpanEntry>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

/// A span entry being changed: indexed again when dropped.
pub(super) struct EntryMut<'a> {
    key: &'a SpanKey,
    entry: &'a mut SpanEntry,
    index: &'a mut Index,
    old: Sig,
}

impl Deref for EntryMut<'_> {
    type Target = SpanEntry;
    fn deref(&self) -> &SpanEntry {
        self.entry
    }
}

impl DerefMut for EntryMut<'_> {
    fn deref_mut(&mut self) -> &mut SpanEntry {
        self.entry
    }
}

impl Drop for EntryMut<'_> {
    fn drop(&mut self) {
        self.index.change(self.key, &self.old, self.entry);
    }
}

impl SpanMap {
    pub(super) fn insert(&mut self, k: SpanKey, e: SpanEntry) -> Option<SpanEntry> {
        let sig = Sig::of(&e);
        let old = self.map.insert(k.clone(), e);
        if let Some(o) = &old {
            self.index.sub(&k, &Sig::of(o));
            self.dropped_ops.extend(o.op);
        }
        self.index.add(&k, &sig);
        old
    }

    pub(super) fn remove(&mut self, k: &SpanKey) -> Option<SpanEntry> {
        let e = self.map.remove(k)?;
        self.index.sub(k, &Sig::of(&e));
        self.dropped_ops.extend(e.op);
        Some(e)
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&SpanKey, &mut SpanEntry) -> bool) {
        let (index, dropped) = (&mut self.index, &mut self.dropped_ops);
        self.map.retain(|k, e| {
            let old = Sig::of(e);
            let kept = keep(k, e);
            if kept {
                index.change(k, &old, e);
            } else {
                index.sub(k, &old);
                dropped.extend(e.op);
            }
            kept
        });
    }

    /// The entry at `k`, to change (indexed again when the guard is dropped).
    pub(super) fn get_mut(&mut self, k: &SpanKey) -> Option<EntryMut<'_>> {
        let (key, entry) = self
            .map
            .range_mut::<SpanKey, _>((Bound::Included(k), Bound::Included(k)))
            .next()?;
        let old = Sig::of(entry);
        Some(EntryMut {
            key,
            entry,
            index: &mut self.index,
            old,
        })
    }

    /// The reports' path: if `serves` says so, raises the checkpoint and resolved ts of the
    /// entry at `k` (and sets its write rate, if given). Only the two multisets are touched:
    /// nothing else of the entry changes. `true`: the entry was there and served.
    pub(super) fn raise(
        &mut self,
        k: &SpanKey,
        serves: impl FnOnce(&SpanEntry) -> bool,
        (checkpoint, resolved): (Ts, Ts),
        write_rate: Option<u64>,
    ) -> bool {
        let Some(e) = self.map.get_mut(k) else {
            return false;
        };
        if !serves(e) {
            return false;
        }
        let (old_cp, old_res) = (e.checkpoint, e.resolved.max(e.checkpoint));
        e.checkpoint = e.checkpoint.max(checkpoint);
        e.resolved = e.resolved.max(resolved);
        if let Some(rate) = write_rate {
            e.write_rate = rate;
        }
        let res = e.resolved.max(e.checkpoint);
        if e.checkpoint != old_cp {
            count_down(&mut self.index.checkpoints, &old_cp);
            count_up(&mut self.index.checkpoints, &e.checkpoint);
        }
        if res != old_res {
            count_down(&mut self.index.resolved, &old_res);
            count_up(&mut self.index.resolved, &res);
        }
        true
    }

    /// Applies `f` to every entry `pick` selects (a pass over the map: for rare events only).
    pub(super) fn update_where(
        &mut self,
        pick: impl Fn(&SpanEntry) -> bool,
        mut f: impl FnMut(&mut SpanEntry),
    ) {
        for (k, e) in self.map.iter_mut().filter(|(_, e)| pick(e)) {
            let old = Sig::of(e);
            f(e);
            self.index.change(k, &old, e);
        }
    }

    /// The operators of the entries removed since the last call.
    pub(super) fn take_dropped_ops(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.dropped_ops)
    }

    /// Absent spans with no operator, in key order.
    pub(super) fn queued(&self) -> impl Iterator<Item = &SpanKey> {
        self.index.queued.iter()
    }

    /// Spans per node (the entries whose `node` is set; nodes with none are absent).
    pub(super) fn per_node(&self) -> &BTreeMap<NodeId, usize> {
        &self.index.per_node
    }

    /// Whether every entry replicates.
    pub(super) fn all_replicating(&self) -> bool {
        self.index.not_replicating == 0
    }

    /// How many entries replicate.
    pub(super) fn replicating(&self) -> usize {
        self.map.len() - self.index.not_replicating
    }

    /// The least checkpoint of the entries (`None`: no entry).
    pub(super) fn min_checkpoint(&self) -> Option<Ts> {
        self.index.checkpoints.keys().next().copied()
    }

    /// The least `max(resolved, checkpoint)` of the entries (`None`: no entry).
    pub(super) fn min_resolved(&self) -> Option<Ts> {
        self.index.resolved.keys().next().copied()
    }

    /// Debug builds: the indexes equal a recount of the map.
    pub(super) fn debug_check(&self) {
        #[cfg(debug_assertions)]
        {
            let mut fresh = Index::default();
            for (k, e) in &self.map {
                fresh.add(k, &Sig::of(e));
            }
            assert_eq!(
                fresh, self.index,
                "the span map's indexes drifted from its entries"
            );
        }
    }
}
