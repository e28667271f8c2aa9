//! The coordinator's meta-store results: what each finished read or write changes (loading,
//! reloads after a lost compare-and-swap, creates, epoch bumps, saves, deletes, cordons).
//!
//! Invariants: a result is matched to its request once (the pending entry is removed); a
//! checkpoint result never moves the known checkpoint backwards; only a newer write of a
//! node's cordon key changes what is known of it.

use super::*;

impl Coordinator {
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
        match p {
            Pending::LoadInfos => self.loaded_infos(now, alive, result, out),
            Pending::LoadStatuses => self.loaded_statuses(now, alive, result, out),
            Pending::LoadCordons => self.loaded_cordons(now, alive, result, out),
            Pending::ReloadInfo(cf) => self.reloaded_info(&cf, result),
            Pending::Create(cf, info, start) => self.created(cf, *info, start, result, out),
            Pending::Bump(cf, epoch) => self.bumped(now, alive, &cf, epoch, result, out),
            Pending::SaveInfo(cf, info) => self.saved_info(&cf, *info, result, out),
            Pending::SaveCheckpoint(cf, ts) => self.saved_checkpoint(cf, ts, result, out),
            Pending::Delete(cf) => self.deleted(cf, result, out),
            Pending::Cordon(node, kind) => self.cordon_written(now, alive, node, kind, result, out),
        }
        self.progress(now, alive, out);
    }

    fn loaded_infos(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let MetaResult::Got { kvs, .. } = result else {
            return self.load_failed(out);
        };
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
                    // An error is recorded before its close (fail): the coordinator that
                    // recorded it may have gone before closing. Close it again before a
                    // restart, or a failed dispatcher still running would be adopted and its
                    // error acted on twice (and a failed changefeed's dispatchers would keep
                    // running).
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

    fn loaded_statuses(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let MetaResult::Got { kvs, .. } = result else {
            return self.load_failed(out);
        };
        for kv in kvs {
            if let Ok(st) = serde_json::from_slice::<ChangefeedStatusRecord>(&kv.value) {
                let cf = ChangefeedId::new(kv.key.trim_start_matches(keys::CHANGEFEED_STATUS));
                self.statuses.insert(cf, st.checkpoint_ts);
            }
        }
        self.apply_statuses();
        self.loaded_one(now, alive, out);
    }

    fn loaded_cordons(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let MetaResult::Got { kvs, .. } = result else {
            return self.load_failed(out);
        };
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

    /// One of the three loads failed: while still loading, read everything again.
    fn load_failed(&mut self, out: &mut Vec<Effect>) {
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

    fn reloaded_info(&mut self, cf: &ChangefeedId, result: MetaResult) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        if let MetaResult::Got { kvs, .. } = result {
            if let Some(kv) = kvs.into_iter().find(|kv| kv.key == keys::info(cf.as_str())) {
                if let Ok(info) = serde_json::from_slice::<ChangefeedInfo>(&kv.value) {
                    f.info = info;
                    f.info_rev = kv.mod_revision;
                    f.info_unsaved = false;
                }
                f.meta_busy = false;
            }
        } else {
            f.meta_busy = false;
        }
    }

    fn created(
        &mut self,
        cf: ChangefeedId,
        info: ChangefeedInfo,
        start: Ts,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let MetaResult::Txn {
            succeeded: true,
            revision,
        } = result
        else {
            return self.log(out, format!("creating changefeed {cf} failed (it exists, this coordinator was deposed, or the store is unavailable)"));
        };
        self.feeds
            .insert(cf.clone(), new_feed(info, revision, start));
        self.log(out, format!("changefeed {cf} created at {start}"));
        out.push(Effect::CheckpointPersisted { cf, ts: start });
    }

    fn bumped(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        epoch: u64,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let MetaResult::Txn {
            succeeded: true,
            revision,
        } = result
        else {
            return self.bump_failed(cf, &result, out);
        };
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        f.meta_busy = false;
        f.info.epoch = epoch;
        f.info_rev = revision;
        // The bump wrote the whole info.
        f.info_unsaved = false;
        match std::mem::replace(&mut f.placement, Placement::None) {
            Placement::Bumping {
                node,
                purpose: BumpPurpose::Place,
            } => self.add_maintainer(now, alive, cf, node, Epoch(epoch), out),
            Placement::Bumping {
                purpose: BumpPurpose::Close,
                ..
            } => self.close_everywhere(now, alive, cf, Epoch(epoch), out),
            other => f.placement = other,
        }
    }

    /// The epoch is bumped for a placement: send the maintainer to `node`.
    fn add_maintainer(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        node: NodeId,
        epoch: Epoch,
        out: &mut Vec<Effect>,
    ) {
        let rev = self.rev;
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        let checkpoint = f.checkpoint.max(f.reported);
        f.placed_inc = alive.get(&node).copied().unwrap_or(0);
        f.last_report = now;
        f.placement = Placement::Added {
            node: node.clone(),
            epoch,
            last_sent: now,
        };
        out.push(Effect::Send {
            to: node,
            msg: Message::AddMaintainer {
                cf: cf.clone(),
                epoch,
                rev,
                incarnation: f.placed_inc,
                checkpoint,
                config: f.info.config.clone(),
            },
        });
    }

    /// The epoch is bumped for a close: every live node closes the changefeed's dispatchers
    /// with it, and the old maintainer (if any) stops.
    fn close_everywhere(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        epoch: Epoch,
        out: &mut Vec<Effect>,
    ) {
        let rev = self.rev;
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        let pending: BTreeSet<NodeId> = alive.keys().cloned().collect();
        for n in &pending {
            out.push(Effect::Send {
                to: n.clone(),
                msg: Message::CloseChangefeed {
                    cf: cf.clone(),
                    epoch,
                },
            });
        }
        if let Some((n, e)) = f.old_maintainer.take() {
            stop_maintainer(out, n, cf.clone(), e, rev);
        }
        f.placement = Placement::Closing {
            epoch,
            pending,
            last_sent: now,
        };
    }

    fn bump_failed(&mut self, cf: &ChangefeedId, result: &MetaResult, out: &mut Vec<Effect>) {
        let conflict = matches!(
            result,
            MetaResult::Txn {
                succeeded: false,
                ..
            }
        );
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        f.meta_busy = false;
        match f.placement {
            Placement::Bumping {
                purpose: BumpPurpose::Place,
                ..
            } => f.placement = Placement::None,
            Placement::Bumping {
                purpose: BumpPurpose::Close,
                ..
            } => {
                // Retried by `progress`.
                f.placement = Placement::None;
                f.pending_state = f.pending_state.or(Some(f.info.state));
            }
            _ => {}
        }
        if conflict {
            f.meta_busy = true;
            self.reload_info(cf, out);
        }
    }

    fn saved_info(
        &mut self,
        cf: &ChangefeedId,
        info: ChangefeedInfo,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        f.meta_busy = false;
        match result {
            MetaResult::Txn {
                succeeded: true,
                revision,
            } => {
                f.info = info;
                f.info_rev = revision;
                f.info_unsaved = false;
            }
            MetaResult::Txn {
                succeeded: false, ..
            } => {
                f.meta_busy = true;
                self.reload_info(cf, out);
            }
            _ => {}
        }
    }

    fn saved_checkpoint(
        &mut self,
        cf: ChangefeedId,
        ts: Ts,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let saved = matches!(
            result,
            MetaResult::Txn {
                succeeded: true,
                ..
            }
        );
        if let Some(f) = self.feeds.get_mut(&cf) {
            f.writing_checkpoint = false;
            if saved {
                f.checkpoint = f.checkpoint.max(ts);
                #[cfg(feature = "mutations")]
                if crate::mutations::on("checkpoint-regress") {
                    f.checkpoint = ts;
                }
            }
        }
        if saved {
            out.push(Effect::CheckpointPersisted { cf, ts });
        }
    }

    fn deleted(&mut self, cf: ChangefeedId, result: MetaResult, out: &mut Vec<Effect>) {
        if let MetaResult::Txn {
            succeeded: true, ..
        } = result
        {
            self.feeds.remove(&cf);
            self.log(out, format!("changefeed {cf} removed"));
        } else if let Some(f) = self.feeds.get_mut(&cf) {
            f.meta_busy = false;
        }
    }

    /// A cordon (or drain, or uncordon) write finished: every node hears at once, so from now
    /// on no new dispatcher goes there. Results may come back in another order than the writes
    /// were made: only a newer write of the node's key changes what is known.
    fn cordon_written(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        node: NodeId,
        kind: Option<&'static str>,
        result: MetaResult,
        out: &mut Vec<Effect>,
    ) {
        let MetaResult::Txn {
            succeeded: true,
            revision,
        } = result
        else {
            return;
        };
        if self
            .cordon_rev
            .get(&node)
            .map(|r| *r >= revision)
            .unwrap_or(false)
        {
            return;
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
        self.send_settings(now, alive, out);
    }
}
