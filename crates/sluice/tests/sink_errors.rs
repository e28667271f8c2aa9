//! A MySQL sink whose downstream cannot take the rows (a table missing downstream, a column
//! missing downstream): the changefeed must leave `normal` within seconds with the server's
//! message naming the table or column, the server must stay up and log it, the checkpoint must
//! stay below the rows that were not applied, and once the user fixes the downstream and resumes
//! the changefeed, the downstream must end with exactly the upstream rows.
//!
//! Both statement shapes are covered: `worker-count=1` with 40 rows makes one `LOAD DATA LOCAL
//! INFILE` run; the default worker count spreads a few rows over workers as `REPLACE` statements.

mod common;
use common::*;
use sluice_testkit::mariadb::MariaDb;

/// Polls the changefeed until it is not `normal` and its error message contains `needle`;
/// returns the changefeed.
fn wait_error(out: &Outputs, server: &str, id: &str, needle: &str) -> serde_json::Value {
    wait_for(
        &format!("changefeed {id} reporting an error naming {needle}"),
        30,
        || {
            let (s, v) = api_raw(server, "GET", &format!("/api/v2/changefeeds/{id}"), None)?;
            out.add(&v.to_string());
            let msg = v["error"]["message"].as_str().unwrap_or("");
            if s == 200 && v["state"] != "normal" && msg.contains(needle) {
                Ok(v)
            } else {
                Err(format!("status {s}: {v}"))
            }
        },
    )
}

fn rows(db: &MariaDb, table: &str) -> Vec<Vec<String>> {
    db.query(&format!("SELECT * FROM {table} ORDER BY id"))
        .expect("select")
}

/// One scenario: `up_ddl` and `down_ddl` prepare both sides, `write` writes `table` upstream
/// after the changefeed runs, the error must contain `needle`, `fix` repairs the downstream.
struct Scenario<'a> {
    name: &'a str,
    sink_params: &'a str,
    up_ddl: &'a str,
    down_ddl: &'a str,
    write: &'a str,
    needle: &'a str,
    fix: &'a str,
    table: &'a str,
}

