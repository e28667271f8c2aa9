//! The cloud storage sink: local files (`file://`) and S3 (`s3://`) through `object_store`, in
//! TiCDC's layout ([`layout`]), encoded as csv or canal-json.
//!
//! Invariants:
//! - a dispatcher's rows go into one buffer per data directory (table version, partition with
//!   `enable-partition-separator`, date), in order; buffers are flushed when one reaches
//!   `file-size` or [`MAX_OPEN_BUFFERS`] are open, at every `flush-interval`, on `flush`, before
//!   a DDL and on close, and when the dispatcher writes while the buffers of all the sink's
//!   dispatchers hold more than `max-buffered-bytes` together (each buffer's bytes are counted
//!   in the sink's total from its first row until it is written or dropped);
//! - a row of a partitioned table goes to the directory of the partition the upstream stores it
//!   in ([`Placer::partition_of`], one placer per table version); a row that cannot be placed fails the
//!   changefeed with the reason (never a guess);
//! - a flush writes the table version's schema file (if missing), then each data file, then the
//!   index file; the ack follows only after all of them succeeded;
//! - a flush started by a full buffer or the flush interval runs apart from the dispatcher's
//!   writer ([`Backend::detach_flush`]; the puts are in `writes.rs`): its next rows are encoded
//!   while the files are written, one such flush at a time, and their bytes count as buffered
//!   until written, so `max-buffered-bytes` bounds both;
//! - data files are created with `PutMode::Create`: on S3 the store refuses a second writer of a
//!   name; on local disk `object_store` stages the bytes in `<name>#<n>` and hard-links them into
//!   place, so a reader never sees a partial file and an existing name is never replaced. A refused
//!   name moves the writer to the next index (at most [`MAX_NAME_PROBES`] times);
//! - a dispatcher whose span is not the whole table (or every dispatcher, with
//!   `enable-table-across-nodes` or a write fence) puts its id in its file names, so two
//!   dispatchers never share a name, even across a failover;
//! - with a write fence (a cluster) a dispatcher writes its claim ([`layout::Claim`]: its span
//!   and start ts) into each table directory before its first data file there, so a consumer
//!   can tell a paused predecessor's late file from its successor's (see `consume`);
//! - the root `metadata` checkpoint never moves backwards;
//! - [`probe`] (changefeed create and update) writes only a test object named
//!   [`PROBE_PREFIX`]`-…`, outside the layout's names, and deletes it;
//! - with a write fence ([`crate::fence`]) every put (data, index, schema and `metadata` files)
//!   checks the fence immediately before it: a refused put writes nothing and fails the
//!   dispatcher with [`SinkError::Fenced`], leaving its rows unacknowledged (the buffers are kept
//!   only until the dispatcher is closed).

pub mod config;
pub mod layout;
mod record;
mod writes;

