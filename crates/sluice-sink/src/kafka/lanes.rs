//! A batch's row messages encoded on several lanes at once: a large batch is cut into
//! consecutive pieces, one per lane (at most one lane per core), each encoded on a thread of the
//! blocking pool, and the pieces come back in the batch's order, so the writer hands each to
//! the client while the later ones are still being encoded. Encoding every row of a table on its
//! dispatcher's one sink task was the serial stage of a catch-up into Kafka
//! (docs/figures/kafka-bench-33ee8e4.md); handing messages to the client stays on that task, in
//! order, whatever the partitioning (TiCDC's default puts a whole table in one partition).
//!
//! Invariants:
//! - the messages come back in the batch's order, piece after piece ([`Pieces::next`]), so
//!   every partition's messages, and every key's, keep the order of the upstream's commits;
//! - a batch of fewer than two [`ROWS_PER_LANE`] rows, or one that finds fewer than two of the
//!   process's lane permits free (one per core, [`permits`]), is one piece, encoded on the
//!   caller's task when nothing in it can block (no claim-check): at most one lane per core
//!   runs at once however many dispatchers catch up;
//! - every lane started for a batch is awaited before the batch's result is returned, failure
//!   or not (the first failure in batch order is the result).

use super::avro::SchemaIds;
use super::encode::Encoder;
use super::{Message, VersionParts};
use crate::error::{Result, SinkError};
use sluice_types::{RowEvent, TableSchema};
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// A batch gets one lane per this many rows at most (a smaller one is not worth a handoff).
pub const ROWS_PER_LANE: usize = 512;
/// At most this many lanes per batch, whatever the core count.
pub const MAX_LANES: usize = 8;

/// What goes out, in the batch's order.
pub(crate) enum Item {
    /// A row to encode into `partition`.
    Row { partition: i32, row: RowEvent },
    /// A message built already (the Simple protocol's BOOTSTRAP).
    Ready(Message),
}

/// The table version and topic a batch's rows share.
pub(crate) struct Version {
    pub(crate) schema: Arc<TableSchema>,
    pub(crate) topic: String,
    pub(crate) avro: Option<SchemaIds>,
    pub(crate) parts: Arc<VersionParts>,
}

/// The machine's cores (1 when it cannot say).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How many lanes a batch of `items` gets.
fn lanes_for(items: usize) -> usize {
    (items / ROWS_PER_LANE).min(cores()).clamp(1, MAX_LANES)
}

/// `items` cut into `lanes` consecutive pieces of nearly equal size, in order.
fn cut(mut items: Vec<Item>, lanes: usize) -> Vec<Vec<Item>> {
    let size = items.len().div_ceil(lanes.max(1)).max(1);
    let mut pieces = Vec::with_capacity(lanes);
    while items.len() > size {
        let rest = items.split_off(size);
        pieces.push(std::mem::replace(&mut items, rest));
    }
    pieces.push(items);
    pieces
}

/// A batch's pieces being encoded, handed back in order.
pub(crate) enum Pieces {
    /// Encoded on the caller's task already.
    Done(Option<Result<Vec<Message>>>),
    /// Lanes of the blocking pool, oldest piece first.
    Lanes(VecDeque<JoinHandle<Result<Vec<Message>>>>),
}

/// Lane permits of the whole process: at most one lane per core runs at once, over every
/// writer of every sink; a batch that finds none free is encoded as before, on its own task.
fn permits() -> &'static Arc<Semaphore> {
    static PERMITS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    PERMITS.get_or_init(|| Arc::new(Semaphore::new(cores().min(MAX_LANES))))
}

/// Up to `want` free lane permits (none waited for).
fn take_permits(want: usize) -> Vec<OwnedSemaphorePermit> {
    std::iter::from_fn(|| permits().clone().try_acquire_owned().ok())
        .take(want)
        .collect()
}

