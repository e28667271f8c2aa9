//! One node's control plane: routes every input to the coordinator (when this node leads), the
//! maintainers placed here and the dispatcher managers here, and collects their effects. This is
//! the whole surface the server's async shell and the simulator drive.
//!
//! Invariants kept here: coordinator messages older than the newest coordinator revision seen are
//! dropped; a maintainer is replaced only by one of a strictly newer epoch; a dispatcher manager
//! closed by a cascade stop is not recreated by a bootstrap of an epoch at or below the close.
//! Meta-store operations of maintainers get request ids at or above [`MAINTAINER_META_REQ`]
//! (the coordinator's count from 1), and each result goes back to the maintainer instance (cf
//! and epoch) that asked; a result for one that is gone is dropped.

use crate::config::{ChangefeedConfig, MAINTAINER_STATUS_MS};
use crate::coordinator::Coordinator;
use crate::dispatcher::DispatcherManager;
use crate::hold::Holds;
use crate::io::{Effect, Input, TraceEvent, UserRequest};
use crate::maintainer::{Ctx, Maintainer};
use crate::msg::{MaintainerState, MaintainerStatus, Message};
use sluice_types::{ChangefeedId, Epoch, Key, Millis, NodeId, TableId, Ts};
use std::collections::{BTreeMap, BTreeSet};

/// Request ids of maintainers' meta-store operations start here.
pub const MAINTAINER_META_REQ: u64 = 1 << 62;
/// At most this many maintainer meta-store operations are remembered awaiting their result.
pub const MAX_MAINTAINER_META_IN_FLIGHT: usize = 4096;

/// What this node knows of the cluster, shared by its components on every call.
#[derive(Default)]
struct View {
    alive: BTreeMap<NodeId, u64>,
    leader: Option<(NodeId, u64)>,
    cordoned: BTreeSet<NodeId>,
    draining: BTreeSet<NodeId>,
    regions: BTreeMap<TableId, Vec<Key>>,
    /// The upstream's row estimate per table (for the snapshot's time left).
    table_rows: BTreeMap<TableId, u64>,
}

impl View {
    fn ctx(&self, now: Millis) -> Ctx<'_> {
        Ctx {
            now,
            alive: &self.alive,
            cordoned: &self.cordoned,
            draining: &self.draining,
            regions: &self.regions,
            coordinator: self.leader.as_ref().map(|l| &l.0),
        }
    }
}

pub struct NodeState {
    id: NodeId,
    incarnation: u64,
    view: View,
    max_coordinator_rev: u64,
    holds: Holds,
    coordinator: Option<Coordinator>,
    maintainers: BTreeMap<ChangefeedId, Maintainer>,
    stopped_maintainers: BTreeMap<ChangefeedId, MaintainerStatus>,
    dms: BTreeMap<ChangefeedId, DispatcherManager>,
    closed_epochs: BTreeMap<ChangefeedId, Epoch>,
    last_stopped_report: Millis,
    /// Capture's error on this node, if it is stopped (see `Input::CaptureStatus`).
    capture_error: Option<String>,
    /// Maintainers' meta-store operations in flight: request id -> (cf, epoch, the maintainer's
    /// tag).
    maintainer_meta: BTreeMap<u64, (ChangefeedId, Epoch, u64)>,
    next_maintainer_meta: u64,
    pub stale_dropped: u64,
}

impl NodeState {
    pub fn new(id: NodeId, incarnation: u64) -> Self {
        NodeState {
            id,
            incarnation,
            view: View::default(),
            max_coordinator_rev: 0,
            holds: Holds::default(),
            coordinator: None,
            maintainers: BTreeMap::new(),
            stopped_maintainers: BTreeMap::new(),
            dms: BTreeMap::new(),
            closed_epochs: BTreeMap::new(),
            last_stopped_report: 0,
            capture_error: None,
            maintainer_meta: BTreeMap::new(),
            next_maintainer_meta: MAINTAINER_META_REQ,
            stale_dropped: 0,
        }
    }

