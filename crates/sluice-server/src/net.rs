//! Node-to-node messages: each control message goes as JSON in `POST /internal/v1/message` to
//! the peer's advertised address, through one sender task per peer.
//!
//! Invariants: delivery is best effort and may drop (the control-plane protocols resend until
//! observed); each peer's queue is bounded by [`MAX_QUEUED_MESSAGES_PER_PEER`] (beyond it a
//! message is dropped, counted); messages to one peer keep their order.

use crate::client;
use serde::{Deserialize, Serialize};
use sluice_control::msg::Message;
use sluice_types::NodeId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub const MAX_QUEUED_MESSAGES_PER_PEER: usize = 1024;
/// A message not delivered within this long is dropped.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Serialize, Deserialize)]
pub struct Envelope {
    pub from: NodeId,
    /// The sender's incarnation (diagnostics).
    pub incarnation: u64,
    pub msg: Message,
}

#[derive(Default)]
pub struct Net {
    peers: BTreeMap<NodeId, mpsc::Sender<Envelope>>,
    /// Node id → advertised address (defaults to the id itself).
    pub addrs: BTreeMap<NodeId, String>,
    pub incarnation: u64,
    pub dropped: Arc<AtomicU64>,
}

impl Net {
    pub fn send(&mut self, to: &NodeId, from: NodeId, msg: Message) {
        let addr = self
            .addrs
            .get(to)
            .cloned()
            .unwrap_or_else(|| to.as_str().to_string());
        let tx = self.peers.entry(to.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(MAX_QUEUED_MESSAGES_PER_PEER);
            tokio::spawn(peer(addr, rx));
            tx
        });
        if tx
            .try_send(Envelope {
                from,
                incarnation: self.incarnation,
                msg,
            })
            .is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forget a peer (it left); its task ends when its queue is dropped.
    pub fn forget(&mut self, node: &NodeId) {
        self.peers.remove(node);
    }
}

async fn peer(addr: String, mut rx: mpsc::Receiver<Envelope>) {
    while let Some(env) = rx.recv().await {
        let Ok(body) = serde_json::to_vec(&env) else {
            continue;
        };
        match client::request(
            &addr,
            "POST",
            "/internal/v1/message",
            Some(&body),
            SEND_TIMEOUT,
        )
        .await
        {
            Ok(r) if r.status < 300 => {}
            Ok(r) => tracing::debug!(peer = %addr, status = r.status, "message refused"),
            Err(e) => tracing::debug!(peer = %addr, "message not delivered: {e}"),
        }
    }
}
