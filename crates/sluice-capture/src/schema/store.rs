//! Persistence of a [`SchemaHistory`]: JSON, and the [`SchemaStore`] trait the server
//! implements over its meta store ([`FileSchemaStore`] writes one file atomically).

use super::SchemaHistory;
use crate::error::{CaptureError, Result};
use std::path::Path;

/// A boxed future, so [`SchemaStore`] can be implemented over async clients (etcd) and used as
/// `dyn SchemaStore`.
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'a>>;

/// Persistence of a schema history (the server implements it over its meta store).
pub trait SchemaStore: Send + Sync {
    fn load(&self) -> StoreFuture<'_, Option<SchemaHistory>>;
    fn save<'a>(&'a self, history: &'a SchemaHistory) -> StoreFuture<'a, ()>;
}

/// A [`SchemaStore`] in one JSON file, replaced atomically (write + rename).
pub struct FileSchemaStore(pub std::path::PathBuf);

impl FileSchemaStore {
    pub fn load_sync(&self) -> Result<Option<SchemaHistory>> {
        match std::fs::read(&self.0) {
            Ok(b) => SchemaHistory::from_json(&b).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CaptureError::Storage(format!(
                "reading {}: {e}",
                self.0.display()
            ))),
        }
    }

    pub fn save_sync(&self, history: &SchemaHistory) -> Result<()> {
        let tmp = self.0.with_extension("tmp");
        let data = history.to_json()?;
        std::fs::write(&tmp, data)
            .map_err(|e| CaptureError::Storage(format!("writing {}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &self.0)
            .map_err(|e| CaptureError::Storage(format!("renaming to {}: {e}", self.0.display())))
    }
}

impl SchemaStore for FileSchemaStore {
    fn load(&self) -> StoreFuture<'_, Option<SchemaHistory>> {
        Box::pin(async move { self.load_sync() })
    }
    fn save<'a>(&'a self, history: &'a SchemaHistory) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.save_sync(history) })
    }
}

impl SchemaHistory {
    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map_err(|e| CaptureError::Storage(format!("serializing the schema history: {e}")))
    }

    pub fn from_json(b: &[u8]) -> Result<SchemaHistory> {
        serde_json::from_slice(b)
            .map_err(|e| CaptureError::Storage(format!("parsing the schema history: {e}")))
    }

    /// Loads from a file written by [`FileSchemaStore`].
    pub fn load(path: &Path) -> Result<Option<SchemaHistory>> {
        FileSchemaStore(path.to_path_buf()).load_sync()
    }
}
