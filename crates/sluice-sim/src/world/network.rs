//! The network: partitions (which nodes reach each other, and which reach the meta store) and
//! messages between nodes, with `x-drop` targeted drops, random loss, duplication, delay and
//! reordering.
//!
//! Invariants: a message a node sends itself arrives at once and is never lost; nothing crosses
//! a partition; a message is addressed to the incarnation its destination has when it is sent,
//! so a restart in between loses it; every fault is drawn from the world's seeded rng.

use super::*;

impl Sim {
    fn group_of(&self, name: &str) -> Option<usize> {
        let (groups, _) = self.partition.as_ref()?;
        Some(
            groups
                .iter()
                .position(|g| g.contains(name))
                .unwrap_or(groups.len()),
        )
    }

    fn reaches(&self, a: &str, b: &str) -> bool {
        self.group_of(a) == self.group_of(b)
    }

    pub(super) fn reaches_meta(&self, a: &str) -> bool {
        match &self.partition {
            Some((_, Some(meta_group))) => self.group_of(a) == Some(*meta_group),
            _ => true,
        }
    }

    pub(super) fn send(&mut self, from: &str, to: &str, msg: Message) {
        let now = self.now;
        let to_inc = self.nodes.get(to).map(|n| n.incarnation).unwrap_or(0);
        if from == to {
            self.push(
                now,
                Ev::Input {
                    node: to.to_string(),
                    inc: to_inc,
                    input: Input::Message {
                        from: NodeId::new(from),
                        msg,
                    },
                },
            );
            return;
        }
        if !self.reaches(from, to) {
            *self.fault_counts.entry("partition_drop").or_default() += 1;
            return;
        }
        let kind = msg.kind();
        if let Some(r) = self.drops.iter_mut().find(|r| {
            r.left > 0
                && r.kind == kind
                && r.from.as_deref().map(|f| f == from).unwrap_or(true)
                && r.to.as_deref().map(|t| t == to).unwrap_or(true)
        }) {
            r.left -= 1;
            *self.fault_counts.entry("targeted_drop").or_default() += 1;
            self.cover("drop");
            self.note(format!("{now} net: dropped {kind} {from}->{to} (x-drop)"));
            return;
        }
        if self.rng.chance(self.faults.drop) {
            *self.fault_counts.entry("drop").or_default() += 1;
            self.cover("drop");
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate) {
            *self.fault_counts.entry("duplicate").or_default() += 1;
            2
        } else {
            1
        };
        let lats: Vec<Millis> = (0..copies).map(|_| self.latency()).collect();
        // A duplicate is a clone; the last copy is the message itself (a heartbeat can list
        // 100,000 dispatchers).
        let mut copies: Vec<Message> = lats.iter().skip(1).map(|_| msg.clone()).collect();
        copies.push(msg);
        for (lat, msg) in lats.into_iter().zip(copies) {
            self.push(
                now + lat,
                Ev::Input {
                    node: to.to_string(),
                    inc: to_inc,
                    input: Input::Message {
                        from: NodeId::new(from),
                        msg,
                    },
                },
            );
        }
    }

    /// A message's delay: the base, the world's extra delay, and a reordering's share.
    fn latency(&mut self) -> Millis {
        let mut lat =
            self.rng.range(1, 3) + self.rng.range(self.faults.delay.0, self.faults.delay.1);
        if self.faults.reorder {
            lat += self.rng.range(0, 300);
            *self.fault_counts.entry("reorder").or_default() += 1;
        }
        lat
    }
}
