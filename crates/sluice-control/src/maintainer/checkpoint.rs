//! The changefeed checkpoint: the minimum over every span (whatever its state) and the table
//! trigger, read from the span map's index of checkpoints (`spanmap.rs`), so a tick costs no
//! pass over the spans. Invariant: it never goes backwards (asserted where it is set).

use super::*;

impl Maintainer {
    pub(super) fn compute_checkpoint(&mut self, out: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Working) {
            return;
        }
        self.spans.debug_check();
        let min = self
            .min_span_checkpoint()
            .map_or(self.trigger_cp, |m| m.min(self.trigger_cp));
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
            .min_resolved()
            .unwrap_or(self.trigger_resolved)
            .min(self.trigger_resolved.max(self.trigger_cp));
        self.resolved = self.resolved.max(resolved).max(self.committed);
    }

    /// The least checkpoint of the span entries (`None`: there are none).
    fn min_span_checkpoint(&self) -> Option<Ts> {
        #[cfg(feature = "mutations")]
        if crate::mutations::on("checkpoint-ignores-absent") {
            return self
                .spans
                .values()
                .filter(|e| e.state == SpanState::Replicating)
                .map(|e| e.checkpoint)
                .min();
        }
        self.spans.min_checkpoint()
    }
}
