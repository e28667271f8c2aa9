//! What one event does: the queue's events (ticks, inputs, sink acknowledgements and closes, a
//! DDL's record finishing, a retried effect) dispatched, a node handling an input, and the
//! effects of the control plane carried out (messages, meta-store operations and what their
//! writes tell the checker, schema, applied-DDL and floor loads, traces), with the fault
//! coverage by operator phase.
//!
//! Invariants: a node's shell checks its lease before any event of its own; an event for an
//! earlier incarnation, or for a node that is down, is lost; a paused node's inputs and ticks
//! wait until it wakes; a node cut off from the store gets `Unavailable` for a meta operation and
//! retries a schema load; every input that did something is noted, so it is in the trace hash.

use super::*;

impl Sim {
    pub(super) fn deliver_now(&mut self, name: &str, input: Input) {
        let inc = self.nodes.get(name).map(|n| n.incarnation).unwrap_or(0);
        let now = self.now;
        self.push(
            now,
            Ev::Input {
                node: name.to_string(),
                inc,
                input,
            },
        );
    }

    pub(super) fn process(&mut self, ev: Ev) {
        match &ev {
            Ev::Tick(n)
            | Ev::Input { node: n, .. }
            | Ev::SinkAck { node: n, .. }
            | Ev::SinkClosed { node: n, .. }
            | Ev::DdlFinished { node: n, .. }
            | Ev::SinkAccepted { node: n, .. }
            | Ev::ChunkRead { node: n, .. }
            | Ev::ChunkAnswer { node: n, .. }
            | Ev::Effect { node: n, .. } => {
                let n = n.clone();
                self.check_fence(&n);
            }
            Ev::MetaTick => {}
        }
        match ev {
            Ev::MetaTick => self.meta_tick(),
            Ev::ChunkRead {
                node,
                inc,
                ask,
                asked,
            } => self.chunk_read(&node, inc, ask, asked),
            Ev::ChunkAnswer {
                node,
                inc,
                ask,
                chunk,
            } => self.chunk_answer(&node, inc, ask, chunk),
            Ev::SinkAccepted {
                node,
                inc,
                cf,
                id,
                rows,
                bytes,
            } => {
                if let Some(f) = self
                    .nodes
                    .get_mut(&node)
                    .filter(|n| n.incarnation == inc)
                    .and_then(|n| n.feed.as_mut())
                {
                    f.on_accepted(&cf, id, rows, bytes);
                }
            }
            Ev::Tick(name) => self.node_tick(name),
            Ev::Input { node, inc, input } => {
                let paused = self.nodes.get(&node).map(|n| n.paused_until).unwrap_or(0);
                if paused > self.now {
                    self.push(paused, Ev::Input { node, inc, input });
                    return;
                }
                self.handle(&node, inc, input);
            }
            Ev::SinkAck {
                node,
                inc,
                cf,
                id,
                session,
                ts,
            } => {
                if self.session_is(&node, inc, id, session, false) {
                    self.handle(&node, inc, Input::SinkFlushed { cf, id, ts });
                }
            }
            Ev::Effect { node, inc, effect } => {
                if self
                    .nodes
                    .get(&node)
                    .map(|n| n.incarnation == inc && n.state.is_some())
                    .unwrap_or(false)
                {
                    self.effect(&node, inc, effect);
                }
            }
            Ev::DdlFinished { node, inc, ts } => {
                if self
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.incarnation == inc && n.state.is_some())
                {
                    self.downstream.finish_ddl(ts);
                }
            }
            Ev::SinkClosed {
                node,
                inc,
                cf,
                id,
                session,
            } => {
                if self.session_is(&node, inc, id, session, true) {
                    self.sessions.remove(&(node.clone(), inc, id));
                    self.handle(&node, inc, Input::SinkClosed { cf, id });
                }
            }
        }
    }

    /// A node's tick: capture catches up (a write is captured when a tick reads it, as the
    /// server's capture publishes in its own time), the node's feed reads, then the control
    /// plane ticks; a paused node ticks when it wakes.
    fn node_tick(&mut self, name: String) {
        let (alive, inc, paused) = match self.nodes.get(&name) {
            Some(n) => (n.state.is_some(), n.incarnation, n.paused_until),
            None => return,
        };
        if !alive {
            return;
        }
        let now = self.now;
        if paused > now {
            self.push(paused, Ev::Tick(name));
            return;
        }
        self.pump_requests();
        self.upstream.capture();
        self.feed_events(&name, inc);
        self.handle(&name, inc, Input::Tick);
        self.push(now + TICK_MS, Ev::Tick(name));
    }

    pub(super) fn handle(&mut self, name: &str, inc: u64, input: Input) {
        let now = self.now;
        // Summarized before the input is handed over, not cloned for it (a heartbeat can list
        // 100,000 dispatchers); a tick or events, noted only if they did something, keep what
        // their summary needs.
        let quiet = matches!(input, Input::Tick | Input::Events { .. });
        let events = match &input {
            Input::Events {
                id,
                items,
                resolved_ts,
                ..
            } => Some((*id, items.len(), *resolved_ts)),
            _ => None,
        };
        let trace = self.trace;
        let mut s = String::new();
        if !quiet && trace {
            s = format!("{now} {name}: ");
            summarize_input(&mut s, &input);
        }
        let effects = {
            let Some(n) = self.nodes.get_mut(name) else {
                return;
            };
            if n.incarnation != inc {
                return; // addressed to an earlier incarnation: lost
            }
            let Some(state) = n.state.as_mut() else {
                return;
            };
            state.handle(now, input)
        };
        if quiet && trace && !effects.is_empty() {
            s = format!("{now} {name}: ");
            match events {
                Some((id, items, resolved_ts)) => summarize_events(&mut s, id, items, resolved_ts),
                None => summarize_input(&mut s, &Input::Tick),
            }
        }
        if trace && (!quiet || !effects.is_empty()) {
            self.note(s);
        }
        for o in self.through_feed(name, inc, effects) {
            self.feed_out(name, inc, o);
        }
    }

    pub(super) fn effect(&mut self, name: &str, inc: u64, e: Effect) {
        match e {
            Effect::Send { to, msg } => {
                if let Message::Merge { span, .. } = &msg {
                    self.checker.on_merge_sent(span.table);
                }
                self.send(name, to.as_str(), msg)
            }
            Effect::Meta { req, op } => self.meta_effect(name, inc, req, op),
            Effect::LoadSchema { cf, epoch, at_ts } => {
                self.load_schema(name, inc, (cf, epoch, at_ts))
            }
            Effect::LoadApplied {
                cf, epoch, after, ..
            } => {
                // The blackhole keeps nothing; the others answer from their record.
                let list = self.downstream.applied(after);
                let lat = self.rng.range(1, 20);
                self.input_after(
                    name,
                    inc,
                    lat,
                    Input::Applied {
                        cf,
                        epoch,
                        result: Ok(list),
                    },
                );
            }
            Effect::LoadFloor {
                cf,
                id,
                table,
                after,
                ..
            } => {
                // The shell's answer: the sink's record bounded by the schema history.
                let snapshot = self.upstream.snapshot(after);
                let applied = self.downstream.applied(after);
                let floor =
                    sluice_control::maintainer::replay::table_floor(&snapshot, &applied, table);
                let lat = self.rng.range(1, 20);
                self.input_after(
                    name,
                    inc,
                    lat,
                    Input::Floor {
                        cf,
                        id,
                        result: Ok(floor),
                    },
                );
            }
            // The feed's: they never leave it.
            Effect::Subscribe { .. } | Effect::Unsubscribe { .. } => {}
            Effect::ReadChunk(ask) => {
                // The read happens a little later, at the upstream as it is then.
                let at = self.now + self.rng.range(1, 30);
                let node = name.to_string();
                let asked = self.upstream.captured;
                self.push(
                    at,
                    Ev::ChunkRead {
                        node,
                        inc,
                        ask,
                        asked,
                    },
                );
            }
            Effect::ProbeChunks(p) => {
                let bounds =
                    self.upstream
                        .chunk_bounds(&p.span, p.after.as_deref(), p.rows, p.count);
                self.cover("snapshot_probe");
                let lat = self.rng.range(1, 10);
                let input = Input::ChunkBounds {
                    cf: p.cf,
                    id: p.id,
                    probe: p.probe,
                    result: Ok(bounds),
                };
                self.input_after(name, inc, lat, input);
            }
            Effect::CheckpointPersisted { cf, ts } => {
                self.checker.on_persisted_checkpoint(cf.as_str(), ts)
            }
            Effect::Sink(cmd) => self.sink(name, inc, cmd),
            Effect::Trace(t) => self.trace(name, inc, t),
        }
    }

    /// Queues `input` for incarnation `inc` of node `name`, `lat` ms from now.
    fn input_after(&mut self, name: &str, inc: u64, lat: Millis, input: Input) {
        let at = self.now + lat;
        self.push(
            at,
            Ev::Input {
                node: name.to_string(),
                inc,
                input,
            },
        );
    }

    /// A meta-store operation: unavailable from a node cut off from the store; else applied,
    /// what it wrote shown to the checker, and answered a few ms later.
    fn meta_effect(&mut self, name: &str, inc: u64, req: u64, op: sluice_control::meta::MetaOp) {
        if !self.reaches_meta(name) {
            let lat = self.rng.range(1, 5);
            let result = sluice_control::meta::MetaResult::Unavailable;
            return self.input_after(name, inc, lat, Input::MetaResult { req, result });
        }
        let (result, puts) = self.meta.apply(&op);
        if let (
            sluice_control::meta::MetaResult::Txn {
                succeeded: true, ..
            },
            sluice_control::meta::MetaOp::Txn { deletes, .. },
        ) = (&result, &op)
        {
            if deletes
                .iter()
                .any(|k| k.starts_with(keys::CHANGEFEED_REQUESTS))
            {
                self.checker.on_requests_record(None);
            }
        }
        for (k, v) in puts {
            self.show_put(&k, &v);
        }
        let lat = self.rng.range(1, 5);
        self.input_after(name, inc, lat, Input::MetaResult { req, result });
    }

    /// What a meta-store write tells the checker: the requests record, a changefeed's epoch and
    /// restarts.
    fn show_put(&mut self, k: &str, v: &[u8]) {
        if k.starts_with(keys::CHANGEFEED_REQUESTS) {
            if let Ok(rec) = serde_json::from_slice(v) {
                self.checker.on_requests_record(Some(&rec));
            }
        } else if let Some(cf) = k.strip_prefix(keys::CHANGEFEED_INFO) {
            if let Ok(info) =
                serde_json::from_slice::<sluice_control::coordinator::ChangefeedInfo>(v)
            {
                self.checker.on_persisted_epoch(cf, info.epoch);
                self.checker.on_persisted_restarts(cf, info.restarts);
            }
        }
    }

    /// The schema at `at_ts` with the epoch the store has now; retried while the node cannot
    /// reach the store (as the shell does).
    fn load_schema(
        &mut self,
        name: &str,
        inc: u64,
        (cf, epoch, at_ts): (ChangefeedId, sluice_types::Epoch, Ts),
    ) {
        if !self.reaches_meta(name) {
            let lat = self.rng.range(200, 500);
            let at = self.now + lat;
            return self.push(
                at,
                Ev::Effect {
                    node: name.to_string(),
                    inc,
                    effect: Effect::LoadSchema { cf, epoch, at_ts },
                },
            );
        }
        let snapshot = self.upstream.snapshot(at_ts);
        let persisted_epoch = self
            .meta
            .kv
            .get(&keys::info(cf.as_str()))
            .and_then(|(v, _)| {
                serde_json::from_slice::<sluice_control::coordinator::ChangefeedInfo>(v).ok()
            })
            .map(|i| sluice_types::Epoch(i.epoch))
            .unwrap_or_default();
        let lat = self.rng.range(1, 10);
        self.input_after(
            name,
            inc,
            lat,
            Input::Schema {
                cf,
                epoch,
                snapshot,
                persisted_epoch,
            },
        );
    }

    fn trace(&mut self, name: &str, inc: u64, t: TraceEvent) {
        match &t {
            // The per-message and per-dispatcher checks (off in scale runs).
            TraceEvent::Applied { .. }
            | TraceEvent::DispatcherStarted { .. }
            | TraceEvent::DispatcherClosed { .. }
                if !self.checks => {}
            TraceEvent::Applied { cf, kind, epoch } => {
                self.checker.on_applied(name, inc, cf, kind, *epoch)
            }
            TraceEvent::Stale { .. } => {
                *self.fault_counts.entry("stale_dropped").or_default() += 1;
                self.cover("stale_epoch");
            }
            TraceEvent::DispatcherStarted {
                id, span, start_ts, ..
            } => {
                let up = &self.upstream;
                self.checker
                    .dispatcher_started(name, inc, *id, span, *start_ts, up);
            }
            TraceEvent::DispatcherClosed { id, .. } => {
                self.checker.dispatcher_closed(name, inc, *id)
            }
            TraceEvent::MaintainerCheckpoint {
                cf,
                epoch,
                checkpoint,
            } => self
                .checker
                .on_maintainer_checkpoint(cf, *epoch, *checkpoint),
            TraceEvent::RequestDone { req, outcome, .. } => {
                self.checker.on_request_done(req, outcome)
            }
            TraceEvent::ChangefeedRestarted { reason, .. } => {
                self.checker.on_restart(reason);
                *self.fault_counts.entry("changefeed_error").or_default() += 1;
            }
            TraceEvent::MaintainerBootstrapped { cf, epoch } => {
                self.checker.on_bootstrapped(cf, *epoch)
            }
            TraceEvent::MaintainerStarted { cf, epoch } => {
                self.checker.on_maintainer_started(cf, *epoch)
            }
            TraceEvent::Log(_) => {}
        }
        if self.trace {
            let now = self.now;
            self.note(format!("{now} {name}: {t:?}"));
        }
    }

    pub(super) fn cover(&mut self, fault: &'static str) {
        let ops: Vec<(OpKind, OpPhase)> = match self.current_maintainer_state() {
            Some(m) => m.operators().into_iter().map(|(k, p, _)| (k, p)).collect(),
            None => return,
        };
        for (k, p) in ops {
            *self.coverage.entry((k, p, fault)).or_default() += 1;
        }
    }
}

