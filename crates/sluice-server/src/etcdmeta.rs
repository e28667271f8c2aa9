//! The cluster meta store on etcd: node membership by leased keys, the coordinator election, and
//! the control plane's meta operations as etcd transactions.
//!
//! - Each node holds a lease of `lease-ttl-secs`, kept alive every third of the TTL, and
//!   registers `/sluice/node/<id>` = `{addr, incarnation}` under it.
//! - Election: the first node to create `/sluice/coordinator` (compare create revision 0) under
//!   its lease leads; the key's mod revision is the leadership revision the control plane fences
//!   its writes with. The key dies with the lease (crash) or is deleted on resignation (SIGTERM).
//! - Membership and leadership are polled every [`POLL_INTERVAL`] and handed to the shell; the
//!   changefeed epochs are read in the same poll (for `LoadSchema`'s `persisted_epoch`).
//! - Meta operations run one at a time, in order, on one task (queue bound
//!   [`MAX_QUEUED_META_OPS`]); an etcd error answers `MetaResult::Unavailable`.
//!
//! Invariant (fencing): a node that has not renewed its lease for `TTL - 2 ticks` drops all of its
//! state ([`crate::shell::Shell::reset`]) before etcd can expire the lease and let another node
//! take its work, then rejoins as a new incarnation with a new lease.

use crate::error::ServerError;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use sluice_control::coordinator::ChangefeedInfo;
use sluice_control::meta::{keys, Compare as MetaCompare, Kv, MetaOp, MetaResult};
use sluice_control::Input;
use sluice_types::{ChangefeedId, Epoch, NodeId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
pub const MAX_QUEUED_META_OPS: usize = 1024;
/// Timeout of one etcd call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub addr: String,
    pub incarnation: u64,
}

/// What the poller last saw.
#[derive(Default)]
pub struct View {
    pub alive: BTreeMap<NodeId, NodeRecord>,
    pub leader: Option<(NodeId, u64)>,
    pub epochs: BTreeMap<ChangefeedId, Epoch>,
    /// The smallest persisted changefeed checkpoint (`None`: no changefeed), for event-store GC.
    pub min_checkpoint: Option<u64>,
    pub refreshed: Option<Instant>,
    /// When the lease was last renewed (or granted).
    pub renewed: Option<Instant>,
    pub lease: i64,
    /// The incarnation registered under the current lease.
    pub incarnation: u64,
    /// The shell asks for a new lease (after fencing itself) with this incarnation.
    pub want_incarnation: u64,
    pub resign: bool,
}

pub struct EtcdMeta {
    pub client: Client,
    pub view: Arc<Mutex<View>>,
    ops: mpsc::Sender<(u64, MetaOp)>,
    pub ttl: Duration,
}

fn lock(v: &Mutex<View>) -> std::sync::MutexGuard<'_, View> {
    v.lock().unwrap_or_else(|p| p.into_inner())
}

fn node_key(id: &NodeId) -> String {
    format!("{}{}", keys::NODE, id.as_str())
}

impl EtcdMeta {
    pub async fn connect(
        endpoints: &[String],
        node: NodeId,
        addr: String,
        incarnation: u64,
        ttl_secs: u64,
        results: mpsc::UnboundedSender<Input>,
    ) -> Result<EtcdMeta, ServerError> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(CALL_TIMEOUT);
        let client = tokio::time::timeout(
            Duration::from_secs(10),
            Client::connect(endpoints, Some(opts)),
        )
        .await
        .map_err(|_| ServerError::Meta(format!("etcd {endpoints:?} did not answer within 10 s")))?
        .map_err(|e| ServerError::Meta(format!("cannot connect to etcd {endpoints:?}: {e}")))?;
        let view = Arc::new(Mutex::new(View {
            want_incarnation: incarnation,
            ..Default::default()
        }));
        let ttl = Duration::from_secs(ttl_secs);
        let (tx, rx) = mpsc::channel(MAX_QUEUED_META_OPS);
        let m = EtcdMeta {
            client: client.clone(),
            view: view.clone(),
            ops: tx,
            ttl,
        };
        m.register(node.clone(), addr.clone(), incarnation).await?;
        tokio::spawn(keepalive(
            client.clone(),
            view.clone(),
            node.clone(),
            addr,
            ttl,
        ));
        tokio::spawn(poll(client.clone(), view, node));
        tokio::spawn(run_ops(client, rx, results));
        Ok(m)
    }

    async fn register(
        &self,
        node: NodeId,
        addr: String,
        incarnation: u64,
    ) -> Result<(), ServerError> {
        let lease = grant_and_register(&self.client, &node, &addr, incarnation, self.ttl)
            .await
            .map_err(ServerError::Meta)?;
        let mut v = lock(&self.view);
        v.lease = lease;
        v.incarnation = incarnation;
        v.renewed = Some(Instant::now());
        Ok(())
    }

    /// Queue an operation; its result comes back as `Input::MetaResult`. False: the queue is
    /// full (the caller answers `Unavailable`).
    pub fn submit(&self, req: u64, op: MetaOp) -> bool {
        self.ops.try_send((req, op)).is_ok()
    }

    pub fn epoch_if_fresh(&self, cf: &ChangefeedId, since: Instant) -> Option<Epoch> {
        let v = lock(&self.view);
        match v.refreshed {
            Some(r) if r > since => Some(v.epochs.get(cf).copied().unwrap_or_default()),
            _ => None,
        }
    }
}

