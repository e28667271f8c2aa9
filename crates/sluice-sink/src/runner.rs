//! The bookkeeping every sink shares, written once: [`Runner`] implements [`Sink`] over a
//! [`Backend`] that only knows how to buffer, flush, apply a DDL and record a checkpoint.
//!
//! Invariants kept here, for every backend:
//! - per dispatcher, rows arrive in commit-ts order, inside the dispatcher's span, above its
//!   start ts and above every earlier row, resolve and DDL (else [`SinkError::Contract`]);
//! - the ack is raised only after a successful backend flush that covered everything handed over
//!   before the flush started, and only to `max(written, resolved)` as of that start, or to just
//!   below a transaction still open (written in parts: see [`Sink::write_part`]); it never
//!   decreases;
//! - when a transaction's first part comes, everything before it is flushed first, so while it
//!   is open the backend holds nothing but its rows: a backend that keeps transactions whole
//!   ([`Backend::set_open`]) keeps exactly those back;
//! - every operation on a dispatcher runs in a spawned task holding that dispatcher's lock, so a
//!   dropped caller never leaves a half-done write behind an unlocked slot, and `close` (which
//!   takes the lock after unregistering the dispatcher) returns only when no call of it is
//!   running (a backend that hands writes to a client library as it buffers, like Kafka's, may
//!   still have them in that library's queue after a failed dispatcher is closed);
//! - a backend that can flush apart from its writer ([`Backend::detach_flush`]: the storage
//!   sink) has at most one such flush under way per dispatcher, started when its buffer is full
//!   or by the flush ticker, while the next rows are buffered: its rows are acknowledged by its
//!   own task once it succeeded, never before, and every other way the ack rises (a flush the
//!   caller waits for, a resolve, a DDL, `close`) first waits for it, so acks rise in order;
//! - after a failed flush the dispatcher is failed: later calls return [`SinkError::Earlier`]
//!   and its ack stays where it was (the changefeed restarts from its checkpoint);
//! - a failure is never silent, whoever ran the flush (a caller, or the flush ticker, whose own
//!   result nobody awaits): it is kept where [`Sink::failure`] reads it without waiting for the
//!   dispatcher's lock, and the dispatcher's ack receiver is woken (ack unchanged) at once;
//! - the flush ticker holds only a weak reference: dropping the sink stops it; it visits only the
//!   dispatchers whose last operation left something to flush or an ack to raise (each
//!   operation marks its slot due under the slot's lock when it ends); a dispatcher whose
//!   flush is still running (e.g. waiting on a downstream row lock) is skipped by the next
//!   rounds, never waited for, so one stuck table never holds back the others' flushes;
//! - fencing (cluster mode, [`crate::fence`]): each dispatcher is bound at `open` to the
//!   incarnation the sink's [`WriteFence`] returns then, and every backend call that writes
//!   downstream (`buffer` when it starts a write, `flush`, `ddl`, `checkpoint`) gets that
//!   [`BoundFence`] and checks it immediately before each downstream write it makes, whoever
//!   runs it (a caller, the flush ticker, `close`). A refused write fails the dispatcher like any
//!   failed flush ([`SinkError::Fenced`], retryable; ack unchanged, ack receiver woken), so rows
//!   buffered before a node froze are never written after it wakes with its lease lapsed or
//!   under a newer incarnation. The only window left is between a passed check and the bytes
//!   leaving the process (for Kafka that includes the client's queue: its linger, and its
//!   retries for up to `write-timeout` while the broker is unreachable). Without a fence every
//!   check passes.

use crate::error::{Result, SinkError};
use crate::fence::{BoundFence, WriteFence};
use crate::{AckReceiver, CloseReport, RowBatch, Sink};
use async_trait::async_trait;
use sluice_types::{DdlEvent, DispatcherId, Span, TableSchema, Ts};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;
use tokio::sync::{watch, Mutex};

