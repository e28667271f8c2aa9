//! A dispatcher's snapshot copy: it reads its span's existing rows chunk by chunk (each one
//! consistent read, `Effect::ReadChunk`), and the feed puts each chunk into the span's stream at
//! the position it was read at (`feed/chunk.rs`), so the chunk's rows go to the sink like any
//! other transaction, in order with the changes around them.
//!
//! A copy reads several chunks of its span at once: it cuts what is left into key ranges at
//! bounds the shell finds ahead of the reads (`Effect::ProbeChunks`: the key of every
//! `chunk_rows`-th row, in the upstream's order, any key type), and reads up to
//! `feed::MAX_CHUNKS_AHEAD` ranges in parallel, each its own consistent read at its own
//! position (a range that holds more rows than a chunk by the time it is read goes on from the
//! chunk's cursor, as a range of its own).
//!
//! Invariants:
//! - **the ranges cover what is left, once**: in key order, each starting where the one before
//!   ends, the last one running to the span's end, the first one starting at the durable cursor;
//! - **durable progress only, and only a prefix**: the progress reported ([`CopyProgress`])
//!   moves past a range only once the dispatcher's checkpoint passed its chunk's ts (its rows
//!   are acknowledged) *and* every range before it is durable too, so a successor that starts
//!   from it never skips rows that were not written; a successor that starts below what was
//!   written copies those rows again, which is harmless (each chunk is the rows as they were at
//!   its position, put in the stream at that position);
//! - **a bounded read-ahead**: at most `feed::MAX_CHUNKS_AHEAD` chunks of a dispatcher read or
//!   being read and not yet received; at most [`MAX_CONCURRENT_CHUNK_READS`] dispatchers of a
//!   manager hold chunks or read at once, and at most as many reads, and as many probes, are
//!   under way per manager;
//! - **a failed read or probe is retried** after [`CHUNK_RETRY_MS`] and reported meanwhile (the
//!   span's stream goes on; the copy's error shows in the changefeed's snapshot status);
//! - **a copy held by its stream is said**: a chunk waits for the span's stream to reach the
//!   position it was read at; one that waits [`COPY_STREAM_WAIT_MS`] or more is a warning of
//!   the dispatcher (the changefeed reads `warning`, not `normal`, while its copy stands still);
//! - **the end is not left to a timer**: once every range left is read and its chunk written
//!   to the sink, the sink is asked to flush (once, until it answers), so the copy's last
//!   progress does not wait for the sink's flush interval;
//! - **keyless tables** are one chunk (one consistent read of the whole table, never probed):
//!   the stream's rows of the table below that chunk are not written (the chunk holds their
//!   effect).

use super::*;
use crate::config::{CHUNK_RETRY_MS, COPY_STREAM_WAIT_MS, MAX_CONCURRENT_CHUNK_READS};
use crate::feed::MAX_CHUNKS_AHEAD;
use crate::msg::{CopyProgress, CopyReport, CopyStart};
use std::collections::BTreeSet;

/// A range up to a bound is read whole when it holds up to this fraction more rows than a
/// chunk (`chunk_rows / BOUNDED_RANGE_SLACK` more): bounds are estimates (the upstream's row
/// count, rows inserted since they were found), and a range a few rows over a chunk would
/// otherwise take a second read for those few rows.
pub const BOUNDED_RANGE_SLACK: usize = 4;

/// The most rows the read of range `i` of copy `c` takes: every row of a keyless table (one
/// consistent read); a chunk and its slack up to a bound; a chunk of the open last range.
fn read_limit(c: &Copy, i: usize) -> usize {
    match (c.keyless, c.ranges[i].upto.is_some()) {
        (true, _) => usize::MAX,
        (false, true) => c.chunk_rows + c.chunk_rows / BOUNDED_RANGE_SLACK,
        (false, false) => c.chunk_rows,
    }
}

