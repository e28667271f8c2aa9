//! No stale write after a pause, on the binary (issue 12): a node frozen after its write passed
//! the node-side fence check, before anything reached the downstream, is exactly the window a
//! check in the process cannot close. Two `sluice server`s on etcd, MariaDB up and down, the
//! MySQL sink with its downstream fence (the default).
//!
//! The writer of `z.t` is held by the debug hold `mysql_before_send` with a transaction of rows
//! in hand (past the check), then frozen with SIGSTOP beyond its lease. The other node takes
//! the table over and writes newer versions of the same rows. The frozen node wakes, fences
//! itself and rejoins; then the hold is released and the old transaction goes on: the
//! downstream fence refuses it, so the newer versions stay and `sluice check` passes, and the
//! woken node counts the refusal (`sluice_stale_writes_refused_total`). (Without the
//! downstream fence the held statement lands after the successor's and the check fails.)

mod common;

use common::cluster::{of_table, Cluster};
use common::*;
use serde_json::{json, Value};
use sluice_testkit::etcd::Etcd;

const CF: &str = "stale";

fn signal(sig: &str, pid: u32) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid}");
}

/// The hold view of one node, asked of that node.
fn holds_of(url: &str) -> Result<Value, String> {
    let (st, v) = api_raw(url, "GET", "/api/v2/debug/holds", None)?;
    (st == 200).then_some(v.clone()).ok_or(format!("{st} {v}"))
}

fn held_sends(v: &Value) -> u64 {
    v["held"]
        .as_array()
        .and_then(|a| a.iter().find(|h| h["point"] == "mysql_before_send"))
        .and_then(|h| h["transactions"].as_u64())
        .unwrap_or(0)
}

#[test]
fn a_write_frozen_past_the_node_check_never_lands_after_its_successor() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE z; CREATE TABLE z.t (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let c = Cluster::start("stale", 2, &up_url, &etcd.url(), CF);
    c.create(&out, &format!("{down_url}/"), "");
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 60);
    let t = c.table_id(&out, "z.t");
    let span = c.wait_spans(&out, t, 1, 60).remove(0);
    let writer_addr = span["node_id"].as_str().expect("node").to_string();
    let x = c.index_of(&writer_addr);
    let other = c.servers[1 - x].url();
    // The writer takes the next transaction of rows past its fence check and holds it there.
    c.holds(&out, x, json!({"point": "mysql_before_send", "on": true}));
    let rows: Vec<String> = (1..=20).map(|i| format!("({i}, {i})")).collect();
    up.exec(&format!("INSERT INTO z.t VALUES {};", rows.join(", ")))
        .expect("rows");
    wait_for("a transaction held past the check", 60, || {
        let v = holds_of(&c.servers[x].url())?;
        (held_sends(&v) > 0).then_some(()).ok_or(v.to_string())
    });
    let pid = c.servers[x].child.as_ref().map(|ch| ch.id()).expect("pid");
    signal("-STOP", pid);
    // Newer versions of the same rows, written by the node that takes z.t over.
    up.exec("UPDATE z.t SET v = v + 1000;").expect("update");
    wait_for("z.t served by the other node", 120, || {
        let (_, v) = api_raw(
            &other,
            "GET",
            &format!("/api/v2/changefeeds/{CF}/spans"),
            None,
        )?;
        let moved = of_table(&v, t)
            .iter()
            .all(|i| i["node_id"] != writer_addr.as_str() && i["state"] == "replicating");
        (moved && !of_table(&v, t).is_empty())
            .then_some(())
            .ok_or(v.to_string())
    });
    wait_checkpoint(&out, &other, CF, master_ts(&up), 120);
    let newer = "SELECT COUNT(*) FROM z.t WHERE v > 1000";
    assert_eq!(down.query_one(newer).expect("count"), "20");
    // The frozen node wakes, fences itself and rejoins, its transaction still held.
    signal("-CONT", pid);
    wait_for("the woken node back in the cluster", 60, || {
        let (_, v) = api_raw(&other, "GET", "/api/v2/captures", None)?;
        let back = v["items"]
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["id"] == writer_addr.as_str()));
        let held = held_sends(&holds_of(&c.servers[x].url())?);
        (back && held > 0)
            .then_some(())
            .ok_or(format!("back={back} held={held} {v}"))
    });
    // The old transaction goes on now, and must not land.
    c.holds(&out, x, json!({"point": "mysql_before_send", "on": false}));
    wait_for("the held transaction to end", 60, || {
        let v = holds_of(&c.servers[x].url())?;
        (held_sends(&v) == 0).then_some(()).ok_or(v.to_string())
    });
    wait_checkpoint(&out, &other, CF, master_ts(&up), 60);
    assert_eq!(
        down.query_one(newer).expect("count"),
        "20",
        "an older version landed over the successor's"
    );
    let r = check(&out, &up_url, &down_url, "z.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    // The woken node says it was refused.
    wait_for("the refusal counted on the woken node", 30, || {
        let n = stale_refused(&c.servers[x].url())?;
        (n >= 1).then_some(()).ok_or(format!("refused {n}"))
    });
    c.finish(&out);
}

/// The node's `sluice_stale_writes_refused_total`.
fn stale_refused(url: &str) -> Result<u64, String> {
    let (_, v) = api_raw(url, "GET", "/metrics", None)?;
    let text = v.as_str().ok_or(v.to_string())?;
    text.lines()
        .find(|l| l.starts_with("sluice_stale_writes_refused_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.trim().parse().ok())
        .ok_or("no sluice_stale_writes_refused_total in /metrics".to_string())
}
