//! End-to-end, on a single-node `sluice server` against real MariaDB instances: generated
//! columns (VIRTUAL, PERSISTENT, STORED; from the snapshot and from DDL) reach a MySQL sink and
//! a file sink, `sluice consume` applies the files, and `sluice check` finds both downstreams
//! equal; a `CREATE TABLE … LIKE` replays after the ALTER of its source (issue 10, reproductions
//! 3 and 4, and 1 for PERSISTENT).

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

/// The schema file of `db.table` with the highest table version under a storage root.
fn latest_schema_file(root: &Path, db: &str, table: &str) -> Value {
    let meta = root.join(db).join(table).join("meta");
    let mut names: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(&meta)
        .unwrap_or_else(|e| panic!("{}: {e}", meta.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let n = p.file_name()?.to_str()?.to_string();
            let ver = n.strip_prefix("schema_")?.split('_').next()?.parse().ok()?;
            Some((ver, p))
        })
        .collect();
    names.sort();
    let (_, path) = names
        .pop()
        .unwrap_or_else(|| panic!("no schema file in {}", meta.display()));
    serde_json::from_slice(&std::fs::read(&path).expect("schema file")).expect("schema json")
}

/// `ColumnName` → `ColumnGenerated` (or "") of a schema file.
fn generated_flags(def: &Value) -> Vec<(String, String)> {
    def["Columns"]
        .as_array()
        .expect("Columns")
        .iter()
        .map(|c| {
            let g = c["ColumnGenerated"].as_str().unwrap_or("").to_string();
            (c["ColumnName"].as_str().unwrap_or("").to_string(), g)
        })
        .collect()
}

const SNAPSHOT_TABLE: &str = "CREATE TABLE gen.snap (id INT PRIMARY KEY, v INT, \
    dbl INT AS (v*2) VIRTUAL, inc INT AS (v+1) PERSISTENT, \
    u VARCHAR(20) GENERATED ALWAYS AS (concat('u', v)) STORED, UNIQUE KEY (inc))";

/// Rows and DDL on tables with generated columns, created before and after the changefeed.
fn generated_workload(up: &sluice_testkit::mariadb::MariaDb) {
    up.exec(
        "INSERT INTO gen.snap (id, v) VALUES (1, 10), (2, 20), (3, 30);
         UPDATE gen.snap SET v = v + 100 WHERE id = 2;
         DELETE FROM gen.snap WHERE id = 3;
         CREATE TABLE gen.g3 (id INT PRIMARY KEY, v INT, s INT AS (v+1) PERSISTENT);
         INSERT INTO gen.g3 (id, v) SELECT seq, seq * 3 FROM gen.seq_1_to_200;
         UPDATE gen.g3 SET v = -v WHERE id % 3 = 0;
         CREATE TABLE gen.t2 (id INT PRIMARY KEY, val INT);
         INSERT INTO gen.t2 VALUES (1, 5);
         ALTER TABLE gen.t2 ADD COLUMN g INT AS (val*2) VIRTUAL;
         INSERT INTO gen.t2 (id, val) VALUES (2, 7), (3, 9);
         UPDATE gen.t2 SET val = 70 WHERE id = 2;
         CREATE TABLE gen.nokey (a INT, b INT AS (a*10) VIRTUAL, c VARCHAR(8));
         INSERT INTO gen.nokey (a, c) VALUES (1, 'x'), (2, 'y'), (3, 'z');
         UPDATE gen.nokey SET c = 'yy' WHERE a = 2;
         DELETE FROM gen.nokey WHERE a = 3;
         CREATE TABLE gen.ub (id INT PRIMARY KEY, c BLOB, UNIQUE KEY (c));
         INSERT INTO gen.ub VALUES (1, 'x'), (2, 'y');
         UPDATE gen.ub SET c = 'yy' WHERE id = 2;
         CREATE TABLE gen.sv (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING;
         INSERT INTO gen.sv VALUES (1, 1), (2, 2);
         UPDATE gen.sv SET v = 20 WHERE id = 2;
         DELETE FROM gen.sv WHERE id = 1;",
    )
    .expect("generated workload");
}

#[test]
fn generated_columns_replicate_to_mysql_and_through_files() {
    let out = Outputs::default();
    let dir = tmpdir("generated");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let (consumed, consumed_url) = mariadb_with_user(DOWN_PASS);
    // A table in the snapshot: its definition is on every downstream beforehand, as a user
    // creates it.
    for db in [&up, &down, &consumed] {
        db.exec(&format!("CREATE DATABASE gen; {SNAPSHOT_TABLE}"))
            .expect("snapshot table");
    }
    let server = Server::start(&dir, &up_url);
    // The keyless table is accepted with force-replicate.
    create_changefeed(
        &out,
        &server.url(),
        "to-mysql",
        &format!("{down_url}/?force-replicate=true"),
    );
    let root = dir.join("out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true&flush-interval=200ms",
        root.display()
    );
    create_changefeed(&out, &server.url(), "to-files", &storage);
    generated_workload(&up);
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "to-mysql", target, 120);
    wait_checkpoint(&out, &server.url(), "to-files", target, 120);
    let r = check(&out, &up_url, &down_url, "gen.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    // ub: the hidden DB_ROW_HASH_1 of a UNIQUE key on a BLOB is in the binlog, never written;
    // sv: a system-versioned table's row_start/row_end likewise.
    for t in ["snap", "g3", "t2", "nokey", "ub", "sv"] {
        assert!(
            r.stdout.contains(&format!("gen.{t}: equal")),
            "{}",
            r.stdout
        );
    }
    let r = sluice(
        &out,
        &["cli", "--server", &server.url(), "changefeed", "list"],
    );
    assert!(
        r.stdout.contains("to-mysql") && !r.stdout.contains("error"),
        "{}",
        r.stdout
    );
    // Schema files flag generated columns, from the snapshot and from DDL.
    let flags = |t: &str| generated_flags(&latest_schema_file(&root, "gen", t));
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        flags("snap"),
        pairs(&[
            ("id", ""),
            ("v", ""),
            ("dbl", "VIRTUAL"),
            ("inc", "STORED"),
            ("u", "STORED")
        ])
    );
    assert_eq!(
        flags("g3"),
        pairs(&[("id", ""), ("v", ""), ("s", "STORED")])
    );
    assert_eq!(
        flags("t2"),
        pairs(&[("id", ""), ("val", ""), ("g", "VIRTUAL")])
    );
    // The files, consumed into a third server, equal the upstream too.
    wait_for("the storage metadata file", 30, || {
        let m = std::fs::read_to_string(root.join("metadata")).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&m).map_err(|e| e.to_string())?;
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
            &format!("{consumed_url}/?force-replicate=true"),
        ],
    );
    assert_eq!(r.code, 0, "consume: {} {}", r.stdout, r.stderr);
    let r = check(&out, &up_url, &consumed_url, "gen.*");
    assert_eq!(r.code, 0, "check after consume: {} {}", r.stdout, r.stderr);
    out.assert_no_secret(&[&server.log]);
    drop(server);
}