/// The feed's answer to a read (`Input::ChunkQueued`).
#[derive(Clone, Debug)]
pub struct QueuedRead {
    /// The read it answers.
    pub read: u64,
    /// Where the chunk reaches the dispatcher in its stream.
    pub ts: Ts,
    /// The last key read (the shell's cursor), and whether the range has rows after it.
    pub cursor: Option<Vec<u8>>,
    pub more: bool,
    pub rows: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RangeState {
    /// Not read yet (or its read failed).
    Pending,
    /// Its read (this id) is under way.
    Reading(u64),
    /// Its chunk is in the feed or written, at this ts, not yet acknowledged.
    Queued(Ts),
    /// Its chunk is acknowledged.
    Acked,
}

/// A key range of the span left to copy: after `after` (`None`: the span's start), up to
/// `upto` included (`None`: to the span's end); both in the shell's cursor form.
#[derive(Clone, Debug)]
struct Range {
    after: Option<Vec<u8>>,
    upto: Option<Vec<u8>>,
    state: RangeState,
}

#[derive(Clone, Debug)]
pub(super) struct Copy {
    keyless: bool,
    chunk_rows: usize,
    /// What is acknowledged.
    durable: CopyProgress,
    /// What is left to copy past `durable`, in key order (see the module doc); empty once
    /// everything is durable.
    ranges: VecDeque<Range>,
    /// The last range held fewer than a chunk's rows at the last probe (or the table is
    /// keyless): it is read as it is, not probed again.
    tail_known: bool,
    /// The probe under way: its id and where it starts.
    probing: Option<(u64, Option<Vec<u8>>)>,
    /// Ids of reads and probes (never reused, also across restarts: a late answer of an
    /// earlier one matches nothing).
    next_id: u64,
    /// Reads under way, also those asked before the copy started again.
    reads: BTreeSet<u64>,
    /// The ts of the chunks queued in the feed or written and not yet durable (also those of
    /// reads asked before the copy started again: written, harmless, no progress).
    queued: VecDeque<Ts>,
    rows: u64,
    chunks: u64,
    error: Option<String>,
    retry_at: Option<Millis>,
    /// Keyless: the ts of the chunk; the stream's rows below it are not written.
    keyless_chunk_ts: Option<Ts>,
    /// The oldest chunk read ahead of the stream (its ts), since when it waits for the stream
    /// to reach its position, and how long that was at the last look.
    stream_wait: Option<(Millis, Ts, Millis)>,
}

impl Copy {
    pub(super) fn new(start: CopyStart) -> Self {
        let mut c = Copy {
            keyless: start.keyless,
            chunk_rows: start.chunk_rows.max(1),
            durable: CopyProgress::start(),
            ranges: VecDeque::new(),
            tail_known: start.keyless,
            probing: None,
            next_id: 0,
            reads: BTreeSet::new(),
            queued: VecDeque::new(),
            rows: 0,
            chunks: 0,
            error: None,
            retry_at: None,
            keyless_chunk_ts: None,
            stream_wait: None,
        };
        c.restart_from(start.from);
        c
    }

    /// The same copy for a dispatcher that starts again from its checkpoint: from what is
    /// durable on.
    pub(super) fn restarted(&self) -> Self {
        let mut c = self.clone();
        c.restart_from(self.durable.clone());
        c
    }

    /// A chunk at `ts` is on its way to the dispatcher (it takes it whole, even when full).
    pub(super) fn chunk_at(&self, ts: Ts) -> bool {
        self.queued.contains(&ts)
    }

    /// Starts again from `from` while reads may be under way (their chunks will be no
    /// progress: no range waits for them) and chunks queued (forgotten: the feed drops them or
    /// hands them out again below the new start, harmless).
    fn restart_from(&mut self, from: CopyProgress) {
        self.ranges.clear();
        if !from.done {
            self.ranges.push_back(Range {
                after: from.cursor.clone(),
                upto: None,
                state: RangeState::Pending,
            });
        }
        self.durable = from;
        self.tail_known = self.keyless;
        self.probing = None;
        self.queued.clear();
        self.error = None;
        self.retry_at = None;
        self.keyless_chunk_ts = None;
        self.stream_wait = None;
    }

    pub(super) fn done(&self) -> bool {
        self.durable.done
    }

    /// Done, with no read under way and no chunk queued: a copy step has nothing to do for it.
    fn at_rest(&self) -> bool {
        self.done() && self.reads.is_empty() && self.queued.is_empty()
    }

