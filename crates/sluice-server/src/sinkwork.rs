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
use sluice_sink::{open_sink_routed, RowBatch, Sink};
use sluice_types::sink_rules::DispatchRule;
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
        /// The last batch's last transaction continues in the next job (`Sink::write_part`).
        open: bool,
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
    /// The lags (ms from commit to acknowledgement) of the rows this report's acknowledgement
    /// covers, with their row counts (see [`crate::rowlag`]).
    pub row_lags: Vec<(u64, u64)>,
    pub finished: bool,
}

/// Changefeed → (sink URI, the dispatcher rules it was opened with, sink).
type SinkMap = BTreeMap<ChangefeedId, (String, Vec<DispatchRule>, Arc<dyn Sink>)>;

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
    /// Each changefeed's `[[sink.dispatchers]]`, as its configuration last said.
    rules: std::sync::Mutex<BTreeMap<ChangefeedId, Vec<DispatchRule>>>,
    /// The upstream's binlog base name, given to every sink opened (Debezium's `source.file`).
    binlog_base: std::sync::OnceLock<String>,
}

impl SinkRegistry {
    /// Install the lease check (cluster mode), before any sink is opened: sinks opened later get
    /// it as their write fence. Without one, writes are always allowed.
    pub fn set_guard(&self, g: WriteGuard) {
        let _ = self.guard.set(g);
    }

    /// Records the upstream's binlog base name (`mysql-bin` for `mysql-bin.000042`), before any
    /// sink is opened: sinks opened later name binlog files by it (a Kafka sink's Debezium
    /// `source.file`). Without one, they leave the file name empty.
    pub fn set_binlog_base(&self, base: &str) {
        let _ = self.binlog_base.set(base.to_string());
    }

    /// Records a changefeed's `[[sink.dispatchers]]` (from its configuration, before its
    /// dispatchers open the sink). A change drops the sink opened under the old rules, so the
    /// next open routes by the new ones (see [`SinkRegistry::get`]).
    pub fn set_rules(&self, cf: &ChangefeedId, rules: &[DispatchRule]) {
        let mut r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if r.get(cf).map(Vec::as_slice).unwrap_or_default() == rules {
            return;
        }
        r.insert(cf.clone(), rules.to_vec());
    }

