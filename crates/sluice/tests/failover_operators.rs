//! Operators in flight across a `kill -9` of the maintainer's node (issue 9, reproduction 3), on
//! three `sluice server` nodes on etcd with tables across nodes, while small transactions keep
//! coming. Each round: a table split by a user is merged back, another table is moved, a table is
//! created and one dropped, with `create_dispatcher` held on every node and `close_dispatcher` on
//! the moved table's node (the work stays in flight), the maintainer's node is cordoned and
//! killed 100-300 ms later, and the holds are released on the nodes that live on.
//! Within 60 s the changefeed converges, read from the API only: a new maintainer, every span
//! replicating with no operator, the merged table in one span, the new table with exactly one
//! dispatcher in the nodes' own reports, the dropped table with none, no leftover dispatcher,
//! `restarts` 0; at the end `sluice check` passes, for the MySQL sink and for a second changefeed
//! to storage (held and killed with the first) through `sluice consume`. The killed node restarts and rejoins before the
//! next round. `SLUICE_FAILOVER_ROUNDS` sets the number of rounds (1 in the test suite;
//! `scripts/failover-rounds.sh` runs 20).

mod common;
use common::cluster::{of_table, table_body, Cluster};
use common::*;
use serde_json::{json, Value};
use sluice_testkit::etcd::Etcd;
use sluice_testkit::mariadb::MariaDb;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CF: &str = "fo";
const CF_STORAGE: &str = "fo-storage";

