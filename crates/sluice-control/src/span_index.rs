//! The spans of one table's dispatchers, ordered by start key ([`TableSpans`]), so the one-writer
//! checks (the maintainer's `can_create`, the dispatcher manager's refusal of an overlapping
//! create) cost a lookup, not a pass over the table's dispatchers: a table split into n spans
//! was placed in n² steps (a pass per create, on both sides; `sluice-sim scale --tables 1`).
//!
//! While the table's non-empty spans do not overlap each other (the usual case: dispatchers are
//! created only where none overlaps), ordered by start they are ordered by end too, so a span
//! `[s, e)` overlaps one of them only if that one starts in `[s, e)` or is the last one starting
//! before `s` and ends after `s`. While some do overlap (the maintainer tracks what nodes
//! report, including dispatchers it did not create), a check passes over them all, as it always
//! did; whether they still overlap is found again at the next check after a removal.
//!
//! Invariants: `starts` and `empty` hold exactly the spans inserted and not removed (empty spans
//! apart: under [`Span::overlaps`] they are in no order with the others); `disjoint` is
//! `Some(true)` only if no two spans of `starts` overlap, `Some(false)` only if two do (debug
//! builds recount at every check, and compare its answer with a pass over every span).

use sluice_types::{DispatcherId, Key, Span};
use std::cell::Cell;
use std::collections::BTreeMap;

/// One table's dispatcher spans.
#[derive(Debug, Default)]
pub(crate) struct TableSpans {
    /// Non-empty spans: (start, id) -> end.
    starts: BTreeMap<(Key, DispatcherId), Key>,
    /// Empty spans (start = end), by id.
    empty: BTreeMap<DispatcherId, Span>,
    /// Whether no two spans of `starts` overlap (`None`: not known since a removal; found by
    /// the next check, which otherwise only reads the index).
    disjoint: Cell<Option<bool>>,
}

impl TableSpans {
    pub(crate) fn is_empty(&self) -> bool {
        self.starts.is_empty() && self.empty.is_empty()
    }

    pub(crate) fn insert(&mut self, id: DispatcherId, span: &Span) {
        if span.start >= span.end {
            self.empty.insert(id, span.clone());
            return;
        }
        if self.starts.is_empty() {
            self.disjoint.set(Some(true));
        } else if self.disjoint.get() == Some(true)
            && self.disjoint_overlapping(span, &[]).next().is_some()
        {
            self.disjoint.set(Some(false));
        }
        self.starts
            .insert((span.start.clone(), id), span.end.clone());
    }

    pub(crate) fn remove(&mut self, id: DispatcherId, span: &Span) {
        if span.start >= span.end {
            self.empty.remove(&id);
            return;
        }
        self.starts.remove(&(span.start.clone(), id));
        if self.disjoint.get() == Some(false) {
            self.disjoint.set(None); // may be disjoint again: found at the next check
        }
    }

    /// Whether a span other than those of `except` overlaps `span` (of this table).
    pub(crate) fn any_overlaps(&self, span: &Span, except: &[DispatcherId]) -> bool {
        let found = self.overlapping(span, except).next().is_some();
        debug_assert_eq!(found, self.pass_overlapping(span, except).next().is_some());
        found
    }

    /// The lowest id, other than those of `except`, whose span overlaps `span`.
    pub(crate) fn lowest_overlapping(
        &self,
        span: &Span,
        except: &[DispatcherId],
    ) -> Option<DispatcherId> {
        let found = self.overlapping(span, except).min();
        debug_assert_eq!(found, self.pass_overlapping(span, except).min());
        found
    }

