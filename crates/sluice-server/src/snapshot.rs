//! Snapshot chunk reads for the feed (`Effect::ReadChunk`): the shell reads one chunk of a
//! dispatcher's table from the upstream in a consistent snapshot
//! ([`sluice_capture::snapshot_read`]), on a task of its own, and hands the rows to the feed
//! ([`sluice_control::feed::Feed::on_chunk`]), which puts them into the span's stream at the
//! snapshot's binlog position.
//!
//! Invariants:
//! - a chunk goes to the feed only once capture has passed its position, decoded with the
//!   table's version at that position; a DDL of the table between the version the read used and
//!   the position makes the read fail (the dispatcher reads again), so a chunk's rows always have
//!   the columns of the version they are written under;
//! - only rows of the dispatcher's span are handed on; a span of a table with integer keys (key
//!   order = SQL order) reads from its first key and ends at its last, other split tables' spans
//!   each read the table in key order and keep their own keys;
//! - at most [`MAX_CHUNK_WAITS`] read chunks wait for capture; beyond, the read fails and is
//!   retried (bounded memory whatever capture's lag).

use crate::shell::Shell;
use sluice_capture::snapshot_read::{read_chunk, SnapshotChunk};
use sluice_control::feed::{chunk_ts, ChunkConsistency, ChunkRead};
use sluice_control::io::{ChunkAsk, ChunkProbe, Input};
use sluice_types::{ChangefeedId, DispatcherId, RowEvent, RowKind, Span, TableSchema, Ts};
use std::time::{SystemTime, UNIX_EPOCH};

/// At most this many chunks read wait for capture to reach their position.
pub const MAX_CHUNK_WAITS: usize = 64;
/// After this many chunks of one dispatcher read at the same binlog position, the next read
/// first writes the node's row of the heartbeat table (`sluice.heartbeat`), if it may.
pub const NUDGE_AFTER_READS: u32 = (sluice_control::feed::CHUNK_TS_SLOTS / 2) as u32;

/// A snapshot task's answer, back on the shell's task.
pub enum SnapshotDone {
    Chunk(ChunkDone),
    /// `Effect::ProbeChunks`, answered (`Input::ChunkBounds`).
    Bounds(Input),
}

/// A chunk read finished (or failed), back on the shell's task.
pub struct ChunkDone {
    pub cf: ChangefeedId,
    pub id: DispatcherId,
    /// The read it answers (`Effect::ReadChunk::read`).
    pub read_id: u64,
    pub span: Span,
    /// The table version the read selected by.
    pub version: Ts,
    /// When the read was asked for (the timings in the debug log).
    pub asked: std::time::Instant,
    /// When the read came back.
    pub read: std::time::Instant,
    pub result: Result<SnapshotChunk, String>,
}

impl Shell {
    /// The connections snapshot reads share (made on first use; at most
    /// [`sluice_control::config::MAX_CONCURRENT_CHUNK_READS`] per changefeed are busy at once).
    fn snapshot_pool(&mut self) -> Result<mysql_async::Pool, String> {
        if let Some(p) = self.snapshot_pool_slot() {
            return Ok(p.clone());
        }
        let opts = mysql_async::Opts::from_url(self.upstream_url())
            .map_err(|e| crate::mask::scrub(&format!("upstream URL: {e}")))?;
        let constraints = mysql_async::PoolConstraints::new(0, 16).unwrap_or_default();
        let opts = mysql_async::OptsBuilder::from_opts(opts)
            // A read sets what it needs each time; kept sessions keep their prepared
            // statements (one round trip less per chunk).
            .pool_opts(
                mysql_async::PoolOpts::default()
                    .with_constraints(constraints)
                    .with_reset_connection(false),
            );
        let pool = mysql_async::Pool::new(opts);
        self.set_snapshot_pool(pool.clone());
        Ok(pool)
    }

