//! Every API route and every CLI command of a single-node server, including bad input (unknown
//! changefeed, bad sink URI, unreachable or refusing sink, bad TOML key, purged or too old start
//! point, an upstream without row binlog): a clear error with a stable code, a non-zero exit, and
//! nothing changed. Every output is searched for the test passwords.

mod common;
use common::*;
use serde_json::json;
use sluice_testkit::mariadb::{BinlogMode, MariaDb, Options};

fn feed_ids(out: &Outputs, s: &str) -> Vec<String> {
    let (st, v) = api(out, s, "GET", "/api/v2/changefeeds", None);
    assert_eq!(st, 200, "{v}");
    v["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn routes_commands_and_bad_input() {
    let out = Outputs::default();
    let dir = tmpdir("api");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    // A table that exists before the changefeed starts must exist downstream too.
    _down.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT); INSERT INTO d.t VALUES (1,1),(2,2);").expect("setup");
    up.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT); INSERT INTO d.t VALUES (1,1),(2,2);").expect("setup");
    // Tiny regions, so that a split has boundaries to cut at.
    let server_toml = dir.join("server.toml");
    std::fs::write(&server_toml, "region-size-bytes = 1\n").expect("toml");
    let server = Server::start_with(
        &dir,
        &up_url,
        &["--config", server_toml.to_str().unwrap_or("")],
    );
    let s = server.url();

    // health, status, captures, metrics
    let (st, v) = api(&out, &s, "GET", "/api/v2/health", None);
    assert_eq!((st, v["status"].as_str()), (200, Some("ok")), "{v}");
    let (st, v) = api(&out, &s, "GET", "/api/v2/status", None);
    assert_eq!(st, 200);
    assert_eq!(v["is_owner"], true, "{v}");
    assert!(
        v["upstream"].as_str().unwrap_or("").contains("******"),
        "{v}"
    );
    let (st, v) = api(&out, &s, "GET", "/api/v2/captures", None);
    assert_eq!(st, 200);
    let me = v["items"][0]["id"]
        .as_str()
        .expect("capture id")
        .to_string();
    assert_eq!(v["items"][0]["is_owner"], true);
    assert_eq!(v["items"][0]["cordoned"], false);

    // create through the CLI, with a scheduler section
    let cfg = dir.join("cf.toml");
    std::fs::write(
        &cfg,
        "[scheduler]\nenable-table-across-nodes = true\nregion-threshold = 1\n",
    )
    .expect("toml");
    let sink = format!("{down_url}/");
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "changefeed",
            "create",
            "-c",
            "cf1",
            "--sink-uri",
            &sink,
            "--config",
            cfg.to_str().unwrap_or(""),
        ],
    );
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("cf1") && r.stdout.contains("******"),
        "{}",
        r.stdout
    );
    up.exec("INSERT INTO d.t VALUES (3,3); UPDATE d.t SET v = 10 WHERE id = 1;")
        .expect("write");
    wait_checkpoint(&out, &s, "cf1", master_ts(&up), 60);

    // list / query, table output and json output
    let r = sluice(&out, &["cli", "--server", &s, "changefeed", "list"]);
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.starts_with("ID") && r.stdout.contains("cf1"),
        "{}",
        r.stdout
    );
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "--output",
            "json",
            "changefeed",
            "query",
            "-c",
            "cf1",
        ],
    );
    assert_eq!(r.code, 0);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json output");
    for k in [
        "id",
        "state",
        "checkpoint_ts",
        "checkpoint_time",
        "resolved_ts",
        "maintainer_addr",
        "error",
        "restarts",
    ] {
        assert!(v.get(k).is_some(), "{k} missing in {v}");
    }
    assert_eq!(v["state"], "normal");
    let t = v["checkpoint_time"].as_str().expect("checkpoint_time");
    assert!(
        t.len() == 24 && t.ends_with('Z') && &t[19..20] == ".",
        "RFC 3339 with ms: {t}"
    );

    // tables, spans, dispatchers
    let (st, v) = api(&out, &s, "GET", "/api/v2/changefeeds/cf1/tables", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["items"][0]["node_id"].as_str(), Some(me.as_str()), "{v}");
    let table_id = v["items"][0]["table_ids"][0].as_u64().expect("a table id");
    let (st, v) = api(&out, &s, "GET", "/api/v2/changefeeds/cf1/spans", None);
    assert_eq!(st, 200);
    assert_eq!(v["items"][0]["table_name"], "d.t", "{v}");
    let (st, v) = api(&out, &s, "GET", "/api/v2/changefeeds/cf1/dispatchers", None);
    assert_eq!(st, 200);
    let ds = v["items"].as_array().expect("dispatchers");
    assert_eq!(
        ds.iter().filter(|d| d["is_trigger"] == false).count(),
        1,
        "{v}"
    );
    assert_eq!(
        ds.iter().filter(|d| d["is_trigger"] == true).count(),
        1,
        "{v}"
    );
    for cmd in ["tables", "spans", "dispatchers"] {
        let r = sluice(
            &out,
            &["cli", "--server", &s, "changefeed", cmd, "-c", "cf1"],
        );
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
    }

    // table operations: accepted
    let tid = table_id.to_string();
    for (args, spans) in [
        (
            vec![
                "move-table",
                "-c",
                "cf1",
                "--table-id",
                &tid,
                "--target-node-id",
                &me,
            ],
            1,
        ),
        (
            vec![
                "split-table",
                "-c",
                "cf1",
                "--table-id",
                &tid,
                "--spans",
                "2",
            ],
            2,
        ),
        (vec!["merge-table", "-c", "cf1", "--table-id", &tid], 1),
    ] {
        let mut a = vec!["cli", "--server", &s, "changefeed"];
        a.extend(args.iter().copied());
        let r = sluice(&out, &a);
        assert_eq!(r.code, 0, "{a:?}: {} {}", r.stdout, r.stderr);
        assert!(r.stdout.contains("accepted"), "{}", r.stdout);
        // The maintainer finishes, and the nodes report as many dispatchers as spans.
        wait_for(&format!("{spans} spans after {}", args[0]), 30, || {
            let (_, v) = api_raw(&s, "GET", "/api/v2/changefeeds/cf1/spans", None)?;
            let (_, d) = api_raw(&s, "GET", "/api/v2/changefeeds/cf1/dispatchers", None)?;
            let a = v["items"].as_array().cloned().unwrap_or_default();
            let ds = d["items"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|x| x["is_trigger"] == false && x["state"] == "working")
                        .count()
                })
                .unwrap_or(0);
            if a.len() == spans && a.iter().all(|x| x["operator"].is_null()) && ds == spans {
                Ok(())
            } else {
                Err(format!("{v} {d}"))
            }
        });
        up.exec(&format!(
            "INSERT INTO d.t VALUES ({}, 0); UPDATE d.t SET v = v + 1;",
            100 + spans * 10 + args.len()
        ))
        .expect("write");
    }
    wait_checkpoint(&out, &s, "cf1", master_ts(&up), 60);
    let r = check(&out, &up_url, &down_url, "d.*");
    assert_eq!(
        r.code, 0,
        "check after move/split/merge: {} {}",
        r.stdout, r.stderr
    );
    let (st, v) = api(
        &out,
        &s,
        "POST",
        "/api/v2/changefeeds/cf1/move_table",
        Some(&json!({"table_id": 999999, "target_node_id": me})),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error_msg"]
            .as_str()
            .unwrap_or("")
            .contains("not replicated"),
        "{v}"
    );
    let (st, v) = api(
        &out,
        &s,
        "POST",
        "/api/v2/changefeeds/cf1/move_table",
        Some(&json!({"table_id": table_id, "target_node_id": "nowhere:1"})),
    );
    assert_eq!(
        (st, v["error_code"].as_str()),
        (404, Some("CDC:ErrCaptureNotExist")),
        "{v}"
    );
    let (st, v) = api(
        &out,
        &s,
        "POST",
        "/api/v2/changefeeds/cf1/split_table",
        Some(&json!({"table_id": table_id, "spans": 1})),
    );
    assert_eq!(st, 400, "{v}");

    // pause, update (refused while running, and not supported yet), resume
    let (st, v) = api(
        &out,
        &s,
        "PUT",
        "/api/v2/changefeeds/cf1",
        Some(&json!({"sink_uri": sink})),
    );
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error_code"], "CDC:ErrChangefeedUpdateRefused", "{v}");
    assert!(
        v["error_msg"].as_str().unwrap_or("").contains("pause"),
        "{v}"
    );
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "pause", "-c", "cf1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("stopped"), "{}", r.stdout);
    let bad_toml = dir.join("bad.toml");
    std::fs::write(&bad_toml, "[scheduler]\nno-such-key = 1\n").expect("toml");
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "changefeed",
            "update",
            "-c",
            "cf1",
            "--config",
            bad_toml.to_str().unwrap_or(""),
        ],
    );
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("no-such-key"), "{}", r.stderr);
    // A valid update while paused: a new scheduler section, the same sink.
    let good_toml = dir.join("good.toml");
    std::fs::write(&good_toml, "[scheduler]\nbalance = false\n").expect("toml");
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "changefeed",
            "update",
            "-c",
            "cf1",
            "--sink-uri",
            &sink,
            "--config",
            good_toml.to_str().unwrap_or(""),
        ],
    );
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("stopped"), "{}", r.stdout);
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "resume", "-c", "cf1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("normal"), "{}", r.stdout);

    // captures: cordon, uncordon, drain, uncordon
    for (cmd, cordoned) in [
        ("cordon", true),
        ("uncordon", false),
        ("drain", true),
        ("uncordon", false),
    ] {
        let r = sluice(&out, &["cli", "--server", &s, "capture", cmd, &me]);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
        wait_for(&format!("{cmd} visible"), 10, || {
            let (_, v) = api_raw(&s, "GET", "/api/v2/captures", None)?;
            if v["items"][0]["cordoned"] == cordoned {
                Ok(())
            } else {
                Err(v.to_string())
            }
        });
    }
    let r = sluice(&out, &["cli", "--server", &s, "capture", "list"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains(&me));
    let r = sluice(
        &out,
        &["cli", "--server", &s, "capture", "cordon", "no-such-node"],
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("CDC:ErrCaptureNotExist"), "{}", r.stderr);

    // ---- bad input: a clear error, non-zero exit, nothing changed
    let before = feed_ids(&out, &s);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["query".into(), "-c".into(), "nope".into()],
            "CDC:ErrChangeFeedNotExists",
        ),
        (
            vec!["pause".into(), "-c".into(), "nope".into()],
            "CDC:ErrChangeFeedNotExists",
        ),
        (
            vec!["remove".into(), "-c".into(), "nope".into()],
            "CDC:ErrChangeFeedNotExists",
        ),
        (
            vec!["tables".into(), "-c".into(), "nope".into()],
            "CDC:ErrChangeFeedNotExists",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "cf1".into(),
                "--sink-uri".into(),
                sink.clone(),
            ],
            "CDC:ErrChangeFeedAlreadyExists",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "bad1".into(),
                "--sink-uri".into(),
                "foo://x".into(),
            ],
            "CDC:ErrSinkURIInvalid",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "bad2".into(),
                "--sink-uri".into(),
                format!("file://{}/x?protocol=avro", dir.display()),
            ],
            "CDC:ErrSinkURIInvalid",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "bad3".into(),
                "--sink-uri".into(),
                format!(
                    "mysql://sluice:{DOWN_PASS}-wrong@127.0.0.1:{}/",
                    _down.port()
                ),
            ],
            "CDC:ErrSinkURIInvalid",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "bad4".into(),
                "--sink-uri".into(),
                sink.clone(),
                "--config".into(),
                bad_toml.display().to_string(),
            ],
            "CDC:ErrAPIInvalidParam",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "bad5".into(),
                "--sink-uri".into(),
                sink.clone(),
                "--start-ts".into(),
                "1".into(),
            ],
            "CDC:ErrStartTsBeforeGC",
        ),
        (
            vec![
                "create".into(),
                "-c".into(),
                "bad 6".into(),
                "--sink-uri".into(),
                sink.clone(),
            ],
            "CDC:ErrAPIInvalidParam",
        ),
    ];
    for (args, code) in &cases {
        let mut a: Vec<&str> = vec!["cli", "--server", &s, "changefeed"];
        a.extend(args.iter().map(|x| x.as_str()));
        let r = sluice(&out, &a);
        assert_eq!(r.code, 1, "{a:?}: {} {}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(code),
            "{a:?}: expected {code}: {}",
            r.stderr
        );
    }
    // A purged start point.
    up.exec("FLUSH BINARY LOGS; FLUSH BINARY LOGS;")
        .expect("flush");
    let (cur, _) = up.master_status().expect("master");
    // The server's own binlog dump must have moved on before the old files can be purged.
    let purged = wait_for("binlog purge", 30, || {
        up.exec(&format!("PURGE BINARY LOGS TO '{cur}'"))
            .map_err(|e| e.to_string())?;
        let logs = up.query("SHOW BINARY LOGS").map_err(|e| e.to_string())?;
        if logs.iter().any(|r| r[0] == "mysql-bin.000001") {
            Err(format!("{logs:?}"))
        } else {
            Ok(true)
        }
    });
    assert!(purged);
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "changefeed",
            "create",
            "-c",
            "bad7",
            "--sink-uri",
            &sink,
            "--start-position",
            "mysql-bin.000001:4",
        ],
    );
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("purged") && r.stderr.contains("CDC:ErrStartTsBeforeGC"),
        "{}",
        r.stderr
    );
    // Unknown route, bad JSON, unknown JSON field.
    let (st, v) = api(&out, &s, "GET", "/api/v2/nothing", None);
    assert_eq!(
        (st, v["error_code"].as_str()),
        (400, Some("CDC:ErrAPIInvalidParam")),
        "{v}"
    );
    let (st, _) = api(
        &out,
        &s,
        "POST",
        "/api/v2/changefeeds",
        Some(&json!({"changefeed_id": "x", "sink_uri": sink, "bogus": 1})),
    );
    assert_eq!(st, 400);
    // CLI usage errors: exit 2.
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            "http://127.0.0.1:1",
            "changefeed",
            "list",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        feed_ids(&out, &s),
        before,
        "bad input changed the changefeeds"
    );

    // remove
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "remove", "-c", "cf1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(feed_ids(&out, &s).is_empty());

    // metrics
    let (st, v) = api_raw(&s, "GET", "/metrics", None).expect("metrics");
    let text = v.as_str().unwrap_or("").to_string();
    out.add(&text);
    assert_eq!(st, 200);
    for m in [
        "sluice_capture_rows_total",
        "sluice_sink_rows_total",
        "sluice_dispatchers",
        "sluice_event_store_bytes",
        "sluice_memory_inflight_bytes",
        "sluice_errors_total",
        "sluice_changefeed_checkpoint_lag_seconds",
    ] {
        assert!(text.contains(m), "{m} missing:\n{text}");
    }
    out.assert_no_secret(&[&server.log]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server's heartbeat writer (on by default) gives commit times in milliseconds: each row's
/// commit time as a sink writes it (canal-json's `es`) is within a heartbeat interval (plus
/// scheduling slack) of the upstream's `NOW(6)` in the row, where the binlog header alone is off
/// by up to a second. A read-only upstream user turns the writer off with a warning saying
/// why, and the server runs on.
#[test]
fn heartbeats_give_commit_times_in_milliseconds() {
    let out = Outputs::default();
    let dir = tmpdir("heartbeat-ms");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, at_ms BIGINT)")
        .expect("schema");
    let server = Server::start(&dir, &up_url);
    let sink = format!("file://{}/out?protocol=canal-json", dir.display());
    create_changefeed(&out, &server.url(), "ms", &sink);
    std::thread::sleep(std::time::Duration::from_millis(500));
    const ROWS: i64 = 30;
    for i in 0..ROWS {
        up.exec(&format!(
            "INSERT INTO d.t VALUES ({i}, ROUND(UNIX_TIMESTAMP(NOW(6)) * 1000))"
        ))
        .expect("row");
        std::thread::sleep(std::time::Duration::from_millis(73));
    }
    wait_checkpoint(&out, &server.url(), "ms", master_ts(&up), 60);
    let mut errors = Vec::new();
    let mut stack = vec![dir.join("out")];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).expect("read dir").flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("CDC") && n.ends_with(".json")
            }) && path.to_string_lossy().contains("/t/")
            {
                for line in std::fs::read_to_string(&path)
                    .expect("read")
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                {
                    let v: serde_json::Value = serde_json::from_str(line).expect("json line");
                    let at: i64 = v["data"][0]["at_ms"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .expect("at_ms");
                    errors.push((v["es"].as_i64().expect("es") - at).abs());
                }
            }
        }
    }
    assert_eq!(
        errors.len(),
        ROWS as usize,
        "every row written once: {errors:?}"
    );
    let mean = errors.iter().sum::<i64>() / ROWS;
    let max = errors.iter().copied().max().unwrap_or_default();
    // Whole seconds would be off by ~500 ms on average and up to 999 ms.
    assert!(
        mean <= 250 && max <= 600,
        "commit time errors (ms): {errors:?}"
    );
    drop(server);
    // A user that may read the binlog but write nothing.
    up.exec(&format!(
        "CREATE USER 'ro'@'127.0.0.1' IDENTIFIED BY '{UP_PASS}'; GRANT SELECT, RELOAD, REPLICATION CLIENT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'ro'@'127.0.0.1';"
    ))
    .expect("read-only user");
    let ro_url = format!("mysql://ro:{UP_PASS}@127.0.0.1:{}", up.port());
    let ro_dir = tmpdir("heartbeat-ro");
    let server = Server::start(&ro_dir, &ro_url);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut log = String::new();
    while std::time::Instant::now() < deadline && !log.contains("heartbeats off") {
        std::thread::sleep(std::time::Duration::from_millis(200));
        log = std::fs::read_to_string(&server.log).unwrap_or_default();
    }
    assert!(
        log.contains("heartbeats off") && log.contains("sluice.*"),
        "{log}"
    );
    let (st, _) = api(&out, &server.url(), "GET", "/api/v2/health", None);
    assert_eq!(st, 200, "the server runs on without heartbeats");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&ro_dir);
}

