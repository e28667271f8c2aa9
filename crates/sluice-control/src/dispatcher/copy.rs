//! A dispatcher's snapshot copy: it reads its span's existing rows chunk by chunk (each one
//! consistent read, `Effect::ReadChunk`), and the feed puts each chunk into the span's stream at
//! the position it was read at (`feed/chunk.rs`), so the chunk's rows go to the sink like any
//! other transaction, in order with the changes around them.
//!
//! Invariants:
//! - **durable progress only**: the progress reported ([`CopyProgress`]) moves to a chunk's
//!   cursor only once the dispatcher's checkpoint passed the chunk's ts (its rows are
//!   acknowledged), so a successor that starts from it never skips rows that were not written;
//!   a successor that starts below what was written copies those rows again, which is harmless
//!   (each chunk is the rows as they were at its position, put in the stream at that position);
//! - **a bounded read-ahead**: one read at a time, and at most `feed::MAX_CHUNKS_AHEAD` chunks
//!   read and not yet received; at most [`MAX_CONCURRENT_CHUNK_READS`] dispatchers of a manager
//!   hold chunks or read at once;
//! - **a failed read is retried** after [`CHUNK_RETRY_MS`] and reported meanwhile (the span's
//!   stream goes on; the copy's error shows in the changefeed's snapshot status);
//! - **a copy held by its stream is said**: a chunk waits for the span's stream to reach the
//!   position it was read at; one that waits [`COPY_STREAM_WAIT_MS`] or more is a warning of
//!   the dispatcher (the changefeed reads `warning`, not `normal`, while its copy stands still);
//! - **keyless tables** are one chunk (one consistent read of the whole table): the stream's
//!   rows of the table below that chunk are not written (the chunk holds their effect).

use super::*;
use crate::config::{CHUNK_RETRY_MS, COPY_STREAM_WAIT_MS, MAX_CONCURRENT_CHUNK_READS};
use crate::feed::MAX_CHUNKS_AHEAD;
use crate::msg::{CopyProgress, CopyReport, CopyStart};

/// A chunk queued in the feed or written, not yet durable.
#[derive(Clone, Debug)]
struct QueuedChunk {
    ts: Ts,
    /// Where the next chunk starts, and whether rows follow.
    cursor: Option<Vec<u8>>,
    more: bool,
    /// Read before the copy started again (a restart or a lost chunk): its rows are written
    /// (harmless, at their position) but it is no progress.
    stale: bool,
}

