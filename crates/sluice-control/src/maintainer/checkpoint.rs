//! The changefeed checkpoint: the minimum over every span (whatever its state) and the table
//! trigger. Invariant: it never goes backwards (asserted where it is set).

use super::*;

impl Maintainer {
    pub(super) fn compute_checkpoint(&mut self, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Working) {
            return;
        }
        let mut min = self.trigger_cp;
        for e in self.spans.values() {
            #[cfg(feature = "mutations")]
            if crate::mutations::on("checkpoint-ignores-absent")
                && e.state != SpanState::Replicating
            {
                continue;
            }
            min = min.min(e.checkpoint);
        }
        if min > self.committed {
            self.committed = min;
            self.barrier.gc(min);
            out.push(Effect::Trace(TraceEvent::MaintainerCheckpoint {
                cf: self.cf.clone(),
                epoch: self.epoch,
                checkpoint: min,
            }));
        }
        // Resolved ts: what every span's dispatcher (and the trigger) has received, at least the
        // checkpoint.
        let resolved = self
            .spans
            .values()
            .map(|e| e.resolved.max(e.checkpoint))
            .min()
            .unwrap_or(self.trigger_resolved)
            .min(self.trigger_resolved.max(self.trigger_cp));
        self.resolved = self.resolved.max(resolved).max(self.committed);
    }
}
