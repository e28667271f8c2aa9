//! The coordinator: elected through the meta store, it owns the changefeed lifecycle (create,
//! pause, resume, remove, update, error with backoff, failed), places one maintainer per
//! changefeed on a live node, and persists checkpoints.
//!
//! Invariants kept here:
//! - **epoch**: before every placement of a maintainer the changefeed's epoch is bumped with a
//!   compare-and-swap on the changefeed's info key; so every maintainer instance has an epoch no
//!   other instance ever had, and epochs only grow.
//! - **leadership fencing**: every write compares the election key's revision with the one this
//!   coordinator won; a deposed coordinator's writes fail.
//! - **checkpoint never backwards**: only a report from the current maintainer (node and epoch)
//!   counts, and only a larger value is written.
//! - **cascade stops are fenced too**: pausing, removing or restarting a changefeed bumps the
//!   epoch and closes dispatchers with that newer epoch, so the old maintainer can do nothing more.
//! - **an error acts once**: a maintainer repeats its error in every status until it stops; only
//!   the current maintainer's counts, and at most once per maintainer epoch (one restart, one step
//!   towards `MAX_ERROR_RETRIES`).
//! - **no restart without a close**: an error is recorded first and closed after (fenced by a new
//!   epoch, every node confirming); only a close that finished counts, and a coordinator that
//!   loads a changefeed in `error` or `failed` state closes it again first (its predecessor may
//!   have gone before the close). Otherwise the next maintainer would adopt the failed dispatcher
//!   and its one error would restart the changefeed again.
//! - **the store is not behind**: a state this coordinator acts on but could not write (the store
//!   was unreachable) is written again before anything else of that changefeed, so a successor
//!   never finds a pause or an error undone.
//!
//! Layout: this file holds the types, the load and the views; `Coordinator`'s other `impl`
//! blocks are one concern each: `meta_result.rs` (store results), `status.rs` (maintainer
//! reports, checkpoint, errors), `placement.rs` (info writes, node choice, epoch bumps),
//! `requests.rs` (user requests), `progress.rs` (driving each changefeed to its state) and
//! `tick.rs` (resends, drains, settings).

use crate::config::{
    ChangefeedConfig, COORDINATOR_STALL_MS, MAINTAINER_LOST_MS, MAX_ERROR_BACKOFF_MS,
    MAX_ERROR_RETRIES, MIN_ERROR_BACKOFF_MS, RESEND_MS,
};
use crate::io::{Effect, TraceEvent, UserRequest};
use crate::meta::{keys, Compare, Kv, MetaOp, MetaResult};
use crate::msg::{MaintainerState, MaintainerStatus, Message, TableRequest};
use serde::{Deserialize, Serialize};
use sluice_types::{ChangefeedId, Epoch, Millis, NodeId, Ts};
use std::collections::{BTreeMap, BTreeSet};

mod meta_result;
mod placement;
mod progress;
mod requests;
mod status;
mod tick;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedState {
    Normal,
    Paused,
    /// Stopped after an error; restarted after a backoff.
    Error,
    /// Too many errors; needs a resume.
    Failed,
    Removed,
}

/// What the meta store keeps per changefeed (the info key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangefeedInfo {
    pub id: ChangefeedId,
    pub config: ChangefeedConfig,
    pub state: FeedState,
    pub epoch: u64,
    pub error: Option<String>,
    pub restarts: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangefeedStatusRecord {
    pub checkpoint_ts: Ts,
}

