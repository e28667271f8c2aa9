//! A row's message: the [`Encoder`] holds what encoding a row needs beyond the row and its
//! table version's parts (the configuration, the binlog base name, the claim-check store) and
//! the producer the encoded messages go to, shared by every lane of every writer ([`super::lanes`]).
//!
//! Invariants:
//! - a row's message is a pure function of the configuration, its table version and the row,
//!   whichever lane encodes it (lanes change where encoding runs, never what it writes);
//! - a message larger than `max-message-bytes` is never returned: it is claim-checked (stored,
//!   and its reference returned) when claim-check is configured, and an error naming the
//!   parameter otherwise.

use super::avro::{self, SchemaIds};
use super::config::{KafkaConfig, KafkaProtocol};
use super::delivery::Producer;
use super::{claim, Encoded, Message, Parts, VersionParts};
use crate::error::{Result, SinkError};
use sluice_types::{RowEvent, TableSchema};

/// What encoding a row's message needs, and where messages go.
pub(crate) struct Encoder {
    pub(crate) cfg: KafkaConfig,
    /// The upstream's binlog base name (Debezium's `source.file`; `None`: not known).
    pub(crate) binlog_base: Option<String>,
    /// `large-message-handle-option=claim-check`: where large messages go.
    pub(crate) claim: Option<claim::ClaimCheck>,
    pub(crate) producer: std::sync::Arc<Producer>,
}

impl Encoder {
    /// The message of `row` (to `topic`'s `partition`), claim-checked or refused when too
    /// large. `rt` runs the claim-check store's writes (this runs off the async threads).
    pub(crate) fn message(
        &self,
        at: (&str, i32),
        schema: &TableSchema,
        row: &RowEvent,
        version: (Option<SchemaIds>, &VersionParts),
        rt: &tokio::runtime::Handle,
    ) -> Result<Message> {
        let (avro, parts) = version;
        let (key, value) = self.encode_row(schema, row, avro, parts)?;
        let mut m = Message {
            topic: at.0.to_string(),
            partition: at.1,
            key,
            value,
            commit_ts: avro.map(|_| row.commit_ts),
        };
        self.claim_if_large(&mut m, schema, row, rt)?;
        self.check_size(&m, &|| {
            format!(
                "a row of {} at commit ts {}",
                schema.qualified_name(),
                row.commit_ts
            )
        })?;
        Ok(m)
    }

    /// The (key, value) of a row's message (`avro`: its schemas' registry ids, with Avro;
    /// `parts`: its table version's).
    fn encode_row(
        &self,
        schema: &TableSchema,
        row: &RowEvent,
        avro: Option<SchemaIds>,
        parts: &VersionParts,
    ) -> Result<Encoded> {
        match avro {
            Some(ids) => self.encode_avro(schema, row, ids),
            None => self
                .encode_value(schema, row, parts)
                .map(|(k, v)| (k, Some(v))),
        }
    }

    fn encode_value(
        &self,
        schema: &TableSchema,
        row: &RowEvent,
        parts: &VersionParts,
    ) -> Result<(Option<Vec<u8>>, Vec<u8>)> {
        match (&parts.parts, self.cfg.protocol) {
            (_, KafkaProtocol::Avro) => Err(SinkError::Codec(
                "an avro row needs its schema ids (encode_row)".into(),
            )),
            (Parts::Canal(layout), KafkaProtocol::CanalJson) => {
                let mut v = parts.buffer();
                let tidb = self.cfg.enable_tidb_extension;
                crate::codec::canal::encode_row_message_with(&mut v, layout, tidb, schema, row)?;
                parts.encoded(&v);
                Ok((None, v.into_bytes()))
            }
            (Parts::Debezium(envelope), KafkaProtocol::Debezium) => {
                let mut v = parts.buffer();
                let origin = self.debezium_origin();
                crate::codec::debezium::write_row_value(&mut v, envelope, origin, schema, row)?;
                parts.encoded(&v);
                let k = crate::codec::debezium::encode_key_with(envelope, schema, row);
                Ok((k.map(String::into_bytes), v.into_bytes()))
            }
            (_, KafkaProtocol::CanalJson | KafkaProtocol::Debezium) => Err(SinkError::Codec(
                "a row's table version parts were built for another protocol".into(),
            )),
            (_, KafkaProtocol::OpenProtocol) => {
                let (k, v) = crate::codec::open::encode_row(schema, row)?;
                Ok((Some(k), v))
            }
            (_, KafkaProtocol::Simple) => Ok((
                None,
                crate::codec::simple::encode_row(schema, row)?.into_bytes(),
            )),
        }
    }

    /// The framed (key, value) of an Avro row; the value is `None` for a delete (a tombstone).
    fn encode_avro(
        &self,
        schema: &TableSchema,
        row: &RowEvent,
        (key_id, value_id): SchemaIds,
    ) -> Result<Encoded> {
        use crate::codec::avro as codec;
        let o = avro::options(&self.cfg);
        let key = codec::frame(key_id, &codec::encode_key(schema, row, o)?);
        let value = codec::encode_value(schema, row, o)?.map(|v| codec::frame(value_id, &v));
        Ok((Some(key), value))
    }

    /// Who writes the Debezium messages: the topic as the logical server name, and the
    /// upstream's binlog base name.
    pub(crate) fn debezium_origin(&self) -> crate::codec::debezium::Origin<'_> {
        crate::codec::debezium::Origin {
            name: &self.cfg.topic,
            binlog_base: self.binlog_base.as_deref(),
        }
    }

    /// With claim-check, a message over `max-message-bytes` is stored and replaced by its
    /// reference (see [`claim`]).
    fn claim_if_large(
        &self,
        m: &mut Message,
        schema: &TableSchema,
        row: &RowEvent,
        rt: &tokio::runtime::Handle,
    ) -> Result<()> {
        let Some(c) = &self.claim else {
            return Ok(());
        };
        let Some(value) = m.value.as_deref() else {
            return Ok(());
        };
        if (value.len() as u64) <= self.cfg.max_message_bytes {
            return Ok(());
        }
        let name = rt.block_on(c.put(schema, row, value))?;
        m.value = Some(claim::reference_message(schema, row, &name).into_bytes());
        Ok(())
    }

    /// A message over `max-message-bytes` fails with an error naming the parameter (`what`:
    /// which message).
    pub(crate) fn check_size(&self, m: &Message, what: &dyn Fn() -> String) -> Result<()> {
        let size = m.len();
        if size as u64 > self.cfg.max_message_bytes {
            return Err(SinkError::Broker {
                what: what(),
                reason: format!(
                    "the message is {size} bytes, more than max-message-bytes={} (raise it, and the broker's and topic's max.message.bytes, to carry it)",
                    self.cfg.max_message_bytes
                ),
                retryable: false,
            });
        }
        Ok(())
    }
}
