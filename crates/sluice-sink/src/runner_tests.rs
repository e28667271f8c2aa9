//! The runner's detached flushes ([`Backend::detach_flush`]), against a backend whose flushes
//! wait at a gate the test opens: rows buffered while a flush is under way are not held up by
//! it, its rows are acknowledged only once it is written, acks rise in order, and a failed one
//! fails the dispatcher.

use super::*;
use crate::testing::{simple_insert, simple_schema};
use sluice_types::RowEvent;
use tokio::sync::Semaphore;

/// Buffers rows; full at two; a detached flush waits for a permit of `gate`, then "writes"
/// (appends to `written`) or fails when `fail` is set.
struct Gated {
    written: Arc<StdMutex<Vec<Ts>>>,
    gate: Arc<Semaphore>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl Backend for Gated {
    type Writer = Vec<RowEvent>;
    fn new_writer(&self, _spec: &WriterSpec<'_>) -> Result<Vec<RowEvent>> {
        Ok(Vec::new())
    }
    async fn buffer(&self, w: &mut Vec<RowEvent>, b: RowBatch, _f: &BoundFence) -> Result<bool> {
        w.extend(b.rows);
        Ok(w.len() >= 2)
    }
    fn has_buffered(&self, w: &Vec<RowEvent>) -> bool {
        !w.is_empty()
    }
    async fn flush(&self, w: &mut Vec<RowEvent>, _f: &BoundFence) -> Result<()> {
        let mut written = self.written.lock().expect("written rows");
        written.extend(w.drain(..).map(|r| r.commit_ts));
        Ok(())
    }
    fn detach_flush(&self, w: &mut Vec<RowEvent>, _f: &BoundFence) -> Option<DetachedFlush> {
        let rows: Vec<Ts> = w.drain(..).map(|r| r.commit_ts).collect();
        let (written, gate, fail) = (self.written.clone(), self.gate.clone(), self.fail.clone());
        Some(Box::pin(async move {
            gate.acquire().await.expect("gate").forget();
            if fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(SinkError::Codec("the store refused the put".into()));
            }
            written.lock().expect("written rows").extend(rows);
            Ok(())
        }))
    }
    async fn ddl(
        &self,
        _w: &mut Vec<RowEvent>,
        _d: &DdlEvent,
        _t: &[Arc<TableSchema>],
        _f: &BoundFence,
    ) -> Result<()> {
        Ok(())
    }
    async fn checkpoint(&self, _ts: Ts, _f: &BoundFence) -> Result<()> {
        Ok(())
    }
    async fn applied_ddls(&self, _after: Ts) -> Result<Vec<crate::DdlRecord>> {
        Ok(Vec::new())
    }
    async fn discard(&self, w: &mut Vec<RowEvent>) {
        w.clear();
    }
    fn flush_interval(&self) -> Option<Duration> {
        None
    }
}

struct Fixture {
    sink: Runner<Gated>,
    written: Arc<StdMutex<Vec<Ts>>>,
    gate: Arc<Semaphore>,
    fail: Arc<std::sync::atomic::AtomicBool>,
    schema: Arc<TableSchema>,
    d: DispatcherId,
}

impl Fixture {
    fn new() -> Fixture {
        let written = Arc::new(StdMutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(0));
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sink = Runner::with_backend(Gated {
            written: written.clone(),
            gate: gate.clone(),
            fail: fail.clone(),
        });
        Fixture {
            sink,
            written,
            gate,
            fail,
            schema: Arc::new(simple_schema("db", "t", 7, 1)),
            d: DispatcherId { epoch: 1, seq: 1 },
        }
    }

    /// Opens the dispatcher over the whole table at start ts 5; its ack receiver.
    async fn open(&self) -> watch::Receiver<Ts> {
        let span = Span::whole_table(self.schema.table_id);
        self.sink.open(self.d, span, 5).await.expect("open")
    }

    /// One row at each of `ts`, in one batch.
    async fn write(&self, ts: &[Ts]) -> Result<()> {
        let rows = ts
            .iter()
            .map(|t| simple_insert(&self.schema, *t, "v", *t, 0))
            .collect();
        let batch = RowBatch {
            schema: self.schema.clone(),
            rows,
        };
        self.sink.write_rows(self.d, batch).await
    }

