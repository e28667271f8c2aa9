//! Foreign-key cascades never diverge silently: InnoDB deletes (or updates) the child rows of
//! an `ON DELETE CASCADE` / `SET NULL` key without writing them to the binlog, so a parent
//! DELETE stops every child table whose key cascades (the changefeed reads `warning` naming the
//! cascade and the key, the child's checkpoint stays below it), while a `RESTRICT` child, the
//! parent and an unrelated table keep replicating and `sluice check` passes for them. Keys come
//! from the snapshot (tables created before the server) and from DDL (a child created while
//! the changefeed runs). The documented way on (re-copy, `ignore-event = ["unreplicable"]`)
//! lets the children continue.

mod common;
use common::*;

/// Waits until `sql` downstream returns `want`.
fn wait_value(down: &sluice_testkit::mariadb::MariaDb, sql: &str, want: &str, what: &str) {
    wait_for(what, 60, || {
        let got = down.query_one(sql).map_err(|e| e.to_string())?;
        if got == want {
            Ok(())
        } else {
            Err(got)
        }
    });
}

const SNAPSHOT_DDL: &str = "CREATE DATABASE f; \
    CREATE TABLE f.p (id INT PRIMARY KEY, v INT); \
    CREATE TABLE f.c (id INT PRIMARY KEY, pid INT, \
      CONSTRAINT c_parent FOREIGN KEY (pid) REFERENCES f.p (id) ON DELETE CASCADE); \
    CREATE TABLE f.r (id INT PRIMARY KEY, pid INT, \
      FOREIGN KEY (pid) REFERENCES f.p (id) ON DELETE RESTRICT ON UPDATE NO ACTION); \
    CREATE TABLE f.o (id INT PRIMARY KEY, v INT);";

#[test]
fn a_cascading_parent_delete_stops_the_children_not_the_others() {
    let name = "fk";
    let out = Outputs::default();
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(SNAPSHOT_DDL).expect("ddl");
    down.exec(SNAPSHOT_DDL).expect("ddl");
    up.exec("INSERT INTO f.p VALUES (1, 1), (2, 2), (3, 3); INSERT INTO f.c VALUES (1, 1), (2, 2); INSERT INTO f.r VALUES (1, 3)")
        .expect("rows");
    down.exec("INSERT INTO f.p VALUES (1, 1), (2, 2), (3, 3); INSERT INTO f.c VALUES (1, 1), (2, 2); INSERT INTO f.r VALUES (1, 3)")
        .expect("rows");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, name, &down_url);
    // A child whose key the history learns from the DDL (ON DELETE SET NULL).
    up.exec("CREATE TABLE f.n (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES f.p (id) ON DELETE SET NULL); INSERT INTO f.n VALUES (1, 2)")
        .expect("ddl child");
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);
    assert_eq!(
        down.query_one("SELECT pid FROM f.n WHERE id = 1")
            .expect("n"),
        "2"
    );

    // An UPDATE of a column no key references cascades nowhere: every table goes on.
    up.exec("UPDATE f.p SET v = 30 WHERE id = 3")
        .expect("update");
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);
    assert_eq!(feed(&out, &s, name)["state"], "normal");

    // The parent DELETE: upstream, InnoDB deletes f.c's row 1 outside the binlog.
    up.exec("DELETE FROM f.p WHERE id = 1")
        .expect("parent delete");
    let stop = master_ts(&up);
    assert_eq!(up.query_one("SELECT COUNT(*) FROM f.c").expect("c"), "1");
    up.exec("INSERT INTO f.o VALUES (1, 1); INSERT INTO f.r VALUES (2, 3); INSERT INTO f.c VALUES (3, 2); UPDATE f.p SET v = 20 WHERE id = 2")
        .expect("after");
    let v = wait_for("the children to stop with a warning", 60, || {
        let v = feed(&out, &s, name);
        let msg = v["error"]["message"].as_str().unwrap_or("").to_string();
        let named = [
            "foreign-key cascade",
            "f.c",
            "c_parent",
            "ON DELETE CASCADE",
            "ignore-event",
        ]
        .iter()
        .all(|n| msg.contains(n));
        if v["state"] == "warning" && named {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    });
    eprintln!("stopped: {v}");
    // The parent, the RESTRICT child and the unrelated table go on, capture included.
    wait_value(
        &down,
        "SELECT COUNT(*) FROM f.o",
        "1",
        "the unrelated table's row",
    );
    wait_value(
        &down,
        "SELECT COUNT(*) FROM f.r",
        "2",
        "the RESTRICT child's row",
    );
    wait_value(
        &down,
        "SELECT v FROM f.p WHERE id = 2",
        "20",
        "the parent's later update",
    );
    assert_eq!(
        down.query_one("SELECT COUNT(*) FROM f.p WHERE id = 1")
            .expect("p"),
        "0"
    );
    let (_, st) = api(&out, &s, "GET", "/api/v2/status", None);
    assert!(st["capture_error"].is_null(), "capture must not stop: {st}");
    // The children hold the changefeed below the parent DELETE and got nothing after it.
    let v = feed(&out, &s, name);
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(u64::MAX) < stop,
        "checkpoint passed the cascade: {v}"
    );
    assert_eq!(
        down.query_one("SELECT COUNT(*) FROM f.c WHERE id = 3")
            .expect("c"),
        "0"
    );
    let msg = v["error"]["message"].as_str().unwrap_or("").to_string();
    assert!(
        msg.contains("f.n") && msg.contains("ON DELETE SET NULL"),
        "{msg}"
    );
    assert!(!msg.contains("f.r") && !msg.contains("f.o"), "{msg}");
    let r = check(&out, &up_url, &down_url, "f.p,f.r,f.o");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    // The child did diverge (that is what the warning is about).
    let r = check(&out, &up_url, &down_url, "f.c");
    assert_ne!(
        r.code, 0,
        "f.c must differ before the re-copy: {}",
        r.stdout
    );

    // The documented way on: re-copy the children, then let them go on.
    down.exec("DELETE FROM f.c WHERE id = 1").expect("re-copy");
    let cfg = dir.join("go-on.toml");
    std::fs::write(&cfg, "[filter]\nignore-event = [\"unreplicable\"]\n").expect("config");
    pause_update_resume(&out, &s, name, &["--config", cfg.to_str().unwrap_or("")]);
    up.exec("INSERT INTO f.c VALUES (4, 3)")
        .expect("after the fix");
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);
    wait_state(&out, &s, name, "normal", 30);
    let r = check(&out, &up_url, &down_url, "f.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}