    /// The table of `span` as capture knows it now, or why not.
    fn snapshot_table(&self, span: &Span) -> Result<TableSchema, String> {
        let at = self.capture().captured();
        let history = self.capture().history();
        history
            .table_by_id_at(span.table, at)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "table {} is not in the schema history at ts {at} (dropped?)",
                    span.table.0
                )
            })
    }

    /// `Effect::ProbeChunks`: the bounds found on a task; the answer comes back as
    /// `Input::ChunkBounds`.
    pub(crate) fn probe_snapshot_chunks(&mut self, p: ChunkProbe) {
        let tx = self.chunk_sender();
        let (cf, id, probe) = (p.cf.clone(), p.id, p.probe);
        let bounds = move |result| {
            SnapshotDone::Bounds(Input::ChunkBounds {
                cf,
                id,
                probe,
                result,
            })
        };
        let schema = match self.snapshot_table(&p.span) {
            Ok(s) => s,
            Err(why) => return drop(tx.send(bounds(Err(why)))),
        };
        let after = sluice_capture::snapshot_read::read_from(&schema, &p.span, p.after.clone());
        let pool = self.snapshot_pool();
        tokio::spawn(async move {
            let result = async {
                let mut conn = pool?.get_conn().await.map_err(|e| e.to_string())?;
                let n = (p.rows, p.count);
                sluice_capture::snapshot_read::chunk_bounds(
                    &mut conn,
                    &schema,
                    &p.span,
                    after.as_deref(),
                    n,
                )
                .await
                .map_err(|e| e.to_string())
            }
            .await
            .map_err(|e| {
                crate::mask::scrub(&format!(
                    "snapshot: finding chunk bounds of {}: {e}",
                    schema.qualified_name()
                ))
            });
            let _ = tx.send(bounds(result));
        });
    }

    /// `Effect::ReadChunk`: read on a task; the answer comes back as a [`ChunkDone`].
    pub(crate) fn read_snapshot_chunk(&mut self, r: ChunkAsk) {
        let ChunkAsk {
            cf,
            id,
            read: read_id,
            span,
            after,
            upto,
            limit,
            ..
        } = r;
        let schema = match self.snapshot_table(&span) {
            Ok(s) => s,
            Err(why) => return self.chunk_to_feed(&cf, id, read_id, Err(why)),
        };
        // A span that starts inside its table reads from its first key (or its cursor, if that
        // is later) where the key order is the SQL order (integer keys); elsewhere each span
        // reads the table from its start (or its cursor) and keeps its own rows.
        let after = sluice_capture::snapshot_read::read_from(&schema, &span, after);
        let tx = self.chunk_sender();
        let pool = self.snapshot_pool();
        // An upstream that wrote nothing since many chunks of this span: a heartbeat write moves
        // its position, so the next chunks have room in the stream (`feed::CHUNK_TS_SLOTS`).
        let nudge = self.same_position_reads(&cf, id) >= NUDGE_AFTER_READS;
        let node = self.node_id().to_string();
        let how = self.snapshot_read();
        let asked = std::time::Instant::now();
        self.chunk_read_started();
        tokio::spawn(async move {
            if nudge {
                nudge_upstream(&pool, &node).await;
            }
            let range = (after.as_deref(), upto.as_deref());
            let result = read(pool, &schema, range, limit, (how, &node)).await;
            let _ = tx.send(SnapshotDone::Chunk(ChunkDone {
                cf,
                id,
                read_id,
                span,
                version: schema.version,
                asked,
                read: std::time::Instant::now(),
                result,
            }));
        });
    }

    /// A chunk read came back: to the feed once capture has its position.
    pub(crate) fn on_chunk_done(&mut self, d: ChunkDone) {
        if let Ok(c) = &d.result {
            if c.window {
                self.note_window_read(c.watermark_failed.as_deref());
            }
            self.note_chunk_position(&d.cf, d.id, c.position);
            if self.capture().captured() < c.position {
                if self.chunk_waits_len() >= MAX_CHUNK_WAITS {
                    let why = "too many snapshot chunks wait for capture to reach their position; reading again".to_string();
                    return self.chunk_to_feed(&d.cf, d.id, d.read_id, Err(why));
                }
                return self.push_chunk_wait(d);
            }
        }
        let (cf, id, read_id) = (d.cf.clone(), d.id, d.read_id);
        let (asked, read_at) = (d.asked, d.read);
        let window = d.result.as_ref().is_ok_and(|c| c.window);
        let read = self.decode_chunk(d);
        tracing::debug!(
            changefeed = %cf,
            dispatcher = %id,
            rows = read.as_ref().map_or(0, |r| r.rows.len()),
            window,
            read_ms = read_at.duration_since(asked).as_millis() as u64,
            capture_wait_ms = read_at.elapsed().as_millis() as u64,
            "snapshot chunk read"
        );
        self.chunk_to_feed(&cf, id, read_id, read);
    }

    /// The rows of a chunk as the feed takes them, checked against the table's version at the
    /// chunk's position.
    fn decode_chunk(&self, d: ChunkDone) -> Result<ChunkRead<RowEvent>, String> {
        let c = d.result?;
        let history = self.capture().history();
        let table = history.table_by_id_at(d.span.table, c.position);
        let version = table.map(|t| t.version);
        // Integer keys: a row past the span's end ends the span's copy. The rows are in key
        // order there (`exact_key_order`), so one past it means the last one is.
        let past = table.is_some_and(|t| {
            c.rows
                .last()
                .is_some_and(|(_, key)| sluice_capture::snapshot_read::past_span(t, &d.span, key))
        });
        if version != Some(d.version) {
            return Err(format!(
                "table {} changed while its snapshot chunk was read (version {} then {version:?}); reading again",
                d.span.table.0, d.version
            ));
        }
        let ts = chunk_ts(c.position);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut rows = Vec::with_capacity(c.rows.len());
        rows.extend(
            c.rows
                .into_iter()
                .filter(|(_, key)| d.span.contains(key))
                .map(|(vals, key)| RowEvent {
                    table_id: d.span.table,
                    schema_version: d.version,
                    commit_ts: ts,
                    commit_time_ms: now_ms,
                    kind: RowKind::Insert,
                    key,
                    before: None,
                    after: Some(vals),
                    snapshot: true,
                    gtid: None,
                }),
        );
        Ok(ChunkRead {
            position: c.position,
            consistency: match c.window {
                true => ChunkConsistency::Window,
                false => ChunkConsistency::AtPosition,
            },
            rows,
            cursor: c.cursor,
            more: c.more && !past,
        })
    }
}

