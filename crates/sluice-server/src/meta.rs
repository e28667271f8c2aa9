//! The embedded meta store of a single-node deployment: keys with modification revisions, one
//! store revision that grows with every successful write, compare-and-swap transactions and
//! prefix reads — the contract `sluice_control::meta` describes, persisted in one file of the
//! data dir.
//!
//! Invariants:
//! - a transaction is all or nothing: it is applied to a copy, the copy is written to a
//!   temporary file, fsynced and renamed over the old file, and only then becomes the state;
//!   a crash at any point leaves either the old or the new state on disk;
//! - revisions never go backwards, also across restarts (the revision is persisted with the keys);
//! - a failed compare changes nothing and does not bump the revision.

use crate::error::ServerError;
use serde::{Deserialize, Serialize};
use sluice_control::meta::{Compare, Kv, MetaOp, MetaResult};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Entry {
    value: Vec<u8>,
    mod_revision: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    revision: u64,
    kvs: BTreeMap<String, Entry>,
}

pub struct EmbeddedMeta {
    path: PathBuf,
    state: State,
}

impl EmbeddedMeta {
    pub fn open(dir: &Path) -> Result<EmbeddedMeta, ServerError> {
        let path = dir.join("meta.json");
        let state = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                ServerError::Meta(format!(
                    "{} is corrupt ({e}); restore it from a backup",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => {
                return Err(ServerError::Meta(format!(
                    "reading {}: {e}",
                    path.display()
                )))
            }
        };
        Ok(EmbeddedMeta { path, state })
    }

    pub fn revision(&self) -> u64 {
        self.state.revision
    }

    pub fn get(&self, key: &str) -> Option<(Vec<u8>, u64)> {
        self.state
            .kvs
            .get(key)
            .map(|e| (e.value.clone(), e.mod_revision))
    }

    fn persist(&self, st: &State) -> Result<(), ServerError> {
        let tmp = self.path.with_extension("json.tmp");
        let data = serde_json::to_vec(st).map_err(|e| ServerError::Meta(e.to_string()))?;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// Unconditional put (used by the shell for its own keys, e.g. the election key).
    pub fn put(&mut self, key: &str, value: Vec<u8>) -> Result<u64, ServerError> {
        match self.apply(&MetaOp::Txn {
            compares: vec![],
            puts: vec![(key.to_string(), value)],
            deletes: vec![],
        })? {
            MetaResult::Txn { revision, .. } => Ok(revision),
            _ => Err(ServerError::Meta("unexpected result".into())),
        }
    }

    pub fn apply(&mut self, op: &MetaOp) -> Result<MetaResult, ServerError> {
        match op {
            MetaOp::Get { prefix } => {
                let kvs = self
                    .state
                    .kvs
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(prefix.as_str()))
                    .map(|(k, e)| Kv {
                        key: k.clone(),
                        value: e.value.clone(),
                        mod_revision: e.mod_revision,
                    })
                    .collect();
                Ok(MetaResult::Got {
                    kvs,
                    revision: self.state.revision,
                })
            }
            MetaOp::Txn {
                compares,
                puts,
                deletes,
            } => {
                for c in compares {
                    let Compare::ModRevision { key, rev } = c;
                    let have = self.state.kvs.get(key).map(|e| e.mod_revision).unwrap_or(0);
                    if have != *rev {
                        return Ok(MetaResult::Txn {
                            succeeded: false,
                            revision: self.state.revision,
                        });
                    }
                }
                if puts.is_empty() && deletes.is_empty() {
                    return Ok(MetaResult::Txn {
                        succeeded: true,
                        revision: self.state.revision,
                    });
                }
                let mut next = self.state.clone();
                next.revision += 1;
                let rev = next.revision;
                for (k, v) in puts {
                    next.kvs.insert(
                        k.clone(),
                        Entry {
                            value: v.clone(),
                            mod_revision: rev,
                        },
                    );
                }
                for k in deletes {
                    next.kvs.remove(k);
                }
                self.persist(&next)?;
                self.state = next;
                Ok(MetaResult::Txn {
                    succeeded: true,
                    revision: rev,
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cas_and_restart() {
        let dir = std::env::temp_dir().join(format!("sluice-meta-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = EmbeddedMeta::open(&dir).unwrap();
        let r1 = m.put("/a", b"1".to_vec()).unwrap();
        let bad = m
            .apply(&MetaOp::Txn {
                compares: vec![Compare::ModRevision {
                    key: "/a".into(),
                    rev: r1 + 5,
                }],
                puts: vec![("/a".into(), b"2".to_vec())],
                deletes: vec![],
            })
            .unwrap();
        assert_eq!(
            bad,
            MetaResult::Txn {
                succeeded: false,
                revision: r1
            }
        );
        let ok = m
            .apply(&MetaOp::Txn {
                compares: vec![Compare::ModRevision {
                    key: "/a".into(),
                    rev: r1,
                }],
                puts: vec![("/a".into(), b"2".to_vec())],
                deletes: vec![],
            })
            .unwrap();
        assert_eq!(
            ok,
            MetaResult::Txn {
                succeeded: true,
                revision: r1 + 1
            }
        );
        drop(m);
        let m = EmbeddedMeta::open(&dir).unwrap();
        assert_eq!(m.get("/a"), Some((b"2".to_vec(), r1 + 1)));
        assert_eq!(m.revision(), r1 + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
