//! The MySQL sink's configuration: the `mysql://` URI and its parameters (TiCDC's names where
//! it has them), parsed into a [`MysqlConfig`] that checks, prepares and builds the sink.
//!
//! Invariant: every parameter is validated here; a bad one is [`SinkError::InvalidUri`] naming
//! it (the password never printed).

use crate::error::{Result, SinkError};
use crate::fence::WriteFence;
use crate::uri::{Params, Secret};
use crate::{Sink, WriteHolds};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Defaults of the MySQL sink.
pub const DEFAULT_WORKER_COUNT: usize = 16;
/// Default `timeout` and `read-timeout` of the MySQL sink (TiCDC's: 2 minutes).
pub const DEFAULT_DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_WORKER_COUNT: usize = 1024;
/// Default `max-txn-row`: 512, not TiCDC's 256: against MariaDB the per-transaction cost
/// dominates small transactions (docs/sinks.md, Benchmark).
pub const DEFAULT_MAX_TXN_ROW: usize = 512;
pub const MAX_MAX_TXN_ROW: usize = 65_536;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MysqlConfig {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Secret,
    /// `worker-count` (default 16): parallel connections; rows are routed to workers by key.
    pub worker_count: usize,
    /// `max-txn-row` (default 512; TiCDC's is 256): rows per downstream transaction (and per
    /// multi-row statement, within the 65,535 placeholders a statement may bind).
    pub max_txn_row: usize,
    /// `safe-mode` (default true in Sluice): inserts and updates are written as `REPLACE`, so a
    /// replay from the checkpoint converges to the upstream state.
    pub safe_mode: bool,
    /// `transaction-atomicity` (`none` | `table`; default none): with `table`, the rows of one
    /// upstream transaction in one span are applied in one downstream transaction (on one worker).
    pub table_atomicity: bool,
    /// `force-replicate` (default false): accept tables without a primary or not-null unique key
    /// (replays may then duplicate rows; see docs/sinks.md).
    pub force_replicate: bool,
    /// `downstream-fence` (default true): every transaction of rows checks, inside the
    /// downstream, that its dispatcher still holds its span ([`crate::mysql::fence`]), so a
    /// paused node's transaction cannot commit behind its successor's writes.
    pub downstream_fence: bool,
    /// `max-retries` (default 8) and the first backoff (`retry-backoff`, default 100ms, doubling,
    /// capped at 10s) for retryable downstream errors.
    pub max_retries: u32,
    pub retry_backoff: Duration,
    /// `timeout` (default 2m, TiCDC's name): the longest wait for a downstream connection.
    pub timeout: Duration,
    /// `read-timeout` (default 2m, TiCDC's name): the longest a downstream statement or
    /// transaction may go unanswered; it is then killed on the server (`KILL CONNECTION`, so it
    /// cannot commit later, behind newer writes) and retried like any retryable error.
    pub read_timeout: Duration,
}

impl MysqlConfig {
    /// The config a `mysql://` URI names (`p`: its parameters, each taken once).
    pub(crate) fn from_uri(url: &Url, p: &mut Params<'_>, masked: &str) -> Result<MysqlConfig> {
        let host = url.host_str().unwrap_or_default().to_string();
        if host.is_empty() {
            return Err(SinkError::invalid_uri(
                &masked,
                "missing host: expected mysql://user:pass@host:port/",
            ));
        }
        let user = if url.username().is_empty() {
            "root".to_string()
        } else {
            decode(url.username())
        };
        Ok(MysqlConfig {
            host,
            port: url.port().unwrap_or(3306),
            user,
            password: Secret::new(url.password().map(decode).unwrap_or_default()),
            worker_count: p.uint(
                "worker-count",
                DEFAULT_WORKER_COUNT as u64,
                1,
                MAX_WORKER_COUNT as u64,
            )? as usize,
            max_txn_row: p.uint(
                "max-txn-row",
                DEFAULT_MAX_TXN_ROW as u64,
                1,
                MAX_MAX_TXN_ROW as u64,
            )? as usize,
            safe_mode: p.bool("safe-mode", true)?,
            table_atomicity: match p.take("transaction-atomicity").as_deref() {
                None | Some("none") => false,
                Some("table") => true,
                Some(other) => {
                    return Err(p.bad("transaction-atomicity", other, "expected none or table"))
                }
            },
            force_replicate: p.bool("force-replicate", false)?,
            downstream_fence: p.bool("downstream-fence", true)?,
            max_retries: p.uint("max-retries", 8, 0, 1000)? as u32,
            retry_backoff: p.duration(
                "retry-backoff",
                Duration::from_millis(100),
                Duration::from_millis(1),
                Duration::from_secs(60),
            )?,
            timeout: p.duration(
                "timeout",
                DEFAULT_DOWNSTREAM_TIMEOUT,
                Duration::from_millis(100),
                Duration::from_secs(3600),
            )?,
            read_timeout: p.duration(
                "read-timeout",
                DEFAULT_DOWNSTREAM_TIMEOUT,
                Duration::from_millis(100),
                Duration::from_secs(24 * 3600),
            )?,
        })
    }

    /// Connects the sink of `changefeed` (`fence`: every transaction checks it first; `holds`:
    /// the node's debug holds of transactions, if any).
    pub async fn build(
        self,
        changefeed: &str,
        fence: Option<WriteFence>,
        holds: Option<Arc<WriteHolds>>,
    ) -> Result<Arc<dyn Sink>> {
        let s = super::MysqlSink::connect_with_holds(changefeed, self, holds.unwrap_or_default())
            .await?;
        if let Some(f) = fence {
            s.set_fence(f)?;
        }
        Ok(Arc::new(s))
    }

    /// A changefeed created now with id `changefeed`: what the downstream recorded for a
    /// removed changefeed of that id (`ddl_ts`, checkpoint, fence rows) is forgotten.
    pub async fn prepare(self, changefeed: &str) -> Result<()> {
        let s = super::MysqlSink::connect_for(changefeed, self).await?;
        s.forget_records().await
    }
}

fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}
