//! Three `sluice server` nodes on etcd (started by `sluice_testkit::etcd` with auto-compaction)
//! replicating a real MariaDB to another through the MySQL sink while writes run: a kill -9 of
//! a non-coordinator node, a kill -9 of the coordinator's node, a SIGTERM of a node (handover);
//! the dead nodes' work moves to live nodes, and the final `sluice check` passes. Nodes paused
//! (SIGSTOP) past their lease fence themselves and rejoin; a frozen node's buffered sink rows
//! are never written after it wakes.

mod common;
use common::*;
use sluice_testkit::etcd::Etcd;
use std::time::{Duration, Instant};

fn coordinator(out: &Outputs, servers: &[Server]) -> Option<usize> {
    for (i, s) in servers.iter().enumerate() {
        if s.child.is_none() {
            continue;
        }
        if let Ok((200, v)) = api_raw(&s.url(), "GET", "/api/v2/status", None) {
            out.add(&v.to_string());
            if v["is_owner"] == true {
                return Some(i);
            }
        }
    }
    None
}

/// `n` servers on one etcd, data dirs tagged `tag`, once all of them are registered.
fn start_cluster(
    n: usize,
    tag: &str,
    up_url: &str,
    etcd_url: &str,
) -> (Vec<ScratchDir>, Vec<Server>) {
    let dirs: Vec<_> = (0..n).map(|i| tmpdir(&format!("{tag}{i}"))).collect();
    let servers: Vec<Server> = dirs
        .iter()
        .map(|d| Server::start_with(d, up_url, &["--etcd", etcd_url]))
        .collect();
    wait_captures(&servers, n);
    (dirs, servers)
}

/// Waits until `n` nodes are registered (a restarted node takes a moment to be placeable).
fn wait_captures(servers: &[Server], n: usize) {
    wait_for(&format!("{n} captures"), 30, || {
        let (_, v) = api_raw(&any_live(servers), "GET", "/api/v2/captures", None)?;
        (v["items"].as_array().map(|a| a.len()) == Some(n))
            .then_some(())
            .ok_or(v.to_string())
    });
}

/// End of a cluster test: no secret in any server log, servers stopped, data dirs removed.
fn finish(out: &Outputs, servers: Vec<Server>, dirs: Vec<ScratchDir>) {
    let logs: Vec<std::path::PathBuf> = servers.iter().map(|s| s.log.clone()).collect();
    let refs: Vec<&std::path::Path> = logs.iter().map(|p| p.as_path()).collect();
    out.assert_no_secret(&refs);
    // The servers stop before their data dirs are removed.
    drop(servers);
    drop(dirs);
}

fn any_live(servers: &[Server]) -> String {
    servers
        .iter()
        .find(|s| s.child.is_some())
        .map(|s| s.url())
        .unwrap_or_default()
}

/// Polls until no span of the changefeed is placed on `dead` and every span replicates;
/// returns how long it took.
fn wait_moved_off(
    out: &Outputs,
    servers: &[Server],
    cf: &str,
    dead: &str,
    secs: u64,
    t0: Instant,
) -> Duration {
    wait_for(&format!("work off {dead}"), secs, || {
        let (s, v) = api_raw(
            &any_live(servers),
            "GET",
            &format!("/api/v2/changefeeds/{cf}/spans"),
            None,
        )?;
        out.add(&v.to_string());
        let items = v["items"].as_array().ok_or(format!("{s} {v}"))?;
        if !items.is_empty()
            && items
                .iter()
                .all(|i| i["node_id"] != dead && i["state"] == "replicating")
        {
            Ok(())
        } else {
            Err(v.to_string())
        }
    });
    t0.elapsed()
}

