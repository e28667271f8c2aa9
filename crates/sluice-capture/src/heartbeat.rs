//! The heartbeat table: each node writes its row of `sluice.heartbeat` in the upstream every
//! interval (the server's `heartbeat-interval-ms`, on by default where the upstream user may
//! write it) with the upstream's own clock (`NOW(6)`, in ms), so an idle upstream still produces
//! transactions (the resolved ts keeps advancing by commit ts), commit times get millisecond
//! precision ([`crate::commit_clock`]) and the capture lag can be measured in milliseconds.
//!
//! Invariants: heartbeat rows never reach changefeeds (capture turns them into an empty
//! transaction and a lag sample, see [`crate::capture`]); each node writes its own row (keyed
//! by `node`), so several nodes do not contend; a failed write is retried at the next tick.

use crate::error::{CaptureError, Result};
use mysql_async::prelude::Queryable;
use std::time::Duration;

pub const HEARTBEAT_DB: &str = "sluice";
pub const HEARTBEAT_TABLE: &str = "heartbeat";
/// Default interval between heartbeat writes (the precision of commit times).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// The heartbeat statement: the upstream's clock in ms.
fn upsert_sql() -> String {
    format!(
        "INSERT INTO `{HEARTBEAT_DB}`.`{HEARTBEAT_TABLE}` (node, ts_ms) \
         VALUES (?, CAST(ROUND(UNIX_TIMESTAMP(NOW(6)) * 1000) AS UNSIGNED)) \
         ON DUPLICATE KEY UPDATE ts_ms = VALUES(ts_ms)"
    )
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Creates `sluice.heartbeat` if it does not exist.
pub async fn ensure_table(conn: &mut mysql_async::Conn) -> Result<()> {
    conn.query_drop(format!("CREATE DATABASE IF NOT EXISTS `{HEARTBEAT_DB}`"))
        .await
        .map_err(CaptureError::from_mysql)?;
    conn.query_drop(format!(
        "CREATE TABLE IF NOT EXISTS `{HEARTBEAT_DB}`.`{HEARTBEAT_TABLE}` \
         (node VARCHAR(64) NOT NULL PRIMARY KEY, ts_ms BIGINT UNSIGNED NOT NULL)"
    ))
    .await
    .map_err(CaptureError::from_mysql)
}

/// Writes the heartbeat row of `node` once (creating the table if needed): one transaction.
pub async fn write_once(conn: &mut mysql_async::Conn, node: &str) -> Result<()> {
    ensure_table(conn).await?;
    conn.exec_drop(upsert_sql(), (node,))
        .await
        .map_err(CaptureError::from_mysql)
}

/// Writes the heartbeat row of `node` once, creating the table only when the write finds none
/// (one statement where it exists: a snapshot window read's low watermark).
pub async fn touch(conn: &mut mysql_async::Conn, node: &str) -> Result<()> {
    match conn.exec_drop(upsert_sql(), (node,)).await {
        Ok(()) => Ok(()),
        Err(_) => write_once(conn, node).await,
    }
}

/// Writes the heartbeat row of `node` every `interval` until `stop` becomes true. Lost
/// connections and other retryable errors are retried at the next tick; a fatal one (a bad URL,
/// no privilege to create or write `sluice.heartbeat`: a read-only upstream user) ends it with
/// that error, so the caller can say heartbeats are off and why.
pub async fn run(
    url: &str,
    node: &str,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let opts = mysql_async::Opts::from_url(url)
        .map_err(|e| CaptureError::Connection(format!("bad url: {e}")))?;
    let mut conn: Option<mysql_async::Conn> = None;
    let mut created = false;
    while !*stop.borrow() {
        if conn.is_none() {
            conn = mysql_async::Conn::new(opts.clone()).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            let mut w = match created {
                true => Ok(()),
                false => ensure_table(c).await,
            };
            created = w.is_ok();
            if w.is_ok() {
                w = c
                    .exec_drop(upsert_sql(), (node,))
                    .await
                    .map_err(CaptureError::from_mysql);
            }
            match w {
                Ok(()) => {}
                Err(e) if e.is_retryable() => conn = None,
                Err(e) => return Err(e),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.changed() => {}
        }
    }
    Ok(())
}