impl Pieces {
    /// Starts encoding `items` of table version `v`.
    pub(crate) fn start(enc: &Arc<Encoder>, v: Arc<Version>, items: Vec<Item>) -> Pieces {
        let rt = tokio::runtime::Handle::current();
        let want = lanes_for(items.len());
        let granted = if want > 1 {
            take_permits(want)
        } else {
            Vec::new()
        };
        if granted.len() < 2 && enc.claim.is_none() {
            return Pieces::Done(Some(encode(enc, &v, items, &rt)));
        }
        let lanes = granted.len().max(1);
        let mut granted = granted.into_iter();
        let running = cut(items, lanes)
            .into_iter()
            .map(|piece| {
                let (enc, v, rt, permit) = (enc.clone(), v.clone(), rt.clone(), granted.next());
                tokio::task::spawn_blocking(move || {
                    let _held = permit;
                    encode(&enc, &v, piece, &rt)
                })
            })
            .collect();
        Pieces::Lanes(running)
    }

    /// The next piece's messages, in the batch's order; `None` after the last.
    pub(crate) async fn next(&mut self) -> Option<Result<Vec<Message>>> {
        match self {
            Pieces::Done(piece) => piece.take(),
            Pieces::Lanes(running) => {
                let lane = running.pop_front()?;
                Some(lane.await.unwrap_or_else(|e| Err(lane_panicked(&e))))
            }
        }
    }

    /// Waits for every lane still running (after a failure: none outlives its batch).
    pub(crate) async fn finish(&mut self) {
        while self.next().await.is_some() {}
    }
}

fn lane_panicked(e: &tokio::task::JoinError) -> SinkError {
    SinkError::Broker {
        what: "encoding a batch of rows".into(),
        reason: format!("a lane stopped: {e}"),
        retryable: false,
    }
}

/// One piece's messages, in order.
fn encode(
    enc: &Encoder,
    v: &Version,
    items: Vec<Item>,
    rt: &tokio::runtime::Handle,
) -> Result<Vec<Message>> {
    items
        .into_iter()
        .map(|item| match item {
            Item::Ready(m) => Ok(m),
            Item::Row { partition, row } => {
                let at = (v.topic.as_str(), partition);
                enc.message(at, &v.schema, &row, (v.avro, &v.parts), rt)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(seq: u32) -> Item {
        Item::Ready(Message {
            topic: "t".into(),
            partition: 0,
            key: None,
            value: Some(seq.to_be_bytes().to_vec()),
            commit_ts: None,
        })
    }

    fn seq(item: &Item) -> u32 {
        let Item::Ready(m) = item else {
            panic!("a ready message")
        };
        let v = m.value.as_deref().expect("value");
        u32::from_be_bytes(v.try_into().expect("4 bytes"))
    }

    #[test]
    fn pieces_are_the_batch_in_order() {
        for (n, lanes) in [(10_000, 3), (7, 2), (1, 4), (0, 2), (1024, 2)] {
            let pieces = cut((0..n).map(ready).collect(), lanes);
            assert!(pieces.len() <= lanes.max(1), "{n} items in {lanes} lanes");
            let all: Vec<u32> = pieces.iter().flatten().map(seq).collect();
            assert_eq!(
                all,
                (0..n).collect::<Vec<_>>(),
                "{n} items in {lanes} lanes"
            );
            let size = (n as usize).div_ceil(lanes);
            let firsts = &pieces[..pieces.len() - 1];
            assert!(
                firsts.iter().all(|p| p.len() == size),
                "{n} items in {lanes} lanes: uneven"
            );
        }
    }

    #[test]
    fn lane_permits_are_bounded_by_the_cores() {
        let held = take_permits(usize::MAX);
        assert!(!held.is_empty() && held.len() <= cores().min(MAX_LANES));
        assert!(take_permits(2).is_empty(), "every permit is held");
        drop(held);
        assert!(!take_permits(1).is_empty(), "released with their lanes");
    }

    #[test]
    fn a_small_batch_is_one_lane_and_a_large_one_one_per_core() {
        assert_eq!(lanes_for(0), 1);
        assert_eq!(lanes_for(2 * ROWS_PER_LANE - 1), 1);
        assert_eq!(lanes_for(1_000_000), cores().min(MAX_LANES));
    }
}
