//! Table requests and user-split marks survive the maintainer (issue 9, reproductions 4 and 5),
//! on three `sluice server` nodes on etcd replicating a real MariaDB to another: an accepted
//! `merge_table` still pending when the maintainer's node is killed (`kill -9`) is carried out
//! by the next maintainer; a table split by a user stays split after the maintainer's node is
//! killed, with tables across nodes and the merge scheduler on. Pass criteria come from the API
//! only (spans, operators, pending requests); the final `sluice check` compares the databases.

mod common;
use common::*;
use serde_json::{json, Value};
use sluice_testkit::etcd::Etcd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CF: &str = "rq";

/// Three servers on one etcd with runtime holds and tiny regions (a split has boundaries to cut
/// at), once all of them are registered.
fn start_cluster(tag: &str, up_url: &str, etcd_url: &str) -> (Vec<PathBuf>, Vec<Server>) {
    let dirs: Vec<PathBuf> = (0..3).map(|i| tmpdir(&format!("{tag}{i}"))).collect();
    let servers: Vec<Server> = dirs
        .iter()
        .map(|d| {
            let toml = d.join("server.toml");
            std::fs::write(&toml, "region-size-bytes = 1\n").expect("server toml");
            let toml = toml.to_string_lossy().to_string();
            Server::start_with(
                d,
                up_url,
                &[
                    "--etcd",
                    etcd_url,
                    "--enable-debug-holds",
                    "--config",
                    &toml,
                ],
            )
        })
        .collect();
    wait_for("3 captures", 30, || {
        let (_, v) = api_raw(&servers[0].url(), "GET", "/api/v2/captures", None)?;
        (v["items"].as_array().map(|a| a.len()) == Some(3))
            .then_some(())
            .ok_or(v.to_string())
    });
    (dirs, servers)
}

/// `r.t6` (300 rows, statistics fresh: many regions) and `r.t1` on both sides, before the
/// servers start (they compute regions at start).
fn tables(up: &sluice_testkit::mariadb::MariaDb, down: &sluice_testkit::mariadb::MariaDb) {
    let mut sql = String::from(
        "CREATE DATABASE r; CREATE TABLE r.t6 (id INT PRIMARY KEY, v INT); CREATE TABLE r.t1 (id INT PRIMARY KEY, v INT); INSERT INTO r.t1 VALUES (1, 1), (2, 2);",
    );
    let rows: Vec<String> = (0..300).map(|i| format!("({i}, {i})")).collect();
    sql.push_str(&format!("INSERT INTO r.t6 VALUES {};", rows.join(", ")));
    up.exec(&sql).expect("upstream tables");
    down.exec(&sql).expect("downstream tables");
    up.exec("ANALYZE TABLE r.t6").expect("analyze");
}

fn create(out: &Outputs, server: &Server, down_url: &str, scheduler: &str) {
    let cfg = server.data_dir.with_file_name("cf.toml");
    std::fs::write(&cfg, format!("[scheduler]\n{scheduler}")).expect("cf toml");
    let sink = format!("{down_url}/");
    let r = sluice(
        out,
        &[
            "cli",
            "--server",
            &server.url(),
            "changefeed",
            "create",
            "-c",
            CF,
            "--sink-uri",
            &sink,
            "--config",
            &cfg.to_string_lossy(),
        ],
    );
    assert_eq!(r.code, 0, "create: {} {}", r.stdout, r.stderr);
}

fn live(servers: &[Server]) -> String {
    servers
        .iter()
        .find(|s| s.child.is_some())
        .map(|s| s.url())
        .unwrap_or_default()
}

/// The spans view (answered by the current maintainer, wherever the call lands).
fn spans(out: &Outputs, servers: &[Server]) -> Result<Value, String> {
    let (st, v) = api_raw(
        &live(servers),
        "GET",
        &format!("/api/v2/changefeeds/{CF}/spans"),
        None,
    )?;
    out.add(&v.to_string());
    (st == 200).then_some(v.clone()).ok_or(format!("{st} {v}"))
}

/// The spans of table `t`.
fn of_table(v: &Value, t: u64) -> Vec<Value> {
    v["items"]
        .as_array()
        .map(|a| a.iter().filter(|i| i["table_id"] == t).cloned().collect())
        .unwrap_or_default()
}

/// The table's spans once exactly `n` of them replicate with no operator.
fn wait_spans(out: &Outputs, servers: &[Server], t: u64, n: usize, secs: u64) -> Vec<Value> {
    wait_for(&format!("table {t} in {n} span(s)"), secs, || {
        let v = spans(out, servers)?;
        let items = of_table(&v, t);
        let settled = items.len() == n
            && items
                .iter()
                .all(|i| i["state"] == "replicating" && i["operator"].is_null());
        settled.then_some(items).ok_or(v.to_string())
    })
}

fn table_id(out: &Outputs, servers: &[Server], name: &str) -> u64 {
    wait_for(&format!("{name} in the spans"), 30, || {
        let v = spans(out, servers)?;
        v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["table_name"] == name))
            .and_then(|i| i["table_id"].as_u64())
            .ok_or(v.to_string())
    })
}

