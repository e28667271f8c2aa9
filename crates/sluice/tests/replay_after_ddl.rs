//! A restart whose checkpoint is below a DDL the downstream already applied (issue 9,
//! reproductions 1 and 2). One table's apply is held back by a downstream row lock, so the
//! changefeed checkpoint stays below a `TRUNCATE` or `DROP TABLE` of another table that the
//! MySQL sink has already run and recorded in `sluice_sink.ddl_ts`. Then the server is killed,
//! the lock ends and the server starts again: the replay must not bring the truncated rows
//! back, must not write into the dropped table, and must not restart the changefeed.

mod common;
use common::*;
use sluice_testkit::mariadb::MariaDb;

const SCHEMA: &str = "CREATE DATABASE r;
    CREATE TABLE r.hold (id INT PRIMARY KEY, v INT);
    CREATE TABLE r.tt (id INT PRIMARY KEY, v INT);
    CREATE TABLE r.t5 (id INT PRIMARY KEY, v INT);
    CREATE TABLE r.p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)
        (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN MAXVALUE);
    CREATE DATABASE q;
    CREATE TABLE q.x (id INT PRIMARY KEY, v INT);
    INSERT INTO r.hold VALUES (1, 0);";

/// The statement the downstream lock session sleeps in (found and killed by its text).
const LOCK_SLEEP: &str = "SELECT SLEEP(600)";

/// Holds `r.hold` row 1 downstream from another session until [`release_lock`].
fn hold_lock(down: &MariaDb) -> std::process::Child {
    let sql = format!("BEGIN; SELECT * FROM r.hold WHERE id = 1 FOR UPDATE; {LOCK_SLEEP}; COMMIT;");
    // Ends with an error when its connection is killed: that is how the lock is released.
    let session = down.spawn_session(&sql).expect("lock session");
    wait_for("the downstream lock", 30, || {
        lock_session(down).ok_or_else(|| "not yet".to_string())
    });
    session
}

fn lock_session(down: &MariaDb) -> Option<String> {
    down.query_one(&format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO = '{LOCK_SLEEP}'"
    ))
    .ok()
}

fn release_lock(down: &MariaDb) {
    if let Some(id) = lock_session(down) {
        down.exec(&format!("KILL {id}"))
            .expect("kill the lock session");
    }
}

fn ddl_finished(down: &MariaDb, query_part: &str) -> Result<u64, String> {
    down.query_one(&format!(
        "SELECT commit_ts FROM sluice_sink.ddl_ts WHERE finished = 1 AND query LIKE '%{query_part}%'"
    ))
    .map_err(|e| e.to_string())?
    .parse()
    .map_err(|e| format!("{e}"))
}

fn changefeed(out: &Outputs, s: &str) -> serde_json::Value {
    api(out, s, "GET", "/api/v2/changefeeds/r", None).1
}