    fn rules_of(&self, cf: &ChangefeedId) -> Vec<DispatchRule> {
        let r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        r.get(cf).cloned().unwrap_or_default()
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
        let rules = self.rules_of(cf);
        if let Some((u, r, sink)) = s.get(cf) {
            if u == uri && *r == rules {
                return Ok(sink.clone());
            }
        }
        // Progress rows (DDL applied, checkpoint) downstream are keyed by changefeed, so two
        // changefeeds writing to one downstream never share them.
        let holds = Some(self.write_holds.clone());
        let (fence, base) = (self.guard.get().cloned(), self.binlog_base.get());
        let base = base.map(String::as_str);
        let sink = open_sink_routed(cf.as_str(), uri, &rules, fence, holds, base).await?;
        tracing::info!(changefeed = %cf, sink = %mask_url(uri), "sink opened");
        s.insert(cf.clone(), (uri.to_string(), rules, sink.clone()));
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
        self.sinks.lock().await.get(cf).map(|(_, _, s)| s.clone())
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

/// One dispatcher's worker: where it writes, to whom it reports, and its sink session.
struct Worker {
    registry: Arc<SinkRegistry>,
    cf: ChangefeedId,
    id: DispatcherId,
    uri: String,
    incarnation: u64,
    report: mpsc::UnboundedSender<SinkReport>,
    /// Whether this session's failure was already reported (only the first error of a failed
    /// session is; the later ones are the same failure, returned again as `Earlier`).
    reported: bool,
    sink: Option<Arc<dyn Sink>>,
    ack: Option<sluice_sink::AckReceiver>,
    opened: bool,
    /// Rows written and not yet acknowledged, to time them (see [`crate::rowlag`]).
    lag: crate::rowlag::Pending,
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
    let mut w = Worker {
        registry,
        cf,
        id,
        uri,
        incarnation,
        report,
        reported: false,
        sink: None,
        ack: None,
        opened: false,
        lag: Default::default(),
    };
    loop {
        let job = tokio::select! {
            j = rx.recv() => match j { Some(j) => j, None => break },
            changed = next_ack(&mut w.ack) => {
                w.on_ack(changed);
                continue;
            }
        };
        if w.fenced(&job) || !w.sink_for(&job).await {
            continue;
        }
        match job {
            SinkJob::Open { span, start_ts } => w.open(span, start_ts).await,
            SinkJob::Rows {
                batches,
                rows,
                bytes,
                open,
            } => w.write_rows(batches, rows, bytes, open).await,
            SinkJob::Ddl { ddl, tables } => w.write_ddl(ddl, tables).await,
            SinkJob::Flush => w.flush().await,
            SinkJob::Close => {
                w.close(&mut rx).await;
                return;
            }
        }
    }
    w.send(None, 0, 0, 0, true);
}

/// The next ack the sink's ack channel carries (never, while the dispatcher is not open).
async fn next_ack(
    ack: &mut Option<sluice_sink::AckReceiver>,
) -> Result<Ts, tokio::sync::watch::error::RecvError> {
    match ack.as_mut() {
        Some(a) => a.changed().await.map(|_| *a.borrow_and_update()),
        None => std::future::pending().await,
    }
}

impl Worker {
    fn send(
        &self,
        input: Option<Input>,
        done_rows: usize,
        done_bytes: usize,
        written_rows: usize,
        finished: bool,
    ) {
        let _ = self.report.send(SinkReport {
            input,
            cf: self.cf.clone(),
            id: self.id,
            done_rows,
            done_bytes,
            written_rows,
            row_lags: Vec::new(),
            finished,
        });
    }

    /// Reports the sink's acknowledgement of everything up to `ts`, with the lags of the rows it
    /// covers.
    fn send_flushed(&mut self, ts: Ts) {
        let row_lags = self.lag.acked(ts, crate::upstream::now_ms());
        let _ = self.report.send(SinkReport {
            input: Some(self.flushed(ts)),
            cf: self.cf.clone(),
            id: self.id,
            done_rows: 0,
            done_bytes: 0,
            written_rows: 0,
            row_lags,
            finished: false,
        });
    }

    fn flushed(&self, ts: Ts) -> Input {
        Input::SinkFlushed {
            cf: self.cf.clone(),
            id: self.id,
            ts,
        }
    }

    /// The `SinkError` input for `e`, unless it is the failure of this session reported already.
    fn err(&mut self, e: &sluice_sink::SinkError) -> Option<Input> {
        let again = std::mem::replace(&mut self.reported, true);
        if again && matches!(e, sluice_sink::SinkError::Earlier(_)) {
            return None;
        }
        Some(Input::SinkError {
            cf: self.cf.clone(),
            id: self.id,
            retryable: e.is_retryable(),
            table_only: e.is_table_refusal(),
            message: error_message(&self.cf, e),
        })
    }

    /// The ack channel woke up. A failure wakes it too (ack unchanged): report it now, whoever
    /// ran the failed flush (the sink's own periodic flush has no caller to tell).
    fn on_ack(&mut self, changed: Result<Ts, tokio::sync::watch::error::RecvError>) {
        match (changed, self.sink.as_ref().and_then(|s| s.failure(self.id))) {
            (Ok(ts), Some(e)) => {
                // What was acknowledged before the failure stays true.
                self.send_flushed(ts);
                self.lag.clear();
                if let Some(input) = self.err(&e) {
                    self.send(Some(input), 0, 0, 0, false);
                }
            }
            (Ok(ts), None) => self.send_flushed(ts),
            (Err(_), _) => self.ack = None,
        }
    }

    /// Fencing: a worker of an incarnation whose lease is not fresh writes nothing more. Whether
    /// `job` is dropped for that (its rows accounted).
    fn fenced(&self, job: &SinkJob) -> bool {
        if matches!(job, SinkJob::Close) || self.registry.may_write(self.incarnation) {
            return false;
        }
        if let SinkJob::Rows { rows, bytes, .. } = job {
            self.send(None, *rows, *bytes, 0, false);
        }
        tracing::warn!(changefeed = %self.cf, dispatcher = ?self.id, "lease not fresh: sink call dropped (fenced)");
        true
    }

    /// The sink, opened on first use (a close needs none). False when it cannot be opened: the
    /// error is reported and `job` dropped (its rows accounted).
    async fn sink_for(&mut self, job: &SinkJob) -> bool {
        if self.sink.is_some() || matches!(job, SinkJob::Close) {
            return true;
        }
        match self.registry.get(&self.cf, &self.uri).await {
            Ok(s) => {
                self.sink = Some(s);
                true
            }
            Err(e) => {
                let (r, b) = match job {
                    SinkJob::Rows { rows, bytes, .. } => (*rows, *bytes),
                    _ => (0, 0),
                };
                tracing::warn!(changefeed = %self.cf, "cannot open sink: {}", scrub(&e.to_string()));
                // Not a session yet: every failed attempt to open counts.
                self.reported = false;
                let input = self.err(&e);
                self.send(input, r, b, 0, false);
                false
            }
        }
    }

    async fn open(&mut self, span: Span, start_ts: Ts) {
        if self.opened {
            return;
        }
        let Some(s) = &self.sink else { return };
        let r = s.open(self.id, span, start_ts).await;
        match r {
            Ok(a) => {
                self.ack = Some(a);
                self.opened = true;
            }
            Err(e) => {
                let input = self.err(&e);
                self.send(input, 0, 0, 0, false);
            }
        }
    }

    /// Writes the batches in order up to the first error; the rows are accounted either way.
    async fn write_rows(&mut self, batches: Vec<RowBatch>, rows: usize, bytes: usize, open: bool) {
        let Some(s) = &self.sink else {
            self.send(None, rows, bytes, 0, false);
            return;
        };
        let mut failed = None;
        self.lag.written(&batches);
        let last = batches.len().saturating_sub(1);
        for (i, b) in batches.into_iter().enumerate() {
            let r = if open && i == last {
                s.write_part(self.id, b).await
            } else {
                s.write_rows(self.id, b).await
            };
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        match failed {
            None => self.send(None, rows, bytes, rows, false),
            Some(e) => {
                self.lag.clear();
                let input = self.err(&e);
                self.send(input, rows, bytes, 0, false);
            }
        }
    }

    async fn write_ddl(&mut self, ddl: DdlEvent, tables: Vec<Arc<TableSchema>>) {
        let Some(s) = &self.sink else { return };
        let r = s.write_ddl(self.id, ddl, tables).await;
        self.report_ack(r);
    }

    async fn flush(&mut self) {
        let Some(s) = &self.sink else { return };
        let r = s.flush(self.id).await;
        self.report_ack(r);
    }

    /// Reports what a DDL or a flush returned: the sink's ack, or its error.
    fn report_ack(&mut self, r: Result<Ts, sluice_sink::SinkError>) {
        match r {
            Ok(ts) => self.send_flushed(ts),
            Err(e) => {
                self.lag.clear();
                let input = self.err(&e);
                self.send(input, 0, 0, 0, false);
            }
        }
    }

    /// Closes the dispatcher in the sink (if it was opened), accounts the jobs left behind (their
    /// rows are never written) and reports `SinkClosed`.
    async fn close(&mut self, rx: &mut mpsc::UnboundedReceiver<SinkJob>) {
        if let (Some(s), true) = (&self.sink, self.opened) {
            let rep = s.close(self.id).await;
            if let Some(e) = rep.error {
                tracing::warn!(changefeed = %self.cf, dispatcher = ?self.id, "closing: {}", scrub(&e.to_string()));
            }
        }
        // Drain what is left (rows are only accounted, never written).
        rx.close();
        while let Ok(j) = rx.try_recv() {
            if let SinkJob::Rows { rows, bytes, .. } = j {
                self.send(None, rows, bytes, 0, false);
            }
        }
        self.send(
            Some(Input::SinkClosed {
                cf: self.cf.clone(),
                id: self.id,
            }),
            0,
            0,
            0,
            true,
        );
    }
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
