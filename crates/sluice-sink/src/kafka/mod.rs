//! The Kafka sink (`kafka://host:port[,…]/topic?protocol=…&…`): each row change is one message
//! (TiCDC's canal-json, Open Protocol, Simple protocol or Avro, or the Debezium envelope), routed
//! to a topic and partition by [`route`]; a DDL goes to every partition of its table's topic
//! (not with Avro, which has no DDL message: see [`avro`]); with canal-json's TiDB extension the
//! changefeed checkpoint goes to every partition of every topic written as a WATERMARK message.
//!
//! Invariants:
//! - a dispatcher's ack rises only after the broker acknowledged every message before it
//!   (`flush` waits until the writer's `delivery::Tally` counted a report for every message
//!   handed to the client, and fails at the first failed one; the runner raises the ack after
//!   `flush`);
//! - messages go to the client as a batch is encoded (not `transactional`), so encoding the
//!   rest overlaps the network; a large batch is encoded in consecutive pieces on several
//!   threads and handed to the client in the batch's order (`lanes`);
//! - per partition, messages leave in the order they were produced: the idempotent producer
//!   (`required-acks=-1`, the default) keeps that order and drops duplicates across the
//!   client's own retries; a failed delivery fails the dispatcher, and its successor replays
//!   from the checkpoint (at-least-once: a consumer deduplicates by commit ts);
//! - an update that changes its row's key is sent as a delete of the old key then an insert of
//!   the new one, so every message of a key goes to that key's partition;
//! - a message larger than `max-message-bytes` fails its dispatcher with an error naming the
//!   parameter (fatal); nothing is cut or dropped;
//! - the write fence is checked immediately before messages are handed to the client; what the
//!   client holds then (linger, retries up to `write-timeout`) may still reach the broker after
//!   a freeze or a failure, as it could while a flush waited for it before: at-least-once
//!   consumers skip it by commit ts, and `transactional=true` fences it by transactional id;
//! - a dispatcher holds at most [`MAX_BUFFERED_BYTES`] of encoded messages not yet acknowledged
//!   (buffered, or handed to the client) before it is flushed.

pub mod avro;
pub mod claim;
pub mod config;
pub mod consume;
mod consume_avro;
mod consume_read;
mod delivery;
mod encode;
mod lanes;
pub mod registry;
pub mod route;
pub mod security;
pub mod txn;

use crate::error::{Result, SinkError};
use crate::fence::BoundFence;
use crate::runner::{Backend, Runner, WriterSpec};
use crate::{DdlRecord, RowBatch};
use async_trait::async_trait;
use config::{KafkaConfig, KafkaProtocol};
use delivery::Tally;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::ClientConfig;
use route::{DispatchRule, Router};
use sluice_types::{DdlEvent, RowEvent, RowKind, TableSchema, Ts};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Encoded messages a dispatcher holds unacknowledged (buffered or sent) before it must flush.
pub const MAX_BUFFERED_BYTES: usize = 8 << 20;
/// At most this many table versions' message parts are kept (`VersionParts`).
pub const MAX_VERSION_PARTS: usize = 65_536;
/// How often buffered messages are sent without being asked.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);

/// A message's encoded key and value (`None`: none; a value of `None` is a tombstone).
pub(crate) type Encoded = (Option<Vec<u8>>, Option<Vec<u8>>);

/// One encoded message.
pub(crate) struct Message {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) key: Option<Vec<u8>>,
    /// `None`: a tombstone (an Avro delete).
    pub(crate) value: Option<Vec<u8>>,
    /// The row's commit ts, sent as the `sluice-commit-ts` header (Avro's messages).
    pub(crate) commit_ts: Option<Ts>,
}

impl Message {
    fn len(&self) -> usize {
        self.value.as_ref().map_or(0, Vec::len) + self.key.as_ref().map_or(0, Vec::len)
    }

    /// The record of this message for the sink's producer, its report counted in `tally`.
    pub(crate) fn base_record(&self, tally: Arc<Tally>) -> BaseRecord<'_, [u8], [u8], Arc<Tally>> {
        let mut rec = BaseRecord::with_opaque_to(&self.topic, tally).partition(self.partition);
        if let Some(v) = &self.value {
            rec = rec.payload(v.as_slice());
        }
        if let Some(k) = &self.key {
            rec = rec.key(k.as_slice());
        }
        if let Some(h) = self.headers() {
            rec = rec.headers(h);
        }
        rec
    }

    /// The `sluice-commit-ts` header (Avro's messages).
    fn headers(&self) -> Option<OwnedHeaders> {
        let ts = self.commit_ts?.to_string();
        Some(OwnedHeaders::new().insert(Header {
            key: avro::COMMIT_TS_HEADER,
            value: Some(ts.as_bytes()),
        }))
    }
}

