//! End to end with partitioned upstream tables: a single-node server replicates a RANGE table
//! that existed before the changefeed (layout from the snapshot), a HASH and a LIST COLUMNS
//! table created mid-stream (layout from the DDL), partition DDLs (ADD, REORGANIZE, TRUNCATE,
//! DROP PARTITION) and rows in between, to a file sink with the default
//! `enable-partition-separator=true`. Checked three ways: every row of a partition directory is
//! one the upstream server itself stores in that partition; `sluice consume` + `sluice check`
//! end equal to the upstream; with `enable-partition-separator=false` no partition directory
//! appears.

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const RANGE_DDL: &str = "CREATE TABLE p.r (id INT NOT NULL, v VARCHAR(16), PRIMARY KEY (id))
  PARTITION BY RANGE (id) (PARTITION lo VALUES LESS THAN (100), PARTITION mid VALUES LESS THAN (200),
  PARTITION hi VALUES LESS THAN MAXVALUE)";

fn workload(up: &sluice_testkit::mariadb::MariaDb) {
    let mut sql = String::from("BEGIN;");
    for id in (0..300).step_by(7) {
        sql.push_str(&format!("INSERT INTO p.r VALUES ({id}, 'r{id}');"));
    }
    sql.push_str("COMMIT;");
    up.exec(&sql).expect("range rows");
    up.exec(
        "CREATE TABLE p.h (id BIGINT NOT NULL PRIMARY KEY, n INT) PARTITION BY HASH (id) PARTITIONS 5;
         CREATE TABLE p.l (code VARCHAR(8) NOT NULL, id INT NOT NULL, PRIMARY KEY (code, id))
           PARTITION BY LIST COLUMNS (code) (PARTITION eu VALUES IN ('de', 'fr', 'it'),
           PARTITION am VALUES IN ('us', 'ca'), PARTITION other VALUES IN ('jp', 'au'));",
    )
    .expect("mid-stream tables");
    let mut sql = String::from("BEGIN;");
    for id in -40i64..40 {
        sql.push_str(&format!("INSERT INTO p.h VALUES ({id}, {});", id * 3));
    }
    for (i, code) in ["de", "US", "fr", "ca", "jp", "Au", "it"]
        .iter()
        .enumerate()
    {
        sql.push_str(&format!("INSERT INTO p.l VALUES ('{code}', {i});"));
    }
    sql.push_str(
        "UPDATE p.h SET n = n + 1 WHERE id % 3 = 0; DELETE FROM p.h WHERE id % 10 = 0; COMMIT;",
    );
    up.exec(&sql).expect("hash and list rows");
    // Partition DDLs: the layout changes, the columns do not.
    up.exec(
        "ALTER TABLE p.r REORGANIZE PARTITION hi INTO (PARTITION hi VALUES LESS THAN (400), PARTITION top VALUES LESS THAN MAXVALUE);
         ALTER TABLE p.r TRUNCATE PARTITION lo;
         ALTER TABLE p.h COALESCE PARTITION 2;
         ALTER TABLE p.l ADD PARTITION (PARTITION asia VALUES IN ('cn', 'in'));",
    )
    .expect("partition ddls");
    let mut sql = String::from("BEGIN;");
    for id in (1..600).step_by(11) {
        sql.push_str(&format!("REPLACE INTO p.r VALUES ({id}, 'late{id}');"));
    }
    for id in 100i64..130 {
        sql.push_str(&format!("INSERT INTO p.h VALUES ({id}, 0);"));
    }
    sql.push_str("INSERT INTO p.l VALUES ('cn', 100), ('IN', 101), ('de', 102); COMMIT;");
    up.exec(&sql).expect("rows after the partition ddls");
    up.exec("ALTER TABLE p.l DROP PARTITION other; INSERT INTO p.l VALUES ('ca', 200);")
        .expect("drop partition");
}

/// Every file under `root`, as (path, path relative to `root`).
fn files_under(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .to_string();
                out.push((p, rel));
            }
        }
    }
    out
}

/// Every data file under `root`: (table, version, partition dir, file contents).
fn data_files(root: &Path) -> Vec<(String, u64, Option<usize>, String)> {
    let mut out = Vec::new();
    for (p, rel) in files_under(root) {
        let parts: Vec<&str> = rel.split('/').collect();
        let name = parts.last().copied().unwrap_or_default();
        if parts.len() < 4
            || !name.starts_with("CDC")
            || !name.ends_with(".json")
            || parts.contains(&"meta")
        {
            continue;
        }
        let version: u64 = parts[2].parse().expect("version dir");
        // <db>/<table>/<ver>[/<partition>]/<date>/CDC…: the date dir is last.
        let partition = (parts.len() == 6).then(|| {
            parts[3]
                .parse::<usize>()
                .expect("partition dir is a number")
        });
        out.push((
            format!("{}.{}", parts[0], parts[1]),
            version,
            partition,
            std::fs::read_to_string(&p).expect("read"),
        ));
    }
    out
}

