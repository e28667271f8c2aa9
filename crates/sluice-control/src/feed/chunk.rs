//! Snapshot chunks in the feed: the rows of one consistent read of a span, put into the span's
//! stream at the read's binlog position.
//!
//! A dispatcher that copies its span asks for chunks of disjoint key ranges
//! (`Effect::ReadChunk`), several at once. Each read happens after it was asked, and capture
//! never runs ahead of the upstream's binlog, so its position is at or above what the source
//! had complete when it was asked (the read's *floor*); until the shell answers
//! ([`Feed::on_chunk`]) the stream does not pass that floor, nor does a held chunk read at a
//! higher position go out. The chunk, read at position `P`, is held (in ts order with the
//! others) until the stream has delivered everything at or below `P` and no read under way may
//! be below `P`, and then goes out as one batch at [`chunk_ts`]`(P) = P + 1` — a ts no transaction has (a commit ts is the
//! binlog position after a transaction's last event, so the next one is at least an event header
//! further). Per key, the sink then sees the stream's changes up to `P`, the row as it was at
//! `P`, then the changes after `P`: a chunk row never overwrites a newer version of its key, and
//! a key deleted before `P` is not in the chunk, so nothing deleted comes back.
//!
//! Invariants:
//! - a chunk goes into the stream after its cursor, within [`CHUNK_TS_SLOTS`] of its position
//!   (where no transaction can be), or not at all: it is refused, never put in out of order;
//! - a chunk's rows are accounted against the memory quota from the moment the feed holds them,
//!   and no read starts while the quota is full (so rows in flight stay within the quota plus one
//!   transaction plus one chunk per read under way, a chunk being at most `snapshot-chunk-rows`
//!   and its slack, `dispatcher::copy::BOUNDED_RANGE_SLACK`);
//!   each dispatcher holds and reads at most [`MAX_CHUNKS_AHEAD`] chunks; the stream goes up to
//!   the lowest of its held chunks' positions and its reads' floors (mutation
//!   `feed-stream-passes-reads`: reads do not hold the stream while a chunk is held);
//! - a resubscription below a chunk handed out loses that chunk and any held after it
//!   (`Input::ChunkLost`: the dispatcher copies again from its durable progress); otherwise a
//!   chunk still held above the new start stays, the stream reaches it again.
//! - **a window read** ([`ChunkConsistency::Window`], an upstream that cannot name its snapshot's
//!   position: MySQL) is the upstream at some point after the stream's cursor when the read was
//!   asked (`C`) and at or before the position `P` read after it. It goes out at `P + 1` like any
//!   chunk, without the rows whose keys the stream changed in `(C, P]`: the stream has already
//!   delivered each such key's newest version at or below `P` (rows carry whole images), and a
//!   chunk row of it may be older. A keyless table's window read is taken only when the stream
//!   changed none of its rows in the window (there is no key to drop by); otherwise it is lost
//!   and read again, and the copy says why. The source keeps `(C, P]` while such a read is under
//!   way or held ([`Feed::window_floor`]).

use super::{mutation, EventSource, Feed, FeedOut, FeedRow, LaneKey, Pos};
use crate::io::{Effect, Input, StreamItem};
use sluice_types::{ChangefeedId, DispatcherId, Key, Span, Ts};

/// The stream ts of the first chunk read at binlog position `position` (see the module doc).
pub fn chunk_ts(position: Ts) -> Ts {
    position + 1
}

/// Chunks read at one position (an upstream that wrote nothing meanwhile) take the ts after
/// each other: `position + 1` up to `position + CHUNK_TS_SLOTS`. No commit ts is that close
/// after a position: the next transaction is at least a GTID and a QUERY event long (over 64
/// bytes), and capture uses at most the two ts below a commit ts. Past the slots, a read at the
/// same position waits for the upstream to move (it is retried, and says so).
pub const CHUNK_TS_SLOTS: Ts = 64;

/// At most this many chunks of one dispatcher are read or being read and not yet handed out:
/// the next ones are read while earlier ones wait for their positions or go out, and a span's
/// copy reads this many key ranges in parallel.
pub const MAX_CHUNKS_AHEAD: usize = 4;

