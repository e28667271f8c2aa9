//! A dispatcher at a blocking DDL: the barrier's Write and Pass from the maintainer, the DDL
//! write itself and the pass that lets the stream go on.
//!
//! Invariants: a duplicate or stale Write/Pass is answered idempotently; the writer reports
//! `Written` only once the DDL is durable.

use super::*;

impl DispatcherManager {
    pub(super) fn barrier(
        &mut self,
        now: Millis,
        id: DispatcherId,
        ddl_ts: Ts,
        command: BarrierCommand,
        holds: &Holds,
        out: &mut Vec<Effect>,
    ) {
        let cf = self.cf.clone();
        let epoch = self.owner_epoch();
        let Some(d) = self.dispatchers.get_mut(&id) else {
            return;
        };
        if !matches!(d.phase, Phase::Working) {
            return;
        }
        let Some(b) = d.block.as_mut() else { return };
        if b.ddl.commit_ts != ddl_ts {
            return; // a stale action for an event already passed, or one not reached yet
        }
        match (command, b.stage) {
            (BarrierCommand::Write, Stage::Waiting) => {
                if holds.is_on(HoldPoint::DdlBeforeWrite) {
                    b.stage = Stage::WriteHeld;
                } else {
                    do_write(&cf, d, out);
                }
            }
            (BarrierCommand::Write, Stage::Written) => {
                b.last_report = None; // duplicate Write: report Written again
            }
            (BarrierCommand::Pass, Stage::Waiting)
                if b.ddl.influence.dropped.contains(&d.span.table) =>
            {
                // The DDL drops this dispatcher's table: there is nothing after it to replicate;
                // stay here until removed (never let the checkpoint pass the drop).
            }
            (BarrierCommand::Pass, Stage::Waiting) => {
                if holds.is_on(HoldPoint::DdlBeforePass) {
                    d.pass_held = Some(ddl_ts);
                } else {
                    pass(d);
                }
            }
            (BarrierCommand::Proceed, Stage::Written) => {
                d.block = None;
                d.buffer.pop_front();
                d.consumed_upto = d.consumed_upto.max(ddl_ts);
            }
            _ => {}
        }
        let _ = (now, epoch);
        self.pump(id, now, holds, out);
    }
}

pub(super) fn do_write(cf: &ChangefeedId, d: &mut Dispatcher, out: &mut Vec<Effect>) {
    if d.block.is_none() {
        return;
    }
    d.settle_durable();
    let Some(b) = d.block.as_mut() else { return };
    let handle = match d.buffer.front() {
        Some(StreamItem::Ddl { handle, .. }) => *handle,
        _ => 0,
    };
    b.stage = Stage::Writing;
    d.written_ts = d.written_ts.max(b.ddl.commit_ts);
    out.push(Effect::Sink(SinkCommand::WriteDdl {
        cf: cf.clone(),
        id: d.id,
        ddl: b.ddl.clone(),
        handle,
    }));
    d.flush_requested = true;
    out.push(Effect::Sink(SinkCommand::Flush {
        cf: cf.clone(),
        id: d.id,
    }));
}

pub(super) fn pass(d: &mut Dispatcher) {
    if let Some(b) = d.block.take() {
        d.buffer.pop_front();
        d.consumed_upto = d.consumed_upto.max(b.ddl.commit_ts);
        d.passed_report = Some(b.ddl.commit_ts);
    }
}
