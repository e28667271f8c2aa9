//! A consistent initial snapshot on real processes: a changefeed with `snapshot = "initial"`
//! copies the rows its tables hold at its start point, chunk by chunk in consistent reads,
//! while a workload keeps updating, deleting and inserting them, and the downstream ends equal
//! to the upstream (`sluice check`). Bad snapshot settings are refused with a clear error and
//! nothing created.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The tables: an integer key, a composite key with a string, every common column type, and
/// one without a key.
const SCHEMA: &str = "CREATE DATABASE s;
CREATE TABLE s.big (id INT PRIMARY KEY, v VARCHAR(64), n DECIMAL(20,4), t DATETIME(6), ts TIMESTAMP(3) NULL);
CREATE TABLE s.comp (region VARCHAR(16) NOT NULL, seq BIGINT NOT NULL, body TEXT, PRIMARY KEY (region, seq));
CREATE TABLE s.types (id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, f FLOAT, d DOUBLE,
  dd DATE, tm TIME(3), y YEAR, e ENUM('a','b','c'), st SET('x','y','z'), b BIT(10), j JSON, bin VARBINARY(16),
  bl BLOB, ch CHAR(8), u UUID, g POINT NULL);
CREATE TABLE s.nokey (a INT, b VARCHAR(8));";

/// `big` rows in the sysbench-like `s.big`, `rows` in `s.comp`.
fn seed(up: &sluice_testkit::mariadb::MariaDb, big: u32, rows: u32) {
    up.exec(&format!(
        "INSERT INTO s.big SELECT seq, CONCAT('v', seq), seq / 7, '2024-01-02 03:04:05.123456' + INTERVAL seq SECOND, \
         IF(seq % 5 = 0, NULL, '2024-05-06 07:08:09.5' + INTERVAL seq MINUTE) FROM s.seq_1_to_{big};
         INSERT INTO s.comp SELECT CONCAT('r', seq % 13), seq, REPEAT('é', seq % 9) FROM s.seq_1_to_{rows};
         INSERT INTO s.types SELECT seq, CAST(seq % 100 AS SIGNED) - 50, seq % 60000, -CAST(seq AS SIGNED), seq / 3, seq / 7, '2020-02-29' + INTERVAL seq DAY,
           SEC_TO_TIME(seq) + INTERVAL 0.125 SECOND, 1990 + seq % 50, ELT(1 + seq % 3, 'a', 'b', 'c'), 'x,z', seq % 1024,
           JSON_OBJECT('k', seq, 's', 'q\"t'), UNHEX(LPAD(HEX(seq), 8, '0')), REPEAT(CHAR(seq % 256), 3), 'ch', UUID(),
           IF(seq % 2 = 0, POINT(seq, -seq), NULL) FROM s.seq_1_to_2000;
         INSERT INTO s.nokey SELECT seq % 17, 'k' FROM s.seq_1_to_500;",
        big = big,
        rows = rows
    ))
    .expect("seed");
}

/// Updates, deletes and inserts on the copied tables until `stop`. Each round updates about a
/// thousand rows of the big table: a round of ten thousand (every 97th id) kept the upstream's
/// core busy with the workload alone, and on a loaded 2-core machine the debug build's stream of
/// the big table fell further behind for as long as it ran, so the copy (whose chunks wait for
/// the stream to pass their position) could not finish within the test's bound.
fn workload(socket: std::path::PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let mut round = 0u32;
        while !stop.load(Ordering::Relaxed) {
            round += 1;
            let r = round;
            let sql = format!(
                "BEGIN;
                 UPDATE s.big SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 997 = {m997};
                 DELETE FROM s.big WHERE id % 89 = {m} AND id % 5 = 0 AND id < {lim};
                 INSERT INTO s.big VALUES ({new}, 'new', 1.5, NOW(6), NULL) ON DUPLICATE KEY UPDATE v = 'again';
                 UPDATE s.comp SET body = CONCAT(body, 'x') WHERE seq % 101 = {m};
                 DELETE FROM s.comp WHERE region = 'r{m13}' AND seq % 7 = 0 AND seq < {lim};
                 INSERT INTO s.comp VALUES ('zz', {new}, 'late');
                 UPDATE s.types SET d = d + 1, e = 'c', st = 'y' WHERE id % 53 = {m};
                 COMMIT;",
                m = r % 89,
                m997 = r % 997,
                m13 = r % 13,
                lim = r * 400,
                new = 1_000_000 + r
            );
            let ok = exec_on_socket(&socket, &sql);
            assert!(ok, "workload round {r}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        round
    })
}

