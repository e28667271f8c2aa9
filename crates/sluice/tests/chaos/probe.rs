//! What the chaos case reads and how it reports: the servers as the API reaches them ([`Nodes`]:
//! a node the nemesis marked down is never asked, so a stopped process cannot hold a call), the
//! checkpoint sampler ([`sample`]: one reading a second, every backward step recorded), the
//! seeded random source ([`Rng`]) and the report ([`Report`]: printed, and appended as it happens
//! to `SLUICE_CHAOS_REPORT` when set).

use super::CF;
use crate::common::api_within;
use crate::common::cluster::Cluster;
use serde_json::Value;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A call the API does not answer within this long is taken as unanswered.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// splitmix64: the seed alone decides every choice of the workload and the nemesis (not their
/// timing, which the servers decide).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Clone>(&mut self, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[self.below(v.len() as u64) as usize].clone())
    }
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// The report: each line printed with the time since the start, and appended (flushed) to the
/// file `SLUICE_CHAOS_REPORT` names, so a long run leaves its results behind as it goes.
pub struct Report {
    t0: Instant,
    file: Option<Mutex<std::fs::File>>,
}

impl Report {
    pub fn new() -> Report {
        let file = std::env::var("SLUICE_CHAOS_REPORT").ok().map(|p| {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .unwrap_or_else(|e| panic!("SLUICE_CHAOS_REPORT {p}: {e}"));
            Mutex::new(f)
        });
        Report {
            t0: Instant::now(),
            file,
        }
    }

    /// A line stamped with the seconds since the start.
    pub fn line(&self, s: &str) {
        self.raw(&format!("[{:7.1}s] {s}", self.t0.elapsed().as_secs_f64()));
    }

    pub fn raw(&self, s: &str) {
        eprintln!("{s}");
        if let Some(f) = &self.file {
            let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(f, "{s}");
            let _ = f.flush();
        }
    }
}

/// One API call with a short timeout.
fn call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    api_within(base, method, path, body, CALL_TIMEOUT)
}

/// The servers' addresses (they keep them across restarts) and whether each may be asked.
pub struct Nodes {
    pub urls: Vec<String>,
    pub addrs: Vec<String>,
    up: Vec<AtomicBool>,
}

impl Nodes {
    pub fn of(c: &Cluster) -> Nodes {
        Nodes {
            urls: c.servers.iter().map(|s| s.url()).collect(),
            addrs: c.servers.iter().map(|s| s.addr.clone()).collect(),
            up: c.servers.iter().map(|_| AtomicBool::new(true)).collect(),
        }
    }

    pub fn set_up(&self, i: usize, up: bool) {
        self.up[i].store(up, Ordering::SeqCst);
    }

    /// The first node marked up that answers, whatever the status.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let mut last = "no node is up".to_string();
        for (i, url) in self.urls.iter().enumerate() {
            if !self.up[i].load(Ordering::SeqCst) {
                continue;
            }
            match call(url, method, path, body) {
                Ok(r) => return Ok(r),
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(last)
    }

    /// `GET /api/v2/changefeeds/{CF}{what}`, answered 200.
    pub fn feed(&self, what: &str) -> Result<Value, String> {
        let (st, v) = self.call("GET", &format!("/api/v2/changefeeds/{CF}{what}"), None)?;
        (st == 200).then_some(v.clone()).ok_or(format!("{st} {v}"))
    }

    /// The ids (addresses) of the registered nodes.
    pub fn captures(&self) -> Result<Vec<String>, String> {
        let (st, v) = self.call("GET", "/api/v2/captures", None)?;
        let items = v["items"].as_array().filter(|_| st == 200);
        let items = items.ok_or(format!("{st} {v}"))?;
        Ok(items
            .iter()
            .filter_map(|i| i["id"].as_str().map(String::from))
            .collect())
    }
}

/// What the sampler saw.
#[derive(Default)]
pub struct Samples {
    pub answered: u32,
    pub unanswered: u32,
    pub first: Option<u64>,
    pub last: u64,
    /// Each backward step: the reading, the highest before it.
    pub backwards: Vec<String>,
    pub max_restarts: u64,
}

impl Samples {
    fn record(&mut self, v: &Value, rep: &Report) {
        let Some(cp) = v["checkpoint_ts"].as_u64() else {
            self.unanswered += 1;
            return;
        };
        self.answered += 1;
        self.first.get_or_insert(cp);
        if cp < self.last {
            let s = format!("checkpoint went backwards: {cp} after {}: {v}", self.last);
            rep.line(&format!("VIOLATION {s}"));
            self.backwards.push(s);
        }
        self.last = self.last.max(cp);
        let restarts = v["restarts"].as_u64().unwrap_or(0);
        if restarts > self.max_restarts {
            rep.line(&format!("VIOLATION the changefeed restarted: {v}"));
            self.max_restarts = restarts;
        }
    }
}

/// Reads the changefeed once a second until `stop`.
pub fn sample(n: &Nodes, stop: &AtomicBool, rep: &Report) -> Samples {
    let mut s = Samples::default();
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        match n.feed("") {
            Ok(v) => s.record(&v, rep),
            Err(_) => s.unanswered += 1,
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
    }
    s
}
