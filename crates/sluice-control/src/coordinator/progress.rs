//! Driving every changefeed toward its desired state after each input: lost maintainers,
//! requested state changes (fenced closes first), placements, table requests; and adopting the
//! maintainers nodes report at the coordinator's bootstrap.
//!
//! Invariants: a state the store does not have yet is written again before anything else of
//! that changefeed; a stop is recorded only after a close (with a bumped epoch) finished.

use super::*;

impl Coordinator {
    /// Drive every changefeed toward its desired state.
    pub(super) fn progress(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        out: &mut Vec<Effect>,
    ) {
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
        let cfs: Vec<ChangefeedId> = self.feeds.keys().cloned().collect();
        for cf in cfs {
            self.progress_one(now, alive, &cf, out);
        }
    }

    fn progress_one(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        out: &mut Vec<Effect>,
    ) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        if f.meta_busy {
            return;
        }
        // A state change whose write did not get through (the store was unreachable) is
        // written again before anything else: what the store says must not lag behind what
        // this coordinator acts on (a successor would act on the stale one: an error or a
        // pause recorded only here would be lost).
        if f.info_unsaved {
            let info = f.info.clone();
            return self.set_info(cf, info, out);
        }
        if self.forget_lost_maintainer(now, alive, cf, out) {
            return;
        }
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        if let Some(want) = f.pending_state {
            return self.drive_to_state(cf, want, out);
        }
        self.run(now, alive, cf, out);
    }

    /// A maintainer on a node that is gone, or silent for too long, is forgotten (the next
    /// placement's epoch fences it wherever it still runs); a move whose origin is gone places
    /// at its destination at once. `true`: that placement was started, nothing more this round.
    fn forget_lost_maintainer(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        out: &mut Vec<Effect>,
    ) -> bool {
        let rev = self.rev;
        let Some(f) = self.feeds.get_mut(cf) else {
            return true;
        };
        match &mut f.placement {
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
                stop_maintainer(out, node.clone(), cf.clone(), *epoch, rev);
                f.placement = Placement::None;
            }
            Placement::Moving { node, to, .. } if alive.get(node) != Some(&f.placed_inc) => {
                let to = to.clone();
                f.placement = Placement::None;
                if f.info.state == FeedState::Normal && f.pending_state.is_none() {
                    self.place(now, alive, cf, Some(to), out);
                    return true;
                }
            }
            Placement::Closing { pending, .. } => pending.retain(|n| alive.contains_key(n)),
            _ => {}
        }
        false
    }

    /// A requested state change: stop what runs, fenced by a new epoch, then record the state.
    fn drive_to_state(&mut self, cf: &ChangefeedId, want: FeedState, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        if want == FeedState::Normal {
            if matches!(f.placement, Placement::None) {
                let mut info = f.info.clone();
                info.state = FeedState::Normal;
                info.error = None;
                f.pending_state = None;
                self.set_info(cf, info, out);
            }
            return;
        }
        match &f.placement {
            Placement::Running { node, epoch }
            | Placement::Added { node, epoch, .. }
            | Placement::Moving { node, epoch, .. } => {
                f.old_maintainer = Some((node.clone(), *epoch));
                let node = node.clone();
                self.bump(
                    cf,
                    Placement::Bumping {
                        node,
                        purpose: BumpPurpose::Close,
                    },
                    out,
                );
            }
            Placement::None => self.record_stopped(cf, want, out),
            Placement::Closing { pending, .. } if pending.is_empty() => {
                f.placement = Placement::None;
                f.closed_once = true;
            }
            _ => {}
        }
    }

    /// Nothing runs: close whatever may still run anywhere, then record the state (an error
    /// already recorded it: then the close only ends here, and the changefeed restarts after
    /// its backoff). Only a close that finished counts: a failed bump is tried again.
    fn record_stopped(&mut self, cf: &ChangefeedId, want: FeedState, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        if !f.closed_once {
            let node = self.node.clone();
            return self.bump(
                cf,
                Placement::Bumping {
                    node,
                    purpose: BumpPurpose::Close,
                },
                out,
            );
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
            self.set_info(cf, info, out);
        }
    }

    /// Normal changefeeds get a maintainer, errored ones after their backoff; table requests
    /// go to the running maintainer.
    fn run(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        out: &mut Vec<Effect>,
    ) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        if let Placement::Closing { pending, .. } = &f.placement {
            if pending.is_empty() {
                f.placement = Placement::None;
            }
            return;
        }
        let runnable = f.info.state == FeedState::Normal
            || (f.info.state == FeedState::Error && now >= f.backoff_until);
        if runnable && f.placement == Placement::None {
            if f.info.state == FeedState::Error {
                let mut info = f.info.clone();
                info.state = FeedState::Normal;
                return self.set_info(cf, info, out);
            }
            return self.place(now, alive, cf, None, out);
        }
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
                    stop_maintainer(out, node.clone(), st.cf.clone(), st.epoch, rev);
                }
            }
        }
    }
}
