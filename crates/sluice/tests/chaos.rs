//! The chaos case of the failover suite (issue 12, item 2), on three `sluice server` nodes on
//! etcd with real MariaDB servers. The upstream runs a bank-transfer workload (`bank.accounts`:
//! [`ACCOUNTS`] accounts; each transaction moves an amount between two random accounts and logs it
//! in `bank.transfers`, so the sum of balances never changes) plus random DDL on side tables
//! (`side.s<k>`: CREATE, ALTER ADD COLUMN, TRUNCATE, DROP, with rows), while the nemesis
//! (`chaos/nemesis.rs`) kills nodes with `kill -9` and restarts them, stops them with SIGSTOP
//! beyond their lease and resumes them, SIGTERMs and restarts them, moves, splits and merges
//! tables through the API, and (MySQL sink) freezes a node whose transaction of rows is held past
//! the node-side write check, letting it go once the node is back (the downstream fence must
//! refuse it).
//!
//! Pass criteria, read from the API and the databases only (never from logs):
//! - the changefeed's checkpoint, sampled every second, never goes backwards;
//! - after each watched fault the checkpoint passes the upstream's position at the fault within
//!   60 s, and a SIGTERM exits 0;
//! - at the end (workload and nemesis stopped, every node back) the changefeed drains to the
//!   upstream's position; every span replicates with no operator and no request queued, the
//!   spans name exactly the upstream's tables, each span has exactly one working dispatcher in
//!   the nodes' own reports; the changefeed is `normal` and its `restarts` is 0;
//! - `sluice check` passes, the downstream's sum of balances equals the upstream's (and the
//!   invariant), and the side tables downstream are the upstream's, column for column;
//! - every nemesis kind ran at least 3 times.
//!
//! Sinks: the MySQL sink into a downstream MariaDB, and the storage sink (`file://`, canal-json
//! with commit ts) applied by `sluice consume` into a second MariaDB, which is then checked.
//!
//! Parameters (environment): `SLUICE_CHAOS_SECS` the nemesis' length (default 120);
//! `SLUICE_CHAOS_SEED` the seed (printed at the start; the same seed makes the same choices, the
//! servers decide the timing); `SLUICE_CHAOS_SINKS` `mysql` (default), `storage` or `all`: the
//! variant not chosen says so and returns; `SLUICE_CHAOS_REPORT` a file the report is appended
//! to as it goes. `scripts/chaos.sh [SECONDS] [mysql|storage]` runs one variant at any length
//! and keeps the report in `docs/figures/`.

mod common;
#[path = "chaos/nemesis.rs"]
mod nemesis;
#[path = "chaos/probe.rs"]
mod probe;

use common::cluster::Cluster;
use common::*;
use nemesis::{Figures, Nemesis, KINDS};
use probe::{sample, Nodes, Report, Rng, Samples};
use serde_json::Value;
use sluice_testkit::etcd::Etcd;
use sluice_testkit::mariadb::MariaDb;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const CF: &str = "chaos";
const ACCOUNTS: u64 = 200;
const BALANCE: i64 = 1000;
/// Each kind of nemesis action must have run at least this often.
const MIN_PER_KIND: u32 = 3;
/// At most this many side tables exist at once.
const MAX_SIDE: usize = 6;

fn secs() -> u64 {
    std::env::var("SLUICE_CHAOS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120)
}

fn seed() -> u64 {
    std::env::var("SLUICE_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            Rng(t ^ u64::from(std::process::id())).next() % 1_000_000
        })
}

fn chosen(sink: &str) -> bool {
    let v = std::env::var("SLUICE_CHAOS_SINKS").unwrap_or_else(|_| "mysql".into());
    v == "all" || v.split(',').any(|s| s.trim() == sink)
}

