//! The meta store as the control plane sees it: keys, compare-and-swap transactions and prefix
//! reads (etcd in a cluster, an embedded store on one node, a model in the simulator), and the
//! layout of the keys: the coordinator owns every key but a changefeed's requests key, which its
//! current maintainer writes (fenced by the info key's revision at the maintainer's epoch; see
//! `maintainer::requests`).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compare {
    /// The key's last modification revision equals this (0: the key does not exist).
    ModRevision { key: String, rev: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaOp {
    Get {
        prefix: String,
    },
    Txn {
        compares: Vec<Compare>,
        puts: Vec<(String, Vec<u8>)>,
        deletes: Vec<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaResult {
    Got {
        kvs: Vec<Kv>,
        revision: u64,
    },
    /// `revision` is the store's revision after the transaction (when it succeeded).
    Txn {
        succeeded: bool,
        revision: u64,
    },
    /// The store could not be reached; the operation may or may not have happened.
    Unavailable,
}

/// Key layout.
pub mod keys {
    pub const ROOT: &str = "/sluice/";
    pub const CHANGEFEED_INFO: &str = "/sluice/changefeed/info/";
    pub const CHANGEFEED_STATUS: &str = "/sluice/changefeed/status/";
    /// Per changefeed: the accepted table requests not finished yet and the tables split by a
    /// user (`maintainer::requests::PersistedRequests`).
    pub const CHANGEFEED_REQUESTS: &str = "/sluice/changefeed/requests/";
    pub const CORDON: &str = "/sluice/cordon/";
    pub const NODE: &str = "/sluice/node/";
    pub const COORDINATOR: &str = "/sluice/coordinator";

    pub fn info(cf: &str) -> String {
        format!("{CHANGEFEED_INFO}{cf}")
    }
    pub fn status(cf: &str) -> String {
        format!("{CHANGEFEED_STATUS}{cf}")
    }
    pub fn requests(cf: &str) -> String {
        format!("{CHANGEFEED_REQUESTS}{cf}")
    }
    pub fn cordon(node: &str) -> String {
        format!("{CORDON}{node}")
    }
}
