//! The feed: one node's data path between its event source and its dispatchers, the same code in
//! the server (over the node's event store) and in the simulator (over the model upstream).
//!
//! It owns the subscriptions of dispatchers to the [`EventSource`] and their cursors, cuts event
//! batches, routes each DDL to the dispatchers it concerns ([`ddl_concerns`]), keeps the rows
//! between the source and the sink (the control plane sees only handles), and accounts what is in
//! flight: rows per dispatcher, bytes per node, against the memory quota. Like the rest of the
//! control plane it is a synchronous state machine: the shell hands it the node's effects
//! ([`Feed::on_effect`]), asks it to read ([`Feed::poll`]) and tells it what the sink accepted
//! ([`Feed::on_accepted`]); it answers with [`FeedOut`]s. No IO, no clock, no randomness.
//!
//! Invariants (the simulator checks each; `mutations.rs` names a bug that breaks it):
//! - **whole transactions, or one in parts**: a batch holds every row of each transaction at or
//!   below its resolved ts (rows of one commit ts of the span), and its resolved ts is at a
//!   transaction boundary. The only rows above it are a **part** of one transaction larger than
//!   [`MAX_ROWS_PER_DELIVERY`], at exactly resolved ts + 1: such a transaction goes in parts of
//!   at most that many rows, in the source's order, each batch resolved just below it, until the
//!   batch that holds its last rows (resolved at or past it). So no transaction is ever held
//!   whole in memory, and none is ever resolved before all of it was delivered. The dispatcher
//!   keeps the same rule for its sink writes (it cuts only where the commit ts changes, and a
//!   write whose last transaction continues says so: [`FeedOut::Write::open`]), and the sink
//!   acknowledges nothing of an open transaction.
//! - **resolved within the source**: a batch's resolved ts never passes
//!   [`EventSource::complete`] (everything at or below it, rows and DDLs, is in the source).
//! - **quota**: rows read and not yet accepted by a sink are accounted (bytes, per node) against
//!   the quota and (rows, per dispatcher) against [`MAX_INFLIGHT_ROWS_PER_DISPATCHER`]. Nothing is
//!   read while the bytes reach the quota, and a batch stops at the transaction boundary where
//!   they would pass it, so they never exceed the quota plus one transaction.
//! - **no leak, no repeat**: every row read is, until it leaves, exactly one of: held for a
//!   subscribed dispatcher, or in a sink write not yet accepted; the bytes in flight are exactly
//!   theirs ([`Feed::audit`]). A row is handed to the sink at most once.
//! - **a snapshot chunk at its position**: a chunk read consistently at binlog position `P`
//!   reaches its dispatcher at `P + 1` ([`chunk_ts`]), after every event at or below `P` and
//!   before every later one; the dispatcher's stream is paused while its read is under way, and
//!   a chunk read behind the stream is refused (`chunk.rs`).
//! - **every lane read**: a poll visits only the lanes that may have something (`behind`), but
//!   every subscribed lane is in it again each time the source's complete ts moves, and a
//!   subscription or a chunk puts its lane back; a lane leaves it only once found caught up.
//! - **idle tables are not held by busy ones**: while the quota is reached, a lane whose span has
//!   no row and no DDL of its own up to the source's complete ts still moves its resolved ts
//!   (reading nothing costs no quota; `quota.rs`), so a busy table of one changefeed does not
//!   stall the checkpoints of the others.
//! - **no deadlock at the quota**: rows are read only for dispatchers that take events now
//!   (working, not stopped at a DDL), and a batch ends at the first row after a DDL it carries, so
//!   a dispatcher waiting at a barrier holds no rows that could starve the others of the quota.

use crate::io::{Effect, Input, SinkCommand, StreamItem};
use sluice_types::{
    ChangefeedId, DdlEvent, DispatcherId, InfluenceScope, Key, NodeId, RowEvent, RowKind, Span,
    TableId, Ts, Value,
};
use std::collections::BTreeMap;

mod chunk;
mod held;
mod quota;
pub use chunk::{chunk_ts, ChunkConsistency, ChunkRead, CHUNK_TS_SLOTS, MAX_CHUNKS_AHEAD};

/// At most this many rows go into one batch of one dispatcher (plus the rest of a transaction
/// larger than that).
pub const MAX_ROWS_PER_DELIVERY: usize = 1024;
/// At most this many rows of one dispatcher are between the event source and the sink.
pub const MAX_INFLIGHT_ROWS_PER_DISPATCHER: usize = 8192;