/// The schema and rows both sides have before the servers start (they compute regions then:
/// the bank tables are analyzed, so a split has boundaries to cut at).
fn seed_schema(dbs: &[&MariaDb]) {
    let accounts: Vec<String> = (1..=ACCOUNTS)
        .map(|i| format!("({i}, {BALANCE}, 0)"))
        .collect();
    let log: Vec<String> = (1..=300).map(|i| format!("({i}, 0, 0, 0)")).collect();
    let sql = format!(
        "CREATE DATABASE bank; CREATE DATABASE side;
         CREATE TABLE bank.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL, version INT NOT NULL);
         CREATE TABLE bank.transfers (id BIGINT PRIMARY KEY AUTO_INCREMENT, src INT, dst INT, amount INT);
         INSERT INTO bank.accounts VALUES {}; INSERT INTO bank.transfers VALUES {};",
        accounts.join(", "),
        log.join(", ")
    );
    for db in dbs {
        db.exec(&sql).expect("seed schema");
    }
    dbs[0]
        .exec("ANALYZE TABLE bank.accounts, bank.transfers")
        .expect("analyze");
}

/// What the workload did.
#[derive(Default)]
struct Work {
    transfers: u64,
    side_rows: u64,
    ddl: BTreeMap<&'static str, u32>,
}

/// The side tables that exist (by suffix) and the next suffix (of a table or a column).
#[derive(Default)]
struct Side {
    next: u64,
    live: Vec<u64>,
}

/// Ten transfers a batch, a row in a side table, and one time in eight a side DDL, until `stop`.
fn workload(up: &MariaDb, stop: &AtomicBool, seed: u64) -> Work {
    let mut rng = Rng(seed ^ 0x0bad_5eed);
    let (mut w, mut side) = (Work::default(), Side::default());
    while !stop.load(Ordering::SeqCst) {
        let mut sql = String::new();
        for _ in 0..10 {
            sql.push_str(&transfer(&mut rng));
        }
        w.transfers += 10;
        if let Some(t) = rng.pick(&side.live) {
            sql.push_str(&format!(
                "INSERT INTO side.s{t} (v) VALUES ({});",
                rng.below(1000)
            ));
            w.side_rows += 1;
        }
        if rng.chance(12) {
            let (kind, ddl) = side_ddl(&mut rng, &mut side);
            sql.push_str(&ddl);
            *w.ddl.entry(kind).or_default() += 1;
        }
        up.exec(&sql).expect("workload");
        std::thread::sleep(Duration::from_millis(50));
    }
    w
}

fn transfer(rng: &mut Rng) -> String {
    let a = 1 + rng.below(ACCOUNTS);
    let mut b = 1 + rng.below(ACCOUNTS - 1);
    if b >= a {
        b += 1;
    }
    let x = 1 + rng.below(100);
    format!(
        "BEGIN; UPDATE bank.accounts SET balance = balance - {x}, version = version + 1 WHERE id = {a};
         UPDATE bank.accounts SET balance = balance + {x}, version = version + 1 WHERE id = {b};
         INSERT INTO bank.transfers (src, dst, amount) VALUES ({a}, {b}, {x}); COMMIT;"
    )
}

/// One DDL on the side tables: a CREATE while fewer than two exist (or one time in four, below
/// [`MAX_SIDE`]), else an ADD COLUMN, a TRUNCATE (rows after it) or a DROP of one of them.
fn side_ddl(rng: &mut Rng, side: &mut Side) -> (&'static str, String) {
    side.next += 1;
    let k = side.next;
    let create = side.live.len() < 2 || (side.live.len() < MAX_SIDE && rng.chance(25));
    let t = rng.pick(&side.live).unwrap_or(k);
    if create {
        side.live.push(k);
        let sql = format!(
            "CREATE TABLE side.s{k} (id INT PRIMARY KEY AUTO_INCREMENT, v INT);
             INSERT INTO side.s{k} (v) VALUES (1), (2), (3);"
        );
        return ("create", sql);
    }
    match rng.below(3) {
        0 => (
            "add column",
            format!("ALTER TABLE side.s{t} ADD COLUMN c{k} INT DEFAULT {k};"),
        ),
        1 => (
            "truncate",
            format!("TRUNCATE TABLE side.s{t}; INSERT INTO side.s{t} (v) VALUES ({k});"),
        ),
        _ => {
            side.live.retain(|x| *x != t);
            ("drop", format!("DROP TABLE side.s{t};"))
        }
    }
}

