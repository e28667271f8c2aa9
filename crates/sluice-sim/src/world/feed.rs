//! The feed of every node (the server's [`sluice_control::feed`] over the model upstream): the
//! node's effects go through it, what it answers is carried out (inputs, sink sessions opened,
//! writes to the model sink, notes), and it reads the upstream at every node tick.
//!
//! Invariants, checked on every batch and every read: a batch holds whole transactions of its
//! span and is never resolved past what capture completed; the bytes of rows in flight stay
//! within the quota plus the largest transaction plus one chunk per snapshot read under way; no
//! row handle leaks (audited after every read and every unsubscribe); a snapshot chunk never
//! comes back with its span's stream already past its position (`snapshot-chunk-behind-stream`:
//! the model answers a span's parallel reads after random delays, in any order).

use super::*;

impl Sim {
    /// The node's effects go through its feed (which takes subscriptions and row writes).
    pub(super) fn through_feed(
        &mut self,
        name: &str,
        inc: u64,
        effects: Vec<Effect>,
    ) -> Vec<FeedOut<SimRow>> {
        let mut outs = Vec::with_capacity(effects.len());
        let Some(feed) = self.nodes.get_mut(name).and_then(|n| n.feed.as_mut()) else {
            return outs;
        };
        let mut unsubscribed = false;
        for e in effects {
            if let Effect::Unsubscribe { id, .. } = &e {
                self.spans.remove(&(name.to_string(), inc, *id));
                unsubscribed = true;
            }
            feed.on_effect(&self.upstream, e, &mut outs);
        }
        if unsubscribed && self.checks {
            if let Err(e) = feed.audit() {
                self.checker
                    .violation
                    .get_or_insert(format!("row-handle-leak: on {name}: {e}"));
            }
        }
        outs
    }

    /// Carry out what a node's feed asks for.
    pub(super) fn feed_out(&mut self, name: &str, inc: u64, o: FeedOut<SimRow>) {
        match o {
            FeedOut::Input(input @ (Input::Events { .. } | Input::Resolved { .. })) => {
                if self.checks {
                    self.check_batch(name, inc, &input);
                }
                self.handle(name, inc, input);
            }
            FeedOut::Input(input) => {
                let now = self.now;
                let node = name.to_string();
                self.push(now, Ev::Input { node, inc, input });
            }
            FeedOut::Open { id, span, .. } => {
                self.open_parts.remove(&(name.to_string(), inc, id));
                self.spans.insert((name.to_string(), inc, id), span);
            }
            FeedOut::Write {
                cf,
                id,
                span,
                rows,
                bytes,
                open,
            } => {
                let n = rows.len();
                let at = self.sink_rows(name, inc, (cf.clone(), id), &span, rows, open);
                let node = name.to_string();
                self.push(
                    at,
                    Ev::SinkAccepted {
                        node,
                        inc,
                        cf,
                        id,
                        rows: n,
                        bytes,
                    },
                );
            }
            FeedOut::Effect(e) => self.effect(name, inc, e),
            FeedOut::Note(FeedNote::QuotaWait) => {
                *self.fault_counts.entry("quota_wait").or_default() += 1;
            }
            FeedOut::Note(FeedNote::Delivered { .. }) => {}
            FeedOut::Note(FeedNote::SourceError { message, .. }) => {
                let now = self.now;
                self.note(format!("{now} {name}: feed: {message}"));
            }
        }
    }

    /// The feed's batch invariants: whole transactions, resolved within the source.
    fn check_batch(&mut self, name: &str, inc: u64, input: &Input) {
        match input {
            Input::Events {
                id,
                items,
                resolved_ts,
                ..
            } => self.check_one_batch(name, inc, *id, items, *resolved_ts),
            // Each dispatcher of it as an empty batch.
            Input::Resolved {
                ids, resolved_ts, ..
            } => {
                for id in ids {
                    self.check_one_batch(name, inc, *id, &[], *resolved_ts);
                }
            }
            _ => {}
        }
    }

