//! User requests: queued as the API takes them and sent to the coordinator (changefeed and node
//! requests) or to the node of the changefeed's current maintainer (table requests) once that is
//! ready; the create and the cordons sent again while the meta store does not show them; the
//! hold switches.
//!
//! Invariants: a request waits in the queue, in order, while its target is not ready, and is
//! never dropped; a create or a cordon is sent again at most every 2 s, a create only while none
//! is queued; a hold switched on for a node name holds for its later incarnations too
//! (`start_node` switches it on again).

use super::*;

impl Sim {
    /// Requests go to the coordinator (changefeed and node requests) or to the node running the
    /// changefeed's current maintainer (table requests); retried while there is none.
    pub(super) fn pump_requests(&mut self) {
        let now = self.now;
        // Cordons that did not take are asked again.
        let resend: Vec<(String, Option<&'static str>)> = self
            .cordons
            .iter()
            .filter(|(n, (want, at))| {
                let have = self.meta.kv.get(&keys::cordon(n)).map(|(v, _)| {
                    if v.as_slice() == b"drain" {
                        "drain"
                    } else {
                        "cordon"
                    }
                });
                have != *want && now >= at + 2_000
            })
            .map(|(n, (w, _))| (n.clone(), *w))
            .collect();
        for (n, want) in resend {
            self.cordons.insert(n.clone(), (want, now));
            let req = match want {
                Some("drain") => UserRequest::Drain {
                    node: NodeId::new(n.as_str()),
                },
                Some(_) => UserRequest::Cordon {
                    node: NodeId::new(n.as_str()),
                    on: true,
                },
                None => UserRequest::Cordon {
                    node: NodeId::new(n.as_str()),
                    on: false,
                },
            };
            self.requests.push_back(req);
        }
        // A create that did not take (the coordinator died or lost the store) is sent again.
        if let Some((req, at)) = self.create.clone() {
            if self.meta.kv.contains_key(&keys::info(self.cf.as_str())) {
                self.create = None;
            } else if now >= at + 2_000
                && !self
                    .requests
                    .iter()
                    .any(|r| matches!(r, UserRequest::CreateChangefeed { .. }))
            {
                self.create = Some((req.clone(), now));
                self.requests.push_back(req);
            }
        }
        let mut keep = VecDeque::new();
        while let Some(req) = self.requests.pop_front() {
            let target = match &req {
                UserRequest::Table { .. } => self
                    .current_maintainer()
                    .filter(|(_, ready)| *ready)
                    .map(|(n, _)| n),
                _ => self.coordinator_node().filter(|n| {
                    self.node(n)
                        .and_then(|s| s.coordinator())
                        .map(|c| c.is_ready())
                        .unwrap_or(false)
                }),
            };
            match target {
                Some(n) => {
                    let inc = self.nodes.get(&n).map(|x| x.incarnation).unwrap_or(0);
                    self.push(
                        now,
                        Ev::Input {
                            node: n,
                            inc,
                            input: Input::Request(req),
                        },
                    );
                }
                None => keep.push_back(req),
            }
        }
        self.requests = keep;
    }

    /// Send a user request (as the API would) to the coordinator or the maintainer.
    pub fn user_request(&mut self, req: UserRequest) {
        self.request(req);
    }

    pub(super) fn request(&mut self, req: UserRequest) {
        self.requests.push_back(req);
        self.pump_requests();
    }

    pub(super) fn hold(
        &mut self,
        point: scenario::HoldPoint,
        node: &Option<NodeRef>,
        on: bool,
    ) -> Result<(), String> {
        let p = to_hold(point);
        let names: Vec<String> = match node {
            Some(r) => vec![self.resolve(r)?],
            None => self.nodes.keys().cloned().collect(),
        };
        for n in names {
            let set = self.holds.entry(n.clone()).or_default();
            if on {
                set.insert(p);
            } else {
                set.remove(&p);
            }
            self.deliver_now(&n, Input::Hold { point: p, on });
        }
        Ok(())
    }
}