/// What a backend learns of a dispatcher when it opens.
pub struct WriterSpec<'a> {
    pub dispatcher: DispatcherId,
    pub span: &'a Span,
    /// Its start point: it writes only rows with greater commit ts.
    pub start_ts: Ts,
    /// A write fence is installed (cluster mode): a successor may take the span over while this
    /// dispatcher's process is paused.
    pub fenced: bool,
}

/// What a concrete sink implements; see the module docs for what the runner adds.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    type Writer: Send + 'static;
    /// A writer for one dispatcher.
    fn new_writer(&self, spec: &WriterSpec<'_>) -> Result<Self::Writer>;
    /// Buffers rows (already checked by the runner). Returns true when a bound is reached and the
    /// buffer must be flushed now. A backend that starts a downstream write from here checks
    /// `fence` before it, like `flush`.
    async fn buffer(
        &self,
        w: &mut Self::Writer,
        batch: RowBatch,
        fence: &BoundFence,
    ) -> Result<bool>;
    fn has_buffered(&self, w: &Self::Writer) -> bool;
    /// Makes every buffered row durable. Checks `fence` immediately before each downstream write.
    async fn flush(&self, w: &mut Self::Writer, fence: &BoundFence) -> Result<()>;
    /// Applies a DDL (called after a successful flush). Checks `fence` immediately before each
    /// downstream write.
    async fn ddl(
        &self,
        w: &mut Self::Writer,
        ddl: &DdlEvent,
        tables: &[Arc<TableSchema>],
        fence: &BoundFence,
    ) -> Result<()>;
    /// Records the changefeed checkpoint; checks `fence` immediately before writing it.
    async fn checkpoint(&self, ts: Ts, fence: &BoundFence) -> Result<()>;
    /// The DDLs above `after` recorded downstream ([`Sink::applied_ddls`]).
    async fn applied_ddls(&self, after: Ts) -> Result<Vec<crate::DdlRecord>>;
    /// Drops buffered rows (closing a failed dispatcher); waits for any write still in flight.
    async fn discard(&self, w: &mut Self::Writer);
    /// Takes everything buffered out of the writer for a flush that runs apart from it, so the
    /// rows buffered next are not held up by its writes; `None`: this backend flushes in place
    /// only ([`Backend::flush`]). The runner runs at most one per dispatcher at a time, in order
    /// with its other flushes, and acknowledges its rows only once it succeeded. The flush checks
    /// `fence` immediately before each downstream write, like `flush`.
    fn detach_flush(&self, _w: &mut Self::Writer, _fence: &BoundFence) -> Option<DetachedFlush> {
        None
    }
    /// The rows buffered from now on are parts of one transaction still open (`true`), or it
    /// ended (`false`, before the batch that ends it is buffered). Everything buffered before
    /// its first part is durable by then. A backend that keeps upstream transactions whole
    /// downstream keeps its parts back (its `flush` writes nothing while it is open); the others
    /// write them like any rows, as the runner acknowledges nothing of an open transaction.
    fn set_open(&self, _w: &mut Self::Writer, _open: bool) {}
    /// How often buffered rows are flushed without being asked; `None`: never.
    fn flush_interval(&self) -> Option<Duration>;
}

/// A flush taken out of a writer ([`Backend::detach_flush`]).
pub type DetachedFlush = futures::future::BoxFuture<'static, Result<()>>;

/// A detached flush under way: the ack it raises when it succeeds.
struct Inflight {
    target: Ts,
    task: tokio::task::JoinHandle<()>,
}

struct Slot<W> {
    id: DispatcherId,
    span: Span,
    writer: W,
    /// Greatest commit ts handed to the backend (rows or DDL), or the start ts.
    written: Ts,
    /// Greatest resolved ts declared.
    resolved: Ts,
    /// The transaction written in parts and not yet ended: nothing of it is acknowledged.
    open: Option<Ts>,
    ack: Arc<watch::Sender<Ts>>,
    /// The detached flush under way, if any (at most one).
    inflight: Option<Inflight>,
    /// The sink's fence bound to the incarnation that may write when the dispatcher was opened.
    fence: BoundFence,
    /// Set once, by the first failed flush; shared with the slot table (see [`Sink::failure`]).
    failed: Failure,
    closed: bool,
}