    /// Every range left is read and its chunk written to the sink (at or below `written`), so
    /// only a flush of the sink stands between the copy and its end.
    fn waits_for_flush(&self, written: Ts) -> bool {
        !self.done()
            && self.reads.is_empty()
            && !self.ranges.is_empty()
            && self.ranges.iter().all(|r| match r.state {
                RangeState::Queued(ts) => ts <= written,
                RangeState::Acked => true,
                RangeState::Pending | RangeState::Reading(_) => false,
            })
    }

    /// Chunks at or below the checkpoint are acknowledged: the durable progress follows the
    /// acknowledged ranges at the front.
    fn settle(&mut self, checkpoint: Ts) {
        self.queued.retain(|ts| *ts > checkpoint);
        for r in self.ranges.iter_mut() {
            if matches!(r.state, RangeState::Queued(ts) if ts <= checkpoint) {
                r.state = RangeState::Acked;
            }
        }
        let skip = progress_skips_ranges();
        while let Some(i) = self
            .ranges
            .iter()
            .position(|r| r.state == RangeState::Acked)
        {
            if i > 0 && !skip {
                break;
            }
            let Some(r) = self.ranges.drain(..=i).next_back() else {
                break;
            };
            assert!(!self.durable.done, "a finished copy progressed again");
            self.durable = match r.upto {
                Some(upto) => CopyProgress {
                    cursor: Some(upto),
                    done: false,
                },
                None => CopyProgress::finished(),
            };
            assert!(
                !self.durable.done || self.ranges.is_empty(),
                "a copy finished with ranges after the span's end"
            );
        }
    }

    /// Holds a chunk in the feed or a read under way (counts against the manager's bound).
    fn busy(&self, received_upto: Ts) -> bool {
        !self.reads.is_empty() || self.queued.iter().any(|ts| *ts > received_upto)
    }

    /// Chunks being read, or read and not yet received from the feed.
    fn ahead(&self, received_upto: Ts) -> usize {
        self.reads.len() + self.queued.iter().filter(|ts| **ts > received_upto).count()
    }

    /// The first range that may be read now: bounded, or the last one once it is known small.
    fn next_pending(&self) -> Option<usize> {
        let last = self.ranges.len().checked_sub(1)?;
        self.ranges
            .iter()
            .enumerate()
            .position(|(i, r)| r.state == RangeState::Pending && (i < last || self.tail_known))
    }

    /// Another read may start: a range to read, room in the read-ahead (the reads of the next
    /// chunks overlap each other, the wait of earlier ones for their position and their trip
    /// to the sink), not in a pause after a failure.
    fn wants_read(&self, received_upto: Ts, now: Millis) -> bool {
        self.next_pending().is_some()
            && self.ahead(received_upto) < MAX_CHUNKS_AHEAD
            && self.retry_at.is_none_or(|t| now >= t)
    }

    /// The last range needs bounds: no probe under way, not known small, and fewer bounded
    /// ranges waiting to be read than the read-ahead takes.
    fn wants_probe(&self, now: Millis) -> bool {
        let waiting = self
            .ranges
            .iter()
            .filter(|r| r.state == RangeState::Pending && r.upto.is_some())
            .count();
        !self.tail_known
            && self.probing.is_none()
            && self
                .ranges
                .back()
                .is_some_and(|r| r.state == RangeState::Pending)
            && waiting < MAX_CHUNKS_AHEAD
            && self.retry_at.is_none_or(|t| now >= t)
    }

    /// A probe's bounds cut the last range (still unread, still starting at `after`): a range
    /// up to each bound, then the rest to the span's end, known small when fewer bounds came
    /// than asked.
    fn add_bounds(&mut self, after: Option<Vec<u8>>, bounds: Vec<Vec<u8>>) {
        let fresh = self.ranges.back().is_some_and(|r| {
            r.state == RangeState::Pending && r.upto.is_none() && r.after == after
        });
        if !fresh {
            return;
        }
        self.tail_known = bounds.len() < MAX_CHUNKS_AHEAD;
        self.ranges.pop_back();
        let mut from = after;
        for b in bounds {
            assert!(
                from.as_ref() != Some(&b),
                "a chunk bound equal to where its range starts"
            );
            self.ranges.push_back(Range {
                after: from,
                upto: Some(b.clone()),
                state: RangeState::Pending,
            });
            from = Some(b);
        }
        self.ranges.push_back(Range {
            after: from,
            upto: None,
            state: RangeState::Pending,
        });
    }

