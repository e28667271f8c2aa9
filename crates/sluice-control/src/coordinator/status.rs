//! Maintainer reports reaching the coordinator: bootstrap answers, status reports (checkpoint,
//! resolved ts, warnings, errors) and close confirmations; the checkpoint write and the
//! error path (close, backoff, failed).
//!
//! Invariants: only the current maintainer's (node and epoch) report counts; an error acts once
//! per maintainer epoch; the checkpoint written only grows.

use super::*;

impl Coordinator {
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
                stop_maintainer(out, from.clone(), status.cf.clone(), status.epoch, self.rev);
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
        if let Some(snap) = &status.snapshot {
            let (rows, at, _) = f.snapshot_rate;
            if now >= at + 1000 {
                let rate = snap.rows.saturating_sub(rows) * 1000 / (now - at).max(1);
                f.snapshot_rate = (snap.rows, now, rate);
            }
        }
        f.snapshot = status.snapshot.clone();
        // `initial-only`: once the copy is durable the changefeed stops (like a pause).
        let copied = status.snapshot.as_ref().is_some_and(|s| s.finished);
        if copied
            && f.info.config.snapshot.mode == crate::config::SnapshotMode::InitialOnly
            && f.info.state == FeedState::Normal
            && f.pending_state.is_none()
        {
            f.pending_state = Some(FeedState::Paused);
            f.closed_once = false;
            out.push(Effect::Trace(crate::io::TraceEvent::Log(format!(
                "changefeed {}: its initial-only snapshot finished: stopping it",
                status.cf
            ))));
        }
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
}