/// Where a dispatcher's failure is kept: written under the slot's lock, read without it.
type Failure = Arc<std::sync::OnceLock<Arc<SinkError>>>;

/// Raises an ack to `ts` (it never goes down).
fn raise(ack: &watch::Sender<Ts>, ts: Ts) {
    ack.send_if_modified(|cur| {
        if ts > *cur {
            *cur = ts;
            true
        } else {
            false
        }
    });
}

impl<W> Slot<W> {
    fn raise_ack(&self, ts: Ts) {
        // Rows of a detached flush under way are not durable yet: nothing may pass them.
        assert!(
            self.inflight.is_none(),
            "dispatcher {}: ack raised to {ts} with a flush under way",
            self.id
        );
        raise(&self.ack, ts);
    }
    fn check_usable(&self) -> Result<()> {
        if self.closed {
            return Err(SinkError::contract(self.id, "dispatcher is closed"));
        }
        if let Some(e) = self.failed.get() {
            return Err(SinkError::Earlier(e.clone()));
        }
        Ok(())
    }
    fn is_failed(&self) -> bool {
        self.failed.get().is_some()
    }
    /// Whether a tick would do anything: send what is buffered, or raise the ack to what was
    /// written or resolved. An idle slot is skipped without a task (thousands of idle
    /// dispatchers would otherwise cost a task each every flush interval).
    fn wants_tick<B: Backend<Writer = W>>(&self, b: &B) -> bool {
        !self.closed
            && !self.is_failed()
            && (b.has_buffered(&self.writer)
                || self.inflight.is_some()
                || self.ack_target() > *self.ack.borrow())
    }
    /// What a successful flush acknowledges: everything written or resolved, but nothing of a
    /// transaction still open.
    fn ack_target(&self) -> Ts {
        match self.open {
            Some(t) => (t - 1).max(self.resolved),
            None => self.written.max(self.resolved),
        }
    }
    /// Marks the dispatcher failed (the first error stays), wakes whoever waits for its ack, and
    /// returns the error to report.
    fn fail(&self, e: SinkError) -> SinkError {
        let e = self.failed.get_or_init(|| Arc::new(e)).clone();
        // Ack unchanged: the wake-up only tells a waiting caller to look at `failure`.
        self.ack.send_modify(|_| {});
        SinkError::Earlier(e)
    }
}

type SlotRef<W> = Arc<Mutex<Slot<W>>>;
type SlotTable<W> = BTreeMap<DispatcherId, (SlotRef<W>, watch::Receiver<Ts>, Failure)>;

struct Shared<B: Backend> {
    backend: B,
    slots: StdMutex<SlotTable<B::Writer>>,
    /// Dispatchers whose last operation left them wanting a tick (rows buffered, or an ack to
    /// raise): the flush ticker visits only these, so its rounds cost what is active, not every
    /// open dispatcher (thousands of idle tables).
    due: StdMutex<std::collections::BTreeSet<DispatcherId>>,
    /// Installed once, before the first dispatcher opens ([`Runner::set_fence`]).
    fence: std::sync::OnceLock<WriteFence>,
}

enum Op {
    /// Rows; `true`: a part (the last transaction continues in the next write).
    Write(RowBatch, bool),
    Resolve(Ts),
    Flush,
    Tick,
    Ddl(Box<DdlEvent>, Vec<Arc<TableSchema>>),
    Close,
}

enum Out {
    Unit,
    Ts(Ts),
    Closed(CloseReport),
}

/// A [`Sink`] over a [`Backend`].
pub struct Runner<B: Backend> {
    shared: Arc<Shared<B>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl<B: Backend> Drop for Runner<B> {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
    }
}