/// Delete the election key if it is ours and revoke the lease (SIGTERM).
pub async fn resign_with(client: Client, view: Arc<Mutex<View>>, node: &NodeId) {
    {
        lock(&view).resign = true;
        let mut c = client;
        let txn = Txn::new()
            .when(vec![Compare::value(
                keys::COORDINATOR,
                CompareOp::Equal,
                node.as_str(),
            )])
            .and_then(vec![TxnOp::delete(keys::COORDINATOR, None)]);
        let _ = c.txn(txn).await;
        let lease = lock(&view).lease;
        let _ = c.lease_revoke(lease).await;
        tracing::info!("resigned and revoked the lease");
    }
}

async fn grant_and_register(
    client: &Client,
    node: &NodeId,
    addr: &str,
    incarnation: u64,
    ttl: Duration,
) -> Result<i64, String> {
    let mut c = client.clone();
    let lease = c
        .lease_grant(ttl.as_secs() as i64, None)
        .await
        .map_err(|e| format!("lease grant: {e}"))?
        .id();
    let rec = serde_json::to_vec(&NodeRecord {
        addr: addr.to_string(),
        incarnation,
    })
    .map_err(|e| e.to_string())?;
    c.put(
        node_key(node),
        rec,
        Some(PutOptions::new().with_lease(lease)),
    )
    .await
    .map_err(|e| format!("registering {node}: {e}"))?;
    Ok(lease)
}

async fn keepalive(
    client: Client,
    view: Arc<Mutex<View>>,
    node: NodeId,
    addr: String,
    ttl: Duration,
) {
    let period = ttl / 3;
    loop {
        let (lease, want, have, resign) = {
            let v = lock(&view);
            (v.lease, v.want_incarnation, v.incarnation, v.resign)
        };
        if resign {
            return;
        }
        if want != have {
            // The shell fenced itself: a new lease and a new incarnation.
            match grant_and_register(&client, &node, &addr, want, ttl).await {
                Ok(l) => {
                    let mut v = lock(&view);
                    v.lease = l;
                    v.incarnation = want;
                    v.renewed = Some(Instant::now());
                    tracing::info!(incarnation = want, "rejoined with a new lease");
                }
                Err(e) => tracing::warn!("cannot rejoin: {e}"),
            }
            tokio::time::sleep(period).await;
            continue;
        }
        let mut c = client.clone();
        let renewed = async {
            let (mut keeper, mut stream) = c.lease_keep_alive(lease).await.ok()?;
            keeper.keep_alive().await.ok()?;
            let r = stream.message().await.ok()??;
            Some(r.ttl())
        };
        match tokio::time::timeout(CALL_TIMEOUT, renewed).await {
            Ok(Some(t)) if t > 0 => lock(&view).renewed = Some(Instant::now()),
            Ok(Some(_)) => tracing::warn!("lease {lease:x} expired"),
            _ => tracing::warn!("lease {lease:x} not renewed (etcd unreachable?)"),
        }
        tokio::time::sleep(period).await;
    }
}

