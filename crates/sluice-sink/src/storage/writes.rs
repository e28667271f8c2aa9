//! The storage sink's writes: the puts of data, index, schema, claim and `metadata` files.
//! [`Writes`] is cheap to clone, so a flush can run apart from its dispatcher's writer (a
//! detached flush, [`crate::runner::Backend::detach_flush`]) while the next rows are encoded.
//!
//! Invariants:
//! - a dispatcher's files are named in the order its buffers are flushed: its [`Naming`] (the
//!   next index per directory, the claims written) is held for the whole of a flush, and the
//!   runner runs one flush of a dispatcher at a time, so file indexes follow the rows' order;
//! - every put checks the fence immediately before it (see the module docs of `storage`);
//! - a data file is written before the index file that names it, and a table version's schema
//!   file (and, with a fence, the dispatcher's claim) before its first data file.

use super::{layout, Buf, MAX_NAME_PROBES};
use crate::error::{Result, SinkError};
use crate::fence::BoundFence;
use layout::TableDefinition;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sluice_types::{DispatcherId, TableSchema};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// What the puts of one sink share.
#[derive(Clone)]
pub(super) struct Writes {
    pub(super) store: Arc<dyn ObjectStore>,
    /// Data files' extension (`csv`, `json`).
    ext: &'static str,
    /// `file-index-width`.
    index_width: usize,
    /// Schema file paths known to exist.
    schemas: Arc<Mutex<BTreeSet<String>>>,
}

/// How one dispatcher names its files.
pub(super) struct Naming {
    pub(super) id: Option<DispatcherId>,
    /// With a write fence: the claim written before the first data file of each table
    /// directory (`<db>/<table>`) this dispatcher writes into.
    /// (A writer with a claim always names its files with its id.)
    pub(super) claim: Option<layout::Claim>,
    pub(super) claimed: BTreeSet<String>,
    /// Next data file index per directory, once known.
    pub(super) next_index: BTreeMap<String, u64>,
}

/// What a create-only put did.
enum Put {
    Created,
    /// The name exists (the store's error, for the message).
    Taken(object_store::Error),
}

fn is_already_exists(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::AlreadyExists { .. })
}

impl Writes {
    pub(super) fn new(store: Arc<dyn ObjectStore>, ext: &'static str, index_width: usize) -> Self {
        Writes {
            store,
            ext,
            index_width,
            schemas: Arc::new(Mutex::new(BTreeSet::new())),
        }
    }

    /// Creates `path` unless it exists; checks the fence immediately before the put.
    async fn put_create(&self, path: &str, bytes: PutPayload, fence: &BoundFence) -> Result<Put> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        fence.check(&format!("put {path}"))?;
        match self.store.put_opts(&Path::from(path), bytes, opts).await {
            Ok(_) => Ok(Put::Created),
            Err(e) if is_already_exists(&e) => Ok(Put::Taken(e)),
            Err(e) => Err(SinkError::store("put", path, e)),
        }
    }

    /// Writes `path`, replacing it; checks the fence immediately before the put.
    pub(super) async fn put_overwrite(
        &self,
        path: &str,
        bytes: Vec<u8>,
        fence: &BoundFence,
    ) -> Result<()> {
        fence.check(&format!("put {path}"))?;
        self.store
            .put(&Path::from(path), PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| SinkError::store("put", path, e))
    }

    /// Writes a schema file unless it is known to exist (an existing file of the same name has
    /// the same content: the name embeds version and checksum).
    pub(super) async fn ensure_definition(
        &self,
        def: &TableDefinition,
        fence: &BoundFence,
    ) -> Result<()> {
        let path = def.path();
        if self
            .schemas
            .lock()
            .map(|s| s.contains(&path))
            .unwrap_or(false)
        {
            return Ok(());
        }
        let body = serde_json::to_vec_pretty(def).map_err(|e| SinkError::Codec(e.to_string()))?;
        self.put_create(&path, PutPayload::from(body), fence)
            .await?;
        if let Ok(mut s) = self.schemas.lock() {
            s.insert(path);
        }
        Ok(())
    }

    /// Writes the dispatcher's claim into the table's directory before its first data file
    /// there (with a write fence only). A claim already there is the same record.
    async fn ensure_claim(
        &self,
        n: &mut Naming,
        schema: &TableSchema,
        fence: &BoundFence,
    ) -> Result<()> {
        let (Some(claim), Some(d)) = (&n.claim, n.id) else {
            return Ok(());
        };
        let table_dir = format!("{}/{}", schema.database, schema.name);
        if n.claimed.contains(&table_dir) {
            return Ok(());
        }
        let body = serde_json::to_vec_pretty(claim).map_err(|e| SinkError::Codec(e.to_string()))?;
        let path = layout::claim_path(schema, d);
        // Taken: this dispatcher claimed it before (a retried flush); the content is the same.
        self.put_create(&path, PutPayload::from(body), fence)
            .await?;
        n.claimed.insert(table_dir);
        Ok(())
    }

    async fn read_next_index(&self, dir: &str, id: Option<DispatcherId>) -> Result<u64> {
        let ipath = layout::index_path(dir, id);
        match self.store.get(&Path::from(ipath.as_str())).await {
            Ok(r) => {
                let bytes = r
                    .bytes()
                    .await
                    .map_err(|e| SinkError::store("get", ipath.as_str(), e))?;
                let text = String::from_utf8_lossy(&bytes);
                // A corrupt index only costs probes: start at 1 and skip taken names.
                Ok(layout::parse_data_name(text.trim())
                    .map(|n| n.index + 1)
                    .unwrap_or(1))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(1),
            Err(e) => Err(SinkError::store("get", ipath, e)),
        }
    }

    /// Writes every non-empty buffer of `bufs`, in order (see [`Writes::flush_buf`]).
    pub(super) async fn flush_bufs(
        &self,
        n: &mut Naming,
        bufs: Vec<Buf>,
        fence: &BoundFence,
    ) -> Result<()> {
        for b in bufs {
            if !b.is_empty() {
                self.flush_buf(n, b, fence).await?;
            }
        }
        Ok(())
    }

    /// One buffer as the next data file of its directory: schema file and claim first, then the
    /// data file under the next free name, then the index file naming it.
    async fn flush_buf(&self, n: &mut Naming, buf: Buf, fence: &BoundFence) -> Result<()> {
        let def = TableDefinition::for_table(&buf.schema, buf.schema.version, "", None);
        self.ensure_definition(&def, fence).await?;
        self.ensure_claim(n, &buf.schema, fence).await?;
        let dir = layout::data_dir(&buf.schema, buf.partition, buf.date.as_deref());
        let mut index = match n.next_index.get(&dir) {
            Some(i) => *i,
            None => self.read_next_index(&dir, n.id).await?,
        };
        // Shared, not copied, by every attempt at a name; counted as buffered until written.
        let (body, _charge) = buf.payload();
        let mut probes = 0;
        let name = loop {
            let name = layout::data_name(n.id, index, self.index_width, self.ext);
            let path = format!("{dir}/{name}");
            match self.put_create(&path, body.clone(), fence).await? {
                Put::Created => break name,
                Put::Taken(e) => {
                    probes += 1;
                    if probes >= MAX_NAME_PROBES {
                        return Err(SinkError::store("put", path, e));
                    }
                    index += 1;
                }
            }
        };
        n.next_index.insert(dir.clone(), index + 1);
        self.put_overwrite(
            &layout::index_path(&dir, n.id),
            format!("{name}\n").into_bytes(),
            fence,
        )
        .await
    }
}