impl<B: Backend> Runner<B> {
    /// Must be called inside a tokio runtime when the backend has a flush interval.
    pub fn with_backend(backend: B) -> Runner<B> {
        let interval = backend.flush_interval();
        let shared = Arc::new(Shared {
            backend,
            slots: StdMutex::new(BTreeMap::new()),
            due: StdMutex::new(std::collections::BTreeSet::new()),
            fence: std::sync::OnceLock::new(),
        });
        let ticker = interval.map(|iv| tokio::spawn(tick_loop(Arc::downgrade(&shared), iv)));
        Runner { shared, ticker }
    }

    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// Installs the write fence (cluster mode; see [`crate::fence`]). Refused once a dispatcher
    /// is open (it would stay unfenced) or when a fence is already installed.
    pub fn set_fence(&self, fence: WriteFence) -> Result<()> {
        let slots = self
            .shared
            .slots
            .lock()
            .map_err(|_| SinkError::contract("-", "slot table poisoned"))?;
        if !slots.is_empty() {
            return Err(SinkError::contract(
                "-",
                "the write fence must be installed before any dispatcher opens",
            ));
        }
        self.shared
            .fence
            .set(fence)
            .map_err(|_| SinkError::contract("-", "a write fence is already installed"))
    }

    fn slot(&self, d: DispatcherId) -> Result<SlotRef<B::Writer>> {
        let slots = self
            .shared
            .slots
            .lock()
            .map_err(|_| SinkError::contract(d, "slot table poisoned"))?;
        slots
            .get(&d)
            .map(|(s, _, _)| s.clone())
            .ok_or_else(|| SinkError::contract(d, "dispatcher is not open"))
    }

    async fn run(&self, slot: SlotRef<B::Writer>, op: Op) -> Result<Out> {
        let shared = self.shared.clone();
        let task = tokio::spawn(async move {
            let mut guard = slot.lock_owned().await;
            let out = exec(&shared.backend, &mut guard, op).await;
            shared.note_due(&guard);
            out
        });
        task.await
            .map_err(|e| SinkError::contract("?", format!("sink task failed: {e}")))?
    }
}

impl<B: Backend> Shared<B> {
    /// Called after every operation on a slot, under its lock: a slot that wants a tick is due.
    fn note_due(&self, slot: &Slot<B::Writer>) {
        if slot.wants_tick(&self.backend) {
            if let Ok(mut due) = self.due.lock() {
                due.insert(slot.id);
            }
        }
    }

    /// The due slots still open, leaving the due set empty.
    fn take_due(&self) -> Option<Vec<SlotRef<B::Writer>>> {
        let due = std::mem::take(&mut *self.due.lock().ok()?);
        let slots = self.slots.lock().ok()?;
        Some(
            due.iter()
                .filter_map(|id| slots.get(id).map(|(v, _, _)| v.clone()))
                .collect(),
        )
    }
}

async fn tick_loop<B: Backend>(shared: Weak<Shared<B>>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(s) = shared.upgrade() else { return };
        let Some(slots) = s.take_due() else { return };
        // One task per due dispatcher that is not busy (a slow one delays neither the others nor
        // the next round: a busy slot is skipped, and its running operation marks it due again
        // when it ends if it still wants a tick); spawned so a flush finishes even if the runner
        // is dropped meanwhile. A failure is not lost with the result: `flush_slot` recorded it
        // in the slot and woke the dispatcher's ack receiver.
        for slot in slots {
            let Ok(mut g) = slot.try_lock_owned() else {
                continue;
            };
            if !g.wants_tick(&s.backend) {
                continue;
            }
            let s2 = s.clone();
            tokio::spawn(async move {
                let _ = exec(&s2.backend, &mut g, Op::Tick).await;
                s2.note_due(&g);
            });
        }
        drop(s);
    }
}

async fn flush_slot<B: Backend>(b: &B, s: &mut Slot<B::Writer>) -> Result<Ts> {
    s.check_usable()?;
    settle(s).await?;
    let target = s.ack_target();
    if b.has_buffered(&s.writer) {
        if let Err(e) = b.flush(&mut s.writer, &s.fence).await {
            return Err(s.fail(e));
        }
    }
    s.raise_ack(target);
    Ok(*s.ack.borrow())
}

