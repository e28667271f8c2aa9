//! The rows a dispatcher was handed and has not written yet, by handle.
//!
//! Handles are given in increasing order, and a dispatcher writes (or skips) its rows mostly in
//! that order, so the rows sit in a ring in handle order: taking one is a binary search that
//! leaves a hole, holes at the front are dropped at once. No insert or removal shifts the rows
//! after it (a sorted map shifts its nodes' rows on both); only the ring's growth moves them.
//!
//! Invariants: handles in the ring strictly increase (asserted where one is added); the front
//! slot is always occupied; `len` counts the occupied slots.

use std::collections::VecDeque;

#[derive(Clone, Debug)]
pub(super) struct Held<R> {
    slots: VecDeque<(u64, Option<(R, usize)>)>,
    len: usize,
}

impl<R> Held<R> {
    pub(super) fn new() -> Self {
        Held {
            slots: VecDeque::new(),
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Holds `row` (of `size` bytes) under `handle`, above every handle held.
    pub(super) fn insert(&mut self, handle: u64, row: R, size: usize) {
        if let Some((last, _)) = self.slots.back() {
            assert!(
                handle > *last,
                "handle {handle} given after {last}: handles only increase"
            );
        }
        self.slots.push_back((handle, Some((row, size))));
        self.len += 1;
    }

    /// Takes the row held under `handle`.
    pub(super) fn remove(&mut self, handle: u64) -> Option<(R, usize)> {
        let at = self.slots.binary_search_by_key(&handle, |s| s.0).ok()?;
        let taken = self.slots[at].1.take();
        if taken.is_some() {
            self.len -= 1;
            self.trim_front();
        }
        taken
    }

    /// Takes every row under a handle below `handle`, in handle order.
    pub(super) fn take_below(&mut self, handle: u64) -> Vec<(R, usize)> {
        let mut taken = Vec::new();
        while self.slots.front().is_some_and(|s| s.0 < handle) {
            if let Some((_, Some(row))) = self.slots.pop_front() {
                taken.push(row);
            }
        }
        self.len -= taken.len();
        self.trim_front();
        taken
    }

    /// Takes every row `pred` selects (by handle and row).
    pub(super) fn take_where(&mut self, pred: impl Fn(u64, &R) -> bool) -> Vec<(R, usize)> {
        let mut taken = Vec::new();
        for (h, slot) in self.slots.iter_mut() {
            if slot.as_ref().is_some_and(|(r, _)| pred(*h, r)) {
                taken.extend(slot.take());
            }
        }
        self.len -= taken.len();
        self.slots.retain(|s| s.1.is_some());
        taken
    }

    /// The rows held with their sizes, in handle order.
    pub(super) fn values(&self) -> impl Iterator<Item = &(R, usize)> {
        self.slots.iter().filter_map(|s| s.1.as_ref())
    }

    fn trim_front(&mut self) {
        while self.slots.front().is_some_and(|s| s.1.is_none()) {
            self.slots.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Held;
    use std::collections::BTreeMap;

    /// Random inserts, removals and releases agree with a sorted map doing the same.
    #[test]
    fn held_rows_agree_with_a_sorted_map() {
        let mut rng = sluice_testkit::rng::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| rng.below(n);
        let mut held = Held::new();
        let mut model: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        let mut handle = 0u64;
        for _ in 0..20_000 {
            match next(10) {
                0..=4 => {
                    handle += 1 + next(3);
                    held.insert(handle, handle * 7, handle as usize);
                    model.insert(handle, (handle * 7, handle as usize));
                }
                5..=7 => {
                    let h = handle.saturating_sub(next(40));
                    assert_eq!(held.remove(h), model.remove(&h), "remove {h}");
                }
                8 => {
                    let h = handle.saturating_sub(next(60));
                    let kept = model.split_off(&h);
                    let gone: Vec<_> = std::mem::replace(&mut model, kept).into_values().collect();
                    assert_eq!(held.take_below(h), gone, "below {h}");
                }
                _ => {
                    let m = 2 + next(5);
                    let gone: Vec<_> = model.values().copied().filter(|r| r.0 % m == 0).collect();
                    model.retain(|_, r| r.0 % m != 0);
                    assert_eq!(held.take_where(|_, r| r % m == 0), gone);
                }
            }
            assert_eq!(held.len(), model.len());
            assert!(held.values().copied().eq(model.values().copied()));
        }
    }

    #[test]
    #[should_panic(expected = "handles only increase")]
    fn a_handle_below_the_last_is_refused() {
        let mut held = Held::new();
        held.insert(5, (), 1);
        held.insert(5, (), 1);
    }
}
