//! The opt-in heartbeat table: Sluice writes `sluice.heartbeat` in the upstream every few
//! hundred milliseconds, so an idle upstream still produces transactions (the resolved ts keeps
//! advancing by commit ts) and the capture lag can be measured in milliseconds.
//!
//! Invariants: heartbeat rows never reach changefeeds (capture turns them into an empty
//! transaction and a lag sample, see [`crate::capture`]); each node writes its own row (keyed
//! by `node`), so several nodes do not contend; a failed write is retried at the next tick.

use crate::error::{CaptureError, Result};
use mysql_async::prelude::Queryable;
use std::time::Duration;

pub const HEARTBEAT_DB: &str = "sluice";
pub const HEARTBEAT_TABLE: &str = "heartbeat";
/// Default interval between heartbeat writes.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(250);

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
    conn.exec_drop(
        format!(
            "INSERT INTO `{HEARTBEAT_DB}`.`{HEARTBEAT_TABLE}` (node, ts_ms) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE ts_ms = VALUES(ts_ms)"
        ),
        (node, now_ms()),
    )
    .await
    .map_err(CaptureError::from_mysql)
}

/// Writes the heartbeat row of `node` every `interval` until `stop` becomes true. Connection
/// errors are retried at the next tick; only a bad url ends it early.
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
    loop {
        if *stop.borrow() {
            break;
        }
        if conn.is_none() {
            conn = mysql_async::Conn::new(opts.clone()).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            let ok = if !created {
                ensure_table(c).await.is_ok()
            } else {
                true
            };
            created = ok;
            let w = c
                .exec_drop(
                    format!(
                        "INSERT INTO `{HEARTBEAT_DB}`.`{HEARTBEAT_TABLE}` (node, ts_ms) VALUES (?, ?) \
                         ON DUPLICATE KEY UPDATE ts_ms = VALUES(ts_ms)"
                    ),
                    (node, now_ms()),
                )
                .await;
            if !ok || w.is_err() {
                conn = None;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.changed() => {}
        }
    }
    Ok(())
}
