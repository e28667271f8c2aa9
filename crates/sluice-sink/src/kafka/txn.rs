//! Exactly-once delivery (`transactional=true`): each dispatcher writes through a transactional
//! producer whose `transactional.id` names its changefeed and span, and each flush is one Kafka
//! transaction holding the flushed messages plus a progress record (the span and the greatest
//! commit ts flushed) in the progress topic `<topic>.sluice-progress`.
//!
//! Invariants:
//! - a progress record `(span, T)` is committed atomically with the messages it covers: every
//!   row of `span` with commit ts `<= T` is in a committed transaction;
//! - a dispatcher reads the committed progress of its changefeed before its first row and drops
//!   every row whose key lies in a recorded span with `T >=` the row's commit ts: the replay after
//!   a crash, a move, a split or a merge (the successor starts from the changefeed checkpoint,
//!   which can lag the broker) adds no copy for a `read_committed` reader;
//! - a producer opened with a span's transactional id fences every earlier producer of that
//!   span (Kafka's producer epoch): a paused dispatcher's commit after its successor started is
//!   refused ([`SinkError::Superseded`]), its transaction aborted;
//! - DDLs and watermarks are sent outside transactions and may repeat; consumers recognise them
//!   by commit ts.

use super::config::KafkaConfig;
use super::delivery::{self, Tally};
use super::{broker_error, Message};
use crate::error::{Result, SinkError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;
use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use sluice_types::{Key, Span, Ts};
use std::time::{Duration, Instant};

/// The progress topic of a changefeed's URI topic.
pub fn progress_topic(topic: &str) -> String {
    format!("{topic}.sluice-progress")
}

/// One committed flush of a span.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub changefeed: String,
    pub span: Span,
    pub ts: Ts,
}

/// A dispatcher's transactional producer and what the broker committed before it started.
pub struct Txn {
    producer: delivery::Producer,
    /// Counts the reports of the messages sent (the commit itself waits for them, and fails if
    /// one failed).
    tally: std::sync::Arc<Tally>,
    id: String,
    changefeed: String,
    span: Span,
    initialised: bool,
    /// A Kafka transaction is begun and not yet committed or aborted (the parts of an open
    /// upstream transaction went into it).
    begun: bool,
    /// Committed progress of spans overlapping this one; `None` until read.
    committed: Option<Vec<(Span, Ts)>>,
    timeout: Duration,
}

/// The transactional id of a span: stable across dispatchers, nodes and restarts.
fn transactional_id(changefeed: &str, span: &Span) -> String {
    let mut b = span.table.0.to_be_bytes().to_vec();
    b.extend(&span.start.0);
    b.push(0xff);
    b.extend(&span.end.0);
    format!(
        "sluice-{changefeed}-{}-{:08x}",
        span.table.0,
        crate::storage::layout::crc32(&b)
    )
}

fn fenced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::Fenced
        )
    ) || e.to_string().to_ascii_lowercase().contains("fenced")
}

impl Txn {
    pub fn new(cfg: &KafkaConfig, changefeed: &str, span: &Span) -> Result<Txn> {
        let id = transactional_id(changefeed, span);
        let mut c = ClientConfig::new();
        for (k, v) in cfg.client_settings() {
            c.set(k, v);
        }
        c.set("transactional.id", &id)
            .set("enable.idempotence", "true")
            .set("acks", "all");
        let producer = c
            .create_with_context(delivery::Reports)
            .map_err(|e| broker_error("creating the transactional producer", &e))?;
        Ok(Txn {
            producer,
            tally: Default::default(),
            id,
            changefeed: changefeed.to_string(),
            span: span.clone(),
            initialised: false,
            begun: false,
            committed: None,
            timeout: cfg.write_timeout,
        })
    }

    /// True when the broker already holds the row (key, commit ts) from an earlier dispatcher.
    pub fn already_committed(&self, key: &Key, ts: Ts) -> bool {
        self.committed
            .as_ref()
            .is_some_and(|c| c.iter().any(|(s, t)| ts <= *t && s.contains(key)))
    }

    pub fn loaded(&self) -> bool {
        self.committed.is_some()
    }

    /// Reads the committed progress of overlapping spans (once, before the first row).
    pub fn load(&mut self, cfg: &KafkaConfig) -> Result<()> {
        let records = read_progress(cfg)?;
        self.committed = Some(
            records
                .into_iter()
                .filter(|p| p.changefeed == self.changefeed && p.span.overlaps(&self.span))
                .map(|p| (p.span, p.ts))
                .collect(),
        );
        Ok(())
    }

    /// Begins a Kafka transaction unless one is begun (initialising the producer first).
    fn begin(&mut self) -> Result<()> {
        if !self.initialised {
            self.producer
                .init_transactions(self.timeout)
                .map_err(|e| self.error("initialising", &e))?;
            self.initialised = true;
        }
        if !self.begun {
            self.producer
                .begin_transaction()
                .map_err(|e| self.error("beginning a transaction", &e))?;
            self.begun = true;
        }
        Ok(())
    }

