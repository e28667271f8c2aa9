//! Storage sinks end to end through the binary: the layouts the README and the demo write
//! (canal-json without the TiDB extension, csv without commit ts) carry no commit ts in their rows;
//! `sluice consume` must still apply them in order (DML interleaved across tables that exist
//! before the server starts, an ALTER, a CREATE, a TRUNCATE, a RENAME, a DROP) so that
//! `sluice check` finds the downstream equal to the upstream. And a storage location that cannot
//! be used (an S3 endpoint nothing listens on, a missing bucket, a directory that refuses writes)
//! is a clear error at `changefeed create`, and nothing is created.

mod common;
use common::*;
use sluice_testkit::mariadb::MariaDb;
use std::path::Path;

/// Tables that exist before the server starts (so their schema comes from the snapshot, table
/// version 0), with the same rows on both sides.
const SEED: &str = "CREATE DATABASE app;
    CREATE TABLE app.a (id INT PRIMARY KEY, v VARCHAR(32), n INT);
    CREATE TABLE app.b (id BIGINT PRIMARY KEY, s VARCHAR(64), at DATETIME(3));
    CREATE TABLE app.gone (id INT PRIMARY KEY);
    INSERT INTO app.a VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3);
    INSERT INTO app.b VALUES (10, 'ten', '2024-01-02 03:04:05.678');
    INSERT INTO app.gone VALUES (1);";

/// DML across tables in one transaction and DDL between them.
fn traffic(up: &MariaDb) {
    for r in 0..8 {
        up.exec(&format!(
            "BEGIN;
             INSERT INTO app.a (id, v, n) VALUES ({a}, 'r{r}', {r}) ON DUPLICATE KEY UPDATE n = n + 100;
             UPDATE app.a SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 3 = {m};
             INSERT INTO app.b VALUES ({b}, 'b{r}', NOW(3));
             DELETE FROM app.b WHERE id = {d};
             UPDATE app.b SET s = 'moved', id = id + 1000 WHERE id = {mv};
             COMMIT;",
            a = 10 + r,
            m = r % 3,
            b = 100 + r,
            d = 99 + r,
            mv = 10 + r * 10,
        ))
        .expect("traffic round");
        match r {
            2 => up.exec("ALTER TABLE app.a ADD COLUMN note VARCHAR(16) DEFAULT 'x'; UPDATE app.a SET note = CONCAT('n', id) WHERE id < 5;"),
            3 => up.exec("CREATE TABLE app.c (k VARCHAR(8) PRIMARY KEY, v INT); INSERT INTO app.c VALUES ('a', 1), ('b', 2); UPDATE app.c SET v = 20 WHERE k = 'b';"),
            4 => up.exec("TRUNCATE TABLE app.b; INSERT INTO app.b VALUES (1, 'after truncate', NOW(3));"),
            5 => up.exec("RENAME TABLE app.c TO app.c2; INSERT INTO app.c2 VALUES ('c', 3); DELETE FROM app.c2 WHERE k = 'a';"),
            6 => up.exec("DROP TABLE app.gone; ALTER TABLE app.a DROP COLUMN note;"),
            _ => Ok(()),
        }
        .expect("ddl round");
    }
}

fn wait_metadata(dir: &Path, target: u64) {
    wait_for("the storage metadata file", 30, || {
        let m = std::fs::read_to_string(dir.join("metadata")).map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&m).map_err(|e| e.to_string())?;
        if v["checkpoint-ts"].as_u64().unwrap_or(0) >= target {
            Ok(())
        } else {
            Err(m)
        }
    });
}

