//! The nemesis: until its deadline, one action after another in seeded random order (each round
//! a shuffle of the six kinds, the split before the merge, so every kind comes once per round), a pause of 0-1.5 s between
//! them. Process faults hit one node at a time, the maintainer's node half of the time:
//! - `kill -9`, then either a restart 0.2-1.5 s later (before the lease lapses) or, watched, once
//!   another node is the maintainer (when the victim was) and the checkpoint passed the
//!   upstream's position at the kill;
//! - SIGSTOP until the node's lease lapsed (it is gone from the captures), the maintainer moved
//!   and the checkpoint passed the position at the stop, plus 0-2 s, then SIGCONT;
//! - SIGTERM (the node drains and must exit 0), then a restart;
//! - (MySQL sink) a freeze past the write check: every node holds its next transaction of rows
//!   after the node-side fence check (`mysql_before_send`), the first node holding one is
//!   stopped with SIGSTOP beyond its lease (watched as above, its successor writes meanwhile),
//!   resumed, and only then is its transaction let go: the downstream fence must refuse it, which
//!   the final `sluice check` and sums show (a landed stale write would undo newer rows).
//!
//! Each process fault ends with the node back in the captures. Table requests go through the API
//! (`move_table` of a table in one span to another node, `split_table` of a bank table in one span
//! into 2-3 spans, `merge_table` of a table a user split) and count once accepted (202).
//! A fault the changefeed does not recover from within [`RECOVERY_SECS`] and a SIGTERM that does
//! not exit 0 are violations. The figures: actions by kind, time from a fault of the maintainer's
//! node to a new maintainer, time from a fault to the checkpoint passing its position, SIGTERM
//! drain times.

use super::probe::{Nodes, Report, Rng};
use crate::common::cluster::Cluster;
use crate::common::*;
use serde_json::{json, Value};
use sluice_testkit::mariadb::MariaDb;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long the changefeed may take to recover from a fault (the checkpoint past the fault).
const RECOVERY_SECS: u64 = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Kill,
    Pause,
    Term,
    Move,
    Split,
    Merge,
    Freeze,
}

/// The kinds every sink runs; [`Kind::Freeze`] needs the MySQL sink's hold point.
pub const KINDS: [Kind; 6] = [
    Kind::Kill,
    Kind::Pause,
    Kind::Term,
    Kind::Move,
    Kind::Split,
    Kind::Merge,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill -9",
            Kind::Pause => "SIGSTOP",
            Kind::Term => "SIGTERM",
            Kind::Move => "move",
            Kind::Split => "split",
            Kind::Merge => "merge",
            Kind::Freeze => "freeze past the write check",
        }
    }
}

/// What the nemesis did and measured.
#[derive(Default)]
pub struct Figures {
    /// The kinds this run planned (each must run at least `MIN_PER_KIND` times).
    pub kinds: Vec<Kind>,
    pub ran: BTreeMap<Kind, u32>,
    pub not_run: BTreeMap<Kind, u32>,
    /// From a kill or a stop of the maintainer's node to another node being the maintainer.
    pub new_maintainer: Vec<Duration>,
    /// From a watched fault to the checkpoint passing the upstream's position at the fault.
    pub caught_up: Vec<Duration>,
    /// From SIGTERM to the exit.
    pub term_exit: Vec<Duration>,
    /// Writes the downstream fence refused on frozen nodes (`sluice_stale_writes_refused_total`).
    pub refused: u64,
    pub violations: Vec<String>,
}

pub struct Nemesis<'a> {
    pub c: &'a mut Cluster,
    pub n: &'a Nodes,
    pub up: &'a MariaDb,
    pub rep: &'a Report,
    pub rng: Rng,
    pub fig: Figures,
}