/// Moves the table named `name` to `node` through the API and waits until it replicates there.
fn move_to(out: &Outputs, servers: &[Server], cf: &str, name: &str, node: &str) {
    let base = any_live(servers);
    let table = wait_for(&format!("{name} in the spans"), 30, || {
        let (_, v) = api_raw(
            &base,
            "GET",
            &format!("/api/v2/changefeeds/{cf}/spans"),
            None,
        )?;
        out.add(&v.to_string());
        v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["table_name"] == name))
            .and_then(|i| i["table_id"].as_u64())
            .ok_or(v.to_string())
    });
    let body = serde_json::json!({"table_id": table, "target_node_id": node});
    let (st, v) = api(
        out,
        &base,
        "POST",
        &format!("/api/v2/changefeeds/{cf}/move_table"),
        Some(&body),
    );
    assert_eq!(st, 202, "{v}");
    wait_for(&format!("{name} on {node}"), 30, || {
        let (_, v) = api_raw(
            &base,
            "GET",
            &format!("/api/v2/changefeeds/{cf}/spans"),
            None,
        )?;
        let ok = v["items"]
            .as_array()
            .map(|a| {
                a.iter().any(|i| {
                    i["table_name"] == name && i["node_id"] == node && i["state"] == "replicating"
                })
            })
            .unwrap_or(false);
        if ok {
            Ok(())
        } else {
            Err(v.to_string())
        }
    });
}

#[test]
fn three_nodes_kill_coordinator_and_worker_and_sigterm() {
    run(false);
}

/// The same through a storage sink shared by the nodes (a local directory), applied to the
/// downstream with `sluice consume` at the end.
#[test]
fn three_nodes_file_sink_then_consume() {
    run(true);
}

