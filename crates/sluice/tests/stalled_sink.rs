//! A stalled sink (the downstream MariaDB is SIGSTOPped) while the upstream writes far more than
//! the memory quota: the server keeps reading the binlog into its event store, its rows in
//! flight stay under the quota plus one delivery, its RSS under the quota plus a fixed overhead;
//! once the downstream answers again the changefeed catches up and `sluice check` passes.

mod common;
use common::*;
use std::process::Command;

const QUOTA: u64 = 8 << 20;
/// Process overhead allowed above the quota (runtime, page cache of the event store, sink pools,
/// allocator slack of a debug build).
const OVERHEAD: u64 = 160 << 20;

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

#[test]
fn stalled_sink_stays_under_the_memory_quota() {
    let out = Outputs::default();
    let dir = tmpdir("stall");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "memory-quota-bytes = {QUOTA}\nstore-cache-bytes = {}\n",
            16 << 20
        ),
    )
    .expect("toml");
    let server = Server::start_with(&dir, &up_url, &["--config", cfg.to_str().unwrap_or("")]);
    let ddl = "CREATE DATABASE s; CREATE TABLE s.big (id INT PRIMARY KEY, pad VARCHAR(2000));";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    create_changefeed(
        &out,
        &server.url(),
        "stall",
        &format!("{down_url}/?max-retries=1000"),
    );
    // The changefeed runs (bootstrapped: it read the downstream's DDL record, its dispatcher
    // works) before the stall.
    wait_for("a working dispatcher", 60, || {
        let (_, v) = api_raw(
            &server.url(),
            "GET",
            "/api/v2/changefeeds/stall/dispatchers",
            None,
        )?;
        out.add(&v.to_string());
        let working = v["items"].as_array().is_some_and(|a| {
            a.iter()
                .any(|d| d["is_trigger"] == false && d["state"] == "working")
        });
        working.then_some(()).ok_or(v.to_string())
    });
    let pid = server.child.as_ref().map(|c| c.id()).expect("server pid");
    let baseline = rss(pid);
    let dpid = down.pid().expect("downstream pid");
    assert!(Command::new("kill")
        .args(["-STOP", &dpid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false));
    // ~120 MiB of rows: 15x the quota.
    for b in 0..60 {
        let mut sql = String::from("INSERT INTO s.big VALUES ");
        for k in 0..1000 {
            let id = b * 1000 + k;
            sql.push_str(&format!(
                "{}({id}, REPEAT('x', 2000))",
                if k == 0 { "" } else { "," }
            ));
        }
        up.exec(&sql).expect("insert");
    }
    let target = master_ts(&up);
    let mut max_rss = 0;
    let mut max_inflight = 0;
    wait_for("capture to read everything", 120, || {
        let (_, v) = api_raw(&server.url(), "GET", "/api/v2/status", None)?;
        out.add(&v.to_string());
        max_inflight = max_inflight.max(v["inflight_bytes"].as_u64().unwrap_or(0));
        max_rss = max_rss.max(rss(pid));
        if v["captured_ts"].as_u64().unwrap_or(0) >= target {
            Ok(())
        } else {
            Err(v.to_string())
        }
    });
    // Give the stalled pipeline time to fill up to its bounds, sampling.
    for _ in 0..20 {
        let (_, v) = api_raw(&server.url(), "GET", "/api/v2/status", None).expect("status");
        max_inflight = max_inflight.max(v["inflight_bytes"].as_u64().unwrap_or(0));
        max_rss = max_rss.max(rss(pid));
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    eprintln!("baseline rss {baseline}, max rss {max_rss}, max rows in flight {max_inflight} bytes (quota {QUOTA})");
    assert!(
        max_inflight > 0,
        "nothing was in flight: the test did not exercise the quota"
    );
    // One delivery of up to 1024 rows of ~2 KiB may overshoot the quota.
    assert!(
        max_inflight <= QUOTA + (1024 * 2300),
        "rows in flight {max_inflight} exceed the quota {QUOTA}"
    );
    assert!(
        max_rss <= baseline + QUOTA + OVERHEAD,
        "rss {max_rss} > baseline {baseline} + quota + overhead"
    );
    assert!(Command::new("kill")
        .args(["-CONT", &dpid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false));
    wait_checkpoint(&out, &server.url(), "stall", target, 240);
    let r = check(&out, &up_url, &down_url, "s.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    out.assert_no_secret(&[&server.log]);
    drop(server);
}
