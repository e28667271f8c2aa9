//! The shared sink contract suite run against every sink this crate has (the MySQL sink's run is
//! in tests/mysql.rs, next to its server).

use sluice_sink::testing::run_contract_suite;
use sluice_sink::{open_sink, DdlRecord, Sink};

/// The suite's DDL at 40 is on record downstream: a new sink on the same location reads it
/// (it is the downstream's state, not the writer's memory).
async fn records_the_ddl(uri: &str) {
    let fresh = open_sink(uri).await.expect("reopen");
    let all = fresh.applied_ddls(0).await.expect("applied ddls");
    let ddl = DdlRecord {
        commit_ts: 40,
        finished: true,
    };
    assert!(all.contains(&ddl), "{all:?}");
    assert!(fresh.applied_ddls(40).await.expect("above 40").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_keeps_the_contract() {
    let sink = open_sink("blackhole://").await.expect("blackhole");
    run_contract_suite(
        sink.as_ref(),
        "db",
        "t",
        1,
        "ALTER TABLE t ADD COLUMN x INT",
    )
    .await;
    // Nothing reaches a downstream: nothing is on record.
    assert!(sink.applied_ddls(0).await.expect("applied").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_storage_csv_keeps_the_contract() {
    let dir = tempdir("contract-csv");
    let uri = format!("file://{}?protocol=csv", dir.display());
    let sink = open_sink(&uri).await.expect("sink");
    run_contract_suite(
        sink.as_ref(),
        "db",
        "t",
        1,
        "ALTER TABLE t ADD COLUMN x INT",
    )
    .await;
    records_the_ddl(&uri).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_storage_canal_json_keeps_the_contract() {
    let dir = tempdir("contract-json");
    let sink = open_sink(&format!(
        "file://{}?protocol=canal-json&enable-tidb-extension=true",
        dir.display()
    ))
    .await
    .expect("sink");
    run_contract_suite(
        sink.as_ref(),
        "db",
        "t",
        1,
        "ALTER TABLE t ADD COLUMN x INT",
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_storage_keeps_the_contract() {
    let moto = sluice_testkit::moto::Moto::start("sluice-contract").expect("moto");
    let uri = moto.sink_uri("cf1");
    let sink: std::sync::Arc<dyn Sink> = open_sink(&uri).await.expect("sink");
    run_contract_suite(
        sink.as_ref(),
        "db",
        "t",
        1,
        "ALTER TABLE t ADD COLUMN x INT",
    )
    .await;
    records_the_ddl(&uri).await;
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-sink-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_through_open_sink_keeps_the_contract() {
    let db = sluice_testkit::mariadb::MariaDb::start().expect("mariadb");
    db.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("ddl");
    let sink = open_sink(&format!(
        "{}/?worker-count=2&max-txn-row=2&transaction-atomicity=table",
        db.url()
    ))
    .await
    .expect("sink");
    run_contract_suite(sink.as_ref(), "d", "t", 1, "ALTER TABLE t ADD COLUMN x INT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_sink_refuses_bad_uris_fatally_and_masks_secrets() {
    for (uri, needle) in [
        ("pulsar://broker/topic", "unknown scheme"),
        ("kafka://broker:9092/topic", "protocol"),
        (
            "kafka://broker:9092/topic?protocol=canal-json&sasl-mechanism=GSSAPI&sasl-user=u&sasl-password=PASSWORDVALUE",
            "not supported yet",
        ),
        (
            "kafka://broker:9092/topic?protocol=canal-json&sasl-mechanism=md5&sasl-user=u&sasl-password=PASSWORDVALUE",
            "sasl-mechanism",
        ),
        ("s3:///p?secret-access-key=SECRETVALUE", "missing bucket"),
        ("file:///tmp/x?file-size=1", "file-size=1"),
        (
            "mysql://root:PASSWORDVALUE@127.0.0.1:1/?safe-mode=maybe",
            "safe-mode=maybe",
        ),
    ] {
        let e = match open_sink(uri).await {
            Ok(_) => panic!("{uri} accepted"),
            Err(e) => e,
        };
        assert!(!e.is_retryable(), "{e}");
        let shown = format!("{e} {e:?}");
        assert!(shown.contains(needle), "{shown}");
        assert!(
            !shown.contains("SECRETVALUE") && !shown.contains("PASSWORDVALUE"),
            "{shown}"
        );
    }
}
