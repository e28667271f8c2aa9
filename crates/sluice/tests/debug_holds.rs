//! Runtime holds: the control plane's hold points switched through the API on a real server,
//! refused unless the server started with `--enable-debug-holds`. With `create_dispatcher` held,
//! a table created upstream gets its span accepted but not started (nothing of it is written and
//! the checkpoint waits); once the hold is cleared it replicates and `sluice check` passes.

mod common;
use common::*;
use serde_json::Value;

fn holds_cli(out: &Outputs, s: &str, args: &[&str]) -> Run {
    let mut all = vec!["cli", "--server", s, "debug", "holds"];
    all.extend_from_slice(args);
    sluice(out, &all)
}

#[test]
fn holds_are_refused_without_the_flag() {
    let out = Outputs::default();
    let dir = tmpdir("holds-off");
    let (_up, up_url) = mariadb_with_user(UP_PASS);
    let server = Server::start(&dir, &up_url);
    let (code, v) = api(
        &out,
        &server.url(),
        "POST",
        "/api/v2/debug/holds",
        Some(&serde_json::json!({"point": "create_dispatcher"})),
    );
    assert_eq!(code, 403, "{v}");
    let r = holds_cli(&out, &server.url(), &["list"]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("--enable-debug-holds") || r.stdout.contains("--enable-debug-holds"),
        "{} {}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn a_held_create_keeps_a_new_table_waiting_until_released() {
    let out = Outputs::default();
    let dir = tmpdir("holds-on");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start_with(&dir, &up_url, &["--enable-debug-holds"]);
    let s = server.url();
    create_changefeed(&out, &s, "h", &down_url);
    wait_checkpoint(&out, &s, "h", master_ts(&up), 60);

    let r = holds_cli(&out, &s, &["set", "nonsense"]);
    assert_ne!(r.code, 0, "an unknown point is refused");
    assert!(
        format!("{}{}", r.stdout, r.stderr).contains("create_dispatcher"),
        "the error lists the points"
    );
    let r = holds_cli(&out, &s, &["set", "create_dispatcher"]);
    assert_eq!(r.code, 0, "set: {} {}", r.stdout, r.stderr);
    let (_, v) = api(&out, &s, "GET", "/api/v2/debug/holds", None);
    assert_eq!(v["holds"], serde_json::json!(["create_dispatcher"]), "{v}");

    up.exec("CREATE DATABASE hd; CREATE TABLE hd.t (id INT PRIMARY KEY, v INT); INSERT INTO hd.t VALUES (1, 1)").expect("upstream");
    let target = master_ts(&up);
    // The new table's dispatcher is accepted and held: reported by the node as creating.
    wait_for("the new table's dispatcher held at create", 30, || {
        let (_, d) = api(&out, &s, "GET", "/api/v2/changefeeds/h/dispatchers", None);
        let held = d["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x: &Value| x["state"] == "creating");
        if held {
            Ok(())
        } else {
            Err(d.to_string())
        }
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (_, v) = api(&out, &s, "GET", "/api/v2/changefeeds/h", None);
    assert!(
        v["checkpoint_ts"].as_u64().unwrap_or(u64::MAX) < target,
        "the checkpoint passed a held table: {v}"
    );
    let rows = _down
        .query_one("SELECT COUNT(*) FROM hd.t")
        .unwrap_or_else(|_| "0".into());
    assert_eq!(rows, "0", "a held dispatcher wrote rows");

    let r = holds_cli(&out, &s, &["clear"]);
    assert_eq!(r.code, 0, "clear: {} {}", r.stdout, r.stderr);
    wait_checkpoint(&out, &s, "h", target, 60);
    let r = check(&out, &up_url, &down_url, "hd.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
}
