//! Changes the binlog does not carry as full rows are never lost silently: a session with
//! `binlog_format=STATEMENT` or `binlog_row_image=MINIMAL` writing a replicated table stops that
//! table (the changefeed reads `warning` naming the setting, its checkpoint stays below the
//! change) while every other table goes on, and capture keeps running. The documented way on
//! (`ignore-event = ["unreplicable"]` after a pause, update, resume) lets the table continue.

mod common;
use common::*;
use serde_json::Value;

/// Waits until the changefeed reads `warning` with a message containing every one of `needles`.
fn wait_warning(out: &Outputs, s: &str, id: &str, what: &str, needles: &[&str]) -> Value {
    wait_for(what, 30, || {
        let v = feed(out, s, id);
        let msg = v["error"]["message"].as_str().unwrap_or("").to_string();
        if v["state"] == "warning" && needles.iter().all(|n| msg.contains(n)) {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
}

/// Waits until `table` downstream holds `n` rows.
fn wait_rows(down: &sluice_testkit::mariadb::MariaDb, table: &str, n: &str, what: &str) {
    wait_for(what, 30, || {
        let got = down
            .query_one(&format!("SELECT COUNT(*) FROM {table}"))
            .map_err(|e| e.to_string())?;
        if got == n {
            Ok(())
        } else {
            Err(got)
        }
    });
}

/// The setting a session changes, and a statement that writes `u.stopped` under it.
fn stops_the_table_then_goes_on(name: &str, session: &str, needle: &str) {
    let out = Outputs::default();
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE u; CREATE TABLE u.stopped (id INT PRIMARY KEY, v INT, w INT); \
               CREATE TABLE u.other (id INT PRIMARY KEY, v INT); INSERT INTO u.stopped VALUES (1, 1, 1);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, name, &down_url);
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);

    up.exec(&format!("{session}; UPDATE u.stopped SET v = v + 1 WHERE id = 1; INSERT INTO u.stopped VALUES (2, 2, 2);"))
        .expect("write under the session setting");
    up.exec("INSERT INTO u.other VALUES (1, 1), (2, 2)")
        .expect("other table");
    let v = wait_warning(
        &out,
        &s,
        name,
        "the table to stop with a warning",
        &[needle, "u.stopped"],
    );
    eprintln!("stopped: {v}");
    // Every other table goes on, capture included.
    wait_rows(&down, "u.other", "2", "the other table's rows downstream");
    let (_, st) = api(&out, &s, "GET", "/api/v2/status", None);
    assert!(st["capture_error"].is_null(), "capture must not stop: {st}");
    // The stopped table's checkpoint holds the changefeed below the unreplicable change.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let v = feed(&out, &s, name);
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(u64::MAX) < master_ts(&up),
        "checkpoint passed the stop: {v}"
    );
    assert_eq!(
        down.query_one("SELECT v FROM u.stopped WHERE id = 1")
            .expect("v"),
        "1",
        "nothing after the stop was written"
    );

    // The user repairs the table by hand and lets it go on.
    down.exec("UPDATE u.stopped SET v = 2 WHERE id = 1; INSERT INTO u.stopped VALUES (2, 2, 2)")
        .expect("manual re-copy");
    let cfg = dir.join("go-on.toml");
    std::fs::write(&cfg, "[filter]\nignore-event = [\"unreplicable\"]\n").expect("config");
    pause_update_resume(&out, &s, name, &["--config", cfg.to_str().unwrap_or("")]);
    up.exec("INSERT INTO u.stopped VALUES (3, 3, 3)")
        .expect("after");
    wait_checkpoint(&out, &s, name, master_ts(&up), 60);
    wait_state(&out, &s, name, "normal", 30);
    let r = check(&out, &up_url, &down_url, "u.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}

#[test]
fn a_statement_format_session_stops_its_table_not_the_others() {
    stops_the_table_then_goes_on(
        "stmt",
        "SET SESSION binlog_format = 'STATEMENT'",
        "binlog_format",
    );
}

#[test]
fn a_minimal_row_image_session_stops_its_table_not_the_others() {
    stops_the_table_then_goes_on(
        "minimal",
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "binlog_row_image",
    );
}

/// A table the MySQL sink refuses as it is (no primary or not-null unique key) stops alone:
/// the changefeed reads `warning` naming the fix, is not restarted, and every other table goes
/// on; with `force-replicate=true` (pause, update, resume) the table replicates too.
#[test]
fn a_table_the_sink_refuses_stops_alone_and_names_the_fix() {
    let out = Outputs::default();
    let dir = tmpdir("refused");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE u; CREATE TABLE u.nokey (a INT, b INT); CREATE TABLE u.other (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, "refused", &down_url);
    wait_checkpoint(&out, &s, "refused", master_ts(&up), 60);
    up.exec("INSERT INTO u.nokey VALUES (1, 1); INSERT INTO u.other VALUES (1, 1)")
        .expect("rows");
    let v = wait_warning(
        &out,
        &s,
        "refused",
        "the keyless table to stop with a warning",
        &["u.nokey", "force-replicate"],
    );
    eprintln!("refused: {v}");
    wait_rows(&down, "u.other", "1", "the other table's row downstream");
    up.exec("INSERT INTO u.other VALUES (2, 2)").expect("more");
    wait_rows(&down, "u.other", "2", "the other table keeps going");
    let v = feed(&out, &s, "refused");
    assert_eq!(
        v["restarts"], 0,
        "one table's refusal must not restart the changefeed: {v}"
    );

    let force = format!("{down_url}/?force-replicate=true");
    pause_update_resume(&out, &s, "refused", &["--sink-uri", &force]);
    wait_checkpoint(&out, &s, "refused", master_ts(&up), 60);
    let r = check(&out, &up_url, &down_url, "u.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}
