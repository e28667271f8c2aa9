//! `sluice consume` of `protocol=avro`: the schemas every message names are read from the
//! registry once, then each message is decoded into a row event: a key and a value are an
//! insert or an update (an upsert in safe mode), a key alone (a tombstone) a delete of that key.
//!
//! Invariants:
//! - a row's commit ts is its `sluice-commit-ts` header, else the TiDB extension's
//!   `_tidb_commit_ts`, else unknown (the partition's order alone);
//! - the extension's fields are never taken for columns;
//! - a message whose schema the registry does not have is an error naming its id.

use super::config::{KafkaConfig, KafkaProtocol};
use super::consume::{Event, Raw};
use super::registry::Registry;
use crate::codec::avro::{self as codec, Datum, RecordSchema};
use crate::codec::DecodedRow;
use crate::error::{Result, SinkError};
use sluice_types::{RowKind, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The schemas of the messages read, by registry id.
pub(super) type Schemas = BTreeMap<u32, Arc<RecordSchema>>;

/// The TiDB extension's fields of a value record.
const EXTENSION: [&str; 3] = ["_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time"];

fn ids_of(raw: &Raw) -> impl Iterator<Item = u32> + '_ {
    [raw.key.as_deref(), raw.value.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(|b| codec::unframe(b).ok().map(|(id, _)| id))
}

/// Reads the schema of every id the messages name (nothing for the other protocols).
pub(super) async fn fetch_schemas(cfg: &KafkaConfig, raws: &[Raw]) -> Result<Schemas> {
    let mut out = Schemas::new();
    if cfg.protocol != KafkaProtocol::Avro {
        return Ok(out);
    }
    let url = cfg
        .schema_registry
        .as_ref()
        .ok_or_else(|| SinkError::Registry {
            what: "setup".into(),
            reason: "protocol=avro without schema-registry".into(),
            retryable: false,
        })?;
    let registry = Registry::new(url)?;
    for id in raws.iter().flat_map(ids_of) {
        if out.contains_key(&id) {
            continue;
        }
        let text = registry.schema(id).await?;
        let schema = codec::parse_record_schema(&text)
            .map_err(|e| SinkError::Codec(format!("schema {id}: {e}")))?;
        out.insert(id, Arc::new(schema));
    }
    Ok(out)
}

fn record<'a>(part: &'a [u8], schemas: &'a Schemas) -> Result<(&'a RecordSchema, Vec<Datum>)> {
    let (id, body) = codec::unframe(part)?;
    let schema = schemas
        .get(&id)
        .ok_or_else(|| SinkError::Codec(format!("avro: schema {id} was not read")))?;
    Ok((schema, codec::decode_record(schema, body)?))
}

/// The type text `build_schema` reads for a field (by its `tidb_type`).
fn type_text(f: &codec::FieldSchema) -> String {
    f.tidb_type
        .as_deref()
        .unwrap_or("text")
        .to_ascii_lowercase()
}

/// One avro message as a row event.
pub(super) fn decode(raw: &Raw, schemas: &Schemas) -> Result<Event> {
    let key = raw
        .key
        .as_deref()
        .ok_or_else(|| SinkError::Codec("avro: a message without its key".into()))?;
    let (key_schema, key_data) = record(key, schemas)?;
    let table = (key_schema.database.clone(), key_schema.table.clone());
    let keys: Vec<String> = key_schema.fields.iter().map(|f| f.column.clone()).collect();
    let Some(value) = raw.value.as_deref() else {
        // A tombstone: the delete of the key.
        let columns = key_schema
            .fields
            .iter()
            .map(|f| (f.column.clone(), type_text(f)))
            .collect();
        let before = key_schema
            .fields
            .iter()
            .zip(key_data)
            .map(|(f, d)| codec::column_value(f, d))
            .collect();
        return Ok(Event::Row {
            table,
            columns,
            keys,
            row: DecodedRow {
                kind: RowKind::Delete,
                commit_ts: raw.commit_ts,
                before: Some(before),
                after: None,
            },
        });
    };
    let (value_schema, data) = record(value, schemas)?;
    let mut columns = Vec::new();
    let mut after: Vec<Value> = Vec::new();
    let mut extension_ts = None;
    for (f, d) in value_schema.fields.iter().zip(data) {
        if EXTENSION.contains(&f.name.as_str()) {
            if let (true, Datum::Long(ts)) = (f.name == "_tidb_commit_ts", &d) {
                extension_ts = Some(*ts as u64);
            }
            continue;
        }
        columns.push((f.column.clone(), type_text(f)));
        after.push(codec::column_value(f, d));
    }
    Ok(Event::Row {
        table,
        columns,
        keys,
        // An insert or an update: the same upsert in safe mode.
        row: DecodedRow {
            kind: RowKind::Insert,
            commit_ts: raw.commit_ts.or(extension_ts),
            before: None,
            after: Some(after),
        },
    })
}