/// POST a table request and expect 202 (a split is retried while the maintainer's node does not
/// know the table's regions yet).
fn request(out: &Outputs, servers: &[Server], kind: &str, body: Value) {
    wait_for(&format!("{kind} accepted"), 90, || {
        let (st, v) = api_raw(
            &live(servers),
            "POST",
            &format!("/api/v2/changefeeds/{CF}/{kind}"),
            Some(&body),
        )?;
        out.add(&v.to_string());
        (st == 202).then_some(()).ok_or(format!("{st} {v}"))
    });
}

fn maintainer(out: &Outputs, servers: &[Server]) -> Result<String, String> {
    let (_, v) = api_raw(
        &live(servers),
        "GET",
        &format!("/api/v2/changefeeds/{CF}"),
        None,
    )?;
    out.add(&v.to_string());
    v["maintainer_addr"]
        .as_str()
        .map(String::from)
        .ok_or(v.to_string())
}

fn holds(out: &Outputs, server: &Server, body: Value) {
    let (st, v) = api(
        out,
        &server.url(),
        "POST",
        "/api/v2/debug/holds",
        Some(&body),
    );
    assert_eq!(st, 200, "{v}");
}

/// Whether the spans view lists a pending `kind` request of table `t` the meta store has.
fn pending(v: &Value, kind: &str, t: u64) -> bool {
    v["pending_requests"]
        .as_array()
        .map(|a| {
            a.iter().any(|r| {
                r["request"] == kind
                    && r["table_id"] == t
                    && r["by"] == "user"
                    && r["persisted"] == true
            })
        })
        .unwrap_or(false)
}

/// A new maintainer (not on `dead`) answers and shows the view `ok` wants.
fn wait_new_maintainer(
    out: &Outputs,
    servers: &[Server],
    dead: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, 90, || {
        let m = maintainer(out, servers)?;
        if m == dead {
            return Err(format!("the maintainer is still placed on {dead}"));
        }
        let v = spans(out, servers)?;
        ok(&v).then_some(v.clone()).ok_or(v.to_string())
    })
}

fn finish(
    out: &Outputs,
    up: &sluice_testkit::mariadb::MariaDb,
    up_url: &str,
    down_url: &str,
    servers: Vec<Server>,
    dirs: Vec<PathBuf>,
) {
    up.exec("INSERT INTO r.t6 VALUES (1000, 1); UPDATE r.t6 SET v = v + 1 WHERE id < 50; INSERT INTO r.t1 VALUES (3, 3)")
        .expect("write");
    wait_checkpoint(out, &live(&servers), CF, master_ts(up), 120);
    let r = check(out, up_url, down_url, "r.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    let logs: Vec<PathBuf> = servers.iter().map(|s| s.log.clone()).collect();
    let refs: Vec<&std::path::Path> = logs.iter().map(|p| p.as_path()).collect();
    out.assert_no_secret(&refs);
    drop(servers);
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Reproduction 4: t6 in two spans; a move of it to node X hangs at `create_dispatcher` there,
/// so an accepted merge queues behind it (the spans view lists it, persisted). The maintainer's
/// node is killed. The next maintainer lists the merge again, and once the hold is cleared it
/// finishes the move and merges: t6 ends in one span. (Before, the merge was lost: t6 stayed in
/// two spans with no operator.)
#[test]
fn an_accepted_merge_survives_a_kill_of_the_maintainers_node() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    tables(&up, &down);
    let (dirs, mut servers) = start_cluster("reqmerge", &up_url, &etcd.url());
    create(&out, &servers[0], &down_url, "balance = false\n");
    wait_checkpoint(&out, &servers[0].url(), CF, master_ts(&up), 60);
    let t6 = table_id(&out, &servers, "r.t6");
    request(
        &out,
        &servers,
        "split_table",
        json!({"table_id": t6, "spans": 2}),
    );
    wait_spans(&out, &servers, t6, 2, 60);

    let m = maintainer(&out, &servers).expect("a maintainer");
    let others: Vec<usize> = (0..3).filter(|i| servers[*i].addr != m).collect();
    let (x, y) = (others[0], others[1]);
    let body = |to: usize| json!({"table_id": t6, "target_node_id": servers[to].addr});
    request(&out, &servers, "move_table", body(y));
    wait_for("t6 on y", 60, || {
        let v = spans(&out, &servers)?;
        let items = of_table(&v, t6);
        let there = items.len() == 2
            && items.iter().all(|i| {
                i["node_id"] == servers[y].addr.as_str()
                    && i["state"] == "replicating"
                    && i["operator"].is_null()
            });
        there.then_some(()).ok_or(v.to_string())
    });

    holds(&out, &servers[x], json!({"point": "create_dispatcher"}));
    request(&out, &servers, "move_table", body(x));
    wait_for("t6's move held at x", 60, || {
        let v = spans(&out, &servers)?;
        of_table(&v, t6)
            .iter()
            .all(|i| i["operator"].as_str().unwrap_or("").starts_with("move"))
            .then_some(())
            .ok_or(v.to_string())
    });
    request(&out, &servers, "merge_table", json!({"table_id": t6}));
    let v = wait_for("the merge pending and persisted", 30, || {
        let v = spans(&out, &servers)?;
        pending(&v, "merge", t6)
            .then_some(v.clone())
            .ok_or(v.to_string())
    });
    assert_eq!(of_table(&v, t6).len(), 2, "the merge ran too early: {v}");

    let dead = servers
        .iter()
        .position(|s| s.addr == m)
        .expect("maintainer");
    servers[dead].kill9();
    let v = wait_new_maintainer(
        &out,
        &servers,
        &m,
        "the merge pending at the next maintainer",
        |v| pending(v, "merge", t6),
    );
    eprintln!("after the failover: {v}");

    holds(&out, &servers[x], json!({"clear": true}));
    wait_spans(&out, &servers, t6, 1, 90);
    let v = wait_for("no request pending", 30, || {
        let v = spans(&out, &servers)?;
        (v["pending_requests"].as_array().map(|a| a.len()) == Some(0))
            .then_some(v.clone())
            .ok_or(v.to_string())
    });
    eprintln!("merged: {v}");
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &live(&servers),
            "changefeed",
            "spans",
            "-c",
            CF,
        ],
    );
    assert_eq!(r.code, 0, "spans: {} {}", r.stdout, r.stderr);
    finish(&out, &up, &up_url, &down_url, servers, dirs);
}