#[test]
fn an_initial_snapshot_under_a_concurrent_workload_ends_equal_to_the_upstream() {
    // A million rows in the sysbench-like table, copied in chunks of the default size.
    snapshot_under_workload("snapshot", 1_000_000, None);
}

/// The same copy as window reads (DBLog's watermarks), as on an upstream that names no position
/// for its consistent reads (MySQL): each chunk's position is the binlog's end after its read,
/// and the rows of keys the workload changed in between come from the stream.
#[test]
fn a_snapshot_of_window_reads_under_a_concurrent_workload_ends_equal_to_the_upstream() {
    let log = snapshot_under_workload(
        "snapshot-window",
        200_000,
        Some("snapshot-read = \"window\"\nlog-level = \"debug\"\n"),
    );
    assert!(
        log.contains("snapshot chunk read") && log.contains("window=true"),
        "the chunks were window reads"
    );
    assert!(
        !log.contains("window=false"),
        "no chunk read at a named position"
    );
}

/// `big` rows copied with `snapshot = "initial"` while the workload runs; the server started
/// with the config `server_toml`, if any. Returns the server's log.
fn snapshot_under_workload(name: &str, big: u64, server_toml: Option<&str>) -> String {
    let out = Outputs::default();
    let dir = tmpdir(name);
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(SCHEMA).expect("schema up");
    down.exec(SCHEMA).expect("schema down");
    seed(&up, big as u32, 60_000);
    let extra = server_toml.map(|t| {
        let path = dir.join("server.toml");
        std::fs::write(&path, t).expect("server toml");
        path.to_string_lossy().to_string()
    });
    let args: Vec<&str> = match &extra {
        Some(p) => vec!["--config", p.as_str()],
        None => vec![],
    };
    let server = Server::start_with(&dir, &up_url, &args);
    let s = server.url();
    let stop = Arc::new(AtomicBool::new(false));
    let load = workload(up.socket(), stop.clone());
    let sink = format!("{down_url}/?force-replicate=true");
    create_changefeed_with(
        &out,
        &s,
        "snap",
        &sink,
        Some((&dir, "snapshot = \"initial\"\n")),
        &[],
    );
    // The copy reports itself while it runs, and finishes.
    let mut saw_copying = false;
    wait_for("the snapshot to finish", 600, || {
        let v = feed(&out, &s, "snap");
        saw_copying |= v["snapshot"]["state"] == "copying";
        (v["snapshot"]["state"] == "finished")
            .then_some(())
            .ok_or(v.to_string())
    });
    stop.store(true, Ordering::Relaxed);
    let rounds = load.join().expect("workload");
    // Each round is a `mariadb` client process: on a loaded 2-core machine one can take a few
    // hundred ms, and the 200k-row copy lasts a few seconds: under load a run counted exactly
    // 10 rounds and failed the earlier bound of more than 10.
    assert!(
        rounds >= 3,
        "the workload ran during the copy ({rounds} rounds)"
    );
    assert!(saw_copying, "the changefeed showed the copy under way");
    wait_checkpoint(&out, &s, "snap", master_ts(&up), 120);
    let v = feed(&out, &s, "snap");
    assert_eq!(v["state"], "normal", "{v}");
    assert!(
        v["snapshot"]["rows_copied"].as_u64().unwrap_or(0) >= big,
        "rows copied reported: {v}"
    );
    let r = check(&out, &up_url, &down_url, "s.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    // The keyless table: one consistent read, no stream rows doubled before it.
    assert_eq!(
        down.query_one("SELECT COUNT(*) FROM s.nokey")
            .expect("count"),
        "500"
    );
    drop(server);
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}

#[test]
fn bad_snapshot_settings_are_refused_and_nothing_is_created() {
    let out = Outputs::default();
    let dir = tmpdir("snapshot-bad");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec("CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY)")
        .expect("ddl");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    let create = |args: &[&str]| {
        let mut a = vec![
            "cli",
            "--server",
            &s,
            "changefeed",
            "create",
            "-c",
            "bad",
            "--sink-uri",
        ];
        a.extend_from_slice(args);
        sluice(&out, &a)
    };
    let r = create(&[&down_url, "--snapshot", "sometimes"]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("unknown snapshot mode") && r.stderr.contains("initial"),
        "names the values: {}",
        r.stderr
    );
    let unsafe_sink = format!("{down_url}/?safe-mode=false");
    let r = create(&[&unsafe_sink, "--snapshot", "initial"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("safe mode"), "{}", r.stderr);
    let config = dir.join("cf.toml");
    std::fs::write(&config, "snapshot-chunk-rows = 0\n").expect("toml");
    let r = create(&[&down_url, "--config", config.to_str().unwrap_or_default()]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("snapshot-chunk-rows"), "{}", r.stderr);
    let (_, list) = api(&out, &s, "GET", "/api/v2/changefeeds", None);
    assert_eq!(
        list["total"].as_u64().unwrap_or(0),
        0,
        "nothing was created: {list}"
    );
}

#[test]
fn a_snapshot_of_an_idle_upstream_resumes_after_kill_9_and_finishes() {
    let out = Outputs::default();
    let dir = tmpdir("snapshot-kill");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY, v VARCHAR(32));";
    up.exec(ddl).expect("ddl up");
    down.exec(ddl).expect("ddl down");
    // Enough rows that the copy (chunks of 100) is still under way when the test kills it.
    const ROWS: u64 = 400_000;
    up.exec(&format!(
        "INSERT INTO s.t SELECT seq, CONCAT('row-', seq) FROM s.seq_1_to_{ROWS}"
    ))
    .expect("seed");
    let mut server = Server::start(&dir, &up_url);
    let s = server.url();
    // 4000 chunks of 100 rows with nothing else written upstream: far more chunks than fit after
    // one position, so the server moves the position with its heartbeat row.
    create_changefeed_with(
        &out,
        &s,
        "idle",
        &down_url,
        Some((&dir, "snapshot = \"initial\"\nsnapshot-chunk-rows = 100\n")),
        &[],
    );
    wait_for("a third of the copy", 120, || {
        let n: u64 = down
            .query_one("SELECT COUNT(*) FROM s.t")
            .map_err(|e| e.to_string())?
            .parse()
            .unwrap_or(0);
        (n >= ROWS / 3).then_some(()).ok_or(format!("{n} rows"))
    });
    // The copy shows where users look: the span's state, the metrics, and the progress line
    // with the rows left by the upstream's statistics.
    let (_, spans) = api(&out, &s, "GET", "/api/v2/changefeeds/idle/spans", None);
    let v = feed(&out, &s, "idle");
    let query = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "query", "-c", "idle"],
    );
    let (_, m) = api_raw(&s, "GET", "/metrics", None).expect("metrics");
    let metrics = m.as_str().unwrap_or("").to_string();
    server.kill9();
    assert!(
        spans["items"].as_array().is_some_and(|i| i.iter().any(
            |sp| sp["state"] == "snapshotting" && sp["snapshot_rows"].as_u64().unwrap_or(0) > 0
        )),
        "a span snapshotting with its rows: {spans}"
    );
    assert!(
        metrics.contains("sluice_snapshot_rows_copied{changefeed=\"idle\"}")
            && metrics.contains("sluice_snapshot_tables_pending{changefeed=\"idle\"} 1")
            && metrics.contains("sluice_snapshot_rows_left_estimate{changefeed=\"idle\"}"),
        "{metrics}"
    );
    let left = v["snapshot"]["rows_left_estimate"].as_u64();
    assert!(
        left.is_some_and(|l| l < ROWS),
        "rows left by the statistics: {v}"
    );
    assert!(
        query.stdout.contains("snapshot: copying") && query.stdout.contains("rows left"),
        "the progress line: {}",
        query.stdout
    );
    server.restart_after_kill();
    wait_snapshot_finished(&out, &s, "idle", 240);
    let v = feed(&out, &s, "idle");
    // It resumed from the progress kept with the changefeed: the restarted server copied what
    // was left after the last progress the meta store had (a third of the rows were downstream
    // at the kill; the progress kept trails them by the chunks acknowledged in the last few
    // hundred ms, which at this speed is thousands of rows), not the table from its start.
    let again = v["snapshot"]["rows_copied"].as_u64().unwrap_or(0);
    assert!(
        again < ROWS * 9 / 10,
        "copied {again} rows after the restart: {v}"
    );
    // Nothing else wrote upstream: the copy went past one position's chunk slots because the
    // server wrote its heartbeat row.
    assert_eq!(
        up.query_one("SELECT COUNT(*) > 0 FROM sluice.heartbeat")
            .expect("heartbeat table"),
        "1"
    );
    wait_checkpoint(&out, &s, "idle", master_ts(&up), 120);
    let r = check(&out, &up_url, &down_url, "s.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}

#[test]
fn changefeed_snapshot_copies_a_table_lost_downstream_again_while_streaming() {
    let out = Outputs::default();
    let dir = tmpdir("snapshot-again");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY, v INT); CREATE TABLE s.u (id INT PRIMARY KEY);
               CREATE DATABASE other; CREATE TABLE other.x (id INT PRIMARY KEY);";
    up.exec(ddl).expect("ddl up");
    down.exec(ddl).expect("ddl down");
    let seed = "INSERT INTO s.t SELECT seq, seq FROM s.seq_1_to_5000; INSERT INTO s.u VALUES (1);";
    up.exec(seed).expect("seed up");
    down.exec(seed)
        .expect("seed down (by hand, as without a snapshot)");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed_with(
        &out,
        &s,
        "again",
        &down_url,
        Some((&dir, "[filter]\nrules = [\"s.*\"]\n")),
        &[],
    );
    up.exec("UPDATE s.t SET v = v + 1 WHERE id <= 100")
        .expect("update");
    wait_checkpoint(&out, &s, "again", master_ts(&up), 60);
    // The downstream loses the table's rows; the user asks for it to be copied again.
    down.exec("TRUNCATE TABLE s.t").expect("lost downstream");
    let snap = |tables: &str| {
        sluice(
            &out,
            &[
                "cli",
                "--server",
                &s,
                "changefeed",
                "snapshot",
                "-c",
                "again",
                "--tables",
                tables,
            ],
        )
    };
    let r = snap("other.*");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("outside") && r.stderr.contains("other.x"),
        "{}",
        r.stderr
    );
    let r = snap("nope.*");
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("no table"), "{}", r.stderr);
    let r = snap("s.t");
    assert_eq!(r.code, 0, "snapshot: {} {}", r.stdout, r.stderr);
    up.exec("UPDATE s.t SET v = v * 2 WHERE id % 10 = 0; DELETE FROM s.t WHERE id > 4900")
        .expect("writes during the copy");
    wait_snapshot_finished(&out, &s, "again", 120);
    wait_checkpoint(&out, &s, "again", master_ts(&up), 60);
    let r = check(&out, &up_url, &down_url, "s.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    let q = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "query", "-c", "again"],
    );
    assert!(q.stdout.contains("snapshot: finished"), "{}", q.stdout);
}