/// Sets the flags when dropped, so that the workload and the sampler end if the nemesis panics.
struct StopOnDrop<'a>(&'a [&'a AtomicBool]);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        for f in self.0 {
            f.store(true, Ordering::SeqCst);
        }
    }
}

/// The upstream's tables under `bank` and `side`, and each one's columns.
fn tables_of(db: &MariaDb) -> BTreeMap<String, String> {
    db.query(
        "SELECT CONCAT(table_schema, '.', table_name), GROUP_CONCAT(column_name ORDER BY ordinal_position)
         FROM information_schema.columns WHERE table_schema IN ('bank', 'side')
         GROUP BY table_schema, table_name",
    )
    .expect("tables")
    .into_iter()
    .filter_map(|r| Some((r.first()?.clone(), r.get(1)?.clone())))
    .collect()
}

fn sum_of_balances(db: &MariaDb) -> i64 {
    db.query_one("SELECT SUM(balance) FROM bank.accounts")
        .expect("sum")
        .parse()
        .expect("a number")
}

/// What is still off at the end, or `Ok` once every span replicates with no operator and no
/// request queued, the spans name exactly `tables`, and the nodes report exactly one working
/// dispatcher per span (plus one table trigger).
fn settled(n: &Nodes, tables: &BTreeSet<String>) -> Result<(), String> {
    let spans = n.feed("/spans")?;
    let items = spans["items"].as_array().cloned().unwrap_or_default();
    let quiet = items
        .iter()
        .all(|i| i["state"] == "replicating" && i["operator"].is_null());
    let queued = spans["pending_requests"].as_array().map_or(0, Vec::len);
    if items.is_empty() || !quiet || queued > 0 {
        return Err(format!("spans not settled: {spans}"));
    }
    let names: BTreeSet<String> = items
        .iter()
        .filter_map(|i| i["table_name"].as_str().map(String::from))
        .collect();
    if &names != tables {
        return Err(format!(
            "the spans name {names:?}, the upstream has {tables:?}"
        ));
    }
    let d = n.feed("/dispatchers")?;
    let all = d["items"].as_array().cloned().unwrap_or_default();
    let triggers = all.iter().filter(|x| x["is_trigger"] == true).count();
    let key = |x: &Value| format!("{} {} {}", x["table_id"], x["start_key"], x["end_key"]);
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for x in all.iter().filter(|x| x["is_trigger"] == false) {
        if x["state"] != "working" {
            return Err(format!("a dispatcher not working: {x}"));
        }
        *per.entry(key(x)).or_default() += 1;
    }
    let want: BTreeMap<String, usize> = items.iter().map(|i| (key(i), 1)).collect();
    if per != want || triggers != 1 {
        return Err(format!(
            "dispatchers per span {per:?} (and {triggers} triggers) for the spans {want:?}: {d}"
        ));
    }
    Ok(())
}

/// Every node back, then the changefeed drained to the upstream's position and settled.
fn drain(n: &Nodes, up: &MariaDb, rep: &Report) -> u64 {
    let t = Instant::now();
    wait_for("every node in the captures", 90, || {
        let caps = n.captures()?;
        (caps.len() == n.addrs.len())
            .then_some(())
            .ok_or(format!("{caps:?}"))
    });
    let target = master_ts(up);
    wait_for("the changefeed drained", 180, || {
        let v = n.feed("")?;
        let cp = v["checkpoint_ts"].as_u64().unwrap_or(0);
        (cp >= target).then_some(()).ok_or(v.to_string())
    });
    let tables: BTreeSet<String> = tables_of(up).into_keys().collect();
    wait_for("every span settled", 120, || settled(n, &tables));
    rep.line(&format!(
        "drained to {target} and settled in {:.1?}",
        t.elapsed()
    ));
    target
}