fn summarize_events(s: &mut String, id: DispatcherId, items: usize, resolved_ts: Ts) {
    let _ = write!(s, "events {id:?} {items} items to {resolved_ts}");
}

fn summarize_input(s: &mut String, input: &Input) {
    match input {
        Input::Message { from, msg } => {
            let _ = write!(s, "<- {from} {}", msg.kind());
            match msg {
                Message::Create {
                    id,
                    span,
                    start_ts,
                    epoch,
                    ..
                } => {
                    let _ = write!(s, " {id:?} {span:?} from {start_ts} {epoch:?}");
                }
                Message::Remove {
                    id, purpose, epoch, ..
                } => {
                    let _ = write!(s, " {id:?} {purpose:?} {epoch:?}");
                }
                Message::Merge {
                    sources,
                    target,
                    epoch,
                    ..
                } => {
                    let _ = write!(s, " {sources:?} -> {target:?} {epoch:?}");
                }
                Message::Barrier {
                    id,
                    ddl_ts,
                    command,
                    epoch,
                    ..
                } => {
                    let _ = write!(s, " {id:?} {ddl_ts} {command:?} {epoch:?}");
                }
                Message::BlockStatus { id, report, .. } => {
                    let _ = write!(s, " {id:?} {} {:?}", report.ddl_ts, report.stage);
                }
                Message::AddMaintainer {
                    epoch, checkpoint, ..
                } => {
                    let _ = write!(s, " {epoch:?} at {checkpoint}");
                }
                Message::Heartbeat {
                    seq,
                    dispatchers,
                    errors,
                    rest,
                    ..
                } => {
                    let _ = write!(s, " #{seq} ({} dispatchers)", dispatchers.len());
                    if let Some(r) = rest {
                        let _ = write!(s, " rest {r}");
                    }
                    if !errors.is_empty() {
                        let _ = write!(s, " ({} errors)", errors.len());
                    }
                }
                other => {
                    if let Some(e) = other.epoch() {
                        let _ = write!(s, " {e:?}");
                    }
                }
            }
        }
        Input::Events {
            id,
            items,
            resolved_ts,
            ..
        } => summarize_events(s, *id, items.len(), *resolved_ts),
        Input::MetaResult { req, result } => {
            let _ = write!(
                s,
                "meta #{req} {}",
                match result {
                    sluice_control::meta::MetaResult::Got { kvs, .. } =>
                        format!("got {}", kvs.len()),
                    sluice_control::meta::MetaResult::Txn { succeeded, .. } =>
                        format!("txn {succeeded}"),
                    sluice_control::meta::MetaResult::Unavailable => "unavailable".into(),
                }
            );
        }
        other => {
            let d = format!("{other:?}");
            s.push_str(&d[..d.len().min(160)]);
        }
    }
}
