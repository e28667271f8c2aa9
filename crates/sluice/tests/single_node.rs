//! End-to-end tests of a single-node `sluice server` on the embedded meta store, against real
//! MariaDB instances: upstream → file sink → `sluice consume` → downstream; upstream → MySQL
//! sink; a kill -9 and restart mid-workload; each checked with `sluice check`, and every output
//! searched for the test passwords.

mod common;
use common::*;

#[test]
fn file_sink_then_consume_then_check() {
    let out = Outputs::default();
    let dir = tmpdir("file");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    let storage = format!(
        "file://{}/out?protocol=canal-json&enable-tidb-extension=true&flush-interval=200ms",
        dir.display()
    );
    create_changefeed(&out, &server.url(), "to-files", &storage);
    workload(&up, "shop", 0, 30);
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "to-files", target, 120);
    // The storage sink's own checkpoint record follows (at most a second behind).
    wait_for("the storage metadata file", 30, || {
        std::fs::read_to_string(dir.join("out/metadata"))
            .map_err(|e| e.to_string())
            .and_then(|m| {
                let v: serde_json::Value = serde_json::from_str(&m).map_err(|e| e.to_string())?;
                if v["checkpoint-ts"].as_u64().unwrap_or(0) >= target {
                    Ok(())
                } else {
                    Err(m)
                }
            })
    });
    let r = sluice(
        &out,
        &[
            "consume",
            "--storage",
            &storage,
            "--downstream",
            &format!("{down_url}/"),
        ],
    );
    assert_eq!(r.code, 0, "consume: {} {}", r.stdout, r.stderr);
    let r = check(&out, &up_url, &down_url, "shop.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("shop.accounts: equal") && r.stdout.contains("shop.events: equal"),
        "{}",
        r.stdout
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
}

#[test]
fn mysql_sink_then_check() {
    let out = Outputs::default();
    let dir = tmpdir("mysql");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    create_changefeed(
        &out,
        &server.url(),
        "to-mysql",
        &format!("{down_url}/?worker-count=4"),
    );
    workload(&up, "bank", 0, 30);
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "to-mysql", target, 120);
    let r = check(&out, &up_url, &down_url, "bank.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("bank.accounts: equal"), "{}", r.stdout);
    let r = sluice(
        &out,
        &["cli", "--server", &server.url(), "changefeed", "list"],
    );
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("to-mysql") && r.stdout.contains("normal"),
        "{}",
        r.stdout
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
}

#[test]
fn restart_mid_workload_resumes_from_checkpoint() {
    let out = Outputs::default();
    let dir = tmpdir("restart");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    let mut server = Server::start(&dir, &up_url);
    create_changefeed(&out, &server.url(), "resume", &format!("{down_url}/"));
    workload(&up, "app", 0, 20);
    let mid = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "resume", mid, 120);
    // Writes continue while the server is killed and comes back.
    let writer = {
        let up_url = up_url.clone();
        let _ = up_url;
        std::thread::spawn(move || {
            workload(&up, "app", 20, 40);
            up
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    server.kill9();
    std::thread::sleep(std::time::Duration::from_millis(500));
    server.restart();
    let up = writer.join().expect("writer");
    let target = master_ts(&up);
    let (_, before) = api(
        &out,
        &server.url(),
        "GET",
        "/api/v2/changefeeds/resume",
        None,
    );
    assert!(
        before["checkpoint_ts"].as_u64().unwrap_or(0) >= mid,
        "the checkpoint went back after the restart: {before}"
    );
    wait_checkpoint(&out, &server.url(), "resume", target, 180);
    let r = check(&out, &up_url, &down_url, "app.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    out.assert_no_secret(&[&server.log]);
    drop(server);
}

#[test]
fn table_filter_replicates_only_matching_tables() {
    let out = Outputs::default();
    let dir = tmpdir("filter");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    // Keep `shop.*` except `shop.events`; `other.*` is not replicated at all.
    let body = serde_json::json!({
        "changefeed_id": "filtered",
        "sink_uri": format!("{down_url}/?worker-count=4"),
        "config": "[filter]\nrules = [\"shop.*\", \"!shop.events\"]\n",
    });
    let (s, v) = api(
        &out,
        &server.url(),
        "POST",
        "/api/v2/changefeeds",
        Some(&body),
    );
    assert!(s == 200 || s == 201, "create: {s} {v}");
    // A bad rule is refused with a message that says what a rule looks like.
    let bad = serde_json::json!({ "changefeed_id": "bad", "sink_uri": format!("{down_url}/"), "config": "[filter]\nrules = [\"nodot\"]\n" });
    let (s, v) = api(
        &out,
        &server.url(),
        "POST",
        "/api/v2/changefeeds",
        Some(&bad),
    );
    assert!(
        (400..500).contains(&s) && v.to_string().contains("db.table"),
        "{s} {v}"
    );
    workload(&up, "shop", 0, 20);
    workload(&up, "other", 0, 5);
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "filtered", target, 120);
    let r = check(&out, &up_url, &down_url, "shop.accounts");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    let tables = down.query("SELECT CONCAT(table_schema, '.', table_name) FROM information_schema.tables WHERE table_schema IN ('shop', 'other') ORDER BY 1").expect("query downstream");
    let names: Vec<String> = tables
        .into_iter()
        .filter_map(|r| r.into_iter().next())
        .collect();
    assert!(names.contains(&"shop.accounts".to_string()), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n == "shop.events" || n.starts_with("other.")),
        "filtered tables reached the downstream: {names:?}"
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
}

#[test]
fn ignored_deletes_are_not_replicated() {
    let out = Outputs::default();
    let dir = tmpdir("nodelete");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    let body = serde_json::json!({
        "changefeed_id": "no-deletes",
        "sink_uri": format!("{down_url}/?worker-count=2"),
        "config": "[filter]\nignore-event = [\"delete\"]\n",
    });
    let (s, v) = api(
        &out,
        &server.url(),
        "POST",
        "/api/v2/changefeeds",
        Some(&body),
    );
    assert!(s == 200 || s == 201, "create: {s} {v}");
    let bad = serde_json::json!({ "changefeed_id": "bad", "sink_uri": format!("{down_url}/"), "config": "[filter]\nignore-event = [\"truncate\"]\n" });
    let (s, v) = api(
        &out,
        &server.url(),
        "POST",
        "/api/v2/changefeeds",
        Some(&bad),
    );
    assert!((400..500).contains(&s), "{s} {v}");
    // 20 rounds of the workload delete some accounts upstream.
    workload(&up, "shop", 0, 20);
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "no-deletes", target, 120);
    let count = |db: &sluice_testkit::mariadb::MariaDb| -> u64 {
        db.query("SELECT COUNT(*) FROM shop.accounts")
            .expect("count")[0][0]
            .parse()
            .expect("number")
    };
    let (u, d) = (count(&up), count(&down));
    assert!(
        d > u,
        "the downstream kept the rows deleted upstream: upstream {u}, downstream {d}"
    );
    // Everything but the deletes arrived: the downstream has every upstream row, as it is upstream.
    let missing = down
        .query(&format!(
            "SELECT COUNT(*) FROM shop.accounts d WHERE d.id < {}",
            20 * 20
        ))
        .expect("query")[0][0]
        .parse::<u64>()
        .expect("number");
    assert_eq!(missing, 20 * 20, "every inserted account is downstream");
    out.assert_no_secret(&[&server.log]);
    drop(server);
}
