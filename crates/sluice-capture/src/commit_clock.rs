//! Millisecond commit times. A binlog event header carries whole seconds, so a transaction's
//! commit time from the binlog alone is off by up to a second. Sluice's heartbeat rows
//! ([`crate::heartbeat`]) carry the upstream's own clock (`NOW(6)`) in milliseconds every
//! interval. A transaction's commit time is interpolated from the last heartbeat before it in
//! the binlog: that heartbeat's upstream time plus the local time elapsed since capture read it
//! (capture reads in binlog order, so a transaction read 30 ms after a heartbeat committed about
//! 30 ms after it when capture keeps up), at most the gap between the last two heartbeats (the
//! next one is due by then), never below the previous stamp of the same second, and kept inside
//! the second its header names. The upstream's and this host's clocks need not agree: only
//! local elapsed time is added to an upstream time. Without heartbeats every stamp is the
//! header's second.
//!
//! Invariants (asserted in [`CommitClock::stamp`]):
//! - a stamp lies within its header's second: `header_ms <= stamp < header_ms + 1000`;
//! - within one second, stamps never go back (in binlog order).
//!
//! The precision: a stamp is never earlier than the last heartbeat before it, nor later than
//! that heartbeat plus one heartbeat gap (or the end of its header's second). Capture keeping up,
//! it is within a few ms of the true commit; catching up (reading faster than the upstream
//! wrote), it leans towards the heartbeat, as if the transaction came right after it.

/// The commit-time stamper of one binlog reader (pure: binlog order and read times in, stamps
/// out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitClock {
    /// The upstream time (ms) of the last heartbeat row read, and the local time it was read.
    heartbeat_ms: u64,
    heartbeat_read_ms: u64,
    /// The upstream time between the last two heartbeats (0: fewer than two so far).
    gap_ms: u64,
    /// The last stamp given.
    last_ms: u64,
}

impl CommitClock {
    /// The commit time of the next transaction in binlog order: `header_ms` is its header's
    /// time (whole seconds, in ms); `heartbeat_ms` the upstream time its heartbeat row carries,
    /// when it is one; `read_ms` the local time capture read it (any monotonic-enough clock in
    /// ms: only differences count).
    pub fn stamp(&mut self, header_ms: u64, heartbeat_ms: Option<u64>, read_ms: u64) -> u64 {
        let second = header_ms - header_ms % 1000;
        if let Some(h) = heartbeat_ms {
            if self.heartbeat_ms > 0 && h > self.heartbeat_ms {
                self.gap_ms = h - self.heartbeat_ms;
            }
            self.heartbeat_ms = h;
            self.heartbeat_read_ms = read_ms;
        }
        // Interpolated: the heartbeat plus the local time since it was read, at most one gap.
        let elapsed = read_ms
            .saturating_sub(self.heartbeat_read_ms)
            .min(self.gap_ms);
        let interpolated = match self.heartbeat_ms {
            0 => 0,
            h => h + elapsed,
        };
        // The previous stamp counts only within its own second (a clock step back upstream
        // starts over from the heartbeats).
        let same_second = (second..second + 1000).contains(&self.last_ms);
        let known = match same_second {
            true => interpolated.max(self.last_ms),
            false => interpolated,
        };
        let stamp = known.clamp(second, second + 999);
        assert!(
            (second..second + 1000).contains(&stamp),
            "a commit stamp outside its header's second"
        );
        assert!(
            !same_second || stamp >= self.last_ms,
            "a commit stamp went back within its second"
        );
        self.last_ms = stamp;
        stamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_follow_heartbeats_inside_the_header_second() {
        // Read at once (no local time passes): the last heartbeat's time.
        let mut c = CommitClock::default();
        // No heartbeat yet: the header's second.
        assert_eq!(c.stamp(10_000, None, 0), 10_000);
        // A heartbeat at 10.250 s, then transactions in the same second.
        assert_eq!(c.stamp(10_000, Some(10_250), 0), 10_250);
        assert_eq!(c.stamp(10_000, None, 0), 10_250);
        assert_eq!(c.stamp(10_000, Some(10_600), 0), 10_600);
        assert_eq!(c.stamp(10_000, None, 0), 10_600);
        // The next second's first transaction, before its first heartbeat.
        assert_eq!(c.stamp(11_000, None, 0), 11_000);
        assert_eq!(c.stamp(11_000, Some(11_100), 0), 11_100);
        // A heartbeat whose statement time was in the previous second, committed in this one.
        assert_eq!(c.stamp(12_000, Some(11_950), 0), 12_000);
        // Heartbeats written on two connections commit out of statement order: never back.
        assert_eq!(c.stamp(12_000, Some(12_400), 0), 12_400);
        assert_eq!(c.stamp(12_000, Some(12_300), 0), 12_400);
        // An upstream clock step back: inside the header's second, then the heartbeats again.
        assert_eq!(c.stamp(5_000, None, 0), 5_999);
        assert_eq!(c.stamp(6_000, Some(6_100), 0), 6_100);
    }

    #[test]
    fn stamps_never_leave_their_second_for_any_input() {
        let mut c = CommitClock::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut header = 1_700_000_000_000u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            header += (x % 3) * 1000;
            let hb = x.is_multiple_of(4).then(|| header - 1500 + (x >> 8) % 3000);
            let s = c.stamp(header, hb, x >> 40);
            assert!((header..header + 1000).contains(&s), "{s} for {header}");
        }
    }

    /// A transaction read after a heartbeat is stamped with the heartbeat's upstream time plus
    /// the local time since: whatever the local clock says, at most one heartbeat gap later.
    #[test]
    fn stamps_interpolate_by_local_time_since_the_heartbeat_at_most_one_gap() {
        let mut c = CommitClock::default();
        // The local clock is far from the upstream's: only its differences count.
        let local = 7_000_000;
        assert_eq!(c.stamp(10_000, Some(10_100), local), 10_100);
        // One heartbeat only: no gap known yet, so no interpolation.
        assert_eq!(c.stamp(10_000, None, local + 40), 10_100);
        assert_eq!(c.stamp(10_000, Some(10_200), local + 100), 10_200);
        assert_eq!(c.stamp(10_000, None, local + 130), 10_230);
        assert_eq!(c.stamp(10_000, None, local + 165), 10_265);
        // Read long after (capture stalled): one gap after the heartbeat at most.
        assert_eq!(c.stamp(10_000, None, local + 900), 10_300);
        // Never back within the second, whatever the local clock does.
        assert_eq!(c.stamp(10_000, Some(10_250), local + 950), 10_300);
        assert_eq!(c.stamp(10_000, None, local + 960), 10_300);
        // Never out of the header's second.
        assert_eq!(c.stamp(10_000, Some(10_990), local + 1_000), 10_990);
        assert_eq!(c.stamp(10_000, None, local + 1_400), 10_999);
        // Catching up (read in a burst): close to the heartbeat, never before it.
        assert_eq!(c.stamp(11_000, Some(11_500), local + 1_401), 11_500);
        assert_eq!(c.stamp(11_000, None, local + 1_401), 11_500);
    }
}
