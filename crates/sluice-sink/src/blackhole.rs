//! The blackhole sink (`blackhole://`): counts rows and DDLs and acknowledges at once, for
//! benchmarks and tests of everything upstream of a sink.
//!
//! Invariant: it keeps nothing but counters, so a write is "durable" as soon as it is accepted;
//! counting is its write, so the write fence is checked before rows, DDLs and checkpoints are
//! counted.

use crate::error::Result;
use crate::fence::BoundFence;
use crate::runner::{Backend, Runner, WriterSpec};
use crate::RowBatch;
use async_trait::async_trait;
use sluice_types::{DdlEvent, TableSchema, Ts};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the ticker raises the acks to what was counted.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);

#[derive(Default)]
pub struct Counters {
    pub rows: AtomicU64,
    pub ddls: AtomicU64,
    pub checkpoint: AtomicU64,
}

pub struct Blackhole {
    counters: Arc<Counters>,
}

#[async_trait]
impl Backend for Blackhole {
    type Writer = ();
    fn new_writer(&self, _: &WriterSpec<'_>) -> Result<()> {
        Ok(())
    }
    async fn buffer(&self, _: &mut (), batch: RowBatch, fence: &BoundFence) -> Result<bool> {
        fence.check("count rows")?;
        self.counters
            .rows
            .fetch_add(batch.rows.len() as u64, Ordering::Relaxed);
        Ok(false)
    }
    fn has_buffered(&self, _: &()) -> bool {
        false
    }
    async fn flush(&self, _: &mut (), _: &BoundFence) -> Result<()> {
        Ok(())
    }
    async fn ddl(
        &self,
        _: &mut (),
        _: &DdlEvent,
        _: &[Arc<TableSchema>],
        fence: &BoundFence,
    ) -> Result<()> {
        fence.check("count DDL")?;
        self.counters.ddls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    async fn checkpoint(&self, ts: Ts, fence: &BoundFence) -> Result<()> {
        fence.check("record checkpoint")?;
        self.counters.checkpoint.fetch_max(ts, Ordering::Relaxed);
        Ok(())
    }
    /// Nothing reaches a downstream: there is nothing a replay could undo.
    async fn applied_ddls(&self, _: Ts) -> Result<Vec<crate::DdlRecord>> {
        Ok(Vec::new())
    }
    async fn discard(&self, _: &mut ()) {}
    /// The ack rises with a flush, as for every sink; the dispatcher asks for one only at a DDL,
    /// so without the ticker a changefeed's checkpoint would stop at its first rows.
    fn flush_interval(&self) -> Option<Duration> {
        Some(FLUSH_INTERVAL)
    }
}

pub type BlackholeSink = Runner<Blackhole>;

impl Runner<Blackhole> {
    pub fn new_blackhole() -> BlackholeSink {
        Runner::with_backend(Blackhole {
            counters: Arc::new(Counters::default()),
        })
    }
    pub fn counters(&self) -> Arc<Counters> {
        self.backend().counters.clone()
    }
}

/// Builds the sink `blackhole://` names (it takes no parameters; `fence`: checked before
/// anything is counted).
pub fn build(fence: Option<crate::WriteFence>) -> Result<Arc<dyn crate::Sink>> {
    let s = BlackholeSink::new_blackhole();
    if let Some(f) = fence {
        s.set_fence(f)?;
    }
    Ok(Arc::new(s))
}
