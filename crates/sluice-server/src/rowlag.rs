//! How late each row reaches durability at its sink: from its upstream commit time
//! (`RowEvent::commit_time_ms`, the capture's millisecond clock) to the sink's acknowledgement
//! that covers it, as a histogram per changefeed (`sluice_sink_row_lag_seconds` at `/metrics`).
//! It is the per-row lag a user of any sink can read, the blackhole sink included, where there is
//! no downstream to stamp rows.
//!
//! Invariants: a row is timed once, at the first acknowledgement at or above its commit ts; the
//! rows a dispatcher's sink holds unacknowledged are kept as at most [`MAX_PENDING`] entries
//! (consecutive rows of one commit millisecond share an entry); past that bound rows are not
//! timed (counted as untimed), so memory stays bounded however far the sink falls behind. The
//! upstream's and this host's clocks are taken to agree, as for the checkpoint lag.

use sluice_sink::RowBatch;
use sluice_types::Ts;
use std::collections::VecDeque;
use std::fmt::Write as _;

/// Entries of written, unacknowledged rows kept per dispatcher.
pub const MAX_PENDING: usize = 8192;

/// Upper bounds of the histogram's buckets, in ms (a last bucket takes the rest).
pub const BUCKETS_MS: &[u64] = &[
    5, 10, 25, 50, 75, 100, 125, 150, 200, 300, 500, 750, 1_000, 2_000, 5_000, 10_000, 30_000,
    60_000,
];

/// One dispatcher's rows written to its sink and not yet acknowledged: (the highest commit ts of
/// the entry, its commit time in ms, rows).
#[derive(Debug, Default)]
pub struct Pending {
    q: VecDeque<(Ts, u64, u64)>,
    /// Rows not timed because the bound was reached.
    pub untimed: u64,
}

impl Pending {
    /// Rows handed to the sink.
    pub fn written(&mut self, batches: &[RowBatch]) {
        for r in batches.iter().flat_map(|b| &b.rows) {
            self.push(r.commit_ts, r.commit_time_ms);
        }
    }

    fn push(&mut self, ts: Ts, ms: u64) {
        if let Some(back) = self.q.back_mut() {
            if back.1 == ms && back.0 <= ts {
                back.0 = ts;
                back.2 += 1;
                return;
            }
        }
        if self.q.len() >= MAX_PENDING {
            self.untimed += 1;
            return;
        }
        self.q.push_back((ts, ms, 1));
    }

    /// The sink acknowledged everything at or below `ts` at `now_ms`: the lags (ms) of the rows
    /// that covers, with their row counts.
    pub fn acked(&mut self, ts: Ts, now_ms: u64) -> Vec<(u64, u64)> {
        let mut lags = Vec::new();
        while let Some(&(t, ms, rows)) = self.q.front() {
            if t > ts {
                break;
            }
            self.q.pop_front();
            lags.push((now_ms.saturating_sub(ms), rows));
        }
        lags
    }

    /// The session is gone (failed or closed): what it held is written again or never.
    pub fn clear(&mut self) {
        self.q.clear();
    }
}

/// A histogram of row lags over [`BUCKETS_MS`].
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Rows per bucket (not cumulative); the last one is above every bound.
    counts: Vec<u64>,
    sum_ms: u64,
    count: u64,
}

impl Histogram {
    pub fn observe(&mut self, lag_ms: u64, rows: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS_MS.len() + 1];
        }
        let i = BUCKETS_MS.partition_point(|b| *b < lag_ms);
        self.counts[i] += rows;
        self.sum_ms = self.sum_ms.saturating_add(lag_ms.saturating_mul(rows));
        self.count += rows;
    }

    /// Its samples in the Prometheus text format, for `name` with the label `labels`.
    pub fn render(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        for (i, le) in BUCKETS_MS.iter().enumerate() {
            cumulative += self.counts.get(i).copied().unwrap_or(0);
            let le = *le as f64 / 1000.0;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let sum = self.sum_ms as f64 / 1000.0;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum:.3}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_timed_once_at_the_acknowledgement_that_covers_them() {
        let mut p = Pending::default();
        for (ts, ms) in [(10, 1_000), (11, 1_000), (12, 1_040), (20, 1_100)] {
            p.push(ts, ms);
        }
        assert_eq!(p.acked(9, 1_200), vec![]);
        assert_eq!(p.acked(12, 1_200), vec![(200, 2), (160, 1)]);
        assert_eq!(p.acked(15, 1_300), vec![], "timed once");
        assert_eq!(p.acked(20, 1_150), vec![(50, 1)]);
    }

    #[test]
    fn pending_rows_are_bounded_and_the_rest_counted_untimed() {
        let mut p = Pending::default();
        for i in 0..(MAX_PENDING as u64 + 10) {
            p.push(i, i);
        }
        assert_eq!(p.untimed, 10);
        assert_eq!(p.acked(u64::MAX, 0).len(), MAX_PENDING);
    }

    #[test]
    fn the_histogram_renders_cumulative_buckets_sum_and_count() {
        let mut h = Histogram::default();
        h.observe(3, 2);
        h.observe(100, 1);
        h.observe(90_000, 1);
        let mut out = String::new();
        h.render("lag", "cf=\"a\"", &mut out);
        assert!(
            out.contains("lag_bucket{cf=\"a\",le=\"0.005\"} 2\n"),
            "{out}"
        );
        assert!(out.contains("lag_bucket{cf=\"a\",le=\"0.1\"} 3\n"), "{out}");
        assert!(out.contains("lag_bucket{cf=\"a\",le=\"60\"} 3\n"), "{out}");
        assert!(
            out.contains("lag_bucket{cf=\"a\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("lag_sum{cf=\"a\"} 90.106\n"), "{out}");
        assert!(out.contains("lag_count{cf=\"a\"} 4\n"), "{out}");
    }
}