#[test]
fn a_snapshot_of_a_table_the_user_may_not_read_is_refused_at_create() {
    let out = Outputs::default();
    let dir = tmpdir("snapshot-grant");
    let up = sluice_testkit::mariadb::MariaDb::start().expect("mariadb");
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(&format!(
        "CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY); CREATE TABLE s.secret (id INT PRIMARY KEY);
         CREATE USER 'cdc'@'127.0.0.1' IDENTIFIED BY '{UP_PASS}';
         GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'cdc'@'127.0.0.1';"
    ))
    .expect("users");
    let up_url = format!("mysql://cdc:{UP_PASS}@127.0.0.1:{}", up.port());
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    // Later, the user loses SELECT on one table (the server checked its privileges at start).
    up.exec(
        "REVOKE SELECT ON *.* FROM 'cdc'@'127.0.0.1';
         GRANT SELECT ON s.t TO 'cdc'@'127.0.0.1';
         GRANT INSERT ON s.secret TO 'cdc'@'127.0.0.1';",
    )
    .expect("revoke");
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "changefeed",
            "create",
            "-c",
            "nope",
            "--sink-uri",
            &down_url,
            "--snapshot",
            "initial",
        ],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    // Sluice reads with SELECT on every table (the upstream check names the missing grant; the
    // snapshot's own check names each table it could not read, for upstreams with partial
    // revokes).
    assert!(
        r.stderr.contains("s.secret") || r.stderr.contains("GRANT SELECT ON *.*"),
        "names what is missing and the fix: {}",
        r.stderr
    );
    let (_, list) = api(&out, &s, "GET", "/api/v2/changefeeds", None);
    assert_eq!(
        list["total"].as_u64().unwrap_or(0),
        0,
        "nothing was created: {list}"
    );
    out.assert_no_secret(&[]);
}