    /// The feed queued the chunk of read `q.read`: its range waits for the chunk's
    /// acknowledgement; rows past the chunk's cursor (`more`) are a range of their own.
    fn note_queued(&mut self, q: QueuedRead) {
        self.reads.remove(&q.read);
        self.error = None;
        self.retry_at = None;
        self.rows += q.rows as u64;
        self.chunks += 1;
        self.queued.push_back(q.ts);
        let Some(i) = self.reading(q.read) else {
            return; // asked before the copy started again: no progress
        };
        if self.keyless {
            self.keyless_chunk_ts.get_or_insert(q.ts);
        }
        self.ranges[i].state = RangeState::Queued(q.ts);
        let (true, Some(cursor)) = (q.more, q.cursor) else {
            return;
        };
        let upto = self.ranges[i].upto.replace(cursor.clone());
        self.tail_known &= upto.is_some();
        self.ranges.insert(
            i + 1,
            Range {
                after: Some(cursor),
                upto,
                state: RangeState::Pending,
            },
        );
    }

    /// The range whose read `read` is under way.
    fn reading(&self, read: u64) -> Option<usize> {
        self.ranges
            .iter()
            .position(|r| r.state == RangeState::Reading(read))
    }

    /// Read `read` ended without a chunk: its range is read again.
    fn unread(&mut self, read: u64) {
        self.reads.remove(&read);
        if let Some(i) = self.reading(read) {
            self.ranges[i].state = RangeState::Pending;
        }
    }

    /// Whether a stream row at `ts` is written (keyless tables: not before their chunk).
    pub(super) fn writes_row(&self, ts: Ts) -> bool {
        !self.keyless || self.durable.done || self.keyless_chunk_ts.is_some_and(|c| ts >= c)
    }

    /// Follows the oldest chunk read and not yet received: since when it waits for the stream
    /// to reach the position it was read at (the copy makes no progress meanwhile: its
    /// read-ahead is full, and a stream that keeps falling behind holds it for as long as it
    /// lags).
    pub(super) fn track_stream_wait(&mut self, received_upto: Ts, now: Millis) {
        let oldest = self
            .queued
            .iter()
            .copied()
            .filter(|ts| *ts > received_upto)
            .min();
        let since = match (oldest, self.stream_wait) {
            (None, _) => None,
            (Some(ts), Some((since, at, _))) if at == ts => Some(since),
            (Some(_), _) => Some(now),
        };
        self.stream_wait = oldest
            .zip(since)
            .map(|(ts, since)| (since, ts, now.saturating_sub(since)));
    }

    /// How long its oldest chunk has waited for the stream, and the chunk's ts, once that is
    /// [`COPY_STREAM_WAIT_MS`] or more.
    pub(super) fn stream_stall(&self) -> Option<(Millis, Ts)> {
        let (_, ts, waited) = self.stream_wait.filter(|_| !self.done())?;
        (waited >= COPY_STREAM_WAIT_MS).then_some((waited, ts))
    }