    pub fn id(&self) -> &NodeId {
        &self.id
    }
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }
    pub fn maintainer(&self, cf: &ChangefeedId) -> Option<&Maintainer> {
        self.maintainers.get(cf)
    }
    pub fn maintainers(&self) -> impl Iterator<Item = &Maintainer> {
        self.maintainers.values()
    }
    pub fn dispatcher_manager(&self, cf: &ChangefeedId) -> Option<&DispatcherManager> {
        self.dms.get(cf)
    }
    pub fn dispatcher_managers(&self) -> impl Iterator<Item = (&ChangefeedId, &DispatcherManager)> {
        self.dms.iter()
    }
    /// Whether dispatcher `id` of `cf` on this node takes events now (the feed's demand).
    pub fn wants_events(&self, cf: &ChangefeedId, id: sluice_types::DispatcherId) -> bool {
        self.dms.get(cf).is_some_and(|dm| dm.wants_events(id))
    }
    pub fn holds(&self) -> &Holds {
        &self.holds
    }
    pub fn leader(&self) -> Option<&NodeId> {
        self.view.leader.as_ref().map(|l| &l.0)
    }

    /// Handle one input at time `now`; returns the effects to carry out.
    pub fn handle(&mut self, now: Millis, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Tick => self.tick(now, &mut out),
            Input::Message { from, msg } => self.on_message(now, from, msg, &mut out),
            Input::NodesChanged { alive } => self.on_nodes_changed(now, alive, &mut out),
            Input::Leader { node, rev } => self.on_leader(node, rev, &mut out),
            Input::MetaResult { req, result } if req >= MAINTAINER_META_REQ => {
                self.on_maintainer_meta_result(now, req, result, &mut out);
            }
            Input::MetaResult { req, result } => {
                if let Some(c) = &mut self.coordinator {
                    c.on_meta_result(now, &self.view.alive, req, result, &mut out);
                }
            }
            Input::Schema {
                cf,
                epoch,
                snapshot,
                persisted_epoch,
            } => {
                let ctx = self.view.ctx(now);
                if let Some(m) = self.maintainers.get_mut(&cf) {
                    if m.epoch() == epoch {
                        m.on_schema(&ctx, snapshot, persisted_epoch, &mut out);
                    }
                }
            }
            Input::Applied { cf, epoch, result } => {
                let ctx = self.view.ctx(now);
                if let Some(m) = self.maintainers.get_mut(&cf) {
                    if m.epoch() == epoch {
                        m.on_applied(&ctx, result, &mut out);
                    }
                }
            }
            Input::Floor { cf, id, result } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_floor(now, id, result, &mut out);
                }
            }
            Input::Regions {
                table,
                regions,
                rows,
            } => self.on_regions(table, regions, rows),
            i @ (Input::ChunkQueued { .. }
            | Input::ChunkFailed { .. }
            | Input::ChunkLost { .. }
            | Input::ChunkDropped { .. }
            | Input::ChunkBounds { .. }) => self.on_chunk_input(now, i, &mut out),
            i @ (Input::Events { .. }
            | Input::Resolved { .. }
            | Input::SinkFlushed { .. }
            | Input::SinkClosed { .. }
            | Input::SinkError { .. }) => self.on_stream_input(now, i, &mut out),
            Input::Hold { point, on } => {
                self.holds.set(point, on);
                for dm in self.dms.values_mut() {
                    dm.on_hold(now, point, on, &self.holds, &mut out);
                }
                self.reap_closed(&mut out);
            }
            Input::Request(req) => self.on_request(now, req, &mut out),
            Input::CaptureStatus { error } => self.on_capture_status(error),
        }
        self.send_maintainer_meta(&mut out);
        out
    }

    /// A dispatcher's stream from the feed (events, a resolved ts) and its sink's answers go to
    /// its changefeed's dispatcher manager.
    fn on_stream_input(&mut self, now: Millis, input: Input, out: &mut Vec<Effect>) {
        match input {
            Input::Events {
                cf,
                id,
                items,
                resolved_ts,
            } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_events(now, id, items, resolved_ts, &self.holds, out);
                }
            }
            Input::Resolved {
                cf,
                ids,
                resolved_ts,
            } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_resolved(now, ids, resolved_ts, &self.holds, out);
                }
            }
            Input::SinkFlushed { cf, id, ts } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_sink_flushed(now, id, ts, &self.holds, out);
                }
            }
            Input::SinkClosed { cf, id } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_sink_closed(now, id, &self.holds, out);
                }
                self.reap_closed(out);
            }
            Input::SinkError {
                cf,
                id,
                retryable,
                table_only,
                message,
            } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    if table_only {
                        dm.on_table_refused(id, message, out);
                    } else {
                        dm.on_sink_error(id, retryable, message, out);
                    }
                }
            }
            _ => {}
        }
    }

    fn on_nodes_changed(
        &mut self,
        now: Millis,
        alive: BTreeMap<NodeId, u64>,
        out: &mut Vec<Effect>,
    ) {
        self.view.alive = alive;
        let ctx = self.view.ctx(now);
        for m in self.maintainers.values_mut() {
            m.on_nodes_changed(&ctx, out);
        }
        if let Some(c) = &mut self.coordinator {
            c.on_tick(now, &self.view.alive, out);
        }
    }

    /// The election's result: this node runs the coordinator only while it is the leader, one
    /// coordinator per won revision.
    fn on_leader(&mut self, node: Option<NodeId>, rev: u64, out: &mut Vec<Effect>) {
        match node {
            Some(n) if n == self.id => {
                if self.coordinator.as_ref().map(|c| c.rev()) != Some(rev) {
                    self.coordinator = Some(Coordinator::new(self.id.clone(), rev, out));
                }
                self.view.leader = Some((n, rev));
            }
            Some(n) => {
                self.coordinator = None;
                self.view.leader = Some((n, rev));
            }
            None => {
                self.coordinator = None;
                self.view.leader = None;
            }
        }
        self.max_coordinator_rev = self.max_coordinator_rev.max(rev);
    }

    /// The meta-store operations the maintainers asked for, each with a request id of its own.
    fn send_maintainer_meta(&mut self, out: &mut Vec<Effect>) {
        for (cf, m) in self.maintainers.iter_mut() {
            for (tag, op) in m.take_meta_ops() {
                let req = self.next_maintainer_meta;
                self.next_maintainer_meta += 1;
                self.maintainer_meta
                    .insert(req, (cf.clone(), m.epoch(), tag));
                out.push(Effect::Meta { req, op });
            }
        }
        while self.maintainer_meta.len() > MAX_MAINTAINER_META_IN_FLIGHT {
            self.maintainer_meta.pop_first();
        }
    }

    fn on_maintainer_meta_result(
        &mut self,
        now: Millis,
        req: u64,
        result: crate::meta::MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let Some((cf, epoch, tag)) = self.maintainer_meta.remove(&req) else {
            return;
        };
        let ctx = self.view.ctx(now);
        if let Some(m) = self.maintainers.get_mut(&cf).filter(|m| m.epoch() == epoch) {
            m.on_meta_result(&ctx, tag, result, out);
        }
    }

    /// Capture stopped or keeps failing (or runs again) on this node: every changefeed with work
    /// here says so.
    fn on_capture_status(&mut self, error: Option<String>) {
        self.capture_error =
            error.map(|e| crate::msg::truncate_error(format!("capture on node {}: {e}", self.id)));
        for dm in self.dms.values_mut() {
            dm.set_node_warning(self.capture_error.clone());
        }
        for m in self.maintainers.values_mut() {
            m.set_node_warning(self.capture_error.clone());
        }
    }

    fn on_request(&mut self, now: Millis, req: UserRequest, out: &mut Vec<Effect>) {
        if let UserRequest::Table { cf, req } = &req {
            if self
                .maintainers
                .get(cf)
                .map(|m| m.is_bootstrapped())
                .unwrap_or(false)
            {
                let ctx = self.view.ctx(now);
                if let Some(m) = self.maintainers.get_mut(cf) {
                    m.on_request(&ctx, req.clone(), out);
                }
                return;
            }
        }
        match &mut self.coordinator {
            Some(c) => c.on_request(now, &self.view.alive, req, out),
            None => out.push(Effect::Trace(TraceEvent::Log(format!(
                "node {}: request dropped, not the coordinator: {req:?}",
                self.id
            )))),
        }
    }

    /// The upstream's statistics of a table: its regions (for the split scheduler) and its row
    /// estimate (for the maintainers' snapshot estimate).
    fn on_regions(&mut self, table: TableId, regions: Vec<Key>, rows: u64) {
        self.view.regions.insert(table, regions);
        self.view.table_rows.insert(table, rows);
        for m in self.maintainers.values_mut() {
            m.note_table_rows(table, rows);
        }
    }

    /// The feed's answers about a dispatcher's snapshot chunk.
    fn on_chunk_input(&mut self, now: Millis, input: Input, out: &mut Vec<Effect>) {
        match input {
            Input::ChunkQueued {
                cf,
                id,
                read,
                ts,
                cursor,
                more,
                rows,
            } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    let chunk = crate::dispatcher::QueuedRead {
                        read,
                        ts,
                        cursor,
                        more,
                        rows,
                    };
                    dm.on_chunk_queued(now, id, chunk, out);
                }
            }
            Input::ChunkFailed {
                cf,
                id,
                read,
                message,
            } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_chunk_failed(now, id, read, message);
                }
            }
            Input::ChunkBounds {
                cf,
                id,
                probe,
                result,
            } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_chunk_bounds(now, id, probe, result, out);
                }
            }
            Input::ChunkLost { cf, id, why } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_chunk_lost(now, id, why);
                }
            }
            Input::ChunkDropped { cf, id, read } => {
                if let Some(dm) = self.dms.get_mut(&cf) {
                    dm.on_chunk_dropped(id, read);
                }
            }
            _ => {}
        }
    }

    fn on_message(&mut self, now: Millis, from: NodeId, msg: Message, out: &mut Vec<Effect>) {
        match msg {
            Message::AddMaintainer {
                cf,
                epoch,
                rev,
                incarnation,
                checkpoint,
                config,
            } => self.add_maintainer(now, (cf, epoch, rev, incarnation, checkpoint), config, out),
            Message::RemoveMaintainer {
                cf,
                epoch,
                rev,
                cascade: _,
            } => self.remove_maintainer(now, cf, epoch, rev, out),
            Message::CoordinatorBootstrap { rev } => self.answer_coordinator(from, rev, out),
            Message::NodeSettings {
                rev,
                cordoned,
                draining,
            } => {
                if rev >= self.max_coordinator_rev {
                    self.view.cordoned = cordoned.into_iter().collect();
                    self.view.draining = draining.into_iter().collect();
                }
            }
            Message::TableRequest { cf, req } => {
                let ctx = self.view.ctx(now);
                if let Some(m) = self.maintainers.get_mut(&cf) {
                    m.on_request(&ctx, req, out);
                }
            }
            Message::CoordinatorBootstrapResponse { .. }
            | Message::MaintainerStatusReport { .. }
            | Message::CloseChangefeedResponse { .. } => {
                if let Some(c) = &mut self.coordinator {
                    c.on_message(now, &self.view.alive, &from, msg, out);
                }
            }
            Message::Bootstrap { ref cf, epoch, .. } => {
                let cf = cf.clone();
                self.bootstrap_dispatchers(now, from, &cf, epoch, msg, out)
            }
            Message::CloseChangefeed { ref cf, epoch } => {
                let cf = cf.clone();
                self.close_dispatchers(now, from, cf, epoch, msg, out)
            }
            Message::Create { ref cf, .. }
            | Message::Copy { ref cf, .. }
            | Message::Remove { ref cf, .. }
            | Message::Merge { ref cf, .. }
            | Message::Barrier { ref cf, .. } => {
                let cf = cf.clone();
                self.route_to_dispatchers(now, from, &cf, msg, out)
            }
            Message::BootstrapResponse { ref cf, .. }
            | Message::Heartbeat { ref cf, .. }
            | Message::Rejected { ref cf, .. }
            | Message::BlockStatus { ref cf, .. }
            | Message::DispatcherError { ref cf, .. } => {
                let cf = cf.clone();
                self.route_to_maintainer(now, from, &cf, msg, out)
            }
        }
    }

    /// Starts a maintainer the current coordinator placed here, for this incarnation, unless
    /// one of that epoch or newer runs or stopped here.
    fn add_maintainer(
        &mut self,
        now: Millis,
        (cf, epoch, rev, incarnation, checkpoint): (ChangefeedId, Epoch, u64, u64, Ts),
        config: ChangefeedConfig,
        out: &mut Vec<Effect>,
    ) {
        if rev < self.max_coordinator_rev {
            return self.stale(out, "add_maintainer", "deposed coordinator");
        }
        if incarnation != self.incarnation {
            return self.stale(
                out,
                "add_maintainer",
                "meant for an earlier incarnation of this node",
            );
        }
        self.max_coordinator_rev = rev;
        if let Some(m) = self.maintainers.get(&cf) {
            if m.epoch() >= epoch {
                return;
            }
        }
        if self
            .stopped_maintainers
            .get(&cf)
            .map(|s| s.epoch >= epoch)
            .unwrap_or(false)
        {
            return;
        }
        self.stopped_maintainers.remove(&cf);
        let ctx = self.view.ctx(now);
        let mut m = Maintainer::new(
            &ctx,
            cf.clone(),
            epoch,
            self.id.clone(),
            checkpoint,
            config,
            out,
        );
        m.set_node_warning(self.capture_error.clone());
        for (t, rows) in &self.view.table_rows {
            m.note_table_rows(*t, *rows);
        }
        self.maintainers.insert(cf, m);
    }

    /// Stops the maintainer of that epoch (or records that none of it runs here) and answers.
    fn remove_maintainer(
        &mut self,
        now: Millis,
        cf: ChangefeedId,
        epoch: Epoch,
        rev: u64,
        out: &mut Vec<Effect>,
    ) {
        if rev < self.max_coordinator_rev {
            self.stale_dropped += 1;
            return;
        }
        let running = self.maintainers.get(&cf).map(|m| m.epoch());
        if running == Some(epoch) {
            if let Some(mut m) = self.maintainers.remove(&cf) {
                let ctx = self.view.ctx(now);
                m.stop(&ctx, false, out);
                let mut st = m.status();
                st.state = MaintainerState::Stopped;
                self.stopped_maintainers.insert(cf, st);
            }
        } else if running.map(|e| e < epoch).unwrap_or(true)
            && self
                .stopped_maintainers
                .get(&cf)
                .map(|s| s.epoch <= epoch)
                .unwrap_or(true)
        {
            // Nothing of that epoch runs here (never started, or lost with an earlier
            // incarnation of this node): answer that it is stopped.
            self.stopped_maintainers.insert(
                cf.clone(),
                MaintainerStatus {
                    cf,
                    epoch,
                    state: MaintainerState::Stopped,
                    checkpoint: 0,
                    resolved: 0,
                    error: None,
                    warning: None,
                    snapshot: None,
                },
            );
        }
        self.report_stopped(out);
    }

    /// A new coordinator asks which maintainers run (or stopped) here.
    fn answer_coordinator(&mut self, from: NodeId, rev: u64, out: &mut Vec<Effect>) {
        if rev < self.max_coordinator_rev {
            self.stale_dropped += 1;
            return;
        }
        self.max_coordinator_rev = rev;
        let mut maintainers: Vec<MaintainerStatus> =
            self.maintainers.values().map(|m| m.status()).collect();
        maintainers.extend(self.stopped_maintainers.values().cloned());
        out.push(Effect::Send {
            to: from,
            msg: Message::CoordinatorBootstrapResponse {
                rev,
                incarnation: self.incarnation,
                maintainers,
            },
        });
    }

    /// A maintainer's bootstrap creates the changefeed's dispatcher manager here, unless the
    /// changefeed was closed here at that epoch or a newer one.
    fn bootstrap_dispatchers(
        &mut self,
        now: Millis,
        from: NodeId,
        cf: &ChangefeedId,
        epoch: Epoch,
        msg: Message,
        out: &mut Vec<Effect>,
    ) {
        if !self.dms.contains_key(cf) {
            if self
                .closed_epochs
                .get(cf)
                .map(|e| epoch <= *e)
                .unwrap_or(false)
            {
                return self.stale(out, "bootstrap", "changefeed closed at a newer epoch");
            }
            let mut dm = DispatcherManager::new(cf.clone(), self.id.clone(), self.incarnation);
            dm.set_node_warning(self.capture_error.clone());
            self.dms.insert(cf.clone(), dm);
        }
        if let Some(dm) = self.dms.get_mut(cf) {
            dm.on_message(now, &from, msg, &self.holds, out);
        }
    }

    /// A cascade close: the manager closes everything; with no manager here the close is
    /// remembered (a late bootstrap of that epoch is refused) and answered at once.
    fn close_dispatchers(
        &mut self,
        now: Millis,
        from: NodeId,
        cf: ChangefeedId,
        epoch: Epoch,
        msg: Message,
        out: &mut Vec<Effect>,
    ) {
        match self.dms.get_mut(&cf) {
            Some(dm) => {
                dm.on_message(now, &from, msg, &self.holds, out);
                self.reap_closed(out);
            }
            None => {
                let e = self.closed_epochs.entry(cf.clone()).or_default();
                *e = (*e).max(epoch);
                out.push(Effect::Send {
                    to: from,
                    msg: Message::CloseChangefeedResponse { cf, epoch },
                });
            }
        }
    }

    fn route_to_dispatchers(
        &mut self,
        now: Millis,
        from: NodeId,
        cf: &ChangefeedId,
        msg: Message,
        out: &mut Vec<Effect>,
    ) {
        match self.dms.get_mut(cf) {
            Some(dm) => {
                dm.on_message(now, &from, msg, &self.holds, out);
                self.reap_closed(out);
            }
            None => self.stale(out, msg.kind(), "no dispatcher manager (not bootstrapped)"),
        }
    }

    fn route_to_maintainer(
        &mut self,
        now: Millis,
        from: NodeId,
        cf: &ChangefeedId,
        msg: Message,
        out: &mut Vec<Effect>,
    ) {
        let ctx = self.view.ctx(now);
        match self.maintainers.get_mut(cf) {
            Some(m) => m.on_message(&ctx, &from, msg, out),
            None => self.stale(out, msg.kind(), "no maintainer here"),
        }
    }

    /// A message dropped as stale: counted and traced.
    fn stale(&mut self, out: &mut Vec<Effect>, kind: &'static str, reason: &'static str) {
        self.stale_dropped += 1;
        out.push(Effect::Trace(TraceEvent::Stale { kind, reason }));
    }

    /// Drop dispatcher managers whose cascade close finished.
    fn reap_closed(&mut self, _out: &mut [Effect]) {
        let closed: Vec<ChangefeedId> = self
            .dms
            .iter()
            .filter(|(_, d)| d.is_closed())
            .map(|(c, _)| c.clone())
            .collect();
        for cf in closed {
            if let Some(dm) = self.dms.remove(&cf) {
                let e = dm.owner().map(|o| o.1).unwrap_or_default();
                let slot = self.closed_epochs.entry(cf).or_default();
                *slot = (*slot).max(e);
            }
        }
    }

    fn report_stopped(&mut self, out: &mut Vec<Effect>) {
        if let Some((leader, _)) = &self.view.leader {
            for st in self.stopped_maintainers.values() {
                out.push(Effect::Send {
                    to: leader.clone(),
                    msg: Message::MaintainerStatusReport { status: st.clone() },
                });
            }
        }
    }

    fn tick(&mut self, now: Millis, out: &mut Vec<Effect>) {
        if let Some(c) = &mut self.coordinator {
            c.on_tick(now, &self.view.alive, out);
        }
        let ctx = self.view.ctx(now);
        for m in self.maintainers.values_mut() {
            m.on_tick(&ctx, out);
        }
        for dm in self.dms.values_mut() {
            dm.on_tick(now, &self.holds, out);
        }
        self.reap_closed(out);
        if now >= self.last_stopped_report + MAINTAINER_STATUS_MS * 5 {
            self.last_stopped_report = now;
            self.report_stopped(out);
        }
    }
}
