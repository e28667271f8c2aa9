//! The upstream check against real MariaDB servers started with wrong settings.

use sluice_capture::{check_upstream, CaptureError};
use sluice_testkit::mariadb::{BinlogMode, MariaDb, Options};

fn settings(e: CaptureError) -> Vec<String> {
    match e {
        CaptureError::Upstream(p) => p.into_iter().map(|p| p.setting).collect(),
        other => panic!("expected an upstream error, got {other}"),
    }
}

#[tokio::test]
async fn good_upstream_passes() {
    let db = MariaDb::start().expect("mariadb");
    let info = check_upstream(&db.url()).await.expect("check");
    assert!(info.is_mariadb);
    assert_eq!(info.checksum, "CRC32");
}

#[tokio::test]
async fn binlog_off_is_reported_with_a_fix() {
    let db = MariaDb::start_with(Options {
        binlog: BinlogMode::Off,
        ..Options::default()
    })
    .expect("mariadb");
    let e = check_upstream(&db.url()).await.expect_err("must fail");
    let msg = e.to_string();
    assert!(msg.contains("log_bin is OFF but Sluice needs ON"), "{msg}");
    assert!(msg.contains("add log_bin=mysql-bin"), "{msg}");
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn statement_format_and_minimal_image_are_reported_and_compression_is_not() {
    let db = MariaDb::start_with(Options {
        binlog: BinlogMode::Statement,
        row_image: "MINIMAL".into(),
        row_metadata: "MINIMAL".into(),
        compress: true,
        ..Options::default()
    })
    .expect("mariadb");
    let e = check_upstream(&db.url()).await.expect_err("must fail");
    let msg = e.to_string();
    assert_eq!(
        settings(e),
        vec!["binlog_format", "binlog_row_image", "binlog_row_metadata",]
    );
    assert!(
        msg.contains(
            "binlog_format is STATEMENT but Sluice needs ROW; fix: SET GLOBAL binlog_format=ROW"
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn missing_replication_privileges_are_named() {
    let db = MariaDb::start().expect("mariadb");
    db.exec("CREATE USER 'cdc'@'127.0.0.1'; GRANT SELECT ON *.* TO 'cdc'@'127.0.0.1'")
        .expect("user");
    let url = format!("mysql://cdc@127.0.0.1:{}", db.port());
    let e = check_upstream(&url).await.expect_err("must fail");
    let msg = e.to_string();
    assert!(
        msg.contains("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc'@'127.0.0.1'"),
        "{msg}"
    );
    db.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc'@'127.0.0.1'")
        .expect("grant");
    check_upstream(&url).await.expect("passes after the grant");
}
