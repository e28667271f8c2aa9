//! Safety invariants, checked incrementally after every event. The oracle is the model upstream's
//! history and state, never the stream being checked.
//!
//! | invariant | checked when |
//! |---|---|
//! | one writer per key range | every sink write: no other started, not confirmed closed dispatcher of the changefeed overlaps the writer's span |
//! | stale epochs have no effect | every scheduling message a dispatcher manager applies: its epoch is the newest that manager admitted |
//! | epochs only grow | every write of a changefeed's info key |
//! | checkpoint monotonic | every persisted checkpoint and every maintainer checkpoint |
//! | checkpoint sound | same moments: every upstream event at or below it was delivered |
//! | no row invented | every write: the row exists upstream with that key and ts, inside the writer's span |
//! | per-key order | first delivery of a version: every older version of the key was delivered first |
//! | DDL order | first delivery of a DDL: every earlier row of its tables was delivered; first delivery of a row: every earlier DDL of its table was |
//! | dropped tables stay dropped | every dispatcher start: its table was not dropped at or before its start ts |
//! | a user's split stays | every merge a maintainer sends: its table was not split by a user's request that finished (`done`), unless a user's merge of it was asked for since |
//! | an error is acted on once | every persisted changefeed info: its error restarts are at most the dispatcher failures the injected sink faults can cause (each fatal one, and each `MAX_SINK_RETRIES_WITHOUT_PROGRESS + 1` retryable ones) |
//! | no needless restart | every whole-changefeed restart: its reason is an injected sink fault, never an error the model downstream raised itself (a write into a table it dropped: a replay that crossed an applied DDL, a dispatcher that should have been removed) |
//!
//! Liveness, checked by `settle`: every table request the meta store ever held was finished
//! (done or rejected) by some maintainer ([`Checker::unfinished_requests`]).
//!
//! The state of the model downstream ([`crate::downstream`], `sink-state`) is compared with the
//! upstream's at the end of every run and at `sink-matches-upstream` checks once the checkpoint
//! has caught up.

use crate::upstream::{UEvent, Upstream};
use sluice_control::maintainer::requests::{request_table, PersistedRequests};
use sluice_control::msg::TableRequest;
use sluice_types::{ChangefeedId, DispatcherId, Epoch, Key, Span, TableId, Ts};
use std::collections::{BTreeMap, BTreeSet};

pub type WriterKey = (String, u64, DispatcherId);

/// The message of every injected sink fault (`x-sink_error`).
pub const INJECTED_SINK_ERROR: &str = "injected sink write failure";

/// How many undelivered rows the gap check looks at per write.
pub const MAX_GAP_SCAN: usize = 256;

#[derive(Debug, Default)]
pub struct Checker {
    pub start_ts: Option<Ts>,
    pub violation: Option<String>,
    active: BTreeMap<WriterKey, Span>,
    /// Start ts of every dispatcher started.
    starts: BTreeMap<WriterKey, Ts>,
    /// Per changefeed, the newest epoch a maintainer instance started with.
    started_epoch: BTreeMap<ChangefeedId, Epoch>,
    /// Per changefeed, the newest epoch of a maintainer that finished its bootstrap.
    global_epoch: BTreeMap<ChangefeedId, Epoch>,
    /// History indexes of the row events delivered at least once.
    delivered: BTreeSet<usize>,
    /// Per dispatcher, the rows its current sink session wrote (`snapshot-row-order`).
    session_rows: BTreeMap<(String, u64, DispatcherId), (u64, BTreeSet<usize>)>,
    /// Per table: (ts, history index) of rows not yet delivered.
    undelivered_rows: BTreeMap<TableId, BTreeSet<(Ts, usize)>>,
    undelivered_ddls: BTreeMap<TableId, BTreeSet<Ts>>,
    undelivered_all: BTreeSet<(Ts, usize)>,
    delivered_ddl: BTreeSet<Ts>,
    registered: usize,
    dm_epoch: BTreeMap<(String, u64, ChangefeedId), Epoch>,
    persisted_epoch: BTreeMap<String, u64>,
    pub persisted_cp: BTreeMap<String, Ts>,
    maintainer_cp: BTreeMap<(ChangefeedId, Epoch), Ts>,
    pub restarted: bool,
    /// The reason of every whole-changefeed restart (error restarts), in order.
    pub restarts: Vec<String>,
    /// Injected sink faults that fired: fatal ones, retryable ones.
    pub sink_fatal: u64,
    pub sink_retryable: u64,
    pub rows_written: u64,
    /// Snapshot chunk rows written (first or again).
    pub snapshot_rows_written: u64,
    pub rows_first_delivered: u64,
    pub ddls_written: u64,
    /// Requests the meta store held (by their text) that no maintainer finished yet, with how
    /// many of each.
    requests_held: BTreeMap<String, usize>,
    /// How many of each the last record held.
    record_counts: BTreeMap<String, usize>,
    /// Finished requests that the store was not known to hold: a write decided before they
    /// finished may still bring them (once).
    finished_early: BTreeMap<String, usize>,
    /// Tables a user's split request finished for, not merged by a user's request since.
    user_split: BTreeSet<TableId>,
    /// Users' merge requests asked for and not finished, per table.
    user_merges: BTreeMap<TableId, usize>,
}