/// Waits for the detached flush under way, if any: its ack is raised (by its task), or the
/// dispatcher failed with its error.
async fn settle<W>(s: &mut Slot<W>) -> Result<()> {
    let Some(f) = s.inflight.take() else {
        return Ok(());
    };
    if let Err(e) = f.task.await {
        // The task panicked or was cancelled: its rows are not known to be written.
        s.fail(SinkError::contract(s.id, format!("flush task failed: {e}")));
    }
    match s.failed.get() {
        Some(e) => Err(SinkError::Earlier(e.clone())),
        None => {
            raise(&s.ack, f.target);
            Ok(())
        }
    }
}

/// Flushes without waiting for the writes where the backend can ([`Backend::detach_flush`]):
/// the flush under way is waited for first (at most one), then what is buffered is taken out
/// and written by a task of its own, which raises the ack when it succeeded. Elsewhere, or with
/// nothing buffered, the same as [`flush_slot`] (except that an ack to raise behind a flush still
/// under way is left to that flush's end: a later tick raises it).
async fn flush_ahead<B: Backend>(b: &B, s: &mut Slot<B::Writer>) -> Result<()> {
    s.check_usable()?;
    let busy = s.inflight.as_ref().is_some_and(|f| !f.task.is_finished());
    if !b.has_buffered(&s.writer) {
        if busy {
            return Ok(());
        }
        return flush_slot(b, s).await.map(|_| ());
    }
    settle(s).await?;
    let target = s.ack_target();
    let Some(flush) = b.detach_flush(&mut s.writer, &s.fence) else {
        return flush_slot(b, s).await.map(|_| ());
    };
    let (ack, failed) = (s.ack.clone(), s.failed.clone());
    let task = tokio::spawn(async move {
        match flush.await {
            Ok(()) => raise(&ack, target),
            Err(e) => {
                failed.get_or_init(|| Arc::new(e));
                // Ack unchanged: the wake-up tells a waiting caller to look at `failure`.
                ack.send_modify(|_| {});
            }
        }
    });
    s.inflight = Some(Inflight { target, task });
    Ok(())
}

/// The contract of a batch of rows for this slot: the span's table, one table version, commit
/// ts after everything written or resolved (ascending within the batch), keys inside the span.
fn check_batch<W>(s: &Slot<W>, batch: &RowBatch) -> Result<()> {
    let schema = &batch.schema;
    if schema.table_id != s.span.table {
        return Err(SinkError::contract(
            s.id,
            format!(
                "table {} is not the span's table {}",
                schema.table_id, s.span.table
            ),
        ));
    }
    let mut last = s.written.max(s.resolved);
    for (i, r) in batch.rows.iter().enumerate() {
        if r.table_id != schema.table_id || r.schema_version != schema.version {
            return Err(SinkError::contract(
                s.id,
                format!(
                    "row {i} is of table {} version {}, batch is {} version {}",
                    r.table_id, r.schema_version, schema.table_id, schema.version
                ),
            ));
        }
        let ok = if i == 0 {
            r.commit_ts > last || s.open == Some(r.commit_ts)
        } else {
            r.commit_ts >= last
        };
        if !ok {
            return Err(SinkError::contract(
                s.id,
                format!("row {i} has commit ts {} after {last}", r.commit_ts),
            ));
        }
        if !s.span.contains(&r.key) {
            return Err(SinkError::contract(
                s.id,
                format!("row {i} key {:?} outside span {:?}", r.key, s.span),
            ));
        }
        last = r.commit_ts;
    }
    Ok(())
}

/// Rows into the backend. With `part`, the batch's last transaction stays open: when it is new,
/// the rows before it go first and are flushed (so the backend then holds only its parts).
async fn write<B: Backend>(
    b: &B,
    s: &mut Slot<B::Writer>,
    mut batch: RowBatch,
    part: bool,
) -> Result<()> {
    s.check_usable()?;
    check_batch(s, &batch)?;
    let Some(max_ts) = batch.rows.last().map(|r| r.commit_ts) else {
        return Ok(());
    };
    let opens = part && s.open != Some(max_ts);
    if opens {
        // An earlier open transaction ends among the rows before this one.
        close_open(b, s);
        let first_part = batch.rows.partition_point(|r| r.commit_ts < max_ts);
        let rest = batch.rows.split_off(first_part);
        let before = std::mem::replace(&mut batch.rows, rest);
        if let Some(ts) = before.last().map(|r| r.commit_ts) {
            let closed = RowBatch {
                schema: batch.schema.clone(),
                rows: before,
            };
            buffer(b, s, closed, ts).await?;
        }
        flush_slot(b, s).await?;
        s.open = Some(max_ts);
        b.set_open(&mut s.writer, true);
    } else if !part {
        close_open(b, s);
    }
    let full = buffer(b, s, batch, max_ts).await?;
    if full {
        flush_ahead(b, s).await?;
    }
    Ok(())
}