fn fails_then_resumes(sc: Scenario<'_>) {
    let Scenario {
        name,
        sink_params,
        up_ddl,
        down_ddl,
        write,
        needle,
        fix,
        table,
    } = sc;
    let out = Outputs::default();
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(up_ddl).expect("upstream ddl");
    down.exec(down_ddl).expect("downstream ddl");
    let mut server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, name, &format!("{down_url}/{sink_params}"));
    // The changefeed runs (its dispatchers are placed and past the start) before the write.
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);
    up.exec(write).expect("upstream write");
    let commit = master_ts(&up);

    let v = wait_error(&out, &s, name, needle);
    eprintln!("reported: {v}");
    let cp = v["checkpoint_ts"].as_u64().expect("checkpoint_ts");
    assert!(
        cp < commit,
        "the checkpoint {cp} passed the unapplied rows at {commit}: {v}"
    );
    // The server is up, did not panic, and logged the error.
    let status = server
        .child
        .as_mut()
        .and_then(|c| c.try_wait().ok())
        .flatten();
    assert!(status.is_none(), "the server exited: {status:?}");
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert!(!log.contains("panicked"), "the server panicked: {log}");
    assert!(
        log.contains(needle),
        "the server log does not name {needle}: {log}"
    );
    // Still held back a little later (nothing acknowledged the rows behind the user's back).
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (_, v) = api(
        &out,
        &s,
        "GET",
        &format!("/api/v2/changefeeds/{name}"),
        None,
    );
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(u64::MAX) < commit,
        "the checkpoint passed the unapplied rows: {v}"
    );
    // (A missing table has no rows either.)
    let there = down
        .query(&format!("SELECT COUNT(*) FROM {table}"))
        .map(|r| r[0][0].clone())
        .unwrap_or_else(|_| "0".into());
    assert_eq!(
        there, "0",
        "rows reached a downstream that could not take them"
    );

    // The user fixes the downstream and resumes.
    down.exec(fix).expect("fix downstream");
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "resume", "-c", name],
    );
    assert_eq!(r.code, 0, "resume: {} {}", r.stdout, r.stderr);
    up.exec(&format!("UPDATE {table} SET v = v + 1 WHERE id = 1"))
        .expect("upstream write after the fix");
    wait_checkpoint(&out, &s, name, master_ts(&up), 120);
    assert_eq!(
        rows(&down, table),
        rows(&up, table),
        "the downstream does not hold exactly the upstream rows"
    );
    let r = check(&out, &up_url, &down_url, table);
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    let (_, v) = api(
        &out,
        &s,
        "GET",
        &format!("/api/v2/changefeeds/{name}"),
        None,
    );
    assert_eq!(v["state"], "normal", "{v}");
    out.assert_no_secret(&[&server.log]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_downstream_table_is_reported_then_resumed() {
    let inserts: Vec<String> = (1..=40).map(|i| format!("({i}, {})", i * 10)).collect();
    fails_then_resumes(Scenario {
        name: "gone",
        sink_params: "?worker-count=1",
        up_ddl: "CREATE DATABASE m; CREATE TABLE m.gone (id INT PRIMARY KEY, v INT);",
        down_ddl: "CREATE DATABASE m;",
        write: &format!("INSERT INTO m.gone VALUES {};", inserts.join(",")),
        needle: "gone",
        fix: "CREATE TABLE m.gone (id INT PRIMARY KEY, v INT);",
        table: "m.gone",
    });
}

#[test]
fn missing_downstream_column_is_reported_then_resumed() {
    fails_then_resumes(Scenario {
        name: "narrow",
        sink_params: "",
        up_ddl: "CREATE DATABASE m; CREATE TABLE m.narrow (id INT PRIMARY KEY, v INT, wide_note VARCHAR(16));",
        down_ddl: "CREATE DATABASE m; CREATE TABLE m.narrow (id INT PRIMARY KEY, v INT);",
        write: "INSERT INTO m.narrow VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, NULL);",
        needle: "wide_note",
        fix: "ALTER TABLE m.narrow ADD COLUMN wide_note VARCHAR(16);",
        table: "m.narrow",
    });
}

/// A downstream that is down: every attempt fails with a retryable error. The sink retries
/// inside (`max-retries`, with backoff), then the dispatcher restarts alone from its checkpoint;
/// after 10 such failures in a row without progress the changefeed reports it (never a silent
/// stall). Once the downstream is back and the changefeed resumed, it catches up.
#[test]
fn persistent_retryable_errors_are_reported_after_bounded_retries() {
    let out = Outputs::default();
    let name = "downstream-down";
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (mut down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE m; CREATE TABLE m.t (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("upstream ddl");
    down.exec(ddl).expect("downstream ddl");
    let mut server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(
        &out,
        &s,
        name,
        &format!("{down_url}/?max-retries=1&retry-backoff=50ms"),
    );
    // The sink is open and in use (a row went through) before the downstream dies, so the rows
    // below fail where they are applied (the sink's periodic flush), not where it opens.
    up.exec("INSERT INTO m.t VALUES (0, 0);")
        .expect("upstream write");
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);
    down.stop(false).expect("kill the downstream");
    up.exec("INSERT INTO m.t VALUES (1, 10), (2, 20), (3, 30);")
        .expect("upstream write");
    let commit = master_ts(&up);

    let v = wait_error(&out, &s, name, "times in a row without progress");
    eprintln!("reported: {v}");
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(u64::MAX) < commit,
        "the checkpoint passed the unapplied rows: {v}"
    );
    let status = server
        .child
        .as_mut()
        .and_then(|c| c.try_wait().ok())
        .flatten();
    assert!(status.is_none(), "the server exited: {status:?}");
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert!(!log.contains("panicked"), "the server panicked: {log}");
    assert!(
        log.contains("sink error"),
        "the retries are not logged: {log}"
    );

    down.start_again().expect("downstream back");
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "resume", "-c", name],
    );
    assert_eq!(r.code, 0, "resume: {} {}", r.stdout, r.stderr);
    wait_checkpoint(&out, &s, name, commit, 120);
    assert_eq!(
        rows(&down, "m.t"),
        rows(&up, "m.t"),
        "the downstream does not hold exactly the upstream rows"
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