impl ChangefeedStatusRecord {
    /// The checkpoint a stored status record holds (for readers of the meta store that need
    /// the persisted checkpoints, e.g. a node's event-store GC); `None` if it is not one.
    pub fn checkpoint_of(value: &[u8]) -> Option<Ts> {
        serde_json::from_slice::<ChangefeedStatusRecord>(value)
            .ok()
            .map(|r| r.checkpoint_ts)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Placement {
    None,
    /// Epoch bump in flight, then `AddMaintainer` to this node.
    Bumping {
        node: NodeId,
        purpose: BumpPurpose,
    },
    /// `AddMaintainer` sent; waiting for a working, bootstrapped report.
    Added {
        node: NodeId,
        epoch: Epoch,
        last_sent: Millis,
    },
    Running {
        node: NodeId,
        epoch: Epoch,
    },
    /// Non-cascade stop of the maintainer (a move): then place on `then`.
    Moving {
        node: NodeId,
        epoch: Epoch,
        to: NodeId,
        last_sent: Millis,
    },
    /// Closing every dispatcher with a bumped epoch (pause, remove, error).
    Closing {
        epoch: Epoch,
        pending: BTreeSet<NodeId>,
        last_sent: Millis,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum BumpPurpose {
    Place,
    Close,
}

#[derive(Clone, Debug)]
struct Feed {
    info: ChangefeedInfo,
    info_rev: u64,
    checkpoint: Ts,
    /// Highest checkpoint reported by the current maintainer (may be ahead of `checkpoint`).
    reported: Ts,
    /// Highest resolved ts reported by the current maintainer.
    resolved: Ts,
    writing_checkpoint: bool,
    placement: Placement,
    /// The maintainer to stop (non-cascade) while closing.
    old_maintainer: Option<(NodeId, Epoch)>,
    meta_busy: bool,
    backoff_until: Millis,
    errors_in_row: u32,
    /// The newest maintainer epoch whose error was acted on (each epoch's error counts once).
    errored_epoch: Epoch,
    pending_state: Option<FeedState>,
    table_requests: Vec<TableRequest>,
    /// A close (with a bumped epoch) finished since the last state request.
    closed_once: bool,
    /// `info` holds a change the meta store does not have yet (its write did not get through);
    /// written again until it lands or a conflict reloads the stored one.
    info_unsaved: bool,
    /// The incarnation of the node the maintainer was placed on: a restarted node lost it.
    placed_inc: u64,
    /// When the placed maintainer last reported (or was placed).
    last_report: Millis,
    /// The current maintainer's last reported warning (not persisted: it describes now).
    warning: Option<String>,
    /// The snapshot copy as the maintainer last reported it, and the rows copied per second
    /// (from reports at least a second apart: rows, at, rate).
    snapshot: Option<crate::msg::SnapshotStatus>,
    snapshot_rate: (u64, Millis, u64),
}

#[derive(Clone, Debug)]
enum Pending {
    LoadInfos,
    LoadStatuses,
    LoadCordons,
    ReloadInfo(ChangefeedId),
    Create(ChangefeedId, Box<ChangefeedInfo>, Ts),
    Bump(ChangefeedId, u64),
    SaveInfo(ChangefeedId, Box<ChangefeedInfo>),
    SaveCheckpoint(ChangefeedId, Ts),
    Delete(ChangefeedId),
    Cordon(NodeId, Option<&'static str>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading changefeeds, statuses and cordons: how many reads are left.
    Loading {
        left: u8,
    },
    /// Asking every node which maintainers it runs.
    Bootstrapping {
        pending: BTreeSet<NodeId>,
        last_sent: Millis,
    },
    Working,
}

/// A changefeed as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedView {
    pub id: ChangefeedId,
    pub state: FeedState,
    pub checkpoint: Ts,
    pub maintainer: Option<NodeId>,
    pub epoch: Epoch,
    pub error: Option<String>,
    pub restarts: u32,
    pub sink_uri: String,
    /// The whole configuration as stored (the API's update starts from it).
    pub config: ChangefeedConfig,
    /// The resolved ts the current maintainer reported (at least the checkpoint).
    pub resolved: Ts,
    /// What stops a `Normal` changefeed's progress now (capture stopped, a sink retrying, a
    /// table held), as its maintainer last reported; the API shows the state `warning`.
    pub warning: Option<String>,
    /// The snapshot copy, while the changefeed has one (as its maintainer last reported).
    pub snapshot: Option<crate::msg::SnapshotStatus>,
    /// Snapshot rows copied per second, lately.
    pub snapshot_rows_per_sec: u64,
}

pub struct Coordinator {
    node: NodeId,
    rev: u64,
    phase: Phase,
    feeds: BTreeMap<ChangefeedId, Feed>,
    /// Maintainers the nodes reported at this coordinator's bootstrap.
    reported: BTreeMap<NodeId, (u64, Vec<MaintainerStatus>)>,
    cordoned: BTreeMap<NodeId, &'static str>,
    pending: BTreeMap<u64, Pending>,
    next_req: u64,
    /// User requests that arrived before the coordinator was ready.
    queued: Vec<UserRequest>,
    last_settings: Option<Millis>,
    /// Per node, the store revision of the last cordon write applied here.
    cordon_rev: BTreeMap<NodeId, u64>,
    /// Checkpoints read at load time.
    statuses: BTreeMap<ChangefeedId, Ts>,
    pub stale_dropped: u64,
    /// When [`Coordinator::on_tick`] last ran (stalls are measured from it).
    last_tick: Option<Millis>,
}

fn new_feed(info: ChangefeedInfo, info_rev: u64, checkpoint: Ts) -> Feed {
    Feed {
        info,
        info_rev,
        checkpoint,
        reported: checkpoint,
        resolved: checkpoint,
        writing_checkpoint: false,
        placement: Placement::None,
        old_maintainer: None,
        meta_busy: false,
        backoff_until: 0,
        errors_in_row: 0,
        errored_epoch: Epoch::default(),
        pending_state: None,
        table_requests: Vec::new(),
        closed_once: false,
        info_unsaved: false,
        placed_inc: 0,
        last_report: 0,
        warning: None,
        snapshot: None,
        snapshot_rate: (0, 0, 0),
    }
}

const MAX_QUEUED_REQUESTS: usize = 1024;

/// Tells `to` to stop its maintainer of `cf` at `epoch` (not cascading to the dispatchers).
fn stop_maintainer(out: &mut Vec<Effect>, to: NodeId, cf: ChangefeedId, epoch: Epoch, rev: u64) {
    out.push(Effect::Send {
        to,
        msg: Message::RemoveMaintainer {
            cf,
            epoch,
            rev,
            cascade: false,
        },
    });
}

impl Coordinator {
    /// This node won the election with the election key at revision `rev`.
    pub fn new(node: NodeId, rev: u64, out: &mut Vec<Effect>) -> Self {
        let mut c = Coordinator {
            node,
            rev,
            phase: Phase::Loading { left: 3 },
            feeds: BTreeMap::new(),
            reported: BTreeMap::new(),
            cordoned: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_req: 1,
            queued: Vec::new(),
            last_settings: None,
            cordon_rev: BTreeMap::new(),
            statuses: BTreeMap::new(),
            stale_dropped: 0,
            last_tick: None,
        };
        c.load(out);
        c
    }

    fn load(&mut self, out: &mut Vec<Effect>) {
        self.phase = Phase::Loading { left: 3 };
        self.feeds.clear();
        self.cordoned.clear();
        self.meta(
            out,
            Pending::LoadInfos,
            MetaOp::Get {
                prefix: keys::CHANGEFEED_INFO.to_string(),
            },
        );
        self.meta(
            out,
            Pending::LoadStatuses,
            MetaOp::Get {
                prefix: keys::CHANGEFEED_STATUS.to_string(),
            },
        );
        self.meta(
            out,
            Pending::LoadCordons,
            MetaOp::Get {
                prefix: keys::CORDON.to_string(),
            },
        );
    }

    pub fn rev(&self) -> u64 {
        self.rev
    }

    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Working
    }

    pub fn feeds(&self) -> Vec<FeedView> {
        self.feeds
            .values()
            .map(|f| FeedView {
                id: f.info.id.clone(),
                state: f.info.state,
                checkpoint: f.checkpoint,
                maintainer: self.maintainer_of(&f.info.id).map(|m| m.0),
                epoch: Epoch(f.info.epoch),
                error: f.info.error.clone(),
                restarts: f.info.restarts,
                sink_uri: f.info.config.sink_uri.clone(),
                config: f.info.config.clone(),
                resolved: f.resolved.max(f.checkpoint),
                warning: f
                    .warning
                    .clone()
                    .filter(|_| f.info.state == FeedState::Normal),
                snapshot: f.snapshot.clone(),
                snapshot_rows_per_sec: f.snapshot_rate.2,
            })
            .collect()
    }

    /// Where the coordinator last placed the changefeed's maintainer.
    pub fn maintainer_of(&self, cf: &ChangefeedId) -> Option<(NodeId, Epoch)> {
        match &self.feeds.get(cf)?.placement {
            Placement::Running { node, epoch }
            | Placement::Added { node, epoch, .. }
            | Placement::Moving { node, epoch, .. } => Some((node.clone(), *epoch)),
            _ => None,
        }
    }

    pub fn cordoned(&self) -> Vec<NodeId> {
        self.cordoned
            .iter()
            .filter(|(_, k)| **k == "cordon")
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub fn draining(&self) -> Vec<NodeId> {
        self.cordoned
            .iter()
            .filter(|(_, k)| **k == "drain")
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn leader_compare(&self) -> Compare {
        Compare::ModRevision {
            key: keys::COORDINATOR.to_string(),
            rev: self.rev,
        }
    }

    /// Read a changefeed's info again after a compare-and-swap lost to another write.
    fn reload_info(&mut self, cf: &ChangefeedId, out: &mut Vec<Effect>) {
        self.meta(
            out,
            Pending::ReloadInfo(cf.clone()),
            MetaOp::Get {
                prefix: keys::info(cf.as_str()),
            },
        );
    }

    fn meta(&mut self, out: &mut Vec<Effect>, p: Pending, op: MetaOp) {
        let req = self.next_req;
        self.next_req += 1;
        self.pending.insert(req, p);
        out.push(Effect::Meta { req, op });
    }

    fn txn(
        &mut self,
        out: &mut Vec<Effect>,
        p: Pending,
        mut compares: Vec<Compare>,
        puts: Vec<(String, Vec<u8>)>,
        deletes: Vec<String>,
    ) {
        compares.insert(0, self.leader_compare());
        self.meta(
            out,
            p,
            MetaOp::Txn {
                compares,
                puts,
                deletes,
            },
        );
    }

    fn log(&self, out: &mut Vec<Effect>, s: String) {
        out.push(Effect::Trace(TraceEvent::Log(format!(
            "coordinator {}: {s}",
            self.node
        ))));
    }

    fn loaded_one(&mut self, now: Millis, alive: &BTreeMap<NodeId, u64>, out: &mut Vec<Effect>) {
        if let Phase::Loading { left } = &mut self.phase {
            *left = left.saturating_sub(1);
            if *left == 0 {
                // What this coordinator read is persisted: say so once, so the sink's
                // checkpoint record and GC follow it even if the checkpoint never moves again.
                for (cf, f) in &self.feeds {
                    out.push(Effect::CheckpointPersisted {
                        cf: cf.clone(),
                        ts: f.checkpoint,
                    });
                }
                let pending: BTreeSet<NodeId> = alive.keys().cloned().collect();
                for n in &pending {
                    out.push(Effect::Send {
                        to: n.clone(),
                        msg: Message::CoordinatorBootstrap { rev: self.rev },
                    });
                }
                self.phase = Phase::Bootstrapping {
                    pending,
                    last_sent: now,
                };
            }
        }
    }

    fn apply_statuses(&mut self) {
        for (cf, cp) in &self.statuses {
            if let Some(f) = self.feeds.get_mut(cf) {
                f.checkpoint = f.checkpoint.max(*cp);
                f.reported = f.reported.max(f.checkpoint);
            }
        }
    }
}