    fn check_one_batch(
        &mut self,
        name: &str,
        inc: u64,
        id: DispatcherId,
        items: &[sluice_control::io::StreamItem],
        resolved_ts: Ts,
    ) {
        let resolved_ts = &resolved_ts;
        let id = &id;
        // Rows above what capture completed can only be a chunk's (the source has none there):
        // a batch of them resolves at their ts, which the slot rule keeps within a position's
        // slots (a chunk put in late is left to `snapshot-row-order`).
        let slots = sluice_control::feed::CHUNK_TS_SLOTS;
        let captured = self.upstream.captured;
        let positions = &self.upstream.chunk_positions;
        let at_resolved = items.iter().all(|i| i.commit_ts() == *resolved_ts);
        let in_slots = positions
            .range(resolved_ts.saturating_sub(slots)..*resolved_ts)
            .any(|p| *p <= captured);
        let late = *resolved_ts == captured + 1 && positions.range(..=captured).next().is_some();
        let chunk = at_resolved && (in_slots || late);
        let bound = if chunk { *resolved_ts } else { captured };
        if *resolved_ts > bound {
            self.checker.violation.get_or_insert(format!(
                "resolved-within-source: a batch for {id:?} on {name} resolved ts {resolved_ts}, past what capture completed ({})",
                self.upstream.captured
            ));
        }
        let Some(span) = self.spans.get(&(name.to_string(), inc, *id)).cloned() else {
            return;
        };
        if chunk {
            return; // a snapshot chunk, not a transaction (its rows are checked as written)
        }
        let mut counts: BTreeMap<Ts, usize> = BTreeMap::new();
        for i in items {
            if let sluice_control::io::StreamItem::Row { commit_ts, .. } = i {
                *counts.entry(*commit_ts).or_default() += 1;
            }
        }
        if let Err(v) = self.check_parts(name, inc, *id, &span, counts, *resolved_ts) {
            self.checker.violation.get_or_insert(v);
        }
    }