use crate::codec;
use crate::error::{Result, SinkError};
use crate::fence::BoundFence;
use crate::runner::{Backend, DetachedFlush, Runner, WriterSpec};
use crate::uri::{Protocol, StorageConfig, StorageLocation};
use crate::RowBatch;
use async_trait::async_trait;
use layout::TableDefinition;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_partition::Placer;
use sluice_types::{DdlEvent, RowEvent, RowKind, TableSchema, Ts, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many taken names a flush skips before giving up (retryable).
pub const MAX_NAME_PROBES: u64 = 10_000;
/// How many buffers (one per table version, partition and date directory) a dispatcher keeps
/// before a forced flush.
pub const MAX_OPEN_BUFFERS: usize = 64;

/// Builds the object store a storage config names.
pub fn build_store(cfg: &StorageConfig) -> Result<Arc<dyn ObjectStore>> {
    open_store(cfg, false)
}

/// How long [`probe`] waits for a store: a few short tries, not the sink's minutes of retries.
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const PROBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const PROBE_RETRIES: usize = 2;

/// `probe`: short timeouts and few retries (S3 only; local files do not wait).
fn open_store(cfg: &StorageConfig, probe: bool) -> Result<Arc<dyn ObjectStore>> {
    match &cfg.location {
        StorageLocation::Local(p) => {
            std::fs::create_dir_all(p).map_err(|e| SinkError::Store {
                op: "mkdir",
                path: p.display().to_string(),
                retryable: true,
                source: Box::new(e),
            })?;
            let fs = object_store::local::LocalFileSystem::new_with_prefix(p)
                .map_err(|e| SinkError::store("open", p.display().to_string(), e))?
                .with_fsync(true);
            Ok(Arc::new(fs))
        }
        StorageLocation::S3 {
            bucket,
            prefix,
            endpoint,
            region,
            access_key,
            secret_access_key,
            force_path_style,
        } => {
            let mut b = object_store::aws::AmazonS3Builder::new();
            if probe {
                // First: the client options replace those set by the calls below (allow-http).
                b = b
                    .with_retry(object_store::RetryConfig {
                        backoff: Default::default(),
                        max_retries: PROBE_RETRIES,
                        retry_timeout: PROBE_REQUEST_TIMEOUT,
                    })
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_connect_timeout(PROBE_CONNECT_TIMEOUT)
                            .with_timeout(PROBE_REQUEST_TIMEOUT),
                    );
            }
            b = b
                .with_bucket_name(bucket)
                .with_region(region)
                .with_virtual_hosted_style_request(!force_path_style);
            if let Some(ep) = endpoint {
                b = b
                    .with_endpoint(ep)
                    .with_allow_http(ep.starts_with("http://"));
            }
            if let Some(k) = access_key {
                b = b.with_access_key_id(k.expose());
            }
            if let Some(s) = secret_access_key {
                b = b.with_secret_access_key(s.expose());
            }
            let s3 = b
                .build()
                .map_err(|e| SinkError::store("configure", format!("s3://{bucket}"), e))?;
            if prefix.is_empty() {
                Ok(Arc::new(s3))
            } else {
                Ok(Arc::new(object_store::prefix::PrefixStore::new(
                    s3,
                    prefix.as_str(),
                )))
            }
        }
    }
}

/// Where object `name` of a location is, as a user wrote the location, without credentials.
pub fn object_text(location: &StorageLocation, name: &str) -> String {
    match location {
        StorageLocation::Local(p) => format!("file://{}", p.join(name).display()),
        StorageLocation::S3 {
            bucket,
            prefix,
            endpoint,
            ..
        } => {
            let dir = prefix.trim_matches('/');
            let sep = if dir.is_empty() { "" } else { "/" };
            let at = endpoint
                .as_ref()
                .map(|e| format!(" at {e}"))
                .unwrap_or_default();
            format!("s3://{bucket}/{dir}{sep}{name}{at}")
        }
    }
}

/// The names [`probe`] writes start with this (followed by `-<pid>-<nanos>`).
pub const PROBE_PREFIX: &str = "sluice-probe";

/// Checks that a storage location takes writes and gives them back, as changefeed create does
/// before anything is created: writes a small object named [`PROBE_PREFIX`]`-…` at the root of
/// the location, reads it back, then deletes it (a refused delete is ignored: the sink itself
/// never deletes). An unreachable endpoint, wrong credentials, a missing bucket or an unwritable
/// directory fail here, within seconds, with the store's reason.
pub async fn probe(cfg: &StorageConfig) -> Result<()> {
    const WRITE_TEST: &str = "write of a test object to";
    const READ_TEST: &str = "read-back of a test object from";
    let store = open_store(cfg, true)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let name = format!("{PROBE_PREFIX}-{}-{nanos}", std::process::id());
    let shown = object_text(&cfg.location, &name);
    let body: &'static [u8] =
        b"written by sluice to check this location; deleted after the check\n";
    let path = Path::from(name.as_str());
    store
        .put(&path, PutPayload::from_static(body))
        .await
        .map_err(|e| probe_failure(WRITE_TEST, &shown, e))?;
    let got = match store.get(&path).await {
        Ok(r) => r.bytes().await,
        Err(e) => Err(e),
    }
    .map_err(|e| probe_failure(READ_TEST, &shown, e))?;
    let _ = store.delete(&path).await;
    if got.as_ref() != body {
        return Err(SinkError::Store {
            op: READ_TEST,
            path: shown,
            retryable: false,
            source: "the store returned other bytes than were written".into(),
        });
    }
    Ok(())
}