#[test]
fn server_refuses_an_upstream_without_row_binlog() {
    let out = Outputs::default();
    let dir = tmpdir("stmt");
    let db = MariaDb::start_with(Options {
        binlog: BinlogMode::Statement,
        ..Options::default()
    })
    .expect("mariadb");
    db.exec(&format!("CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY '{UP_PASS}'; GRANT ALL ON *.* TO 'sluice'@'127.0.0.1';")).expect("user");
    let url = format!("mysql://sluice:{UP_PASS}@127.0.0.1:{}", db.port());
    let r = sluice(
        &out,
        &[
            "server",
            "--addr",
            &format!("127.0.0.1:{}", free_port()),
            "--data-dir",
            dir.join("d").to_str().unwrap_or(""),
            "--upstream",
            &url,
        ],
    );
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("binlog_format"), "{}", r.stderr);
    // A bad server TOML key.
    let cfg = dir.join("server.toml");
    std::fs::write(&cfg, "addr = \"127.0.0.1:1\"\nno-such-key = true\n").expect("toml");
    let r = sluice(
        &out,
        &[
            "server",
            "--config",
            cfg.to_str().unwrap_or(""),
            "--data-dir",
            "/nonexistent",
            "--upstream",
            &url,
        ],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no-such-key"), "{}", r.stderr);
    out.assert_no_secret(&[]);
    let _ = std::fs::remove_dir_all(&dir);
}