/// How a chunk's read stands to its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkConsistency {
    /// The read is the upstream exactly at the position (MariaDB names its consistent
    /// snapshot's binlog position).
    AtPosition,
    /// The read is the upstream at some point after the stream's cursor when it was asked and
    /// at or before the position, a binlog position taken after the read (DBLog's watermarks):
    /// the stream's changes in that window win over the chunk's rows of their keys.
    Window,
}

/// One chunk as the shell read it.
#[derive(Clone, Debug)]
pub struct ChunkRead<R> {
    /// The binlog position the read was consistent at (the ts of everything up to it); for a
    /// [`ChunkConsistency::Window`] read, a position at or after the read.
    pub position: Ts,
    pub consistency: ChunkConsistency,
    /// The rows, in the upstream's key order (the feed gives them the chunk's ts).
    pub rows: Vec<R>,
    /// Where the next chunk starts (the last row's key, in the shell's form).
    pub cursor: Option<Vec<u8>>,
    /// Rows of the span follow the cursor.
    pub more: bool,
}

/// A chunk read under way, as the feed asked it.
#[derive(Clone, Copy, Debug)]
pub(super) struct AskedRead {
    /// The stream's cursor when it was asked (a window read's window starts there).
    pub(super) from: Ts,
    /// The source's complete ts when it was asked: the read happens later and capture never
    /// runs ahead of the upstream, so its position is at or above this; the stream does not
    /// pass it while the read is under way.
    pub(super) floor: Ts,
    pub(super) keyless: bool,
}

#[derive(Clone, Debug)]
pub(super) struct HeldChunk<R> {
    pub(super) ts: Ts,
    /// The binlog position it was read at.
    pub(super) position: Ts,
    /// Its rows, each with its size ([`FeedRow::size`]).
    pub(super) rows: Vec<(R, usize)>,
    pub(super) bytes: u64,
    /// A window read: the stream's changes in it are settled at hand-out.
    pub(super) window: Option<ReadWindow>,
}

/// The window of a [`ChunkConsistency::Window`] read: after `from` (the stream's cursor when
/// the read was asked), up to `position`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReadWindow {
    pub(super) from: Ts,
    pub(super) position: Ts,
    pub(super) keyless: bool,
}

impl<R: FeedRow> Feed<R> {
    /// The shell read the chunk a dispatcher asked for in read `read` (or failed to). A
    /// dispatcher that is no longer subscribed, or did not ask, gets nothing: its rows are
    /// dropped.
    pub fn on_chunk(
        &mut self,
        cf: &ChangefeedId,
        id: DispatcherId,
        read: u64,
        result: Result<ChunkRead<R>, String>,
        out: &mut Vec<FeedOut<R>>,
    ) {
        let key = (cf.clone(), id);
        // Its stream may go on now (a chunk to hand out, or a failed read no longer holding it).
        self.behind.insert(key.clone());
        let dropped = FeedOut::Input(Input::ChunkDropped {
            cf: cf.clone(),
            id,
            read,
        });
        // A read of an ended subscription: its rows go; the dispatcher (if it still is) hears
        // that its read will not be answered.
        let Some(lane) = self.lanes.get_mut(&key) else {
            return out.push(dropped);
        };
        let (Some(asked), Some(cursor)) = (
            lane.reads.remove(&read),
            lane.sub.as_ref().map(|s| s.cursor),
        ) else {
            return out.push(dropped);
        };
        let failed = |message: String| {
            FeedOut::Input(Input::ChunkFailed {
                cf: cf.clone(),
                id,
                read,
                message,
            })
        };
        let chunk = match result {
            Ok(r) => r,
            Err(message) => return out.push(failed(message)),
        };
        let Some(ts) = lane.free_chunk_ts(chunk.position, cursor) else {
            let why = format!(
                "snapshot chunk read at binlog position ts {} cannot go into the stream, which is \
                 at ts {cursor}: the upstream has written nothing since the last {CHUNK_TS_SLOTS} \
                 chunks of this span; the copy goes on once it writes (any transaction; the server \
                 writes its heartbeat row in `sluice.heartbeat` if the upstream user may)",
                chunk.position
            );
            return out.push(failed(why));
        };
        let (cursor, more) = (chunk.cursor.clone(), chunk.more);
        let rows = self.hold_chunk(&key, ts, chunk, asked);
        out.push(FeedOut::Input(Input::ChunkQueued {
            cf: cf.clone(),
            id,
            read,
            ts,
            cursor,
            more,
            rows,
        }));
    }

