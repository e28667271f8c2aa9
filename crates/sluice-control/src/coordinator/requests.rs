//! User requests (create, pause, resume, remove, update, move, cordon, drain, table requests),
//! queued (bounded) until the coordinator is working.
//!
//! Invariant: an update never moves the start point; a changefeed is updated only while stopped.

use super::*;

impl Coordinator {
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
            UserRequest::CreateChangefeed { cf, config } => self.create(cf, config, out),
            UserRequest::PauseChangefeed { cf } => self.request_state(&cf, FeedState::Paused, out),
            UserRequest::RemoveChangefeed { cf } => {
                self.request_state(&cf, FeedState::Removed, out)
            }
            UserRequest::ResumeChangefeed { cf } => self.resume(&cf),
            UserRequest::UpdateChangefeed { cf, config } => self.update(&cf, config, out),
            UserRequest::MoveMaintainer { cf, to } => {
                self.move_maintainer(now, alive, &cf, to, out)
            }
            UserRequest::Cordon { node, on } => self.cordon(node, on, out),
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

    /// Writes the info and the status (at the start point) if no changefeed of that name
    /// exists, and forgets requests an earlier changefeed of that name left.
    fn create(&mut self, cf: ChangefeedId, config: ChangefeedConfig, out: &mut Vec<Effect>) {
        if self.feeds.contains_key(&cf) {
            return self.log(out, format!("changefeed {cf} already exists"));
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

    fn resume(&mut self, cf: &ChangefeedId) {
        if let Some(f) = self.feeds.get_mut(cf) {
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

    fn update(&mut self, cf: &ChangefeedId, config: ChangefeedConfig, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get(cf) else {
            return self.log(out, format!("no changefeed {cf}"));
        };
        if !matches!(f.info.state, FeedState::Paused | FeedState::Failed)
            || f.placement != Placement::None
            || f.meta_busy
        {
            return self.log(
                out,
                format!("changefeed {cf} can be updated only while paused"),
            );
        }
        let mut info = f.info.clone();
        // The start point is history: an update never moves it.
        let start_ts = info.config.start_ts;
        info.config = config;
        info.config.start_ts = start_ts;
        self.set_info(cf, info, out);
    }

    /// A running maintainer stops (not cascading to its dispatchers), then is placed on `to`.
    fn move_maintainer(
        &mut self,
        now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        to: NodeId,
        out: &mut Vec<Effect>,
    ) {
        let rev = self.rev;
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        let Placement::Running { node, epoch } = f.placement.clone() else {
            return;
        };
        if node == to || !alive.contains_key(&to) {
            return;
        }
        stop_maintainer(out, node.clone(), cf.clone(), epoch, rev);
        f.placement = Placement::Moving {
            node,
            epoch,
            to,
            last_sent: now,
        };
    }

    fn cordon(&mut self, node: NodeId, on: bool, out: &mut Vec<Effect>) {
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

    fn request_state(&mut self, cf: &ChangefeedId, state: FeedState, out: &mut Vec<Effect>) {
        if let Some(f) = self.feeds.get_mut(cf) {
            f.pending_state = Some(state);
            f.closed_once = false;
        } else {
            self.log(out, format!("no changefeed {cf}"));
        }
    }
}
