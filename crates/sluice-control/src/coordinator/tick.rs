//! The coordinator's timer: resends of unanswered placements, moves and closes, drains and
//! the node settings every node must hold.

use super::*;

impl Coordinator {
    pub fn on_tick(&mut self, now: Millis, alive: &BTreeMap<NodeId, u64>, out: &mut Vec<Effect>) {
        self.forgive_own_stall(now);
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
        if self.phase == Phase::Working {
            self.resend(now, out);
            self.drain(now, alive, out);
            self.resend_settings(now, alive, out);
        }
        self.progress(now, alive, out);
    }

    /// After a gap of [`COORDINATOR_STALL_MS`] or more since the last tick, the coordinator did
    /// not run (its node's loop was blocked: reading a huge transaction, a paused process):
    /// every maintainer's silence is counted without the gap, so a maintainer whose reports
    /// wait in the same loop is not taken for lost and placed again, over and over. A node
    /// that is really gone is still seen by its liveness.
    fn forgive_own_stall(&mut self, now: Millis) {
        if let Some(prev) = self.last_tick {
            assert!(now >= prev, "coordinator time went back: {prev} -> {now}");
            let gap = now - prev;
            #[cfg(feature = "mutations")]
            let gap = if crate::mutations::on("coordinator-counts-own-stall") {
                0
            } else {
                gap
            };
            if gap >= COORDINATOR_STALL_MS {
                for f in self.feeds.values_mut() {
                    f.last_report = f.last_report.saturating_add(gap).min(now);
                }
            }
        }
        self.last_tick = Some(now);
    }

    /// Placements, moves and closes not answered within [`RESEND_MS`] are sent again.
    fn resend(&mut self, now: Millis, out: &mut Vec<Effect>) {
        let rev = self.rev;
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
                    stop_maintainer(out, node.clone(), cf.clone(), *epoch, rev);
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
    }

    /// Maintainers leave draining nodes (to a node neither draining nor cordoned).
    fn drain(&mut self, now: Millis, alive: &BTreeMap<NodeId, u64>, out: &mut Vec<Effect>) {
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
    }

    /// Every node hears the cordoned and draining nodes again every [`RESEND_MS`].
    fn resend_settings(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        out: &mut Vec<Effect>,
    ) {
        if self
            .last_settings
            .map(|t| now < t + RESEND_MS)
            .unwrap_or(false)
        {
            return;
        }
        self.send_settings(now, alive, out);
    }

    /// Every live node hears the cordoned and draining nodes now.
    pub(super) fn send_settings(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        out: &mut Vec<Effect>,
    ) {
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
}
