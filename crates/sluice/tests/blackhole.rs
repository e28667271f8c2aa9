//! A changefeed that catches up on rows already in the binlog when it is created reaches its
//! target checkpoint, on the blackhole sink (the benchmark baseline) as on every other: the
//! dispatcher asks its sink for a flush only at a DDL, so each sink must raise its acks on its
//! own (a blackhole that never did stopped at the changefeed's start, reading `normal`).

mod common;
use common::*;

#[test]
fn a_catch_up_to_blackhole_reaches_the_end_of_the_binlog() {
    let out = Outputs::default();
    let dir = tmpdir("blackhole");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec("CREATE DATABASE b; CREATE TABLE b.t (id INT PRIMARY KEY, v VARCHAR(32))")
        .expect("schema");
    let server = Server::start(&dir, &up_url);
    let start = up.query("SHOW MASTER STATUS").expect("position");
    let start = format!("{}:{}", start[0][0], start[0][1]);
    for r in 0..20 {
        let values: Vec<String> = (0..100)
            .map(|i| format!("({}, 'v')", r * 100 + i))
            .collect();
        up.exec(&format!("INSERT INTO b.t VALUES {}", values.join(",")))
            .expect("rows");
    }
    let target = master_ts(&up);
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &server.url(),
            "changefeed",
            "create",
            "-c",
            "hole",
            "--start-position",
            &start,
            "--sink-uri",
            "blackhole://",
        ],
    );
    assert_eq!(r.code, 0, "create: {} {}", r.stdout, r.stderr);
    wait_checkpoint(&out, &server.url(), "hole", target, 60);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