/// Runs `ddl_script` upstream while `r.hold`'s apply waits on the downstream lock, waits until
/// the downstream applied the DDL (`done` true) with the checkpoint still below it, kills the
/// server, ends the lock, restarts, and checks the downstream equals the upstream.
fn replay_across(name: &str, ddl_script: &str, ddl_word: &str, done: impl Fn(&MariaDb) -> bool) {
    let out = Outputs::default();
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(SCHEMA).expect("upstream schema");
    down.exec(SCHEMA).expect("downstream schema");
    let mut server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, "r", &down_url);
    wait_checkpoint(&out, &s, "r", master_ts(&up), 60);

    let mut lock = hold_lock(&down);
    up.exec("UPDATE r.hold SET v = v + 1 WHERE id = 1")
        .expect("held update");
    up.exec(ddl_script).expect("the DDL script");
    let ddl_ts = wait_for("the DDL applied downstream", 60, || {
        let ts = ddl_finished(&down, ddl_word)?;
        if done(&down) {
            Ok(ts)
        } else {
            let tt = down
                .query("SELECT * FROM r.tt")
                .map_err(|e| e.to_string())?;
            let spans = api_raw(&s, "GET", "/api/v2/changefeeds/r/spans", None)?;
            Err(format!(
                "the downstream does not show it yet: r.tt {tt:?}; spans {spans:?}"
            ))
        }
    });
    let cp = changefeed(&out, &s)["checkpoint_ts"].as_u64().unwrap_or(0);
    assert!(
        cp < ddl_ts,
        "precondition: the checkpoint {cp} must still be below the applied DDL at {ddl_ts}"
    );

    server.kill9();
    release_lock(&down);
    let _ = lock.wait();
    server.restart_after_kill();
    wait_checkpoint(&out, &s, "r", master_ts(&up), 90);

    let v = changefeed(&out, &s);
    assert_eq!(v["state"], "normal", "{v}");
    assert_eq!(v["restarts"], 0, "no whole-changefeed restart: {v}");
    assert_eq!(
        down.query_one("SELECT v FROM r.hold WHERE id = 1")
            .expect("hold"),
        "1"
    );
    let r = check(&out, &up_url, &down_url, "r.*,q.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}

fn exists(down: &MariaDb, db: &str, table: &str) -> bool {
    down.query_one(&format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = '{table}'"
    ))
    .ok()
    .as_deref()
        == Some("1")
}

fn ids(down: &MariaDb, table: &str) -> String {
    down.query_one(&format!(
        "SELECT IFNULL(GROUP_CONCAT(id ORDER BY id), '') FROM {table}"
    ))
    .unwrap_or_default()
}

fn columns(down: &MariaDb, table: &str) -> String {
    down.query_one(&format!(
        "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS \
         WHERE CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) = '{table}'"
    ))
    .unwrap_or_default()
}

#[test]
fn a_replayed_truncate_does_not_bring_rows_back() {
    replay_across(
        "replay-truncate",
        "INSERT INTO r.tt VALUES (1, 1), (2, 2), (3, 3); TRUNCATE TABLE r.tt; INSERT INTO r.tt VALUES (9, 9);",
        "TRUNCATE",
        |down| ids(down, "r.tt") == "9",
    );
}

#[test]
fn a_replayed_drop_table_neither_writes_into_it_nor_restarts_the_changefeed() {
    replay_across(
        "replay-drop",
        "INSERT INTO r.t5 VALUES (1, 1), (2, 2); DROP TABLE r.t5; INSERT INTO r.tt VALUES (7, 7);",
        "DROP TABLE",
        |down| !exists(down, "r", "t5") && ids(down, "r.tt") == "7",
    );
}

#[test]
fn a_replayed_drop_column_writes_no_row_of_the_old_shape() {
    replay_across(
        "replay-drop-column",
        "INSERT INTO r.tt VALUES (1, 1); ALTER TABLE r.tt DROP COLUMN v; INSERT INTO r.tt VALUES (2);",
        "DROP COLUMN",
        |down| columns(down, "r.tt") == "id" && ids(down, "r.tt") == "1,2",
    );
}

#[test]
fn a_replayed_change_column_writes_no_row_under_the_old_name() {
    replay_across(
        "replay-change-column",
        "INSERT INTO r.tt VALUES (1, 1); ALTER TABLE r.tt CHANGE v w BIGINT; INSERT INTO r.tt VALUES (2, 2);",
        "CHANGE",
        |down| columns(down, "r.tt") == "id,w" && ids(down, "r.tt") == "1,2",
    );
}

#[test]
fn a_replayed_rename_table_writes_nothing_under_the_old_name() {
    replay_across(
        "replay-rename",
        "INSERT INTO r.tt VALUES (1, 1); RENAME TABLE r.tt TO r.tt2; INSERT INTO r.tt2 VALUES (2, 2);",
        "RENAME TABLE",
        |down| !exists(down, "r", "tt") && ids(down, "r.tt2") == "1,2",
    );
}

