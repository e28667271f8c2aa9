//! Reading what `sluice consume --kafka` applies: the topics its URI names (one, or every topic
//! a `*` pattern matches), each partition from its start until caught up, one consumer per
//! topic (librdkafka reports a partition's end without its topic), at most
//! [`PARALLEL_TOPICS`] at once.
//!
//! Invariants: a topic is read to the end of every partition and until nothing but watermark
//! messages arrived for `idle` (a running changefeed sends a watermark every time its
//! checkpoint moves, about once a second even when the upstream is idle: waiting for silence
//! would never end); at most [`MAX_MESSAGES`] messages are held; the progress topics of
//! `transactional=true` and the broker's internal topics are never read by a pattern.

use super::config::KafkaConfig;
use super::consume::MAX_MESSAGES;
use crate::error::{Result, SinkError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sluice_types::Ts;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// One message as read.
pub struct Raw {
    /// The topic's place in the sorted list of topics read.
    pub(crate) topic: u32,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    /// The `sluice-commit-ts` header (Avro's messages).
    pub(crate) commit_ts: Option<Ts>,
}

pub(super) fn consumer(cfg: &KafkaConfig) -> Result<BaseConsumer> {
    let mut c = ClientConfig::new();
    for (k, v) in cfg.connection_settings() {
        c.set(k, v);
    }
    c.set("group.id", "sluice-consume")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .map_err(|e| super::broker_error("creating the Kafka consumer", &e))
}

/// A consume URI whose topic is a `*` pattern, as a URI the sink's parser takes (the pattern
/// replaced by a valid name) and the pattern; any other URI as it is.
pub(super) fn topic_pattern(raw: &str) -> (String, Option<String>) {
    let Some(rest) = raw.strip_prefix("kafka://") else {
        return (raw.to_string(), None);
    };
    let Some(slash) = rest.find('/') else {
        return (raw.to_string(), None);
    };
    let (authority, path) = rest.split_at(slash);
    let end = path.find('?').unwrap_or(path.len());
    let topic = &path[1..end];
    if !topic.contains('*') {
        return (raw.to_string(), None);
    }
    let uri = format!("kafka://{authority}/sluice-consume-pattern{}", &path[end..]);
    (uri, Some(topic.to_string()))
}

/// The topics `cfg.topic` names: itself, or every topic its `*` pattern matches (the progress
/// topics of `transactional=true` and the broker's internal ones never).
fn topics_of(c: &BaseConsumer, cfg: &KafkaConfig) -> Result<Vec<(String, Vec<i32>)>> {
    let pattern = cfg.topic.contains('*');
    let md = c
        .fetch_metadata((!pattern).then_some(cfg.topic.as_str()), cfg.dial_timeout)
        .map_err(|e| super::broker_error(format!("reading the metadata of {}", cfg.topic), &e))?;
    let mut topics: Vec<(String, Vec<i32>)> = md
        .topics()
        .iter()
        .filter(|t| !t.partitions().is_empty())
        .filter(|t| match pattern {
            true => {
                super::route::glob(&cfg.topic, t.name())
                    && !t.name().starts_with("__")
                    && !t.name().ends_with(&super::txn::progress_topic(""))
            }
            false => t.name() == cfg.topic,
        })
        .map(|t| {
            (
                t.name().to_string(),
                t.partitions().iter().map(|p| p.id()).collect(),
            )
        })
        .collect();
    topics.sort();
    if topics.is_empty() {
        return Err(SinkError::Broker {
            what: format!("reading topic {}", cfg.topic),
            reason: match pattern {
                true => "no topic with partitions matches the pattern".into(),
                false => "the topic does not exist or has no partitions".into(),
            },
            retryable: false,
        });
    }
    Ok(topics)
}

fn commit_ts_header(m: &rdkafka::message::BorrowedMessage<'_>) -> Option<Ts> {
    use rdkafka::message::Headers;
    m.headers()?
        .iter()
        .find(|h| h.key == super::avro::COMMIT_TS_HEADER)
        .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok())
}

/// Topics read at once (one consumer each: librdkafka reports a partition's end without its
/// topic).
pub const PARALLEL_TOPICS: usize = 8;

