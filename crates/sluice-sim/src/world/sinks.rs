//! The sinks: one session per dispatcher of a node incarnation; rows and DDLs written to the
//! model downstream; `x-sink_error` injected errors; flushes, closes and acknowledgements with
//! their latency (`x-sink_latency`).
//!
//! Invariants (the sink contract, checked here): writes carry whole transactions in commit
//! order; a session is never handed one upstream row twice; a failed session takes nothing more
//! (no write lands, nothing is acknowledged, the failure is reported once) until it is closed; a
//! session's acknowledgement never comes before an earlier one of it; a DDL's record says
//! finished only when the DDL is acknowledged.

use super::*;

impl Sim {
    /// Whether dispatcher `id` of incarnation `inc` of `node` has sink session `session` now
    /// (`closed_too`: also when that session is closing).
    pub(super) fn session_is(
        &self,
        node: &str,
        inc: u64,
        id: DispatcherId,
        session: u64,
        closed_too: bool,
    ) -> bool {
        self.sessions
            .get(&(node.to_string(), inc, id))
            .map(|s| s.id == session && (closed_too || !s.closed))
            .unwrap_or(false)
    }

    fn session(&mut self, name: &str, inc: u64, id: DispatcherId) -> u64 {
        let next = self.next_session;
        let s = self
            .sessions
            .entry((name.to_string(), inc, id))
            .or_insert_with(|| Session {
                id: next,
                closed: false,
                max_written: 0,
                open: None,
                failed: false,
                last_ack: 0,
                written: BTreeSet::new(),
            });
        if s.id == next {
            self.next_session += 1;
        }
        s.id
    }

    fn session_failed(&self, name: &str, inc: u64, id: DispatcherId) -> bool {
        self.sessions
            .get(&(name.to_string(), inc, id))
            .is_some_and(|s| s.failed)
    }

    fn sink_error(&mut self, name: &str, table: TableId) -> Option<bool> {
        let rule = self.sink_errors.iter_mut().find(|r| {
            r.left > 0
                && r.node.as_deref().map(|n| n == name).unwrap_or(true)
                && r.table.map(|t| t == table).unwrap_or(true)
        })?;
        rule.left -= 1;
        Some(rule.retryable)
    }

