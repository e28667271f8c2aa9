//! Delivery accounting of the Kafka sink: the producer's context ([`Reports`]) and one
//! [`Tally`] per dispatcher writer (and per DDL or checkpoint send). Every message handed to the
//! client carries its tally as its delivery opaque; the client's delivery report counts it there.
//! A flush waits until the tally's delivered count reaches its sent count, instead of a future
//! and a channel per message.
//!
//! Invariants:
//! - `delivered <= sent` at all times: a message is counted as sent before it is handed to the
//!   client, and the client reports each message exactly once (delivered or failed);
//! - a tally is all delivered ([`Tally::settled`]) only when every message counted as sent was
//!   acknowledged by the broker, and none failed: the first failure is kept and returned by every
//!   later wait, so a dispatcher's ack never passes a lost message;
//! - a message that could not be handed to the client is not counted (see [`Tally::unsent`]).

use super::{broker_error, Message};
use crate::error::{Result, SinkError};
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Messages of one writer handed to the client and their delivery reports.
#[derive(Default)]
pub(crate) struct Tally {
    sent: AtomicU64,
    delivered: AtomicU64,
    /// The first failed delivery (what, the client's reason, retryable).
    failure: Mutex<Option<(String, String, bool)>>,
    /// `failure` is set (read on every report without the lock).
    failed: AtomicBool,
    /// Woken when the last message sent so far is reported, or one fails.
    settled: tokio::sync::Notify,
}

impl Tally {
    /// Counts a message about to be handed to the client.
    pub(crate) fn sending(&self) {
        self.sent.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes back the count of a message the client refused (it will not be reported).
    pub(crate) fn unsent(&self) {
        let before = self.sent.fetch_sub(1, Ordering::AcqRel);
        assert!(
            before > self.delivered.load(Ordering::Acquire),
            "a refused message was already reported"
        );
        self.wake_if_settled();
    }

    /// Messages handed to the client and not yet reported.
    pub(crate) fn in_flight(&self) -> u64 {
        let sent = self.sent.load(Ordering::Acquire);
        sent - self.delivered.load(Ordering::Acquire).min(sent)
    }

    /// Messages in flight, or a failure kept: a flush has something to wait for or report.
    pub(crate) fn unsettled(&self) -> bool {
        self.in_flight() > 0 || self.failed.load(Ordering::Acquire)
    }

    fn failure(&self) -> Option<SinkError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        f.as_ref()
            .map(|(what, reason, retryable)| SinkError::Broker {
                what: what.clone(),
                reason: reason.clone(),
                retryable: *retryable,
            })
    }

    /// A report from the client: `Err` keeps the first failure.
    fn reported(&self, failed: Option<SinkError>) {
        if let Some(e) = failed {
            self.keep_failure(e);
        }
        let delivered = self.delivered.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(
            delivered <= self.sent.load(Ordering::Acquire),
            "more delivery reports than messages sent"
        );
        self.wake_if_settled();
    }

    fn keep_failure(&self, e: SinkError) {
        let kept = match e {
            SinkError::Broker {
                what,
                reason,
                retryable,
            } => (what, reason, retryable),
            other => ("delivering a message".into(), other.to_string(), true),
        };
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(kept);
        self.failed.store(true, Ordering::Release);
    }

    fn wake_if_settled(&self) {
        if self.failed.load(Ordering::Acquire) || self.in_flight() == 0 {
            self.settled.notify_waiters();
        }
    }

    /// Waits until every message sent so far is reported; the first failure is the result
    /// (the others are not waited for: the dispatcher fails and its successor replays).
    pub(crate) async fn settled(&self) -> Result<()> {
        loop {
            let woken = self.settled.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(e) = self.failure() {
                return Err(e);
            }
            if self.in_flight() == 0 {
                return Ok(());
            }
            woken.await;
        }
    }
}

/// The producer's context: delivery reports count into their message's [`Tally`].
pub(crate) struct Reports;

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Arc<Tally>;

    fn delivery(&self, result: &DeliveryResult<'_>, tally: Arc<Tally>) {
        let failed = match result {
            Ok(_) => None,
            Err((e, m)) => Some(broker_error(format!("delivering to {}", m.topic()), e)),
        };
        tally.reported(failed);
    }
}

/// The sink's producer: its delivery reports are served by a thread of the client's own.
pub(crate) type Producer = rdkafka::producer::ThreadedProducer<Reports>;

/// Hands `m` to the client, its report to be counted in `tally`: `Ok(false)` when the client's
/// queue is full (nothing counted: offer it again once some of what is in flight is reported).
pub(crate) fn offer(
    producer: &Producer,
    m: &Message,
    tally: &Arc<Tally>,
) -> std::result::Result<bool, KafkaError> {
    tally.sending();
    match producer.send(m.base_record(tally.clone())) {
        Ok(()) => Ok(true),
        Err((e, _)) => {
            tally.unsent();
            match e {
                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) => Ok(false),
                e => Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> SinkError {
        SinkError::Broker {
            what: "delivering to t".into(),
            reason: "gone".into(),
            retryable: true,
        }
    }

    #[tokio::test]
    async fn settles_when_every_message_sent_is_reported() {
        let t = Arc::new(Tally::default());
        t.sending();
        t.sending();
        t.reported(None);
        assert_eq!(t.in_flight(), 1);
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.settled().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "settled with a message in flight");
        t.reported(None);
        waiter.await.expect("waiter").expect("settled");
    }

    #[tokio::test]
    async fn the_first_failure_is_kept_and_ends_the_wait() {
        let t = Tally::default();
        t.sending();
        t.sending();
        t.reported(Some(failed()));
        assert!(t.unsettled(), "a kept failure leaves the tally unsettled");
        let e = t
            .settled()
            .await
            .expect_err("a failed delivery settles as a failure");
        assert!(e.to_string().contains("gone"), "{e}");
        t.reported(None);
        assert_eq!(t.in_flight(), 0);
        assert!(t.unsettled(), "a later success hides the failure");
        assert!(
            t.settled().await.is_err(),
            "a later success hides the failure"
        );
    }

    #[tokio::test]
    async fn a_refused_message_is_not_waited_for() {
        let t = Tally::default();
        t.sending();
        t.unsent();
        assert_eq!(t.in_flight(), 0);
        assert!(!t.unsettled());
        t.settled().await.expect("nothing in flight");
    }

    #[test]
    #[should_panic(expected = "more delivery reports than messages sent")]
    fn a_report_without_a_message_panics() {
        Tally::default().reported(None);
    }
}
