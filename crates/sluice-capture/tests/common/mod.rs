#![allow(dead_code)]
//! Helpers shared by the integration tests (real MariaDB via sluice-testkit).

use sluice_capture::binlog::{BinlogReader, ReaderConfig, ReaderEvent, Transaction};
use sluice_capture::BinlogPos;
use std::time::Duration;

pub fn start_pos() -> BinlogPos {
    BinlogPos::new("mysql-bin.000001", 4)
}

pub fn reader(url: &str, server_id: u32, start: BinlogPos) -> BinlogReader {
    let mut cfg = ReaderConfig::new(url, server_id, start);
    cfg.heartbeat = Duration::from_millis(300);
    cfg.backoff_initial = Duration::from_millis(50);
    cfg.backoff_max = Duration::from_millis(500);
    cfg.max_reconnects = Some(200);
    BinlogReader::new(cfg)
}

/// Reads transactions until one satisfies `stop` (inclusive), reassembling chunked ones (their
/// chunks prepended, `chunked_rows` reset). Panics after 60 s.
pub async fn read_until(
    r: &mut BinlogReader,
    mut stop: impl FnMut(&Transaction) -> bool,
) -> Vec<Transaction> {
    let mut out = Vec::new();
    let mut staged = Vec::new();
    let fut = async {
        loop {
            match r.next().await.expect("reader") {
                ReaderEvent::Chunk(c) => {
                    assert_eq!(c.first_seq, staged.len(), "chunks are contiguous");
                    staged.extend(c.rows);
                }
                ReaderEvent::Abort(_) => staged.clear(),
                ReaderEvent::Transaction(mut t) => {
                    assert_eq!(t.chunked_rows, staged.len(), "commit matches its chunks");
                    if !staged.is_empty() {
                        staged.append(&mut t.rows);
                        t.rows = std::mem::take(&mut staged);
                        t.chunked_rows = 0;
                    }
                    let done = stop(&t);
                    out.push(t);
                    if done {
                        break;
                    }
                }
                ReaderEvent::Resolved(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("timed out reading the binlog");
    out
}

/// True when the transaction is the statement containing `needle`.
pub fn is_stmt(t: &Transaction, needle: &str) -> bool {
    t.statement
        .as_ref()
        .is_some_and(|s| s.query.contains(needle))
}
