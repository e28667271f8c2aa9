//! The sink side of the data path: one sink per changefeed per node (opened lazily from the
//! changefeed's sink URI) and one worker task per dispatcher that carries out that
//! dispatcher's [`SinkCommand`](sluice_control::SinkCommand)s in order and reports back
//! `SinkFlushed` / `SinkClosed` / `SinkError`.
//!
//! Invariants:
//! - the commands of one dispatcher run one at a time, in the order the control plane emitted
//!   them (one FIFO per dispatcher, one task draining it);
//! - an acknowledgement is only ever what the sink acknowledged (the return of `flush` /
//!   `write_ddl`, or the sink's ack channel) — the shell never invents one;
//! - `SinkClosed` is reported only after `Sink::close` returned (no write of the dispatcher can
//!   land any more);
//! - every job's rows are reported back as done (`done_rows`/`done_bytes`), success or not, so
//!   the shell's in-flight accounting (the memory quota) never leaks;
//! - a sink failure is reported as soon as the sink knows it, also one met by a flush the sink
//!   ran on its own (the ack channel wakes up and [`Sink::failure`] says why), and once per sink
//!   session: the errors that later calls of the failed session return (`SinkError::Earlier`)
//!   are not reported again, so the control plane counts one failure per session;
//! - fencing, twice: a worker checks the lease ([`SinkRegistry::may_write`]) before each job,
//!   and every sink is opened with the same check as its write fence
//!   ([`sluice_sink::open_sink_with`]), so the sink itself checks it immediately before every
//!   downstream write, also those of its own periodic flush and of `close`, bound to the
//!   incarnation that opened the dispatcher (rows buffered before a freeze are not written after
//!   it; see `sluice_sink::fence`).

use crate::mask::{mask_url, scrub};
use sluice_control::Input;
use sluice_sink::{open_sink_with, RowBatch, Sink};
use sluice_types::{ChangefeedId, DdlEvent, DispatcherId, Span, TableSchema, Ts};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, Mutex};

pub enum SinkJob {
    Open {
        span: Span,
        start_ts: Ts,
    },
    Rows {
        batches: Vec<RowBatch>,
        rows: usize,
        bytes: usize,
    },
    Ddl {
        ddl: DdlEvent,
        tables: Vec<Arc<TableSchema>>,
    },
    Flush,
    Close,
}

/// What a worker reports to the shell.
pub struct SinkReport {
    pub input: Option<Input>,
    pub cf: ChangefeedId,
    pub id: DispatcherId,
    pub done_rows: usize,
    pub done_bytes: usize,
    /// Rows written to the sink (for metrics).
    pub written_rows: usize,
    pub finished: bool,
}

/// Changefeed → (sink URI, sink).
type SinkMap = BTreeMap<ChangefeedId, (String, Arc<dyn Sink>)>;

/// Says which node incarnation may write now: `None` while the node's lease is not fresh
/// (cluster), so a paused or partitioned node stops writing before its lease can expire. The
/// same closure is every sink's write fence.
pub type WriteGuard = sluice_sink::WriteFence;

/// The sinks of this node, one per changefeed.
#[derive(Default)]
pub struct SinkRegistry {
    sinks: Mutex<SinkMap>,
    guard: std::sync::OnceLock<WriteGuard>,
    /// Debug holds of MySQL sink transactions, shared by every sink of the node.
    write_holds: Arc<sluice_sink::WriteHolds>,
}

impl SinkRegistry {
    /// Install the lease check (cluster mode), before any sink is opened: sinks opened later get
    /// it as their write fence. Without one, writes are always allowed.
    pub fn set_guard(&self, g: WriteGuard) {
        let _ = self.guard.set(g);
    }

    /// Whether a worker spawned by incarnation `inc` may still touch the sink.
    pub fn may_write(&self, inc: u64) -> bool {
        match self.guard.get() {
            Some(g) => g() == Some(inc),
            None => true,
        }
    }

    pub async fn get(
        &self,
        cf: &ChangefeedId,
        uri: &str,
    ) -> Result<Arc<dyn Sink>, sluice_sink::SinkError> {
        let mut s = self.sinks.lock().await;
        if let Some((u, sink)) = s.get(cf) {
            if u == uri {
                return Ok(sink.clone());
            }
        }
        // Progress rows (DDL applied, checkpoint) downstream are keyed by changefeed, so two
        // changefeeds writing to one downstream never share them.
        let holds = Some(self.write_holds.clone());
        let sink = open_sink_with(cf.as_str(), uri, self.guard.get().cloned(), holds).await?;
        tracing::info!(changefeed = %cf, sink = %mask_url(uri), "sink opened");
        s.insert(cf.clone(), (uri.to_string(), sink.clone()));
        Ok(sink)
    }