/// What every row message of one table version shares, built at its first row: Debezium's
/// `schema` parts and column order, canal-json's names and column types.
enum Parts {
    Debezium(crate::codec::debezium::Envelope),
    Canal(crate::codec::canal::Layout),
    /// The other protocols build nothing ahead.
    None,
}

/// A table version's [`Parts`] and the size its value buffers start at.
struct VersionParts {
    parts: Parts,
    /// The largest value encoded so far (a buffer that large needs no regrowth for the next).
    largest: AtomicUsize,
}

impl VersionParts {
    fn buffer(&self) -> String {
        String::with_capacity(self.largest.load(Ordering::Relaxed))
    }

    fn encoded(&self, value: &str) {
        self.largest.fetch_max(value.len(), Ordering::Relaxed);
    }
}

/// A dispatcher's buffer.
#[derive(Default)]
pub struct KafkaWriter {
    /// Encoded and kept for the flush's Kafka transaction (`transactional=true` only: without
    /// it, messages go to the client as they are encoded).
    pending: Vec<Message>,
    /// Handed to the client: their delivery reports (replaced by a new tally on discard).
    inflight: Arc<Tally>,
    /// Bytes of `pending` and of what was handed to the client since the last flush.
    bytes: usize,
    /// `transactional=true`: the dispatcher's transactional producer ([`txn`]).
    txn: Option<txn::Txn>,
    /// The greatest commit ts buffered since the last flush.
    max_ts: Ts,
    /// Simple protocol: rows written per table version since its last BOOTSTRAP message.
    bootstrapped: BTreeMap<(sluice_types::TableId, Ts), u64>,
    /// What is pending is parts of an upstream transaction still open: with
    /// `transactional=true` a flush sends them into a Kafka transaction it leaves open, and
    /// the flush after its end commits that transaction (so it is one Kafka transaction, and
    /// never held whole here).
    open: bool,
}

pub struct Kafka {
    /// The changefeed (transactional ids and progress records name it).
    changefeed: String,
    router: Router,
    /// Row encoding and the producer, shared with the lanes (`lanes`).
    enc: Arc<encode::Encoder>,
    admin: AdminClient<DefaultClientContext>,
    /// Partition count of each topic used so far (the topics watermarks go to).
    partitions: Mutex<BTreeMap<String, i32>>,
    /// The message parts per table version (table id, version), built once.
    parts: Mutex<BTreeMap<(sluice_types::TableId, Ts), Arc<VersionParts>>>,
    /// `protocol=avro`: the schema registry, and the ids of each table version's schemas.
    registry: Option<registry::Registry>,
    avro_ids: avro::IdCache,
}

pub type KafkaSink = Runner<Kafka>;

/// A broker error as a sink error: what failed, retryable unless it cannot succeed as it is.
pub(crate) fn broker_error(what: impl Into<String>, e: &KafkaError) -> SinkError {
    let fatal = matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidTopic
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::InvalidConfig
                | RDKafkaErrorCode::InvalidReplicationFactor
                | RDKafkaErrorCode::InvalidPartitions
        )
    );
    SinkError::Broker {
        what: what.into(),
        reason: e.to_string(),
        retryable: !fatal,
    }
}