    /// Sends `messages` into the Kafka transaction, begun if need be, without committing it: the
    /// parts of an upstream transaction still open go to the broker as they come (so none is
    /// held whole in memory) and become visible to `read_committed` readers only with the
    /// commit that ends it. Blocking: run it off the async threads.
    pub(crate) fn send_open(&mut self, messages: &[Message]) -> Result<()> {
        let sent = self.begin().and_then(|()| self.send(messages.iter()));
        if sent.is_err() {
            self.abort();
        }
        sent
    }

    /// One transaction (or the end of the one begun by [`Txn::send_open`]): `messages`, then the
    /// progress record of `ts`. Blocking: run it off the async threads.
    pub(crate) fn commit(&mut self, cfg: &KafkaConfig, messages: &[Message], ts: Ts) -> Result<()> {
        let done = self
            .begin()
            .and_then(|()| self.send_all(cfg, messages, ts))
            .and_then(|()| {
                self.producer
                    .commit_transaction(self.timeout)
                    .map_err(|e| self.error("committing", &e))
            });
        match done {
            Ok(()) => self.begun = false,
            Err(_) => self.abort(),
        }
        done
    }

    /// Aborts the Kafka transaction begun, if any (a failed send or commit, or a dispatcher
    /// closed inside an upstream transaction): its records never reach a `read_committed`
    /// reader. Blocking.
    pub(crate) fn abort(&mut self) {
        if std::mem::take(&mut self.begun) {
            let _ = self.producer.abort_transaction(self.timeout);
        }
    }

    fn send_all(&self, cfg: &KafkaConfig, messages: &[Message], ts: Ts) -> Result<()> {
        let progress = Progress {
            changefeed: self.changefeed.clone(),
            span: self.span.clone(),
            ts,
        };
        let value = serde_json::to_vec(&progress).map_err(|e| SinkError::Codec(e.to_string()))?;
        let last = Message {
            topic: progress_topic(&cfg.topic),
            partition: 0,
            key: Some(self.id.as_bytes().to_vec()),
            value: Some(value),
            commit_ts: None,
        };
        self.send(messages.iter().chain(std::iter::once(&last)))
    }

    /// Hands messages to the client in order, waiting while its queue is full (bounded by
    /// `write-timeout`).
    fn send<'m>(&self, messages: impl Iterator<Item = &'m Message>) -> Result<()> {
        for m in messages {
            let deadline = Instant::now() + self.timeout;
            loop {
                match delivery::offer(&self.producer, m, &self.tally) {
                    Ok(true) => break,
                    Ok(false) if Instant::now() < deadline => {
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Ok(false) => {
                        let full = KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull);
                        return Err(self.error(&format!("producing to {}", m.topic), &full));
                    }
                    Err(e) => return Err(self.error(&format!("producing to {}", m.topic), &e)),
                }
            }
        }
        Ok(())
    }

    fn error(&self, what: &str, e: &KafkaError) -> SinkError {
        if fenced(e) {
            return SinkError::Superseded {
                what: format!("Kafka transaction of {}", self.id),
                span: format!("{:?}", self.span),
                by: format!("a newer producer with transactional id {}", self.id),
            };
        }
        broker_error(format!("{what} the transaction of {}", self.id), e)
    }
}

/// Every committed progress record of the progress topic (read to its end).
fn read_progress(cfg: &KafkaConfig) -> Result<Vec<Progress>> {
    let topic = progress_topic(&cfg.topic);
    let mut c = ClientConfig::new();
    for (k, v) in cfg.connection_settings() {
        c.set(k, v);
    }
    let c: BaseConsumer = c
        .set("group.id", "sluice-progress-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| broker_error("creating the progress reader", &e))?;
    let md = c
        .fetch_metadata(Some(&topic), cfg.dial_timeout)
        .map_err(|e| broker_error(format!("reading the metadata of {topic}"), &e))?;
    let exists = md
        .topics()
        .iter()
        .any(|t| t.name() == topic && !t.partitions().is_empty());
    if !exists {
        return Ok(Vec::new());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning)
        .map_err(|e| broker_error("assigning the progress topic", &e))?;
    c.assign(&tpl)
        .map_err(|e| broker_error("assigning the progress topic", &e))?;
    let deadline = Instant::now() + cfg.dial_timeout.max(Duration::from_secs(10));
    let mut out = Vec::new();
    loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if let Some(p) = m
                    .payload()
                    .and_then(|v| serde_json::from_slice::<Progress>(v).ok())
                {
                    out.push(p);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e)) => return Err(broker_error(format!("reading {topic}"), &e)),
            None if Instant::now() > deadline => {
                return Err(SinkError::Broker {
                    what: format!("reading {topic}"),
                    reason: "its end was not reached in time".into(),
                    retryable: true,
                })
            }
            None => {}
        }
    }
}
