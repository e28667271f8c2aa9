//! The write fence: in a cluster, a node may write downstream only while its lease is fresh, and
//! only for work of the incarnation that holds that lease. The node hands its sinks a
//! [`WriteFence`] (a closure returning the incarnation that may write now, `None` while the
//! lease is not fresh); each dispatcher of a sink is bound to the value it returned when the
//! dispatcher was opened ([`BoundFence`]), and every backend checks that binding immediately
//! before each downstream write it makes (each MySQL transaction attempt, retries included,
//! and its commit; each DDL and `ddl_ts` record; each checkpoint write; each object store put of
//! a data, index, schema or metadata file).
//!
//! Invariants:
//! - a refused check writes nothing and is [`SinkError::Fenced`] (retryable): the dispatcher
//!   fails, its rows stay unacknowledged, and the span's new owner replays from the checkpoint;
//! - a dispatcher opened under incarnation `i` writes only while the fence returns `Some(i)`:
//!   incarnations only grow, so once the node moved on (fenced itself, re-registered) nothing
//!   buffered by its old dispatchers is ever written, even if the new lease is fresh;
//! - the sink-wide checkpoint write is not bound to a dispatcher: it needs some fresh incarnation;
//! - without a fence (standalone use: tests, `sluice consume`, a single node) every check passes.
//!
//! What is left: the time between a passed check and the bytes leaving the process (one call
//! into the driver or the object store client). A process frozen exactly there sends them when
//! it wakes. The MySQL sink closes that window in the downstream ([`crate::mysql::fence`]: a
//! claim per span, checked under a lock inside each transaction); the storage sinks name every
//! file after its dispatcher and claim each span with its start ts, so a consumer does not
//! apply a woken node's late file over its successor's ([`crate::storage::layout::Claim`]).

use crate::error::{Result, SinkError};
use std::sync::Arc;

/// Says which node incarnation may write now; `None` while the node's lease is not fresh.
pub type WriteFence = Arc<dyn Fn() -> Option<u64> + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// Any fresh incarnation (the sink-wide checkpoint).
    Any,
    /// The incarnation the fence returned when the dispatcher was opened (`None`: the lease was
    /// not fresh then, so nothing may be written).
    Incarnation(Option<u64>),
}

/// A fence bound to what may write through it; cheap to clone.
#[derive(Clone)]
pub struct BoundFence {
    fence: Option<WriteFence>,
    want: Want,
}

impl Default for BoundFence {
    fn default() -> Self {
        BoundFence::none()
    }
}

impl std::fmt::Debug for BoundFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fence {
            None => write!(f, "BoundFence(none)"),
            Some(_) => write!(f, "BoundFence({:?})", self.want),
        }
    }
}

impl BoundFence {
    /// No fence: every check passes (standalone use).
    pub fn none() -> BoundFence {
        BoundFence {
            fence: None,
            want: Want::Any,
        }
    }

    /// Bound to the incarnation `fence` returns now (a dispatcher being opened).
    pub fn bind(fence: Option<&WriteFence>) -> BoundFence {
        match fence {
            None => BoundFence::none(),
            Some(f) => BoundFence {
                want: Want::Incarnation(f()),
                fence: Some(f.clone()),
            },
        }
    }

    /// Passes while any incarnation of the node may write (sink-wide writes).
    pub fn any(fence: Option<&WriteFence>) -> BoundFence {
        BoundFence {
            fence: fence.cloned(),
            want: Want::Any,
        }
    }

    /// The incarnation this fence is bound to (`None` when unbound or bound while not fresh).
    pub fn incarnation(&self) -> Option<u64> {
        match self.want {
            Want::Incarnation(i) => i,
            Want::Any => None,
        }
    }

    /// Checks the fence now; call it immediately before a downstream write (`what` names it).
    pub fn check(&self, what: &str) -> Result<()> {
        let Some(f) = &self.fence else { return Ok(()) };
        let now = f();
        let ok = match self.want {
            Want::Any => now.is_some(),
            Want::Incarnation(bound) => bound.is_some() && now == bound,
        };
        if ok {
            return Ok(());
        }
        Err(SinkError::Fenced {
            what: what.to_string(),
            incarnation: self.incarnation(),
            current: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_bound_fence_follows_its_incarnation_only() {
        // 0: not fresh; n: incarnation n may write.
        let cur = Arc::new(AtomicU64::new(1));
        let c = cur.clone();
        let f: WriteFence = Arc::new(move || Some(c.load(Ordering::SeqCst)).filter(|i| *i > 0));
        let one = BoundFence::bind(Some(&f));
        let any = BoundFence::any(Some(&f));
        assert!(one.check("w").is_ok() && any.check("w").is_ok());
        cur.store(0, Ordering::SeqCst);
        let e = one.check("flush").expect_err("not fresh");
        assert!(e.is_retryable());
        assert_eq!(
            e.to_string(),
            "flush: this node's lease is not fresh (incarnation 1); write refused"
        );
        assert!(any.check("checkpoint").is_err());
        let unfresh = BoundFence::bind(Some(&f));
        cur.store(2, Ordering::SeqCst);
        let e = one.check("flush").expect_err("old incarnation");
        assert!(e.to_string().contains("(incarnation 1, now 2)"), "{e}");
        assert!(unfresh.check("w").is_err(), "opened while not fresh");
        assert!(any.check("checkpoint").is_ok());
        assert!(BoundFence::bind(Some(&f)).check("w").is_ok());
        assert!(BoundFence::none().check("w").is_ok());
        assert!(BoundFence::bind(None).check("w").is_ok());
    }
}
