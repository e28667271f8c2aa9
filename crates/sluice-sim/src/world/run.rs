//! Running: the event loop (every queued event up to a time, in (time, sequence) order, the
//! invariants checked after each), one step, settling (converged, every request finished and the
//! checkpoint at the upstream's head, within a bound), and the whole file with its final
//! liveness and sink checks.
//!
//! Invariants: a run stops at the first violation; time never goes back; before the final
//! settle every hold is released and faults, partitions, pauses and sink rules are off, so the
//! liveness check sees a healed world; under random faults (explore) a step whose alias has no
//! value is skipped, not failed.

use super::*;

impl Sim {
    /// Run every event up to `until`, checking invariants after each. Stops at a violation.
    pub fn advance(&mut self, until: Millis) -> Result<(), Failure> {
        while let Some((&(at, seq), _)) = self.queue.iter().next() {
            if at > until {
                break;
            }
            let Some(ev) = self.queue.remove(&(at, seq)) else {
                break;
            };
            self.now = at;
            self.events += 1;
            self.process(ev);
            if let Some(v) = &self.checker.violation {
                return Err(Failure {
                    step: None,
                    message: v.clone(),
                });
            }
        }
        self.now = self.now.max(until);
        Ok(())
    }

    fn settled(&self, target: Ts) -> Result<(), String> {
        self.converged()?;
        if !self.requests.is_empty() {
            return Err("requests not yet delivered".into());
        }
        if let Some(m) = self.current_maintainer_state() {
            if !m.requests_in_flight().is_empty() {
                return Err(format!("requests in flight: {:?}", m.requests_in_flight()));
            }
            // A snapshot copy under way is not settled.
            if let Some(s) = m.status().snapshot.filter(|s| !s.finished) {
                return Err(format!("snapshot copy under way: {s:?}"));
            }
        }
        // A request the meta store held is in flight until a maintainer finished it: one a
        // failover lost stays in flight for ever.
        let lost = self.checker.unfinished_requests();
        if !lost.is_empty() {
            return Err(format!(
                "request-lost: the meta store held {lost:?}, no maintainer finished them"
            ));
        }
        let cp = self.persisted_checkpoint();
        if cp < target {
            return Err(format!("checkpoint {cp} has not reached {target}"));
        }
        Ok(())
    }

    pub fn run_step(&mut self, idx: usize) -> Result<(), Failure> {
        match self.run_step_inner(idx) {
            // Under random faults an alias may legitimately have no value: skip that step.
            Err(f) if self.explore && f.message.contains("has no value now") => {
                self.skipped_expects += 1;
                Ok(())
            }
            r => r,
        }
    }

    pub fn settle(&mut self, max_ms: Millis) -> Result<(), String> {
        let target = self.upstream.head;
        let deadline = self.now + max_ms;
        // Requests issued at this instant reach their component first.
        self.advance(self.now).map_err(|f| f.message)?;
        loop {
            let r = self.settled(target);
            match r {
                Ok(()) => return Ok(()),
                Err(m) if self.now >= deadline => {
                    return Err(format!("settle did not finish within {max_ms} ms: {m}"))
                }
                Err(_) => {
                    let next = (self.now + TICK_MS).min(deadline);
                    self.advance(next).map_err(|f| f.message)?;
                }
            }
        }
    }

    /// Run the whole file, then the final liveness check.
    pub fn run(&mut self) -> Result<(), Failure> {
        for i in 0..self.sc.steps.len() {
            self.run_step(i)?;
            if let Some(v) = &self.checker.violation {
                return Err(Failure {
                    step: Some(self.sc.steps[i].number),
                    message: v.clone(),
                });
            }
        }
        // End of run: release every hold, heal, faults off, settle.
        let names: Vec<String> = self.nodes.keys().cloned().collect();
        self.holds.clear();
        for n in &names {
            for p in HoldPoint::ALL {
                self.deliver_now(
                    n,
                    Input::Hold {
                        point: p,
                        on: false,
                    },
                );
            }
        }
        self.partition = None;
        self.faults = FaultConfig::default();
        self.drops.clear();
        self.sink_errors.clear();
        self.sink_latency.clear();
        for n in &names {
            if let Some(x) = self.nodes.get_mut(n) {
                x.paused_until = 0;
            }
        }
        if self.created {
            self.settle(FINAL_SETTLE_MS).map_err(|m| Failure {
                step: None,
                message: format!("final liveness check: {m}"),
            })?;
            if self.sc.world.sink != SinkKind::Blackhole {
                let cp = self.persisted_checkpoint();
                self.checker
                    .sink_matches_upstream(&self.upstream, cp)
                    .and_then(|()| self.downstream.compare(&self.upstream, cp))
                    .map_err(|m| Failure {
                        step: None,
                        message: format!("final check: {m}"),
                    })?;
            }
        }
        Ok(())
    }
}