async fn poll(client: Client, view: Arc<Mutex<View>>, node: NodeId) {
    loop {
        tokio::time::sleep(POLL_INTERVAL).await;
        let (lease, resign) = {
            let v = lock(&view);
            (v.lease, v.resign)
        };
        if resign {
            return;
        }
        let mut c = client.clone();
        let started = Instant::now();
        let once = async {
            let nodes = c
                .get(keys::NODE, Some(GetOptions::new().with_prefix()))
                .await
                .ok()?;
            let mut alive = BTreeMap::new();
            for kv in nodes.kvs() {
                let id = String::from_utf8_lossy(kv.key())
                    .trim_start_matches(keys::NODE)
                    .to_string();
                if let Ok(r) = serde_json::from_slice::<NodeRecord>(kv.value()) {
                    alive.insert(NodeId::new(id), r);
                }
            }
            let mut leader = None;
            let lr = c.get(keys::COORDINATOR, None).await.ok()?;
            if let Some(kv) = lr.kvs().first() {
                leader = Some((
                    NodeId::new(String::from_utf8_lossy(kv.value()).to_string()),
                    kv.mod_revision() as u64,
                ));
            } else if alive.contains_key(&node) {
                // Campaign: create the key under our lease if nobody holds it.
                let txn = Txn::new()
                    .when(vec![Compare::create_revision(
                        keys::COORDINATOR,
                        CompareOp::Equal,
                        0,
                    )])
                    .and_then(vec![TxnOp::put(
                        keys::COORDINATOR,
                        node.as_str(),
                        Some(PutOptions::new().with_lease(lease)),
                    )]);
                if let Ok(r) = c.txn(txn).await {
                    if r.succeeded() {
                        let rev = r.header().map(|h| h.revision()).unwrap_or(0) as u64;
                        leader = Some((node.clone(), rev));
                        tracing::info!(rev, "elected coordinator");
                    }
                }
            }
            let infos = c
                .get(keys::CHANGEFEED_INFO, Some(GetOptions::new().with_prefix()))
                .await
                .ok()?;
            let mut epochs = BTreeMap::new();
            for kv in infos.kvs() {
                if let Ok(i) = serde_json::from_slice::<ChangefeedInfo>(kv.value()) {
                    epochs.insert(i.id.clone(), Epoch(i.epoch));
                }
            }
            let statuses = c
                .get(
                    keys::CHANGEFEED_STATUS,
                    Some(GetOptions::new().with_prefix()),
                )
                .await
                .ok()?;
            let min_cp = statuses
                .kvs()
                .iter()
                .filter_map(|kv| {
                    sluice_control::coordinator::ChangefeedStatusRecord::checkpoint_of(kv.value())
                })
                .min();
            Some((alive, leader, epochs, min_cp))
        };
        if let Ok(Some((alive, leader, epochs, min_cp))) =
            tokio::time::timeout(CALL_TIMEOUT, once).await
        {
            let mut v = lock(&view);
            v.min_checkpoint = min_cp;
            v.alive = alive;
            v.leader = leader;
            v.epochs = epochs;
            v.refreshed = Some(started);
        }
    }
}

async fn run_ops(
    client: Client,
    mut rx: mpsc::Receiver<(u64, MetaOp)>,
    results: mpsc::UnboundedSender<Input>,
) {
    while let Some((req, op)) = rx.recv().await {
        let mut c = client.clone();
        let result = match tokio::time::timeout(CALL_TIMEOUT, apply(&mut c, &op)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::warn!("meta operation failed: {e}");
                MetaResult::Unavailable
            }
            Err(_) => MetaResult::Unavailable,
        };
        if results.send(Input::MetaResult { req, result }).is_err() {
            return;
        }
    }
}

async fn apply(c: &mut Client, op: &MetaOp) -> Result<MetaResult, etcd_client::Error> {
    match op {
        MetaOp::Get { prefix } => {
            let r = c
                .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
                .await?;
            let revision = r.header().map(|h| h.revision()).unwrap_or(0) as u64;
            let kvs = r
                .kvs()
                .iter()
                .map(|kv| Kv {
                    key: String::from_utf8_lossy(kv.key()).to_string(),
                    value: kv.value().to_vec(),
                    mod_revision: kv.mod_revision() as u64,
                })
                .collect();
            Ok(MetaResult::Got { kvs, revision })
        }
        MetaOp::Txn {
            compares,
            puts,
            deletes,
        } => {
            let cmps: Vec<Compare> = compares
                .iter()
                .map(|MetaCompare::ModRevision { key, rev }| {
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, *rev as i64)
                })
                .collect();
            let mut ops: Vec<TxnOp> = puts
                .iter()
                .map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None))
                .collect();
            ops.extend(deletes.iter().map(|k| TxnOp::delete(k.as_str(), None)));
            let r = c.txn(Txn::new().when(cmps).and_then(ops)).await?;
            let revision = r.header().map(|h| h.revision()).unwrap_or(0) as u64;
            Ok(MetaResult::Txn {
                succeeded: r.succeeded(),
                revision,
            })
        }
    }
}