fn rounds() -> usize {
    std::env::var("SLUICE_FAILOVER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// `r.t1`..`r.t6` with rows (t6 has 300, analyzed: many regions), and `r.d<k>` for each round to
/// drop, on every side, before the servers start (they compute regions at start).
fn tables(up: &MariaDb, downs: &[&MariaDb], rounds: usize) {
    let mut sql = String::from("CREATE DATABASE r;");
    for t in 1..=6 {
        sql.push_str(&format!(
            "CREATE TABLE r.t{t} (id INT PRIMARY KEY, v INT); INSERT INTO r.t{t} VALUES (1, 1), (2, 2);"
        ));
    }
    let rows: Vec<String> = (3..300).map(|i| format!("({i}, {i})")).collect();
    sql.push_str(&format!("INSERT INTO r.t6 VALUES {};", rows.join(", ")));
    for k in 0..rounds {
        sql.push_str(&format!(
            "CREATE TABLE r.d{k} (id INT PRIMARY KEY, v INT); INSERT INTO r.d{k} VALUES (1, 1);"
        ));
    }
    up.exec(&sql).expect("upstream tables");
    for down in downs {
        down.exec(&sql).expect("downstream tables");
    }
    up.exec("ANALYZE TABLE r.t6").expect("analyze");
}

/// Small transactions on t1..t4 until `stop`.
fn writes(up: &MariaDb, stop: &AtomicBool) {
    let mut i = 1000u32;
    while !stop.load(Ordering::Relaxed) {
        let t = 1 + i % 4;
        let sql = format!(
            "BEGIN; INSERT INTO r.t{t} VALUES ({i}, {i}); UPDATE r.t{t} SET v = v + 1 WHERE id = 1; COMMIT;"
        );
        up.exec(&sql).expect("write");
        i += 1;
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// What is still off in the converged state, or `None` when it is reached.
fn unconverged(c: &Cluster, out: &Outputs, dead: &str, ids: &Ids) -> Result<(), String> {
    let m = c.maintainer(out)?;
    if m == dead {
        return Err(format!("the maintainer is still on {dead}"));
    }
    let spans = c.spans(out)?;
    let items = spans["items"].as_array().cloned().unwrap_or_default();
    let settled = items
        .iter()
        .all(|i| i["state"] == "replicating" && i["operator"].is_null() && i["node_id"] != dead);
    if items.is_empty() || !settled {
        return Err(format!("spans not settled: {spans}"));
    }
    if of_table(&spans, ids.t6).len() != 1 {
        return Err(format!("t6 not merged into one span: {spans}"));
    }
    if of_table(&spans, ids.created).len() != 1 || !of_table(&spans, ids.dropped).is_empty() {
        return Err(format!("the created/dropped tables' spans: {spans}"));
    }
    check_dispatchers(c, out, &items, ids)?;
    let v = c.changefeed(out)?;
    if v["restarts"] != 0 || v["state"] != "normal" {
        return Err(format!("the changefeed: {v}"));
    }
    Ok(())
}

/// The nodes' own reports: one working dispatcher per span, none of the dropped table.
fn check_dispatchers(c: &Cluster, out: &Outputs, spans: &[Value], ids: &Ids) -> Result<(), String> {
    let d = c.dispatchers(out)?;
    let working: Vec<Value> = d["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|x| x["is_trigger"] == false)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let created = working
        .iter()
        .filter(|x| x["table_id"] == ids.created)
        .count();
    let dropped = working
        .iter()
        .filter(|x| x["table_id"] == ids.dropped)
        .count();
    let all_working = working.iter().all(|x| x["state"] == "working");
    if created != 1 || dropped != 0 || working.len() != spans.len() || !all_working {
        return Err(format!(
            "dispatchers: {created} of the new table, {dropped} of the dropped one, {} for {} spans: {d}",
            working.len(),
            spans.len()
        ));
    }
    Ok(())
}

/// The hold points work waits at now, over every live node.
fn held_points(c: &Cluster, out: &Outputs) -> Vec<String> {
    c.servers
        .iter()
        .filter(|s| s.child.is_some())
        .flat_map(|s| {
            let (_, v) = api(out, &s.url(), "GET", "/api/v2/debug/holds", None);
            v["held"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h["point"].as_str().map(String::from))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The node of t1's one working dispatcher.
fn t1_node(c: &Cluster, out: &Outputs, t1: u64) -> Result<String, String> {
    let v = c.dispatchers(out)?;
    let on: Vec<String> = of_table(&v, t1)
        .iter()
        .filter(|d| d["is_trigger"] == false && d["state"] == "working")
        .filter_map(|d| d["node_id"].as_str().map(String::from))
        .collect();
    match on.as_slice() {
        [n] => Ok(n.clone()),
        _ => Err(v.to_string()),
    }
}

struct Ids {
    t6: u64,
    created: u64,
    dropped: u64,
}

/// One round; returns how long convergence took after the kill.
fn round(c: &mut Cluster, out: &Outputs, up: &MariaDb, k: usize) -> Duration {
    let t6 = c.table_id(out, "r.t6");
    let t1 = c.table_id(out, "r.t1");
    let dropped = c.table_id(out, &format!("r.d{k}"));
    c.request(out, "split_table", json!({"table_id": t6, "spans": 3}));
    c.wait_spans(out, t6, 3, 60);
    let m = c.maintainer(out).expect("a maintainer");
    let dead = c.index_of(&m);
    let target = (dead + 1) % c.servers.len();

    // Work held in flight, as in the seed: creates everywhere, closes on t1's node.
    for i in 0..c.servers.len() {
        c.holds(out, i, json!({"point": "create_dispatcher"}));
    }
    let origin = wait_for("t1's node", 30, || t1_node(c, out, t1));
    c.holds(
        out,
        c.index_of(&origin),
        json!({"point": "close_dispatcher"}),
    );

    // In quick succession, then the kill.
    c.request(out, "merge_table", table_body(t6));
    let to = c.servers[target].addr.clone();
    c.request(
        out,
        "move_table",
        json!({"table_id": t1, "target_node_id": to}),
    );
    up.exec(&format!(
        "CREATE TABLE r.n{k} (id INT PRIMARY KEY, v INT); INSERT INTO r.n{k} VALUES (1, 1), (2, 2); \
         INSERT INTO r.d{k} VALUES (2, 2), (3, 3); DROP TABLE r.d{k}"
    ))
    .expect("create and drop");
    // The move's close waits on t1's node and the new table's create where it was placed.
    wait_for("the move and the create held", 30, || {
        let points = held_points(c, out);
        let both = points.iter().any(|p| p == "close_dispatcher")
            && points.iter().any(|p| p == "create_dispatcher");
        both.then_some(()).ok_or(format!("{points:?}"))
    });
    c.cordon(out, &m, true);
    std::thread::sleep(Duration::from_millis(100 + (k as u64 * 67) % 200));
    c.servers[dead].kill9();
    let killed = Instant::now();
    // The holds end on the nodes that live on (the killed one restarts without them).
    for i in (0..c.servers.len()).filter(|i| *i != dead) {
        c.holds(out, i, json!({"clear": true}));
    }

    let created = wait_for(&format!("r.n{k} known"), 60, || {
        let v = c.spans(out)?;
        v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["table_name"] == format!("r.n{k}")))
            .and_then(|i| i["table_id"].as_u64())
            .ok_or(v.to_string())
    });
    let ids = Ids {
        t6,
        created,
        dropped,
    };
    wait_for(&format!("round {k} converged"), 60, || {
        unconverged(c, out, &m, &ids)
    });
    let took = killed.elapsed();

    c.servers[dead].restart_after_kill();
    c.cordon(out, &m, false);
    c.wait_captures(c.servers.len());
    took
}

#[test]
fn operators_in_flight_across_a_kill_of_the_maintainers_node_converge() {
    let n = rounds();
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    // The storage sink's copy, applied by `sluice consume` at the end.
    let (down2, down2_url) = mariadb_with_user(DOWN_PASS);
    tables(&up, &[&down, &down2], n);
    let mut c = Cluster::start("fo", 3, &up_url, &etcd.url(), CF);
    let scheduler = "enable-table-across-nodes = true\nregion-threshold = 100000\n";
    c.create(&out, &format!("{down_url}/"), scheduler);
    // A second changefeed to storage: its dispatchers are held and killed with the first's.
    let root = c.dirs[0].join("storage-out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true",
        root.display()
    );
    c.create_as(&out, CF_STORAGE, &storage, scheduler);
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 60);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| writes(&up, &stop));
        for k in 0..n {
            let took = round(&mut c, &out, &up, k);
            eprintln!("round {k}: converged {took:?} after the kill");
        }
        stop.store(true, Ordering::Relaxed);
    });
    let target = master_ts(&up);
    wait_checkpoint(&out, &c.live(), CF, target, 120);
    let r = check(&out, &up_url, &down_url, "r.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    // The storage changefeed went through the same kills: never restarted, and its layout
    // replays to the upstream.
    wait_checkpoint(&out, &c.live(), CF_STORAGE, target, 120);
    let v = feed(&out, &c.live(), CF_STORAGE);
    assert!(v["restarts"] == 0 && v["state"] == "normal", "{v}");
    consume_storage(&out, &root, &storage, &down2_url, target);
    let r = check(&out, &up_url, &down2_url, "r.*");
    assert_eq!(r.code, 0, "check (storage): {} {}", r.stdout, r.stderr);
    c.finish(&out);
}
