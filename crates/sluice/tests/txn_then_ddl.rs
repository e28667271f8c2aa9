//! A transaction larger than one delivery (1024 rows) and than a dispatcher's buffer (4096 items)
//! followed by a DDL of the same table: every row arrives downstream, the DDL after them, and
//! the checkpoint passes both. (A transaction over the buffer bound used to be cut, dropped and
//! fetched again for ever, while the changefeed read `normal`.) Such a transaction goes in parts:
//! while part of it is downstream the checkpoint stays below it, and a `kill -9` in the middle
//! replays it whole.

mod common;
use common::*;

fn large_txn_then_alter(rows: u32) {
    let out = Outputs::default();
    let dir = tmpdir(&format!("txn-ddl-{rows}"));
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE x; CREATE TABLE x.t (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    _down.exec(ddl).expect("ddl");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, "big", &down_url);
    wait_checkpoint(&out, &s, "big", master_ts(&up), 60);
    up.exec(&format!(
        "INSERT INTO x.t SELECT seq, seq FROM x.seq_1_to_{rows}"
    ))
    .expect("one large transaction");
    up.exec("ALTER TABLE x.t ADD COLUMN w INT DEFAULT 7")
        .expect("alter");
    up.exec("INSERT INTO x.t (id, v) VALUES (0, 0)")
        .expect("after");
    wait_checkpoint(&out, &s, "big", master_ts(&up), 120);
    let r = check(&out, &up_url, &down_url, "x.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}

#[test]
fn a_transaction_larger_than_a_delivery_then_a_ddl_of_its_table_all_arrive() {
    large_txn_then_alter(5000);
}

#[test]
fn a_transaction_of_30000_rows_then_a_ddl_of_its_table_all_arrive() {
    large_txn_then_alter(30_000);
}

/// A transaction of 300,000 rows goes to MySQL in parts: whenever only some of its rows are
/// downstream the changefeed's checkpoint is below it (it never lands inside a transaction), and
/// after a `kill -9` in the middle of it and a restart the downstream equals the upstream.
#[test]
fn a_transaction_in_parts_interrupted_by_kill_9_is_replayed_whole() {
    const ROWS: u32 = 300_000;
    let out = Outputs::default();
    let dir = tmpdir("txn-parts-kill");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE x; CREATE TABLE x.t (id INT PRIMARY KEY, v VARCHAR(200));";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let mut server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, "parts", &down_url);
    wait_checkpoint(&out, &s, "parts", master_ts(&up), 60);
    up.exec(&format!(
        "INSERT INTO x.t SELECT seq, REPEAT('v', 100) FROM x.seq_1_to_{ROWS}"
    ))
    .expect("one large transaction");
    let end = master_ts(&up);
    // Watch it arrive: each time some but not all of it is downstream, the checkpoint read
    // just before is below it.
    let downstream = wait_for("part of the transaction downstream", 120, || {
        let (_, v) = api_raw(&s, "GET", "/api/v2/changefeeds/parts", None)?;
        let cp = v["checkpoint_ts"].as_u64().unwrap_or(0);
        let n: u32 = down
            .query_one("SELECT COUNT(*) FROM x.t")
            .map_err(|e| e.to_string())?
            .parse()
            .map_err(|e: std::num::ParseIntError| e.to_string())?;
        assert!(
            n == ROWS || cp < end,
            "checkpoint {cp} passed the transaction at {end} with {n} of its {ROWS} rows downstream"
        );
        if n > 0 && n < ROWS {
            Ok(n)
        } else {
            Err(format!("{n} rows downstream, checkpoint {cp}"))
        }
    });
    assert!(downstream < ROWS);
    server.kill9();
    server.restart_after_kill();
    server.wait_ready();
    wait_checkpoint(&out, &s, "parts", end, 240);
    let r = check(&out, &up_url, &down_url, "x.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}