    pub(super) fn sink(&mut self, name: &str, inc: u64, cmd: SinkCommand) {
        match cmd {
            // The feed turns row writes into `FeedOut::Write`.
            SinkCommand::WriteRows { .. } => {}
            SinkCommand::WriteDdl { cf, id, ddl, .. } => self.sink_ddl(name, inc, cf, id, &ddl),
            SinkCommand::Flush { cf, id } => {
                if self.session_failed(name, inc, id) {
                    return;
                }
                let session = self.session(name, inc, id);
                // Nothing of a transaction still open is acknowledged.
                let ts = self
                    .sessions
                    .get(&(name.to_string(), inc, id))
                    .map(|s| match s.open {
                        Some(t) => t - 1,
                        None => s.max_written,
                    })
                    .unwrap_or(0);
                let at = self.ack_at(name, inc, id, (1, 10));
                self.ack(name, inc, cf, id, session, ts, at);
            }
            SinkCommand::Close { cf, id } => {
                let session = self.session(name, inc, id);
                if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
                    s.closed = true;
                }
                let lat = self.rng.range(1, 20);
                self.push(
                    self.now + lat,
                    Ev::SinkClosed {
                        node: name.to_string(),
                        inc,
                        cf,
                        id,
                        session,
                    },
                );
            }
        }
    }

    /// A write of the session failed: as the sink runner does, the whole session fails (nothing
    /// more of it lands until it is closed), and the failure is reported once.
    fn fail_write(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        retryable: bool,
        message: String,
    ) {
        let _ = self.session(name, inc, id);
        if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
            s.failed = true;
        }
        let lat = self.rng.range(1, 5);
        self.push(
            self.now + lat,
            Ev::Input {
                node: name.to_string(),
                inc,
                input: Input::SinkError {
                    cf,
                    id,
                    retryable,
                    table_only: false,
                    message,
                },
            },
        );
    }

    /// A write of the feed reaches the model sink; returns when the sink has taken it.
    /// With `open`, the write's last transaction continues in the next write: as the sink
    /// runner does, nothing of it is acknowledged until the write that ends it.
    pub(super) fn sink_rows(
        &mut self,
        name: &str,
        inc: u64,
        (cf, id): (ChangefeedId, DispatcherId),
        span: &Span,
        rows: Vec<SimRow>,
        open: bool,
    ) -> Millis {
        if self.session_failed(name, inc, id) {
            return self.now;
        }
        if self.checks {
            self.check_once_per_session(name, inc, id, &rows);
        }
        let rows: Vec<(Ts, sluice_types::Key, u64)> = rows
            .into_iter()
            .map(|r| (r.ts, r.key, r.idx as u64))
            .collect();
        if let Some(retryable) = self.sink_error(name, span.table) {
            *self.fault_counts.entry("sink_error").or_default() += 1;
            if retryable {
                self.checker.sink_retryable += 1;
            } else {
                self.checker.sink_fatal += 1;
                *self.fault_counts.entry("sink_error_fatal").or_default() += 1;
            }
            self.cover("sink_error");
            let message = crate::check::INJECTED_SINK_ERROR.to_string();
            self.fail_write(name, inc, cf, id, retryable, message);
            return self.now;
        }
        #[cfg(feature = "mutations")]
        let rows: Vec<_> = if sluice_control::mutations::on("drop-rows") {
            rows.into_iter().filter(|r| r.2 % 50 != 7).collect()
        } else {
            rows
        };
        // The downstream refuses rows of a table it does not have (MySQL 1146: fatal).
        if let Err(message) = self.downstream.write_rows(&self.upstream, &rows) {
            *self.fault_counts.entry("sink_missing_table").or_default() += 1;
            self.note(format!(
                "{} {name}: sink write of {id:?} refused: {message}",
                self.now
            ));
            self.fail_write(name, inc, cf, id, false, message);
            return self.now;
        }
        let session = self.session(name, inc, id);
        let max = rows.iter().map(|r| r.0).max().unwrap_or(0);
        // The sink contract: writes carry whole transactions, in commit order; only the parts
        // of one open transaction continue where the write before stopped.
        let first = rows.first().map(|r| r.0).unwrap_or(0);
        let (before, was_open) = self
            .sessions
            .get(&(name.to_string(), inc, id))
            .map_or((0, None), |s| (s.max_written, s.open));
        if first <= before && before > 0 && !(first == before && was_open == Some(before)) {
            self.checker.violation.get_or_insert(format!(
                "sink-contract: {id:?} on {name} wrote a batch starting at {first} after one that reached {before} (a transaction cut across writes, or out of order)"
            ));
        }
        if self.checks {
            let up = &self.upstream;
            self.checker
                .on_rows(name, inc, id, session, span, &rows, up);
        }
        if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
            s.max_written = s.max_written.max(max);
            s.open = open.then_some(max);
        }
        let at = self.ack_at(name, inc, id, (5, 60));
        let acked = if open { max - 1 } else { max };
        self.ack(name, inc, cf, id, session, acked, at);
        at
    }

    /// A sink session is never handed one upstream row twice.
    fn check_once_per_session(&mut self, name: &str, inc: u64, id: DispatcherId, rows: &[SimRow]) {
        let _ = self.session(name, inc, id);
        let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) else {
            return;
        };
        if let Some(r) = rows.iter().find(|r| !s.written.insert(r.idx)) {
            self.checker.violation.get_or_insert(format!(
                "row-once-per-session: {id:?} on {name} was handed upstream row #{} (ts {}) twice in one sink session",
                r.idx, r.ts
            ));
        }
    }

    fn sink_ddl(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        ddl: &sluice_types::DdlEvent,
    ) {
        if self.session_failed(name, inc, id) {
            return;
        }
        let session = self.session(name, inc, id);
        let span = self
            .spans
            .get(&(name.to_string(), inc, id))
            .cloned()
            .unwrap_or_else(sluice_control::dispatcher::trigger_span);
        let ts = ddl.commit_ts;
        if let Some(t) = self
            .sessions
            .get(&(name.to_string(), inc, id))
            .and_then(|s| s.open)
        {
            self.checker.violation.get_or_insert(format!(
                "sink-contract: {id:?} on {name} wrote the DDL at {ts} while its transaction at {t} was open (its last part never came)"
            ));
        }
        let handle = self.upstream.ddl_index(ts).map_or(u64::MAX, |i| i as u64);
        // MySQL skips a DDL its record shows finished; storage accepts repeated DDLs.
        if self.downstream.write_ddl(&self.upstream, ddl) && self.checks {
            let up = &self.upstream;
            self.checker.on_ddl(name, inc, id, &span, ts, handle, up);
        }
        if let Some(s) = self.sessions.get_mut(&(name.to_string(), inc, id)) {
            s.max_written = s.max_written.max(ts);
        }
        let at = self.ack_at(name, inc, id, (5, 60));
        let at = self
            .sessions
            .get(&(name.to_string(), inc, id))
            .map_or(at, |s| s.last_ack.max(at));
        // The record says finished when the DDL is acknowledged, not before.
        self.push(
            at,
            Ev::DdlFinished {
                node: name.to_string(),
                inc,
                ts,
            },
        );
        self.ack(name, inc, cf, id, session, ts, at);
    }

    /// When the model sink acknowledges a write of `id` on `name`: a random latency, plus the
    /// `x-sink_latency` of its table there.
    fn ack_at(&mut self, name: &str, inc: u64, id: DispatcherId, latency: (u64, u64)) -> Millis {
        let table = self
            .spans
            .get(&(name.to_string(), inc, id))
            .map(|s| s.table);
        let slow = table
            .map(|t| {
                let any = self.sink_latency.get(&(None, t)).copied().unwrap_or(0);
                let here = self
                    .sink_latency
                    .get(&(Some(name.to_string()), t))
                    .copied()
                    .unwrap_or(0);
                any.max(here)
            })
            .unwrap_or(0);
        self.now + self.rng.range(latency.0, latency.1) + slow
    }

    /// The model sink acknowledges a session's writes up to `ts` at `at` (or after the session's
    /// previous acknowledgement).
    #[allow(clippy::too_many_arguments)]
    fn ack(
        &mut self,
        name: &str,
        inc: u64,
        cf: ChangefeedId,
        id: DispatcherId,
        session: u64,
        ts: Ts,
        at: Millis,
    ) {
        let at = match self.sessions.get_mut(&(name.to_string(), inc, id)) {
            Some(s) => {
                s.last_ack = s.last_ack.max(at);
                s.last_ack
            }
            None => at,
        };
        self.push(
            at,
            Ev::SinkAck {
                node: name.to_string(),
                inc,
                cf,
                id,
                session,
                ts,
            },
        );
    }
}