#[test]
fn an_initial_only_snapshot_copies_then_stops_and_can_stream_after_an_update() {
    let out = Outputs::default();
    let dir = tmpdir("snapshot-only");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl up");
    down.exec(ddl).expect("ddl down");
    up.exec("INSERT INTO s.t SELECT seq, seq FROM s.seq_1_to_20000")
        .expect("seed");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed_with(
        &out,
        &s,
        "once",
        &down_url,
        None,
        &["--snapshot", "initial-only"],
    );
    wait_snapshot_finished(&out, &s, "once", 120);
    wait_state(&out, &s, "once", "stopped", 60);
    let r = check(&out, &up_url, &down_url, "s.*");
    assert_eq!(r.code, 0, "check after the copy: {} {}", r.stdout, r.stderr);
    // Stopped: later changes wait; streaming them takes `snapshot = "initial"` and a resume.
    up.exec("UPDATE s.t SET v = -v WHERE id <= 10")
        .expect("update");
    pause_update_resume_toml(&out, &s, "once", &dir, "snapshot = \"initial\"\n");
    wait_checkpoint(&out, &s, "once", master_ts(&up), 60);
    wait_state(&out, &s, "once", "normal", 30);
    let r = check(&out, &up_url, &down_url, "s.*");
    assert_eq!(
        r.code, 0,
        "check after streaming: {} {}",
        r.stdout, r.stderr
    );
}

/// `changefeed update --config` with `toml`, then `resume` (the changefeed is stopped).
fn pause_update_resume_toml(out: &Outputs, s: &str, id: &str, dir: &std::path::Path, toml: &str) {
    let path = dir.join(format!("{id}-update.toml"));
    std::fs::write(&path, toml).expect("toml");
    let p = path.to_str().unwrap_or_default();
    let r = sluice(
        out,
        &[
            "cli",
            "--server",
            s,
            "changefeed",
            "update",
            "-c",
            id,
            "--config",
            p,
        ],
    );
    assert_eq!(r.code, 0, "update: {} {}", r.stdout, r.stderr);
    let r = sluice(
        out,
        &["cli", "--server", s, "changefeed", "resume", "-c", id],
    );
    assert_eq!(r.code, 0, "resume: {} {}", r.stdout, r.stderr);
}