/// A failed probe step, classified as the store's error is, with every cause in its text (the
/// store's own message often ends at "error sending request", before "Connection refused").
fn probe_failure(op: &'static str, shown: &str, e: object_store::Error) -> SinkError {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    let refused = matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    );
    if refused {
        text.push_str(
            ". Fix: check the sink URI's access-key and secret-access-key (or the server's \
             AWS credentials) and that they may write to this bucket and prefix",
        );
    }
    match SinkError::store(op, shown, e) {
        SinkError::Store {
            op,
            path,
            retryable,
            ..
        } => SinkError::Store {
            op,
            path,
            retryable,
            source: text.into(),
        },
        other => other,
    }
}

/// A buffer's bytes, counted in its sink's total until the buffer is written or dropped.
struct Charge {
    total: Arc<AtomicU64>,
    bytes: u64,
}

impl Charge {
    fn new(total: Arc<AtomicU64>) -> Charge {
        Charge { total, bytes: 0 }
    }

    /// Counts the buffer at `bytes` now; returns the sink's total.
    fn set(&mut self, bytes: u64) -> u64 {
        let total = if bytes >= self.bytes {
            self.total.fetch_add(bytes - self.bytes, Ordering::Relaxed) + (bytes - self.bytes)
        } else {
            self.total.fetch_sub(self.bytes - bytes, Ordering::Relaxed) - (self.bytes - bytes)
        };
        self.bytes = bytes;
        total
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

struct Buf {
    schema: Arc<TableSchema>,
    /// Position of the partition in the layout (with `enable-partition-separator`).
    partition: Option<usize>,
    date: Option<String>,
    /// The file's text: full segments, then the one being written (a file of up to
    /// `file-size` is never one growing string: each doubling copied all of it again).
    parts: Vec<bytes::Bytes>,
    parts_len: usize,
    text: String,
    /// canal-json: what every row line of this table version repeats, written once.
    canal: Option<codec::canal::Layout>,
    charge: Charge,
}

/// A buffer's text is kept in segments of about this many bytes.
const SEGMENT_BYTES: usize = 1 << 20;

impl Buf {
    fn len(&self) -> usize {
        self.parts_len + self.text.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The segment to append to: a new one once the current one is full.
    fn segment(&mut self) -> &mut String {
        if self.text.len() >= SEGMENT_BYTES {
            let full = std::mem::replace(
                &mut self.text,
                String::with_capacity(SEGMENT_BYTES + SEGMENT_BYTES / 8),
            );
            self.parts_len += full.len();
            self.parts.push(bytes::Bytes::from(full.into_bytes()));
        }
        &mut self.text
    }

    /// [`Buf::segment`], with the canal-json layout of the buffer's table version.
    fn segment_and_layout(&mut self) -> (&mut String, Option<&codec::canal::Layout>) {
        self.segment();
        (&mut self.text, self.canal.as_ref())
    }

    /// The whole text, as the segments it is (shared by every attempt at a name), and its
    /// charge (kept until the text is written: bytes under way count as buffered).
    fn payload(self) -> (PutPayload, Charge) {
        let mut parts = self.parts;
        if !self.text.is_empty() {
            parts.push(bytes::Bytes::from(self.text.into_bytes()));
        }
        (parts.into_iter().collect(), self.charge)
    }
}

impl Buf {
    fn holds(
        &self,
        schema: &Arc<TableSchema>,
        partition: Option<usize>,
        date: &Option<String>,
    ) -> bool {
        (Arc::ptr_eq(&self.schema, schema)
            || (self.schema.version == schema.version && self.schema.table_id == schema.table_id))
            && self.partition == partition
            && &self.date == date
    }
}

/// One dispatcher's writer state.
pub struct StorageWriter {
    /// How its files are named; held by a flush for its whole length (one at a time).
    naming: Arc<tokio::sync::Mutex<writes::Naming>>,
    /// Open buffers in creation order, one per data directory: rows of one directory stay in
    /// order inside its buffer.
    bufs: Vec<Buf>,
}

pub struct Storage {
    cfg: StorageConfig,
    store: Arc<dyn ObjectStore>,
    writes: writes::Writes,
    checkpoint: tokio::sync::Mutex<Ts>,
    /// Bytes held by the buffers of every writer ([`Charge`]).
    buffered: Arc<AtomicU64>,
    /// Placers of the partitioned table versions seen, by `(table id, version)`: a layout's
    /// expression is parsed once per table version, not per row (at most [`MAX_PLACERS`]).
    placers: Mutex<BTreeMap<(sluice_types::TableId, Ts), Arc<Placer>>>,
}

/// Placers kept; beyond it the cache starts over (placers are cheap to make again).
const MAX_PLACERS: usize = 1024;

pub type StorageSink = Runner<Storage>;

impl Runner<Storage> {
    /// Must be called inside a tokio runtime (the flush ticker).
    pub fn open_storage(cfg: StorageConfig) -> Result<StorageSink> {
        let store = build_store(&cfg)?;
        let writes = writes::Writes::new(
            store.clone(),
            cfg.protocol.extension(),
            cfg.file_index_width,
        );
        Ok(Runner::with_backend(Storage {
            cfg,
            store,
            writes,
            checkpoint: tokio::sync::Mutex::new(0),
            buffered: Arc::new(AtomicU64::new(0)),
            placers: Mutex::new(BTreeMap::new()),
        }))
    }
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.backend().store.clone()
    }
}

impl Storage {
    /// Where a row of a partitioned table goes (with `enable-partition-separator`): the
    /// partition of its image (the old image for a delete), with the row to write there when it
    /// is not the row itself. An update whose images lie in two partitions (possible only
    /// without a unique key: the server requires the partitioning columns in every unique key)
    /// becomes a delete in the old partition and an insert in the new one, as TiDB logs it.
    /// The placer of `schema`'s layout, made once per table version.
    fn placer(&self, p: &sluice_types::Partitioning, schema: &TableSchema) -> Arc<Placer> {
        let key = (schema.table_id, schema.version);
        let mut placers = self.placers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = placers.get(&key).filter(|f| f.layout() == p) {
            return found.clone();
        }
        if placers.len() >= MAX_PLACERS {
            placers.clear();
        }
        let made = Arc::new(Placer::new(p));
        placers.insert(key, made.clone());
        made
    }

    fn placed(
        &self,
        p: &Placer,
        schema: &TableSchema,
        row: &RowEvent,
    ) -> Result<Vec<(usize, Option<RowEvent>)>> {
        let place = |image: &Option<Vec<Value>>| -> Result<usize> {
            let values = image.as_deref().ok_or_else(|| {
                SinkError::Codec(format!("row of {} has no image", schema.qualified_name()))
            })?;
            p.partition_of(schema, values).map_err(|e| {
                let mut reason = format!("cannot place a row in a partition: {e}");
                if !reason.contains("enable-partition-separator") {
                    reason.push_str(
                        "; set enable-partition-separator=false to write this table without \
                         partition directories",
                    );
                }
                SinkError::TableRefused {
                    table: schema.qualified_name(),
                    reason,
                }
            })
        };
        Ok(match row.kind {
            RowKind::Insert => vec![(place(&row.after)?, None)],
            RowKind::Delete => vec![(place(&row.before)?, None)],
            RowKind::Update => {
                let (old, new) = (place(&row.before)?, place(&row.after)?);
                if old == new {
                    vec![(new, None)]
                } else {
                    let mut del = row.clone();
                    del.kind = RowKind::Delete;
                    del.after = None;
                    let mut ins = row.clone();
                    ins.kind = RowKind::Insert;
                    ins.before = None;
                    vec![(old, Some(del)), (new, Some(ins))]
                }
            }
        })
    }

    /// Encodes `row` into the buffer of its directory (creating it); true when that buffer
    /// reached `file-size`.
    fn append(
        &self,
        w: &mut StorageWriter,
        schema: &Arc<TableSchema>,
        partition: Option<usize>,
        date: &Option<String>,
        row: &RowEvent,
    ) -> Result<bool> {
        // Most rows go where the previous one went.
        let last = w.bufs.len().checked_sub(1);
        let i = match last
            .filter(|&l| w.bufs[l].holds(schema, partition, date))
            .or_else(|| w.bufs.iter().position(|b| b.holds(schema, partition, date)))
        {
            Some(i) => i,
            None => {
                let canal = (self.cfg.protocol == Protocol::CanalJson)
                    .then(|| codec::canal::Layout::new(schema));
                w.bufs.push(Buf {
                    schema: schema.clone(),
                    partition,
                    date: date.clone(),
                    parts: Vec::new(),
                    parts_len: 0,
                    text: String::new(),
                    canal,
                    charge: Charge::new(self.buffered.clone()),
                });
                w.bufs.len() - 1
            }
        };
        let b = &mut w.bufs[i];
        let (text, layout) = b.segment_and_layout();
        match self.cfg.protocol {
            Protocol::Csv => codec::csv::encode_row(text, &self.cfg.csv, schema, row)?,
            Protocol::CanalJson => {
                codec::canal::encode_row(text, layout, self.cfg.tidb_extension, schema, row)?
            }
        }
        Ok(b.len() as u64 >= self.cfg.file_size)
    }
}

#[async_trait]
impl Backend for Storage {
    type Writer = StorageWriter;

    fn new_writer(&self, spec: &WriterSpec<'_>) -> Result<StorageWriter> {
        // With a fence every name carries the dispatcher id: a successor never reuses a name a
        // paused predecessor may still put.
        let with_id = spec.fenced || self.cfg.table_across_nodes || !spec.span.is_whole_table();
        let claim = spec
            .fenced
            .then(|| layout::Claim::new(spec.dispatcher, spec.span, spec.start_ts));
        let naming = writes::Naming {
            id: with_id.then_some(spec.dispatcher),
            claim,
            claimed: BTreeSet::new(),
            next_index: BTreeMap::new(),
        };
        Ok(StorageWriter {
            naming: Arc::new(tokio::sync::Mutex::new(naming)),
            bufs: Vec::new(),
        })
    }

    async fn buffer(
        &self,
        w: &mut StorageWriter,
        batch: RowBatch,
        _fence: &BoundFence,
    ) -> Result<bool> {
        let schema = batch.schema;
        let partitioning = schema
            .partitioning
            .as_ref()
            .filter(|_| self.cfg.partition_separator)
            .map(|p| self.placer(p, &schema));
        let mut full = false;
        // The date directory of the previous row's day (a batch's rows mostly share one: a
        // snapshot chunk's rows all do): formatted once per day, not per row.
        let mut day: Option<(u64, Option<String>)> = None;
        for row in &batch.rows {
            let today = row.commit_time_ms / 86_400_000;
            let date = match &day {
                Some((d, date)) if *d == today => date,
                _ => {
                    let date = layout::date_dir(self.cfg.date_separator, row.commit_time_ms);
                    &day.insert((today, date)).1
                }
            };
            match &partitioning {
                None => full |= self.append(w, &schema, None, date, row)?,
                Some(placer) => {
                    for (partition, part) in self.placed(placer, &schema, row)? {
                        let row = part.as_ref().unwrap_or(row);
                        full |= self.append(w, &schema, Some(partition), date, row)?;
                    }
                }
            }
        }
        // The sink's total is updated once per batch, not per row (one shared counter for
        // every dispatcher of the sink).
        let mut total = 0;
        for b in &mut w.bufs {
            total = b.charge.set(b.len() as u64);
        }
        Ok(full || total > self.cfg.max_buffered_bytes || w.bufs.len() >= MAX_OPEN_BUFFERS)
    }

    fn has_buffered(&self, w: &StorageWriter) -> bool {
        w.bufs.iter().any(|b| !b.is_empty())
    }

    async fn flush(&self, w: &mut StorageWriter, fence: &BoundFence) -> Result<()> {
        // The same writes as a detached flush, waited for here.
        match self.detach_flush(w, fence) {
            Some(flush) => flush.await,
            None => Ok(()),
        }
    }

    fn detach_flush(&self, w: &mut StorageWriter, fence: &BoundFence) -> Option<DetachedFlush> {
        // A failed flush fails the dispatcher (the runner never flushes it again; its successor
        // replays from the checkpoint), so what was not written need not be kept.
        let bufs = std::mem::take(&mut w.bufs);
        let (writes, naming, fence) = (self.writes.clone(), w.naming.clone(), fence.clone());
        Some(Box::pin(async move {
            let mut naming = naming.lock().await;
            writes.flush_bufs(&mut naming, bufs, &fence).await
        }))
    }

    async fn ddl(
        &self,
        _w: &mut StorageWriter,
        ddl: &DdlEvent,
        tables: &[Arc<TableSchema>],
        fence: &BoundFence,
    ) -> Result<()> {
        if tables.is_empty() {
            let def = TableDefinition::for_database(
                ddl.target_database(),
                ddl.commit_ts,
                &ddl.query,
                ddl.kind,
            );
            return self.writes.ensure_definition(&def, fence).await;
        }
        for t in tables {
            let def = TableDefinition::for_table(t, ddl.commit_ts, &ddl.query, Some(ddl.kind));
            self.writes.ensure_definition(&def, fence).await?;
        }
        Ok(())
    }

    async fn checkpoint(&self, ts: Ts, fence: &BoundFence) -> Result<()> {
        let mut cur = self.checkpoint.lock().await;
        if ts <= *cur {
            return Ok(());
        }
        let body = serde_json::json!({ "checkpoint-ts": ts })
            .to_string()
            .into_bytes();
        self.writes
            .put_overwrite(layout::METADATA, body, fence)
            .await?;
        *cur = ts;
        Ok(())
    }

    async fn applied_ddls(&self, after: Ts) -> Result<Vec<crate::DdlRecord>> {
        self.recorded_versions(after).await
    }

    async fn discard(&self, w: &mut StorageWriter) {
        w.bufs.clear();
    }

    fn flush_interval(&self) -> Option<Duration> {
        Some(self.cfg.flush_interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_in_segments_is_the_text_written_in_order() {
        let schema = Arc::new(TableSchema {
            table_id: sluice_types::TableId(1),
            database: "d".into(),
            name: "t".into(),
            columns: vec![],
            key_columns: vec![],
            unique_keys: vec![],
            version: 0,
            partitioning: None,
        });
        let mut b = Buf {
            schema,
            partition: None,
            date: None,
            parts: Vec::new(),
            parts_len: 0,
            text: String::new(),
            canal: None,
            charge: Charge::new(Arc::new(AtomicU64::new(0))),
        };
        assert!(b.is_empty());
        let mut want = String::new();
        for i in 0..40_000 {
            let line = format!("{i},{}\r\n", "x".repeat(i % 97));
            b.segment().push_str(&line);
            want.push_str(&line);
        }
        assert!(b.parts.len() > 1, "more than one segment");
        assert_eq!(b.len(), want.len());
        let got: Vec<u8> = b.payload().0.into_iter().flat_map(|p| p.to_vec()).collect();
        assert_eq!(got, want.into_bytes());
    }
}