    /// The ids, other than those of `except`, whose spans overlap `span`, in no order.
    fn overlapping<'a>(
        &'a self,
        span: &'a Span,
        except: &'a [DispatcherId],
    ) -> impl Iterator<Item = DispatcherId> + 'a {
        if self.disjoint.get().is_none() {
            self.disjoint.set(Some(self.count_disjoint()));
        }
        debug_assert_eq!(
            self.disjoint.get(),
            Some(self.count_disjoint()),
            "table spans: the disjoint flag is wrong"
        );
        let disjoint = self.disjoint.get() == Some(true);
        let fast = disjoint.then(|| self.disjoint_overlapping(span, except));
        let slow = (!disjoint).then(|| self.every_overlapping(span, except));
        fast.into_iter()
            .flatten()
            .chain(slow.into_iter().flatten())
            .chain(self.empty_overlapping(span, except))
    }

    /// The non-empty spans' check while they are disjoint: those starting in `[span.start,
    /// span.end)`, and the last one starting before it (any earlier one ends at or before that
    /// one's start).
    fn disjoint_overlapping<'a>(
        &'a self,
        span: &'a Span,
        except: &'a [DispatcherId],
    ) -> impl Iterator<Item = DispatcherId> + 'a {
        let from = (span.start.clone(), DispatcherId { epoch: 0, seq: 0 });
        let before = self
            .starts
            .range(..&from)
            .next_back()
            .filter(|(_, end)| **end > span.start)
            .map(|((_, id), _)| *id);
        self.starts
            .range(from..)
            .take_while(|((start, _), _)| *start < span.end)
            .map(|((_, id), _)| *id)
            .chain(before)
            .filter(|id| !except.contains(id))
    }

    /// The non-empty spans' check as a pass over them all.
    fn every_overlapping<'a>(
        &'a self,
        span: &'a Span,
        except: &'a [DispatcherId],
    ) -> impl Iterator<Item = DispatcherId> + 'a {
        self.starts
            .iter()
            .filter(|((start, _), end)| *start < span.end && span.start < **end)
            .map(|((_, id), _)| *id)
            .filter(|id| !except.contains(id))
    }

    /// The answer of a pass over every span (debug builds compare).
    fn pass_overlapping<'a>(
        &'a self,
        span: &'a Span,
        except: &'a [DispatcherId],
    ) -> impl Iterator<Item = DispatcherId> + 'a {
        self.every_overlapping(span, except)
            .chain(self.empty_overlapping(span, except))
    }

    fn empty_overlapping<'a>(
        &'a self,
        span: &'a Span,
        except: &'a [DispatcherId],
    ) -> impl Iterator<Item = DispatcherId> + 'a {
        self.empty
            .iter()
            .filter(|(id, s)| !except.contains(id) && s.overlaps(span))
            .map(|(id, _)| *id)
    }

    /// Whether no two non-empty spans overlap: in start order each starts at or after every
    /// end before it.
    fn count_disjoint(&self) -> bool {
        let mut reach: Option<&Key> = None;
        for ((start, _), end) in &self.starts {
            if reach.is_some_and(|r| start < r) {
                return false;
            }
            reach = Some(reach.map_or(end, |r| r.max(end)));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_types::TableId;

    fn key(table: TableId, k: u64) -> Key {
        Key::row_u64(table, k)
    }

    /// Random inserts, removals and checks (disjoint runs, overlapping spans, empty spans, spans
    /// to the table's end, exceptions) give the answer of a pass over every span.
    #[test]
    fn the_check_answers_as_a_pass_over_every_span() {
        let table = TableId(7);
        let mut rng = sluice_testkit::rng::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: u64| rng.below(n);
        let mut overlapping_checks = 0;
        for round in 0..200 {
            let mut index = TableSpans::default();
            let mut all: Vec<(DispatcherId, Span)> = Vec::new();
            let overlap_often = round % 2 == 0;
            for step in 0..300u64 {
                let id = DispatcherId {
                    epoch: 1,
                    seq: step,
                };
                let span = |next: &mut dyn FnMut(u64) -> u64| {
                    let a = next(200);
                    let len = if next(10) == 0 {
                        0
                    } else {
                        1 + next(if overlap_often { 60 } else { 4 })
                    };
                    let end = if next(20) == 0 {
                        Key::table_end(table)
                    } else {
                        key(table, a + len)
                    };
                    Span {
                        table,
                        start: key(table, a),
                        end,
                    }
                };
                match next(3) {
                    0 if !all.is_empty() => {
                        let (id, s) = all.swap_remove(next(all.len() as u64) as usize);
                        index.remove(id, &s);
                    }
                    1 => {
                        let s = span(&mut next);
                        // Without overlaps, as the maintainer creates: only where none overlaps.
                        if overlap_often || !all.iter().any(|(_, o)| o.overlaps(&s)) {
                            index.insert(id, &s);
                            all.push((id, s));
                        }
                    }
                    _ => {
                        let q = span(&mut next);
                        let except: Vec<DispatcherId> = all
                            .iter()
                            .filter(|_| next(8) == 0)
                            .map(|(id, _)| *id)
                            .collect();
                        let want = all
                            .iter()
                            .filter(|(id, s)| !except.contains(id) && s.overlaps(&q))
                            .map(|(id, _)| *id)
                            .min();
                        let why = format!("{q:?} except {except:?} in {all:?}");
                        assert_eq!(index.any_overlaps(&q, &except), want.is_some(), "{why}");
                        assert_eq!(index.lowest_overlapping(&q, &except), want, "{why}");
                        overlapping_checks += usize::from(index.disjoint.get() == Some(false));
                    }
                }
            }
        }
        assert!(
            overlapping_checks > 100,
            "the overlapping case was checked too: {overlapping_checks}"
        );
    }
}