/// Reads every partition of the topics from their start until caught up (see the module docs).
pub(super) fn read_topics(cfg: &KafkaConfig, idle: Duration) -> Result<Vec<Raw>> {
    let topics = topics_of(&consumer(cfg)?, cfg)?;
    let mut out = Vec::new();
    for (n, group) in topics.chunks(PARALLEL_TOPICS).enumerate() {
        let read: Vec<Result<Vec<Raw>>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .enumerate()
                .map(|(i, (t, ps))| {
                    let index = (n * PARALLEL_TOPICS + i) as u32;
                    s.spawn(move || read_topic(cfg, t, index, ps, idle))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(SinkError::Layout {
                            path: cfg.topic.clone(),
                            reason: "a topic reader panicked".into(),
                        })
                    })
                })
                .collect()
        });
        for r in read {
            out.extend(r?);
            if out.len() > MAX_MESSAGES {
                return Err(SinkError::Layout {
                    path: cfg.topic.clone(),
                    reason: format!("more than {MAX_MESSAGES} messages: consume in parts"),
                });
            }
        }
    }
    Ok(out)
}

/// Whether a message is only a watermark (the checkpoint, no data): canal-json's
/// `TIDB_WATERMARK`, the Open Protocol's resolved event (key `"t":3`), the Simple protocol's
/// `WATERMARK`. Matched on the protocol's marker text, before decoding.
fn is_watermark(
    protocol: super::config::KafkaProtocol,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> bool {
    use super::config::KafkaProtocol as P;
    let has = |b: Option<&[u8]>, needle: &[u8]| {
        b.is_some_and(|b| b.windows(needle.len()).any(|w| w == needle))
    };
    match protocol {
        P::CanalJson => {
            value.is_some_and(|v| v.len() < 512) && has(value, b"\"type\":\"TIDB_WATERMARK\"")
        }
        P::OpenProtocol => key.is_some_and(|k| k.len() < 512) && has(key, b"\"t\":3"),
        P::Simple => value.is_some_and(|v| v.len() < 512) && has(value, b"\"type\":\"WATERMARK\""),
        P::Debezium | P::Avro => false,
    }
}

/// Reads every partition of one topic from its start until each reported its end and nothing
/// but watermarks arrived for `idle`.
fn read_topic(
    cfg: &KafkaConfig,
    topic: &str,
    index: u32,
    partitions: &[i32],
    idle: Duration,
) -> Result<Vec<Raw>> {
    let c = consumer(cfg)?;
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(|e| super::broker_error("assigning partitions", &e))?;
    }
    c.assign(&tpl)
        .map_err(|e| super::broker_error("assigning partitions", &e))?;
    let mut at_end: BTreeSet<i32> = BTreeSet::new();
    let mut last = Instant::now();
    let mut out = Vec::new();
    loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                if !is_watermark(cfg.protocol, m.key(), m.payload()) {
                    last = Instant::now();
                }
                out.push(Raw {
                    topic: index,
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    commit_ts: commit_ts_header(&m),
                });
                if out.len() > MAX_MESSAGES {
                    return Err(SinkError::Layout {
                        path: topic.to_string(),
                        reason: format!("more than {MAX_MESSAGES} messages: consume in parts"),
                    });
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => return Err(super::broker_error(format!("reading topic {topic}"), &e)),
            None => {}
        }
        if at_end.len() == partitions.len() && last.elapsed() >= idle {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_watermark;
    use crate::codec;
    use crate::kafka::config::KafkaProtocol as P;
    use crate::testing::{simple_insert, simple_schema};

    #[test]
    fn watermarks_are_told_from_rows_of_every_protocol() {
        let canal = codec::canal::encode_watermark_message(77, 5);
        assert!(is_watermark(P::CanalJson, None, Some(canal.as_bytes())));
        let simple = codec::simple::encode_watermark(77);
        assert!(is_watermark(P::Simple, None, Some(simple.as_bytes())));
        let (k, v) = codec::open::encode_resolved(77);
        assert!(is_watermark(P::OpenProtocol, Some(&k), Some(&v)));
        // Rows are not, even with the marker's text in a value.
        let schema = simple_schema("db", "t", 1, 1);
        let row = simple_insert(&schema, 1, "\"type\":\"TIDB_WATERMARK\" WATERMARK", 9, 0);
        let mut c = String::new();
        codec::canal::encode_row_message(&mut c, true, &schema, &row).expect("canal");
        assert!(!is_watermark(P::CanalJson, None, Some(c.as_bytes())));
        let s = codec::simple::encode_row(&schema, &row).expect("simple");
        assert!(!is_watermark(P::Simple, None, Some(s.as_bytes())));
        let (k, v) = codec::open::encode_row(&schema, &row).expect("open");
        assert!(!is_watermark(P::OpenProtocol, Some(&k), Some(&v)));
    }
}