/// Partition names of a table version, from its schema file (`SluiceSchema.partitioning`).
fn partition_names(root: &Path, table: &str, version: u64) -> Vec<String> {
    let (db, t) = table.split_once('.').expect("db.table");
    let meta = root.join(db).join(t).join("meta");
    for e in std::fs::read_dir(&meta).expect("meta dir").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with(&format!("schema_{version}_")) {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).expect("read"))
                .expect("json");
            return v["SluiceSchema"]["partitioning"]["partitions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
    }
    panic!(
        "no schema file for {table} version {version} in {}",
        meta.display()
    );
}

fn wait_files(out: &Outputs, server: &Server, id: &str, root: &Path, target: u64) {
    wait_checkpoint(out, &server.url(), id, target, 120);
    wait_for("the storage metadata file", 30, || {
        let m = std::fs::read_to_string(root.join("metadata")).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&m).map_err(|e| e.to_string())?;
        if v["checkpoint-ts"].as_u64().unwrap_or(0) >= target {
            Ok(())
        } else {
            Err(m)
        }
    });
}

#[test]
fn partitioned_tables_go_to_partition_directories_and_consume_back_equal() {
    let out = Outputs::default();
    let dir = tmpdir("partitions");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    up.exec(&format!("CREATE DATABASE p; {RANGE_DDL}"))
        .expect("upstream");
    down.exec(&format!("CREATE DATABASE p; {RANGE_DDL}"))
        .expect("downstream seeded like the upstream");
    let server = Server::start(&dir, &up_url);
    let root = dir.join("out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true&flush-interval=200ms",
        root.display()
    );
    let flat_root = dir.join("flat");
    let flat = format!(
        "file://{}?protocol=csv&enable-partition-separator=false&flush-interval=200ms",
        flat_root.display()
    );
    create_changefeed(&out, &server.url(), "parts", &storage);
    create_changefeed(&out, &server.url(), "flat", &flat);
    workload(&up);
    let target = master_ts(&up);
    wait_files(&out, &server, "parts", &root, target);
    wait_files(&out, &server, "flat", &flat_root, target);

    // 1. Rows inserted after the last partition DDL of their table sit in the directory of the
    //    partition the server stores them in now.
    let mut checked = 0;
    let mut dirs_seen: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    let files = data_files(&root);
    let latest: BTreeMap<String, u64> =
        files.iter().fold(BTreeMap::new(), |mut m, (t, v, _, _)| {
            let e = m.entry(t.clone()).or_insert(*v);
            *e = (*e).max(*v);
            m
        });
    for (table, version, partition, text) in &files {
        let partition = partition
            .unwrap_or_else(|| panic!("{table} v{version}: data outside a partition directory"));
        dirs_seen
            .entry(table.clone())
            .or_default()
            .insert(partition);
        if latest.get(table) != Some(version) {
            continue;
        }
        let names = partition_names(&root, table, *version);
        let pname = names.get(partition).unwrap_or_else(|| {
            panic!("{table} v{version}: partition dir {partition} beyond {names:?}")
        });
        let key = if table == "p.l" {
            "CONCAT(code, ':', id)"
        } else {
            "id"
        };
        let stored: BTreeSet<String> = up
            .query(&format!("SELECT {key} FROM {table} PARTITION (`{pname}`)"))
            .expect("partition query")
            .into_iter()
            .filter_map(|r| r.into_iter().next())
            .collect();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("canal-json line");
            if v["type"] != "INSERT" {
                continue;
            }
            for row in v["data"].as_array().into_iter().flatten() {
                let k = if table == "p.l" {
                    format!(
                        "{}:{}",
                        row["code"].as_str().unwrap_or_default(),
                        row["id"].as_str().unwrap_or_default()
                    )
                } else {
                    row["id"].as_str().unwrap_or_default().to_string()
                };
                if stored.contains(&k) {
                    checked += 1;
                } else {
                    // Not stored there now: it must be stored nowhere else either (deleted later).
                    let anywhere = up
                        .query_one(&format!("SELECT COUNT(*) FROM {table} WHERE {key} = '{k}'"))
                        .expect("count");
                    assert_eq!(anywhere, "0", "{table} row {k} is in partition dir {partition} ({pname}) but the server stores it elsewhere");
                }
            }
        }
    }
    assert!(
        checked >= 60,
        "too few rows checked against the server's partitions: {checked}"
    );
    assert!(
        dirs_seen.get("p.h").is_some_and(|s| s.len() >= 3),
        "hash rows spread over partitions: {dirs_seen:?}"
    );
    assert!(
        dirs_seen.get("p.r").is_some_and(|s| s.len() >= 3),
        "range rows spread over partitions: {dirs_seen:?}"
    );

    // 2. The layout consumes back to the upstream state (partition DDLs replayed downstream).
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
    let r = check(&out, &up_url, &down_url, "p.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    for t in ["p.r: equal", "p.h: equal", "p.l: equal"] {
        assert!(r.stdout.contains(t), "{t} missing: {}", r.stdout);
    }

    // 3. Without the separator: no partition directory (<db>/<table>/<ver>/<date>/CDC…).
    let mut flat_files = 0;
    for (p, rel) in files_under(&flat_root) {
        if p.extension().is_some_and(|x| x == "csv") {
            assert_eq!(rel.split('/').count(), 5, "unexpected path {rel}");
            flat_files += 1;
        }
    }
    assert!(
        flat_files >= 3,
        "flat layout has too few files: {flat_files}"
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
}