fn key_u64(k: &Key) -> u64 {
    let b = &k.0;
    if b.len() < 17 {
        return 0;
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[9..17]);
    u64::from_be_bytes(a)
}

impl Checker {
    fn fail(&mut self, s: String) {
        if self.violation.is_none() {
            self.violation = Some(s);
        }
    }

    pub fn ok(&self) -> bool {
        self.violation.is_none()
    }

    pub fn set_start(&mut self, ts: Ts, up: &Upstream) {
        if self.start_ts.is_none() {
            self.start_ts = Some(ts);
            self.registered = up.history.partition_point(|e| e.ts() <= ts);
            self.register(up);
        }
    }

    /// Record new upstream events as not yet delivered.
    pub fn register(&mut self, up: &Upstream) {
        if self.start_ts.is_none() {
            return;
        }
        while self.registered < up.history.len() {
            let i = self.registered;
            self.registered += 1;
            match &up.history[i] {
                UEvent::Row { ts, table, .. } => {
                    self.undelivered_rows
                        .entry(*table)
                        .or_default()
                        .insert((*ts, i));
                    self.undelivered_all.insert((*ts, i));
                }
                UEvent::Ddl { ddl, affected } => {
                    for t in affected
                        .iter()
                        .chain(ddl.influence.added.iter().map(|a| &a.0))
                    {
                        self.undelivered_ddls
                            .entry(*t)
                            .or_default()
                            .insert(ddl.commit_ts);
                    }
                    self.undelivered_all.insert((ddl.commit_ts, i));
                }
            }
        }
    }

    pub fn dispatcher_started(
        &mut self,
        node: &str,
        inc: u64,
        id: DispatcherId,
        span: &Span,
        start_ts: Ts,
        up: &Upstream,
    ) {
        if span.table != TableId(0) {
            if let Some(t) = up.tables.get(&span.table) {
                if let Some(d) = t.dropped {
                    if d <= start_ts {
                        self.fail(format!(
                            "dropped-table-stays-dropped: dispatcher {id:?} on {node} started for {:?} at {start_ts}, but the table was dropped at {d}",
                            span.table
                        ));
                    }
                }
            }
        }
        self.active
            .insert((node.to_string(), inc, id), span.clone());
        self.starts.insert((node.to_string(), inc, id), start_ts);
    }

    pub fn dispatcher_closed(&mut self, node: &str, inc: u64, id: DispatcherId) {
        self.active.remove(&(node.to_string(), inc, id));
    }

    /// A node crashed or fenced itself: none of its dispatchers can write any more.
    pub fn node_gone(&mut self, node: &str, inc: u64) {
        self.active.retain(|(n, i, _), _| !(n == node && *i == inc));
    }