    pub(super) fn report(&self) -> CopyReport {
        CopyReport {
            durable: self.durable.clone(),
            rows: self.rows,
            chunks: self.chunks,
            error: self.error.clone(),
        }
    }
}

/// Mutation `copy-progress-skips-ranges`: the durable progress moves past an acknowledged
/// range although a range before it is not acknowledged yet.
#[cfg(feature = "mutations")]
fn progress_skips_ranges() -> bool {
    crate::mutations::on("copy-progress-skips-ranges")
}

#[cfg(not(feature = "mutations"))]
fn progress_skips_ranges() -> bool {
    false
}

impl DispatcherManager {
    /// The snapshot work of every copying dispatcher: progress follows the checkpoints, probes
    /// go where bounds are wanted, and reads start where there is room.
    pub(super) fn copy_step(&mut self, now: Millis, out: &mut Vec<Effect>) {
        let (mut busy, mut reads) = (0usize, 0usize);
        // Probes are bounded like reads: thousands of tables that start copying at once do
        // not all ask the upstream for bounds at once.
        let mut probes = self
            .dispatchers
            .values()
            .filter_map(|d| d.copy.as_ref())
            .filter(|c| c.probing.is_some())
            .count();
        let (mut ahead, mut ready) = (Vec::new(), Vec::new());
        self.copy_pending = false;
        // Most dispatchers copy nothing, or copied and are done: picked out by a read, so the
        // others stay quiet (`set.rs`: a dispatcher handed out to change turns loud).
        let stepping: Vec<DispatcherId> = self
            .dispatchers
            .values()
            .filter(|d| d.copy.as_ref().is_some_and(|c| !c.at_rest()))
            .map(|d| d.id)
            .collect();
        for id in stepping {
            let Some(d) = self.dispatchers.get_mut(&id) else {
                continue;
            };
            let cp = d.checkpoint();
            let (working, received) = (matches!(d.phase, Phase::Working), d.received_upto);
            let Some(c) = d.copy.as_mut() else { continue };
            let was_done = c.done();
            c.settle(cp);
            self.copy_finished |= !was_done && c.done();
            self.copy_pending |= !c.done();
            reads += c.reads.len();
            if c.waits_for_flush(d.written_ts) && !d.flush_requested && d.flushed_ts < d.written_ts
            {
                // Only the sink's flush stands between the copy and its end: asked for now,
                // not left to the sink's flush interval (5 s by default for storage).
                d.flush_requested = true;
                out.push(Effect::Sink(crate::io::SinkCommand::Flush {
                    cf: self.cf.clone(),
                    id,
                }));
            }
            if working && probes < MAX_CONCURRENT_CHUNK_READS && c.wants_probe(now) {
                probes += 1;
                self.probe_chunks(id, out);
            }
            let Some(c) = self.dispatchers.get(&id).and_then(|d| d.copy.as_ref()) else {
                continue;
            };
            let wants = working && c.wants_read(received, now);
            match (c.busy(received), wants) {
                // Already counted: it reads its next chunks ahead.
                (true, true) => ahead.push(id),
                (true, false) => {}
                (false, true) => ready.push(id),
                (false, false) => continue,
            }
            busy += usize::from(c.busy(received));
        }
        let room = MAX_CONCURRENT_CHUNK_READS.saturating_sub(busy);
        for id in ahead.into_iter().chain(ready.into_iter().take(room)) {
            while reads < MAX_CONCURRENT_CHUNK_READS && self.read_chunk(id, now, out) {
                reads += 1;
            }
        }
    }

    /// A copy is not done yet: its chunks wait for the stream to reach their positions and its
    /// progress for the checkpoint to pass them, so the node's capture should hand on every
    /// position at once rather than batch idle ones (the server's `position_wanted`).
    pub fn copy_pending(&self) -> bool {
        self.copy_pending
    }

    /// Reads the next range of the copy of `id`, if it wants one (whether it did).
    fn read_chunk(&mut self, id: DispatcherId, now: Millis, out: &mut Vec<Effect>) -> bool {
        let cf = self.cf.clone();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return false;
        };
        let received = d.received_upto;
        let Some(c) = d.copy.as_mut().filter(|c| c.wants_read(received, now)) else {
            return false;
        };
        let Some(i) = c.next_pending() else {
            return false;
        };
        let read = c.next_id;
        c.next_id += 1;
        c.reads.insert(read);
        c.ranges[i].state = RangeState::Reading(read);
        out.push(Effect::ReadChunk(crate::io::ChunkAsk {
            cf,
            id,
            read,
            span: d.span.clone(),
            after: c.ranges[i].after.clone(),
            upto: c.ranges[i].upto.clone(),
            limit: read_limit(c, i),
            keyless: c.keyless,
        }));
        true
    }

    /// Asks the shell for the bounds of the next chunks of the last range of `id`'s copy.
    fn probe_chunks(&mut self, id: DispatcherId, out: &mut Vec<Effect>) {
        let cf = self.cf.clone();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        let Some(c) = d.copy.as_mut() else { return };
        let Some(after) = c.ranges.back().map(|r| r.after.clone()) else {
            return;
        };
        let probe = c.next_id;
        c.next_id += 1;
        c.probing = Some((probe, after.clone()));
        out.push(Effect::ProbeChunks(crate::io::ChunkProbe {
            cf,
            id,
            probe,
            span: d.span.clone(),
            after,
            rows: c.chunk_rows,
            count: MAX_CHUNKS_AHEAD,
        }));
    }