/// The open transaction (if any) ends with the rows buffered next.
fn close_open<B: Backend>(b: &B, s: &mut Slot<B::Writer>) {
    if s.open.take().is_some() {
        b.set_open(&mut s.writer, false);
    }
}

/// One batch into the backend; true when it must be flushed now.
async fn buffer<B: Backend>(
    b: &B,
    s: &mut Slot<B::Writer>,
    batch: RowBatch,
    max_ts: Ts,
) -> Result<bool> {
    let full = b.buffer(&mut s.writer, batch, &s.fence).await;
    s.written = max_ts;
    full.map_err(|e| s.fail(e))
}

async fn exec<B: Backend>(b: &B, s: &mut Slot<B::Writer>, op: Op) -> Result<Out> {
    match op {
        Op::Write(batch, part) => write(b, s, batch, part).await.map(|_| Out::Unit),
        Op::Resolve(ts) => {
            s.check_usable()?;
            if ts > s.resolved {
                s.resolved = ts;
            }
            // Behind a detached flush under way, the ack waits for it (a tick raises it).
            if !b.has_buffered(&s.writer) && s.inflight.is_none() {
                s.raise_ack(s.written.max(s.resolved));
            }
            Ok(Out::Unit)
        }
        Op::Flush => flush_slot(b, s).await.map(Out::Ts),
        Op::Tick => {
            if s.closed || s.is_failed() {
                return Ok(Out::Unit);
            }
            flush_ahead(b, s).await.map(|_| Out::Unit)
        }
        Op::Ddl(ddl, tables) => {
            s.check_usable()?;
            if let Some(t) = s.open {
                return Err(SinkError::contract(
                    s.id,
                    format!(
                        "DDL at {} inside the open transaction at {t}",
                        ddl.commit_ts
                    ),
                ));
            }
            if ddl.commit_ts <= s.written {
                return Err(SinkError::contract(
                    s.id,
                    format!("DDL at {} after rows up to {}", ddl.commit_ts, s.written),
                ));
            }
            flush_slot(b, s).await?;
            if let Err(e) = b.ddl(&mut s.writer, &ddl, &tables, &s.fence).await {
                return Err(s.fail(e));
            }
            s.written = ddl.commit_ts;
            s.raise_ack(ddl.commit_ts);
            Ok(Out::Ts(ddl.commit_ts))
        }
        Op::Close => {
            let error = if s.closed || s.is_failed() {
                None
            } else {
                flush_slot(b, s).await.err()
            };
            // A failed dispatcher's detached flush may still be writing: it ends first.
            let _ = settle(s).await;
            b.discard(&mut s.writer).await;
            s.closed = true;
            let durable_ts = *s.ack.borrow();
            Ok(Out::Closed(CloseReport { durable_ts, error }))
        }
    }
}

