//! Millisecond commit times. A binlog event header carries whole seconds, so a transaction's
//! commit time from the binlog alone is off by up to a second. Sluice's heartbeat rows
//! ([`crate::heartbeat`]) carry the upstream's own clock (`NOW(6)`) in milliseconds every
//! interval: a transaction's commit time is the latest upstream time known at its place in the
//! binlog (the last heartbeat before it, or the previous transaction's stamp), kept inside the
//! second its header names. Without heartbeats every stamp is the header's second.
//!
//! Invariants (asserted in [`CommitClock::stamp`]):
//! - a stamp lies within its header's second: `header_ms <= stamp < header_ms + 1000`;
//! - within one second, stamps never go back (in binlog order).
//!
//! The precision is the heartbeat interval: a stamp is never later than the true commit time
//! plus the header's rounding, and never earlier than the last heartbeat before it.

/// The commit-time stamper of one binlog reader (pure: binlog order in, stamps out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitClock {
    /// The upstream time (ms) of the last heartbeat row read.
    heartbeat_ms: u64,
    /// The last stamp given.
    last_ms: u64,
}

impl CommitClock {
    /// The commit time of the next transaction in binlog order: `header_ms` is its header's
    /// time (whole seconds, in ms); `heartbeat_ms` the upstream time its heartbeat row carries,
    /// when it is one.
    pub fn stamp(&mut self, header_ms: u64, heartbeat_ms: Option<u64>) -> u64 {
        let second = header_ms - header_ms % 1000;
        if let Some(h) = heartbeat_ms {
            self.heartbeat_ms = h;
        }
        // The previous stamp counts only within its own second (a clock step back upstream
        // starts over from the heartbeats).
        let same_second = (second..second + 1000).contains(&self.last_ms);
        let known = match same_second {
            true => self.heartbeat_ms.max(self.last_ms),
            false => self.heartbeat_ms,
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
        let mut c = CommitClock::default();
        // No heartbeat yet: the header's second.
        assert_eq!(c.stamp(10_000, None), 10_000);
        // A heartbeat at 10.250 s, then transactions in the same second.
        assert_eq!(c.stamp(10_000, Some(10_250)), 10_250);
        assert_eq!(c.stamp(10_000, None), 10_250);
        assert_eq!(c.stamp(10_000, Some(10_600)), 10_600);
        assert_eq!(c.stamp(10_000, None), 10_600);
        // The next second's first transaction, before its first heartbeat.
        assert_eq!(c.stamp(11_000, None), 11_000);
        assert_eq!(c.stamp(11_000, Some(11_100)), 11_100);
        // A heartbeat whose statement time was in the previous second, committed in this one.
        assert_eq!(c.stamp(12_000, Some(11_950)), 12_000);
        // Heartbeats written on two connections commit out of statement order: never back.
        assert_eq!(c.stamp(12_000, Some(12_400)), 12_400);
        assert_eq!(c.stamp(12_000, Some(12_300)), 12_400);
        // An upstream clock step back: inside the header's second, then the heartbeats again.
        assert_eq!(c.stamp(5_000, None), 5_999);
        assert_eq!(c.stamp(6_000, Some(6_100)), 6_100);
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
            let s = c.stamp(header, hb);
            assert!((header..header + 1000).contains(&s), "{s} for {header}");
        }
    }
}