    /// `Input::ChunkBounds`: the bounds of the probe under way cut the copy's last range
    /// (a late answer of an earlier probe is dropped); a failed probe is tried again after a
    /// pause, reported meanwhile.
    pub fn on_chunk_bounds(
        &mut self,
        now: Millis,
        id: DispatcherId,
        probe: u64,
        result: Result<Vec<Vec<u8>>, String>,
        out: &mut Vec<Effect>,
    ) {
        let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) else {
            return;
        };
        let Some((_, after)) = c.probing.take_if(|p| p.0 == probe) else {
            return;
        };
        match result {
            Ok(bounds) => c.add_bounds(after, bounds),
            Err(message) => {
                c.error = Some(truncate_error(message));
                c.retry_at = Some(now + CHUNK_RETRY_MS);
            }
        }
        self.copy_step(now, out);
    }

    /// `Input::ChunkQueued`: the feed holds the chunk; it reaches the dispatcher at its ts.
    /// Further reads start now, while this chunk goes through the stream to the sink.
    pub fn on_chunk_queued(
        &mut self,
        now: Millis,
        id: DispatcherId,
        chunk: QueuedRead,
        out: &mut Vec<Effect>,
    ) {
        if let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) {
            c.note_queued(chunk);
        }
        self.copy_step(now, out);
    }

    /// `Input::ChunkFailed`: tried again after a pause, reported meanwhile.
    pub fn on_chunk_failed(&mut self, now: Millis, id: DispatcherId, read: u64, message: String) {
        let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) else {
            return;
        };
        c.unread(read);
        c.error = Some(truncate_error(message));
        c.retry_at = Some(now + CHUNK_RETRY_MS);
    }

    /// `Input::ChunkDropped`: the read will not be answered; its range is read again.
    pub fn on_chunk_dropped(&mut self, id: DispatcherId, read: u64) {
        if let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) {
            c.unread(read);
        }
    }

    /// `Input::ChunkLost`: the stream went back below a chunk handed out, or a window read
    /// could not go (`why`); copy again from what is durable (nothing to do for a dispatcher
    /// that has no chunk out), after a pause and saying why when there is a reason.
    pub fn on_chunk_lost(&mut self, now: Millis, id: DispatcherId, why: Option<String>) {
        let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) else {
            return;
        };
        if c.queued.is_empty() {
            return;
        }
        let durable = c.durable.clone();
        c.restart_from(durable);
        if let Some(why) = why {
            c.error = Some(truncate_error(why));
            c.retry_at = Some(now + CHUNK_RETRY_MS);
        }
    }

    /// `Message::Copy`: copy the span (again, from the start when `restart`).
    pub(super) fn start_copy(&mut self, id: DispatcherId, start: CopyStart, restart: bool) {
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        match &mut d.copy {
            // Already copying: it keeps its own (newer) progress.
            Some(_) if !restart => {}
            Some(c) => c.restart_from(start.from),
            slot => *slot = Some(Box::new(Copy::new(start))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_from_start(chunk_rows: usize) -> Copy {
        Copy::new(CopyStart {
            from: CopyProgress::start(),
            keyless: false,
            chunk_rows,
        })
    }

    fn b(k: u8) -> Vec<u8> {
        vec![k]
    }

    /// A read's id and its range (after, up to).
    type Read = (u64, Option<Vec<u8>>, Option<Vec<u8>>);

    /// Starts the next read as the manager does; its id and range.
    fn start_read(c: &mut Copy, now: Millis) -> Option<Read> {
        if !c.wants_read(0, now) {
            return None;
        }
        let i = c.next_pending()?;
        let read = c.next_id;
        c.next_id += 1;
        c.reads.insert(read);
        c.ranges[i].state = RangeState::Reading(read);
        Some((read, c.ranges[i].after.clone(), c.ranges[i].upto.clone()))
    }

    fn queued(read: u64, ts: Ts, cursor: Option<Vec<u8>>, more: bool) -> QueuedRead {
        QueuedRead {
            read,
            ts,
            cursor,
            more,
            rows: 1,
        }
    }

    #[test]
    fn a_copy_probes_before_it_reads_and_reads_the_bounded_ranges_in_parallel() {
        let mut c = copy_from_start(10);
        assert!(c.wants_probe(0) && !c.wants_read(0, 0), "bounds first");
        c.probing = Some((99, None));
        c.add_bounds(None, vec![b(10), b(20), b(30)]);
        assert!(c.tail_known, "fewer bounds than asked: the rest is small");
        let reads: Vec<_> = std::iter::from_fn(|| start_read(&mut c, 0)).collect();
        assert_eq!(
            reads
                .iter()
                .map(|r| (r.1.clone(), r.2.clone()))
                .collect::<Vec<_>>(),
            vec![
                (None, Some(b(10))),
                (Some(b(10)), Some(b(20))),
                (Some(b(20)), Some(b(30))),
                (Some(b(30)), None),
            ]
        );
        assert_eq!(reads.len(), MAX_CHUNKS_AHEAD, "the read-ahead bounds them");
    }

    #[test]
    fn progress_moves_only_past_a_prefix_of_acknowledged_ranges() {
        let mut c = copy_from_start(10);
        c.add_bounds(None, vec![b(10), b(20)]);
        let r: Vec<_> = std::iter::from_fn(|| start_read(&mut c, 0)).collect();
        // The second and third ranges come back first and are acknowledged.
        c.note_queued(queued(r[1].0, 500, Some(b(19)), false));
        c.note_queued(queued(r[2].0, 501, Some(b(25)), false));
        c.settle(501);
        assert_eq!(
            c.durable,
            CopyProgress::start(),
            "the first range is not durable"
        );
        c.note_queued(queued(r[0].0, 600, Some(b(9)), false));
        c.settle(599);
        assert_eq!(c.durable, CopyProgress::start());
        c.settle(600);
        assert!(c.done(), "all three durable, the last to the span's end");
        assert!(c.ranges.is_empty());
    }

    #[test]
    fn a_range_with_more_rows_than_a_chunk_goes_on_from_the_chunks_cursor() {
        let mut c = copy_from_start(10);
        c.add_bounds(None, vec![b(10)]);
        let first = start_read(&mut c, 0).expect("a read");
        // Rows were inserted since the probe: the chunk ends at 7, rows follow up to 10.
        c.note_queued(queued(first.0, 500, Some(b(7)), true));
        let next = start_read(&mut c, 0).expect("the rest of the range");
        assert_eq!((next.1, next.2), (Some(b(7)), Some(b(10))));
        c.settle(500);
        assert_eq!(
            c.durable.cursor,
            Some(b(7)),
            "durable up to the chunk's cursor"
        );
    }

    #[test]
    fn a_restart_forgets_the_ranges_and_a_late_answer_is_no_progress() {
        let mut c = copy_from_start(10);
        c.add_bounds(None, vec![b(10), b(20)]);
        let r: Vec<_> = std::iter::from_fn(|| start_read(&mut c, 0)).collect();
        c.note_queued(queued(r[0].0, 500, Some(b(9)), false));
        c.settle(500);
        assert_eq!(c.durable.cursor, Some(b(10)));
        c.restart_from(c.durable.clone());
        assert_eq!(c.reads.len(), 2, "the reads under way are still counted");
        c.note_queued(queued(r[1].0, 600, Some(b(19)), false));
        c.settle(600);
        assert_eq!(
            c.durable.cursor,
            Some(b(10)),
            "asked before the restart: no progress"
        );
        assert!(
            c.wants_probe(0),
            "the rest is probed again from the durable cursor"
        );
        assert_eq!(c.ranges.len(), 1);
        assert_eq!(c.ranges[0].after, Some(b(10)));
    }

    #[test]
    fn a_failed_read_puts_its_range_back_and_a_stale_probe_answer_is_dropped() {
        let mut c = copy_from_start(10);
        c.add_bounds(None, vec![b(10), b(20), b(30), b(40)]);
        assert!(!c.tail_known, "as many bounds as asked: more may follow");
        let first = start_read(&mut c, 0).expect("a read");
        c.unread(first.0);
        let again = start_read(&mut c, 0).expect("read again");
        assert_eq!((again.1, again.2), (None, Some(b(10))));
        // A probe answer for a tail that is no longer where it started cuts nothing.
        let before = c.ranges.len();
        c.add_bounds(Some(b(5)), vec![b(50)]);
        assert_eq!(c.ranges.len(), before);
    }
}