impl KafkaConfig {
    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in self.client_settings() {
            c.set(k, v);
        }
        c
    }

    /// Builds the sink (`rules`: the changefeed's `[[sink.dispatchers]]`); `fence`: checked
    /// before every produce; `binlog_base`: the upstream's binlog base name, which Debezium
    /// messages name their binlog file by (`None`: their `source.file` is empty).
    pub fn build(
        &self,
        changefeed: &str,
        rules: &[DispatchRule],
        fence: Option<crate::WriteFence>,
        binlog_base: Option<&str>,
    ) -> Result<Arc<dyn crate::Sink>> {
        let backend = self.backend(changefeed, rules, binlog_base)?;
        let sink = Runner::with_backend(backend);
        if let Some(f) = fence {
            sink.set_fence(f)?;
        }
        Ok(Arc::new(sink))
    }

    /// Checks the brokers answer and the URI's topic exists or may be created (changefeed
    /// create and update).
    pub async fn probe(&self) -> Result<()> {
        let k = self.backend("", &[], None)?;
        k.probe_registry().await?;
        k.partition_count(&self.topic)
            .await
            .map(|_| ())
            .map_err(|e| self.security.explain(e))
    }

    /// The backend of changefeed `changefeed` routing by `rules` (the probe: none of either),
    /// naming binlog files by `binlog_base`.
    fn backend(
        &self,
        changefeed: &str,
        rules: &[DispatchRule],
        binlog_base: Option<&str>,
    ) -> Result<Kafka> {
        let masked = format!("kafka://{}/{}", self.brokers.join(","), self.topic);
        let claim = self.claim_check.as_deref();
        Ok(Kafka {
            changefeed: changefeed.to_string(),
            router: Router::new(&self.topic, rules)
                .map_err(|e| SinkError::invalid_uri(&masked, e))?,
            enc: Arc::new(encode::Encoder {
                cfg: self.clone(),
                binlog_base: binlog_base.map(str::to_string),
                claim: claim.map(claim::ClaimCheck::open).transpose()?,
                producer: Arc::new(
                    self.client()
                        .create_with_context(delivery::Reports)
                        .map_err(|e| broker_error("creating the Kafka producer", &e))?,
                ),
            }),
            admin: self
                .client()
                .create()
                .map_err(|e| broker_error("creating the Kafka admin client", &e))?,
            partitions: Mutex::new(BTreeMap::new()),
            parts: Mutex::new(BTreeMap::new()),
            registry: self
                .schema_registry
                .as_ref()
                .map(registry::Registry::new)
                .transpose()?,
            avro_ids: Mutex::new(BTreeMap::new()),
        })
    }
}

impl Kafka {
    /// The partitions of `topic` this sink uses, creating the topic when it is missing and
    /// `auto-create-topic` allows (see `KafkaConfig::partition_num`).
    async fn partition_count(&self, topic: &str) -> Result<i32> {
        if let Some(n) = self.partitions.lock().map_err(|_| poisoned())?.get(topic) {
            return Ok(*n);
        }
        let n = match self.existing_partitions(topic).await? {
            Some(have) => self.usable_partitions(topic, have)?,
            None if self.enc.cfg.auto_create_topic => self.create_topic(topic).await?,
            None => {
                return Err(SinkError::Broker {
                    what: format!("topic {topic}"),
                    reason: "it does not exist and auto-create-topic=false: create it, or set auto-create-topic=true".into(),
                    retryable: false,
                })
            }
        };
        self.partitions
            .lock()
            .map_err(|_| poisoned())?
            .insert(topic.to_string(), n);
        Ok(n)
    }

    fn usable_partitions(&self, topic: &str, have: i32) -> Result<i32> {
        match self.enc.cfg.partition_num {
            Some(want) if (want as i32) > have => Err(SinkError::Broker {
                what: format!("topic {topic}"),
                reason: format!("it has {have} partitions, fewer than partition-num={want}: add partitions or lower partition-num"),
                retryable: false,
            }),
            Some(want) => Ok(want as i32),
            None => Ok(have),
        }
    }