#[test]
fn create_table_like_replays_after_the_alter_of_its_source() {
    let out = Outputs::default();
    let dir = tmpdir("like");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    create_changefeed(&out, &server.url(), "like", &format!("{down_url}/"));
    // The source's dispatcher has a large transaction to write before its ALTER, while the
    // table trigger (which writes the CREATE … LIKE) has nothing else to do: without the
    // barrier on the source, the copy is created downstream from the old definition.
    up.exec(
        "CREATE DATABASE gen2;
         CREATE TABLE gen2.d (id INT PRIMARY KEY, pad VARCHAR(64));
         INSERT INTO gen2.d SELECT seq, REPEAT('p', 64) FROM gen2.seq_1_to_1000;
         ALTER TABLE gen2.d ADD COLUMN x INT;
         CREATE TABLE gen2.e LIKE gen2.d;
         INSERT INTO gen2.e VALUES (1, 'a', 1);
         CREATE TABLE gen2.p (id INT PRIMARY KEY);
         ALTER TABLE gen2.p ADD COLUMN k INT, ADD UNIQUE KEY (k);
         CREATE TABLE gen2.c (id INT PRIMARY KEY, pk INT, FOREIGN KEY (pk) REFERENCES gen2.p (k));
         INSERT INTO gen2.p VALUES (1, 10);
         INSERT INTO gen2.c VALUES (1, 10);",
    )
    .expect("workload");
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "like", target, 120);
    let cols = down
        .query("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'gen2' AND TABLE_NAME = 'e' ORDER BY ORDINAL_POSITION")
        .expect("columns of e");
    let cols: Vec<&str> = cols.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        cols,
        ["id", "pad", "x"],
        "the copy has the source's definition at the LIKE"
    );
    let r = check(&out, &up_url, &down_url, "gen2.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    for t in ["d", "e", "p", "c"] {
        assert!(
            r.stdout.contains(&format!("gen2.{t}: equal")),
            "{}",
            r.stdout
        );
    }
    out.assert_no_secret(&[&server.log]);
    drop(server);
}

/// MariaDB's UUID, INET4 and INET6 columns (stored as bytes, logged as bytes) reach a MySQL
/// downstream and the files as the values users wrote, not as raw bytes (ERROR 1292).
#[test]
fn uuid_and_inet_values_replicate_as_values() {
    let out = Outputs::default();
    let dir = tmpdir("inet");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let ddl = "CREATE DATABASE net; CREATE TABLE net.snap (id INT PRIMARY KEY, u UUID, a INET4, b INET6);";
    up.exec(ddl).expect("ddl");
    down.exec(ddl).expect("ddl");
    let server = Server::start(&dir, &up_url);
    create_changefeed(&out, &server.url(), "net", &down_url);
    let root = dir.join("out");
    let storage = format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true&flush-interval=200ms",
        root.display()
    );
    create_changefeed(&out, &server.url(), "net-files", &storage);
    up.exec(
        "INSERT INTO net.snap VALUES (1, '123e4567-e89b-12d3-a456-426614174000', '10.1.2.3', '2001:db8::1'),
                                     (2, '00112233-4455-6677-8899-aabbccddeeff', '255.0.0.1', '::ffff:1.2.3.4');
         UPDATE net.snap SET b = 'fe80::1' WHERE id = 2;
         CREATE TABLE net.ddl (u UUID PRIMARY KEY, a INET6);
         INSERT INTO net.ddl VALUES ('6ccd780c-baba-1026-9564-5b8c656024db', '::1');",
    )
    .expect("rows");
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "net", target, 60);
    wait_checkpoint(&out, &server.url(), "net-files", target, 60);
    let r = check(&out, &up_url, &down_url, "net.*");
    assert_eq!(r.code, 0, "check: {} {}", r.stdout, r.stderr);
    let got = down
        .query_one("SELECT CONCAT(u, ' ', a, ' ', b) FROM net.snap WHERE id = 2")
        .expect("row");
    assert_eq!(
        got,
        "00112233-4455-6677-8899-aabbccddeeff 255.0.0.1 fe80::1"
    );
    let files = std::fs::read_dir(root.join("net").join("snap"))
        .map(|_| walk(&root.join("net").join("snap")))
        .unwrap_or_default();
    let text: String = files
        .iter()
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains("meta")
        })
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    assert!(
        text.contains("123e4567-e89b-12d3-a456-426614174000") && text.contains("10.1.2.3"),
        "{text}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