/// A row as the feed needs it: where it goes, and what it costs while in flight.
pub trait FeedRow: Clone {
    fn commit_ts(&self) -> Ts;
    fn key(&self) -> &Key;
    fn kind(&self) -> RowKind;
    /// Bytes it is accounted for against the memory quota.
    fn size(&self) -> usize;
    /// The same row at stream ts `ts` (a snapshot chunk's rows take the chunk's ts).
    fn at_ts(self, ts: Ts) -> Self;
    /// The row with its key corrupted (mutation `shift-key` only; by default unchanged).
    fn shifted(&self) -> Self {
        self.clone()
    }
}

/// A place in a span's stream: after every row of commit ts below `ts`, and after the rows of
/// `ts` up to `seq` in the source's own order within a transaction ([`Pos::after`]: after all
/// of `ts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub ts: Ts,
    pub seq: u32,
}

impl Pos {
    /// After every row at or below `ts`.
    pub const fn after(ts: Ts) -> Pos {
        Pos { ts, seq: u32::MAX }
    }
    /// Inside the transaction at `ts`: some of its rows may follow.
    pub fn inside(&self) -> bool {
        self.seq != u32::MAX
    }
}

/// Rows of one scan, and where the limit cut it.
#[derive(Clone, Debug)]
pub struct Scan<R> {
    pub rows: Vec<R>,
    /// `Some`: the limit cut the scan; the rows after this place (up to `upto`) are still to
    /// come. It is at or after the last row returned; inside a transaction when its rows may go
    /// on.
    pub next: Option<Pos>,
}

/// What the feed reads from: the node's event store, or the simulator's model upstream.
pub trait EventSource {
    type Row: FeedRow;
    /// Rows of `span` after `from` with commit ts `<= upto`, in commit order (the rows of one
    /// transaction always in the same order), at most `limit`.
    fn scan(
        &self,
        span: &Span,
        from: Pos,
        upto: Ts,
        limit: usize,
    ) -> Result<Scan<Self::Row>, String>;
    /// DDLs with `after < commit ts <= upto`, in commit order.
    fn ddls(&self, after: Ts, upto: Ts) -> Result<Vec<DdlEvent>, String>;
    /// Everything at or below this ts is in the source (rows, DDLs and the schema they need).
    fn complete(&self) -> Ts;
    /// The oldest start ts the source can serve (it has nothing older).
    fn floor(&self) -> Ts;
    /// The database table `table` was in at `at` (for database-scoped DDLs).
    fn database_of(&self, table: TableId, at: Ts) -> Option<String>;
}

/// What the feed asks the shell to do.
#[derive(Clone, Debug, PartialEq)]
pub enum FeedOut<R> {
    /// An input for the node's state machines (event batches, data-path errors).
    Input(Input),
    /// The dispatcher's sink session starts (or restarts) at `start_ts`.
    Open {
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        start_ts: Ts,
    },
    /// Write these rows (whole transactions, commit order; with `open`, the last one continues
    /// in a later write) to the dispatcher's sink; once the sink took them (or they were
    /// dropped), the shell calls [`Feed::on_accepted`] with `rows.len()` and `bytes`, exactly
    /// once.
    Write {
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        rows: Vec<R>,
        bytes: u64,
        /// The last transaction of `rows` is a part: its next rows come in the next write
        /// (see [`SinkCommand::WriteRows`]).
        open: bool,
    },
    /// Any other effect of the node, unchanged.
    Effect(Effect),
    /// For metrics and logs.
    Note(FeedNote),
}

/// Facts the feed announces for metrics and logs.
#[derive(Clone, Debug, PartialEq)]
pub enum FeedNote {
    /// Reading stopped: the rows in flight reached the memory quota.
    QuotaWait,
    /// Rows handed to a dispatcher of `cf`.
    Delivered { cf: ChangefeedId, rows: usize },
    /// The source failed or cannot serve a dispatcher (its message went to it as a sink error).
    SourceError {
        cf: ChangefeedId,
        id: DispatcherId,
        kind: &'static str,
        message: String,
    },
}

#[derive(Clone, Debug)]
struct Sub {
    span: Span,
    is_trigger: bool,
    /// Everything at or below it was delivered (the last batch's resolved ts).
    cursor: Ts,
    /// Where the next scan starts: after `cursor`, or inside the transaction at `cursor + 1`
    /// when a part of it was delivered.
    resume: Pos,
}

