//! A transaction larger than one delivery (1024 rows) and than a dispatcher's buffer (4096 items)
//! followed by a DDL of the same table: every row arrives downstream, the DDL after them, and
//! the checkpoint passes both. (A transaction over the buffer bound used to be cut, dropped and
//! fetched again for ever, while the changefeed read `normal`.)

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