    /// Holds a chunk of the lane `key` at `ts` (in ts order with the others), its rows counted
    /// in flight; how many rows it has.
    fn hold_chunk(
        &mut self,
        key: &LaneKey,
        ts: Ts,
        chunk: ChunkRead<R>,
        asked: AskedRead,
    ) -> usize {
        let Some(lane) = self.lanes.get_mut(key) else {
            return 0;
        };
        // Each row's size is found once, here: the hand-out moves it to the rows held.
        let rows: Vec<(R, usize)> = chunk
            .rows
            .into_iter()
            .map(|r| {
                let size = r.size();
                (r.at_ts(ts), size)
            })
            .collect();
        let bytes: u64 = rows.iter().map(|r| r.1 as u64).sum();
        let n = rows.len();
        let window = (chunk.consistency == ChunkConsistency::Window).then_some(ReadWindow {
            from: asked.from,
            position: chunk.position,
            keyless: asked.keyless,
        });
        let at = lane.chunks.partition_point(|c| c.ts < ts);
        assert!(
            lane.chunks.get(at).is_none_or(|c| c.ts != ts),
            "two held chunks of one stream at ts {ts}"
        );
        lane.chunks.insert(
            at,
            HeldChunk {
                ts,
                position: chunk.position,
                rows,
                bytes,
                window,
            },
        );
        self.inflight_bytes += bytes;
        n
    }

    /// `Effect::ReadChunk`: the dispatcher's stream waits below the position the read may be
    /// at; the read goes to the shell.
    pub(super) fn read_chunk(&mut self, complete: Ts, e: Effect, out: &mut Vec<FeedOut<R>>) {
        let Effect::ReadChunk(crate::io::ChunkAsk {
            cf,
            id,
            read,
            keyless,
            ..
        }) = &e
        else {
            return;
        };
        let (cf, id, read, keyless) = (cf.clone(), *id, *read, *keyless);
        let dropped = FeedOut::Input(Input::ChunkDropped {
            cf: cf.clone(),
            id,
            read,
        });
        // A full quota starts no read: the dispatcher asks again later (each read under way
        // can bring one chunk above the quota, and a manager has a bounded number of them).
        if self.inflight_bytes >= self.quota_bytes && !mutation("feed-ignores-quota") {
            return out.push(dropped);
        }
        match self.lanes.get_mut(&(cf.clone(), id)) {
            Some(l)
                if l.sub.is_some()
                    && l.chunks.len() + l.reads.len() < MAX_CHUNKS_AHEAD
                    && !l.reads.contains_key(&read) =>
            {
                let from = l.sub.as_ref().map_or(0, |s| s.cursor);
                let floor = complete;
                l.reads.insert(
                    read,
                    AskedRead {
                        from,
                        floor,
                        keyless,
                    },
                );
            }
            Some(l) if l.sub.is_some() => {
                let message = "internal: a snapshot chunk was asked for while the feed holds or \
                               reads as many of the dispatcher's chunks as it may"
                    .to_string();
                return out.push(FeedOut::Input(Input::ChunkFailed {
                    cf,
                    id,
                    read,
                    message,
                }));
            }
            // Not subscribed: nothing to read for.
            _ => return out.push(dropped),
        }
        out.push(FeedOut::Effect(e));
    }

    /// The stream of `key` starts again at `start`: a chunk already handed out above it is lost,
    /// a held one above it waits for the stream again, a held one at or below it is dropped.
    pub(super) fn rewind_chunk(&mut self, key: &LaneKey, start: Ts, out: &mut Vec<FeedOut<R>>) {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        // The dispatcher copies again from its durable progress on a loss: a chunk still held
        // goes too (it would follow the lost one).
        let lost = lane.chunk_out.take_if(|c| *c > start).is_some()
            || lane.chunks.iter().any(|c| c.ts <= start);
        if lost {
            self.drop_held_chunks(key);
            out.push(FeedOut::Input(Input::ChunkLost {
                cf: key.0.clone(),
                id: key.1,
                why: None,
            }));
        }
    }