/// What `sluice check` compared: tables equal and upstream rows in them.
fn checked(stdout: &str) -> (usize, u64) {
    let mut tables = 0;
    let mut rows = 0;
    for l in stdout.lines().filter(|l| l.contains(": equal (")) {
        tables += 1;
        let n = l
            .split(" chunks, ")
            .nth(1)
            .and_then(|s| s.split(' ').next());
        rows += n.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    }
    (tables, rows)
}

/// The run's outcome, for the summary and the assertions.
struct Outcome {
    fig: Figures,
    work: Work,
    samples: Samples,
    check: Run,
    sums: (i64, i64),
    side_equal: bool,
    feed: Value,
}

fn median(v: &[Duration]) -> String {
    let mut v = v.to_vec();
    v.sort();
    match (v.first(), v.get(v.len() / 2), v.last()) {
        (Some(lo), Some(mid), Some(hi)) => {
            format!(
                "min {lo:.1?}, median {mid:.1?}, max {hi:.1?} (n={})",
                v.len()
            )
        }
        _ => "none measured".into(),
    }
}

fn by_kind(kinds: &[nemesis::Kind], m: &BTreeMap<nemesis::Kind, u32>) -> String {
    kinds
        .iter()
        .map(|k| format!("{} {}", k.name(), m.get(k).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn summary(rep: &Report, o: &Outcome, secs: u64) {
    let (f, w, s) = (&o.fig, &o.work, &o.samples);
    let (tables, rows) = checked(&o.check.stdout);
    let ddl: Vec<String> = w.ddl.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let lines = [
        "== chaos summary".to_string(),
        format!("nemesis actions by kind in {secs} s: {}", by_kind(&f.kinds, &f.ran)),
        format!("not run (refused, or nothing to act on): {}", by_kind(&f.kinds, &f.not_run)),
        format!("stale writes refused by the downstream fence on frozen nodes: {}", f.refused),
        format!("fault of the maintainer's node to a new maintainer: {}", median(&f.new_maintainer)),
        format!("fault to the checkpoint past the fault's upstream position: {}", median(&f.caught_up)),
        format!("SIGTERM to exit: {}", median(&f.term_exit)),
        format!(
            "workload: {} transfers, {} side-table rows, side DDL: {}",
            w.transfers,
            w.side_rows,
            ddl.join(", ")
        ),
        format!(
            "checkpoint samples: {} answered, {} unanswered, {} backward steps, {} -> {}",
            s.answered,
            s.unanswered,
            s.backwards.len(),
            s.first.unwrap_or(0),
            s.last
        ),
        format!(
            "verified: sluice check exit {}, {tables} tables equal, {rows} upstream rows; sum of balances up {} down {} (invariant {}); side tables {}",
            o.check.code,
            o.sums.0,
            o.sums.1,
            ACCOUNTS as i64 * BALANCE,
            if o.side_equal { "equal" } else { "DIFFER" }
        ),
        format!("changefeed at the end: state {}, restarts {}", o.feed["state"], o.feed["restarts"]),
        format!("violations: {}", f.violations.len() + s.backwards.len()),
    ];
    for l in lines {
        rep.raw(&l);
    }
}

/// Every failed criterion, with the seed to replay.
fn assert_outcome(o: &Outcome, seed: u64) {
    let mut failed: Vec<String> = Vec::new();
    for k in &o.fig.kinds {
        let ran = o.fig.ran.get(k).copied().unwrap_or(0);
        if ran < MIN_PER_KIND {
            failed.push(format!(
                "{} ran {ran} times, fewer than {MIN_PER_KIND}",
                k.name()
            ));
        }
    }
    failed.extend(o.fig.violations.iter().cloned());
    failed.extend(o.samples.backwards.iter().cloned());
    if o.check.code != 0 {
        failed.push(format!(
            "sluice check: {} {}",
            o.check.stdout, o.check.stderr
        ));
    }
    let invariant = ACCOUNTS as i64 * BALANCE;
    if o.sums.0 != invariant || o.sums.1 != o.sums.0 {
        failed.push(format!(
            "sums of balances: up {} down {}",
            o.sums.0, o.sums.1
        ));
    }
    if !o.side_equal {
        failed.push("the side tables downstream differ from the upstream's".into());
    }
    if o.feed["restarts"] != 0 || o.feed["state"] != "normal" {
        failed.push(format!("the changefeed at the end: {}", o.feed));
    }
    assert!(
        failed.is_empty(),
        "chaos run failed (SLUICE_CHAOS_SEED={seed}):\n{}",
        failed.join("\n")
    );
}

/// The workload, the sampler and the nemesis together; then the drain. Returns the drained-to
/// upstream position with what each of them saw.
fn chaos(
    c: &mut Cluster,
    n: &Nodes,
    up: &MariaDb,
    rep: &Report,
    (seed, secs): (u64, u64),
    kinds: &[nemesis::Kind],
) -> (Figures, Work, Samples, u64) {
    let (stop_work, stop_samples) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let flags = [&stop_work, &stop_samples];
        let _stop = StopOnDrop(&flags);
        let w = s.spawn(|| workload(up, &stop_work, seed));
        let sm = s.spawn(|| sample(n, &stop_samples, rep));
        let nemesis = Nemesis {
            c,
            n,
            up,
            rep,
            rng: Rng(seed),
            fig: Figures {
                kinds: kinds.to_vec(),
                ..Figures::default()
            },
        };
        let fig = nemesis.run(secs);
        stop_work.store(true, Ordering::SeqCst);
        let work = w.join().expect("the workload");
        rep.line("workload and nemesis stopped");
        let target = drain(n, up, rep);
        stop_samples.store(true, Ordering::SeqCst);
        (fig, work, sm.join().expect("the sampler"), target)
    })
}

fn run(sink: &str) {
    if !chosen(sink) {
        eprintln!("chaos, {sink} sink: not chosen (SLUICE_CHAOS_SINKS=mysql|storage|all)");
        return;
    }
    let (secs, seed) = (secs(), seed());
    let rep = Report::new();
    rep.raw(&format!(
        "# chaos, {sink} sink: SLUICE_CHAOS_SEED={seed} SLUICE_CHAOS_SECS={secs}"
    ));
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    seed_schema(&[&up, &down]);
    let mut c = Cluster::start("chaos", 3, &up_url, &etcd.url(), CF);
    let root = c.dirs[0].join("out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true&enable-table-across-nodes=true&flush-interval=200ms",
        root.display()
    );
    let uri = if sink == "storage" {
        storage.clone()
    } else {
        format!("{down_url}/")
    };
    let scheduler = "enable-table-across-nodes = true\nregion-threshold = 100000\n";
    c.create(&out, &uri, scheduler);
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 60);
    let n = Nodes::of(&c);
    let mut kinds = KINDS.to_vec();
    if sink == "mysql" {
        kinds.push(nemesis::Kind::Freeze);
    }
    let (fig, work, samples, target) = chaos(&mut c, &n, &up, &rep, (seed, secs), &kinds);
    if sink == "storage" {
        let said = consume_storage(&out, &root, &storage, &down_url, target);
        rep.line(&format!("sluice consume: {said}"));
    }
    let o = Outcome {
        fig,
        work,
        samples,
        check: check(&out, &up_url, &down_url, "bank.*,side.*"),
        sums: (sum_of_balances(&up), sum_of_balances(&down)),
        side_equal: tables_of(&up) == tables_of(&down),
        feed: n.feed("").unwrap_or_else(Value::String),
    };
    summary(&rep, &o, secs);
    c.finish(&out);
    assert_outcome(&o, seed);
}

/// The MySQL sink (the default test command runs this one, `SLUICE_CHAOS_SECS` 120).
#[test]
fn chaos_mysql_sink() {
    run("mysql");
}

/// The storage sink, checked through `sluice consume` (`SLUICE_CHAOS_SINKS=storage`).
#[test]
fn chaos_storage_sink() {
    run("storage");
}