    /// Whole transactions, or one in parts: every transaction at or below the resolved ts is
    /// whole once this batch is added to the parts of it delivered before; rows above it are a
    /// part of the one transaction at exactly resolved ts + 1, never more than it has.
    fn check_parts(
        &mut self,
        name: &str,
        inc: u64,
        id: DispatcherId,
        span: &Span,
        counts: BTreeMap<Ts, usize>,
        resolved: Ts,
    ) -> Result<(), String> {
        let key = (name.to_string(), inc, id);
        let mut before = self.open_parts.remove(&key);
        for (ts, n) in counts {
            let earlier = match before {
                Some((t, m)) if t == ts => {
                    before = None;
                    m
                }
                _ => 0,
            };
            let whole = self.upstream.txn_rows_in(span, ts);
            let have = earlier + n;
            if ts <= resolved && have != whole {
                return Err(format!(
                    "whole-transactions: a batch for {id:?} on {name} resolved at {resolved} holds {n} (and its parts before {earlier}) of the {whole} rows of its span in the transaction at {ts}"
                ));
            }
            if ts > resolved && (ts != resolved + 1 || have > whole) {
                return Err(format!(
                    "whole-transactions: a batch for {id:?} on {name} resolved at {resolved} holds a part of {n} rows at {ts} ({have} of its {whole} so far)"
                ));
            }
            if ts > resolved {
                self.open_parts.insert(key.clone(), (ts, have));
            }
        }
        match before {
            Some((t, m)) if t <= resolved => Err(format!(
                "whole-transactions: a batch for {id:?} on {name} resolved at {resolved} past the transaction at {t}, of which only {m} rows came"
            )),
            Some(open) => {
                self.open_parts.insert(key, open);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The feed's accounting after it read: rows in flight within the quota plus one
    /// transaction, and every row read held or in a sink write.
    fn check_feed(&mut self, name: &str) {
        if !self.checks {
            return;
        }
        let Some(feed) = self.nodes.get(name).and_then(|n| n.feed.as_ref()) else {
            return;
        };
        // Beyond the quota: the batch that crossed it (one transaction at most), and one chunk
        // per snapshot read under way (no read starts at a full quota; a manager has at most
        // `MAX_CONCURRENT_CHUNK_READS` under way).
        let chunks = sluice_control::config::MAX_CONCURRENT_CHUNK_READS as u64
            * self.upstream.max_chunk_rows;
        let bound = feed.quota_bytes() + (self.upstream.max_txn_rows + chunks) * ROW_BYTES as u64;
        let v = if feed.inflight_bytes() > bound {
            Some(format!(
                "inflight-within-quota: {name} has {} bytes of rows in flight, above its quota {} plus its largest transaction ({} rows of {ROW_BYTES} bytes) plus {chunks} rows of snapshot chunks",
                feed.inflight_bytes(),
                feed.quota_bytes(),
                self.upstream.max_txn_rows
            ))
        } else {
            feed.audit()
                .err()
                .map(|e| format!("row-handle-leak: on {name}: {e}"))
        };
        if let Some(v) = v {
            self.checker.violation.get_or_insert(v);
        }
    }

    /// A snapshot chunk read on the model upstream: at the head (MariaDB's named position), or
    /// with `x-snapshot-read = "window"` as the upstream was when the read was asked, reported
    /// at the head (a position taken after the read). Its answer reaches the node's feed a
    /// little later ([`World::chunk_answer`]): reads under way at once come back in any order.
    pub(super) fn chunk_read(
        &mut self,
        name: &str,
        inc: u64,
        ask: sluice_control::io::ChunkAsk,
        asked: sluice_types::Ts,
    ) {
        if !self
            .nodes
            .get(name)
            .is_some_and(|n| n.incarnation == inc && n.feed.is_some())
        {
            return;
        }
        // As the server does: after many reads of the dispatcher at one position, one heartbeat
        // write moves it.
        let head = self.upstream.head;
        let n = self
            .chunk_positions
            .entry((name.to_string(), ask.id))
            .or_insert((head, 0));
        *n = if n.0 == head {
            (head, n.1 + 1)
        } else {
            (head, 1)
        };
        if n.1 > (sluice_control::feed::CHUNK_TS_SLOTS / 2) as u32 {
            self.upstream.heartbeat();
            self.cover("snapshot_heartbeat");
        }
        let as_of = self.sc.world.x_snapshot_read_window.then_some(asked);
        let range = (ask.after.as_deref(), ask.upto.as_deref());
        let chunk = self.upstream.read_chunk(&ask.span, range, ask.limit, as_of);
        self.cover(match (as_of, ask.upto.is_some()) {
            (Some(_), _) => "snapshot_chunk_window",
            (None, true) => "snapshot_chunk_bounded",
            (None, false) => "snapshot_chunk",
        });
        let at = self.now + self.rng.range(0, 120);
        let node = name.to_string();
        self.push(
            at,
            Ev::ChunkAnswer {
                node,
                inc,
                ask,
                chunk,
            },
        );
    }

    /// A chunk read reaches the node's feed (if it is still the incarnation that asked).
    pub(super) fn chunk_answer(
        &mut self,
        name: &str,
        inc: u64,
        ask: sluice_control::io::ChunkAsk,
        chunk: sluice_control::feed::ChunkRead<crate::upstream::SimRow>,
    ) {
        let (cf, id, read) = (ask.cf, ask.id, ask.read);
        let mut outs = Vec::new();
        let position = chunk.position;
        let Some(feed) = self
            .nodes
            .get_mut(name)
            .filter(|n| n.incarnation == inc)
            .and_then(|n| n.feed.as_mut())
        else {
            return;
        };
        // Past the ts slots after the chunk's position, the stream delivered transactions newer
        // than it: a read under way did not hold the stream.
        // Only a read the span's subscription still waits for held its stream: the answer to a
        // read of an ended subscription (the dispatcher restarted meanwhile) is dropped.
        let cursor = feed.stream_cursor(&cf, id);
        feed.on_chunk(&cf, id, read, Ok(chunk), &mut outs);
        let dropped = outs.iter().any(|o| {
            matches!(o, sluice_control::feed::FeedOut::Input(Input::ChunkDropped { read: r, .. }) if *r == read)
        });
        let cursor = cursor.filter(|_| !dropped);
        if let Some(c) = cursor.filter(|c| *c > position + sluice_control::feed::CHUNK_TS_SLOTS) {
            let v = format!(
                "snapshot-chunk-behind-stream: a chunk of {id:?} on {name} read at {position} came back with its span's stream at {c}, past the position (a read under way must hold the stream below it)"
            );
            self.checker.violation.get_or_insert(v);
        }
        self.check_feed(name);
        for o in outs {
            self.feed_out(name, inc, o);
        }
    }

    /// The node's feed reads the model upstream for its dispatchers.
    pub(super) fn feed_events(&mut self, name: &str, inc: u64) {
        let mut outs = Vec::new();
        let Some(n) = self.nodes.get_mut(name).filter(|n| n.incarnation == inc) else {
            return;
        };
        let (Some(state), Some(feed)) = (n.state.as_ref(), n.feed.as_mut()) else {
            return;
        };
        feed.poll(
            &self.upstream,
            |cf, id| state.wants_events(cf, id),
            &mut outs,
        );
        self.check_feed(name);
        for o in outs {
            self.feed_out(name, inc, o);
        }
    }
}