    /// The lowest ts the source must keep for the window reads under way or held (see the
    /// module doc); `None`: none.
    pub fn window_floor(&self) -> Option<Ts> {
        let asked = self
            .lanes
            .values()
            .flat_map(|l| l.reads.values())
            .map(|r| r.from);
        let held = self
            .lanes
            .values()
            .flat_map(|l| l.chunks.iter())
            .filter_map(|c| c.window.map(|w| w.from));
        asked.chain(held).min()
    }

    /// A window read's rows, less those of keys the stream changed in its window (read from
    /// the source, which has everything up to the chunk's position by now). `Err`: the chunk
    /// cannot go (a keyless table changed in the window, or the source no longer has it).
    fn settle_window<S>(&self, src: &S, span: &Span, chunk: &mut HeldChunk<R>) -> Result<(), String>
    where
        S: EventSource<Row = R>,
    {
        let Some(w) = chunk.window else {
            return Ok(());
        };
        let changed = changed_keys(src, span, w)?;
        if w.keyless && !changed.is_empty() {
            return Err(format!(
                "the table changed while its snapshot was read without a named binlog position \
                 ({} row changes in the read's window); a table without a key is copied in one \
                 read, which is taken only when nothing changed meanwhile: reading again",
                changed.len()
            ));
        }
        if mutation("feed-window-keeps-changed-rows") {
            return Ok(());
        }
        chunk.rows.retain(|(r, _)| !changed.contains(r.key()));
        Ok(())
    }

    /// Everything at or below the held chunk's position is out: the chunk goes, as one batch.
    pub(super) fn hand_out_chunk<S>(&mut self, src: &S, key: &LaneKey, out: &mut Vec<FeedOut<R>>)
    where
        S: EventSource<Row = R>,
    {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        let Some(mut chunk) = lane.chunks.pop_front() else {
            return;
        };
        let span = chunk
            .window
            .and_then(|_| lane.sub.as_ref().map(|s| s.span.clone()));
        let settled = match &span {
            Some(span) => self.settle_window(src, span, &mut chunk),
            None => Ok(()),
        };
        if let Err(why) = settled {
            return self.lose_window_chunk(key, chunk, why, out);
        }
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        if !chunk_holds_stream() {
            // The mutation: the chunk goes where the stream is now, after newer changes.
            let now = lane.sub.as_ref().map_or(chunk.ts, |s| s.cursor + 1);
            chunk.ts = chunk.ts.max(now);
            chunk.rows = chunk
                .rows
                .into_iter()
                .map(|(r, size)| (r.at_ts(now), size))
                .collect();
        }
        let mut items = Vec::with_capacity(chunk.rows.len());
        // The chunk's bytes stay in flight: they move from the chunk to the rows held.
        let mut held = 0u64;
        for (row, size) in chunk.rows {
            let handle = self.next_handle;
            self.next_handle += 1;
            held += size as u64;
            items.push(StreamItem::Row {
                commit_ts: row.commit_ts(),
                key: row.key().clone(),
                handle,
                kind: row.kind(),
            });
            lane.pending.insert(handle, row, size);
        }
        // Rows a window read dropped leave the accounting here too.
        self.inflight_bytes = self.inflight_bytes + held - chunk.bytes;
        lane.chunk_out = Some(chunk.ts);
        if let Some(s) = lane.sub.as_mut().filter(|s| chunk.ts > s.cursor) {
            s.advance(chunk.ts, super::Pos::after(chunk.ts));
        }
        out.push(FeedOut::Input(Input::Events {
            cf: key.0.clone(),
            id: key.1,
            items,
            resolved_ts: chunk.ts,
        }));
    }
}