#[test]
fn readme_layouts_without_commit_ts_consume_into_an_equal_downstream() {
    let out = Outputs::default();
    let dir = tmpdir("layouts");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec(SEED).expect("seed upstream");
    let server = Server::start(&dir, &up_url);
    // Small files, so a table version spans several of them.
    let layouts = [("canal", "protocol=canal-json"), ("csv", "protocol=csv")];
    let mut sinks = Vec::new();
    for (name, params) in layouts {
        let out_dir = dir.join(name);
        let uri = format!(
            "file://{}?{params}&file-size=1024&flush-interval=200ms",
            out_dir.display()
        );
        create_changefeed(&out, &server.url(), name, &uri);
        sinks.push((name, out_dir, uri));
    }
    traffic(&up);
    workload(&up, "shop", 0, 12);
    let target = master_ts(&up);
    for (name, out_dir, _) in &sinks {
        wait_checkpoint(&out, &server.url(), name, target, 120);
        wait_metadata(out_dir, target);
    }
    for (name, _, uri) in &sinks {
        let (down, down_url) = mariadb_with_user(DOWN_PASS);
        down.exec(SEED).expect("seed downstream");
        let r = sluice(
            &out,
            &[
                "consume",
                "--storage",
                uri,
                "--downstream",
                &format!("{down_url}/"),
            ],
        );
        assert_eq!(r.code, 0, "consume {name}: {} {}", r.stdout, r.stderr);
        let cp = r.stdout.split("checkpoint ").nth(1).unwrap_or("").trim();
        assert!(
            cp.parse::<u64>().is_ok_and(|c| c >= target),
            "{name}: the checkpoint is not printed as a number: {}",
            r.stdout
        );
        let r = check(&out, &up_url, &down_url, "app.*,shop.*");
        assert_eq!(r.code, 0, "check {name}: {} {}", r.stdout, r.stderr);
        for t in [
            "app.a",
            "app.b",
            "app.c2",
            "shop.accounts",
            "shop.events",
            "shop.late_6",
        ] {
            assert!(
                r.stdout.contains(&format!("{t}: equal")),
                "{name}: {t} not compared equal: {}",
                r.stdout
            );
        }
        let gone = down.query("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'app' AND table_name IN ('gone', 'c')").expect("query");
        assert_eq!(
            gone[0][0], "0",
            "{name}: a dropped or renamed table is still downstream"
        );
    }
    out.assert_no_secret(&[&server.log]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Makes `dir` refuse new files even for root (`chattr +i`), and checks that it does.
fn refuse_writes(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dir");
    let st = std::process::Command::new("chmod")
        .arg("0555")
        .arg(dir)
        .status()
        .expect("chmod");
    assert!(st.success());
    let _ = std::process::Command::new("chattr")
        .arg("+i")
        .arg(dir)
        .status();
    assert!(
        std::fs::write(dir.join("try"), b"x").is_err(),
        "cannot make {} unwritable here (chattr +i needs CAP_LINUX_IMMUTABLE as root)",
        dir.display()
    );
}

fn allow_writes(dir: &Path) {
    let _ = std::process::Command::new("chattr")
        .arg("-i")
        .arg(dir)
        .status();
    let _ = std::process::Command::new("chmod")
        .arg("0755")
        .arg(dir)
        .status();
}

#[test]
fn unusable_storage_is_refused_at_create_and_nothing_is_created() {
    let out = Outputs::default();
    let dir = tmpdir("storage-create");
    let (_up, up_url) = mariadb_with_user(UP_PASS);
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    let moto = sluice_testkit::moto::Moto::start("sluice-create").expect("moto");
    let checking = sluice_testkit::moto::Moto::start_checking_credentials("sluice-create")
        .expect("moto checking credentials");
    let closed = free_port();
    let locked = dir.join("locked");
    refuse_writes(&locked);
    let cases = [
        (
            "no-listener",
            moto.sink_uri("p")
                .replace(&moto.endpoint(), &format!("http://127.0.0.1:{closed}")),
            format!("127.0.0.1:{closed}"),
        ),
        (
            "no-bucket",
            moto.sink_uri("p")
                .replace("s3://sluice-create/", "s3://no-such-bucket/"),
            "no-such-bucket".to_string(),
        ),
        (
            "wrong-credentials",
            checking.sink_uri("p"),
            "check the sink URI's access-key and secret-access-key".to_string(),
        ),
        (
            "locked",
            format!("file://{}?protocol=csv", locked.display()),
            locked.display().to_string(),
        ),
    ];
    for (id, uri, needle) in &cases {
        let started = std::time::Instant::now();
        let r = sluice(
            &out,
            &[
                "cli",
                "--server",
                &s,
                "changefeed",
                "create",
                "-c",
                id,
                "--sink-uri",
                uri,
            ],
        );
        assert_eq!(r.code, 1, "{id}: {} {}", r.stdout, r.stderr);
        for part in ["CDC:ErrSinkURIInvalid", "test object", needle.as_str()] {
            assert!(
                r.stderr.contains(part),
                "{id}: {part} missing: {}",
                r.stderr
            );
        }
        eprintln!(
            "{id} refused after {:?}: {}",
            started.elapsed(),
            r.stderr.trim()
        );
    }
    let (st, v) = api(&out, &s, "GET", "/api/v2/changefeeds", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["items"].as_array().map(Vec::len),
        Some(0),
        "a refused create left a changefeed: {v}"
    );
    allow_writes(&locked);
    assert_eq!(
        std::fs::read_dir(&locked).expect("read dir").count(),
        0,
        "a refused create wrote into the directory"
    );
    // Usable locations are accepted, and the check leaves nothing behind.
    let fine = dir.join("fine");
    for (id, uri) in [
        ("s3-ok", moto.sink_uri("ok")),
        ("file-ok", format!("file://{}?protocol=csv", fine.display())),
    ] {
        create_changefeed(&out, &s, id, &uri);
    }
    let left: Vec<String> = std::fs::read_dir(&fine)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !left.iter().any(|n| n.starts_with("sluice-probe")),
        "the create check left its test object: {left:?}"
    );
    out.assert_no_secret(&[&server.log]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