#[async_trait]
impl<B: Backend> Sink for Runner<B> {
    async fn open(
        &self,
        dispatcher: DispatcherId,
        span: Span,
        start_ts: Ts,
    ) -> Result<AckReceiver> {
        // `set_fence` comes before any open (it refuses otherwise), so this is settled.
        let writer = self.shared.backend.new_writer(&WriterSpec {
            dispatcher,
            span: &span,
            start_ts,
            fenced: self.shared.fence.get().is_some(),
        })?;
        let (tx, rx) = watch::channel(start_ts);
        let failed = Failure::default();
        let mut slots = self
            .shared
            .slots
            .lock()
            .map_err(|_| SinkError::contract(dispatcher, "slot table poisoned"))?;
        if slots.contains_key(&dispatcher) {
            return Err(SinkError::contract(
                dispatcher,
                "dispatcher is already open",
            ));
        }
        // Bound under the slot table's lock: `set_fence` cannot slip in between.
        let slot = Slot {
            id: dispatcher,
            span,
            writer,
            written: start_ts,
            resolved: start_ts,
            open: None,
            ack: Arc::new(tx),
            inflight: None,
            fence: BoundFence::bind(self.shared.fence.get()),
            failed: failed.clone(),
            closed: false,
        };
        slots.insert(dispatcher, (Arc::new(Mutex::new(slot)), rx.clone(), failed));
        Ok(rx)
    }

    async fn write_rows(&self, dispatcher: DispatcherId, batch: RowBatch) -> Result<()> {
        let slot = self.slot(dispatcher)?;
        self.run(slot, Op::Write(batch, false)).await.map(|_| ())
    }

    async fn write_part(&self, dispatcher: DispatcherId, batch: RowBatch) -> Result<()> {
        let slot = self.slot(dispatcher)?;
        self.run(slot, Op::Write(batch, true)).await.map(|_| ())
    }

    async fn resolve(&self, dispatcher: DispatcherId, ts: Ts) -> Result<()> {
        let slot = self.slot(dispatcher)?;
        self.run(slot, Op::Resolve(ts)).await.map(|_| ())
    }

    async fn flush(&self, dispatcher: DispatcherId) -> Result<Ts> {
        let slot = self.slot(dispatcher)?;
        match self.run(slot, Op::Flush).await? {
            Out::Ts(t) => Ok(t),
            _ => Err(SinkError::contract(dispatcher, "unexpected flush result")),
        }
    }

    async fn write_ddl(
        &self,
        dispatcher: DispatcherId,
        ddl: DdlEvent,
        tables: Vec<Arc<TableSchema>>,
    ) -> Result<Ts> {
        let slot = self.slot(dispatcher)?;
        match self.run(slot, Op::Ddl(Box::new(ddl), tables)).await? {
            Out::Ts(t) => Ok(t),
            _ => Err(SinkError::contract(dispatcher, "unexpected DDL result")),
        }
    }

    async fn write_checkpoint(&self, ts: Ts) -> Result<()> {
        let fence = BoundFence::any(self.shared.fence.get());
        self.shared.backend.checkpoint(ts, &fence).await
    }

    async fn applied_ddls(&self, after: Ts) -> Result<Vec<crate::DdlRecord>> {
        let mut list = self.shared.backend.applied_ddls(after).await?;
        list.sort();
        list.dedup_by_key(|r| r.commit_ts);
        Ok(list)
    }

    async fn close(&self, dispatcher: DispatcherId) -> CloseReport {
        let removed = match self.shared.slots.lock() {
            Ok(mut m) => m.remove(&dispatcher),
            Err(_) => None,
        };
        let Some((slot, rx, _)) = removed else {
            return CloseReport {
                durable_ts: 0,
                error: Some(SinkError::contract(dispatcher, "dispatcher is not open")),
            };
        };
        match self.run(slot, Op::Close).await {
            Ok(Out::Closed(r)) => r,
            Ok(_) => CloseReport {
                durable_ts: *rx.borrow(),
                error: None,
            },
            Err(e) => CloseReport {
                durable_ts: *rx.borrow(),
                error: Some(e),
            },
        }
    }

    fn durable_ts(&self, dispatcher: DispatcherId) -> Option<Ts> {
        let slots = self.shared.slots.lock().ok()?;
        slots.get(&dispatcher).map(|(_, rx, _)| *rx.borrow())
    }

    fn failure(&self, dispatcher: DispatcherId) -> Option<SinkError> {
        let slots = self.shared.slots.lock().ok()?;
        let (_, _, failed) = slots.get(&dispatcher)?;
        failed.get().map(|e| SinkError::Earlier(e.clone()))
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