impl<R: FeedRow> Feed<R> {
    /// A window chunk that cannot go: it and the chunks held after it are dropped, and the
    /// dispatcher copies again from its durable progress, saying why.
    fn lose_window_chunk(
        &mut self,
        key: &LaneKey,
        chunk: HeldChunk<R>,
        why: String,
        out: &mut Vec<FeedOut<R>>,
    ) {
        self.inflight_bytes = self.inflight_bytes.saturating_sub(chunk.bytes);
        self.drop_held_chunks(key);
        out.push(FeedOut::Input(Input::ChunkLost {
            cf: key.0.clone(),
            id: key.1,
            why: Some(why),
        }));
    }
}

impl<R> Feed<R> {
    /// Drops every chunk the lane holds, with its bytes in flight.
    pub(super) fn drop_held_chunks(&mut self, key: &LaneKey) {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        for c in std::mem::take(&mut lane.chunks) {
            self.inflight_bytes = self.inflight_bytes.saturating_sub(c.bytes);
        }
    }
}

/// The keys of `span` the source changed in a window read's window.
fn changed_keys<S: EventSource>(
    src: &S,
    span: &Span,
    w: ReadWindow,
) -> Result<std::collections::BTreeSet<Key>, String> {
    let mut keys = std::collections::BTreeSet::new();
    let mut from = Pos::after(w.from);
    loop {
        let scan = src
            .scan(span, from, w.position, super::MAX_ROWS_PER_DELIVERY)
            .map_err(|e| format!("event store, settling a snapshot read's window: {e}"))?;
        keys.extend(scan.rows.iter().map(|r| r.key().clone()));
        match scan.next {
            Some(next) => from = next,
            None => return Ok(keys),
        }
    }
}

/// What a lane's stream does next ([`super::Lane::next_step`]).
pub(super) enum Next {
    /// Its first held chunk goes out.
    HandOut,
    /// It reads the source up to this ts.
    ReadUpTo(Ts),
}

impl<R> super::Lane<R> {
    /// The next step of a stream at `cursor` with the source complete up to `complete`: its
    /// first held chunk goes out once the stream is right below it and no read under way may
    /// be below its position; otherwise the stream reads up to the chunk's position, never past
    /// a position a read under way may be at.
    pub(super) fn next_step(&self, cursor: Ts, complete: Ts) -> Next {
        let floor = match self.chunks.is_empty() || chunk_waits_for_reads() {
            true => self.reads_floor(),
            false => Ts::MAX,
        };
        let holds = chunk_holds_stream();
        match self.chunks.front().map(|c| (c.ts, c.position)) {
            Some((c, at)) if cursor + 1 >= c && (holds || cursor >= complete) && at <= floor => {
                Next::HandOut
            }
            // Everything at or below the chunk's position goes first.
            Some((c, _)) if holds => Next::ReadUpTo(complete.min(c - 1).min(floor)),
            _ => Next::ReadUpTo(complete.min(floor)),
        }
    }

    /// The ts a chunk read at `position` takes: right after the position, after the stream's
    /// `cursor` and after the chunks held (slots taken), within [`CHUNK_TS_SLOTS`] of the
    /// position; `None` past them.
    fn free_chunk_ts(&self, position: Ts, cursor: Ts) -> Option<Ts> {
        let mut ts = chunk_ts(position).max(cursor + 1);
        if let Some(out) = self.chunk_out {
            ts = ts.max(out + 1);
        }
        while self.chunks.iter().any(|c| c.ts == ts) {
            ts += 1;
        }
        (ts <= position + CHUNK_TS_SLOTS).then_some(ts)
    }
}

/// Mutation `feed-chunk-late`: the stream is not held at a chunk's position, so the chunk goes
/// out after changes newer than it.
pub(super) fn chunk_holds_stream() -> bool {
    !mutation("feed-chunk-late")
}

/// Mutation `feed-stream-passes-reads`: while a chunk is held, the reads under way do not hold
/// the stream (as if each were the only one, asked after the chunks held), so the stream and a
/// chunk held go past the position of a read asked earlier, whose chunk then lands after newer
/// changes.
pub(super) fn chunk_waits_for_reads() -> bool {
    !mutation("feed-stream-passes-reads")
}
