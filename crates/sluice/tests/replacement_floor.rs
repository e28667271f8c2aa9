//! A dispatcher that takes over a span never starts below a DDL of its table the downstream
//! already applied (issue 9, the soak's seed 7681, on real processes): two `sluice server` nodes
//! on etcd replicate a real MariaDB to another. The node serving `r.t` holds its sink
//! acknowledgements (`sink_flush`), so its checkpoint stays put while its writes land: a row
//! update, a non-blocking `ALTER TABLE ... ADD COLUMN` (recorded finished in
//! `sluice_sink.ddl_ts`) and a newer update of the same row. The table is then moved to the other
//! node, whose acknowledgements are held too. Its new dispatcher reads the downstream's record
//! and starts just below the recorded `ALTER`, so the older update is never written again over
//! the newer one (starting at the moved span's checkpoint, its replay would write it first and a
//! crash in that window would leave it, as the next bootstrap starts the table at the `ALTER`).
//! Once the holds are cleared, `sluice check` compares the databases.

mod common;
use common::cluster::{of_table, Cluster};
use common::*;
use serde_json::{json, Value};
use sluice_testkit::etcd::Etcd;

const CF: &str = "rf";

/// The working span dispatcher of table `t`: (node, checkpoint).
fn dispatcher_of(c: &Cluster, out: &Outputs, t: u64) -> Result<(String, u64), String> {
    let v = c.dispatchers(out)?;
    let items: Vec<Value> = of_table(&v, t)
        .into_iter()
        .filter(|d| d["is_trigger"] == false)
        .collect();
    match items.as_slice() {
        [d] if d["state"] == "working" => Ok((
            d["node_id"].as_str().unwrap_or_default().to_string(),
            d["checkpoint_ts"].as_u64().unwrap_or(0),
        )),
        _ => Err(v.to_string()),
    }
}

#[test]
fn a_moved_table_starts_below_its_recorded_ddl_not_at_the_old_checkpoint() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let sql = "CREATE DATABASE r; CREATE TABLE r.t (id INT PRIMARY KEY, v INT); \
               INSERT INTO r.t VALUES (1, 1), (2, 2)";
    up.exec(sql).expect("upstream");
    down.exec(sql).expect("downstream");
    let c = Cluster::start("rf", 2, &up_url, &etcd.url(), CF);
    c.create(&out, &format!("{down_url}/"), "balance = false\n");
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 60);
    let t = c.table_id(&out, "r.t");
    let (node, before) = wait_for("r.t's dispatcher", 30, || dispatcher_of(&c, &out, t));
    let here = c.servers.iter().position(|s| s.addr == node);
    let here = here.unwrap_or_else(|| panic!("no server runs node {node}"));
    let there = 1 - here;

    // The serving node's writes land downstream, their acknowledgements wait.
    c.holds(&out, here, json!({"point": "sink_flush"}));
    up.exec(
        "UPDATE r.t SET v = 10 WHERE id = 1; ALTER TABLE r.t ADD COLUMN c INT; \
         UPDATE r.t SET v = 20, c = 20 WHERE id = 1",
    )
    .expect("upstream changes");
    wait_for("the newer update downstream", 60, || {
        let v = down.query_one("SELECT CONCAT(v, ',', IFNULL(c, 'null')) FROM r.t WHERE id = 1");
        match v {
            Ok(s) if s == "20,20" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let alter: u64 = down
        .query_one(&format!(
            "SELECT MAX(commit_ts) FROM sluice_sink.ddl_ts WHERE changefeed = '{CF}' AND finished = 1 \
             AND query LIKE '%ADD COLUMN%'"
        ))
        .expect("the ALTER's record")
        .parse()
        .expect("a commit ts");
    let (_, held) = dispatcher_of(&c, &out, t).expect("still working");
    assert!(
        held < alter && held >= before,
        "with acknowledgements held the checkpoint stays below the ALTER ({held} vs {alter})"
    );

    // The destination holds its acknowledgements too: only the floor can raise the new start.
    c.holds(&out, there, json!({"point": "sink_flush"}));
    let to = c.servers[there].addr.clone();
    c.request(
        &out,
        "move_table",
        json!({"table_id": t, "target_node_id": to}),
    );
    let moved_to = c.servers[there].addr.clone();
    let start = wait_for("r.t's dispatcher on the destination", 60, || {
        let (n, cp) = dispatcher_of(&c, &out, t)?;
        if n == moved_to {
            Ok(cp)
        } else {
            Err(format!("still on {n}"))
        }
    });
    assert_eq!(
        start,
        alter - 1,
        "the new dispatcher starts just below the recorded ALTER ({alter}), not at the moved \
         span's checkpoint ({held})"
    );
    let v = down
        .query_one("SELECT CONCAT(v, ',', IFNULL(c, 'null')) FROM r.t WHERE id = 1")
        .expect("downstream row");
    assert_eq!(v, "20,20", "the older update was not written again");

    for i in 0..2 {
        c.holds(&out, i, json!({"clear": true}));
    }
    up.exec("INSERT INTO r.t VALUES (3, 3, 3)").expect("more");
    wait_checkpoint(&out, &c.live(), CF, master_ts(&up), 90);
    let r = check(&out, &up_url, &down_url, "r.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    c.finish(&out);
}
