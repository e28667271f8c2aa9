//! Helpers shared by the sink's integration tests.
#![allow(dead_code)] // each test binary uses its own share

use futures::TryStreamExt;
use object_store::ObjectStore;
use std::sync::Arc;

/// Every object's path in `store`, sorted.
pub async fn list(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    let mut v: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    v.sort();
    v
}
