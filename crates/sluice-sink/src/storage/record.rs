//! What a storage layout holds of the DDLs it applied: the versions of its schema files
//! (`<db>/meta/schema_<ver>_<sum>.json` for a database-level DDL, `<db>/<table>/meta/…` for a
//! table version). A schema file is written by its DDL (before the DDL's ack) or by the first
//! rows of that version (which come after the DDL), so a version on file is a DDL applied.
//!
//! The listing walks only directory levels (one request per database and per table), never
//! the data files.

use super::{layout, Storage};
use crate::error::{Result, SinkError};
use crate::DdlRecord;
use object_store::path::Path;
use object_store::ObjectStore;
use sluice_types::Ts;
use std::collections::BTreeSet;

/// The name of the directory holding schema files, at database and at table level.
const META_DIR: &str = "meta";

impl Storage {
    /// Every schema-file version above `after`, finished (see the module docs).
    pub(super) async fn recorded_versions(&self, after: Ts) -> Result<Vec<DdlRecord>> {
        let mut versions = BTreeSet::new();
        let store = self.store.as_ref();
        for db in dirs(store, None).await? {
            for sub in dirs(store, Some(&db)).await? {
                if sub.filename() == Some(META_DIR) {
                    versions.extend(schema_versions(store, &sub).await?);
                } else {
                    versions.extend(schema_versions(store, &sub.clone().join(META_DIR)).await?);
                }
            }
        }
        Ok(versions
            .into_iter()
            .filter(|v| *v > after)
            .map(|commit_ts| DdlRecord {
                commit_ts,
                finished: true,
            })
            .collect())
    }
}

/// The directories directly under `at`.
async fn dirs(store: &dyn ObjectStore, at: Option<&Path>) -> Result<Vec<Path>> {
    let shown = at.map(|p| p.to_string()).unwrap_or_default();
    let listed = store
        .list_with_delimiter(at)
        .await
        .map_err(|e| SinkError::store("list", shown, e))?;
    Ok(listed.common_prefixes)
}

/// The versions of the schema files directly in `meta` (none when it does not exist).
async fn schema_versions(store: &dyn ObjectStore, meta: &Path) -> Result<Vec<Ts>> {
    let listed = match store.list_with_delimiter(Some(meta)).await {
        Ok(l) => l,
        Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(SinkError::store("list", meta.to_string(), e)),
    };
    Ok(listed
        .objects
        .iter()
        .filter_map(|o| o.location.filename())
        .filter_map(layout::parse_schema_name)
        .map(|(v, _)| v)
        .collect())
}