#[derive(Clone, Debug)]
pub(super) struct Copy {
    keyless: bool,
    chunk_rows: usize,
    /// What is acknowledged.
    durable: CopyProgress,
    /// Where the next read starts.
    next: Option<Vec<u8>>,
    /// The last chunk read had nothing after it.
    read_all: bool,
    /// A read is under way.
    reading: bool,
    /// The read under way was asked before the copy started again: its chunk is no progress.
    stale_read: bool,
    queued: VecDeque<QueuedChunk>,
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
        Copy {
            keyless: start.keyless,
            chunk_rows: start.chunk_rows.max(1),
            next: start.from.cursor.clone(),
            read_all: start.from.done,
            durable: start.from,
            reading: false,
            stale_read: false,
            queued: VecDeque::new(),
            rows: 0,
            chunks: 0,
            error: None,
            retry_at: None,
            keyless_chunk_ts: None,
            stream_wait: None,
        }
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
        self.queued.iter().any(|q| q.ts == ts)
    }

    /// Starts again from `from` while a read may be under way (its chunk will be no progress).
    fn restart_from(&mut self, from: CopyProgress) {
        let mut fresh = Copy::new(CopyStart {
            from,
            keyless: self.keyless,
            chunk_rows: self.chunk_rows,
        });
        fresh.reading = self.reading;
        fresh.stale_read = self.reading;
        fresh.rows = self.rows;
        fresh.chunks = self.chunks;
        *self = fresh;
    }

    pub(super) fn done(&self) -> bool {
        self.durable.done
    }

    /// Done, with no read under way and no chunk queued: a copy step has nothing to do for it.
    fn at_rest(&self) -> bool {
        self.done() && !self.reading && self.queued.is_empty()
    }

    /// Chunks at or below the checkpoint are acknowledged: the durable progress follows them.
    fn settle(&mut self, checkpoint: Ts) {
        while let Some(q) = self.queued.front() {
            if q.ts > checkpoint {
                break;
            }
            let Some(q) = self.queued.pop_front() else {
                break;
            };
            if q.stale {
                continue;
            }
            assert!(!self.durable.done, "a finished copy progressed again");
            self.durable = CopyProgress {
                cursor: if q.more { q.cursor } else { None },
                done: !q.more,
            };
        }
    }

    /// Holds a chunk in the feed or a read under way (counts against the manager's bound).
    fn busy(&self, received_upto: Ts) -> bool {
        self.reading || self.queued.back().is_some_and(|q| q.ts > received_upto)
    }

    /// Chunks read and not yet received from the feed.
    fn ahead(&self, received_upto: Ts) -> usize {
        self.queued.iter().filter(|q| q.ts > received_upto).count()
    }

    /// The next read may start: no read under way and room in the feed's read-ahead (the read
    /// of chunk `n + 1` overlaps the wait of chunk `n` for its position and its trip to the
    /// sink).
    fn wants_read(&self, received_upto: Ts, now: Millis) -> bool {
        !self.read_all
            && !self.reading
            && self.ahead(received_upto) < MAX_CHUNKS_AHEAD
            && self.retry_at.is_none_or(|t| now >= t)
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
            .find(|q| q.ts > received_upto)
            .map(|q| q.ts);
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

impl DispatcherManager {
    /// The snapshot work of every copying dispatcher: progress follows the checkpoints, and
    /// reads start where there is room.
    pub(super) fn copy_step(&mut self, now: Millis, out: &mut Vec<Effect>) {
        let mut busy = 0usize;
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
            c.settle(cp);
            self.copy_pending |= !c.done();
            let wants = working && c.wants_read(received, now);
            match (c.busy(received), wants) {
                // Already counted: it reads its next chunk ahead.
                (true, true) => ahead.push(d.id),
                (true, false) => {}
                (false, true) => ready.push(d.id),
                (false, false) => continue,
            }
            busy += usize::from(c.busy(received));
        }
        let room = MAX_CONCURRENT_CHUNK_READS.saturating_sub(busy);
        for id in ahead.into_iter().chain(ready.into_iter().take(room)) {
            self.read_chunk(id, out);
        }
    }

    /// A copy is not done yet: its chunks wait for the stream to reach their positions and its
    /// progress for the checkpoint to pass them, so the node's capture should hand on every
    /// position at once rather than batch idle ones (the server's `position_wanted`).
    pub fn copy_pending(&self) -> bool {
        self.copy_pending
    }

    fn read_chunk(&mut self, id: DispatcherId, out: &mut Vec<Effect>) {
        let cf = self.cf.clone();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        let Some(c) = d.copy.as_mut() else { return };
        c.reading = true;
        out.push(Effect::ReadChunk {
            cf,
            id,
            span: d.span.clone(),
            after: c.next.clone(),
            limit: if c.keyless { usize::MAX } else { c.chunk_rows },
            keyless: c.keyless,
        });
    }

    /// `Input::ChunkQueued`: the feed holds the chunk; it reaches the dispatcher at `ts`. The
    /// next read starts now, while this chunk goes through the stream to the sink.
    #[allow(clippy::too_many_arguments)]
    pub fn on_chunk_queued(
        &mut self,
        now: Millis,
        id: DispatcherId,
        ts: Ts,
        cursor: Option<Vec<u8>>,
        more: bool,
        rows: usize,
        out: &mut Vec<Effect>,
    ) {
        self.note_chunk_queued(id, ts, cursor, more, rows);
        self.copy_step(now, out);
    }

    fn note_chunk_queued(
        &mut self,
        id: DispatcherId,
        ts: Ts,
        cursor: Option<Vec<u8>>,
        more: bool,
        rows: usize,
    ) {
        let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) else {
            return;
        };
        let stale = std::mem::take(&mut c.stale_read);
        c.reading = false;
        c.error = None;
        c.retry_at = None;
        c.rows += rows as u64;
        c.chunks += 1;
        if !stale {
            c.next = cursor.clone();
            c.read_all = !more;
            if c.keyless {
                c.keyless_chunk_ts.get_or_insert(ts);
            }
        }
        c.queued.push_back(QueuedChunk {
            ts,
            cursor,
            more,
            stale,
        });
    }

    /// `Input::ChunkFailed`: tried again after a pause, reported meanwhile.
    pub fn on_chunk_failed(&mut self, now: Millis, id: DispatcherId, message: String) {
        let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) else {
            return;
        };
        c.reading = false;
        c.stale_read = false;
        c.error = Some(truncate_error(message));
        c.retry_at = Some(now + CHUNK_RETRY_MS);
    }

    /// `Input::ChunkDropped`: the read under way will not be answered; ask again.
    pub fn on_chunk_dropped(&mut self, id: DispatcherId) {
        if let Some(c) = self.dispatchers.get_mut(&id).and_then(|d| d.copy.as_mut()) {
            c.reading = false;
            c.stale_read = false;
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
