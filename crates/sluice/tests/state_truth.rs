//! A changefeed whose progress is stopped never reads `normal`: with the upstream down (capture
//! keeps failing to reconnect) and with the downstream down (the sink keeps retrying), the
//! changefeed must read `warning` within seconds, with a message that says what is wrong, in
//! `changefeed query` and in `/metrics`; once the cause is gone it reads `normal` again with no
//! error, and the rows written meanwhile arrive.

mod common;
use common::*;
use serde_json::Value;

/// Polls the changefeed until `ok` accepts it; returns it.
fn wait_feed(
    out: &Outputs,
    server: &str,
    id: &str,
    what: &str,
    secs: u64,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(&format!("changefeed {id}: {what}"), secs, || {
        let (s, v) = api_raw(server, "GET", &format!("/api/v2/changefeeds/{id}"), None)?;
        out.add(&v.to_string());
        if s == 200 && ok(&v) {
            Ok(v)
        } else {
            Err(format!("status {s}: {v}"))
        }
    })
}

fn is_warning_with(v: &Value, needle: &str) -> bool {
    v["state"] == "warning"
        && v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(needle)
}

fn is_clean_normal(v: &Value) -> bool {
    v["state"] == "normal" && v["error"].is_null()
}

fn metrics_state(out: &Outputs, server: &str, id: &str) -> String {
    let body = reqwest_free_get(server, "/metrics");
    out.add(&body);
    let prefix = format!("sluice_changefeed_state{{changefeed=\"{id}\",state=\"");
    body.lines()
        .find_map(|l| {
            l.strip_prefix(&prefix)
                .and_then(|r| r.split('"').next())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// `/metrics` is text, not JSON: fetched with curl-free std IO.
fn reqwest_free_get(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

#[test]
fn a_changefeed_with_its_upstream_down_reads_warning_then_normal_again() {
    let out = Outputs::default();
    let dir = tmpdir("truth-up");
    let (mut up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE t; CREATE TABLE t.a (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    create_changefeed(&out, &s, "up", &down_url);
    up.exec("INSERT INTO t.a VALUES (1, 1)").expect("insert");
    wait_checkpoint(&out, &s, "up", master_ts(&up), 60);
    assert!(is_clean_normal(&wait_feed(
        &out,
        &s,
        "up",
        "normal",
        10,
        is_clean_normal
    )));

    up.stop(false).expect("stop upstream");
    let v = wait_feed(&out, &s, "up", "warning naming the binlog", 30, |v| {
        is_warning_with(v, "binlog")
    });
    eprintln!("with the upstream down: {v}");
    let health = wait_for("health degraded", 30, || {
        let (_, h) = api_raw(&s, "GET", "/api/v2/health", None)?;
        (h["status"] == "degraded" && h["capture_error"].is_string())
            .then_some(h.clone())
            .ok_or(h.to_string())
    });
    eprintln!("health with the upstream down: {health}");
    assert_eq!(
        metrics_state(&out, &s, "up"),
        "warning",
        "/metrics must agree with the API"
    );
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "query", "-c", "up"],
    );
    assert!(
        r.stdout.contains("warning"),
        "changefeed query must show the warning: {}",
        r.stdout
    );

    up.start_again().expect("start upstream");
    up.exec("INSERT INTO t.a VALUES (2, 2)")
        .expect("insert after restart");
    wait_checkpoint(&out, &s, "up", master_ts(&up), 60);
    wait_feed(&out, &s, "up", "normal with no error", 30, is_clean_normal);
    assert_eq!(metrics_state(&out, &s, "up"), "normal");
    wait_for("health ok again", 30, || {
        let (_, h) = api_raw(&s, "GET", "/api/v2/health", None)?;
        (h["status"] == "ok" && h["capture_error"].is_null())
            .then_some(())
            .ok_or(h.to_string())
    });
    let r = check(&out, &up_url, &down_url, "t.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    out.assert_no_secret(&[&server.log]);
}

#[test]
fn a_changefeed_with_its_downstream_down_reads_warning_then_normal_again() {
    let out = Outputs::default();
    let dir = tmpdir("truth-down");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (mut down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE t; CREATE TABLE t.b (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    // Retried for long enough that the dispatcher does not give up while the test looks.
    create_changefeed(&out, &s, "down", &format!("{down_url}/?max-retries=2"));
    wait_checkpoint(&out, &s, "down", master_ts(&up), 60);

    down.stop(false).expect("stop downstream");
    up.exec("INSERT INTO t.b VALUES (1, 1), (2, 2)")
        .expect("insert");
    let target = master_ts(&up);
    let v = wait_feed(
        &out,
        &s,
        "down",
        "warning naming the retrying sink",
        60,
        |v| is_warning_with(v, "retrying"),
    );
    eprintln!("with the downstream down: {v}");
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(u64::MAX) < target,
        "checkpoint passed unapplied rows: {v}"
    );

    down.start_again().expect("start downstream");
    wait_checkpoint(&out, &s, "down", target, 120);
    wait_feed(
        &out,
        &s,
        "down",
        "normal with no error",
        30,
        is_clean_normal,
    );
    let r = check(&out, &up_url, &down_url, "t.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}