impl Sub {
    /// Delivered up to `cursor`, the next read starting at `resume`.
    fn advance(&mut self, cursor: Ts, resume: Pos) {
        assert!(
            resume == Pos::after(cursor) || (resume.inside() && resume.ts == cursor + 1),
            "a subscription resumes after its cursor {cursor} or inside the transaction after it, not at {resume:?}"
        );
        self.cursor = cursor;
        self.resume = resume;
    }
}

/// One dispatcher's part of the feed.
#[derive(Clone, Debug)]
struct Lane<R> {
    sub: Option<Sub>,
    /// Rows handed to the dispatcher and not yet written: handle -> (row, bytes).
    pending: held::Held<R>,
    /// Rows in sink writes not yet accepted.
    in_sink: usize,
    /// Snapshot chunk reads asked for and not answered, by read id: the stream waits below
    /// every position they may be at (`chunk.rs`).
    reads: BTreeMap<u64, chunk::AskedRead>,
    /// Snapshot chunks read and not yet handed out, in ts order (see `chunk.rs`; with the reads
    /// under way at most [`MAX_CHUNKS_AHEAD`]).
    chunks: std::collections::VecDeque<chunk::HeldChunk<R>>,
    /// The ts of the last chunk handed out: a resubscription below it loses it.
    chunk_out: Option<Ts>,
    #[cfg(feature = "mutations")]
    writes: u64,
}

impl<R> Lane<R> {
    fn new() -> Self {
        Lane {
            sub: None,
            pending: held::Held::new(),
            in_sink: 0,
            reads: BTreeMap::new(),
            chunks: std::collections::VecDeque::new(),
            chunk_out: None,
            #[cfg(feature = "mutations")]
            writes: 0,
        }
    }
    fn rows(&self) -> usize {
        self.pending.len() + self.in_sink
    }
    /// The lowest position a snapshot chunk read under way may be at (`Ts::MAX`: none).
    fn reads_floor(&self) -> Ts {
        self.reads
            .values()
            .map(|r| r.floor)
            .min()
            .unwrap_or(Ts::MAX)
    }
    fn idle(&self) -> bool {
        self.sub.is_none() && self.pending.is_empty() && self.in_sink == 0 && self.chunks.is_empty()
    }
}

type LaneKey = (ChangefeedId, DispatcherId);

/// One node's feed. `R` is the source's row type.
#[derive(Clone, Debug)]
pub struct Feed<R> {
    node: NodeId,
    quota_bytes: u64,
    lanes: BTreeMap<LaneKey, Lane<R>>,
    next_handle: u64,
    /// Bytes of every row held or in a sink write not yet accepted.
    inflight_bytes: u64,
    /// Bytes of the rows in sink writes not yet accepted.
    in_sink_bytes: u64,
    /// The lanes a poll may have something to hand: every subscribed lane once the source's
    /// complete ts moved, then only those not yet caught up with it, and those a subscription or
    /// a snapshot chunk touched since. So a poll costs what is moving, not every lane (thousands
    /// of idle tables); a lane found caught up leaves it.
    behind: std::collections::BTreeSet<LaneKey>,
    /// The source's complete ts when `behind` was last filled with every subscribed lane.
    seen_complete: Option<Ts>,
    /// The source's complete ts at the last pass over the quota that moved idle lanes'
    /// resolved ts (`quota.rs`): one pass each time it moves.
    idle_pass_complete: Option<Ts>,
}

/// The dispatchers of one changefeed that a poll found with nothing new but a greater resolved
/// ts: one [`Input::Resolved`] for all of them instead of a batch each.
/// Keyed by changefeed, then resolved ts (so an idle lane costs no key clone).
type Quiet = BTreeMap<ChangefeedId, BTreeMap<Ts, Vec<DispatcherId>>>;

/// The lane's resolved ts moved to `ts` with nothing new: it goes out with its changefeed's.
fn note_quiet(quiet: &mut Quiet, key: &LaneKey, ts: Ts) {
    match quiet.get_mut(&key.0) {
        Some(by_ts) => by_ts.entry(ts).or_default().push(key.1),
        None => {
            quiet.insert(key.0.clone(), BTreeMap::from([(ts, vec![key.1])]));
        }
    }
}