#[test]
fn a_replayed_drop_database_writes_nothing_into_it() {
    replay_across(
        "replay-drop-database",
        "INSERT INTO q.x VALUES (1, 1), (2, 2); DROP DATABASE q; INSERT INTO r.tt VALUES (5, 5);",
        "DROP DATABASE",
        |down| !exists(down, "q", "x") && ids(down, "r.tt") == "5",
    );
}

#[test]
fn a_replayed_truncate_partition_does_not_bring_its_rows_back() {
    replay_across(
        "replay-truncate-partition",
        "INSERT INTO r.p VALUES (1, 1), (200, 2); ALTER TABLE r.p TRUNCATE PARTITION p0; INSERT INTO r.p VALUES (3, 3);",
        "TRUNCATE PARTITION",
        |down| ids(down, "r.p") == "3,200",
    );
}

#[test]
fn a_replayed_create_table_like_gets_its_source_as_it_was() {
    replay_across(
        "replay-create-like",
        "INSERT INTO r.tt VALUES (1, 1); ALTER TABLE r.tt ADD COLUMN x INT; CREATE TABLE r.l LIKE r.tt; \
         INSERT INTO r.l VALUES (1, 1, 1); INSERT INTO r.tt VALUES (2, 2, 2);",
        "LIKE",
        |down| columns(down, "r.l") == "id,v,x" && ids(down, "r.l") == "1" && ids(down, "r.tt") == "1,2",
    );
}

/// A changefeed created with the id of an earlier one, from a start point before a DDL the
/// earlier one applied: the earlier one's record (planted here as it would be left) is not the
/// new one's progress. Taken for it, the new run would skip the table's rows and the DDL.
#[test]
fn a_new_changefeed_does_not_take_a_predecessors_record_for_its_own() {
    let out = Outputs::default();
    let dir = tmpdir("replay-recreated");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(SCHEMA).expect("upstream schema");
    down.exec(SCHEMA).expect("downstream schema");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    let start = master_ts(&up);
    up.exec("INSERT INTO r.tt VALUES (1, 1)").expect("insert");
    up.exec("ALTER TABLE r.tt DROP COLUMN v").expect("alter");
    let ddl_ts = master_ts(&up);
    up.exec("INSERT INTO r.tt VALUES (2)")
        .expect("insert after");
    // What an earlier changefeed `r` that applied the DDL leaves behind.
    down.exec(&format!(
        "CREATE DATABASE IF NOT EXISTS sluice_sink; CREATE TABLE IF NOT EXISTS sluice_sink.ddl_ts \
         (changefeed VARCHAR(255) NOT NULL, commit_ts BIGINT UNSIGNED NOT NULL, finished TINYINT NOT NULL, \
         query TEXT, PRIMARY KEY (changefeed, commit_ts)); \
         INSERT INTO sluice_sink.ddl_ts VALUES ('r', {ddl_ts}, 1, 'ALTER TABLE r.tt DROP COLUMN v')"
    ))
    .expect("plant the record");
    let start = start.to_string();
    let args = [
        "cli",
        "--server",
        &s,
        "changefeed",
        "create",
        "-c",
        "r",
        "--sink-uri",
        &down_url,
        "--start-ts",
        &start,
    ];
    let r = sluice(&out, &args);
    assert_eq!(r.code, 0, "create: {} {}", r.stdout, r.stderr);
    wait_for("the new run applied everything", 60, || {
        let v = changefeed(&out, &s);
        let (cols, rows) = (columns(&down, "r.tt"), ids(&down, "r.tt"));
        if cols == "id" && rows == "1,2" {
            Ok(())
        } else {
            Err(format!("r.tt columns {cols}, ids {rows}; changefeed {v}"))
        }
    });
    let r = check(&out, &up_url, &down_url, "r.*,q.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}
