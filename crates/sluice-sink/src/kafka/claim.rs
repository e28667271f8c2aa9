//! Claim-check for large messages (`large-message-handle-option=claim-check` with
//! `claim-check-storage-uri=file://…|s3://…`, TiCDC's names): a canal-json row message larger
//! than `max-message-bytes` is written whole to the storage location, and a small reference
//! message carrying its location (`_tidb.claimCheckLocation`) is sent in its place.
//!
//! Invariants:
//! - the stored object is written (and acknowledged by the store) before its reference is
//!   produced, so a consumer that sees a reference can always read the message;
//! - object names are a pure function of the message (`<db>.<table>.<commit ts>.<crc32>.json`):
//!   a replay writes the same object again, harmlessly;
//! - a consumer reads the object by its name under its own `claim-check-storage-uri`.

use crate::error::{Result, SinkError};
use crate::storage::layout::crc32;
use crate::uri::StorageConfig;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_types::{RowEvent, RowKind, TableSchema};
use std::sync::Arc;

/// Where large messages are kept.
pub struct ClaimCheck {
    store: Arc<dyn ObjectStore>,
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl ClaimCheck {
    pub fn open(cfg: &StorageConfig) -> Result<ClaimCheck> {
        Ok(ClaimCheck {
            store: crate::storage::build_store(cfg)?,
        })
    }

    /// Stores a message; returns its name (the location's last part).
    pub async fn put(&self, schema: &TableSchema, row: &RowEvent, value: &[u8]) -> Result<String> {
        let name = format!(
            "{}.{}.{}.{:08x}.json",
            schema.database,
            schema.name,
            row.commit_ts,
            crc32(value)
        );
        self.store
            .put(&Path::from(name.as_str()), value.to_vec().into())
            .await
            .map_err(|e| SinkError::store("put", &name, e))?;
        Ok(name)
    }

    /// Reads a stored message back by the location a reference carries.
    pub async fn get(&self, location: &str) -> Result<Vec<u8>> {
        let name = location.rsplit('/').next().unwrap_or(location);
        let got = self
            .store
            .get(&Path::from(name))
            .await
            .map_err(|e| SinkError::store("get", name, e))?;
        Ok(got
            .bytes()
            .await
            .map_err(|e| SinkError::store("get", name, e))?
            .to_vec())
    }
}

/// The small canal-json message sent in place of a stored one.
pub fn reference_message(schema: &TableSchema, row: &RowEvent, location: &str) -> String {
    let ty = match row.kind {
        RowKind::Insert => "INSERT",
        RowKind::Update => "UPDATE",
        RowKind::Delete => "DELETE",
    };
    let pk: Vec<String> = schema
        .key_columns
        .iter()
        .filter_map(|k| schema.columns.get(*k))
        .map(|c| json_str(&c.name))
        .collect();
    format!(
        "{{\"id\":0,\"database\":{},\"table\":{},\"pkNames\":[{}],\"isDdl\":false,\"type\":\"{ty}\",\"es\":{ms},\"ts\":{ms},\"sql\":\"\",\"sqlType\":null,\"mysqlType\":null,\"old\":null,\"data\":null,\"_tidb\":{{\"commitTs\":{},\"onlyHandleKey\":true,\"claimCheckLocation\":{}}}}}",
        json_str(&schema.database),
        json_str(&schema.name),
        pk.join(","),
        row.commit_ts,
        json_str(location),
        ms = row.commit_time_ms,
    )
}

/// The location a reference message carries, if it is one.
pub fn location_of(value: &[u8]) -> Option<String> {
    // Cheap test first: most messages are not references.
    let needle = b"claimCheckLocation";
    if !value.windows(needle.len()).any(|w| w == needle) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    v.pointer("/_tidb/claimCheckLocation")
        .and_then(|l| l.as_str())
        .map(str::to_string)
}
