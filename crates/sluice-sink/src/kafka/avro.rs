//! The Kafka sink's `protocol=avro` (TiCDC's, Confluent's wire format): each table version's key
//! and value schemas registered under the topic's subjects before its first row, rows framed
//! with their schema ids, a delete as a tombstone, no DDL and no watermark messages (a consumer
//! takes a table's shape from the registry). Every avro message carries its commit ts in the
//! `sluice-commit-ts` header, tombstones included, so `sluice consume` can order across
//! partitions without the TiDB extension.
//!
//! Invariants:
//! - a row leaves only framed with ids the registry answered for its own table version;
//! - a table whose topic would be shared (no topic rule of its own) is refused, never mixed
//!   into another table's topic;
//! - a table without a key is refused (`codec::avro`).

use super::config::KafkaConfig;
use super::registry::Registry;
use super::{poisoned, Kafka};
use crate::codec::avro::{self as codec, AvroOptions};
use crate::error::{Result, SinkError};
use sluice_types::{TableId, TableSchema, Ts};

/// The header every avro message carries: the row's commit ts, in decimal.
pub const COMMIT_TS_HEADER: &str = "sluice-commit-ts";

/// The registry ids of one table version's (key, value) schemas.
pub(crate) type SchemaIds = (u32, u32);

/// Ids per (table, version, topic), at most this many.
pub const MAX_IDS: usize = 65_536;

pub(crate) type IdCache =
    std::sync::Mutex<std::collections::BTreeMap<(TableId, Ts, String), SchemaIds>>;

/// The Avro encoding options a sink configuration asks for.
pub(crate) fn options(cfg: &KafkaConfig) -> AvroOptions {
    AvroOptions {
        tidb_extension: cfg.enable_tidb_extension,
        decimal_as_string: cfg.avro_decimal_as_string,
        bigint_unsigned_as_string: cfg.avro_bigint_unsigned_as_string,
    }
}

impl Kafka {
    fn registry(&self) -> Result<&Registry> {
        self.registry.as_ref().ok_or_else(|| SinkError::Registry {
            what: "setup".into(),
            reason: "protocol=avro without schema-registry".into(),
            retryable: false,
        })
    }

    /// The schema ids of `schema`'s rows in `topic`, registering its schemas the first time;
    /// `None` for the other protocols.
    pub(crate) async fn avro_ids(
        &self,
        schema: &TableSchema,
        topic: &str,
    ) -> Result<Option<SchemaIds>> {
        if self.enc.cfg.protocol != super::config::KafkaProtocol::Avro {
            return Ok(None);
        }
        let at = (schema.table_id, schema.version, topic.to_string());
        if let Some(ids) = self.avro_ids.lock().map_err(|_| poisoned())?.get(&at) {
            return Ok(Some(*ids));
        }
        if !self.router.has_topic_rule(&schema.database, &schema.name) {
            return Err(SinkError::TableRefused {
                table: schema.qualified_name(),
                reason: "protocol=avro writes each table to its own topic, and no [[sink.dispatchers]] rule gives this table one: add a rule with topic = '…{schema}…{table}…' that matches it".into(),
            });
        }
        let o = options(&self.enc.cfg);
        let key = codec::key_schema(schema, o)?.to_string();
        let value = codec::value_schema(schema, o)?.to_string();
        let registry = self.registry()?;
        let ids = (
            registry.register(&format!("{topic}-key"), &key).await?,
            registry.register(&format!("{topic}-value"), &value).await?,
        );
        let mut m = self.avro_ids.lock().map_err(|_| poisoned())?;
        if m.len() >= MAX_IDS {
            m.clear();
        }
        m.insert(at, ids);
        Ok(Some(ids))
    }

    /// Checks the registry answers (changefeed create and update).
    pub(crate) async fn probe_registry(&self) -> Result<()> {
        match &self.registry {
            Some(r) => r.reachable().await,
            None => Ok(()),
        }
    }
}