/// Reproduction 5: with tables across nodes and the merge scheduler on (t6 far below the merge
/// threshold), a user splits t6 into three spans off the maintainer's node (cordoned). The
/// maintainer's node is killed. The next maintainer shows t6 as split by a user and leaves it in
/// three spans (before, its merge scheduler merged it back about 4 s after it started; the
/// window watched here is three times that); a user's merge then makes it one span again.
#[test]
fn a_user_split_survives_a_kill_of_the_maintainers_node() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    tables(&up, &down);
    let (dirs, mut servers) = start_cluster("reqsplit", &up_url, &etcd.url());
    create(
        &out,
        &servers[0],
        &down_url,
        "enable-table-across-nodes = true\nregion-threshold = 100000\n",
    );
    wait_checkpoint(&out, &servers[0].url(), CF, master_ts(&up), 60);
    let t6 = table_id(&out, &servers, "r.t6");
    let m = maintainer(&out, &servers).expect("a maintainer");
    let (st, v) = api(
        &out,
        &live(&servers),
        "POST",
        &format!("/api/v2/captures/{m}/cordon"),
        None,
    );
    assert!(st < 300, "cordon: {st} {v}");
    wait_for("the cordon known to the coordinator", 30, || {
        let seen = servers.iter().any(|s| {
            api_raw(&s.url(), "GET", "/api/v2/captures", None)
                .map(|(_, v)| {
                    v["items"].as_array().is_some_and(|a| {
                        a.iter()
                            .any(|i| i["id"] == m.as_str() && i["cordoned"] == true)
                    })
                })
                .unwrap_or(false)
        });
        seen.then_some(()).ok_or("not yet".to_string())
    });
    request(
        &out,
        &servers,
        "split_table",
        json!({"table_id": t6, "spans": 3}),
    );
    let items = wait_spans(&out, &servers, t6, 3, 60);
    assert!(
        items.iter().all(|i| i["node_id"] != m.as_str()),
        "a piece went to the cordoned node: {items:?}"
    );
    let v = spans(&out, &servers).expect("spans");
    assert_eq!(v["user_split_table_ids"], json!([t6]), "{v}");

    let dead = servers
        .iter()
        .position(|s| s.addr == m)
        .expect("maintainer");
    servers[dead].kill9();
    wait_new_maintainer(
        &out,
        &servers,
        &m,
        "the split mark at the next maintainer",
        |v| {
            v["user_split_table_ids"] == json!([t6])
                && v["items"]
                    .as_array()
                    .map(|a| !a.is_empty() && a.iter().all(|i| i["state"] == "replicating"))
                    .unwrap_or(false)
        },
    );
    up.exec("UPDATE r.t6 SET v = v + 1 WHERE id % 3 = 0")
        .expect("write");
    // The merge scheduler runs every 2 s once nothing is in flight: watch several rounds.
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        let v = spans(&out, &servers).expect("spans");
        let items = of_table(&v, t6);
        assert_eq!(items.len(), 3, "the user's split was undone: {v}");
        assert!(
            items
                .iter()
                .all(|i| !i["operator"].as_str().unwrap_or("").starts_with("merge")),
            "a merge of the user's split: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_spans(&out, &servers, t6, 3, 60);

    request(&out, &servers, "merge_table", json!({"table_id": t6}));
    wait_spans(&out, &servers, t6, 1, 90);
    // The merge request finishes (and clears the mark) at the maintainer's next round.
    wait_for("the merge done and the mark cleared", 30, || {
        let v = spans(&out, &servers)?;
        let done = v["user_split_table_ids"] == json!([])
            && v["pending_requests"].as_array().map(|a| a.len()) == Some(0);
        done.then_some(()).ok_or(v.to_string())
    });
    finish(&out, &up, &up_url, &down_url, servers, dirs);
}