    /// The partition count of an existing topic; `None` when the broker does not know it.
    async fn existing_partitions(&self, topic: &str) -> Result<Option<i32>> {
        let producer = self.enc.producer.clone();
        let (t, timeout) = (topic.to_string(), self.enc.cfg.dial_timeout);
        let md = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(Some(&t), timeout)
        })
        .await
        .map_err(|e| SinkError::Broker {
            what: "reading topic metadata".into(),
            reason: e.to_string(),
            retryable: true,
        })?
        .map_err(|e| broker_error(format!("reading the metadata of topic {topic}"), &e))?;
        let Some(m) = md.topics().iter().find(|m| m.name() == topic) else {
            return Ok(None);
        };
        match m.error() {
            None if !m.partitions().is_empty() => Ok(Some(m.partitions().len() as i32)),
            None => Ok(None),
            Some(e) if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition => {
                Ok(None)
            }
            Some(e) => Err(SinkError::Broker {
                what: format!("reading the metadata of topic {topic}"),
                reason: RDKafkaErrorCode::from(e).to_string(),
                retryable: true,
            }),
        }
    }

    async fn create_topic(&self, topic: &str) -> Result<i32> {
        let n = self
            .enc
            .cfg
            .partition_num
            .unwrap_or(config::DEFAULT_PARTITION_NUM as u32) as i32;
        self.create_topic_of(topic, n).await?;
        // Another node may have created it first, with another count: ask again.
        match self.existing_partitions(topic).await? {
            Some(have) => self.usable_partitions(topic, have),
            None => Ok(n),
        }
    }

    /// Creates `topic` with `n` partitions (one that exists already is fine).
    async fn create_topic_of(&self, topic: &str, n: i32) -> Result<()> {
        let new = NewTopic::new(
            topic,
            n,
            TopicReplication::Fixed(self.enc.cfg.replication_factor as i32),
        );
        let opts = AdminOptions::new().operation_timeout(Some(self.enc.cfg.dial_timeout));
        let res = self
            .admin
            .create_topics([&new], &opts)
            .await
            .map_err(|e| broker_error(format!("creating topic {topic}"), &e))?;
        for r in res {
            if let Err((_, code)) = r {
                if code != RDKafkaErrorCode::TopicAlreadyExists {
                    return Err(broker_error(
                        format!("creating topic {topic}"),
                        &KafkaError::AdminOp(code),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Creates the progress topic of `transactional=true` once (one partition).
    async fn ensure_progress_topic(&self) -> Result<()> {
        let topic = txn::progress_topic(&self.enc.cfg.topic);
        if self
            .partitions
            .lock()
            .map_err(|_| poisoned())?
            .contains_key(&topic)
        {
            return Ok(());
        }
        if self.existing_partitions(&topic).await?.is_none() {
            self.create_topic_of(&topic, 1).await?;
        }
        // Known from now on; never a watermark target (not in `partitions`' row topics: see
        // `checkpoint`).
        self.partitions
            .lock()
            .map_err(|_| poisoned())?
            .insert(topic, 1);
        Ok(())
    }

    /// Reads what the broker committed for the writer's span, once (`transactional=true`).
    async fn load_committed(&self, w: &mut KafkaWriter) -> Result<()> {
        if w.txn.as_ref().is_none_or(|t| t.loaded()) {
            return Ok(());
        }
        let cfg = self.enc.cfg.clone();
        on_txn(w, "reading committed progress", move |t| t.load(&cfg)).await
    }

    /// The parts of an upstream transaction still open go into a Kafka transaction left open
    /// (committed by the flush after its end, [`Kafka::commit`]).
    async fn send_open(&self, w: &mut KafkaWriter, fence: &BoundFence) -> Result<()> {
        if w.pending.is_empty() {
            return Ok(());
        }
        fence.check("send into a Kafka transaction")?;
        let pending = std::mem::take(&mut w.pending);
        w.bytes = 0;
        on_txn(w, "sending into a transaction", move |t| {
            t.send_open(&pending)
        })
        .await
    }

    /// One Kafka transaction of the buffered messages and their progress record.
    async fn commit(&self, w: &mut KafkaWriter, fence: &BoundFence) -> Result<()> {
        self.ensure_progress_topic().await?;
        fence.check("commit a Kafka transaction")?;
        let (cfg, pending, ts) = (
            self.enc.cfg.clone(),
            std::mem::take(&mut w.pending),
            w.max_ts,
        );
        on_txn(w, "committing a transaction", move |t| {
            t.commit(&cfg, &pending, ts)
        })
        .await
    }

    /// Simple protocol: a BOOTSTRAP message to every partition of `topic` before the first row
    /// of each table version a dispatcher writes, and again every `BOOTSTRAP_EVERY` rows.
    fn bootstrap(
        &self,
        w: &mut KafkaWriter,
        v: &lanes::Version,
        partitions: i32,
        out: &mut Vec<lanes::Item>,
    ) {
        if self.enc.cfg.protocol != KafkaProtocol::Simple {
            return;
        }
        let n = w
            .bootstrapped
            .entry((v.schema.table_id, v.schema.version))
            .or_insert(0);
        *n += 1;
        if *n != 1 && *n <= crate::codec::simple::BOOTSTRAP_EVERY {
            return;
        }
        *n = 1;
        let value = crate::codec::simple::encode_bootstrap(&v.schema).into_bytes();
        for partition in 0..partitions {
            out.push(lanes::Item::Ready(Message {
                topic: v.topic.clone(),
                partition,
                key: None,
                value: Some(value.clone()),
                commit_ts: None,
            }));
        }
    }

    /// The `VersionParts` of `schema`'s rows (built at the version's first row; at most
    /// [`MAX_VERSION_PARTS`] kept, the table forgotten when full). A new table version is a new
    /// key, so a schema change never meets the parts of the version before it.
    fn parts(&self, schema: &TableSchema) -> Result<Arc<VersionParts>> {
        let key = (schema.table_id, schema.version);
        let mut m = self.parts.lock().map_err(|_| poisoned())?;
        if let Some(e) = m.get(&key) {
            return Ok(e.clone());
        }
        if m.len() >= MAX_VERSION_PARTS {
            m.clear();
        }
        let parts = match self.enc.cfg.protocol {
            KafkaProtocol::Debezium => {
                Parts::Debezium(crate::codec::debezium::Envelope::with_schema(
                    &self.enc.cfg.topic,
                    schema,
                    !self.enc.cfg.debezium_disable_schema,
                ))
            }
            KafkaProtocol::CanalJson => Parts::Canal(crate::codec::canal::Layout::new(schema)),
            _ => Parts::None,
        };
        let e = Arc::new(VersionParts {
            parts,
            largest: AtomicUsize::new(0),
        });
        m.insert(key, e.clone());
        Ok(e)
    }

    /// The (key, value) of a DDL's message (`version`: the table version it produces, for the
    /// Simple protocol's `tableSchema`).
    fn encode_ddl(
        &self,
        ddl: &DdlEvent,
        table: &str,
        version: Option<&TableSchema>,
    ) -> (Option<Vec<u8>>, Vec<u8>) {
        let tidb = self.enc.cfg.enable_tidb_extension;
        match self.enc.cfg.protocol {
            KafkaProtocol::CanalJson => {
                let v = crate::codec::canal::encode_ddl_message(tidb, ddl, table);
                (None, v.into_bytes())
            }
            KafkaProtocol::Debezium => {
                let v = crate::codec::debezium::encode_ddl_value(
                    self.enc.debezium_origin(),
                    ddl,
                    table,
                );
                (None, v.into_bytes())
            }
            KafkaProtocol::OpenProtocol => {
                let (k, v) = crate::codec::open::encode_ddl(ddl, table);
                (Some(k), v)
            }
            KafkaProtocol::Simple => (
                None,
                crate::codec::simple::encode_ddl(ddl, version).into_bytes(),
            ),
            // Not sent (see `ddl`).
            KafkaProtocol::Avro => (None, Vec::new()),
        }
    }

    /// The (key, value) of a checkpoint message, for the protocols that have one.
    fn encode_checkpoint(&self, ts: Ts) -> Option<(Option<Vec<u8>>, Vec<u8>)> {
        match self.enc.cfg.protocol {
            KafkaProtocol::CanalJson if self.enc.cfg.enable_tidb_extension => {
                let v = crate::codec::canal::encode_watermark_message(ts, 0);
                Some((None, v.into_bytes()))
            }
            KafkaProtocol::OpenProtocol => {
                let (k, v) = crate::codec::open::encode_resolved(ts);
                Some((Some(k), v))
            }
            KafkaProtocol::Simple => Some((
                None,
                crate::codec::simple::encode_watermark(ts).into_bytes(),
            )),
            _ => None,
        }
    }

    /// Sends `messages` in order and waits for every delivery report.
    async fn produce(&self, messages: &[Message], fence: &BoundFence) -> Result<()> {
        let tally = Arc::new(Tally::default());
        self.send(messages, &tally, fence).await?;
        tally.settled().await
    }

    /// Hands `messages` to the client in order, their reports counted in `tally`. A full
    /// client queue waits for what `tally` has in flight first.
    async fn send(
        &self,
        messages: &[Message],
        tally: &Arc<Tally>,
        fence: &BoundFence,
    ) -> Result<()> {
        fence.check("produce to Kafka")?;
        for m in messages {
            let refused = |e| broker_error(format!("producing to {}", m.topic), &e);
            while !delivery::offer(&self.enc.producer, m, tally).map_err(refused)? {
                match tally.in_flight() {
                    0 => tokio::time::sleep(Duration::from_millis(10)).await,
                    _ => tally.settled().await?,
                }
            }
        }
        Ok(())
    }

    /// Hands each encoded piece of a batch to the client in order as it comes (not
    /// `transactional`; with it, keeps them for the flush's transaction).
    async fn take_pieces(
        &self,
        w: &mut KafkaWriter,
        pieces: &mut lanes::Pieces,
        fence: &BoundFence,
    ) -> Result<()> {
        while let Some(piece) = pieces.next().await {
            let messages = piece?;
            w.bytes += messages.iter().map(Message::len).sum::<usize>();
            match w.txn {
                Some(_) => w.pending.extend(messages),
                // Out now: the client batches and sends while the rest is encoded.
                None => self.send(&messages, &w.inflight, fence).await?,
            }
        }
        Ok(())
    }

    /// Every partition of the topics a DDL concerns: its tables' topics, or the URI's topic for
    /// a DDL that changes no table.
    async fn ddl_targets(&self, tables: &[Arc<TableSchema>]) -> Result<Vec<(String, String, i32)>> {
        let mut topics: BTreeMap<String, String> = BTreeMap::new();
        for t in tables {
            topics
                .entry(self.router.topic(&t.database, &t.name))
                .or_insert_with(|| t.name.clone());
        }
        if topics.is_empty() {
            topics.insert(self.router.default_topic().to_string(), String::new());
        }
        let mut out = Vec::new();
        for (topic, table) in topics {
            for p in 0..self.partition_count(&topic).await? {
                out.push((topic.clone(), table.clone(), p));
            }
        }
        Ok(out)
    }
}

pub(crate) fn poisoned() -> SinkError {
    SinkError::Broker {
        what: "the topic table".into(),
        reason: "a lock was poisoned by a panic".into(),
        retryable: false,
    }
}

/// An update that changes the row's key, as a delete of the old key and an insert of the new.
fn split_key_change(schema: &TableSchema, row: RowEvent) -> Vec<RowEvent> {
    let changed = row.kind == RowKind::Update
        && !schema.key_columns.is_empty()
        && match (&row.before, &row.after) {
            (Some(b), Some(a)) => schema.key_columns.iter().any(|&k| b.get(k) != a.get(k)),
            _ => false,
        };
    if !changed {
        return vec![row];
    }
    let mut del = row.clone();
    del.kind = RowKind::Delete;
    del.after = None;
    let mut ins = row;
    ins.kind = RowKind::Insert;
    ins.before = None;
    vec![del, ins]
}

#[async_trait]
impl Backend for Kafka {
    type Writer = KafkaWriter;
    fn new_writer(&self, spec: &WriterSpec<'_>) -> Result<KafkaWriter> {
        let txn = match self.enc.cfg.transactional {
            true => Some(txn::Txn::new(&self.enc.cfg, &self.changefeed, spec.span)?),
            false => None,
        };
        Ok(KafkaWriter {
            pending: Vec::new(),
            inflight: Arc::new(Tally::default()),
            bytes: 0,
            txn,
            max_ts: 0,
            bootstrapped: BTreeMap::new(),
            open: false,
        })
    }

    async fn buffer(
        &self,
        w: &mut KafkaWriter,
        batch: RowBatch,
        fence: &BoundFence,
    ) -> Result<bool> {
        let schema = batch.schema;
        let topic = self.router.topic(&schema.database, &schema.name);
        let partitions = self.partition_count(&topic).await?;
        let avro = self.avro_ids(&schema, &topic).await?;
        let parts = self.parts(&schema)?;
        self.load_committed(w).await?;
        let v = Arc::new(lanes::Version {
            schema,
            topic,
            avro,
            parts,
        });
        let mut items = Vec::with_capacity(batch.rows.len());
        for row in batch
            .rows
            .into_iter()
            .flat_map(|r| split_key_change(&v.schema, r))
        {
            if let Some(t) = &w.txn {
                // An earlier dispatcher's committed transaction holds it already.
                if t.already_committed(&row.key, row.commit_ts) {
                    continue;
                }
            }
            w.max_ts = w.max_ts.max(row.commit_ts);
            self.bootstrap(w, &v, partitions, &mut items);
            let partition = self.router.partition(&v.schema, &row, partitions)?;
            items.push(lanes::Item::Row { partition, row });
        }
        let mut pieces = lanes::Pieces::start(&self.enc, v, items);
        let taken = self.take_pieces(w, &mut pieces, fence).await;
        if taken.is_err() {
            pieces.finish().await;
        }
        taken?;
        Ok(w.bytes >= MAX_BUFFERED_BYTES)
    }

    fn has_buffered(&self, w: &KafkaWriter) -> bool {
        !w.pending.is_empty() || w.inflight.unsettled()
    }

    fn set_open(&self, w: &mut KafkaWriter, open: bool) {
        w.open = open;
    }

    async fn flush(&self, w: &mut KafkaWriter, fence: &BoundFence) -> Result<()> {
        if w.txn.is_some() {
            if w.open {
                return self.send_open(w, fence).await;
            }
            if !w.pending.is_empty() {
                self.commit(w, fence).await?;
            }
        } else {
            w.inflight.settled().await?;
        }
        w.pending.clear();
        w.bytes = 0;
        Ok(())
    }

    async fn ddl(
        &self,
        _: &mut KafkaWriter,
        ddl: &DdlEvent,
        tables: &[Arc<TableSchema>],
        fence: &BoundFence,
    ) -> Result<()> {
        if self.enc.cfg.protocol == KafkaProtocol::Avro {
            // Avro has no DDL message: the next row registers the table's new schema.
            return Ok(());
        }
        let mut msgs = Vec::new();
        for (topic, table, partition) in self.ddl_targets(tables).await? {
            let version = tables.iter().find(|t| t.name == table).map(|t| t.as_ref());
            let (key, value) = self.encode_ddl(ddl, &table, version);
            let m = Message {
                topic,
                partition,
                key,
                value: Some(value),
                commit_ts: None,
            };
            self.enc
                .check_size(&m, &|| format!("the DDL at commit ts {}", ddl.commit_ts))?;
            msgs.push(m);
        }
        self.produce(&msgs, fence).await
    }

    /// With canal-json's TiDB extension a WATERMARK, with the Open Protocol a resolved event, to
    /// every partition of every topic written so far (each row before it on its partition has a
    /// smaller commit ts).
    async fn checkpoint(&self, ts: Ts, fence: &BoundFence) -> Result<()> {
        let Some((key, value)) = self.encode_checkpoint(ts) else {
            return Ok(());
        };
        self.partition_count(&self.enc.cfg.topic).await?;
        let topics: Vec<(String, i32)> = self
            .partitions
            .lock()
            .map_err(|_| poisoned())?
            .iter()
            .filter(|(t, _)| **t != txn::progress_topic(&self.enc.cfg.topic))
            .map(|(t, n)| (t.clone(), *n))
            .collect();
        let msgs: Vec<Message> = topics
            .into_iter()
            .flat_map(|(topic, n)| (0..n).map(move |partition| (topic.clone(), partition)))
            .map(|(topic, partition)| Message {
                topic,
                partition,
                key: key.clone(),
                value: Some(value.clone()),
                commit_ts: None,
            })
            .collect();
        self.produce(&msgs, fence).await
    }

    /// A topic keeps every message: no DDL a replay repeats can undo anything downstream (a
    /// consumer skips what it has applied, by commit ts).
    async fn applied_ddls(&self, _: Ts) -> Result<Vec<DdlRecord>> {
        Ok(Vec::new())
    }

    async fn discard(&self, w: &mut KafkaWriter) {
        // A Kafka transaction left open by the parts of an upstream transaction: aborted, so
        // `read_committed` readers never see them (the successor writes it whole).
        let _ = on_txn(w, "aborting a transaction", |t| {
            t.abort();
            Ok(())
        })
        .await;
        w.pending.clear();
        // Their reports are not waited for: the dispatcher replays from its checkpoint.
        w.inflight = Arc::new(Tally::default());
        w.bytes = 0;
    }

    fn flush_interval(&self) -> Option<Duration> {
        Some(FLUSH_INTERVAL)
    }
}

/// Runs `f` on the writer's transactional producer off the async threads (its calls block) and
/// puts the producer back; nothing without one.
async fn on_txn(
    w: &mut KafkaWriter,
    what: &str,
    f: impl FnOnce(&mut txn::Txn) -> Result<()> + Send + 'static,
) -> Result<()> {
    let Some(mut t) = w.txn.take() else {
        return Ok(());
    };
    let (t, r) = tokio::task::spawn_blocking(move || {
        let r = f(&mut t);
        (t, r)
    })
    .await
    .map_err(|e| SinkError::Broker {
        what: what.into(),
        reason: e.to_string(),
        retryable: true,
    })?;
    w.txn = Some(t);
    r
}
