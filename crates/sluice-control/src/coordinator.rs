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

use crate::config::{
    ChangefeedConfig, MAINTAINER_LOST_MS, MAX_ERROR_BACKOFF_MS, MAX_ERROR_RETRIES,
    MIN_ERROR_BACKOFF_MS, RESEND_MS,
};
use crate::io::{Effect, TraceEvent, UserRequest};
use crate::meta::{keys, Compare, Kv, MetaOp, MetaResult};
use crate::msg::{MaintainerState, MaintainerStatus, Message, TableRequest};
use serde::{Deserialize, Serialize};
use sluice_types::{ChangefeedId, Epoch, Millis, NodeId, Ts};
use std::collections::{BTreeMap, BTreeSet};

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
    }
}

const MAX_QUEUED_REQUESTS: usize = 1024;

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

    pub fn on_meta_result(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        req: u64,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let Some(p) = self.pending.remove(&req) else {
            return;
        };
        match (p, result) {
            (Pending::LoadInfos, MetaResult::Got { kvs, .. }) => {
                for Kv {
                    key,
                    value,
                    mod_revision,
                } in kvs
                {
                    match serde_json::from_slice::<ChangefeedInfo>(&value) {
                        Ok(info) => {
                            let cp = self
                                .feeds
                                .get(&info.id)
                                .map(|f| f.checkpoint)
                                .unwrap_or(info.config.start_ts);
                            let cp = cp.max(info.config.start_ts);
                            let mut f = new_feed(info, mod_revision, cp);
                            // An error is recorded before its close (fail): the coordinator
                            // that recorded it may have gone before closing. Close it again
                            // before a restart, or a failed dispatcher still running would be
                            // adopted and its error acted on twice (and a failed changefeed's
                            // dispatchers would keep running).
                            if matches!(f.info.state, FeedState::Error | FeedState::Failed) {
                                f.pending_state = Some(f.info.state);
                            }
                            self.feeds.insert(f.info.id.clone(), f);
                        }
                        Err(e) => self.log(
                            out,
                            format!("unreadable changefeed info at {key} ({e}); skipped"),
                        ),
                    }
                }
                self.apply_statuses();
                self.loaded_one(now, alive, out);
            }
            (Pending::LoadStatuses, MetaResult::Got { kvs, .. }) => {
                for kv in kvs {
                    if let Ok(st) = serde_json::from_slice::<ChangefeedStatusRecord>(&kv.value) {
                        let cf =
                            ChangefeedId::new(kv.key.trim_start_matches(keys::CHANGEFEED_STATUS));
                        self.statuses.insert(cf, st.checkpoint_ts);
                    }
                }
                self.apply_statuses();
                self.loaded_one(now, alive, out);
            }
            (Pending::LoadCordons, MetaResult::Got { kvs, .. }) => {
                for kv in kvs {
                    let node = NodeId::new(kv.key.trim_start_matches(keys::CORDON));
                    let kind = if kv.value == b"drain" {
                        "drain"
                    } else {
                        "cordon"
                    };
                    self.cordon_rev.insert(node.clone(), kv.mod_revision);
                    self.cordoned.insert(node, kind);
                }
                self.loaded_one(now, alive, out);
            }
            (Pending::LoadInfos | Pending::LoadStatuses | Pending::LoadCordons, _) => {
                if matches!(self.phase, Phase::Loading { .. }) {
                    self.pending.retain(|_, p| {
                        !matches!(
                            p,
                            Pending::LoadInfos | Pending::LoadStatuses | Pending::LoadCordons
                        )
                    });
                    self.statuses.clear();
                    self.load(out);
                }
            }
            (Pending::ReloadInfo(cf), MetaResult::Got { kvs, .. }) => {
                if let (Some(f), Some(kv)) = (
                    self.feeds.get_mut(&cf),
                    kvs.into_iter().find(|kv| kv.key == keys::info(cf.as_str())),
                ) {
                    if let Ok(info) = serde_json::from_slice::<ChangefeedInfo>(&kv.value) {
                        f.info = info;
                        f.info_rev = kv.mod_revision;
                        f.info_unsaved = false;
                    }
                    f.meta_busy = false;
                }
            }
            (Pending::ReloadInfo(cf), _) => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.meta_busy = false;
                }
            }
            (
                Pending::Create(cf, info, start),
                MetaResult::Txn {
                    succeeded: true,
                    revision,
                },
            ) => {
                self.feeds
                    .insert(cf.clone(), new_feed(*info, revision, start));
                self.log(out, format!("changefeed {cf} created at {start}"));
                out.push(Effect::CheckpointPersisted { cf, ts: start });
            }
            (Pending::Create(cf, ..), _) => {
                self.log(out, format!("creating changefeed {cf} failed (it exists, this coordinator was deposed, or the store is unavailable)"));
            }
            (
                Pending::Bump(cf, epoch),
                MetaResult::Txn {
                    succeeded: true,
                    revision,
                },
            ) => {
                let rev = self.rev;
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.meta_busy = false;
                    f.info.epoch = epoch;
                    f.info_rev = revision;
                    // The bump wrote the whole info.
                    f.info_unsaved = false;
                    match std::mem::replace(&mut f.placement, Placement::None) {
                        Placement::Bumping {
                            node,
                            purpose: BumpPurpose::Place,
                        } => {
                            let checkpoint = f.checkpoint.max(f.reported);
                            f.placed_inc = alive.get(&node).copied().unwrap_or(0);
                            f.last_report = now;
                            f.placement = Placement::Added {
                                node: node.clone(),
                                epoch: Epoch(epoch),
                                last_sent: now,
                            };
                            out.push(Effect::Send {
                                to: node,
                                msg: Message::AddMaintainer {
                                    cf: cf.clone(),
                                    epoch: Epoch(epoch),
                                    rev,
                                    incarnation: f.placed_inc,
                                    checkpoint,
                                    config: f.info.config.clone(),
                                },
                            });
                        }
                        Placement::Bumping {
                            purpose: BumpPurpose::Close,
                            ..
                        } => {
                            let pending: BTreeSet<NodeId> = alive.keys().cloned().collect();
                            for n in &pending {
                                out.push(Effect::Send {
                                    to: n.clone(),
                                    msg: Message::CloseChangefeed {
                                        cf: cf.clone(),
                                        epoch: Epoch(epoch),
                                    },
                                });
                            }
                            if let Some((n, e)) = f.old_maintainer.take() {
                                out.push(Effect::Send {
                                    to: n,
                                    msg: Message::RemoveMaintainer {
                                        cf: cf.clone(),
                                        epoch: e,
                                        rev,
                                        cascade: false,
                                    },
                                });
                            }
                            f.placement = Placement::Closing {
                                epoch: Epoch(epoch),
                                pending,
                                last_sent: now,
                            };
                        }
                        other => f.placement = other,
                    }
                }
            }
            (Pending::Bump(cf, _), r) => {
                let conflict = matches!(
                    r,
                    MetaResult::Txn {
                        succeeded: false,
                        ..
                    }
                );
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.meta_busy = false;
                    if let Placement::Bumping {
                        purpose: BumpPurpose::Place,
                        ..
                    } = f.placement
                    {
                        f.placement = Placement::None;
                    } else if let Placement::Bumping {
                        purpose: BumpPurpose::Close,
                        ..
                    } = f.placement
                    {
                        // Retried by `progress`.
                        f.placement = Placement::None;
                        f.pending_state = f.pending_state.or(Some(f.info.state));
                    }
                    if conflict {
                        f.meta_busy = true;
                        self.reload_info(&cf, out);
                    }
                }
            }
            (
                Pending::SaveInfo(cf, info),
                MetaResult::Txn {
                    succeeded: true,
                    revision,
                },
            ) => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.meta_busy = false;
                    f.info = *info;
                    f.info_rev = revision;
                    f.info_unsaved = false;
                }
            }
            (Pending::SaveInfo(cf, _), r) => {
                let conflict = matches!(
                    r,
                    MetaResult::Txn {
                        succeeded: false,
                        ..
                    }
                );
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.meta_busy = false;
                    if conflict {
                        f.meta_busy = true;
                        self.reload_info(&cf, out);
                    }
                }
            }
            (
                Pending::SaveCheckpoint(cf, ts),
                MetaResult::Txn {
                    succeeded: true, ..
                },
            ) => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.writing_checkpoint = false;
                    f.checkpoint = f.checkpoint.max(ts);
                    #[cfg(feature = "mutations")]
                    if crate::mutations::on("checkpoint-regress") {
                        f.checkpoint = ts;
                    }
                }
                out.push(Effect::CheckpointPersisted { cf, ts });
            }
            (Pending::SaveCheckpoint(cf, _), _) => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.writing_checkpoint = false;
                }
            }
            (
                Pending::Delete(cf),
                MetaResult::Txn {
                    succeeded: true, ..
                },
            ) => {
                self.feeds.remove(&cf);
                self.log(out, format!("changefeed {cf} removed"));
            }
            (Pending::Delete(cf), _) => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    f.meta_busy = false;
                }
            }
            (
                Pending::Cordon(node, kind),
                MetaResult::Txn {
                    succeeded: true,
                    revision,
                },
            ) => {
                // Results may come back in another order than the writes were made: only a
                // newer write of this node's key changes what is known.
                if self
                    .cordon_rev
                    .get(&node)
                    .map(|r| *r >= revision)
                    .unwrap_or(false)
                {
                    return self.progress(now, alive, out);
                }
                self.cordon_rev.insert(node.clone(), revision);
                match kind {
                    Some(k) => {
                        self.cordoned.insert(node, k);
                    }
                    None => {
                        self.cordoned.remove(&node);
                    }
                }
                // Tell every node at once: from now on no new dispatcher goes there.
                self.last_settings = Some(now);
                let (cordoned, draining, rev) = (self.cordoned(), self.draining(), self.rev);
                for n in alive.keys() {
                    out.push(Effect::Send {
                        to: n.clone(),
                        msg: Message::NodeSettings {
                            rev,
                            cordoned: cordoned.clone(),
                            draining: draining.clone(),
                        },
                    });
                }
            }
            (Pending::Cordon(..), _) => {}
        }
        self.progress(now, alive, out);
    }

    fn apply_statuses(&mut self) {
        for (cf, cp) in &self.statuses {
            if let Some(f) = self.feeds.get_mut(cf) {
                f.checkpoint = f.checkpoint.max(*cp);
                f.reported = f.reported.max(f.checkpoint);
            }
        }
    }

    pub fn on_message(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        from: &NodeId,
        msg: Message,
        out: &mut Vec<Effect>,
    ) {
        match msg {
            Message::CoordinatorBootstrapResponse {
                rev,
                incarnation,
                maintainers,
            } => {
                if rev != self.rev {
                    self.stale_dropped += 1;
                    return;
                }
                if let Phase::Bootstrapping { pending, .. } = &mut self.phase {
                    if pending.remove(from) {
                        self.reported
                            .insert(from.clone(), (incarnation, maintainers));
                    }
                }
                self.progress(now, alive, out);
            }
            Message::MaintainerStatusReport { status } => {
                self.on_status(now, alive, from, status, out)
            }
            Message::CloseChangefeedResponse { cf, epoch } => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    if let Placement::Closing {
                        epoch: e, pending, ..
                    } = &mut f.placement
                    {
                        if *e == epoch {
                            pending.remove(from);
                        }
                    }
                }
                self.progress(now, alive, out);
            }
            other => {
                self.stale_dropped += 1;
                out.push(Effect::Trace(TraceEvent::Stale {
                    kind: other.kind(),
                    reason: "not for the coordinator",
                }));
            }
        }
    }

    fn on_status(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        from: &NodeId,
        status: MaintainerStatus,
        out: &mut Vec<Effect>,
    ) {
        let rev = self.rev;
        let Some(f) = self.feeds.get_mut(&status.cf) else {
            return;
        };
        let current = match &f.placement {
            Placement::Running { node, epoch }
            | Placement::Added { node, epoch, .. }
            | Placement::Moving { node, epoch, .. } => node == from && *epoch == status.epoch,
            _ => false,
        };
        if !current {
            self.stale_dropped += 1;
            // A maintainer of an older epoch still runs there: stop it.
            if status.epoch.0 < f.info.epoch && status.state != MaintainerState::Stopped {
                out.push(Effect::Send {
                    to: from.clone(),
                    msg: Message::RemoveMaintainer {
                        cf: status.cf.clone(),
                        epoch: status.epoch,
                        rev: self.rev,
                        cascade: false,
                    },
                });
            }
            return;
        }
        // An error is never dropped because of a stale checkpoint in the same report. The
        // maintainer repeats it in every status: it is acted on once per maintainer epoch.
        if let Some(err) = &status.error {
            if f.info.state == FeedState::Normal && status.epoch > f.errored_epoch {
                f.errored_epoch = status.epoch;
                let err = err.clone();
                self.log(out, format!("changefeed {} error: {err}", status.cf));
                self.fail(now, &status.cf, err, out);
                self.progress(now, alive, out);
                return;
            }
        }
        f.last_report = now;
        f.warning = status.warning.clone();
        f.resolved = f.resolved.max(status.resolved);
        let moved = status.checkpoint > f.reported;
        if moved {
            f.reported = status.checkpoint;
            if f.errors_in_row > 0 {
                f.errors_in_row = 0;
            }
        }
        match &f.placement {
            Placement::Added { node, epoch, .. } if status.state == MaintainerState::Working => {
                f.placement = Placement::Running {
                    node: node.clone(),
                    epoch: *epoch,
                };
            }
            Placement::Moving {
                node, epoch, to, ..
            } if status.state == MaintainerState::Stopped => {
                let _ = (node, epoch);
                let to = to.clone();
                f.placement = Placement::None;
                self.place(now, alive, &status.cf, Some(to), out);
            }
            Placement::Running { .. } if status.state == MaintainerState::Stopped => {
                f.placement = Placement::None;
            }
            _ => {}
        }
        let _ = rev;
        if moved {
            self.clear_recovered_error(&status.cf, out);
        }
        self.save_checkpoint(&status.cf, out);
    }

    /// A running changefeed whose checkpoint moves again no longer shows the error it was
    /// restarted for (the restart count stays).
    fn clear_recovered_error(&mut self, cf: &ChangefeedId, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get(cf) else {
            return;
        };
        if f.info.state != FeedState::Normal
            || f.info.error.is_none()
            || f.meta_busy
            || f.pending_state.is_some()
        {
            return;
        }
        let mut info = f.info.clone();
        info.error = None;
        self.set_info(cf, info, out);
    }

    fn save_checkpoint(&mut self, cf: &ChangefeedId, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        #[allow(unused_mut)]
        let mut target = f.reported;
        #[cfg(feature = "mutations")]
        if crate::mutations::on("checkpoint-regress")
            && f.checkpoint > 5
            && f.reported <= f.checkpoint
        {
            target = f.checkpoint - 5;
        }
        if (target <= f.checkpoint && !cfg!(feature = "mutations"))
            || f.writing_checkpoint
            || target == f.checkpoint
        {
            return;
        }
        #[cfg(feature = "mutations")]
        if target < f.checkpoint && !crate::mutations::on("checkpoint-regress") {
            return;
        }
        f.writing_checkpoint = true;
        let value = serde_json::to_vec(&ChangefeedStatusRecord {
            checkpoint_ts: target,
        })
        .unwrap_or_default();
        self.txn(
            out,
            Pending::SaveCheckpoint(cf.clone(), target),
            vec![],
            vec![(keys::status(cf.as_str()), value)],
            vec![],
        );
    }

    /// The changefeed hit an error: close it (fenced by a new epoch) and retry after a backoff,
    /// or fail it after too many errors in a row.
    fn fail(&mut self, now: Millis, cf: &ChangefeedId, err: String, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        f.errors_in_row += 1;
        let backoff = (MIN_ERROR_BACKOFF_MS << f.errors_in_row.min(16)).min(MAX_ERROR_BACKOFF_MS);
        f.backoff_until = now + backoff;
        let state = if f.errors_in_row > MAX_ERROR_RETRIES {
            FeedState::Failed
        } else {
            FeedState::Error
        };
        f.pending_state = Some(state);
        f.closed_once = false;
        #[cfg(feature = "mutations")]
        if crate::mutations::on("error-restart-without-close") {
            f.pending_state = None;
            f.placement = Placement::None;
        }
        let mut info = f.info.clone();
        info.state = state;
        info.error = Some(err.clone());
        info.restarts += 1;
        out.push(Effect::Trace(TraceEvent::ChangefeedRestarted {
            cf: cf.clone(),
            reason: err,
        }));
        self.set_info(cf, info, out);
    }

    fn set_info(&mut self, cf: &ChangefeedId, info: ChangefeedInfo, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        let rev = f.info_rev;
        f.info = info.clone();
        f.meta_busy = true;
        f.info_unsaved = true;
        let value = serde_json::to_vec(&info).unwrap_or_default();
        self.txn(
            out,
            Pending::SaveInfo(cf.clone(), Box::new(info)),
            vec![Compare::ModRevision {
                key: keys::info(cf.as_str()),
                rev,
            }],
            vec![(keys::info(cf.as_str()), value)],
            vec![],
        );
    }

    /// Bump the epoch, then place the maintainer (on `to`, or the least loaded node).
    fn place(
        &mut self,
        _now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        to: Option<NodeId>,
        out: &mut Vec<Effect>,
    ) {
        let load: BTreeMap<NodeId, usize> = alive
            .keys()
            .map(|n| (n.clone(), self.feeds.values().filter(|f| matches!(&f.placement, Placement::Running{node,..}|Placement::Added{node,..} if node == n)).count()))
            .collect();
        let Some(f) = self.feeds.get(cf) else { return };
        if f.meta_busy {
            return;
        }
        let usable = |n: &NodeId| alive.contains_key(n) && !self.cordoned.contains_key(n);
        let node = to
            .filter(|n| alive.contains_key(n))
            .or_else(|| {
                f.info
                    .config
                    .preferred_node
                    .clone()
                    .filter(|n| usable(n) && f.info.epoch == 0)
            })
            .or_else(|| {
                load.iter()
                    .filter(|(n, _)| usable(n))
                    .min_by_key(|(n, c)| (**c, (*n).clone()))
                    .map(|(n, _)| n.clone())
            })
            .or_else(|| alive.keys().next().cloned());
        let Some(node) = node else { return };
        self.bump(
            cf,
            Placement::Bumping {
                node,
                purpose: BumpPurpose::Place,
            },
            out,
        );
    }

    fn bump(&mut self, cf: &ChangefeedId, placement: Placement, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        #[allow(unused_mut)]
        let mut epoch = f.info.epoch + 1;
        #[cfg(feature = "mutations")]
        if crate::mutations::on("epoch-no-bump") && f.info.epoch > 0 {
            epoch = f.info.epoch;
        }
        let mut info = f.info.clone();
        info.epoch = epoch;
        let rev = f.info_rev;
        f.placement = placement;
        f.meta_busy = true;
        let value = serde_json::to_vec(&info).unwrap_or_default();
        self.txn(
            out,
            Pending::Bump(cf.clone(), epoch),
            vec![Compare::ModRevision {
                key: keys::info(cf.as_str()),
                rev,
            }],
            vec![(keys::info(cf.as_str()), value)],
            vec![],
        );
    }

    pub fn on_request(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        req: UserRequest,
        out: &mut Vec<Effect>,
    ) {
        if self.phase != Phase::Working {
            if self.queued.len() < MAX_QUEUED_REQUESTS {
                self.queued.push(req);
            }
            return;
        }
        match req {
            UserRequest::CreateChangefeed { cf, config } => {
                if self.feeds.contains_key(&cf) {
                    self.log(out, format!("changefeed {cf} already exists"));
                    return;
                }
                let start = config.start_ts;
                let info = ChangefeedInfo {
                    id: cf.clone(),
                    config,
                    state: FeedState::Normal,
                    epoch: 0,
                    error: None,
                    restarts: 0,
                };
                let value = serde_json::to_vec(&info).unwrap_or_default();
                let status = serde_json::to_vec(&ChangefeedStatusRecord {
                    checkpoint_ts: start,
                })
                .unwrap_or_default();
                self.txn(
                    out,
                    Pending::Create(cf.clone(), Box::new(info), start),
                    vec![Compare::ModRevision {
                        key: keys::info(cf.as_str()),
                        rev: 0,
                    }],
                    vec![
                        (keys::info(cf.as_str()), value),
                        (keys::status(cf.as_str()), status),
                    ],
                    // Requests of an earlier changefeed of that name are not this one's.
                    vec![keys::requests(cf.as_str())],
                );
            }
            UserRequest::PauseChangefeed { cf } => self.request_state(&cf, FeedState::Paused, out),
            UserRequest::RemoveChangefeed { cf } => {
                self.request_state(&cf, FeedState::Removed, out)
            }
            UserRequest::ResumeChangefeed { cf } => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    if matches!(
                        f.info.state,
                        FeedState::Paused | FeedState::Failed | FeedState::Error
                    ) {
                        f.errors_in_row = 0;
                        f.backoff_until = 0;
                        f.pending_state = Some(FeedState::Normal);
                    }
                }
            }
            UserRequest::UpdateChangefeed { cf, config } => {
                let Some(f) = self.feeds.get(&cf) else {
                    self.log(out, format!("no changefeed {cf}"));
                    return;
                };
                if !matches!(f.info.state, FeedState::Paused | FeedState::Failed)
                    || f.placement != Placement::None
                    || f.meta_busy
                {
                    self.log(
                        out,
                        format!("changefeed {cf} can be updated only while paused"),
                    );
                    return;
                }
                let mut info = f.info.clone();
                // The start point is history: an update never moves it.
                let start_ts = info.config.start_ts;
                info.config = config;
                info.config.start_ts = start_ts;
                self.set_info(&cf, info, out);
            }
            UserRequest::MoveMaintainer { cf, to } => {
                let rev = self.rev;
                if let Some(f) = self.feeds.get_mut(&cf) {
                    if let Placement::Running { node, epoch } = f.placement.clone() {
                        if node != to && alive.contains_key(&to) {
                            out.push(Effect::Send {
                                to: node.clone(),
                                msg: Message::RemoveMaintainer {
                                    cf: cf.clone(),
                                    epoch,
                                    rev,
                                    cascade: false,
                                },
                            });
                            f.placement = Placement::Moving {
                                node,
                                epoch,
                                to,
                                last_sent: now,
                            };
                        }
                    }
                }
            }
            UserRequest::Cordon { node, on } => {
                let (puts, deletes, kind) = if on {
                    (
                        vec![(keys::cordon(node.as_str()), b"cordon".to_vec())],
                        vec![],
                        Some("cordon"),
                    )
                } else {
                    (vec![], vec![keys::cordon(node.as_str())], None)
                };
                self.txn(out, Pending::Cordon(node, kind), vec![], puts, deletes);
            }
            UserRequest::Drain { node } => {
                self.txn(
                    out,
                    Pending::Cordon(node.clone(), Some("drain")),
                    vec![],
                    vec![(keys::cordon(node.as_str()), b"drain".to_vec())],
                    vec![],
                );
            }
            UserRequest::Table { cf, req } => {
                if let Some(f) = self.feeds.get_mut(&cf) {
                    if f.table_requests.len() < MAX_QUEUED_REQUESTS {
                        f.table_requests.push(req);
                    }
                }
            }
        }
        self.progress(now, alive, out);
    }

    fn request_state(&mut self, cf: &ChangefeedId, state: FeedState, out: &mut Vec<Effect>) {
        if let Some(f) = self.feeds.get_mut(cf) {
            f.pending_state = Some(state);
            f.closed_once = false;
        } else {
            self.log(out, format!("no changefeed {cf}"));
        }
    }

    /// Drive every changefeed toward its desired state.
    fn progress(&mut self, now: Millis, alive: &BTreeMap<NodeId, u64>, out: &mut Vec<Effect>) {
        match &mut self.phase {
            Phase::Loading { .. } => return,
            Phase::Bootstrapping { pending, .. } => {
                pending.retain(|n| alive.contains_key(n));
                if !pending.is_empty() {
                    return;
                }
                self.adopt_reported(now, alive, out);
                self.phase = Phase::Working;
                for req in std::mem::take(&mut self.queued) {
                    self.on_request(now, alive, req, out);
                }
            }
            Phase::Working => {}
        }
        let rev = self.rev;
        let cfs: Vec<ChangefeedId> = self.feeds.keys().cloned().collect();
        for cf in cfs {
            let Some(f) = self.feeds.get_mut(&cf) else {
                continue;
            };
            if f.meta_busy {
                continue;
            }
            // A state change whose write did not get through (the store was unreachable) is
            // written again before anything else: what the store says must not lag behind what
            // this coordinator acts on (a successor would act on the stale one: an error or a
            // pause recorded only here would be lost).
            if f.info_unsaved {
                let info = f.info.clone();
                self.set_info(&cf, info, out);
                continue;
            }
            // Maintainer on a node that is gone.
            match &f.placement {
                Placement::Added { node, .. } | Placement::Running { node, .. }
                    if alive.get(node) != Some(&f.placed_inc) =>
                {
                    f.placement = Placement::None;
                }
                Placement::Added { node, epoch, .. } | Placement::Running { node, epoch }
                    if now >= f.last_report + MAINTAINER_LOST_MS =>
                {
                    // Silent for too long on a live node: place it again (the new epoch fences
                    // the old one wherever it still runs) and tell the old one to stop.
                    out.push(Effect::Send {
                        to: node.clone(),
                        msg: Message::RemoveMaintainer {
                            cf: cf.clone(),
                            epoch: *epoch,
                            rev,
                            cascade: false,
                        },
                    });
                    f.placement = Placement::None;
                }
                Placement::Moving { node, to, .. } if alive.get(node) != Some(&f.placed_inc) => {
                    let to = to.clone();
                    f.placement = Placement::None;
                    if f.info.state == FeedState::Normal && f.pending_state.is_none() {
                        self.place(now, alive, &cf, Some(to), out);
                        continue;
                    }
                }
                Placement::Closing { pending, .. }
                    if pending.iter().any(|n| !alive.contains_key(n)) =>
                {
                    if let Placement::Closing { pending, .. } = &mut f.placement {
                        pending.retain(|n| alive.contains_key(n));
                    }
                }
                _ => {}
            }
            let Some(f) = self.feeds.get_mut(&cf) else {
                continue;
            };
            // A requested state change: stop what runs, fenced by a new epoch.
            if let Some(want) = f.pending_state {
                let stopped = matches!(f.placement, Placement::None);
                match want {
                    FeedState::Normal => {
                        if stopped {
                            let mut info = f.info.clone();
                            info.state = FeedState::Normal;
                            info.error = None;
                            f.pending_state = None;
                            self.set_info(&cf, info, out);
                        }
                        continue;
                    }
                    _ => {
                        match &f.placement {
                            Placement::Running { node, epoch }
                            | Placement::Added { node, epoch, .. }
                            | Placement::Moving { node, epoch, .. } => {
                                f.old_maintainer = Some((node.clone(), *epoch));
                                let node = node.clone();
                                self.bump(
                                    &cf,
                                    Placement::Bumping {
                                        node,
                                        purpose: BumpPurpose::Close,
                                    },
                                    out,
                                );
                                continue;
                            }
                            Placement::None => {
                                // Close whatever may still run anywhere, then record the state
                                // (an error already recorded it: then the close only ends here,
                                // and the changefeed restarts after its backoff). Only a close
                                // that finished counts: a failed bump is tried again.
                                if !f.closed_once {
                                    let node = self.node.clone();
                                    self.bump(
                                        &cf,
                                        Placement::Bumping {
                                            node,
                                            purpose: BumpPurpose::Close,
                                        },
                                        out,
                                    );
                                    continue;
                                }
                                f.closed_once = false;
                                f.pending_state = None;
                                if want == FeedState::Removed {
                                    f.meta_busy = true;
                                    self.txn(
                                        out,
                                        Pending::Delete(cf.clone()),
                                        vec![],
                                        vec![],
                                        vec![
                                            keys::info(cf.as_str()),
                                            keys::status(cf.as_str()),
                                            keys::requests(cf.as_str()),
                                        ],
                                    );
                                } else if f.info.state != want {
                                    let mut info = f.info.clone();
                                    info.state = want;
                                    self.set_info(&cf, info, out);
                                }
                                continue;
                            }
                            Placement::Closing { pending, .. } if pending.is_empty() => {
                                f.placement = Placement::None;
                                f.closed_once = true;
                                continue;
                            }
                            _ => continue,
                        }
                    }
                }
            }
            // Normal changefeeds get a maintainer; errored ones after their backoff.
            let Some(f) = self.feeds.get_mut(&cf) else {
                continue;
            };
            if let Placement::Closing { pending, .. } = &f.placement {
                if pending.is_empty() {
                    f.placement = Placement::None;
                }
                continue;
            }
            let runnable = f.info.state == FeedState::Normal
                || (f.info.state == FeedState::Error && now >= f.backoff_until);
            if runnable && f.placement == Placement::None {
                if f.info.state == FeedState::Error {
                    let mut info = f.info.clone();
                    info.state = FeedState::Normal;
                    self.set_info(&cf, info, out);
                    continue;
                }
                self.place(now, alive, &cf, None, out);
                continue;
            }
            // Table requests go to the running maintainer.
            if let Placement::Running { node, .. } = &f.placement {
                for req in std::mem::take(&mut f.table_requests) {
                    out.push(Effect::Send {
                        to: node.clone(),
                        msg: Message::TableRequest {
                            cf: cf.clone(),
                            req,
                        },
                    });
                }
            }
            let _ = rev;
        }
    }

    /// After the coordinator bootstrap: keep maintainers of the persisted epoch, stop the others.
    fn adopt_reported(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        out: &mut Vec<Effect>,
    ) {
        let rev = self.rev;
        let reported = std::mem::take(&mut self.reported);
        for (node, (inc, list)) in reported {
            if alive.get(&node) != Some(&inc) {
                continue; // that incarnation is gone, and its maintainers with it
            }
            for st in list {
                let current = self
                    .feeds
                    .get(&st.cf)
                    .map(|f| f.info.epoch == st.epoch.0 && f.info.state == FeedState::Normal)
                    .unwrap_or(false);
                if current && st.state != MaintainerState::Stopped {
                    if let Some(f) = self.feeds.get_mut(&st.cf) {
                        f.last_report = now;
                        f.placed_inc = inc;
                        f.reported = f.reported.max(st.checkpoint);
                        f.placement = if st.state == MaintainerState::Working {
                            Placement::Running {
                                node: node.clone(),
                                epoch: st.epoch,
                            }
                        } else {
                            Placement::Added {
                                node: node.clone(),
                                epoch: st.epoch,
                                last_sent: 0,
                            }
                        };
                    }
                } else if st.state != MaintainerState::Stopped {
                    out.push(Effect::Send {
                        to: node.clone(),
                        msg: Message::RemoveMaintainer {
                            cf: st.cf.clone(),
                            epoch: st.epoch,
                            rev,
                            cascade: false,
                        },
                    });
                }
            }
        }
    }

    pub fn on_tick(&mut self, now: Millis, alive: &BTreeMap<NodeId, u64>, out: &mut Vec<Effect>) {
        let rev = self.rev;
        if let Phase::Bootstrapping { pending, last_sent } = &mut self.phase {
            if now >= *last_sent + RESEND_MS {
                *last_sent = now;
                for n in pending.iter() {
                    out.push(Effect::Send {
                        to: n.clone(),
                        msg: Message::CoordinatorBootstrap { rev },
                    });
                }
            }
        }
        if self.phase != Phase::Working {
            self.progress(now, alive, out);
            return;
        }
        // Resends.
        for (cf, f) in self.feeds.iter_mut() {
            match &mut f.placement {
                Placement::Added {
                    node,
                    epoch,
                    last_sent,
                } if now >= *last_sent + RESEND_MS => {
                    *last_sent = now;
                    let checkpoint = f.checkpoint.max(f.reported);
                    out.push(Effect::Send {
                        to: node.clone(),
                        msg: Message::AddMaintainer {
                            cf: cf.clone(),
                            epoch: *epoch,
                            rev,
                            incarnation: f.placed_inc,
                            checkpoint,
                            config: f.info.config.clone(),
                        },
                    });
                }
                Placement::Moving {
                    node,
                    epoch,
                    last_sent,
                    ..
                } if now >= *last_sent + RESEND_MS => {
                    *last_sent = now;
                    out.push(Effect::Send {
                        to: node.clone(),
                        msg: Message::RemoveMaintainer {
                            cf: cf.clone(),
                            epoch: *epoch,
                            rev,
                            cascade: false,
                        },
                    });
                }
                Placement::Closing {
                    epoch,
                    pending,
                    last_sent,
                } if now >= *last_sent + RESEND_MS => {
                    *last_sent = now;
                    for n in pending.iter() {
                        out.push(Effect::Send {
                            to: n.clone(),
                            msg: Message::CloseChangefeed {
                                cf: cf.clone(),
                                epoch: *epoch,
                            },
                        });
                    }
                }
                _ => {}
            }
        }
        // Drain: maintainers leave draining nodes.
        let draining: BTreeSet<NodeId> = self.draining().into_iter().collect();
        let moves: Vec<(ChangefeedId, NodeId)> = self
            .feeds
            .iter()
            .filter_map(|(cf, f)| match &f.placement {
                Placement::Running { node, .. } if draining.contains(node) => alive
                    .keys()
                    .find(|n| !draining.contains(*n) && !self.cordoned.contains_key(*n))
                    .map(|to| (cf.clone(), to.clone())),
                _ => None,
            })
            .collect();
        for (cf, to) in moves {
            self.on_request(now, alive, UserRequest::MoveMaintainer { cf, to }, out);
        }
        if self
            .last_settings
            .map(|t| now >= t + RESEND_MS)
            .unwrap_or(true)
        {
            self.last_settings = Some(now);
            let cordoned = self.cordoned();
            let draining = self.draining();
            for n in alive.keys() {
                out.push(Effect::Send {
                    to: n.clone(),
                    msg: Message::NodeSettings {
                        rev,
                        cordoned: cordoned.clone(),
                        draining: draining.clone(),
                    },
                });
            }
        }
        self.progress(now, alive, out);
    }
}