/// One heartbeat write (a transaction of Sluice's own table, never replicated); a user without
/// the privilege only gets a warning in the log: the copy then waits for the upstream to write.
async fn nudge_upstream(pool: &Result<mysql_async::Pool, String>, node: &str) {
    let r = async {
        let mut c = pool.as_ref()?.get_conn().await.map_err(|e| e.to_string())?;
        sluice_capture::heartbeat::write_once(&mut c, node)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    if let Err(e) = r {
        tracing::warn!(
            "snapshot: the upstream wrote nothing for many chunks and the heartbeat write failed \
             ({}); the copy waits for the upstream to write",
            crate::mask::scrub(&e)
        );
    }
}

async fn read(
    pool: Result<mysql_async::Pool, String>,
    schema: &TableSchema,
    after: (Option<&[u8]>, Option<&[u8]>),
    limit: usize,
    (how, node): (sluice_capture::snapshot_read::SnapshotRead, &str),
) -> Result<SnapshotChunk, String> {
    let mut conn = pool?
        .get_conn()
        .await
        .map_err(|e| crate::mask::scrub(&format!("snapshot read: connecting upstream: {e}")))?;
    read_chunk(&mut conn, schema, after, limit, how, node)
        .await
        .map_err(|e| {
            crate::mask::scrub(&format!(
                "snapshot read of {}: {e}",
                schema.qualified_name()
            ))
        })
}