/// A batch being cut for one dispatcher.
struct Cut<R> {
    rows: Vec<R>,
    ddls: Vec<DdlEvent>,
    upto: Ts,
    /// Where the next batch starts (inside the transaction at `upto + 1` after a part).
    resume: Pos,
}

/// Rows read for a batch, up to where they are everything (`upto`), and where the next read
/// starts; rows above `upto` are a part of the transaction at `upto + 1`.
struct Read<R> {
    rows: Vec<R>,
    upto: Ts,
    resume: Pos,
}

impl<R: FeedRow> Feed<R> {
    pub fn new(node: NodeId, quota_bytes: u64) -> Self {
        Feed {
            node,
            quota_bytes,
            lanes: BTreeMap::new(),
            next_handle: 1,
            inflight_bytes: 0,
            in_sink_bytes: 0,
            behind: std::collections::BTreeSet::new(),
            seen_complete: None,
            idle_pass_complete: None,
        }
    }

    /// Bytes of the rows read and not yet accepted by a sink.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight_bytes
    }

    pub fn quota_bytes(&self) -> u64 {
        self.quota_bytes
    }

    /// Rows of one dispatcher between the source and the sink.
    /// How far the stream of a subscribed dispatcher went (`None`: not subscribed).
    pub fn stream_cursor(&self, cf: &ChangefeedId, id: DispatcherId) -> Option<Ts> {
        self.lanes
            .get(&(cf.clone(), id))?
            .sub
            .as_ref()
            .map(|s| s.cursor)
    }

    pub fn inflight_rows(&self, cf: &ChangefeedId, id: DispatcherId) -> usize {
        self.lanes.get(&(cf.clone(), id)).map_or(0, |l| l.rows())
    }

    /// Take one effect of the node: subscriptions and row writes are the feed's; every other
    /// effect comes back as [`FeedOut::Effect`].
    pub fn on_effect<S>(&mut self, src: &S, e: Effect, out: &mut Vec<FeedOut<R>>)
    where
        S: EventSource<Row = R>,
    {
        match e {
            Effect::Subscribe {
                cf,
                id,
                span,
                is_trigger,
                start_ts,
            } => self.subscribe(src.floor(), cf, id, span, is_trigger, start_ts, out),
            Effect::Unsubscribe { cf, id } => self.unsubscribe(cf, id),
            e @ Effect::ReadChunk(_) => self.read_chunk(src.complete(), e, out),
            Effect::Sink(SinkCommand::WriteRows {
                cf,
                id,
                span,
                rows,
                open,
            }) => self.write(cf, id, span, rows, open, out),
            other => out.push(FeedOut::Effect(other)),
        }
    }

    /// Read what the source has for every subscribed dispatcher that takes events now
    /// (`wants`), within the quota; each batch goes out as `Input::Events`, and the dispatchers
    /// with nothing new but the resolved ts as one `Input::Resolved` per changefeed.
    pub fn poll<S>(
        &mut self,
        src: &S,
        wants: impl Fn(&ChangefeedId, DispatcherId) -> bool,
        out: &mut Vec<FeedOut<R>>,
    ) where
        S: EventSource<Row = R>,
    {
        let complete = src.complete();
        if self.seen_complete != Some(complete) {
            self.seen_complete = Some(complete);
            self.behind = self
                .lanes
                .iter()
                .filter(|(_, l)| l.sub.is_some())
                .map(|(k, _)| k.clone())
                .collect();
        }
        let over = |f: &Self| f.inflight_bytes >= f.quota_bytes && !mutation("feed-ignores-quota");
        let mut quiet = Quiet::new();
        // Taken, not cloned: a lane still behind after this poll goes back (a caught-up one
        // leaves), and so does every lane after the quota stopped the poll.
        let mut keys = std::mem::take(&mut self.behind).into_iter();
        while let Some(key) = keys.next() {
            if !self.may_deliver(&key, complete) {
                continue;
            }
            if over(self) {
                out.push(FeedOut::Note(FeedNote::QuotaWait));
                let rest: Vec<LaneKey> = std::iter::once(key).chain(keys).collect();
                self.resolve_idle_lanes(src, rest, complete, &wants, &mut quiet);
                break;
            }
            if wants(&key.0, key.1) {
                self.deliver(src, &key, complete, out, &mut quiet);
            }
            self.behind.insert(key);
        }
        for (cf, by_ts) in quiet {
            for (resolved_ts, ids) in by_ts {
                out.push(FeedOut::Input(Input::Resolved {
                    cf: cf.clone(),
                    ids,
                    resolved_ts,
                }));
            }
        }
    }

    /// Whether a lane may have something to hand out now: subscribed, and a chunk held or its
    /// stream behind the source and below every chunk read under way.
    fn may_deliver(&self, key: &LaneKey, complete: Ts) -> bool {
        let Some(l) = self.lanes.get(key) else {
            return false;
        };
        let Some(sub) = &l.sub else { return false };
        !l.chunks.is_empty() || sub.cursor < complete.min(l.reads_floor())
    }

    /// The sink took (or dropped) a write of `rows` rows and `bytes` bytes. A write of a
    /// dispatcher the feed has nothing in a sink for is an earlier feed's (before a reset).
    pub fn on_accepted(&mut self, cf: &ChangefeedId, id: DispatcherId, rows: usize, bytes: u64) {
        let key = (cf.clone(), id);
        let Some(l) = self.lanes.get_mut(&key).filter(|l| l.in_sink > 0) else {
            return;
        };
        l.in_sink = l.in_sink.saturating_sub(rows);
        if !mutation("feed-leaks-rows") {
            self.inflight_bytes = self.inflight_bytes.saturating_sub(bytes);
        }
        self.in_sink_bytes = self.in_sink_bytes.saturating_sub(bytes);
        if l.idle() {
            self.lanes.remove(&key);
        }
    }

    /// Check the accounting: the bytes in flight are exactly those of the rows held and of the
    /// sink writes not yet accepted, and a dispatcher no longer subscribed holds no row.
    pub fn audit(&self) -> Result<(), String> {
        let held: u64 = self
            .lanes
            .values()
            .flat_map(|l| l.pending.values())
            .map(|(_, b)| *b as u64)
            .sum::<u64>()
            + self
                .lanes
                .values()
                .flat_map(|l| l.chunks.iter())
                .map(|c| c.bytes)
                .sum::<u64>();
        if held + self.in_sink_bytes != self.inflight_bytes {
            return Err(format!(
                "{} bytes in flight, but the rows held have {held} and the sink writes not yet accepted {}",
                self.inflight_bytes, self.in_sink_bytes
            ));
        }
        match self
            .lanes
            .iter()
            .find(|(_, l)| l.sub.is_none() && !l.pending.is_empty())
        {
            Some(((_, id), l)) => Err(format!(
                "{id:?} is unsubscribed but the feed still holds {} of its rows",
                l.pending.len()
            )),
            None => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn subscribe(
        &mut self,
        floor: Ts,
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        is_trigger: bool,
        start_ts: Ts,
        out: &mut Vec<FeedOut<R>>,
    ) {
        // The source starts where this node's capture first started: it cannot serve an older
        // start, and says so rather than deliver a silent gap.
        if start_ts < floor {
            let message = format!(
                "node {}: the event store starts at ts {floor}, after this dispatcher's start ts {start_ts}; \
                 the node joined or was reset after the changefeed's checkpoint (cordon it, or recreate the changefeed)",
                self.node
            );
            self.source_error(cf, id, "start_before_event_store", message, out);
            return;
        }
        let lane = self.lanes.entry((cf.clone(), id)).or_insert_with(Lane::new);
        match lane.sub.as_mut() {
            Some(s) => s.advance(start_ts, Pos::after(start_ts)),
            None => {
                lane.sub = Some(Sub {
                    span: span.clone(),
                    is_trigger,
                    cursor: start_ts,
                    resume: Pos::after(start_ts),
                })
            }
        }
        self.behind.insert((cf.clone(), id));
        // Rows after the new start are read again: the ones held are stale.
        self.release(&(cf.clone(), id), |_, r| r.commit_ts() > start_ts);
        self.rewind_chunk(&(cf.clone(), id), start_ts, out);
        out.push(FeedOut::Open {
            cf,
            id,
            span,
            start_ts,
        });
    }

    fn unsubscribe(&mut self, cf: ChangefeedId, id: DispatcherId) {
        let key = (cf, id);
        let Some(l) = self.lanes.get_mut(&key) else {
            return;
        };
        l.sub = None;
        l.reads.clear();
        l.chunk_out = None;
        self.drop_held_chunks(&key);
        self.release(&key, |_, _| true);
        if self.lanes.get(&key).is_some_and(|l| l.idle()) {
            self.lanes.remove(&key);
        }
    }

    /// Drop held rows of a dispatcher that `pred` selects (by handle and row).
    fn release(&mut self, key: &LaneKey, pred: impl Fn(u64, &R) -> bool) {
        self.release_taken(key, |held| held.take_where(pred));
    }

    /// Drop the held rows of a dispatcher whose handles are below `handle` (it skipped them), in
    /// time proportional to what is dropped: held rows are kept by handle.
    fn release_below(&mut self, key: &LaneKey, handle: u64) {
        self.release_taken(key, |held| held.take_below(handle));
    }

    /// Drop the held rows `take` takes from a dispatcher's, with their bytes in flight.
    fn release_taken(
        &mut self,
        key: &LaneKey,
        take: impl FnOnce(&mut held::Held<R>) -> Vec<(R, usize)>,
    ) {
        let Some(l) = self.lanes.get_mut(key) else {
            return;
        };
        for (_, b) in take(&mut l.pending) {
            self.inflight_bytes = self.inflight_bytes.saturating_sub(b as u64);
        }
    }

    /// A dispatcher writes rows: they leave the feed for the sink, and the rows it skipped
    /// before them (ignored event types) are dropped.
    fn write(
        &mut self,
        cf: ChangefeedId,
        id: DispatcherId,
        span: Span,
        handles: Vec<(Ts, Key, u64)>,
        open: bool,
        out: &mut Vec<FeedOut<R>>,
    ) {
        let key = (cf.clone(), id);
        let max_handle = handles.iter().map(|r| r.2).max().unwrap_or(0);
        let mut rows = Vec::with_capacity(handles.len());
        let mut bytes = 0u64;
        let mut missing = 0usize;
        let lane = self.lanes.entry(key.clone()).or_insert_with(Lane::new);
        for (_, _, h) in &handles {
            match lane.pending.remove(*h) {
                Some((r, b)) => {
                    bytes += b as u64;
                    rows.push(if mutation("shift-key") && h % 50 == 7 {
                        r.shifted()
                    } else {
                        r
                    });
                }
                None => missing += 1,
            }
        }
        lane.in_sink += rows.len();
        self.in_sink_bytes += bytes;
        #[cfg(feature = "mutations")]
        duplicate_first_row(lane, &mut rows);
        self.release_below(&key, max_handle);
        if missing > 0 {
            self.on_accepted(&cf, id, rows.len(), bytes);
            let message =
                format!("internal: {missing} rows of a sink write are no longer in the feed");
            self.source_error(cf, id, "internal", message, out);
            return;
        }
        out.push(FeedOut::Write {
            cf,
            id,
            span,
            rows,
            bytes,
            open,
        });
    }

    fn source_error(
        &mut self,
        cf: ChangefeedId,
        id: DispatcherId,
        kind: &'static str,
        message: String,
        out: &mut Vec<FeedOut<R>>,
    ) {
        out.push(FeedOut::Note(FeedNote::SourceError {
            cf: cf.clone(),
            id,
            kind,
            message: message.clone(),
        }));
        out.push(FeedOut::Input(Input::SinkError {
            cf,
            id,
            retryable: false,
            table_only: false,
            message,
        }));
    }

    /// One batch for one dispatcher, if it has room and the source has something new.
    fn deliver<S>(
        &mut self,
        src: &S,
        key: &LaneKey,
        complete: Ts,
        out: &mut Vec<FeedOut<R>>,
        quiet: &mut Quiet,
    ) where
        S: EventSource<Row = R>,
    {
        let Some(lane) = self.lanes.get(key) else {
            return;
        };
        // Borrowed, not cloned (a span's keys are heap bytes): this runs for every idle lane
        // whenever the source's complete ts moves.
        let Some(sub) = lane.sub.as_ref() else {
            return;
        };
        let complete = match lane.next_step(sub.cursor, complete) {
            chunk::Next::HandOut => return self.hand_out_chunk(src, key, out),
            chunk::Next::ReadUpTo(ts) => ts,
        };
        if sub.cursor >= complete || lane.rows() >= MAX_INFLIGHT_ROWS_PER_DISPATCHER {
            return;
        }
        let cut = match self.cut(src, sub, complete) {
            Ok(c) => c,
            Err(e) => {
                let message = format!("event store: {e}");
                return self.source_error(key.0.clone(), key.1, "event_store", message, out);
            }
        };
        let nothing = cut.rows.is_empty() && cut.ddls.is_empty();
        let rows = cut.rows.len();
        #[allow(unused_mut)]
        let mut resolved_ts = cut.upto;
        #[cfg(feature = "mutations")]
        if crate::mutations::on("feed-resolves-past-source") && cut.upto == complete {
            resolved_ts += 1;
        }
        if let Some(s) = self.lanes.get_mut(key).and_then(|l| l.sub.as_mut()) {
            if resolved_ts == cut.upto {
                s.advance(resolved_ts, cut.resume);
            } else {
                s.advance(resolved_ts, Pos::after(resolved_ts)); // mutations only
            }
        }
        if nothing {
            // Only the resolved ts moved: one input for all such dispatchers of the changefeed.
            return note_quiet(quiet, key, resolved_ts);
        }
        let items = self.hand_out(key, cut.rows, cut.ddls);
        out.push(FeedOut::Note(FeedNote::Delivered {
            cf: key.0.clone(),
            rows,
        }));
        out.push(FeedOut::Input(Input::Events {
            cf: key.0.clone(),
            id: key.1,
            items,
            resolved_ts,
        }));
    }

    /// Cut the next batch of a subscription: whole transactions (or a part of one too large for
    /// a batch), within the quota, ending at the first row after a DDL it carries.
    fn cut<S>(&self, src: &S, sub: &Sub, complete: Ts) -> Result<Cut<R>, String>
    where
        S: EventSource<Row = R>,
    {
        let read = if sub.is_trigger {
            Read {
                rows: Vec::new(),
                upto: complete,
                resume: Pos::after(complete),
            }
        } else {
            read_rows(src, &sub.span, sub.resume, complete)?
        };
        let Read {
            mut rows,
            mut upto,
            mut resume,
        } = self.within_quota(read);
        let ddls: Vec<DdlEvent> = src
            .ddls(sub.cursor, upto)?
            .into_iter()
            .filter(|d| concerns(src, sub, d))
            .collect();
        // Rows after a DDL wait for the next batch: a dispatcher stopped at the DDL (a barrier)
        // then holds none of them.
        if let Some(first_ddl) = ddls.first().map(|d| d.commit_ts) {
            if let Some(i) = rows.iter().position(|r| r.commit_ts() > first_ddl) {
                upto = rows[i].commit_ts() - 1;
                resume = Pos::after(upto);
                rows.truncate(i);
            }
        }
        let ddls = ddls.into_iter().filter(|d| d.commit_ts <= upto).collect();
        Ok(Cut {
            rows,
            ddls,
            upto,
            resume,
        })
    }

    /// Stop at the transaction boundary where the bytes in flight would pass the quota (the
    /// first transaction, or part, always goes: reading started below the quota).
    fn within_quota(&self, read: Read<R>) -> Read<R> {
        if mutation("feed-ignores-quota") {
            return read;
        }
        let Read { mut rows, .. } = read;
        let mut bytes = self.inflight_bytes;
        for i in 0..rows.len() {
            let ts = rows[i].commit_ts();
            let boundary = i > 0 && rows[i - 1].commit_ts() != ts;
            if boundary && bytes > self.quota_bytes {
                rows.truncate(i);
                return Read {
                    rows,
                    upto: ts - 1,
                    resume: Pos::after(ts - 1),
                };
            }
            bytes += rows[i].size() as u64;
        }
        Read { rows, ..read }
    }

    /// Give the rows handles, keep them, and merge them with the DDLs in commit order.
    fn hand_out(&mut self, key: &LaneKey, rows: Vec<R>, ddls: Vec<DdlEvent>) -> Vec<StreamItem> {
        let mut ddls = std::collections::VecDeque::from(ddls);
        let mut items = Vec::with_capacity(rows.len() + ddls.len());
        let Some(lane) = self.lanes.get_mut(key) else {
            return items;
        };
        for row in rows {
            while ddls.front().is_some_and(|d| d.commit_ts < row.commit_ts()) {
                if let Some(ddl) = ddls.pop_front() {
                    items.push(StreamItem::Ddl {
                        ddl: Box::new(ddl),
                        handle: 0,
                    });
                }
            }
            let handle = self.next_handle;
            self.next_handle += 1;
            let size = row.size();
            self.inflight_bytes += size as u64;
            items.push(StreamItem::Row {
                commit_ts: row.commit_ts(),
                key: row.key().clone(),
                handle,
                kind: row.kind(),
            });
            lane.pending.insert(handle, row, size);
        }
        items.extend(ddls.into_iter().map(|ddl| StreamItem::Ddl {
            ddl: Box::new(ddl),
            handle: 0,
        }));
        items
    }
}

/// Rows of `span` from `from` on: whole transactions, where a scan cut by the limit drops its
/// last, possibly partial, transaction; unless that is the only one, which then goes as a part
/// (resolved below it, the next read resuming inside it).
fn read_rows<S: EventSource>(
    src: &S,
    span: &Span,
    from: Pos,
    complete: Ts,
) -> Result<Read<S::Row>, String> {
    let scan = src.scan(span, from, complete, MAX_ROWS_PER_DELIVERY)?;
    let mut rows = scan.rows;
    let Some(next) = scan.next else {
        let resume = Pos::after(complete);
        return Ok(Read {
            rows,
            upto: complete,
            resume,
        });
    };
    if !next.inside() {
        return Ok(Read {
            rows,
            upto: next.ts,
            resume: next,
        });
    }
    let open = next.ts;
    if mutation("feed-cuts-transactions") {
        let resume = Pos::after(open);
        return Ok(Read {
            rows,
            upto: open,
            resume,
        });
    }
    if rows.first().is_some_and(|r| r.commit_ts() < open) {
        // The transactions before it are whole; it is read from its start next time.
        rows.retain(|r| r.commit_ts() < open);
        let resume = Pos::after(open - 1);
        return Ok(Read {
            rows,
            upto: open - 1,
            resume,
        });
    }
    // One transaction larger than a batch: this part, resolved just below it.
    Ok(Read {
        rows,
        upto: open - 1,
        resume: next,
    })
}

fn concerns<S: EventSource>(src: &S, sub: &Sub, ddl: &DdlEvent) -> bool {
    if sub.is_trigger {
        return ddl.influence.trigger;
    }
    let db = match &ddl.influence.scope {
        InfluenceScope::Database(_) => {
            src.database_of(sub.span.table, ddl.commit_ts.saturating_sub(1))
        }
        _ => None,
    };
    ddl_concerns(ddl, sub.span.table, db.as_deref())
}

/// Whether a DDL concerns the dispatchers of table `table` (in database `db` when the DDL was
/// run): it names the table (changes, drops, renames or reads it), its database, or everything.
pub fn ddl_concerns(ddl: &DdlEvent, table: TableId, db: Option<&str>) -> bool {
    let inf = &ddl.influence;
    let scoped = match &inf.scope {
        InfluenceScope::Tables(ts) => ts.contains(&table),
        InfluenceScope::Database(d) => db == Some(d.as_str()),
        InfluenceScope::All => true,
    };
    scoped
        || inf.dropped.contains(&table)
        || inf.renamed.iter().any(|(t, _)| *t == table)
        || inf.sources.contains(&table)
}

#[cfg(feature = "mutations")]
fn mutation(name: &str) -> bool {
    crate::mutations::on(name)
}

#[cfg(not(feature = "mutations"))]
fn mutation(_: &str) -> bool {
    false
}

/// `feed-duplicates-rows`: the third write of a dispatcher carries its first row twice.
#[cfg(feature = "mutations")]
fn duplicate_first_row<R: Clone>(lane: &mut Lane<R>, rows: &mut Vec<R>) {
    lane.writes += 1;
    if crate::mutations::on("feed-duplicates-rows") && lane.writes == 3 {
        if let Some(r) = rows.first().cloned() {
            rows.insert(0, r);
        }
    }
}

fn value_size(v: &Value) -> usize {
    16 + match v {
        Value::Text(s) | Value::Decimal(s) | Value::Json(s) => s.len(),
        Value::Bytes(b) | Value::Geometry(b) => b.len(),
        Value::Enum { name, .. } => name.len(),
        Value::Set { names, .. } => names.iter().map(|n| n.len()).sum(),
        _ => 0,
    }
}

impl FeedRow for RowEvent {
    fn commit_ts(&self) -> Ts {
        self.commit_ts
    }
    fn at_ts(mut self, ts: Ts) -> Self {
        self.commit_ts = ts;
        self
    }
    fn key(&self) -> &Key {
        &self.key
    }
    fn kind(&self) -> RowKind {
        self.kind
    }
    fn size(&self) -> usize {
        let img = |i: &Option<Vec<Value>>| {
            i.as_ref()
                .map_or(0, |v| v.iter().map(value_size).sum::<usize>())
        };
        96 + self.key.0.len() + img(&self.before) + img(&self.after)
    }
}