    fn written(&self) -> Vec<Ts> {
        self.written.lock().expect("written rows").clone()
    }
}

/// Waits (a bounded while) for the ack to reach `ts`.
async fn ack_reaches(ack: &mut watch::Receiver<Ts>, ts: Ts) {
    let reached = tokio::time::timeout(Duration::from_secs(10), ack.wait_for(|a| *a >= ts))
        .await
        .is_ok();
    assert!(reached, "ack stuck at {} below {ts}", *ack.borrow());
}

#[tokio::test]
async fn rows_buffer_while_a_detached_flush_waits_and_are_acked_only_once_written() {
    let f = Fixture::new();
    let mut ack = f.open().await;
    // Full at two rows: a detached flush of 10 and 11 starts and waits at the gate.
    f.write(&[10, 11]).await.expect("first batch");
    // The next row is buffered meanwhile: the write returns while the flush still waits.
    let next = tokio::time::timeout(Duration::from_secs(10), f.write(&[12])).await;
    assert!(next.is_ok(), "a write was held up by the flush under way");
    next.expect("in time").expect("second batch");
    assert!(f.written().is_empty(), "nothing passed the gate yet");
    assert_eq!(
        *ack.borrow(),
        5,
        "rows acknowledged before they were written"
    );
    assert_eq!(f.sink.durable_ts(f.d), Some(5));
    // A resolve does not pass the flush under way either.
    f.sink.resolve(f.d, 20).await.expect("resolve");
    assert_eq!(*ack.borrow(), 5, "a resolve passed rows not yet written");
    // The gate opens: the flush's own rows, and only those, are acknowledged.
    f.gate.add_permits(1);
    ack_reaches(&mut ack, 11).await;
    assert_eq!(f.written(), vec![10, 11]);
    // A flush the caller waits for writes the rest, in order, and acknowledges the resolve.
    let durable = f.sink.flush(f.d).await.expect("flush");
    assert_eq!(durable, 20);
    assert_eq!(f.written(), vec![10, 11, 12]);
}

#[tokio::test]
async fn a_second_full_buffer_waits_for_the_flush_under_way_so_files_keep_their_order() {
    let f = Fixture::new();
    let mut ack = f.open().await;
    f.write(&[10, 11]).await.expect("first batch");
    // Full again while the first flush waits: this write waits for it (one under way).
    let sink_write = f.write(&[12, 13]);
    tokio::pin!(sink_write);
    let early = tokio::time::timeout(Duration::from_millis(200), &mut sink_write).await;
    assert!(early.is_err(), "a second flush started beside the first");
    f.gate.add_permits(2);
    sink_write.await.expect("second batch");
    ack_reaches(&mut ack, 13).await;
    assert_eq!(f.written(), vec![10, 11, 12, 13], "written out of order");
}

#[tokio::test]
async fn a_failed_detached_flush_fails_the_dispatcher_with_its_ack_unchanged() {
    let f = Fixture::new();
    let mut ack = f.open().await;
    f.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    f.write(&[10, 11]).await.expect("first batch");
    f.gate.add_permits(1);
    // The failure wakes the ack receiver (ack unchanged) and is kept for `failure`.
    let woke = tokio::time::timeout(Duration::from_secs(10), ack.changed()).await;
    assert!(woke.is_ok(), "the failure did not wake the ack receiver");
    assert_eq!(*ack.borrow(), 5);
    let failure = f.sink.failure(f.d).expect("failure kept");
    assert!(failure.to_string().contains("refused the put"), "{failure}");
    let later = f
        .write(&[12])
        .await
        .expect_err("a failed dispatcher takes no rows");
    assert!(matches!(later, SinkError::Earlier(_)), "{later:?}");
    assert!(f.written().is_empty());
    let report = f.sink.close(f.d).await;
    assert_eq!(report.durable_ts, 5);
}

#[tokio::test]
async fn close_waits_for_the_flush_under_way_and_reports_it_durable() {
    let f = Fixture::new();
    let _ack = f.open().await;
    f.write(&[10, 11]).await.expect("first batch");
    f.write(&[12]).await.expect("second batch");
    let gate = f.gate.clone();
    let opener = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        gate.add_permits(1);
    });
    let report = f.sink.close(f.d).await;
    opener.await.expect("opener");
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.durable_ts, 12);
    assert_eq!(f.written(), vec![10, 11, 12]);
}