    fn check_one_writer(&mut self, node: &str, inc: u64, id: DispatcherId, span: &Span) {
        if span.table == TableId(0) {
            return; // the table trigger writes DDLs only, ordered by the barrier
        }
        let me = (node.to_string(), inc, id);
        if !self.active.contains_key(&me) {
            self.fail(format!("one-writer: {id:?} on {node} wrote {span:?} while not started or already confirmed closed"));
            return;
        }
        let other = self
            .active
            .iter()
            .find(|(k, s)| **k != me && s.overlaps(span))
            .map(|(k, s)| (k.clone(), s.clone()));
        if let Some(((n, _, oid), s)) = other {
            self.fail(format!(
                "one-writer: {id:?} on {node} wrote {span:?} while {oid:?} on {n} ({s:?}) is started and not confirmed closed"
            ));
        }
    }

    /// A snapshot chunk's row: as the upstream held it at the chunk's position, in its span, and
    /// never written after a newer version of its key (`snapshot-row-order`). False: a violation.
    fn on_chunk_row(
        &mut self,
        node: &str,
        id: DispatcherId,
        span: &Span,
        (ts, key, idx): (Ts, &Key, usize),
        newer: Option<Ts>,
        up: &Upstream,
    ) -> bool {
        let Some((table, k, value, position)) = up.row_at(idx) else {
            self.fail(format!(
                "no-row-invented: {id:?} on {node} wrote a snapshot row #{idx} nobody read"
            ));
            return false;
        };
        self.snapshot_rows_written += 1;
        // Within one sink session a chunk row never follows a newer version of its key (a
        // replay in a later session may write older versions again, as any replay does).
        if let Some(newer) = newer {
            self.fail(format!(
                "snapshot-row-order: {table:?}/{k} read at {position} written by {id:?} on {node} after the newer version at {newer}, in the same sink session"
            ));
            return false;
        }
        // The key as it was at the chunk's position (a window read sees the upstream somewhere
        // before it: its rows of keys changed since must not be written).
        let at_position = up.value_at(table, k, position);
        if at_position != value {
            self.fail(format!(
                "snapshot-row-order: {table:?}/{k} written by {id:?} on {node} as a snapshot row with value {value:?}, but the key held {at_position:?} at the chunk's position {position}"
            ));
            return false;
        }
        if ts <= position || Key::row_u64(table, k) != *key || !span.contains(key) {
            self.fail(format!("no-row-invented: {id:?} on {node} wrote snapshot row ({ts}, {key:?}) outside its span {span:?} or not as read"));
            return false;
        }
        true
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_rows(
        &mut self,
        node: &str,
        inc: u64,
        id: DispatcherId,
        session: u64,
        span: &Span,
        rows: &[(Ts, Key, u64)],
        up: &Upstream,
    ) {
        self.check_one_writer(node, inc, id, span);
        let key = (node.to_string(), inc, id);
        if self
            .session_rows
            .get(&key)
            .is_none_or(|(s, _)| *s != session)
        {
            self.session_rows
                .insert(key.clone(), (session, BTreeSet::new()));
        }
        for (ts, key, handle) in rows {
            self.rows_written += 1;
            if *handle as usize >= crate::upstream::SNAP_BASE {
                let idx = *handle as usize;
                let session_rows = self.session_rows.get(&(node.to_string(), inc, id));
                let seen = |i: usize| session_rows.is_some_and(|(_, s)| s.contains(&i));
                let newer = up.row_at(idx).and_then(|(t, k, _, p)| {
                    let vs = up.versions.get(&(t, k))?;
                    vs.iter().find(|v| v.0 > p && seen(v.2)).map(|v| v.0)
                });
                if !self.on_chunk_row(node, id, span, (*ts, key, idx), newer, up) {
                    return;
                }
                continue;
            }
            if let Some((_, s)) = self.session_rows.get_mut(&(node.to_string(), inc, id)) {
                s.insert(*handle as usize);
            }
            let Some(UEvent::Row {
                ts: uts,
                table,
                key: ukey,
                ..
            }) = up.history.get(*handle as usize)
            else {
                self.fail(format!("no-row-invented: {id:?} on {node} wrote a row ({ts}, {key:?}) that the upstream never had"));
                return;
            };
            if uts != ts || Key::row_u64(*table, *ukey) != *key || !span.contains(key) {
                self.fail(format!("no-row-invented: {id:?} on {node} wrote ({ts}, {key:?}) outside its span {span:?} or not as upstream"));
                return;
            }
            let (table, k) = (*table, key_u64(key));
            let idx = *handle as usize;
            if !self.delivered.insert(idx) {
                continue; // a re-delivery
            }
            self.rows_first_delivered += 1;
            // DDL order: every DDL of this table before the row was delivered.
            if let Some(d) = self
                .undelivered_ddls
                .get(&table)
                .and_then(|s| s.range(..*ts).next().copied())
            {
                self.fail(format!(
                    "ddl-order: row {table:?}/{k} at {ts} delivered before the table's DDL at {d}"
                ));
            }
            // Per-key order: no newer version of the key was delivered before this one.
            let versions = up
                .versions
                .get(&(table, k))
                .map(|v| v.as_slice())
                .unwrap_or(&[]);
            let pos = versions.iter().position(|v| v.2 == idx).unwrap_or(0);
            if let Some(newer) = versions[pos + 1..]
                .iter()
                .find(|v| self.delivered.contains(&v.2))
            {
                self.fail(format!(
                    "per-key-order: {table:?}/{k} version {ts} first delivered after the newer version {} ({id:?} on {node})",
                    newer.0
                ));
            }
            if let Some(s) = self.undelivered_rows.get_mut(&table) {
                s.remove(&(*ts, idx));
            }
            self.undelivered_all.remove(&(*ts, idx));
        }
        // No row lost: a dispatcher's stream has no gap. After this batch, every row of its span
        // between its start and the batch's last ts was delivered.
        let (Some(max), Some(start)) = (
            rows.iter().map(|r| r.0).max(),
            self.starts.get(&(node.to_string(), inc, id)).copied(),
        ) else {
            return;
        };
        let lost = self
            .undelivered_rows
            .get(&span.table)
            .map(|s| {
                s.range((start + 1, 0)..(max, 0))
                    .take(MAX_GAP_SCAN)
                    .find(|(_, i)| matches!(up.history.get(*i), Some(UEvent::Row { table, key, .. }) if span.contains(&Key::row_u64(*table, *key))))
                    .copied()
            })
            .unwrap_or(None);
        if let Some((lts, li)) = lost {
            self.fail(format!("no-row-lost: {id:?} on {node} wrote up to {max} but skipped upstream event #{li} at {lts} of its span {span:?}"));
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_ddl(
        &mut self,
        node: &str,
        inc: u64,
        id: DispatcherId,
        span: &Span,
        ts: Ts,
        handle: u64,
        up: &Upstream,
    ) {
        self.check_one_writer(node, inc, id, span);
        self.ddls_written += 1;
        let Some(UEvent::Ddl { ddl, affected }) = up.history.get(handle as usize) else {
            self.fail(format!(
                "no-row-invented: {id:?} on {node} wrote a DDL at {ts} the upstream never had"
            ));
            return;
        };
        if ddl.commit_ts != ts {
            self.fail(format!(
                "no-row-invented: DDL handle {handle} written with ts {ts}"
            ));
            return;
        }
        if !self.delivered_ddl.insert(ts) {
            return;
        }
        let tables: Vec<TableId> = affected
            .iter()
            .copied()
            .chain(ddl.influence.added.iter().map(|a| a.0))
            .collect();
        for t in &tables {
            if let Some((rts, i)) = self
                .undelivered_rows
                .get(t)
                .and_then(|s| s.range(..(ts, 0)).next().copied())
            {
                self.fail(format!(
                    "ddl-order: DDL `{}` at {ts} delivered before row event #{i} of {t:?} at {rts}",
                    ddl.query
                ));
            }
            if let Some(s) = self.undelivered_ddls.get_mut(t) {
                s.remove(&ts);
            }
        }
        self.undelivered_all.remove(&(ts, handle as usize));
    }

    fn check_sound(&mut self, what: &str, cp: Ts) {
        if let Some((ts, i)) = self.undelivered_all.iter().next().copied() {
            if ts <= cp {
                self.fail(format!("checkpoint-sound: {what} checkpoint {cp} passes upstream event #{i} at {ts} that no sink write delivered"));
            }
        }
    }

    pub fn on_maintainer_checkpoint(&mut self, cf: &ChangefeedId, epoch: Epoch, cp: Ts) {
        let prev = self
            .maintainer_cp
            .insert((cf.clone(), epoch), cp)
            .unwrap_or(0);
        if cp < prev {
            self.fail(format!("checkpoint-monotonic: maintainer {cf} {epoch:?} checkpoint went from {prev} to {cp}"));
        }
        self.check_sound("maintainer", cp);
    }

    pub fn on_persisted_checkpoint(&mut self, cf: &str, cp: Ts) {
        let prev = self.persisted_cp.get(cf).copied().unwrap_or(0);
        if cp < prev {
            self.fail(format!(
                "checkpoint-monotonic: persisted checkpoint of {cf} went from {prev} to {cp}"
            ));
        }
        self.persisted_cp.insert(cf.to_string(), cp.max(prev));
        self.check_sound("persisted", cp);
    }

    /// An error restart is recorded (`restarts` of the changefeed's info): each one answers a
    /// distinct dispatcher failure. A dispatcher fails for good on a fatal sink error, or on the
    /// retryable one past `MAX_SINK_RETRIES_WITHOUT_PROGRESS` in a row; the coordinator acts once
    /// on it, whoever reports it and however often, and the close that follows removes it.
    pub fn on_persisted_restarts(&mut self, cf: &str, restarts: u32) {
        let per = sluice_control::config::MAX_SINK_RETRIES_WITHOUT_PROGRESS as u64 + 1;
        let causes = self.sink_fatal + self.sink_retryable / per;
        if restarts as u64 > causes {
            self.fail(format!(
                "error-acted-once: {cf} restarted {restarts} times after errors, but only {causes} dispatcher failures can have happened ({} fatal sink errors, {} retryable ones)",
                self.sink_fatal, self.sink_retryable
            ));
        }
    }

    /// The coordinator restarts the changefeed as a whole for `reason`: only an injected sink
    /// fault may cause that (a removed dispatcher's or a dropped table's error never does).
    pub fn on_restart(&mut self, reason: &str) {
        self.restarted = true;
        self.restarts.push(reason.to_string());
        if !reason.contains(INJECTED_SINK_ERROR) {
            self.fail(format!(
                "no-needless-restart: restart #{} of the changefeed, caused by no injected fault ({} fatal, {} retryable fired): {reason}",
                self.restarts.len(),
                self.sink_fatal,
                self.sink_retryable
            ));
        }
    }

    pub fn on_persisted_epoch(&mut self, cf: &str, epoch: u64) {
        let prev = self.persisted_epoch.get(cf).copied().unwrap_or(0);
        if epoch < prev {
            self.fail(format!(
                "epoch-monotonic: persisted epoch of {cf} went from {prev} to {epoch}"
            ));
        }
        self.persisted_epoch.insert(cf.to_string(), epoch.max(prev));
    }

    pub fn on_applied(
        &mut self,
        node: &str,
        inc: u64,
        cf: &ChangefeedId,
        kind: &str,
        epoch: Epoch,
    ) {
        let k = (node.to_string(), inc, cf.clone());
        let max = self.dm_epoch.get(&k).copied().unwrap_or_default();
        if epoch < max {
            self.fail(format!(
                "stale-epoch: {node} applied a `{kind}` of {epoch:?} after admitting {max:?}"
            ));
        }
        if epoch > max {
            self.dm_epoch.insert(k, epoch);
        }
        // One maintainer acting: once a maintainer finished its bootstrap (it acts), no manager
        // applies a mutation of an older maintainer.
        let acting = self.global_epoch.get(cf).copied().unwrap_or_default();
        if epoch < acting && epoch >= max {
            self.fail(format!("one-maintainer: {node} applied a `{kind}` of {epoch:?} while the maintainer of {acting:?} already acts"));
        }
    }

    /// A maintainer starts acting: its epoch must exceed every earlier acting one's.
    pub fn on_maintainer_started(&mut self, cf: &ChangefeedId, epoch: Epoch) {
        let prev = self.started_epoch.get(cf).copied();
        if let Some(p) = prev {
            if epoch <= p {
                self.fail(format!("epoch-monotonic: a maintainer of {cf} started with {epoch:?}, not above the earlier {p:?}"));
            }
        }
        if prev.map(|p| epoch > p).unwrap_or(true) {
            self.started_epoch.insert(cf.clone(), epoch);
        }
    }

    pub fn on_bootstrapped(&mut self, cf: &ChangefeedId, epoch: Epoch) {
        let e = self.global_epoch.entry(cf.clone()).or_default();
        *e = (*e).max(epoch);
    }

    /// A write of the changefeed's requests record: what it holds must be finished one day.
    /// A record that holds more of a request than the one before took new ones in (unless they
    /// finished already, see `finished_early`).
    pub fn on_requests_record(&mut self, rec: Option<&PersistedRequests>) {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in rec.map(|r| r.requests.as_slice()).unwrap_or_default() {
            *counts.entry(format!("{r:?}")).or_default() += 1;
        }
        for (k, c) in &counts {
            let before = self.record_counts.get(k).copied().unwrap_or(0);
            for _ in before..*c {
                match self.finished_early.get_mut(k) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => *self.requests_held.entry(k.clone()).or_default() += 1,
                }
            }
        }
        self.record_counts = counts;
    }

    /// A maintainer finished a request (`TraceEvent::RequestDone`).
    pub fn on_request_done(&mut self, req: &TableRequest, outcome: &str) {
        let key = format!("{req:?}");
        match self.requests_held.get_mut(&key) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.requests_held.remove(&key);
                }
            }
            None => *self.finished_early.entry(key).or_default() += 1,
        }
        let table = request_table(req);
        match req {
            TableRequest::Split { .. } if outcome == "done" => {
                self.user_split.insert(table);
            }
            TableRequest::Merge { .. } => {
                if let Some(n) = self.user_merges.get_mut(&table) {
                    *n = n.saturating_sub(1);
                }
                if outcome == "done" {
                    self.user_split.remove(&table);
                }
            }
            _ => {}
        }
    }

    /// A user asked for a merge of `table`.
    pub fn on_user_merge(&mut self, table: TableId) {
        *self.user_merges.entry(table).or_default() += 1;
    }

    /// A maintainer sent a merge of `table`'s spans. A user asked for it when a merge request is
    /// outstanding, or the meta store's requests record still holds one: a maintainer that
    /// finished a merge and died before it wrote so leaves it there, and its successor carries
    /// it out again (requests are at least once).
    pub fn on_merge_sent(&mut self, table: TableId) {
        let recorded = format!("{:?}", TableRequest::Merge { table });
        if self.user_split.contains(&table)
            && self.user_merges.get(&table).copied().unwrap_or(0) == 0
            && !self.record_counts.contains_key(&recorded)
        {
            self.fail(format!(
                "user-split-kept: {table:?} was split by a user's request and is merged without a user's merge request"
            ));
        }
    }

    /// Requests the meta store held that no maintainer finished.
    pub fn unfinished_requests(&self) -> Vec<String> {
        self.requests_held.keys().cloned().collect()
    }

    /// The sink replayed to `cp` equals the upstream at `cp` (for every table live at `cp`).
    pub fn sink_matches_upstream(&self, up: &Upstream, cp: Ts) -> Result<(), String> {
        let start = self.start_ts.unwrap_or(0);
        for ((table, k), versions) in &up.versions {
            let Some(t) = up.tables.get(table) else {
                continue;
            };
            if !t.live_at(cp) {
                continue;
            }
            let want = versions
                .iter()
                .rev()
                .find(|v| v.0 <= cp)
                .map(|v| v.1)
                .unwrap_or(None);
            let got = versions
                .iter()
                .rev()
                .find(|v| v.0 <= cp && (v.0 <= start || self.delivered.contains(&v.2)))
                .map(|v| v.1)
                .unwrap_or(None);
            if want != got {
                return Err(format!("sink-matches-upstream: {table:?}/{k} at checkpoint {cp}: upstream {want:?}, sink {got:?}"));
            }
        }
        Ok(())
    }
}