fn run(files: bool) {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (_down, down_url) = mariadb_with_user(DOWN_PASS);
    let dirs: Vec<_> = (0..3).map(|i| tmpdir(&format!("cluster{i}"))).collect();
    let etcd_url = etcd.url();
    let mut servers: Vec<Server> = dirs
        .iter()
        .map(|d| Server::start_with(d, &up_url, &["--etcd", &etcd_url]))
        .collect();
    wait_for("3 captures", 30, || {
        let (_, v) = api_raw(&servers[0].url(), "GET", "/api/v2/captures", None)?;
        if v["items"].as_array().map(|a| a.len()) == Some(3) {
            Ok(())
        } else {
            Err(v.to_string())
        }
    });
    // Tables exist before the changefeed: create them on both sides.
    let ddl = "CREATE DATABASE c; CREATE TABLE c.t1 (id INT PRIMARY KEY, v INT); CREATE TABLE c.t2 (id INT PRIMARY KEY, v INT); CREATE TABLE c.t3 (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    _down.exec(ddl).expect("ddl");
    let storage = format!("file://{}/out?protocol=canal-json&enable-tidb-extension=true&enable-table-across-nodes=true&flush-interval=200ms", dirs[0].display());
    let sink = if files {
        storage.clone()
    } else {
        format!("{down_url}/?worker-count=4")
    };
    create_changefeed(&out, &servers[1].url(), "ha", &sink);
    wait_checkpoint(&out, &servers[0].url(), "ha", master_ts(&up), 60);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || i < 30 {
                let t = i % 3 + 1;
                let _ = up.exec(&format!(
                    "INSERT INTO c.t{t} VALUES ({i}, {i}) ON DUPLICATE KEY UPDATE v = v + 1; UPDATE c.t1 SET v = v + 1 WHERE id = {}; DELETE FROM c.t2 WHERE id = {};",
                    i / 2,
                    i.saturating_sub(7)
                ));
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            up
        })
    };

    // 1. kill -9 a node that is not the coordinator.
    let c = coordinator(&out, &servers).expect("a coordinator");
    let victim = (c + 1) % 3;
    let victim_id = servers[victim].addr.clone();
    move_to(&out, &servers, "ha", "c.t2", &victim_id);
    let t0 = Instant::now();
    servers[victim].kill9();
    let took = wait_moved_off(&out, &servers, "ha", &victim_id, 30, t0);
    eprintln!("work of killed worker {victim_id} rescheduled {took:?} after the kill");
    servers[victim].restart_after_kill();
    wait_captures(&servers, 3);

    // 2. kill -9 the coordinator's node.
    let c = coordinator(&out, &servers).expect("a coordinator");
    let cid = servers[c].addr.clone();
    move_to(&out, &servers, "ha", "c.t3", &cid);
    let t0 = Instant::now();
    servers[c].kill9();
    wait_for("a new coordinator", 30, || {
        coordinator(&out, &servers)
            .filter(|n| *n != c)
            .ok_or_else(|| "none".to_string())
    });
    let took = wait_moved_off(&out, &servers, "ha", &cid, 30, t0);
    eprintln!("work of killed coordinator {cid} rescheduled {took:?} after the kill");
    servers[c].restart_after_kill();
    // The next move may target it: a move to a node not yet registered is rejected.
    wait_captures(&servers, 3);

    // 3. SIGTERM a node: it hands its work over and exits 0.
    let t = (coordinator(&out, &servers).expect("a coordinator") + 2) % 3;
    let tid = servers[t].addr.clone();
    move_to(&out, &servers, "ha", "c.t1", &tid);
    let st = servers[t].sigterm().expect("exit status");
    assert!(st.success(), "SIGTERM exit: {st}");
    let t0 = Instant::now();
    wait_moved_off(&out, &servers, "ha", &tid, 30, t0);
    servers[t].restart_after_kill();

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let up = writer.join().expect("writer");
    let target = master_ts(&up);
    wait_checkpoint(&out, &any_live(&servers), "ha", target, 120);
    if files {
        wait_for("the storage metadata file", 30, || {
            let m =
                std::fs::read_to_string(dirs[0].join("out/metadata")).map_err(|e| e.to_string())?;
            let v: serde_json::Value = serde_json::from_str(&m).map_err(|e| e.to_string())?;
            if v["checkpoint-ts"].as_u64().unwrap_or(0) >= target {
                Ok(())
            } else {
                Err(m)
            }
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
    }
    let r = check(&out, &up_url, &down_url, "c.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    let (_, v) = api(
        &out,
        &any_live(&servers),
        "GET",
        "/api/v2/changefeeds/ha",
        None,
    );
    assert_eq!(v["state"], "normal", "{v}");
    eprintln!("final changefeed: {v}");
    finish(&out, servers, dirs);
}

/// A node paused (SIGSTOP) for longer than the lease TTL while writes run: the others take its
/// work; when it resumes it finds its lease lapsed, fences itself (drops everything) and rejoins
/// as a new incarnation; nothing is lost or doubled (final check).
#[test]
fn paused_node_fences_itself_and_rejoins() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let (dirs, servers) = start_cluster(3, "fence", &up_url, &etcd.url());
    let ddl = "CREATE DATABASE f; CREATE TABLE f.t1 (id INT PRIMARY KEY, v INT); CREATE TABLE f.t2 (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    create_changefeed(&out, &servers[0].url(), "fence", &format!("{down_url}/"));
    wait_checkpoint(&out, &servers[0].url(), "fence", master_ts(&up), 60);
    let c = coordinator(&out, &servers).expect("coordinator");
    let x = (c + 1) % 3;
    let xid = servers[x].addr.clone();
    move_to(&out, &servers, "fence", "f.t1", &xid);
    let xpid = servers[x].child.as_ref().map(|ch| ch.id()).expect("pid");
    assert!(std::process::Command::new("kill")
        .args(["-STOP", &xpid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false));
    for i in 0..200 {
        up.exec(&format!("INSERT INTO f.t1 VALUES ({i}, {i}); INSERT INTO f.t2 VALUES ({i}, {i}); UPDATE f.t1 SET v = v + 1 WHERE id = {};", i / 2)).expect("write");
        std::thread::sleep(Duration::from_millis(40));
    }
    // The others took t1 over while x was stopped.
    let others: Vec<&Server> = servers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != x)
        .map(|(_, s)| s)
        .collect();
    let base = others[0].url();
    wait_for("t1 off the paused node", 30, || {
        let (_, v) = api_raw(&base, "GET", "/api/v2/changefeeds/fence/spans", None)?;
        let ok = v["items"]
            .as_array()
            .map(|a| {
                !a.is_empty()
                    && a.iter()
                        .all(|i| i["node_id"] != xid.as_str() && i["state"] == "replicating")
            })
            .unwrap_or(false);
        ok.then_some(()).ok_or(v.to_string())
    });
    assert!(std::process::Command::new("kill")
        .args(["-CONT", &xpid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false));
    wait_for("the paused node to fence itself and rejoin", 30, || {
        let log = std::fs::read_to_string(&servers[x].log).map_err(|e| e.to_string())?;
        let (_, v) = api_raw(&base, "GET", "/api/v2/captures", None)?;
        let back = v["items"]
            .as_array()
            .map(|a| a.iter().any(|i| i["id"] == xid.as_str()))
            .unwrap_or(false);
        (log.contains("fencing") && log.contains("rejoined") && back)
            .then_some(())
            .ok_or(format!("back={back}"))
    });
    up.exec("INSERT INTO f.t2 VALUES (100000, 1)")
        .expect("write");
    wait_checkpoint(&out, &base, "fence", master_ts(&up), 120);
    let r = check(&out, &up_url, &down_url, "f.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    finish(&out, servers, dirs);
}

/// Every file name under `root` (relative), recursively; nothing when `root` does not exist.
fn names_under(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Rows a node handed to the sink of changefeed `cf` (its `sluice_sink_rows_total`).
fn sink_rows(server: &Server, cf: &str) -> Result<u64, String> {
    let (_, v) = api_raw(&server.url(), "GET", "/metrics", None)?;
    let text = v.as_str().ok_or(v.to_string())?;
    let prefix = format!("sluice_sink_rows_total{{changefeed=\"{cf}\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

/// A node frozen (SIGSTOP) right after its storage sink accepted rows and before it flushed them
/// (`flush-interval=10m`: only a DDL or a close flushes here), for longer than its lease TTL:
/// the other node takes the table over and writes newer rows. When the frozen node wakes, its
/// lease has lapsed: it fences itself and closes its dispatchers, and its sink refuses the
/// close's flush (the write fence), so no file of its old dispatcher ever appears (before the
/// sink-level fence, that close wrote the stale rows after the newer ones). The output then
/// replays to the upstream state.
#[test]
fn a_frozen_node_does_not_write_its_buffered_rows_after_wake() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let (dirs, servers) = start_cluster(2, "frozen", &up_url, &etcd.url());
    let ddl = "CREATE DATABASE z; CREATE TABLE z.t (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let root = dirs[0].join("out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true&enable-table-across-nodes=true&flush-interval=10m",
        root.display()
    );
    create_changefeed(&out, &servers[0].url(), "frozen", &storage);
    wait_checkpoint(&out, &servers[0].url(), "frozen", master_ts(&up), 60);
    let c = coordinator(&out, &servers).expect("coordinator");
    let x = 1 - c;
    let xid = servers[x].addr.clone();
    move_to(&out, &servers, "frozen", "z.t", &xid);
    // The dispatcher of z.t on x: its files would carry its id.
    let disp = wait_for("z.t's dispatcher on x", 30, || {
        let (_, spans) = api_raw(
            &servers[c].url(),
            "GET",
            "/api/v2/changefeeds/frozen/spans",
            None,
        )?;
        let table = spans["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["table_name"] == "z.t"))
            .map(|i| i["table_id"].clone())
            .ok_or(spans.to_string())?;
        let (_, v) = api_raw(
            &servers[x].url(),
            "GET",
            "/internal/v1/dispatchers/frozen",
            None,
        )?;
        out.add(&v.to_string());
        v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["table_id"] == table))
            .and_then(|i| i["dispatcher_id"].as_str())
            .map(str::to_string)
            .ok_or(v.to_string())
    });
    let base = sink_rows(&servers[x], "frozen").expect("metrics");
    up.exec(
        &(1..=50)
            .map(|i| format!("INSERT INTO z.t VALUES ({i}, {i});"))
            .collect::<String>(),
    )
    .expect("rows");
    wait_for("x's sink to accept the rows", 30, || {
        match sink_rows(&servers[x], "frozen")? {
            n if n >= base + 50 => Ok(()),
            n => Err(format!("{n} rows")),
        }
    });
    let xpid = servers[x].child.as_ref().map(|ch| ch.id()).expect("pid");
    assert!(std::process::Command::new("kill")
        .args(["-STOP", &xpid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false));
    let frozen_at = names_under(&root);
    assert!(
        frozen_at.iter().all(|n| !n.contains(&disp)),
        "x flushed before it froze (the test proves nothing): {frozen_at:?}"
    );
    // Newer rows, written by the node that takes z.t over; the ALTER makes it flush them now.
    up.exec("UPDATE z.t SET v = v + 1000; INSERT INTO z.t VALUES (51, 51);")
        .expect("newer rows");
    let other = servers[c].url();
    // A request forwarded to the frozen node (when it ran the maintainer) waits 30 s for it.
    wait_for("z.t off the frozen node", 90, || {
        let (_, v) = api_raw(&other, "GET", "/api/v2/changefeeds/frozen/spans", None)?;
        let ok = v["items"]
            .as_array()
            .map(|a| {
                !a.is_empty()
                    && a.iter()
                        .all(|i| i["node_id"] != xid.as_str() && i["state"] == "replicating")
            })
            .unwrap_or(false);
        ok.then_some(()).ok_or(v.to_string())
    });
    up.exec("ALTER TABLE z.t ADD COLUMN w INT DEFAULT 7")
        .expect("alter");
    wait_checkpoint(&out, &other, "frozen", master_ts(&up), 60);
    assert!(std::process::Command::new("kill")
        .args(["-CONT", &xpid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false));
    wait_for("the frozen node to fence itself and rejoin", 30, || {
        let log = std::fs::read_to_string(&servers[x].log).map_err(|e| e.to_string())?;
        let (_, v) = api_raw(&other, "GET", "/api/v2/captures", None)?;
        let back = v["items"]
            .as_array()
            .map(|a| a.iter().any(|i| i["id"] == xid.as_str()))
            .unwrap_or(false);
        (log.contains("fencing") && log.contains("rejoined") && back)
            .then_some(())
            .ok_or(format!("back={back}"))
    });
    // Whatever the woken node's sink would still do has had time to land.
    std::thread::sleep(Duration::from_secs(3));
    let after = names_under(&root);
    let stale: Vec<&String> = after.iter().filter(|n| n.contains(&disp)).collect();
    assert!(
        stale.is_empty(),
        "the frozen node wrote its buffered rows after it woke: {stale:?}"
    );
    let log = std::fs::read_to_string(&servers[x].log).unwrap_or_default();
    assert!(
        log.contains("lease is not fresh"),
        "the woken node's sink refused nothing? {log}"
    );
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
    let r = check(&out, &up_url, &down_url, "z.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    finish(&out, servers, dirs);
}

/// A node that joins after tables were created and dropped (its own snapshot would number the
/// pre-existing tables differently) takes the cluster's shared snapshot, so table ids agree:
/// a table moved onto it replicates correctly.
#[test]
fn a_late_node_shares_the_snapshot_and_agrees_on_table_ids() {
    let out = Outputs::default();
    let etcd = Etcd::start().expect("etcd");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE c; CREATE TABLE c.b (id INT PRIMARY KEY, v INT); CREATE TABLE c.d (id INT PRIMARY KEY, v INT);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let etcd_url = etcd.url();
    let dirs: Vec<_> = (0..2).map(|i| tmpdir(&format!("late{i}"))).collect();
    let mut servers = vec![Server::start_with(
        &dirs[0],
        &up_url,
        &["--etcd", &etcd_url],
    )];
    create_changefeed(
        &out,
        &servers[0].url(),
        "late",
        &format!("{down_url}/?worker-count=2"),
    );
    // A table that sorts before the others appears: a fresh snapshot would shift their numbers.
    up.exec("CREATE TABLE c.a (id INT PRIMARY KEY, v INT); INSERT INTO c.a VALUES (1, 1); INSERT INTO c.b VALUES (1, 1), (2, 2); INSERT INTO c.d VALUES (5, 5);")
        .expect("writes");
    wait_checkpoint(&out, &servers[0].url(), "late", master_ts(&up), 60);
    servers.push(Server::start_with(
        &dirs[1],
        &up_url,
        &["--etcd", &etcd_url],
    ));
    let late = servers[1].addr.clone();
    wait_for("2 captures", 30, || {
        let (_, v) = api_raw(&servers[0].url(), "GET", "/api/v2/captures", None)?;
        if v["items"].as_array().map(|a| a.len()) == Some(2) {
            Ok(())
        } else {
            Err(v.to_string())
        }
    });
    move_to(&out, &servers, "late", "c.b", &late);
    move_to(&out, &servers, "late", "c.d", &late);
    up.exec("UPDATE c.b SET v = 20 WHERE id = 2; INSERT INTO c.b VALUES (3, 3); INSERT INTO c.d VALUES (6, 6); DELETE FROM c.d WHERE id = 5;").expect("more writes");
    wait_checkpoint(&out, &servers[0].url(), "late", master_ts(&up), 60);
    let r = check(&out, &up_url, &down_url, "c.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    for s in &servers {
        out.assert_no_secret(&[&s.log]);
    }
    drop(servers);
    drop(dirs);
}