    /// The debug holds of this node's MySQL sink transactions (`--enable-debug-holds`).
    pub fn write_holds(&self) -> &sluice_sink::WriteHolds {
        &self.write_holds
    }

    /// Forget the sink of a changefeed no dispatcher of this node uses any more.
    pub async fn drop_sink(&self, cf: &ChangefeedId) {
        self.sinks.lock().await.remove(cf);
    }

    pub async fn existing(&self, cf: &ChangefeedId) -> Option<Arc<dyn Sink>> {
        self.sinks.lock().await.get(cf).map(|(_, s)| s.clone())
    }
}

/// Spawns the worker of one dispatcher. Jobs go in through the returned sender.
pub fn spawn_worker(
    registry: Arc<SinkRegistry>,
    cf: ChangefeedId,
    id: DispatcherId,
    uri: String,
    incarnation: u64,
    report: mpsc::UnboundedSender<SinkReport>,
) -> mpsc::UnboundedSender<SinkJob> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(worker(registry, cf, id, uri, incarnation, rx, report));
    tx
}

async fn worker(
    registry: Arc<SinkRegistry>,
    cf: ChangefeedId,
    id: DispatcherId,
    uri: String,
    incarnation: u64,
    mut rx: mpsc::UnboundedReceiver<SinkJob>,
    report: mpsc::UnboundedSender<SinkReport>,
) {
    let send = |input: Option<Input>,
                done_rows: usize,
                done_bytes: usize,
                written_rows: usize,
                finished: bool| {
        let _ = report.send(SinkReport {
            input,
            cf: cf.clone(),
            id,
            done_rows,
            done_bytes,
            written_rows,
            finished,
        });
    };
    // Whether this session's failure was already reported (only the first error of a failed
    // session is; the later ones are the same failure, returned again as `Earlier`).
    let reported = std::sync::atomic::AtomicBool::new(false);
    let err = |e: &sluice_sink::SinkError| {
        use std::sync::atomic::Ordering::Relaxed;
        if reported.swap(true, Relaxed) && matches!(e, sluice_sink::SinkError::Earlier(_)) {
            return None;
        }
        Some(Input::SinkError {
            cf: cf.clone(),
            id,
            retryable: e.is_retryable(),
            table_only: e.is_table_refusal(),
            message: error_message(&cf, e),
        })
    };
    let mut sink: Option<Arc<dyn Sink>> = None;
    let mut ack: Option<sluice_sink::AckReceiver> = None;
    let mut opened = false;
    loop {
        let job = tokio::select! {
            j = rx.recv() => match j { Some(j) => j, None => break },
            changed = async {
                match ack.as_mut() {
                    Some(a) => a.changed().await.map(|_| *a.borrow_and_update()),
                    None => std::future::pending().await,
                }
            } => {
                // A failure wakes the ack channel too (ack unchanged): report it now, whoever ran
                // the failed flush (the sink's own periodic flush has no caller to tell).
                match (changed, sink.as_ref().and_then(|s| s.failure(id))) {
                    (Ok(ts), Some(e)) => {
                        // What was acknowledged before the failure stays true.
                        send(Some(Input::SinkFlushed { cf: cf.clone(), id, ts }), 0, 0, 0, false);
                        if let Some(input) = err(&e) {
                            send(Some(input), 0, 0, 0, false);
                        }
                    }
                    (Ok(ts), None) => send(Some(Input::SinkFlushed { cf: cf.clone(), id, ts }), 0, 0, 0, false),
                    (Err(_), _) => ack = None,
                }
                continue;
            }
        };
        // Fencing: a worker of an incarnation whose lease is not fresh writes nothing more.
        if !matches!(job, SinkJob::Close) && !registry.may_write(incarnation) {
            if let SinkJob::Rows { rows, bytes, .. } = &job {
                send(None, *rows, *bytes, 0, false);
            }
            tracing::warn!(changefeed = %cf, dispatcher = ?id, "lease not fresh: sink call dropped (fenced)");
            continue;
        }
        // The sink, opened on first use.
        if sink.is_none() && !matches!(job, SinkJob::Close) {
            match registry.get(&cf, &uri).await {
                Ok(s) => sink = Some(s),
                Err(e) => {
                    let (r, b) = match &job {
                        SinkJob::Rows { rows, bytes, .. } => (*rows, *bytes),
                        _ => (0, 0),
                    };
                    tracing::warn!(changefeed = %cf, "cannot open sink: {}", scrub(&e.to_string()));
                    // Not a session yet: every failed attempt to open counts.
                    reported.store(false, std::sync::atomic::Ordering::Relaxed);
                    send(err(&e), r, b, 0, false);
                    continue;
                }
            }
        }
        match job {
            SinkJob::Open { span, start_ts } => {
                if opened {
                    continue;
                }
                let Some(s) = &sink else { continue };
                match s.open(id, span, start_ts).await {
                    Ok(a) => {
                        ack = Some(a);
                        opened = true;
                    }
                    Err(e) => send(err(&e), 0, 0, 0, false),
                }
            }
            SinkJob::Rows {
                batches,
                rows,
                bytes,
            } => {
                let Some(s) = &sink else {
                    send(None, rows, bytes, 0, false);
                    continue;
                };
                let mut failed = None;
                for b in batches {
                    if let Err(e) = s.write_rows(id, b).await {
                        failed = Some(e);
                        break;
                    }
                }
                match failed {
                    None => send(None, rows, bytes, rows, false),
                    Some(e) => send(err(&e), rows, bytes, 0, false),
                }
            }
            SinkJob::Ddl { ddl, tables } => {
                let Some(s) = &sink else { continue };
                match s.write_ddl(id, ddl, tables).await {
                    Ok(ts) => send(
                        Some(Input::SinkFlushed {
                            cf: cf.clone(),
                            id,
                            ts,
                        }),
                        0,
                        0,
                        0,
                        false,
                    ),
                    Err(e) => send(err(&e), 0, 0, 0, false),
                }
            }
            SinkJob::Flush => {
                let Some(s) = &sink else { continue };
                match s.flush(id).await {
                    Ok(ts) => send(
                        Some(Input::SinkFlushed {
                            cf: cf.clone(),
                            id,
                            ts,
                        }),
                        0,
                        0,
                        0,
                        false,
                    ),
                    Err(e) => send(err(&e), 0, 0, 0, false),
                }
            }
            SinkJob::Close => {
                if let (Some(s), true) = (&sink, opened) {
                    let rep = s.close(id).await;
                    if let Some(e) = rep.error {
                        tracing::warn!(changefeed = %cf, dispatcher = ?id, "closing: {}", scrub(&e.to_string()));
                    }
                }
                // Drain what is left (rows are only accounted, never written).
                rx.close();
                while let Ok(j) = rx.try_recv() {
                    if let SinkJob::Rows { rows, bytes, .. } = j {
                        send(None, rows, bytes, 0, false);
                    }
                }
                send(
                    Some(Input::SinkClosed { cf: cf.clone(), id }),
                    0,
                    0,
                    0,
                    true,
                );
                return;
            }
        }
    }
    send(None, 0, 0, 0, true);
}

/// The message of a sink error as the user sees it (changefeed error, log): the sink's own text
/// (server code and message, naming the table or column), secrets scrubbed, and for a fatal
/// error what to do about it.
fn error_message(cf: &ChangefeedId, e: &sluice_sink::SinkError) -> String {
    // The failure itself, not the "an earlier flush failed" wrapper of a failed session.
    let e = match e {
        sluice_sink::SinkError::Earlier(inner) => &**inner,
        e => e,
    };
    let m = scrub(&e.to_string());
    if e.is_retryable() {
        return m;
    }
    let fix = match e {
        // The table itself, not the downstream, is what must change.
        sluice_sink::SinkError::TableRefused { .. } => {
            "give the table a primary key or a not-null unique key upstream, or set \
             force-replicate=true in the sink URI (rows may then repeat on replay), or leave it out \
             with a [filter] rule"
        }
        _ => "fix the downstream",
    };
    format!(
        "{m} (fatal: retrying cannot fix this; rows after the checkpoint are kept and replayed; {fix}, \
         then `sluice cli changefeed resume -c {cf}`)"
    )
}