impl Nemesis<'_> {
    /// Acts until `secs` have passed.
    pub fn run(mut self, secs: u64) -> Figures {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut plan: Vec<Kind> = Vec::new();
        while Instant::now() < deadline {
            if plan.is_empty() {
                plan = self.round();
            }
            let k = plan.pop().unwrap_or(Kind::Move);
            match self.act(k) {
                Ok(what) => {
                    *self.fig.ran.entry(k).or_default() += 1;
                    self.rep.line(&format!("{} {what}", k.name()));
                }
                Err(why) => {
                    *self.fig.not_run.entry(k).or_default() += 1;
                    self.rep.line(&format!("{} not run: {why}", k.name()));
                }
            }
            std::thread::sleep(self.rng.millis(0, 1500));
        }
        self.fig
    }

    /// The kinds shuffled, the split before the merge (the plan is popped from its end), so
    /// that a round's merge finds the table its split marked.
    fn round(&mut self) -> Vec<Kind> {
        let mut plan = self.fig.kinds.clone();
        self.rng.shuffle(&mut plan);
        let at = |k: Kind, p: &[Kind]| p.iter().position(|x| *x == k).unwrap_or(0);
        let (s, m) = (at(Kind::Split, &plan), at(Kind::Merge, &plan));
        if m > s {
            plan.swap(s, m);
        }
        plan
    }

    fn act(&mut self, k: Kind) -> Result<String, String> {
        match k {
            Kind::Kill => self.kill(),
            Kind::Pause => self.pause(),
            Kind::Term => self.term(),
            Kind::Move => self.move_table(),
            Kind::Split => self.split(),
            Kind::Merge => self.merge(),
            Kind::Freeze => self.freeze(),
        }
    }

    fn violation(&mut self, s: String) {
        self.rep.line(&format!("VIOLATION {s}"));
        self.fig.violations.push(s);
    }

    /// The node to fault (the maintainer's half of the time) and whether it is the maintainer's.
    fn victim(&mut self) -> (usize, bool) {
        let m = self
            .n
            .feed("")
            .ok()
            .and_then(|v| v["maintainer_addr"].as_str().map(String::from))
            .and_then(|a| self.n.addrs.iter().position(|x| *x == a));
        match m {
            Some(i) if self.rng.chance(50) => (i, true),
            _ => {
                let i = self.rng.below(self.n.addrs.len() as u64) as usize;
                (i, Some(i) == m)
            }
        }
    }

    fn label(&self, i: usize, was_maintainer: bool) -> String {
        let m = if was_maintainer { " (maintainer)" } else { "" };
        format!("{}{m}", self.n.addrs[i])
    }

    fn kill(&mut self) -> Result<String, String> {
        let (i, was_m) = self.victim();
        self.n.set_up(i, false);
        self.c.servers[i].kill9();
        let t0 = Instant::now();
        let target = master_ts(self.up);
        let what = if self.rng.chance(30) {
            let d = self.rng.millis(200, 1500);
            std::thread::sleep(d);
            format!("restarted {d:?} after the kill, unwatched")
        } else {
            self.watch(i, was_m, target, t0, false)
        };
        self.c.servers[i].restart_after_kill();
        self.back(i);
        Ok(format!("{}: {what}; back", self.label(i, was_m)))
    }

    fn pause(&mut self) -> Result<String, String> {
        let (i, was_m) = self.victim();
        let extra = self.rng.millis(0, 2000);
        let what = self.stop_beyond_lease(i, was_m, extra)?;
        Ok(format!("{}: {what}; back", self.label(i, was_m)))
    }

    /// SIGSTOP of node `i` until its lease lapsed and the others took over (watched), `extra`
    /// more, then SIGCONT and the node back.
    fn stop_beyond_lease(
        &mut self,
        i: usize,
        was_m: bool,
        extra: Duration,
    ) -> Result<String, String> {
        let pid = self.c.servers[i].child.as_ref().map(|c| c.id());
        let pid = pid.ok_or("the node has no process")?.to_string();
        self.n.set_up(i, false);
        signal("-STOP", &pid)?;
        let t0 = Instant::now();
        let target = master_ts(self.up);
        let what = self.watch(i, was_m, target, t0, true);
        std::thread::sleep(extra);
        let stopped = t0.elapsed();
        signal("-CONT", &pid)?;
        self.back(i);
        Ok(format!("{what}; SIGCONT after {stopped:.1?}"))
    }

    fn term(&mut self) -> Result<String, String> {
        let (i, was_m) = self.victim();
        self.n.set_up(i, false);
        let t0 = Instant::now();
        let st = self.c.servers[i].sigterm();
        let took = t0.elapsed();
        self.fig.term_exit.push(took);
        if !st.is_some_and(|s| s.success()) {
            let l = self.label(i, was_m);
            self.violation(format!("SIGTERM of {l}: exit {st:?} after {took:?}"));
        }
        self.c.servers[i].restart_after_kill();
        self.back(i);
        let st = st.map(|s| s.to_string()).unwrap_or_default();
        Ok(format!(
            "{}: {st} after {took:.1?}; restarted, back",
            self.label(i, was_m)
        ))
    }

    /// See the module docs: a transaction of rows held past the node-side check on the node
    /// that froze, let go only once the node is back.
    fn freeze(&mut self) -> Result<String, String> {
        let i = match self.hold_one_send() {
            Ok(i) => i,
            Err(e) => {
                self.release_sends(None);
                return Err(e);
            }
        };
        let was_m = self.maintainer_index() == Some(i);
        let url = self.n.urls[i].clone();
        let before = stale_refused(&url);
        let stopped = self.stop_beyond_lease(i, was_m, Duration::ZERO);
        // Let go even when the stop failed: the node must not keep its writes held.
        let held = self.release_sends(Some(i));
        // The node counts what its downstream fence refused (the final check shows that
        // nothing of it landed).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut refused = 0;
        while Instant::now() < deadline {
            refused = stale_refused(&url).saturating_sub(before);
            if refused > 0 && held_sends(&url) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.fig.refused += refused;
        Ok(format!(
            "{}: {}; back; its {held} held transaction(s) let go, {refused} refused by the downstream fence",
            self.label(i, was_m),
            stopped?
        ))
    }

    /// Switches `mysql_before_send` on at every node and waits (up to 20 s) for one to hold a
    /// transaction; releases the others. Returns that node.
    fn hold_one_send(&mut self) -> Result<usize, String> {
        let on = json!({"point": "mysql_before_send", "on": true});
        for url in &self.n.urls {
            hold_call(url, &on)?;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = (0..self.n.urls.len()).find(|i| held_sends(&self.n.urls[*i]) > 0);
            if let Some(i) = found {
                let _ = self.release_others(i);
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err("no node held a transaction of rows within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Lets go of the held transactions on every node but `keep`.
    fn release_others(&self, keep: usize) -> Result<(), String> {
        let off = json!({"point": "mysql_before_send", "on": false});
        for (j, url) in self.n.urls.iter().enumerate().filter(|(j, _)| *j != keep) {
            hold_call(url, &off).map_err(|e| format!("node {j}: {e}"))?;
        }
        Ok(())
    }

    /// Switches `mysql_before_send` off (at `only`, else everywhere); returns how many
    /// transactions were held there just before.
    fn release_sends(&self, only: Option<usize>) -> u64 {
        let off = json!({"point": "mysql_before_send", "on": false});
        let mut held = 0;
        for (j, url) in self.n.urls.iter().enumerate() {
            if only.is_some_and(|o| o != j) {
                continue;
            }
            held += held_sends(url);
            let _ = hold_call(url, &off);
        }
        held
    }

    fn maintainer_index(&self) -> Option<usize> {
        let v = self.n.feed("").ok()?;
        let a = v["maintainer_addr"].as_str()?;
        self.n.addrs.iter().position(|x| x == a)
    }

    /// Node `i` answers again and every node is in the captures.
    fn back(&mut self, i: usize) {
        self.n.set_up(i, true);
        let n = self.n;
        wait_for("every node back in the captures", 90, || {
            let caps = n.captures()?;
            n.addrs
                .iter()
                .all(|a| caps.contains(a))
                .then_some(())
                .ok_or(format!("captures {caps:?}"))
        });
    }
}

/// `POST /api/v2/debug/holds` at one node, answered 200.
fn hold_call(url: &str, body: &Value) -> Result<(), String> {
    let (st, v) = api_raw(url, "POST", "/api/v2/debug/holds", Some(body))?;
    (st == 200).then_some(()).ok_or(format!("{url}: {st} {v}"))
}

/// The transactions node `url` holds at `mysql_before_send` (0 if it does not answer).
fn held_sends(url: &str) -> u64 {
    let Ok((200, v)) = api_raw(url, "GET", "/api/v2/debug/holds", None) else {
        return 0;
    };
    v["held"]
        .as_array()
        .and_then(|a| a.iter().find(|h| h["point"] == "mysql_before_send"))
        .and_then(|h| h["transactions"].as_u64())
        .unwrap_or(0)
}

/// Node `url`'s `sluice_stale_writes_refused_total` (0 if it does not answer).
fn stale_refused(url: &str) -> u64 {
    let Ok((_, v)) = api_raw(url, "GET", "/metrics", None) else {
        return 0;
    };
    v.as_str()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("sluice_stale_writes_refused_total{"))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn signal(sig: &str, pid: &str) -> Result<(), String> {
    let st = std::process::Command::new("kill").args([sig, pid]).status();
    st.map_err(|e| e.to_string())?
        .success()
        .then_some(())
        .ok_or(format!("kill {sig} {pid} failed"))
}

/// What [`Nemesis::watch`] waits for after a fault of a node.
struct Watch {
    new_maintainer: Option<Duration>,
    caught_up: Option<Duration>,
    lapsed: Option<Duration>,
}

impl Nemesis<'_> {
    /// Polls after a fault of node `i` at `t0` until another node is the maintainer (when `i`
    /// was), the checkpoint passed `target` and, with `lapse`, `i` is out of the captures;
    /// records the times, and a violation for what did not happen within [`RECOVERY_SECS`].
    fn watch(&mut self, i: usize, was_m: bool, target: u64, t0: Instant, lapse: bool) -> String {
        let addr = self.n.addrs[i].clone();
        let mut w = Watch {
            new_maintainer: (!was_m).then_some(Duration::ZERO),
            caught_up: None,
            lapsed: (!lapse).then_some(Duration::ZERO),
        };
        let deadline = t0 + Duration::from_secs(RECOVERY_SECS);
        while Instant::now() < deadline
            && (w.new_maintainer.is_none() || w.caught_up.is_none() || w.lapsed.is_none())
        {
            if let Ok(v) = self.n.feed("") {
                let other = v["maintainer_addr"].as_str().is_some_and(|a| a != addr);
                if other && w.new_maintainer.is_none() {
                    w.new_maintainer = Some(t0.elapsed());
                }
                if v["checkpoint_ts"].as_u64().unwrap_or(0) >= target && w.caught_up.is_none() {
                    w.caught_up = Some(t0.elapsed());
                }
            }
            if w.lapsed.is_none() && self.n.captures().is_ok_and(|c| !c.contains(&addr)) {
                w.lapsed = Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.record(&addr, was_m, lapse, &w)
    }

    fn record(&mut self, addr: &str, was_m: bool, lapse: bool, w: &Watch) -> String {
        let mut parts = Vec::new();
        match w.new_maintainer {
            Some(d) if was_m => {
                self.fig.new_maintainer.push(d);
                parts.push(format!("new maintainer after {d:.1?}"));
            }
            Some(_) => {}
            None => self.violation(format!(
                "no new maintainer within {RECOVERY_SECS} s of the fault of {addr}"
            )),
        }
        match w.caught_up {
            Some(d) => {
                self.fig.caught_up.push(d);
                parts.push(format!("checkpoint past the fault after {d:.1?}"));
            }
            None => self.violation(format!(
                "the checkpoint did not pass the fault of {addr} within {RECOVERY_SECS} s"
            )),
        }
        match w.lapsed {
            Some(d) if lapse => parts.push(format!("lease lapsed after {d:.1?}")),
            Some(_) => {}
            None => self.violation(format!(
                "{addr} still in the captures {RECOVERY_SECS} s into its stop"
            )),
        }
        parts.join(", ")
    }
}

/// The tables in exactly one span: `(table_id, name, node)`.
fn single_span_tables(spans: &Value) -> Vec<(u64, String, String)> {
    let mut by: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for i in spans["items"].as_array().into_iter().flatten() {
        if let Some(t) = i["table_id"].as_u64() {
            by.entry(t).or_default().push(i);
        }
    }
    by.into_iter()
        .filter(|(_, v)| v.len() == 1)
        .map(|(t, v)| {
            let s = |k: &str| v[0][k].as_str().unwrap_or_default().to_string();
            (t, s("table_name"), s("node_id"))
        })
        .collect()
}

impl Nemesis<'_> {
    fn move_table(&mut self) -> Result<String, String> {
        let spans = self.spans()?;
        let singles = single_span_tables(&spans);
        let (t, name, from) = self.rng.pick(&singles).ok_or("no table in one span")?;
        let to: Vec<String> = self
            .n
            .addrs
            .iter()
            .filter(|a| **a != from)
            .cloned()
            .collect();
        let to = self.rng.pick(&to).ok_or("no other node")?;
        self.request("move_table", json!({"table_id": t, "target_node_id": to}))?;
        Ok(format!("{name} ({t}) from {from} to {to}"))
    }

    fn split(&mut self) -> Result<String, String> {
        let spans = self.spans()?;
        let marked = user_split(&spans);
        let bank: Vec<(u64, String, String)> = single_span_tables(&spans)
            .into_iter()
            .filter(|(t, name, _)| name.starts_with("bank.") && !marked.contains(t))
            .collect();
        let (t, name, _) = self.rng.pick(&bank).ok_or("no bank table in one span")?;
        let parts = 2 + self.rng.below(2);
        self.request("split_table", json!({"table_id": t, "spans": parts}))?;
        Ok(format!("{name} ({t}) into {parts} spans"))
    }

    fn merge(&mut self) -> Result<String, String> {
        let spans = self.spans()?;
        let t = self
            .rng
            .pick(&user_split(&spans))
            .ok_or("no table split by a user")?;
        let n = spans["items"]
            .as_array()
            .map(|a| a.iter().filter(|i| i["table_id"] == t).count())
            .unwrap_or(0);
        self.request("merge_table", json!({"table_id": t}))?;
        Ok(format!("table {t} (in {n} spans)"))
    }

    /// The spans view, retried for up to 20 s (the maintainer may be starting).
    fn spans(&self) -> Result<Value, String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.n.feed("/spans") {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(300)),
            }
        }
    }

    /// POSTs a table request until it is accepted (202), for up to 20 s.
    fn request(&self, kind: &str, body: Value) -> Result<(), String> {
        let path = format!("/api/v2/changefeeds/{}/{kind}", super::CF);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let last = match self.n.call("POST", &path, Some(&body)) {
                Ok((202, _)) => return Ok(()),
                Ok((st, v)) => format!("{st} {v}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!("{kind} {body}: {last}"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

fn user_split(spans: &Value) -> Vec<u64> {
    spans["user_split_table_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}
